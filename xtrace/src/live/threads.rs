//! The live view's per-thread activity: for each traced thread, the calls that ended on it over
//! the last 10 s, the last minute and the whole capture, and (when sampling) its share of the CPU
//! samples of the last 10 s. Fed once a second with what the pipeline counted since the last
//! snapshot (`pipeline::live::ThreadCounts`), kept as a ring of per-second counts per thread, at
//! most [`MAX_THREADS`] threads (the rest are added up as one row); the page is sent the
//! [`SHOWN`] busiest.
use std::collections::HashMap;

use serde::Serialize;

use crate::pipeline::{live::ThreadCounts, threads::Names};

const SECOND_NS: u64 = 1_000_000_000;
/// The seconds a thread's ring holds: the last minute.
const RING: usize = 60;
/// Threads kept (about 1 KiB each); the counts of others go to one row.
pub const MAX_THREADS: usize = 4096;
/// Threads the page is sent, the busiest over the last 10 s (then over the capture).
pub const SHOWN: usize = 20;
/// The name of the row that adds up the threads past [`MAX_THREADS`].
pub const OTHER_THREADS: &str = "[other threads]";

/// One second of one thread: its index (`ns / SECOND_NS`), calls and samples.
#[derive(Clone, Copy, Debug, Default)]
struct Second {
    at: u64,
    calls: u64,
    samples: u64,
}

/// One thread's counts.
#[derive(Debug)]
struct Thread {
    ring: [Second; RING],
    calls: u64,
    samples: u64,
}

impl Default for Thread {
    fn default() -> Self {
        Thread {
            ring: [Second::default(); RING],
            calls: 0,
            samples: 0,
        }
    }
}

impl Thread {
    fn add(&mut self, second: u64, calls: u64, samples: u64) {
        let slot = &mut self.ring[(second % RING as u64) as usize];
        if slot.at != second {
            *slot = Second {
                at: second,
                ..Second::default()
            };
        }
        slot.calls += calls;
        slot.samples += samples;
        self.calls += calls;
        self.samples += samples;
    }

    /// Calls and samples of the `seconds` up to and including `now`.
    fn last(&self, now: u64, seconds: u64) -> (u64, u64) {
        self.ring
            .iter()
            .filter(|s| s.at <= now && s.at + seconds > now && (s.calls > 0 || s.samples > 0))
            .fold((0, 0), |(c, n), s| (c + s.calls, n + s.samples))
    }
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
    /// Adds what the pipeline counted since the last call, at `now_ns`.
    pub fn add(&mut self, now_ns: u64, calls: ThreadCounts, samples: &ThreadCounts) {
        let second = now_ns / SECOND_NS;
        let mut keys: Vec<(u32, u32)> = calls
            .counts
            .keys()
            .chain(samples.counts.keys())
            .copied()
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            let (c, s) = (
                calls.counts.get(&key).copied().unwrap_or(0),
                samples.counts.get(&key).copied().unwrap_or(0),
            );
            self.thread(key).add(second, c, s);
            self.all.add(second, 0, s);
        }
        if calls.other > 0 || samples.other > 0 {
            self.other
                .get_or_insert_with(Thread::default)
                .add(second, calls.other, samples.other);
            self.all.add(second, 0, samples.other);
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
    /// samples' shares mean anything.
    pub fn rows(&self, now_ns: u64, names: &Names, sampling: bool) -> Vec<Row> {
        let now = now_ns / SECOND_NS;
        let (_, samples_10s) = self.all.last(now, 10);
        let row = |pid, tid, name: String, t: &Thread| {
            let (calls_10s, own_10s) = t.last(now, 10);
            Row {
                pid,
                tid,
                name,
                calls_10s,
                calls_60s: t.last(now, RING as u64).0,
                calls: t.calls,
                samples_10s_pct: sampling.then(|| match samples_10s {
                    0 => 0.0,
                    all => (own_10s as f64 * 1000.0 / all as f64).round() / 10.0,
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
        rows.sort_by(|a, b| {
            (b.calls_10s, b.samples_10s_pct.unwrap_or(0.0), b.calls)
                .partial_cmp(&(a.calls_10s, a.samples_10s_pct.unwrap_or(0.0), a.calls))
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
            );
        }
        let rows = threads.rows(30 * SECOND_NS + 5, &Names::default(), true);
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
            }
        );
        assert_eq!(
            (rows[1].tid, rows[1].calls, rows[1].samples_10s_pct),
            (12, 0, Some(25.0))
        );
        // A minute later, the recent stretches are empty and the capture's count stays.
        let later = threads.rows(200 * SECOND_NS, &Names::default(), false);
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
        threads.add(SECOND_NS, counts(&many), &ThreadCounts::default());
        assert_eq!(threads.seen(), MAX_THREADS + 1);
        let rows = threads.rows(SECOND_NS, &Names::default(), false);
        assert_eq!(rows.len(), SHOWN);
        // The three past the cap, added up, are the busiest.
        assert_eq!(rows[0].name, OTHER_THREADS);
        let past: u64 = (MAX_THREADS as u64..MAX_THREADS as u64 + 3).map(|t| t + 1).sum();
        assert_eq!(rows[0].calls, past);
        assert_eq!(rows[1].tid, MAX_THREADS as u32 - 1);
    }
}
