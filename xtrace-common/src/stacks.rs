//! `--stacks`: the stack of a traced call at its entry, sent by the `call_stack` program that
//! runs beside the entry program at the same places, or of a USDT hit, sent by `usdt_stack` just
//! before the hit's own record ([`CallStackEvent`]). Its Python frames, when the process is a
//! recognised CPython, come in a `PyStackEvent` just before it with the same header time.

pub use crate::event::KIND_CALL_STACK;

/// Native return addresses kept per call: the caller's (read at the stack pointer) and then those
/// of a frame-pointer walk from the caller's frame.
pub const CALL_NATIVE_MAX: usize = 32;

/// `CallStackEvent::start_ns` when the call is not on the thread's stack of open calls (the entry
/// program did not run before this one, or did not keep the call): it has no span to pair with.
pub const CALL_NOT_OPEN: u64 = 0;

/// `CallStackEvent::flags`: the stack of a USDT hit, not of a traced call: `native[0]` is the
/// probe's own address and `native[1]` the first return address of the frame-pointer walk (in
/// the caller of the function the probe is in); `start_ns` is [`CALL_NOT_OPEN`]. It belongs to
/// the next USDT hit of its thread, of the same probe.
pub const CALL_AT_USDT: u32 = 1;

/// A traced call's (or USDT hit's, [`CALL_AT_USDT`]) stack at its entry. `start_ns` and `depth` are those of the call's open entry,
/// as its span will carry them: user space pairs the two by thread and `start_ns`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallStackEvent {
    /// `ts_ns` is the time of the Python walk sent just before it, if any.
    pub header: crate::event::EventHeader,
    /// The call's entry time ([`CALL_NOT_OPEN`]: none).
    pub start_ns: u64,
    /// The probe (attach cookie's probe id; a USDT hit's: its site's).
    pub probe_id: u32,
    /// The call's depth among the thread's open traced calls (0: outermost).
    pub depth: u32,
    /// Addresses used in `native`.
    pub native_len: u32,
    /// [`CALL_AT_USDT`] or 0.
    pub flags: u32,
    /// Return addresses, innermost first: `native[0]` is in the caller (a USDT hit's: see
    /// [`CALL_AT_USDT`]).
    pub native: [u64; CALL_NATIVE_MAX],
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: a plain-old-data record: repr(C), integer fields only, no padding.
    unsafe impl aya::Pod for super::CallStackEvent {}
}

const _: () = assert!(core::mem::size_of::<CallStackEvent>() == 48 + 8 * CALL_NATIVE_MAX);
