//! The clock every timestamp of a capture is on.

/// CLOCK_MONOTONIC in ns: what `bpf_ktime_get_ns` reads in the kernel programs, and what the tool
/// library stamps range starts with.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
