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
//!   (every direct branch of every executable section is decoded once per file), no symbol names
//!   one (an assembly label a pointer in data may reach), and neither the
//!   function nor a cold part it jumps to has an indirect jump that could land there;
//! - where returns are probed at the function's exit instructions, the site is not one of them
//!   (a tail call's `jmp`): [`super::uprobe`] keeps the entry there.
//!
//! Go code's stack check is moved past whole, onto its `jbe` ([`go_stack_check`]), where the span
//! program counts only the hits that fall through.
//!
//! `perf probe` moves function probes past the prologue too (with debug information), for the
//! arguments; here it is for the cost, and only where nothing a span shows changes but when it
//! starts: a few plain instructions later.
use std::{
    collections::{hash_map::Entry, HashMap},
    os::unix::fs::MetadataExt,
};

use iced_x86::{
    Decoder, DecoderOptions, EncodingKind, FlowControl, Instruction, InstructionInfoFactory, MemorySize,
    Mnemonic, OpAccess, OpKind, Register,
};

use super::{
    branches::{read_whole, Branches},
    elf::{ElfSymbols, FunctionSymbol},
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
    let Some((bytes, start)) = start_code(code, function, MAX_INSN * (MAX_PREFIX + 1))? else {
        return Ok(None);
    };
    let registers = if go { &GO_ARGS } else { &SYSV_ARGS };
    let kept = &registers[..arguments.min(registers.len())];
    let end = function.address + function.size;
    let site = match go.then(|| go_stack_check(&bytes, start, end)).flatten() {
        Some(branch) => Some(branch),
        None => find_candidate(&bytes, start, function, kept).map(|(address, _)| address),
    };
    Ok(site.map(|address| Candidate {
        address,
        file_offset: function.probe_offset + (address - start),
    }))
}

/// Whether the entry probe of `function` (Go code, read from `code`) at file offset `offset` is on
/// the branch of its stack check ([`go_stack_check`]), where the span program tells a call from a
/// restart by the flags.
pub fn on_go_stack_check(
    code: &std::fs::File,
    function: &FunctionSymbol,
    offset: u64,
) -> std::io::Result<bool> {
    if offset <= function.probe_offset {
        return Ok(false);
    }
    let Some((bytes, start)) = start_code(code, function, 5 * MAX_INSN)? else {
        return Ok(false);
    };
    let end = function.address + function.size;
    Ok(go_stack_check(&bytes, start, end) == Some(start + (offset - function.probe_offset)))
}

/// The first `most` bytes of `function`'s code (read from `code`) from its probe offset (after a
/// leading `endbr64`), and their address; None when it has no code there (no size, or a symbol
/// past the end of the file).
fn start_code(
    code: &std::fs::File,
    function: &FunctionSymbol,
    most: usize,
) -> std::io::Result<Option<(Vec<u8>, u64)>> {
    let skipped = function.probe_offset - function.file_offset;
    if function.size <= skipped {
        return Ok(None);
    }
    let len = (function.size - skipped).min(most as u64);
    let mut bytes = vec![0; len as usize];
    if !read_whole(code, &mut bytes, function.probe_offset)? {
        return Ok(None);
    }
    Ok(Some((bytes, function.address + skipped)))
}

/// The address of the `jbe` that ends the stack check a Go function (Go 1.17's register ABI on,
/// the goroutine in `r14`) starts with, when `bytes` (its code at `start`, ending at `end`) starts
/// with one: `cmp 0x10(%r14),%rsp` (the stack pointer against the goroutine's `stackguard0`) for
/// frames up to 128 bytes, `lea -N(%rsp),%r12; cmp 0x10(%r14),%r12` for frames up to 4 KiB, or
/// `mov %rsp,%r12; sub $N,%r12; jb; cmp 0x10(%r14),%r12` for larger ones, then a `jbe` forward
/// inside the function, to its call of `runtime.morestack` (so does the `jb`). That call grows
/// the stack (moving it), or yields the thread to a preemption request (the runtime sets
/// `stackguard0` so that the next check fails), then jumps back to the function's first
/// instruction. A probe on the `jbe` sees the compare's flags: a hit that takes the branch is not
/// a call yet, and the call is the hit that falls through. The `lea`, `mov` and `sub` only write
/// `r12`, which is no argument register of Go's ABI.
fn go_stack_check(bytes: &[u8], start: u64, end: u64) -> Option<u64> {
    let mut decoder = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
    let mut next = || {
        decoder
            .can_decode()
            .then(|| decoder.decode())
            .filter(|i| !i.is_invalid())
    };
    let forward = |branch: &Instruction, mnemonic: Mnemonic| {
        branch.mnemonic() == mnemonic
            && branch.flow_control() == FlowControl::ConditionalBranch
            && branch.near_branch_target() > branch.next_ip()
            && branch.near_branch_target() < end
    };
    let mut insn = next()?;
    let compared = if insn.mnemonic() == Mnemonic::Lea
        && insn.op0_register() == Register::R12
        && insn.memory_base() == Register::RSP
        && insn.memory_index() == Register::None
    {
        insn = next()?;
        Register::R12
    } else if insn.mnemonic() == Mnemonic::Mov
        && insn.op0_kind() == OpKind::Register
        && insn.op0_register() == Register::R12
        && insn.op1_kind() == OpKind::Register
        && insn.op1_register() == Register::RSP
    {
        // Frames over 4 KiB: `mov %rsp,%r12; sub $N,%r12; jb` (the subtraction wrapped) first.
        let sub = next()?;
        let subtracts = sub.mnemonic() == Mnemonic::Sub
            && sub.op0_kind() == OpKind::Register
            && sub.op0_register() == Register::R12
            && matches!(sub.op1_kind(), OpKind::Immediate32to64 | OpKind::Immediate8to64);
        if !subtracts || !forward(&next()?, Mnemonic::Jb) {
            return None;
        }
        insn = next()?;
        Register::R12
    } else {
        Register::RSP
    };
    let guard = insn.mnemonic() == Mnemonic::Cmp
        && insn.op_count() == 2
        && insn.op0_kind() == OpKind::Register
        && insn.op0_register() == compared
        && insn.op1_kind() == OpKind::Memory
        && insn.memory_base() == Register::R14
        && insn.memory_index() == Register::None
        && insn.memory_displacement64() == 0x10;
    if !guard {
        return None;
    }
    let branch = next()?;
    forward(&branch, Mnemonic::Jbe).then(|| branch.ip())
}

/// [`candidate`] on the code at `start` (`bytes`, the function's from its probe offset on): the
/// site's address, and how many instructions it is past the first. A 5-byte nop is never the
/// site ([`trampolined`]); a function that starts with one is probed on the instruction after it
/// when nothing cheaper follows.
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
    // The instruction after a leading 5-byte nop: better than the nop, if nothing cheaper.
    let (mut leading_nop5, mut after_nop5) = (false, None);
    for past in 0..=MAX_PREFIX {
        if !decoder.can_decode() {
            return after_nop5;
        }
        decoder.decode_out(&mut insn);
        if insn.is_invalid() || insn.next_ip() > end {
            return after_nop5;
        }
        let at = (insn.ip() - start) as usize;
        let code = &bytes[at..at + insn.len()];
        if past == 1 && leading_nop5 && super::insn::why_refused(&insn, code).is_none() {
            after_nop5 = Some((insn.ip(), 1));
        }
        if trampolined(code) {
            leading_nop5 |= past == 0;
            continue; // a nop: moved past
        }
        if emulated(code) {
            if past == 0 {
                return None; // already cheap
            }
            return Some((insn.ip(), past));
        }
        if !movable(&insn, &mut info, kept) {
            return after_nop5;
        }
    }
    after_nop5
}

/// Whether a uprobe on `bytes` would be "optimized" by the kernel: since Linux 6.18 a probed
/// 5-byte nop (`nopl 0x0(%rax,%rax,1)`) becomes a call to an `[uprobes-trampoline]` page, which a
/// process forked while it is probed does not inherit: the child dies with SIGSEGV when it gets
/// there. So no entry probe moves onto one.
fn trampolined(bytes: &[u8]) -> bool {
    bytes == [0x0f, 0x1f, 0x44, 0x00, 0x00]
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
        || !(plain(insn.mnemonic()) || vector(insn))
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

/// An AVX or AVX-512 instruction (VEX or EVEX encoded) that falls through: it works on vector and
/// mask registers, and on the general registers and memory [`movable`] checks like any other's.
/// glibc's AVX2 and EVEX string functions start with a few (`vpbroadcastb %esi,%ymm17`), which
/// the kernel's uprobes cannot be put on ([`super::insn`]).
fn vector(insn: &Instruction) -> bool {
    matches!(insn.encoding(), EncodingKind::VEX | EncodingKind::EVEX)
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
        let skipped = unmoved - function.file_offset;
        if skipped > 0 {
            // The instruction after a leading `endbr64`, where a loop may jump back to: probed
            // there, each pass would be a call. Then the `endbr64` itself (single-stepped). Where
            // the file's code is not swept (too much of it) or the function is in none of the
            // swept sections (its headers are damaged), its own code tells, if it is known.
            let after = function.address + skipped;
            let swept = self
                .branches(code, symbols)?
                .and_then(|b| b.lands_in(after, after));
            let lands = match swept {
                Some(lands) => lands,
                None => super::branches::function_branches_to(code, function, after)?.unwrap_or(true),
            };
            if lands {
                return Ok(function.file_offset);
            }
        }
        if mode == EntryMode::Symbol {
            return Ok(unmoved);
        }
        let Some(candidate) = candidate(code, function, (arguments, symbols.go_code(function)))? else {
            return Ok(unmoved);
        };
        match self.branches(code, symbols)? {
            Some(branches) if branches.allows(code, symbols, function, &candidate)? => {
                Ok(candidate.file_offset)
            }
            _ => Ok(unmoved),
        }
    }

    /// The branches of `code`'s file (swept once per file), None when it is too large.
    fn branches(&mut self, code: &std::fs::File, symbols: &ElfSymbols) -> std::io::Result<Option<&Branches>> {
        let meta = code.metadata()?;
        let branches = match self.branches.entry((meta.dev(), meta.ino())) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(new) => new.insert(Branches::sweep(code, &symbols.code)?),
        };
        Ok(branches.as_ref())
    }
}

#[cfg(test)]
#[path = "entry_tests.rs"]
mod tests;
