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
    /// How long the pair took to read (the two CLOCK_MONOTONIC reads around the others): the
    /// clocks are paired to within half of it. 0 where not known (a pair read back from a file
    /// without it).
    pub read_ns: u64,
    /// The kernel's estimate of CLOCK_REALTIME's error (`adjtimex`'s `esterror`, kept up to date
    /// by an NTP or PTP daemon); None while the clock is not synchronized.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_ns: Option<u64>,
}

impl Snapshot {
    /// A pair as summary.json's `clock.start` or `clock.end` holds it (what is missing is 0).
    pub fn from_json(c: &serde_json::Value) -> Snapshot {
        let ns = |k: &str| c[k].as_u64().unwrap_or(0);
        Snapshot {
            monotonic_ns: ns("monotonic_ns"),
            realtime_ns: ns("realtime_ns"),
            boottime_ns: ns("boottime_ns"),
            read_ns: ns("read_ns"),
            error_ns: c["error_ns"].as_u64(),
        }
    }
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

/// Reads of the pair taken; the quickest is kept.
const READS: usize = 5;

/// The three clocks now: CLOCK_MONOTONIC is read before and after the other two, and its
/// midpoint kept, so the pairs are off by at most half the reads' time. Of [`READS`] reads the
/// quickest is kept (a read the scheduler interrupted takes milliseconds); with the kernel's
/// error estimate of the wall clock.
pub fn snapshot() -> Snapshot {
    let once = || {
        let before = monotonic_ns();
        let realtime_ns = read(libc::CLOCK_REALTIME);
        let boottime_ns = read(libc::CLOCK_BOOTTIME);
        let after = monotonic_ns();
        Snapshot {
            monotonic_ns: before + (after - before) / 2,
            realtime_ns,
            boottime_ns,
            read_ns: after - before,
            error_ns: None,
        }
    };
    let quickest = (0..READS)
        .map(|_| once())
        .min_by_key(|s| s.read_ns)
        .unwrap_or_default();
    Snapshot {
        error_ns: realtime_error_ns(),
        ..quickest
    }
}

/// The kernel's estimate of CLOCK_REALTIME's error, in ns; None while it is not synchronized.
fn realtime_error_ns() -> Option<u64> {
    // SAFETY: timex is plain data; all zero (modes 0) asks adjtimex to read, not to set.
    let mut timex: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: adjtimex writes one timex.
    let state = unsafe { libc::adjtimex(&mut timex) };
    let unsynchronized = state == libc::TIME_ERROR || timex.status & libc::STA_UNSYNC != 0;
    match (state, unsynchronized) {
        (-1, _) | (_, true) => None,
        _ => u64::try_from(timex.esterror).ok().map(|us| us * 1000),
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
        // The quickest of five reads of three vDSO clocks takes well under a millisecond.
        assert!(s.read_ns < 1_000_000, "{s:?}");
    }
}
