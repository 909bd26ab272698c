//! Where a sampled thread stands when the sample lands in the kernel's handling of a uprobe, whose
//! user registers are then not those of a place in the program's code:
//! - in the breakpoint's trap, before the kernel has looked up the uprobe (`asm_exc_int3`, and
//!   `uprobe_notify_resume` not yet entered, or still in its look-up: `uprobe_get_swbp_addr`,
//!   `find_active_uprobe_rcu`), the instruction pointer is one past the breakpoint,
//!   inside the probed instruction (or past a one-byte one, a `push`, as if it had run);
//! - in the return probes' trampoline (`[uprobes]`), the traced call has returned, and its return
//!   address, which the kernel keeps, is where the thread stands, with the stack pointer just
//!   above the return address's slot (the trampoline's `push`es of `rax`, `rcx` and `r11` before
//!   its `uretprobe` system call are not the program's);
//! - in that system call (`__do_sys_uretprobe`, Linux 6.11 and later), once the return probes
//!   have run: the kernel puts the return address in the instruction pointer, then moves the
//!   stack pointer back down over the 3 saved registers, then puts the trampoline's address back.
//!   Between the last two the thread seems to stand at the return address with a stack pointer
//!   3 words too low, which no CFI row describes: [`Traps::after_return`] gives the other reading.
//!
//! The sampler's kernel side handles the third, a probed instruction's copy single-stepped out of
//! line. Without these the unwinder finds no CFI, or the wrong row of it, and the stack loses its
//! callers or gains made-up ones.
use std::ops::Range;

use super::samples::trampolines;
use crate::procfs::Mapping;

/// The kernel code that says where a trap stands: read from /proc/kallsyms once (empty when it
/// shows no addresses: without CAP_SYSLOG, or under `kptr_restrict`).
#[derive(Debug, Default)]
pub struct Traps {
    /// `asm_exc_int3`: the breakpoint's trap entry.
    int3: Option<Range<u64>>,
    /// `uprobe_notify_resume`, where the kernel looks the uprobe up and moves the instruction
    /// pointer back onto the breakpoint before it runs the probe's programs.
    resume: Option<Range<u64>>,
    /// `uprobe_get_swbp_addr` and `find_active_uprobe_rcu`, the look-up, before the pointer is
    /// moved back.
    lookup: [Option<Range<u64>>; 2],
    /// `__do_sys_uretprobe`: the return probes' system call.
    uretprobe: Option<Range<u64>>,
}

impl Traps {
    /// The traps in the text of /proc/kallsyms, which lists the kernel's own symbols in address
    /// order: each range runs from the symbol to the next one at a higher address. Found by
    /// substring, as it runs once per capture with probes, over ~120,000 lines.
    pub fn parse(kallsyms: &str) -> Traps {
        let address = |line: &str| {
            let address = u64::from_str_radix(line.split(' ').next()?, 16).ok()?;
            (address != 0).then_some(address)
        };
        let range = |name: &str| {
            let (start, after) = crate::bpf::kallsyms::symbol(kallsyms, name)?;
            // Aliases share its address (`__x64_sys_uretprobe` beside `__do_sys_uretprobe`).
            let end = kallsyms
                .get(after..)?
                .lines()
                .map_while(address)
                .find(|&end| end > start)?;
            Some(start..end)
        };
        Traps {
            int3: range("asm_exc_int3"),
            resume: range("uprobe_notify_resume"),
            lookup: [range("uprobe_get_swbp_addr"), range("find_active_uprobe_rcu")],
            uretprobe: range("__do_sys_uretprobe"),
        }
    }

    /// The instruction and stack pointers to unwind a sample from, given its user instruction and
    /// stack pointers, its kernel frames, the process's executable mappings and the traced calls'
    /// return slots (`[slot, return address]`, innermost first). The stack pointer only ever
    /// moves up.
    pub fn user_regs(
        &self,
        (ip, sp): (u64, u64),
        kernel: &[u64],
        maps: &[Mapping],
        returns: &[[u64; 2]],
    ) -> (u64, u64) {
        let within = |range: &Option<Range<u64>>| {
            range
                .as_ref()
                .is_some_and(|r| kernel.iter().any(|a| r.contains(a)))
        };
        if within(&self.int3) && (!within(&self.resume) || self.lookup.iter().any(within)) {
            return (ip.saturating_sub(1), sp);
        }
        if trampolines(maps).is_some_and(|t| t.contains(&ip)) {
            // The call that returned through it had its return address at the slot just below
            // the stack pointer, or 3 words above it once the trampoline has saved its registers.
            let returned = returns
                .iter()
                .find(|[slot, _]| slot.wrapping_add(8) == sp || slot.wrapping_sub(16) == sp);
            if let Some(&[slot, address]) = returned {
                return (address, slot + 8);
            }
        }
        (ip, sp)
    }

    /// The other reading of registers `(ip, sp)` from [`Traps::user_regs`] when the sample lands
    /// in the return probes' system call with the instruction pointer already back in the
    /// program: the stack pointer may have been moved down over the trampoline's 3 saved
    /// registers (see the module's documentation). `None` elsewhere.
    pub fn after_return(&self, (ip, sp): (u64, u64), kernel: &[u64], maps: &[Mapping]) -> Option<(u64, u64)> {
        let in_syscall = self
            .uretprobe
            .as_ref()
            .is_some_and(|r| kernel.iter().any(|a| r.contains(a)));
        let in_trampoline = trampolines(maps).is_some_and(|t| t.contains(&ip));
        (in_syscall && !in_trampoline).then_some((ip, sp.checked_add(SAVED_REGISTERS)?))
    }
}

/// Bytes the return probes' trampoline pushes before its system call: `rax`, `rcx` and `r11`.
const SAVED_REGISTERS: u64 = 24;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::samples::TRAMPOLINES;

    const KALLSYMS: &str = "\
ffffffff81000c00 T asm_exc_int3_before
ffffffff81000c20 T asm_exc_int3
ffffffff81000c60 T asm_exc_debug
ffffffff81582f00 t find_active_uprobe_rcu
ffffffff81583240 T __pfx_uprobe_write
ffffffff81585470 W uprobe_get_swbp_addr
ffffffff81585490 T __pfx_uprobe_get_trap_addr
ffffffff815863c0 T uprobe_notify_resume
ffffffff81586480 T uprobe_deny_signal
ffffffff81587000 t __do_sys_uretprobe
ffffffff81587000 T __x64_sys_uretprobe
ffffffff81587200 T __pfx_arch_uprobe_init_state
ffffffffc0001000 t helper [some_module]
";

    fn trampolines() -> Vec<Mapping> {
        vec![Mapping {
            start: 0x7fff_ffff_e000,
            end: 0x7fff_ffff_f000,
            offset: 0,
            path: TRAMPOLINES.into(),
            deleted: false,
            file: None,
        }]
    }

    #[test]
    fn ranges_run_to_the_next_symbol() {
        let traps = Traps::parse(KALLSYMS);
        assert_eq!(traps.int3, Some(0xffff_ffff_8100_0c20..0xffff_ffff_8100_0c60));
        assert_eq!(traps.resume, Some(0xffff_ffff_8158_63c0..0xffff_ffff_8158_6480));
        assert_eq!(
            traps.lookup,
            [
                Some(0xffff_ffff_8158_5470..0xffff_ffff_8158_5490),
                Some(0xffff_ffff_8158_2f00..0xffff_ffff_8158_3240)
            ]
        );
        // Without CAP_SYSLOG every address reads 0.
        let hidden: String = KALLSYMS
            .lines()
            .map(|l| format!("0000000000000000{}\n", &l[16..]))
            .collect();
        let hidden = Traps::parse(&hidden);
        assert_eq!(
            (hidden.int3, hidden.resume, hidden.lookup),
            (None, None, [None, None])
        );
    }

    #[test]
    fn in_the_breakpoints_trap_the_instruction_is_one_back() {
        let traps = Traps::parse(KALLSYMS);
        let (int3, resume, other) = (
            0xffff_ffff_8100_0c30,
            0xffff_ffff_8158_6400,
            0xffff_ffff_8200_0000,
        );
        let at = (0x5555_0000_1001, 0x7ffc_0000_0000);
        assert_eq!(
            traps.user_regs(at, &[other, int3], &[], &[]),
            (0x5555_0000_1000, at.1)
        );
        // Once the kernel has looked the uprobe up, it has moved the pointer back itself.
        assert_eq!(traps.user_regs(at, &[resume, other, int3], &[], &[]), at);
        for lookup in [0xffff_ffff_8158_3000, 0xffff_ffff_8158_5480] {
            assert_eq!(
                traps.user_regs(at, &[lookup, resume, other, int3], &[], &[]),
                (0x5555_0000_1000, at.1)
            );
        }
        assert_eq!(traps.user_regs(at, &[other], &[], &[]), at);
        assert_eq!(Traps::default().user_regs(at, &[int3], &[], &[]), at);
    }

    #[test]
    fn in_the_trampoline_the_thread_stands_at_the_return_address() {
        let traps = Traps::default();
        let sp = 0x7ffc_0000_0108;
        let returns = [
            [0x7ffc_0000_0100, 0x5555_0000_2345],
            [0x7ffc_0000_0200, 0x5555_0000_3000],
        ];
        let trampoline = 0x7fff_ffff_e00d;
        let back = (0x5555_0000_2345, sp);
        assert_eq!(
            traps.user_regs((trampoline, sp), &[], &trampolines(), &returns),
            back
        );
        // With rax, rcx and r11 pushed for the uretprobe system call.
        assert_eq!(
            traps.user_regs((trampoline, sp - 24), &[], &trampolines(), &returns),
            back
        );
        // Another slot, or outside the trampoline: unchanged.
        let other = (trampoline, sp + 8);
        assert_eq!(traps.user_regs(other, &[], &trampolines(), &returns), other);
        let code = (0x5555_0000_1000, sp);
        assert_eq!(traps.user_regs(code, &[], &trampolines(), &returns), code);
    }

    #[test]
    fn in_the_uretprobe_system_call_the_stack_pointer_may_be_3_words_low() {
        let traps = Traps::parse(KALLSYMS);
        assert_eq!(
            traps.uretprobe,
            Some(0xffff_ffff_8158_7000..0xffff_ffff_8158_7200)
        );
        let (syscall, other) = (0xffff_ffff_8158_7010, 0xffff_ffff_8200_0000);
        let back = (0x5555_0000_2345, 0x7ffc_0000_00f0);
        assert_eq!(
            traps.after_return(back, &[syscall, other], &trampolines()),
            Some((back.0, back.1 + 24))
        );
        // Still in the trampoline, or not in the system call: no other reading.
        let trampoline = (0x7fff_ffff_e00d, back.1);
        assert_eq!(traps.after_return(trampoline, &[syscall], &trampolines()), None);
        assert_eq!(traps.after_return(back, &[other], &trampolines()), None);
        assert_eq!(
            Traps::default().after_return(back, &[syscall], &trampolines()),
            None
        );
    }
}
