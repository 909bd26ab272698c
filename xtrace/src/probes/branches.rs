//! Where a file's code can jump to: every direct branch and call of its executable sections, and
//! the code addresses its instructions compute, decoded once per file, and the places of its
//! indirect jumps. [`super::entry`] moves an entry probe past a function's first instructions only
//! where nothing can land on them.
use std::os::unix::fs::FileExt;

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind};

use super::{
    elf::{CodeRange, ElfSymbols, FunctionSymbol},
    entry::Candidate,
    exits::Landing,
    insn::MAX_INSN,
};

/// The most executable code decoded per file for its branch targets (~2 s here); a larger file keeps
/// its entry probes on the functions' first instructions.
const MAX_SWEEP: u64 = 256 << 20;

/// The code read at a time for the branch sweep.
const SWEEP_CHUNK: u64 = 1 << 20;

/// The most code of a function decoded for its indirect jumps; a larger one keeps its entry.
const MAX_FUNCTION: u64 = 1 << 20;

/// The places a file's code can jump to, one bit per byte of each executable section, and the
/// places of its indirect jumps, sorted: the direct branch and call targets, and the code
/// addresses its instructions compute (a RIP-relative `lea`, an immediate), which a later
/// indirect jump or call could use.
#[derive(Debug, Default)]
pub struct Branches {
    /// Per executable section, by address: where it starts and ends, and its bits.
    sections: Vec<(u64, u64, Vec<u64>)>,
    /// Indirect jumps other than through a RIP-relative slot (a GOT entry: a tail call).
    indirect: Vec<u64>,
}

impl Branches {
    /// No branch yet, over the sections `code`.
    fn over(code: &[CodeRange]) -> Self {
        let mut sections: Vec<(u64, u64, Vec<u64>)> = code
            .iter()
            .map(|c| {
                (
                    c.address,
                    c.address + c.size,
                    vec![0; (c.size as usize).div_ceil(64)],
                )
            })
            .collect();
        sections.sort_by_key(|s| s.0);
        Branches {
            sections,
            indirect: Vec::new(),
        }
    }

    /// The section holding `address`, and the address's bit in it.
    fn bit(&self, address: u64) -> Option<(usize, u64)> {
        let i = self.sections.partition_point(|s| s.0 <= address).checked_sub(1)?;
        let (start, end, _) = &self.sections[i];
        (address < *end).then_some((i, address - start))
    }

    /// Marks `target`; one outside the code (another file's, through its PLT) cannot land in it.
    fn mark(&mut self, target: u64) {
        if let Some((i, bit)) = self.bit(target) {
            self.sections[i].2[(bit / 64) as usize] |= 1 << (bit % 64);
        }
    }

    /// Whether something can land on an address in `start..=end`; None when those addresses are
    /// not all in one swept section.
    pub(super) fn lands_in(&self, start: u64, end: u64) -> Option<bool> {
        let (i, first) = self.bit(start)?;
        if self.bit(end)?.0 != i {
            return None;
        }
        let bits = &self.sections[i].2;
        Some((first..=first + (end - start)).any(|bit| bits[(bit / 64) as usize] & (1 << (bit % 64)) != 0))
    }

    pub fn sweep(file: &std::fs::File, code: &[CodeRange]) -> std::io::Result<Option<Self>> {
        if code.iter().fold(0u64, |sum, c| sum.saturating_add(c.size)) > MAX_SWEEP {
            return Ok(None);
        }
        let mut branches = Branches::over(code);
        let mut bytes = Vec::new();
        for range in code {
            // A chunk at a time, each read with the longest instruction's bytes past its end, so
            // an instruction that starts in it decodes whole.
            let mut done = 0;
            while done < range.size {
                let len = (range.size - done).min(SWEEP_CHUNK + MAX_INSN as u64);
                bytes.resize(len as usize, 0);
                if !read_whole(file, &mut bytes, range.file_offset + done)? {
                    return Ok(None); // a section past the end of the file: nothing is moved
                }
                let until = if done + len == range.size {
                    len
                } else {
                    SWEEP_CHUNK
                };
                done += branches.add(&bytes, range.address + done, until as usize) as u64;
            }
        }
        branches.indirect.sort_unstable();
        Ok(Some(branches))
    }

    /// Adds the branches of the instructions of `bytes` (the code at `address`) that start
    /// before byte `until`, and returns where the next one starts.
    fn add(&mut self, bytes: &[u8], address: u64, until: usize) -> usize {
        let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
        let mut insn = Instruction::default();
        while decoder.can_decode() && decoder.position() < until {
            decoder.decode_out(&mut insn);
            match insn.flow_control() {
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch | FlowControl::Call
                    if insn.near_branch_target() != 0 =>
                {
                    self.mark(insn.near_branch_target())
                }
                FlowControl::IndirectBranch if !insn.is_ip_rel_memory_operand() => {
                    self.indirect.push(insn.ip())
                }
                _ => {}
            }
            if insn.mnemonic() == Mnemonic::Lea && insn.is_ip_rel_memory_operand() {
                self.mark(insn.ip_rel_memory_address());
            }
            for i in 0..insn.op_count() {
                if matches!(
                    insn.op_kind(i),
                    OpKind::Immediate32 | OpKind::Immediate32to64 | OpKind::Immediate64
                ) {
                    self.mark(insn.immediate(i));
                }
            }
        }
        decoder.position()
    }

    /// Whether the entry probe of `function` (in `code`, whose symbols are `symbols`) may move to
    /// `candidate`: nothing lands on the instructions moved past or on the candidate (no branch,
    /// no other symbol), and no indirect jump of the function, or of code outside it that it jumps
    /// to (a cold part, or unknown code up to the next function), could.
    pub fn allows(
        &self,
        code: &std::fs::File,
        symbols: &ElfSymbols,
        function: &FunctionSymbol,
        candidate: &Candidate,
    ) -> std::io::Result<bool> {
        let moved_past = function.address + 1..=candidate.address;
        if self.lands_in(*moved_past.start(), *moved_past.end()) != Some(false)
            || symbols.starts_in(*moved_past.start(), *moved_past.end())
            || function.size > MAX_FUNCTION
        {
            return Ok(false);
        }
        let mut bytes = vec![0; function.size as usize];
        if !read_whole(code, &mut bytes, function.file_offset)? {
            return Ok(false);
        }
        let end = function.address + function.size;
        let mut decoder = Decoder::with_ip(64, &bytes, function.address, DecoderOptions::NONE);
        let mut insn = Instruction::default();
        while decoder.can_decode() {
            decoder.decode_out(&mut insn);
            let target = insn.near_branch_target();
            let outside = match insn.flow_control() {
                FlowControl::IndirectBranch if !insn.is_ip_rel_memory_operand() => return Ok(false),
                // Also decoded here, from the function's own start: a sweep of the whole section
                // can lose its place in data between functions.
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch | FlowControl::Call
                    if moved_past.contains(&target) =>
                {
                    return Ok(false)
                }
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                    !(function.address..end).contains(&target)
                }
                _ => false,
            };
            if !outside {
                continue;
            }
            let (from, to) = match symbols.landing(target) {
                Landing::Function => continue,
                Landing::Cold(i) => {
                    let cold = &symbols.cold_parts[i];
                    (cold.address, cold.address.saturating_add(cold.size))
                }
                // A cold part or local function a stripped file does not name: up to the next
                // function it does, at most 64 KiB.
                Landing::Unknown => (
                    target,
                    symbols.next_start(target).min(target.saturating_add(64 << 10)),
                ),
            };
            if from == to || self.indirect_in(from, to) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn indirect_in(&self, start: u64, end: u64) -> bool {
        let i = self.indirect.partition_point(|&a| a < start);
        self.indirect.get(i).is_some_and(|&a| a < end)
    }
}

/// Whether a direct jump or call of `function`'s own code (in `code`) goes to `target`; None when
/// its code is unknown (unsized, past 1 MiB, or past the end of the file). For a function the
/// file's sweep does not cover: a loop back to its second instruction is in its own code.
pub fn function_branches_to(
    code: &std::fs::File,
    function: &FunctionSymbol,
    target: u64,
) -> std::io::Result<Option<bool>> {
    if function.size == 0 || function.size > MAX_FUNCTION {
        return Ok(None);
    }
    let mut bytes = vec![0; function.size as usize];
    if !read_whole(code, &mut bytes, function.file_offset)? {
        return Ok(None);
    }
    let mut decoder = Decoder::with_ip(64, &bytes, function.address, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut insn);
        if matches!(
            insn.flow_control(),
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch | FlowControl::Call
        ) && insn.near_branch_target() == target
        {
            return Ok(Some(true));
        }
    }
    Ok(Some(false))
}

/// Fills `bytes` from `file` at `offset`; false when the file ends first.
pub(super) fn read_whole(file: &std::fs::File, bytes: &mut [u8], offset: u64) -> std::io::Result<bool> {
    match file.read_exact_at(bytes, offset) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: u64 = 0x1000;

    #[test]
    fn branches_into_the_moved_past_instructions_are_found() {
        // 0x1000: xor %eax,%eax; 0x1002: add $1,%rax; cmp %rdi,%rax; jb 0x1002; ret
        let code = [
            0x31, 0xc0, 0x48, 0x83, 0xc0, 0x01, 0x48, 0x39, 0xf8, 0x72, 0xf7, 0xc3,
        ];
        let sections = [
            CodeRange {
                address: START,
                size: 0x100,
                file_offset: 0,
            },
            CodeRange {
                address: 0x2000,
                size: 0x100,
                file_offset: 0x100,
            },
        ];
        let mut branches = Branches::over(&sections);
        assert_eq!(branches.add(&code, START, code.len()), code.len());
        let marked = |b: &Branches| {
            (START..0x2100)
                .filter(|&a| b.lands_in(a, a) == Some(true))
                .collect::<Vec<_>>()
        };
        assert_eq!(marked(&branches), [0x1002]);
        assert_eq!(branches.lands_in(START + 1, START + 9), Some(true));
        assert_eq!(branches.lands_in(START + 3, START + 9), Some(false));
        // Outside the code, or across two sections: unknown.
        assert_eq!(branches.lands_in(0x1200, 0x1201), None);
        assert_eq!(branches.lands_in(0x10f0, 0x2001), None);
        // jmp *%rcx; jmp *0x10(%rip); lea -0x100b(%rip),%rax (0x1004); mov $0x1003,%eax
        let more = [
            &[0xff, 0xe1, 0xff, 0x25, 0x10, 0, 0, 0][..],
            &[0x48, 0x8d, 0x05, 0xf5, 0xef, 0xff, 0xff],
            &[0xb8, 0x03, 0x10, 0, 0],
        ]
        .concat();
        branches.add(&more, 0x2000, more.len());
        assert_eq!(branches.indirect, [0x2000], "a GOT jump is a tail call");
        assert_eq!(
            marked(&branches),
            [0x1002, 0x1003, 0x1004],
            "computed code addresses count"
        );
        // Decoding stops at the first instruction that starts at or past `until`: the jb.
        let mut first = Branches::over(&sections);
        assert_eq!(first.add(&code, START, 9), 9);
        assert!(marked(&first).is_empty());
    }

    /// A function outside the sweep is read alone: cet_loop's `jg` back to its second
    /// instruction is found; none is in a straight-line function; unsized code is unknown.
    #[test]
    fn a_function_alone_is_searched_for_loops_back() {
        // endbr64; 1: sub $1,%rdi; jg 1b; mov %rdi,%rax; ret
        let cet_loop = [
            &[0xf3, 0x0f, 0x1e, 0xfa][..],
            &[0x48, 0x83, 0xef, 0x01],
            &[0x7f, 0xfa],
            &[0x48, 0x89, 0xf8, 0xc3],
        ]
        .concat();
        // endbr64; lea 1(%rdi),%rax; ret
        let straight = [0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x8d, 0x47, 0x01, 0xc3];
        let path = std::env::temp_dir().join(format!("xtrace-alone-{}", std::process::id()));
        std::fs::write(&path, [&cet_loop[..], &straight[..]].concat()).expect("writing the test code");
        let file = std::fs::File::open(&path).expect("opening it");
        let function = |at: u64, size: usize| FunctionSymbol {
            name: "f".into(),
            demangled: "f".into(),
            file_offset: at,
            address: START + at,
            size: size as u64,
            probe_offset: at + 4,
            returns_twice: false,
            uncalled: false,
            ifunc: Default::default(),
            unit: None,
        };
        let looped = function(0, cet_loop.len());
        let lands = |f: &FunctionSymbol| function_branches_to(&file, f, f.address + 4).expect("read");
        assert_eq!(lands(&looped), Some(true));
        assert_eq!(
            lands(&function(cet_loop.len() as u64, straight.len())),
            Some(false)
        );
        assert_eq!(lands(&function(0, 0)), None, "unsized");
        assert_eq!(
            lands(&function(cet_loop.len() as u64, 64)),
            None,
            "past the end of the file"
        );
        std::fs::remove_file(&path).expect("removing it");
    }

    #[test]
    fn the_sweep_decodes_instructions_across_its_chunks() {
        // 5-byte `jmp` to the next instruction, 300,000 times: the one at 1,048,575 straddles the
        // first chunk's end.
        let n = 300_000u64;
        let code: Vec<u8> = (0..n).flat_map(|_| [0xe9, 0, 0, 0, 0]).collect();
        let path = std::env::temp_dir().join(format!("xtrace-sweep-{}", std::process::id()));
        std::fs::write(&path, &code).expect("writing the test code");
        let file = std::fs::File::open(&path).expect("opening it");
        let range = CodeRange {
            address: START,
            size: code.len() as u64,
            file_offset: 0,
        };
        let branches = Branches::sweep(&file, &[range])
            .expect("read")
            .expect("small enough");
        std::fs::remove_file(&path).expect("removing it");
        // Every instruction's end but the last (the end of the code) is a target.
        for i in 0..n {
            let at = START + 5 * i;
            assert_eq!(branches.lands_in(at, at), Some(i > 0), "{at:#x}");
            assert_eq!(branches.lands_in(at + 1, at + 4), Some(false), "{at:#x}");
        }
    }
}
