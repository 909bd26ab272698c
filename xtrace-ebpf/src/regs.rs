//! The kernel's x86-64 `struct pt_regs`, as the programs read it: its size and the byte offsets of
//! the registers they name.

/// Size of `struct pt_regs`.
pub const PT_REGS_SIZE: usize = 21 * 8;
/// Offset of `ax`.
pub const PT_REGS_AX: usize = 10 * 8;
/// Offset of `bp`.
pub const PT_REGS_BP: usize = 4 * 8;
/// Offset of `ip`.
pub const PT_REGS_IP: usize = 16 * 8;
/// Offset of `sp`.
pub const PT_REGS_SP: usize = 19 * 8;

/// Defines `$name(regs)`: the user register at offset `$off` saved in `regs`, the program's context
/// (`struct pt_regs`). The load is written in assembly so that it is always one instruction at a
/// constant offset from the context pointer: the verifier refuses a load through a context pointer
/// the compiler has moved.
macro_rules! context_register {
    ($(#[$doc:meta])* $name:ident, $off:expr) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(regs: *const aya_ebpf::bindings::pt_regs) -> u64 {
            let value: u64;
            // SAFETY: `regs` is the program's context pointer; the verifier checks the offset is
            // inside it.
            unsafe {
                core::arch::asm!(
                    "{value} = *(u64 *)({regs} + {off})",
                    regs = in(reg) regs,
                    off = const $off,
                    value = lateout(reg) value,
                    options(readonly, nostack, preserves_flags, pure),
                );
            }
            value
        }
    };
}

context_register!(
    /// The user stack pointer.
    user_sp,
    PT_REGS_SP
);
context_register!(
    /// The user `rax`: a function's return value at its `ret`.
    user_ax,
    PT_REGS_AX
);
