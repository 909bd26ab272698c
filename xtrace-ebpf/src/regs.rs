//! The kernel's x86-64 `struct pt_regs`, as the programs read it: its size and the byte offsets of
//! the registers they name.

/// Size of `struct pt_regs`.
pub const PT_REGS_SIZE: usize = 21 * 8;
/// Offset of `ax`.
pub const PT_REGS_AX: usize = 10 * 8;
/// Offset of `bx`.
pub const PT_REGS_BX: usize = 5 * 8;
/// Offset of `r14`.
pub const PT_REGS_R14: usize = 8;
/// Offset of `r9`.
pub const PT_REGS_R9: usize = 8 * 8;
/// Offset of `r8`.
pub const PT_REGS_R8: usize = 9 * 8;
/// Offset of `cx`.
pub const PT_REGS_CX: usize = 11 * 8;
/// Offset of `si`.
pub const PT_REGS_SI: usize = 13 * 8;
/// Offset of `di`.
pub const PT_REGS_DI: usize = 14 * 8;
/// Offset of `bp`.
pub const PT_REGS_BP: usize = 4 * 8;
/// Offset of `orig_ax`: the system call's number while in one, else negative.
pub const PT_REGS_ORIG_AX: usize = 15 * 8;
/// Offset of `ip`.
pub const PT_REGS_IP: usize = 16 * 8;
/// Offset of `cs`: the user code segment while in user space or a system call; 0 in a kernel
/// thread, whose saved registers are all 0.
pub const PT_REGS_CS: usize = 17 * 8;
/// Offset of `flags`.
pub const PT_REGS_FLAGS: usize = 18 * 8;
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
    /// The user instruction pointer.
    user_ip,
    PT_REGS_IP
);
context_register!(
    /// The user flags register (`rflags`).
    user_flags,
    PT_REGS_FLAGS
);
context_register!(
    /// The user `rax`: a function's return value at its `ret`.
    user_ax,
    PT_REGS_AX
);

context_register!(
    /// The user `rbx`: a Go function's second integer argument.
    user_bx,
    PT_REGS_BX
);
context_register!(
    /// The user `rcx`: a Go function's third integer argument.
    user_cx,
    PT_REGS_CX
);
context_register!(
    /// The user `rdi`: a Go function's fourth integer argument.
    user_di,
    PT_REGS_DI
);
context_register!(
    /// The user `rsi`: a Go function's fifth integer argument.
    user_si,
    PT_REGS_SI
);
context_register!(
    /// The user `r14`: Go code's running goroutine (`runtime.g`).
    user_r14,
    PT_REGS_R14
);
context_register!(
    /// The user `r8`: a Go function's sixth integer argument.
    user_r8,
    PT_REGS_R8
);
context_register!(
    /// The user `r9`: a Go function's seventh integer argument (the length of a string in `r8`).
    user_r9,
    PT_REGS_R9
);
