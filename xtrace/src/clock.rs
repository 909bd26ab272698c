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

/// One reading of the clocks a capture's times can be converted to: CLOCK_MONOTONIC (the
/// capture's own clock) paired with CLOCK_REALTIME (wall time) and CLOCK_BOOTTIME (monotonic plus
/// time suspended), in ns. Written into the Perfetto trace as a ClockSnapshot and into
/// summary.json as `clock`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Snapshot {
    pub monotonic_ns: u64,
    pub realtime_ns: u64,
    pub boottime_ns: u64,
}

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The three clocks now: CLOCK_MONOTONIC is read before and after the other two, and its
/// midpoint kept, so the pairs are off by at most half the reads' time (well under 1 µs).
pub fn snapshot() -> Snapshot {
    let before = monotonic_ns();
    let realtime_ns = read(libc::CLOCK_REALTIME);
    let boottime_ns = read(libc::CLOCK_BOOTTIME);
    let after = monotonic_ns();
    Snapshot {
        monotonic_ns: before + (after - before) / 2,
        realtime_ns,
        boottime_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_pairs_the_clocks() {
        let s = snapshot();
        // Boot time runs at least as far as monotonic time (it adds the time suspended).
        assert!(s.boottime_ns + 1_000_000 >= s.monotonic_ns, "{s:?}");
        // Wall time is after 2020.
        assert!(s.realtime_ns > 1_577_836_800_000_000_000, "{s:?}");
    }
}
