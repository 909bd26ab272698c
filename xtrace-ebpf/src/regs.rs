//! The kernel's x86-64 `struct pt_regs`, as the programs read it: its size and the byte offsets of
//! the registers they name.

/// Size of `struct pt_regs`.
pub const PT_REGS_SIZE: usize = 21 * 8;
/// Offset of `bp`.
pub const PT_REGS_BP: usize = 4 * 8;
/// Offset of `ip`.
pub const PT_REGS_IP: usize = 16 * 8;
/// Offset of `sp`.
pub const PT_REGS_SP: usize = 19 * 8;

/// The user stack pointer saved in `regs`, the program's context (`struct pt_regs`). The load is
/// written in assembly so that it is always one instruction at a constant offset from the context
/// pointer: the verifier refuses a load through a context pointer the compiler has moved.
#[inline(always)]
pub fn user_sp(regs: *const aya_ebpf::bindings::pt_regs) -> u64 {
    let sp: u64;
    // SAFETY: `regs` is the program's context pointer; the verifier checks the offset is inside it.
    unsafe {
        core::arch::asm!(
            "{sp} = *(u64 *)({regs} + {off})",
            regs = in(reg) regs,
            off = const PT_REGS_SP,
            sp = lateout(reg) sp,
            options(readonly, nostack, preserves_flags, pure),
        );
    }
    sp
}
