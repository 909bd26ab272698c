//! Short waits on the timeline (`--off-cpu`): waits shorter than MIN are added up in the kernel
//! per thread and stack, with no time of their own, so a thread that blocks 10,000 times a
//! second for 50 µs would look as if it never waited. The session reads the kernel's table once
//! a second and as the capture ends; [`ShortWaits`] turns what each thread's keys gained since
//! the last read into two counter tracks of that thread, [`BLOCKED_TRACK`] and [`COUNT_TRACK`],
//! each point stamped at the start of the stretch it covers and holding until the next. Waiting
//! for a CPU (`runnable`) is not blocked time and is left out. Added up over the capture, the
//! points are the thread's added-up waits to the nanosecond and the wait.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use xtrace_common::offcpu::{state, OffCpuKey, OffCpuTotal};

use super::writer::{EventKind, SpanOut};
use crate::model::wait::TIMELINE_CATEGORY;

/// The track of a thread's blocked time in waits shorter than MIN, per stretch.
pub const BLOCKED_TRACK: &str = "short waits (ns)";
/// The track of how many waits shorter than MIN a thread made, per stretch.
pub const COUNT_TRACK: &str = "short waits (count)";

/// What a thread's short waits gained over one stretch: nanoseconds blocked and waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gained {
    pub ns: u64,
    pub count: u64,
}

/// The reads of the kernel's table so far, for the counters' next points.
#[derive(Debug, Default)]
pub struct ShortWaits {
    /// Each key's total at the last read.
    last: HashMap<OffCpuKey, OffCpuTotal>,
    /// When the stretch the next read covers began (the last read, or the capture's start).
    since_ns: Option<u64>,
    /// Threads whose last point was not 0: a stretch without short waits sets them back to 0.
    raised: BTreeSet<(u32, u32)>,
}

impl ShortWaits {
    /// Begins the first stretch at `ns` (the capture's start); without it, at the first read.
    pub fn starting(ns: u64) -> Self {
        ShortWaits {
            since_ns: Some(ns),
            ..ShortWaits::default()
        }
    }

    /// The table as read at `now_ns`: per thread that gained blocked short waits since the last
    /// read, or whose last point was not 0, the stretch's gain (by pid and tid), stamped at the
    /// stretch's start, which is returned too. A key whose total went down (a table read back
    /// from an emptied map) counts from 0.
    pub fn read(
        &mut self,
        now_ns: u64,
        totals: &[(OffCpuKey, OffCpuTotal)],
    ) -> (u64, BTreeMap<(u32, u32), Gained>) {
        let since = self.since_ns.replace(now_ns).unwrap_or(now_ns);
        let mut gains: BTreeMap<(u32, u32), Gained> = BTreeMap::new();
        for (key, total) in totals {
            let before = self.last.insert(*key, *total).unwrap_or_default();
            if key.state == state::RUNNABLE {
                continue;
            }
            let (count, ns) = match total.count >= before.count && total.total_ns >= before.total_ns {
                true => (total.count - before.count, total.total_ns - before.total_ns),
                false => (total.count, total.total_ns),
            };
            if count > 0 || ns > 0 {
                let gained = gains.entry((key.pid, key.tid)).or_default();
                gained.ns += ns;
                gained.count += count;
            }
        }
        // Back to 0 for a thread that waited in the stretch before and not in this one.
        for thread in std::mem::take(&mut self.raised) {
            gains.entry(thread).or_default();
        }
        self.raised = gains
            .iter()
            .filter(|(_, g)| **g != Gained::default())
            .map(|(thread, _)| *thread)
            .collect();
        (since, gains)
    }

    /// The points that set every thread raised back to 0 at `ns`, the capture's end.
    pub fn ended(&mut self, ns: u64) -> Vec<SpanOut> {
        let raised = std::mem::take(&mut self.raised);
        raised
            .into_iter()
            .flat_map(|thread| points(thread, ns, Gained::default()))
            .collect()
    }
}

/// The two counter points of thread `(pid, tid)` for a stretch beginning at `ns`.
pub fn points((pid, tid): (u32, u32), ns: u64, gained: Gained) -> [SpanOut; 2] {
    let point = |track: &str, value| SpanOut {
        probe: usize::MAX,
        pid,
        tid,
        start_ns: ns,
        kind: EventKind::ThreadCounter(value),
        name: Some(track.into()),
        cat: Some(TIMELINE_CATEGORY.into()),
        ..SpanOut::default()
    };
    [point(BLOCKED_TRACK, gained.ns), point(COUNT_TRACK, gained.count)]
}

impl<W: std::io::Write + Send + 'static> super::Pipeline<W> {
    /// With `--off-cpu`: the kernel's table of added-up waits (`totals`) read at `now_ns`: the
    /// points of each thread's short waits since the last read; at the capture's `end`, then
    /// the threads' counters back to 0. Not with `--flight`, whose directories hold the waits.
    pub fn off_cpu_read(
        &mut self,
        now_ns: u64,
        totals: &[(OffCpuKey, OffCpuTotal)],
        end: bool,
    ) -> std::io::Result<()> {
        self.live_off_cpu_read(totals);
        let Some(short_waits) = self.short_waits.as_mut().filter(|_| self.flight.is_none()) else {
            return Ok(());
        };
        let (since, gains) = short_waits.read(now_ns, totals);
        let mut out: Vec<SpanOut> = gains
            .into_iter()
            .flat_map(|(thread, gained)| points(thread, since, gained))
            .collect();
        if end {
            out.extend(short_waits.ended(now_ns));
        }
        for point in out {
            self.trace.span(point)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tid: u32, state: u32, user_stack: i32) -> OffCpuKey {
        OffCpuKey {
            pid: 7,
            tid,
            user_stack,
            state,
            syscall: 230,
            ..OffCpuKey::default()
        }
    }

    fn total(count: u64, total_ns: u64) -> OffCpuTotal {
        OffCpuTotal { count, total_ns }
    }

    /// Each read gives what a thread's keys gained since the last, runnable time left out; a
    /// thread with nothing new gets one 0, then nothing; the end sets the raised ones to 0.
    #[test]
    fn each_read_gives_what_each_thread_gained_since_the_last() {
        let mut waits = ShortWaits::starting(100);
        let sleeping = key(8, state::SLEEPING, 1);
        let other_stack = key(8, state::SLEEPING, 2);
        let runnable = key(8, state::RUNNABLE, 1);
        let other = key(9, state::UNINTERRUPTIBLE, -1);
        let first = [
            (sleeping, total(3, 300)),
            (runnable, total(5, 50)),
            (other, total(1, 10)),
        ];
        let (since, gains) = waits.read(1_100, &first);
        assert_eq!(since, 100);
        let want = BTreeMap::from([
            ((7, 8), Gained { ns: 300, count: 3 }),
            ((7, 9), Gained { ns: 10, count: 1 }),
        ]);
        assert_eq!(gains, want);
        let second = [
            (sleeping, total(5, 500)),
            (other_stack, total(1, 7)),
            (runnable, total(9, 90)),
            (other, total(1, 10)),
        ];
        let (since, gains) = waits.read(2_100, &second);
        assert_eq!(since, 1_100);
        let want = BTreeMap::from([
            ((7, 8), Gained { ns: 207, count: 3 }),
            ((7, 9), Gained::default()),
        ]);
        assert_eq!(gains, want);
        let (since, gains) = waits.read(3_100, &second);
        assert_eq!(since, 2_100);
        assert_eq!(gains, BTreeMap::from([((7, 8), Gained::default())]));
        assert!(waits.read(4_100, &second).1.is_empty());
        // Raised at the end: a 0 on both tracks as the capture ends.
        let third = [(other, total(4, 40))];
        assert_eq!(waits.read(5_100, &third).1.len(), 1);
        let ended = waits.ended(5_500);
        assert_eq!(ended.len(), 2);
        assert!(ended
            .iter()
            .all(|p| p.tid == 9 && p.start_ns == 5_500 && p.kind == EventKind::ThreadCounter(0)));
        assert_eq!(
            ended.iter().map(|p| p.name.as_deref()).collect::<Vec<_>>(),
            [Some(BLOCKED_TRACK), Some(COUNT_TRACK)]
        );
    }

    /// Without a start, the first stretch begins at the first read.
    #[test]
    fn without_a_start_the_first_stretch_begins_at_the_first_read() {
        let mut waits = ShortWaits::default();
        let (since, gains) = waits.read(500, &[(key(8, state::SLEEPING, 1), total(2, 20))]);
        assert_eq!((since, gains[&(7, 8)]), (500, Gained { ns: 20, count: 2 }));
    }
}
