//! Pieces of the summary schema (summary.json) that layers below `export` fill in or read: the
//! kernel programs' loss counts and the capture format's version.
use serde::Serialize;

/// Records and calls the kernel programs lost, by cause (summary.json's `lost`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Lost {
    /// Records dropped because the ring buffer was full.
    pub ring_full: u64,
    /// Calls nested deeper than the per-thread stack (no span recorded).
    pub too_deep: u64,
    /// Calls on threads beyond the thread table's capacity (no span recorded).
    pub no_thread_slot: u64,
}

impl Lost {
    pub fn total(&self) -> u64 {
        self.ring_full + self.too_deep + self.no_thread_slot
    }
}

/// The version of the capture format (summary.json, trace.json, stacks.folded) this xtrace writes
/// and reads; `xtrace report` and `xtrace diff` refuse captures with a higher one.
pub const FORMAT_VERSION: u32 = 1;
