//! Where a function is left: its `ret` instructions and tail-call jumps, found by decoding its
//! machine code (x86-64, with iced-x86). Exits probed there replace the return probe for functions
//! an exception (or a Rust panic) can unwind through: a return probe swaps the return address on
//! the stack for the kernel's trampoline, which has no unwind information, so the unwinder stops
//! there and the runtime aborts the process.
use std::os::unix::fs::FileExt;

use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind};
use xtrace_common::event::{EXIT_RETURN, EXIT_TAIL_CALL};

use super::elf::{ElfSymbols, FunctionSymbol};

/// How `-u` functions' returns are probed (`--exits`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ExitMode {
    /// At their own exit instructions where an exception can unwind through them (files with
    /// exception tables, functions that call others); with return probes elsewhere.
    #[default]
    Auto,
    /// With return probes (uretprobes) everywhere: cheapest, but an exception unwinding through a
    /// traced function aborts the process.
    Uretprobe,
    /// At their own exit instructions everywhere they can be found.
    Ret,
}

/// One probe on a function's way out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitSite {
    /// File offset of the instruction.
    pub offset: u64,
    /// How the function leaves there: `EXIT_RETURN` or `EXIT_TAIL_CALL`.
    pub how: u16,
}

/// What decoding a function found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Exits {
    pub sites: Vec<ExitSite>,
    /// An exit instruction the kernel's uprobes refuse (`probes::insn`): the function needs a
    /// return probe.
    pub refused: bool,
    /// The function calls or jumps elsewhere, so an exception can unwind through it.
    pub calls_out: bool,
    /// A direct jump leaves the function for code that is no known function entry (a stripped
    /// file's unnamed function, or cold part) or is conditional, or a jump goes through a register
    /// or memory: the function may leave there, unseen, so its exits found are not all of them.
    pub unseen_exit: bool,
}

/// The most code decoded per function (and per cold part).
const MAX_CODE: u64 = 1 << 20;

/// What a jump outside the function lands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Landing {
    /// A function's entry or a PLT stub: the jump is a tail call.
    Function,
    /// The cold part (`f.cold`) at this index of [`ElfSymbols::cold_parts`]: still this function.
    Cold(usize),
    /// Anything else: not followed, not an exit.
    Unknown,
}

/// A run of machine code: its address, file offset and bytes.
pub(crate) struct Code<'a> {
    pub address: u64,
    pub file_offset: u64,
    pub bytes: &'a [u8],
}

/// The exits of `function` in `file` (whose symbols are `symbols`); None when its size is unknown.
pub fn find(
    file: &std::fs::File,
    symbols: &ElfSymbols,
    function: &FunctionSymbol,
) -> std::io::Result<Option<Exits>> {
    if function.size == 0 {
        return Ok(None);
    }
    let read = |file_offset: u64, size: u64| -> std::io::Result<Vec<u8>> {
        let mut bytes = vec![0; size.min(MAX_CODE) as usize];
        file.read_exact_at(&mut bytes, file_offset)?;
        Ok(bytes)
    };
    let mut exits = Exits::default();
    let mut parts = vec![(function.address, function.file_offset, function.size)];
    let mut i = 0;
    while i < parts.len() {
        let (address, file_offset, size) = parts[i];
        let bytes = read(file_offset, size)?;
        let code = Code {
            address,
            file_offset,
            bytes: &bytes,
        };
        let inside = |target: u64| parts.iter().any(|(a, _, s)| target >= *a && target < a + s);
        let mut cold = Vec::new();
        scan(
            &code,
            &inside,
            &|target| symbols.landing(target),
            &mut exits,
            &mut cold,
        );
        for index in cold {
            let part = &symbols.cold_parts[index];
            let entry = (part.address, part.file_offset, part.size);
            if part.size > 0 && !parts.contains(&entry) {
                parts.push(entry);
            }
        }
        i += 1;
    }
    exits.sites.sort_by_key(|s| s.offset);
    exits.sites.dedup();
    Ok(Some(exits))
}

/// Decodes `code`, adding its exits to `exits` and the cold parts it jumps to to `cold`. `inside`
/// tells whether an address is in the function (any of its parts), `landing` what an address
/// outside it is.
pub(crate) fn scan(
    code: &Code,
    inside: &dyn Fn(u64) -> bool,
    landing: &dyn Fn(u64) -> Landing,
    exits: &mut Exits,
    cold: &mut Vec<usize>,
) {
    let mut decoder = Decoder::with_ip(64, code.bytes, code.address, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() {
            continue;
        }
        if let Some(how) = exit_of(&instruction, inside, landing, exits, cold) {
            let at = (instruction.ip() - code.address) as usize;
            let bytes = &code.bytes[at..at + instruction.len()];
            exits.refused |= super::insn::why_refused(&instruction, bytes).is_some();
            exits.sites.push(ExitSite {
                offset: instruction.ip() - code.address + code.file_offset,
                how,
            });
        }
    }
}

/// How `instruction` leaves the function, if it does; notes calls and cold parts on the way.
fn exit_of(
    instruction: &Instruction,
    inside: &dyn Fn(u64) -> bool,
    landing: &dyn Fn(u64) -> Landing,
    exits: &mut Exits,
    cold: &mut Vec<usize>,
) -> Option<u16> {
    let jmp = match instruction.mnemonic() {
        Mnemonic::Ret => return Some(EXIT_RETURN),
        Mnemonic::Call => {
            exits.calls_out = true;
            return None;
        }
        mnemonic => mnemonic == Mnemonic::Jmp,
    };
    if instruction.op0_kind() == OpKind::NearBranch64 {
        // A `jmp`, or a conditional branch (jcc, loop, jrcxz).
        let target = instruction.near_branch_target();
        if inside(target) {
            return None;
        }
        match landing(target) {
            Landing::Cold(index) => cold.push(index),
            Landing::Function if jmp => {
                exits.calls_out = true;
                return Some(EXIT_TAIL_CALL);
            }
            // A conditional tail call is not probed (the probe would fire either way).
            Landing::Function | Landing::Unknown => {
                exits.calls_out = true;
                exits.unseen_exit = true;
            }
        }
    } else if jmp {
        exits.calls_out = true;
        // `jmp *f@GOTPCREL(%rip)`: a tail call through the GOT (-fno-plt). A jump through a
        // register or memory (a jump table, or a tail call through a pointer: a C++ virtual call
        // wrapper is `jmp *(%rax)`) is not told apart: not probed, but the function may leave there.
        if instruction.is_ip_rel_memory_operand() {
            return Some(EXIT_TAIL_CALL);
        }
        exits.unseen_exit = true;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scans `bytes` at 0x1000 (file offset 0x100), a function of that length; jumps land on a
    /// function at 0x2000, a cold part at 0x3000, anything else unknown.
    fn exits_of(bytes: &[u8]) -> (Exits, Vec<usize>) {
        let code = Code {
            address: 0x1000,
            file_offset: 0x100,
            bytes,
        };
        let end = 0x1000 + bytes.len() as u64;
        let mut exits = Exits::default();
        let mut cold = Vec::new();
        let landing = |target| match target {
            0x2000 => Landing::Function,
            0x3000 => Landing::Cold(0),
            _ => Landing::Unknown,
        };
        scan(
            &code,
            &|t| (0x1000..end).contains(&t),
            &landing,
            &mut exits,
            &mut cold,
        );
        (exits, cold)
    }

    fn site(offset: u64, how: u16) -> ExitSite {
        ExitSite { offset, how }
    }

    #[test]
    fn a_leaf_returns_at_its_rets() {
        // lea 0x1(%rdi),%eax; test %edi,%edi; je +1; ret; rep ret; ret $8
        let (exits, cold) = exits_of(&[
            0x8d, 0x47, 0x01, 0x85, 0xff, 0x74, 0x01, 0xc3, 0xf3, 0xc3, 0xc2, 0x08, 0x00,
        ]);
        assert_eq!(
            exits.sites,
            [
                site(0x107, EXIT_RETURN),
                site(0x108, EXIT_RETURN),
                site(0x10a, EXIT_RETURN)
            ]
        );
        assert!(!exits.calls_out);
        assert!(cold.is_empty());
    }

    #[test]
    fn a_jump_to_a_function_is_a_tail_call_and_a_jump_to_its_cold_part_is_not() {
        // push %rbx; call 0x2000; pop %rbx; jne 0x3000 (cold); jmp 0x2000 (tail call)
        let mut code = vec![0x53, 0xe8];
        code.extend((0x2000i32 - 0x1006).to_le_bytes());
        code.extend([0x5b, 0x0f, 0x85]);
        code.extend((0x3000i32 - 0x100d).to_le_bytes());
        code.push(0xe9);
        code.extend((0x2000i32 - 0x1012).to_le_bytes());
        let (exits, cold) = exits_of(&code);
        assert_eq!(exits.sites, [site(0x10d, EXIT_TAIL_CALL)]);
        assert!(exits.calls_out);
        assert_eq!(cold, [0]);
    }

    #[test]
    fn exits_the_kernel_refuses_are_flagged() {
        // ret: probed.
        assert!(!exits_of(&[0xc3]).0.refused);
        // cs jmp 0x2000 (a tail call with a segment-override prefix): the kernel refuses it.
        let mut code = vec![0x2e, 0xe9];
        code.extend((0x2000i32 - 0x1006).to_le_bytes());
        let (exits, _) = exits_of(&code);
        assert_eq!(exits.sites, [site(0x100, EXIT_TAIL_CALL)]);
        assert!(exits.refused);
    }

    #[test]
    fn got_jumps_are_tail_calls_and_register_jumps_are_not_exits() {
        // jmp *0x10(%rip); jmp *%rax; notrack jmp *(%rdx,%rax,8)
        let (exits, _) = exits_of(&[0xff, 0x25, 0x10, 0, 0, 0, 0xff, 0xe0, 0x3e, 0xff, 0x24, 0xc2]);
        assert_eq!(exits.sites, [site(0x100, EXIT_TAIL_CALL)]);
        assert!(exits.calls_out);
    }

    #[test]
    fn jumps_inside_the_function_and_to_unknown_places_are_not_exits() {
        // jmp +0 (inside); jmp 0x5000 (unknown); ret
        let mut code = vec![0xeb, 0x00, 0xe9];
        code.extend((0x5000i32 - 0x1007).to_le_bytes());
        code.push(0xc3);
        let (exits, _) = exits_of(&code);
        assert_eq!(exits.sites, [site(0x107, EXIT_RETURN)]);
        assert!(exits.calls_out);
        assert!(exits.unseen_exit, "it may leave through the unknown code");
        let (exits, _) = exits_of(&[0xeb, 0x00, 0xc3]);
        assert!(!exits.unseen_exit && !exits.calls_out);
    }

    #[test]
    fn finds_the_rets_of_own_code() {
        let exe = std::env::current_exe().unwrap();
        let symbols = ElfSymbols::read(&exe, &exe, &Default::default()).unwrap();
        let function = symbols
            .find("xtrace_exits_test_leaf")
            .unwrap()
            .into_iter()
            .next()
            .unwrap();
        std::hint::black_box(xtrace_exits_test_leaf(3));
        let exits = find(&std::fs::File::open(&exe).unwrap(), &symbols, function)
            .unwrap()
            .unwrap();
        assert!(!exits.sites.is_empty());
        let data = std::fs::read(&exe).unwrap();
        for s in &exits.sites {
            assert_eq!(s.how, EXIT_RETURN);
            assert!(
                matches!(data[s.offset as usize], 0xc3 | 0xc2 | 0xf3 | 0xf2),
                "{s:?}"
            );
        }
    }

    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn xtrace_exits_test_leaf(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3)
    }
}
