//! The contract between the tool library (`xtrace/tool`, which fires the `xtrace:*` USDT probes)
//! and xtrace (which reads them): every probe's first argument says which API the range came from.

/// `xtrace_range_*`, xtrace's own C API.
pub const SOURCE_XTRACE: u64 = 1;
/// NVTX (through the NVTX3 injection).
pub const SOURCE_NVTX: u64 = 2;
/// Intel ITT (through the collector).
pub const SOURCE_ITT: u64 = 3;
