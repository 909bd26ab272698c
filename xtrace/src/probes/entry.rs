//! Where a function's entry probe goes. The kernel's x86 uprobes emulate a few instructions in the
//! trap handler (canonical `nop`s, `push` of a register, direct `jmp`, `call` and `jcc`: ~0.6 µs a
//! hit on the development VM) and single-step every other one out of line, which costs a second
//! trap (~9 µs a hit there). A function that starts with a single-stepped instruction (`mov`,
//! `lea`, `sub`, `test`, ...: about half of libc's) is probed instead on the first emulated
//! instruction of its straight-line start, when that is provably the same as probing its entry:
//! - every instruction before it runs exactly once per call and falls through: no branch, no
//!   `syscall`, nothing locked, repeated, serializing or otherwise slow (a short list of plain
//!   moves, arithmetic and compares), at most [`MAX_PREFIX`] of them;
//! - none writes the stack pointer or the stack above it, so the stack pointer, the frame and the
//!   return address the return probe replaces are the entry's; none writes a register whose
//!   argument the probe captures;
//! - no code of the file jumps or calls into the instructions moved past or onto the new site
//!   (every direct branch of every executable section is decoded once per file), and neither the
//!   function nor a cold part it jumps to has an indirect jump that could land there;
//! - where returns are probed at the function's exit instructions, the site is not one of them
//!   (a tail call's `jmp`): [`super::uprobe`] keeps the entry there.
//!
//! `perf probe` moves function probes past the prologue too (with debug information), for the
//! arguments; here it is for the cost, and only where nothing a span shows changes but when it
//! starts: a few plain instructions later.
use std::{
    collections::{hash_map::Entry, HashMap},
    os::unix::fs::{FileExt, MetadataExt},
};

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, MemorySize, Mnemonic,
    OpAccess, OpKind, Register,
};

use super::{
    elf::{CodeRange, ElfSymbols, FunctionSymbol},
    exits::Landing,
    insn::MAX_INSN,
};

/// How entry probes of `-u` functions are placed (`--entry`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EntryMode {
    /// On the first instruction the kernel emulates, where the function starts with ones it would
    /// single-step and moving past them changes nothing a span shows.
    #[default]
    Auto,
    /// On the function's first instruction (after a leading `endbr64`), as bpftrace and `perf
    /// probe` without debug information place them.
    Symbol,
}

/// The most instructions an entry probe is moved past.
pub const MAX_PREFIX: usize = 12;

/// The most executable code decoded per file for its branch targets (~2 s here); a larger file keeps
/// its entry probes on the functions' first instructions.
const MAX_SWEEP: u64 = 256 << 20;

/// The code read at a time for the branch sweep.
const SWEEP_CHUNK: u64 = 1 << 20;

/// The most code of a function decoded for its indirect jumps; a larger one keeps its entry.
const MAX_FUNCTION: u64 = 1 << 20;

/// The integer argument registers xtrace reads, in order: the x86-64 System V calling
/// convention's.
const SYSV_ARGS: [Register; 6] = [
    Register::RDI,
    Register::RSI,
    Register::RDX,
    Register::RCX,
    Register::R8,
    Register::R9,
];

/// The same for Go code: the first six of Go's register ABI (ABIInternal).
const GO_ARGS: [Register; 6] = [
    Register::RAX,
    Register::RBX,
    Register::RCX,
    Register::RDI,
    Register::RSI,
    Register::R8,
];

/// Where an entry probe could move: the first emulated instruction of a function's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub address: u64,
    pub file_offset: u64,
}

/// The first emulated instruction `function` (read from `code`) can be probed on instead of its
/// first one, before the branch check ([`Branches::allows`]); None when the first is emulated,
/// the size is unknown, or something on the way disqualifies the move. `arguments` is how many
/// argument registers the probe captures, of Go's register ABI when `go`.
pub fn candidate(
    code: &std::fs::File,
    function: &FunctionSymbol,
    (arguments, go): (usize, bool),
) -> std::io::Result<Option<Candidate>> {
    let skipped = function.probe_offset - function.file_offset;
    if function.size <= skipped {
        return Ok(None);
    }
    let len = (function.size - skipped).min(MAX_INSN as u64 * (MAX_PREFIX as u64 + 1));
    let mut bytes = vec![0; len as usize];
    if !read_whole(code, &mut bytes, function.probe_offset)? {
        return Ok(None); // a symbol past the end of the file
    }
    let start = function.address + skipped;
    let registers = if go { &GO_ARGS } else { &SYSV_ARGS };
    let kept = &registers[..arguments.min(registers.len())];
    Ok(
        find_candidate(&bytes, start, function, kept).map(|(address, _)| Candidate {
            address,
            file_offset: function.probe_offset + (address - start),
        }),
    )
}

/// [`candidate`] on the code at `start` (`bytes`, the function's from its probe offset on): the
/// site's address, and how many instructions it is past the first.
fn find_candidate(
    bytes: &[u8],
    start: u64,
    function: &FunctionSymbol,
    kept: &[Register],
) -> Option<(u64, usize)> {
    let end = function.address + function.size;
    let mut decoder = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    let mut insn = Instruction::default();
    for past in 0..=MAX_PREFIX {
        if !decoder.can_decode() {
            return None;
        }
        decoder.decode_out(&mut insn);
        if insn.is_invalid() || insn.next_ip() > end {
            return None;
        }
        let at = (insn.ip() - start) as usize;
        if emulated(&bytes[at..at + insn.len()]) {
            if past == 0 {
                return None; // already cheap
            }
            return Some((insn.ip(), past));
        }
        if !movable(&insn, &mut info, kept) {
            return None;
        }
    }
    None
}

/// Whether the kernel emulates the instruction `bytes` when it is probed (arch/x86/kernel/uprobes.c:
/// a canonical `nop`, `push` of a register, a direct `jmp`, `call` or `jcc`), as this reads it;
/// prefixed forms are left out. A wrong "no" only keeps a probe where it was.
fn emulated(bytes: &[u8]) -> bool {
    const NOPS: [&[u8]; 7] = [
        &[0x90],
        &[0x66, 0x90],
        &[0x0f, 0x1f, 0x00],
        &[0x0f, 0x1f, 0x40, 0x00],
        &[0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
    ];
    match bytes {
        _ if NOPS.contains(&bytes) => true,
        [0xeb, _] | [0xe9, _, _, _, _] | [0xe8, _, _, _, _] => true,
        [0x70..=0x7f, _] | [0x0f, 0x80..=0x8f, _, _, _, _] => true,
        [0x50..=0x57] | [0x41, 0x50..=0x57] => true,
        _ => false,
    }
}

/// Whether an entry probe may move past `insn`: a plain instruction that falls through, writes
/// neither the stack pointer nor the stack above it, nor a segment or `kept` register.
fn movable(insn: &Instruction, info: &mut InstructionInfoFactory, kept: &[Register]) -> bool {
    if insn.flow_control() != FlowControl::Next
        || insn.has_lock_prefix()
        || insn.has_rep_prefix()
        || insn.has_repne_prefix()
        || !plain(insn.mnemonic())
    {
        return false;
    }
    let info = info.info(insn);
    let written = |access: OpAccess| {
        matches!(
            access,
            OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
        )
    };
    let registers_ok = info.used_registers().iter().all(|used| {
        let full = used.register().full_register();
        !written(used.access())
            || !(full == Register::RSP || used.register().is_segment_register() || kept.contains(&full))
    });
    // A copy of the stack pointer (`mov %rsp,%rax`, `lea 8(%rsp),%rax`) could be written through
    // later: only loads and stores based on it are plain, and compares (Go's stack check, `cmp
    // 0x10(%r14),%rsp`), which write only flags.
    let compares = matches!(insn.mnemonic(), Mnemonic::Cmp | Mnemonic::Test);
    let copies_rsp = !compares
        && ((0..insn.op_count()).any(|i| {
            insn.op_kind(i) == OpKind::Register && insn.op_register(i).full_register() == Register::RSP
        }) || (insn.mnemonic() == Mnemonic::Lea && insn.memory_base() == Register::RSP));
    // The red zone below the stack pointer is the function's own; at and above it lie the return
    // address and the caller's frame. With arguments captured, no other write either: one through
    // a pointer argument would change the string the entry reads.
    let memory_ok = info.used_memory().iter().all(|used| {
        let red_zone = used.base() == Register::RSP
            && used.index() == Register::None
            && (used.displacement() as i64) + size_of(used.memory_size()) <= 0;
        !written(used.access()) || red_zone || (kept.is_empty() && used.base() != Register::RSP)
    });
    registers_ok && !copies_rsp && memory_ok
}

/// Bytes a memory operand of `size` covers (at most 64; unknown sizes count as 64).
fn size_of(size: MemorySize) -> i64 {
    match size.size() {
        0 => 64,
        n => n as i64,
    }
}

/// Plain moves, arithmetic, logic and compares: fast, no side effect outside their operands, no
/// waiting on the kernel or other CPUs.
fn plain(mnemonic: Mnemonic) -> bool {
    use Mnemonic::*;
    matches!(
        mnemonic,
        Mov | Movzx
            | Movsx
            | Movsxd
            | Lea
            | Add
            | Sub
            | Adc
            | Sbb
            | And
            | Or
            | Xor
            | Not
            | Neg
            | Inc
            | Dec
            | Test
            | Cmp
            | Shl
            | Shr
            | Sar
            | Rol
            | Ror
            | Imul
            | Bt
            | Bsf
            | Bsr
            | Tzcnt
            | Lzcnt
            | Popcnt
            | Andn
            | Shlx
            | Shrx
            | Sarx
            | Bswap
            | Cbw
            | Cwde
            | Cdqe
            | Cwd
            | Cdq
            | Cqo
            | Cmovo
            | Cmovno
            | Cmovb
            | Cmovae
            | Cmove
            | Cmovne
            | Cmovbe
            | Cmova
            | Cmovs
            | Cmovns
            | Cmovp
            | Cmovnp
            | Cmovl
            | Cmovge
            | Cmovle
            | Cmovg
            | Seto
            | Setno
            | Setb
            | Setae
            | Sete
            | Setne
            | Setbe
            | Seta
            | Sets
            | Setns
            | Setp
            | Setnp
            | Setl
            | Setge
            | Setle
            | Setg
            | Nop
            | Movd
            | Movq
            | Movaps
            | Movups
            | Movapd
            | Movupd
            | Movdqa
            | Movdqu
            | Pxor
            | Xorps
            | Xorpd
            | Vmovd
            | Vmovq
            | Vmovaps
            | Vmovups
            | Vmovdqa
            | Vmovdqu
            | Vpxor
            | Vxorps
    )
}

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
    fn lands_in(&self, start: u64, end: u64) -> Option<bool> {
        let (i, first) = self.bit(start)?;
        if self.bit(end)?.0 != i {
            return None;
        }
        let bits = &self.sections[i].2;
        Some((first..=first + (end - start)).any(|bit| bits[(bit / 64) as usize] & (1 << (bit % 64)) != 0))
    }

    pub fn sweep(file: &std::fs::File, code: &[CodeRange]) -> std::io::Result<Option<Self>> {
        if code.iter().map(|c| c.size).sum::<u64>() > MAX_SWEEP {
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
                    (cold.address, cold.address + cold.size)
                }
                // A cold part or local function a stripped file does not name: up to the next
                // function it does, at most 64 KiB.
                Landing::Unknown => (target, symbols.next_start(target).min(target + (64 << 10))),
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

/// Fills `bytes` from `file` at `offset`; false when the file ends first.
fn read_whole(file: &std::fs::File, bytes: &mut [u8], offset: u64) -> std::io::Result<bool> {
    match file.read_exact_at(bytes, offset) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// The entry sites of one plan's functions; each file's code is swept for branches once, when a
/// function of it first has a [`Candidate`].
#[derive(Default)]
pub struct EntrySites {
    /// Per file (by device and inode): its branches, None when too large.
    branches: HashMap<(u64, u64), Option<Branches>>,
}

impl EntrySites {
    /// The file offset `function`'s entry probe goes on under `mode`. `arguments` is how many
    /// argument registers the probe captures (of Go's register ABI in Go code).
    pub fn offset(
        &mut self,
        mode: EntryMode,
        code: &std::fs::File,
        symbols: &ElfSymbols,
        function: &FunctionSymbol,
        arguments: usize,
    ) -> std::io::Result<u64> {
        let unmoved = function.probe_offset;
        if mode == EntryMode::Symbol {
            return Ok(unmoved);
        }
        let Some(candidate) = candidate(code, function, (arguments, symbols.go))? else {
            return Ok(unmoved);
        };
        let meta = code.metadata()?;
        let branches = match self.branches.entry((meta.dev(), meta.ino())) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(new) => new.insert(Branches::sweep(code, &symbols.code)?),
        };
        match branches {
            Some(branches) if branches.allows(code, symbols, function, &candidate)? => {
                Ok(candidate.file_offset)
            }
            _ => Ok(unmoved),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: u64 = 0x1000;

    /// [`find_candidate`] on `code` as a whole function at `START`: how many instructions in.
    fn past(code: &[u8], kept: &[Register]) -> Option<usize> {
        let function = FunctionSymbol {
            name: "f".into(),
            demangled: "f".into(),
            file_offset: START,
            address: START,
            size: code.len() as u64,
            probe_offset: START,
            returns_twice: false,
            uncalled: false,
        };
        find_candidate(code, START, &function, kept).map(|(address, past)| {
            assert!(address > START && address < START + code.len() as u64);
            past
        })
    }

    const PUSH_RBX: u8 = 0x53;
    const MOV_RDI_RAX: [u8; 3] = [0x48, 0x89, 0xf8];

    fn then_push(prefix: &[&[u8]]) -> Vec<u8> {
        let mut code: Vec<u8> = prefix.concat();
        code.extend([PUSH_RBX, 0x5b, 0xc3]); // push %rbx; pop %rbx; ret
        code
    }

    #[test]
    fn what_the_kernel_emulates() {
        for bytes in [
            &[0x90][..],
            &[0x0f, 0x1f, 0x44, 0, 0],
            &[0x55],
            &[0x41, 0x57],
            &[0xeb, 0x10],
            &[0xe9, 1, 0, 0, 0],
            &[0xe8, 1, 0, 0, 0],
            &[0x74, 0x05],
            &[0x0f, 0x85, 1, 0, 0, 0],
        ] {
            assert!(emulated(bytes), "{bytes:x?}");
        }
        for bytes in [
            &[0x66, 0xe8, 1, 0][..],                  // callw
            &[0xf2, 0xe9, 1, 0, 0, 0],                // bnd jmp
            &[0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0], // cs nopw
            &[0x48, 0x8d, 0x44, 0x7f, 0x01],          // lea
            &[0xc3],                                  // ret
            &[0x48, 0x50],                            // rex.w push
        ] {
            assert!(!emulated(bytes), "{bytes:x?}");
        }
    }

    #[test]
    fn moves_past_plain_instructions_to_the_first_emulated_one() {
        assert_eq!(past(&then_push(&[&MOV_RDI_RAX]), &[]), Some(1));
        // mov %fs:0x28,%rax; test %rdi,%rdi; then a jcc instead of the push
        let code = [
            &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0][..],
            &[0x48, 0x85, 0xff],
            &[0x74, 0x01, 0xc3, 0xc3],
        ]
        .concat();
        assert_eq!(past(&code, &[]), Some(2));
        // mov %rdi,-0x8(%rsp): the red zone
        assert_eq!(past(&then_push(&[&[0x48, 0x89, 0x7c, 0x24, 0xf8]]), &[]), Some(1));
    }

    #[test]
    fn stays_where_moving_could_change_a_span() {
        // Already emulated.
        assert_eq!(past(&then_push(&[]), &[]), None);
        // sub $0x8,%rsp writes the stack pointer.
        assert_eq!(past(&then_push(&[&[0x48, 0x83, 0xec, 0x08]]), &[]), None);
        // mov %rdi,(%rsp) and mov %rdi,0x8(%rsp): the return address and the caller's frame.
        assert_eq!(past(&then_push(&[&[0x48, 0x89, 0x3c, 0x24]]), &[]), None);
        assert_eq!(past(&then_push(&[&[0x48, 0x89, 0x7c, 0x24, 0x08]]), &[]), None);
        // add $2,%rdi with the first argument captured; not when it is not.
        let code = then_push(&[&[0x48, 0x83, 0xc7, 0x02]]);
        assert_eq!(past(&code, &[Register::RDI]), None);
        assert_eq!(past(&code, &[]), Some(1));
        // With an argument captured, a store through a pointer (movb $0,(%rdi)) could change the
        // string read at entry; a store into the red zone cannot.
        let code = then_push(&[&[0xc6, 0x07, 0x00]]);
        assert_eq!(past(&code, &[Register::RDI]), None);
        assert_eq!(past(&code, &[]), Some(1));
        let red = then_push(&[&[0x48, 0x89, 0x7c, 0x24, 0xf8]]);
        assert_eq!(past(&red, &[Register::RDI]), Some(1));
        // mov %rsp,%rax and lea 0x8(%rsp),%rax copy the stack pointer.
        assert_eq!(past(&then_push(&[&[0x48, 0x89, 0xe0]]), &[]), None);
        assert_eq!(past(&then_push(&[&[0x48, 0x8d, 0x44, 0x24, 0x08]]), &[]), None);
        // mov -0x8(%rsp),%rax loads through it: plain.
        assert_eq!(past(&then_push(&[&[0x48, 0x8b, 0x44, 0x24, 0xf8]]), &[]), Some(1));
        // Go's stack check, cmp 0x10(%r14),%rsp, and test %rsp,%rsp only read it.
        assert_eq!(past(&then_push(&[&[0x49, 0x3b, 0x66, 0x10]]), &[]), Some(1));
        assert_eq!(past(&then_push(&[&[0x48, 0x85, 0xe4]]), &[]), Some(1));
        // With Go's first argument (rax) captured, mov %rdi,%rax may not be moved past.
        assert_eq!(past(&then_push(&[&MOV_RDI_RAX]), &GO_ARGS[..1]), None);
        // mov %edi,%edi writes RDI too (its 32-bit half).
        assert_eq!(past(&then_push(&[&[0x89, 0xff]]), &[Register::RDI]), None);
        // lock incl (%rdi); syscall; rep stos; cpuid; mov %eax,%ss.
        for prefix in [
            &[0xf0, 0xff, 0x07][..],
            &[0x0f, 0x05],
            &[0xf3, 0x48, 0xab],
            &[0x0f, 0xa2],
            &[0x8e, 0xd0],
        ] {
            assert_eq!(past(&then_push(&[prefix]), &[]), None, "{prefix:x?}");
        }
        // A ret before anything emulated.
        assert_eq!(past(&[0x48, 0x89, 0xf8, 0xc3], &[]), None);
        // More than MAX_PREFIX instructions first.
        let many = vec![&MOV_RDI_RAX[..]; MAX_PREFIX + 1];
        assert_eq!(past(&then_push(&many), &[]), None);
        let most = vec![&MOV_RDI_RAX[..]; MAX_PREFIX];
        assert_eq!(past(&then_push(&most), &[]), Some(MAX_PREFIX));
        // The function ends first (its size cuts the push off).
        assert_eq!(past(&MOV_RDI_RAX, &[]), None);
    }

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
