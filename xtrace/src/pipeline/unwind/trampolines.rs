//! CPython's perf trampolines (3.12+ run with `-X perf` or `PYTHONPERFSUPPORT=1`): each Python
//! function called gets a copy of a small piece of code in anonymous memory, named `py::NAME:FILE`
//! in the process's perf map, through which the interpreter calls its evaluation loop. The copies
//! have no CFI, and the 3.12 one keeps no frame pointer (`sub $8,%rsp; call *%rcx; add $8,%rsp;
//! ret`), so the frame-pointer rule an unwinder falls back on reads a register that holds anything
//! and the walk ends there. 3.13's keeps one (`push %rbp; mov %rsp,%rbp; call *%rcx; pop %rbp;
//! ret`). Both leave the trampoline's own return address 8 bytes above the stack pointer as its
//! callee returns to it; what follows the `call` says which of the two it is, read once per
//! address from the process's memory.
use std::{collections::HashMap, os::unix::fs::FileExt};

use framehop::x86_64::UnwindRegsX86_64;

use crate::procfs::Mapping;

/// `call *%rcx`.
const CALL_RCX: [u8; 2] = [0xff, 0xd1];
/// What follows the call in 3.12's trampoline: `add $8,%rsp; ret`.
const AFTER_312: [u8; 5] = [0x48, 0x83, 0xc4, 0x08, 0xc3];
/// What follows it in 3.13's: `pop %rbp; ret`.
const AFTER_313: [u8; 2] = [0x5d, 0xc3];

/// What a return address into anonymous code is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A 3.12 trampoline: the caller's frame pointer is still in `%rbp`.
    KeepsBp,
    /// A 3.13 trampoline: its caller's frame pointer is saved at the stack pointer.
    SavesBp,
    /// Not a trampoline (or the process is gone).
    Other,
}

/// The return addresses into anonymous code seen so far, by process, and what each is.
#[derive(Debug, Default)]
pub struct Trampolines {
    seen: HashMap<(u32, u64), Kind>,
}

impl Trampolines {
    /// With `regs` as the code at return address `at` of process `pid` sees them (after its
    /// callee returned), the registers and return address of the trampoline's caller; None when
    /// `at` is not in one of CPython's perf trampolines (it is in a file, or its code is another)
    /// or the stack copy ends first.
    pub fn step(
        &mut self,
        (pid, maps): (u32, &[Mapping]),
        at: u64,
        regs: &UnwindRegsX86_64,
        read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> Option<(u64, UnwindRegsX86_64)> {
        // The mapping now at `at` (the latest, where an image's mappings were replaced).
        let in_file = |m: &Mapping| m.path.starts_with('/') || m.path == "[vdso]";
        if crate::procfs::find(maps, at).is_some_and(in_file) {
            return None;
        }
        let kind = *self.seen.entry((pid, at)).or_insert_with(|| kind_at(pid, at));
        let sp = regs.sp();
        let bp = match kind {
            Kind::KeepsBp => regs.bp(),
            Kind::SavesBp => read_stack(sp).ok()?,
            Kind::Other => return None,
        };
        let caller = read_stack(sp + 8).ok()?;
        Some((caller, UnwindRegsX86_64::new(caller, sp + 16, bp)))
    }
}

/// What the code around return address `at` of process `pid` is, read from its memory.
fn kind_at(pid: u32, at: u64) -> Kind {
    let Ok(mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else {
        return Kind::Other;
    };
    let mut code = [0u8; 7];
    match at.checked_sub(2).map(|from| mem.read_exact_at(&mut code, from)) {
        Some(Ok(())) => kind_of(&code),
        _ => Kind::Other,
    }
}

/// [`kind_at`] of the 7 bytes from 2 before the return address.
fn kind_of(code: &[u8; 7]) -> Kind {
    let (call, after) = code.split_at(2);
    if call != CALL_RCX {
        Kind::Other
    } else if after.starts_with(&AFTER_312) {
        Kind::KeepsBp
    } else if after.starts_with(&AFTER_313) {
        Kind::SavesBp
    } else {
        Kind::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_trampolines_are_told_by_what_follows_their_call() {
        let after_call = |rest: &[u8]| {
            let mut code = [0u8; 7];
            code[..2].copy_from_slice(&CALL_RCX);
            code[2..2 + rest.len()].copy_from_slice(rest);
            kind_of(&code)
        };
        assert_eq!(after_call(&AFTER_312), Kind::KeepsBp);
        assert_eq!(after_call(&[0x5d, 0xc3, 0x90]), Kind::SavesBp);
        assert_eq!(after_call(&[0x48, 0x89, 0xc7]), Kind::Other);
        assert_eq!(kind_of(&[0xff, 0xd0, 0x48, 0x83, 0xc4, 0x08, 0xc3]), Kind::Other);
    }

    #[test]
    fn a_trampoline_frame_is_stepped_over_by_its_stack_layout() {
        let mut trampolines = Trampolines::default();
        let (pid, at, sp) = (7, 0x7f00_0000_1006, 0x1000);
        trampolines.seen.insert((pid, at), Kind::KeepsBp);
        trampolines.seen.insert((pid, at + 0x40), Kind::SavesBp);
        // Padding (or the saved %rbp), then the trampoline's return address.
        let stack = [0xb0b0_u64, 0x5555_0000_2222];
        let mut read = |a: u64| stack.get(((a - sp) / 8) as usize).copied().ok_or(());
        let regs = UnwindRegsX86_64::new(at, sp, 0xbeef);
        let (caller, next) = trampolines.step((pid, &[]), at, &regs, &mut read).unwrap();
        assert_eq!(
            (caller, next.sp(), next.bp()),
            (0x5555_0000_2222, sp + 16, 0xbeef)
        );
        let (_, next) = trampolines.step((pid, &[]), at + 0x40, &regs, &mut read).unwrap();
        assert_eq!(next.bp(), 0xb0b0);
        // In a file: not a trampoline, whatever the bytes.
        let file = Mapping {
            start: at - 6,
            end: at + 10,
            offset: 0,
            path: "/usr/lib/libpython3.12.so".into(),
            deleted: false,
            file: None,
        };
        assert!(trampolines.step((pid, &[file]), at, &regs, &mut read).is_none());
        // Past the end of the stack copy.
        let regs = UnwindRegsX86_64::new(at, sp + 16, 0xbeef);
        assert!(trampolines.step((pid, &[]), at, &regs, &mut read).is_none());
    }
}
