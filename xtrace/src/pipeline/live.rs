//! What the live view needs of the records as they come, bounded: per probe, a ring of
//! per-second duration histograms (`Window` of [`ProbeStats`], the last minute), which gives the
//! count, rate, p50 and p99 of the last 10 s and the last minute; and the CPU samples' stacks
//! since the live view last took them (at most [`MAX_RECENT_STACKS`] distinct ones; the rest are
//! counted as `other`); and per thread, the calls that ended on it and the samples taken of it
//! since the live view last took them (at most [`MAX_RECENT_THREADS`] threads; the rest are
//! counted as `other`), and with `--off-cpu` their time off CPU since then, blocked and runnable
//! ([`RecentOffCpu`]: the waits sent one by one as they come, the kernel's added-up ones by what
//! its table gained between two reads).
use std::collections::HashMap;

use xtrace_common::offcpu::{state, OffCpuKey, OffCpuTotal};

use super::{
    samples::StackKey,
    stats::{Distribution, ProbeStats},
    window::{Slot, Window},
};

/// One second of one probe's calls.
#[derive(Debug, Default)]
pub struct Second(ProbeStats);

impl Slot for Second {
    fn bytes(&self) -> usize {
        self.0.bytes()
    }
    fn events(&self) -> u64 {
        self.0.count()
    }
}

const SECOND_NS: u64 = 1_000_000_000;
/// The longest stretch shown: the last minute.
pub const RECENT_NS: u64 = 60 * SECOND_NS;
/// Bytes of histograms one probe may keep for its last minute: past it, its window shortens.
const PROBE_CAP_BYTES: usize = 1 << 20;
/// Distinct stacks kept between two takes; the samples of others are counted only.
pub const MAX_RECENT_STACKS: usize = 10_000;

/// Distinct threads counted between two takes; the calls and samples of others are counted only.
pub const MAX_RECENT_THREADS: usize = 10_000;

/// The calls of the last minute, per probe, and those since the last take, per thread.
#[derive(Debug)]
pub struct RecentCalls {
    probes: Vec<Recent>,
    /// The calls that ended on each thread since the live view last took them.
    pub threads: ThreadCounts,
}

/// Counts per thread (pid, tid) since the live view last took them (hashed as the thread names
/// are: this is asked once per span).
#[derive(Debug, Default)]
pub struct ThreadCounts {
    pub counts: HashMap<(u32, u32), u64, std::hash::BuildHasherDefault<super::threads::TidHasher>>,
    /// Counts of threads past [`MAX_RECENT_THREADS`].
    pub other: u64,
}

impl ThreadCounts {
    /// Counts `n` for thread `tid` of process `pid`.
    pub fn add(&mut self, pid: u32, tid: u32, n: u64) {
        if let Some(count) = self.counts.get_mut(&(pid, tid)) {
            *count += n;
        } else if self.counts.len() < MAX_RECENT_THREADS {
            self.counts.insert((pid, tid), n);
        } else {
            self.other += n;
        }
    }
}

/// Nanoseconds off CPU per thread since the live view last took them.
#[derive(Debug, Default)]
pub struct OffCpuCounts {
    /// Sleeping or in uninterruptible sleep.
    pub blocked: ThreadCounts,
    /// Waiting for a CPU.
    pub runnable: ThreadCounts,
}

/// The off-CPU time the live view has not taken yet (`--off-cpu`), and the kernel's table of
/// added-up waits as last read (at most its `OFF_CPU_KEYS` keys), for what it gains next.
#[derive(Debug, Default)]
pub struct RecentOffCpu {
    counts: OffCpuCounts,
    last: HashMap<OffCpuKey, OffCpuTotal>,
}

impl RecentOffCpu {
    /// `ns` off CPU of thread `tid` of `pid` in scheduler state `state`.
    pub fn add(&mut self, (pid, tid): (u32, u32), wait_state: u32, ns: u64) {
        if ns == 0 {
            return;
        }
        match wait_state {
            state::RUNNABLE => self.counts.runnable.add(pid, tid, ns),
            state::SLEEPING | state::UNINTERRUPTIBLE => self.counts.blocked.add(pid, tid, ns),
            _ => {}
        }
    }

    /// The kernel's table of added-up waits as read now: what each key gained since the last
    /// read (all of it for a key whose total went down, a table emptied and read back).
    pub fn read(&mut self, totals: &[(OffCpuKey, OffCpuTotal)]) {
        for (key, total) in totals {
            let before = self.last.insert(*key, *total).unwrap_or_default();
            let ns = match total.total_ns >= before.total_ns && total.count >= before.count {
                true => total.total_ns - before.total_ns,
                false => total.total_ns,
            };
            self.add((key.pid, key.tid), key.state, ns);
        }
    }

    /// Takes what was counted since the last take.
    pub fn take(&mut self) -> OffCpuCounts {
        std::mem::take(&mut self.counts)
    }
}

/// One probe's window, and the second being filled: a call of that second costs what adding to
/// the probe's own statistics does; the second goes into the window once it is over (or read).
#[derive(Debug)]
struct Recent {
    window: Window<Second>,
    /// The index (`ns / SECOND_NS`) of the second being filled, and its calls.
    current: Option<(u64, ProbeStats)>,
}

impl Recent {
    /// Puts the second being filled into the window.
    fn flush(&mut self) {
        if let Some((second, stats)) = self.current.take() {
            self.window.add(second * SECOND_NS, |s| s.0.merge(&stats));
        }
    }
}

/// One probe's calls over a recent stretch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stretch {
    pub calls: Distribution,
    /// The nanoseconds the stretch covers: shorter than asked for early in a capture, or where
    /// the probe's byte cap shortened its window.
    pub covered_ns: u64,
}

impl RecentCalls {
    pub fn new(probes: usize) -> Self {
        RecentCalls {
            probes: (0..probes)
                .map(|_| Recent {
                    window: Window::new(SECOND_NS, RECENT_NS, PROBE_CAP_BYTES),
                    current: None,
                })
                .collect(),
            threads: ThreadCounts::default(),
        }
    }

    /// A call of `probe` that ended at `end_ns` and took `duration_ns`.
    pub fn span(&mut self, probe: usize, end_ns: u64, duration_ns: u64) {
        let Some(recent) = self.probes.get_mut(probe) else {
            return;
        };
        let second = end_ns / SECOND_NS;
        match &mut recent.current {
            Some((current, stats)) if *current == second => stats.add(duration_ns),
            // A record a little late, from a CPU behind the others: to its own second.
            Some((current, _)) if second < *current => {
                recent.window.add(end_ns, |s| s.0.add(duration_ns));
            }
            _ => {
                recent.flush();
                let mut stats = ProbeStats::default();
                stats.add(duration_ns);
                recent.current = Some((second, stats));
            }
        }
    }

    /// The calls of `probe` over the `span_ns` before `now_ns` (at most [`RECENT_NS`]), and
    /// not before `begin_ns`, the capture's start, for its length.
    pub fn stretch(&mut self, probe: usize, now_ns: u64, span_ns: u64, begin_ns: u64) -> Stretch {
        let Some(recent) = self.probes.get_mut(probe) else {
            return Stretch::default();
        };
        recent.flush();
        let window = &mut recent.window;
        window.advance(now_ns);
        let mut from = now_ns.saturating_sub(span_ns);
        if window.aged_out().slots > 0 {
            // Slots dropped (by age or by the byte cap): the stretch begins no earlier than the
            // oldest slot kept.
            if let Some((oldest, _)) = window.slots().next() {
                from = from.max(oldest);
            }
        }
        let mut merged = ProbeStats::default();
        for (_, second) in window.since(from) {
            merged.merge(&second.0);
        }
        // Calls that ended before the capture's start (while the sampler was attached) count in
        // its first second.
        let from = from.max(begin_ns);
        Stretch {
            calls: merged.distribution(),
            covered_ns: now_ns.saturating_sub(from),
        }
    }
}

/// The stacks sampled since the live view last took them.
#[derive(Debug, Default)]
pub struct RecentStacks {
    pub stacks: HashMap<StackKey, u64>,
    /// Samples of stacks past [`MAX_RECENT_STACKS`].
    pub other: u64,
    /// The samples of each thread.
    pub threads: ThreadCounts,
}

impl RecentStacks {
    /// Counts `weight` samples of `key`, taken of thread `tid`.
    pub fn add(&mut self, key: &StackKey, tid: u32, weight: u64) {
        self.threads.add(key.pid, tid, weight);
        if let Some(n) = self.stacks.get_mut(key) {
            *n += weight;
        } else if self.stacks.len() < MAX_RECENT_STACKS {
            self.stacks.insert(key.clone(), weight);
        } else {
            self.other += weight;
        }
    }
}

/// What the live view reads of a pipeline once a second.
pub struct LiveParts<'a> {
    /// Indexed by probe id: every call so far.
    pub stats: &'a [super::stats::ProbeStats],
    pub recent: &'a mut RecentCalls,
    /// The stacks sampled since the last call, taken (with their threads' samples).
    pub stacks: RecentStacks,
    /// The calls that ended on each thread since the last call, taken.
    pub thread_calls: ThreadCounts,
    /// The threads' names.
    pub names: &'a super::threads::Names,
    pub samples_total: u64,
    pub images: &'a mut crate::image::Images,
    pub python: &'a crate::python::Python,
    pub bpf: Option<&'a super::bpf_symbols::BpfSymbols>,
    /// Each process's CUDA device memory allocated by traced calls and not freed, now.
    pub cuda_memory: Vec<(u32, u64)>,
    /// With `--off-cpu`: each thread's time off CPU since the last call, taken.
    pub off_cpu: Option<OffCpuCounts>,
}

/// The live view's side of a pipeline.
impl<W: std::io::Write + Send + 'static> super::Pipeline<W> {
    /// Keeps what the live view shows from here on: each probe's calls of the last minute, the
    /// stacks sampled between two [`Pipeline::live_parts`].
    pub fn watch_live(&mut self) {
        self.recent = Some(RecentCalls::new(self.stats.len()));
        self.families.sampling.samples.recent = Some(RecentStacks::default());
        if let Some(waits) = &mut self.families.off_cpu.waits {
            waits.recent = Some(RecentOffCpu::default());
        }
    }

    /// With the live view and `--off-cpu`: the kernel's table of added-up waits, as read now.
    pub(super) fn live_off_cpu_read(&mut self, totals: &[(OffCpuKey, OffCpuTotal)]) {
        if let Some(recent) = self
            .families
            .off_cpu
            .waits
            .as_mut()
            .and_then(|w| w.recent.as_mut())
        {
            recent.read(totals);
        }
    }

    /// What the live view reads, the stacks sampled since the last call taken; None unless
    /// [`Pipeline::watch_live`] was called.
    pub fn live_parts(&mut self) -> Option<LiveParts<'_>> {
        let stacks = std::mem::take(self.families.sampling.samples.recent.as_mut()?);
        let off_cpu = self
            .families
            .off_cpu
            .waits
            .as_mut()
            .and_then(|w| w.recent.as_mut())
            .map(RecentOffCpu::take);
        let recent = self.recent.as_mut()?;
        let thread_calls = std::mem::take(&mut recent.threads);
        Some(LiveParts {
            stats: &self.stats,
            recent,
            stacks,
            thread_calls,
            names: &self.names,
            samples_total: self.families.sampling.samples.total,
            images: &mut self.images,
            python: &self.python,
            bpf: self.families.sampling.samples.bpf.as_ref(),
            cuda_memory: self
                .families
                .cuda
                .calls
                .totals
                .memory
                .iter()
                .filter(|((space, _), _)| *space == crate::model::cuda_api::Space::Device)
                .map(|(&(_, pid), memory)| (pid, memory.current))
                .collect(),
            off_cpu,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stretches_count_their_seconds_only() {
        let mut recent = RecentCalls::new(2);
        // 5 calls a second for 30 s, of 1000 ns, then one second of 100 calls of 50 ns.
        for s in 0..30u64 {
            for i in 0..5 {
                recent.span(0, s * SECOND_NS + i, 1000);
            }
        }
        for i in 0..100 {
            recent.span(0, 30 * SECOND_NS + i, 50);
        }
        let now = 31 * SECOND_NS;
        let ten = recent.stretch(0, now, 10 * SECOND_NS, 0);
        // Seconds 21..=30: 9 × 5 + 100 calls.
        assert_eq!(ten.calls.count, 145);
        assert_eq!(ten.covered_ns, 10 * SECOND_NS);
        assert_eq!(ten.calls.p50_ns, 50);
        assert_eq!(ten.calls.p99_ns, 1000);
        let minute = recent.stretch(0, now, RECENT_NS, 0);
        assert_eq!(minute.calls.count, 250);
        assert_eq!(minute.covered_ns, now);
        assert_eq!(recent.stretch(1, now, RECENT_NS, 0).calls.count, 0);
        assert_eq!(recent.stretch(7, now, RECENT_NS, 0), Stretch::default());
    }

    #[test]
    fn late_calls_count_in_their_own_second() {
        let mut recent = RecentCalls::new(1);
        recent.span(0, 5 * SECOND_NS, 10);
        recent.span(0, 6 * SECOND_NS, 10);
        // From a CPU behind the others: second 5, after second 6 began.
        recent.span(0, 5 * SECOND_NS + 7, 30);
        let now = 7 * SECOND_NS;
        let last = recent.stretch(0, now, SECOND_NS, 0);
        assert_eq!(last.calls.count, 1, "second 6 only");
        let two = recent.stretch(0, now, 2 * SECOND_NS, 0);
        assert_eq!((two.calls.count, two.calls.max_ns), (3, 30));
    }

    #[test]
    fn a_minute_later_nothing_is_left() {
        let mut recent = RecentCalls::new(1);
        recent.span(0, SECOND_NS, 10);
        let later = recent.stretch(0, 100 * SECOND_NS, RECENT_NS, 0);
        assert_eq!(later.calls.count, 0);
    }

    /// Waits counted as they come, and the kernel's table by what each key gained between two
    /// reads, runnable apart from blocked.
    #[test]
    fn off_cpu_time_is_what_came_since_the_last_take() {
        let key = |tid, state| OffCpuKey {
            pid: 7,
            tid,
            state,
            ..OffCpuKey::default()
        };
        let total = |count, total_ns| OffCpuTotal { count, total_ns };
        let mut recent = RecentOffCpu::default();
        recent.add((7, 8), state::SLEEPING, 50);
        recent.add((7, 8), state::UNINTERRUPTIBLE, 5);
        recent.add((7, 8), state::RUNNABLE, 3);
        recent.add((7, 9), state::SLEEPING, 0);
        recent.read(&[
            (key(8, state::SLEEPING), total(2, 100)),
            (key(9, state::RUNNABLE), total(1, 7)),
        ]);
        let taken = recent.take();
        assert_eq!(taken.blocked.counts.get(&(7, 8)), Some(&155));
        assert_eq!(taken.runnable.counts.get(&(7, 8)), Some(&3));
        assert_eq!(taken.runnable.counts.get(&(7, 9)), Some(&7));
        assert_eq!(taken.blocked.counts.len(), 1, "a wait of 0 ns counts nothing");
        // The next read: what the keys gained; a key whose total went down counts from 0.
        recent.read(&[
            (key(8, state::SLEEPING), total(3, 130)),
            (key(9, state::RUNNABLE), total(1, 2)),
        ]);
        let taken = recent.take();
        assert_eq!(taken.blocked.counts.get(&(7, 8)), Some(&30));
        assert_eq!(taken.runnable.counts.get(&(7, 9)), Some(&2));
        assert!(recent.take().blocked.counts.is_empty());
    }

    #[test]
    fn distinct_stacks_are_capped() {
        let mut recent = RecentStacks::default();
        let key = |pid| StackKey {
            pid,
            image: 0,
            mapped: 0,
            kernel: Box::new([]),
            user: Box::new([1, 2]),
            python: Box::new([]),
        };
        for pid in 0..(MAX_RECENT_STACKS as u32 + 5) {
            recent.add(&key(pid), pid, 2);
        }
        recent.add(&key(0), 0, 1);
        assert_eq!(recent.stacks.len(), MAX_RECENT_STACKS);
        assert_eq!(recent.stacks[&key(0)], 3);
        assert_eq!(recent.other, 10);
        assert_eq!(recent.threads.counts.len(), MAX_RECENT_THREADS);
        assert_eq!(recent.threads.counts[&(0, 0)], 3);
        assert_eq!(
            recent.threads.other,
            2 * (MAX_RECENT_STACKS + 5 - MAX_RECENT_THREADS) as u64
        );
    }
}
