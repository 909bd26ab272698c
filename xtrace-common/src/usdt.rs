//! USDT call sites as the kernel program reads them: the `USDT_SITES` map holds one [`UsdtSite`]
//! per attached call site, indexed by the BPF attach cookie, telling the program how to read each
//! argument from the registers and user memory at that site.

/// Most arguments of one USDT probe (`STAP_PROBE12`).
pub const MAX_USDT_ARGS: usize = 12;

/// How one argument is found (`UsdtArg::kind`).
pub mod arg_kind {
    /// The site has fewer arguments.
    pub const NONE: u8 = 0;
    /// `$N`: the value is `UsdtArg::offset`.
    pub const CONST: u8 = 1;
    /// `%reg`: the register at `UsdtArg::reg` in `pt_regs`.
    pub const REG: u8 = 2;
    /// `disp(%base[,%index,scale])`: user memory at `base + index * scale + offset`.
    pub const MEM: u8 = 3;
}

/// How an argument's value is also read as a pointer (`UsdtArg::string`).
pub mod string_kind {
    /// Not a pointer to read.
    pub const NONE: u8 = 0;
    /// A NUL-terminated string, read up to `ARG_STR_LEN` bytes.
    pub const C: u8 = 1;
    /// `ARG_STR_LEN` bytes as they are (a `wchar_t` string, or a message whose encoding another
    /// argument gives), or up to the end of the pointer's page when the page after is unmapped.
    pub const RAW: u8 = 2;
    /// A tool-library string (`crate::ranges::INTERNED`): not read when tagged INTERNED, read as
    /// C at the address without the tag bits otherwise.
    pub const INTERNED: u8 = 3;
}

/// No index register (`UsdtArg::index_reg`).
pub const NO_REG: u16 = u16::MAX;

/// One argument of a call site. Registers are byte offsets into the kernel's `struct pt_regs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsdtArg {
    pub kind: u8,
    /// Bytes the value occupies: 1, 2, 4 or 8 (for a register, at most the register's width).
    pub size: u8,
    /// Sign-extend the value from `size` bytes (the note's `-N@` form).
    pub signed: u8,
    /// Also read the value as a pointer to a string ([`string_kind`]).
    pub string: u8,
    /// Base register (REG and MEM).
    pub reg: u16,
    /// Index register (MEM with an index), or [`NO_REG`].
    pub index_reg: u16,
    /// Scale of the index register: 1, 2, 4 or 8.
    pub scale: u8,
    pub _pad0: u8,
    /// Bytes a string argument asks for past the 63 of its slot (`str:N`, N of 64 and up; 0: none):
    /// it is also sent whole in a `LongStrEvent` before the hit.
    pub long: u16,
    pub _pad: [u8; 4],
    /// The constant (CONST) or the displacement (MEM).
    pub offset: i64,
}

/// One attached call site.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsdtSite {
    /// The probe (provider:name) in user space's probe table.
    pub probe_id: u32,
    /// Arguments in use in `args`.
    pub nargs: u8,
    /// One past the last argument read as a string (0: none); a site with strings writes a
    /// `UsdtStrEvent` cut after that argument's string slot.
    pub strings: u8,
    pub _pad: [u8; 2],
    pub args: [UsdtArg; MAX_USDT_ARGS],
    /// A hit is not sent while the code pointer at `site + guard_slot` points within
    /// `site + guard_lo .. site + guard_hi` (0: no guard). An NVTX v2 function jumps through its
    /// pointer, which points into the library's own initialisation until the first call sets it,
    /// and that initialisation jumps back to the function: its first pass is no call.
    pub guard_slot: i64,
    pub guard_lo: i64,
    pub guard_hi: i64,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), integer fields only, explicit padding.
    unsafe impl aya::Pod for super::UsdtSite {}
}

const _: () = assert!(core::mem::size_of::<UsdtArg>() == 24);
const _: () = assert!(core::mem::size_of::<UsdtSite>() == 8 + 24 * MAX_USDT_ARGS + 24);
