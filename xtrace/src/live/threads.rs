//! The live view's per-thread activity: for each traced thread, the calls that ended on it over
//! the last 10 s, the last minute and the whole capture, and (when sampling) its share of the CPU
//! samples of the last 10 s, and (with `--off-cpu`) its time off CPU over the last 10 s and the
//! whole capture, blocked (sleeping, uninterruptible) and runnable (waiting for a CPU). Fed once a
//! second with what the pipeline counted since the last snapshot (`pipeline::live::ThreadCounts`,
//! `OffCpuCounts`), kept as a ring of per-second counts per thread, at most [`MAX_THREADS`]
//! threads (the rest are added up as one row); the page is sent the [`SHOWN`] busiest.
use std::collections::HashMap;

use serde::Serialize;

use crate::pipeline::{
    live::{OffCpuCounts, ThreadCounts},
    threads::Names,
};

const SECOND_NS: u64 = 1_000_000_000;
/// The seconds a thread's ring holds: the last minute.
const RING: usize = 60;
/// Threads kept (about 2.5 KiB each); the counts of others go to one row.
pub const MAX_THREADS: usize = 4096;
/// Threads the page is sent, the busiest over the last 10 s (then over the capture).
pub const SHOWN: usize = 20;
/// The name of the row that adds up the threads past [`MAX_THREADS`].
pub const OTHER_THREADS: &str = "[other threads]";

/// What one thread did over a stretch: calls, samples, nanoseconds blocked and runnable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub calls: u64,
    pub samples: u64,
    pub blocked_ns: u64,
    pub runnable_ns: u64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.calls += other.calls;
        self.samples += other.samples;
        self.blocked_ns += other.blocked_ns;
        self.runnable_ns += other.runnable_ns;
    }
}

/// One second of one thread: its index (`ns / SECOND_NS`) and counts.
#[derive(Clone, Copy, Debug, Default)]
struct Second {
    at: u64,
    counts: Counts,
}

/// One thread's counts.
#[derive(Debug)]
struct Thread {
    ring: [Second; RING],
    all: Counts,
}

impl Default for Thread {
    fn default() -> Self {
        Thread {
            ring: [Second::default(); RING],
            all: Counts::default(),
        }
    }
}

impl Thread {
    fn add(&mut self, second: u64, counts: Counts) {
        let slot = &mut self.ring[(second % RING as u64) as usize];
        if slot.at != second {
            *slot = Second {
                at: second,
                ..Second::default()
            };
        }
        slot.counts.add(counts);
        self.all.add(counts);
    }

    /// The counts of the `seconds` up to and including `now`.
    fn last(&self, now: u64, seconds: u64) -> Counts {
        let mut sum = Counts::default();
        for s in self.ring.iter().filter(|s| s.at <= now && s.at + seconds > now) {
            sum.add(s.counts);
        }
        sum
    }
}

/// One thread's time off CPU, as the page shows it; the recent stretch is None for a stored
/// capture (`xtrace view`).
#[derive(Debug, Serialize, PartialEq)]
pub struct OffCpu {
    pub blocked_10s_ns: Option<u64>,
    pub runnable_10s_ns: Option<u64>,
    pub blocked_ns: u64,
    pub runnable_ns: u64,
}

/// One row of the page's thread table.
#[derive(Debug, Serialize, PartialEq)]
pub struct Row {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    pub calls_10s: u64,
    pub calls_60s: u64,
    pub calls: u64,
    /// Percent of all the CPU samples of the last 10 s; None when not sampling.
    pub samples_10s_pct: Option<f64>,
    /// None without `--off-cpu`.
    pub off_cpu: Option<OffCpu>,
}

/// The threads' counts, the publisher's side.
#[derive(Debug, Default)]
pub struct Threads {
    threads: HashMap<(u32, u32), Thread>,
    /// The threads past [`MAX_THREADS`], as one.
    other: Option<Thread>,
    /// Every thread's samples, per second: the 10-second share's denominator.
    all: Thread,
}

impl Threads {
    /// Adds what the pipeline counted since the last call, at `now_ns`: the calls that ended on
    /// each thread, the samples taken of it and (with `--off-cpu`) its time off CPU.
    pub fn add(
        &mut self,
        now_ns: u64,
        calls: ThreadCounts,
        samples: &ThreadCounts,
        off_cpu: Option<&OffCpuCounts>,
    ) {
        let second = now_ns / SECOND_NS;
        let none = OffCpuCounts::default();
        let off = off_cpu.unwrap_or(&none);
        let all = [&calls, samples, &off.blocked, &off.runnable];
        let mut keys: Vec<(u32, u32)> = all.iter().flat_map(|c| c.counts.keys()).copied().collect();
        keys.sort_unstable();
        keys.dedup();
        let of = |c: &ThreadCounts, key| c.counts.get(&key).copied().unwrap_or(0);
        for key in keys {
            let counts = Counts {
                calls: of(&calls, key),
                samples: of(samples, key),
                blocked_ns: of(&off.blocked, key),
                runnable_ns: of(&off.runnable, key),
            };
            self.thread(key).add(second, counts);
            self.all.add(
                second,
                Counts {
                    samples: counts.samples,
                    ..Counts::default()
                },
            );
        }
        let other = Counts {
            calls: calls.other,
            samples: samples.other,
            blocked_ns: off.blocked.other,
            runnable_ns: off.runnable.other,
        };
        if other != Counts::default() {
            self.other.get_or_insert_with(Thread::default).add(second, other);
            self.all.add(
                second,
                Counts {
                    samples: other.samples,
                    ..Counts::default()
                },
            );
        }
    }

    fn thread(&mut self, key: (u32, u32)) -> &mut Thread {
        if self.threads.len() < MAX_THREADS || self.threads.contains_key(&key) {
            self.threads.entry(key).or_default()
        } else {
            self.other.get_or_insert_with(Thread::default)
        }
    }

    /// How many threads were seen (the row of others counts as one).
    pub fn seen(&self) -> usize {
        self.threads.len() + usize::from(self.other.is_some())
    }

    /// The [`SHOWN`] busiest threads at `now_ns`, named by `names`; `sampling`: whether the
    /// samples' shares mean anything, `off_cpu`: whether the time off CPU was counted.
    pub fn rows(&self, now_ns: u64, names: &Names, sampling: bool, off_cpu: bool) -> Vec<Row> {
        let now = now_ns / SECOND_NS;
        let samples_10s = self.all.last(now, 10).samples;
        let row = |pid, tid, name: String, t: &Thread| {
            let ten = t.last(now, 10);
            Row {
                pid,
                tid,
                name,
                calls_10s: ten.calls,
                calls_60s: t.last(now, RING as u64).calls,
                calls: t.all.calls,
                samples_10s_pct: sampling.then(|| match samples_10s {
                    0 => 0.0,
                    all => (ten.samples as f64 * 1000.0 / all as f64).round() / 10.0,
                }),
                off_cpu: off_cpu.then_some(OffCpu {
                    blocked_10s_ns: Some(ten.blocked_ns),
                    runnable_10s_ns: Some(ten.runnable_ns),
                    blocked_ns: t.all.blocked_ns,
                    runnable_ns: t.all.runnable_ns,
                }),
            }
        };
        let mut rows: Vec<Row> = self
            .threads
            .iter()
            .map(|(&(pid, tid), t)| {
                let name = names.thread_label(pid, tid).unwrap_or("?").to_string();
                row(pid, tid, name, t)
            })
            .chain(self.other.iter().map(|t| row(0, 0, OTHER_THREADS.to_string(), t)))
            .collect();
        let off_10s = |r: &Row| {
            r.off_cpu.as_ref().map_or(0, |o| {
                o.blocked_10s_ns.unwrap_or(0) + o.runnable_10s_ns.unwrap_or(0)
            })
        };
        rows.sort_by(|a, b| {
            (b.calls_10s, b.samples_10s_pct.unwrap_or(0.0), b.calls, off_10s(b))
                .partial_cmp(&(a.calls_10s, a.samples_10s_pct.unwrap_or(0.0), a.calls, off_10s(a)))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then((a.pid, a.tid).cmp(&(b.pid, b.tid)))
        });
        rows.truncate(SHOWN);
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(of: &[((u32, u32), u64)]) -> ThreadCounts {
        ThreadCounts {
            counts: of.iter().copied().collect(),
            other: 0,
        }
    }

    #[test]
    fn stretches_and_shares() {
        let mut threads = Threads::default();
        // Thread 11: 5 calls a second for 30 s; thread 12: 1 sample a second, 11 three.
        for s in 1..=30u64 {
            threads.add(
                s * SECOND_NS,
                counts(&[((10, 11), 5)]),
                &counts(&[((10, 11), 3), ((10, 12), 1)]),
                None,
            );
        }
        let rows = threads.rows(30 * SECOND_NS + 5, &Names::default(), true, false);
        assert_eq!(
            rows[0],
            Row {
                pid: 10,
                tid: 11,
                name: "?".into(),
                calls_10s: 50,
                calls_60s: 150,
                calls: 150,
                samples_10s_pct: Some(75.0),
                off_cpu: None,
            }
        );
        assert_eq!(
            (rows[1].tid, rows[1].calls, rows[1].samples_10s_pct),
            (12, 0, Some(25.0))
        );
        // A minute later, the recent stretches are empty and the capture's count stays.
        let later = threads.rows(200 * SECOND_NS, &Names::default(), false, false);
        assert_eq!(
            (
                later[0].calls_10s,
                later[0].calls_60s,
                later[0].calls,
                later[0].samples_10s_pct
            ),
            (0, 0, 150, None)
        );
    }

    #[test]
    fn threads_are_capped_and_the_busiest_shown() {
        let mut threads = Threads::default();
        let many: Vec<((u32, u32), u64)> = (0..MAX_THREADS as u32 + 3)
            .map(|t| ((1, t), u64::from(t) + 1))
            .collect();
        threads.add(SECOND_NS, counts(&many), &ThreadCounts::default(), None);
        assert_eq!(threads.seen(), MAX_THREADS + 1);
        let rows = threads.rows(SECOND_NS, &Names::default(), false, false);
        assert_eq!(rows.len(), SHOWN);
        // The three past the cap, added up, are the busiest.
        assert_eq!(rows[0].name, OTHER_THREADS);
        let past: u64 = (MAX_THREADS as u64..MAX_THREADS as u64 + 3).map(|t| t + 1).sum();
        assert_eq!(rows[0].calls, past);
        assert_eq!(rows[1].tid, MAX_THREADS as u32 - 1);
    }

    /// Time off CPU: blocked and runnable apart, over the last 10 s and the capture; a thread
    /// that only waited has a row, after those with calls.
    #[test]
    fn off_cpu_time_over_the_last_10_s_and_the_capture() {
        let mut threads = Threads::default();
        for s in 1..=20u64 {
            let off = OffCpuCounts {
                blocked: counts(&[((10, 12), 1_000)]),
                runnable: counts(&[((10, 12), 10), ((10, 13), 1)]),
            };
            threads.add(
                s * SECOND_NS,
                counts(&[((10, 11), 1)]),
                &ThreadCounts::default(),
                Some(&off),
            );
        }
        let rows = threads.rows(20 * SECOND_NS, &Names::default(), false, true);
        assert_eq!(rows.iter().map(|r| r.tid).collect::<Vec<_>>(), [11, 12, 13]);
        assert_eq!(
            rows[1].off_cpu,
            Some(OffCpu {
                blocked_10s_ns: Some(10_000),
                runnable_10s_ns: Some(100),
                blocked_ns: 20_000,
                runnable_ns: 200,
            })
        );
        assert_eq!(rows[0].off_cpu.as_ref().map(|o| o.blocked_ns), Some(0));
        assert!(threads.rows(20 * SECOND_NS, &Names::default(), false, false)[1]
            .off_cpu
            .is_none());
    }
}
