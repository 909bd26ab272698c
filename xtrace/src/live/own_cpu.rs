//! xtrace's own CPU time, as the live page shows it beside the loss: the user and system time of
//! the whole xtrace process (every thread: the ring readers, the writer, the symbolizer, the
//! server), from `getrusage(RUSAGE_SELF)`, as a share of one CPU over the last second and over the
//! capture. The kernel programs' own time runs in the traced threads and is not in it
//! (`--overhead` measures that).
use serde::Serialize;

/// What the page is sent: percent of one CPU (200 is two CPUs busy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Figures {
    /// Since the previous snapshot.
    pub last_pct: f64,
    /// Since the capture began.
    pub all_pct: f64,
}

/// The CPU time read at the previous snapshot, and at the capture's start.
#[derive(Debug)]
pub struct OwnCpu {
    begin: (u64, u64),
    last: (u64, u64),
}

impl OwnCpu {
    /// Starts counting at `now_ns` (CLOCK_MONOTONIC), the capture's start.
    pub fn new(now_ns: u64) -> Self {
        let at = (now_ns, cpu_ns());
        OwnCpu { begin: at, last: at }
    }

    /// The figures at `now_ns`.
    pub fn read(&mut self, now_ns: u64) -> Figures {
        let now = (now_ns, cpu_ns());
        let figures = Figures {
            last_pct: share(self.last, now),
            all_pct: share(self.begin, now),
        };
        self.last = now;
        figures
    }
}

/// The CPU time between reads `from` and `to` ((wall ns, CPU ns)) as a percentage of one CPU,
/// to one decimal; 0 over no wall time.
fn share(from: (u64, u64), to: (u64, u64)) -> f64 {
    let wall = to.0.saturating_sub(from.0);
    if wall == 0 {
        return 0.0;
    }
    let pct = to.1.saturating_sub(from.1) as f64 / wall as f64 * 100.0;
    (pct * 10.0).round() / 10.0
}

/// User plus system time of this process, all its threads, in ns.
fn cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the live local it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    let ns = |t: libc::timeval| (t.tv_sec as u64) * 1_000_000_000 + (t.tv_usec as u64) * 1_000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_percent_of_one_cpu_to_one_decimal() {
        assert_eq!(share((0, 0), (1_000_000_000, 250_000_000)), 25.0);
        assert_eq!(share((0, 0), (1_000_000_000, 1_500_000_000)), 150.0);
        assert_eq!(share((0, 0), (3_000_000_000, 1_000_000_000)), 33.3);
        assert_eq!(share((5, 7), (5, 9)), 0.0, "no wall time");
    }

    #[test]
    fn busy_work_is_counted() {
        let mut own = OwnCpu::new(crate::clock::monotonic_ns());
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let figures = own.read(crate::clock::monotonic_ns());
        // A thread spinning for the whole interval is most of a CPU; the bound leaves room for a
        // preempted test thread on a busy machine, and fails when nothing is counted.
        assert!(figures.last_pct >= 20.0, "{figures:?}");
        assert_eq!(figures.last_pct, figures.all_pct);
    }
}
