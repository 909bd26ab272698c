//! Limits and map layouts shared by the kernel programs and user space.

/// Deepest nesting of traced calls tracked per thread; deeper calls are counted as dropped.
pub const MAX_DEPTH: usize = 32;

/// Threads tracked at once by the per-thread entry stacks.
pub const MAX_THREADS: u32 = 16_384;

/// Default ring buffer size in bytes (a power of two, at least a page).
pub const DEFAULT_RING_BYTES: u32 = 16 << 20;

/// Index into the per-CPU `COUNTERS` array.
pub mod counter {
    /// Records that did not fit in the ring buffer.
    pub const LOST_RING_FULL: u32 = 0;
    /// Entries beyond `MAX_DEPTH` on one thread (their spans are not recorded).
    pub const LOST_TOO_DEEP: u32 = 1;
    /// Threads beyond `MAX_THREADS` (their spans are not recorded).
    pub const LOST_NO_THREAD_SLOT: u32 = 2;
    /// Number of counters.
    pub const COUNT: u32 = 3;
}

/// Per-thread stack of open calls: entry timestamps and probe ids, innermost last.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EntryStack {
    /// Number of valid entries.
    pub depth: u32,
    pub _pad: u32,
    pub start_ns: [u64; MAX_DEPTH],
    pub probe_id: [u32; MAX_DEPTH],
}

#[cfg(feature = "user")]
// SAFETY: repr(C), integer fields only, no padding (8 + 256 + 128 bytes).
unsafe impl aya::Pod for EntryStack {}
