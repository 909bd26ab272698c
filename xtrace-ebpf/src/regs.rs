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
