//! What the page reads, made once a second on the recording's thread: the snapshot (the event
//! stream's JSON message: events, rate, loss, the per-probe table over the last 10 s, the last
//! minute and the whole capture, the `--warn-over` alerts) and the CPU samples' stacks of that
//! second, named while their processes live (through the capture's one bounded cache of names,
//! `pipeline::symbolizer::Resolver::frames_of`) and folded into a ring of per-second slots (the same
//! bounded [`Window`] as the flight recorder's) that the flamegraph is drawn from, and the GPU
//! charts (`gpu_charts`) and the threads' activity (`threads`).
use std::collections::{HashMap, VecDeque};

use serde::Serialize;

use super::Shared;
use crate::{
    export::{flamegraph, summary},
    pipeline::{
        live::{Stretch, RECENT_NS},
        symbolizer::Resolver,
        window::{Slot, Window},
        LiveParts,
    },
};

const SECOND_NS: u64 = 1_000_000_000;
/// The stretch of stacks kept for the flamegraph: the last five minutes.
pub const STACKS_NS: u64 = 300 * SECOND_NS;
/// The most bytes of folded stacks kept: past it, the flamegraph's window shortens.
const STACKS_CAP_BYTES: usize = 32 << 20;
/// `--warn-over` alerts the page is sent, the newest.
const ALERTS_KEPT: usize = 50;
/// The frame that stands for the samples of stacks past the cap of distinct stacks.
pub const OTHER_STACKS: &str = "[other stacks]";

/// One second's folded stacks.
#[derive(Debug, Default)]
pub struct Folded {
    stacks: HashMap<String, u64>,
    bytes: usize,
    samples: u64,
}

impl Slot for Folded {
    fn bytes(&self) -> usize {
        self.bytes
    }
    fn events(&self) -> u64 {
        self.samples
    }
}

impl Folded {
    pub(super) fn add(&mut self, line: String, n: u64) {
        self.samples += n;
        match self.stacks.get_mut(&line) {
            Some(count) => *count += n,
            None => {
                self.bytes += line.capacity() + 48;
                self.stacks.insert(line, n);
            }
        }
    }
}

/// What the server reads: the latest snapshot as JSON, whether it is the last, and the stacks.
pub struct State {
    pub json: std::sync::Arc<str>,
    pub done: bool,
    pub stacks: Window<Folded>,
    pub frequency_hz: u64,
    /// A flamegraph drawn once, served instead of the stacks' (`xtrace view --diff`'s).
    pub drawn: Option<std::sync::Arc<[u8]>>,
}

impl State {
    pub fn new() -> Self {
        State {
            json: "{}".into(),
            done: false,
            stacks: Window::new(SECOND_NS, STACKS_NS, STACKS_CAP_BYTES),
            frequency_hz: 0,
            drawn: None,
        }
    }

    /// The folded lines `STACK COUNT` of the last `seconds` (all kept for 0), sorted, and how many
    /// samples they hold.
    pub fn folded_lines(&self, seconds: u64) -> (Vec<String>, u64) {
        let newest_end = self.stacks.slots().next_back().map_or(0, |(t, _)| t + SECOND_NS);
        let since = match seconds {
            0 => 0,
            s => newest_end.saturating_sub(s.saturating_mul(SECOND_NS)),
        };
        let mut merged: std::collections::BTreeMap<&str, u64> = Default::default();
        let mut samples = 0;
        for (_, slot) in self.stacks.since(since) {
            samples += slot.samples;
            for (line, n) in &slot.stacks {
                *merged.entry(line).or_default() += n;
            }
        }
        (
            merged.into_iter().map(|(l, n)| format!("{l} {n}")).collect(),
            samples,
        )
    }
}

/// The moment a snapshot is made at, and what the recording loop counts.
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    /// CLOCK_MONOTONIC.
    pub now_ns: u64,
    pub events: u64,
    /// Records the kernel could not send, all causes.
    pub lost: u64,
    /// The stop reason, on the last snapshot.
    pub done: Option<&'static str>,
}

#[derive(Serialize)]
struct Snapshot<'a> {
    elapsed_s: f64,
    events: u64,
    event_rate: f64,
    lost: u64,
    /// xtrace's own CPU time (user + system), in percent of one CPU.
    xtrace_cpu: super::own_cpu::Figures,
    samples: u64,
    /// Seconds of stacks the flamegraph can draw.
    stacks_kept_s: u64,
    probes: Vec<Row<'a>>,
    alerts: &'a VecDeque<String>,
    alerts_total: u64,
    done: bool,
    stop_reason: Option<&'static str>,
    /// The GPU charts: NVML's counters per GPU, CUDA device memory per process.
    #[serde(flatten)]
    charts: &'a super::gpu_charts::Charts,
    /// The busiest threads (`live::threads`), and how many were seen.
    threads: Vec<super::threads::Row>,
    threads_seen: usize,
    /// Whether the threads' rows have their time off CPU.
    off_cpu: bool,
}

#[derive(Serialize)]
struct Row<'a> {
    name: &'a str,
    kind: &'a str,
    last_10s: Figures,
    last_60s: Figures,
    all: Figures,
}

/// One stretch's figures of a probe, as the page shows them (the live view's and `xtrace view`'s).
#[derive(Serialize)]
pub(super) struct Figures {
    pub(super) count: u64,
    /// Calls per second.
    pub(super) rate: f64,
    pub(super) p50_ns: u64,
    pub(super) p99_ns: u64,
}

impl Figures {
    fn of(stretch: Stretch) -> Self {
        let seconds = stretch.covered_ns as f64 / 1e9;
        Figures {
            count: stretch.calls.count,
            rate: match seconds > 0.0 {
                true => (stretch.calls.count as f64 / seconds * 10.0).round() / 10.0,
                false => 0.0,
            },
            p50_ns: stretch.calls.p50_ns,
            p99_ns: stretch.calls.p99_ns,
        }
    }
}

/// A probe of the plan, as the page names it.
pub struct PlannedProbe {
    pub name: String,
    pub kind: &'static str,
    /// The file it is in; empty for the probes `--cuda` keeps for libraries loaded later, until
    /// one is (then its calls show that it was placed).
    pub target: String,
}

impl PlannedProbe {
    /// Whether it gets a row, given its `count` of calls so far: the rows summary.txt would
    /// show (`export::summary::has_row`), of the probes summary.json would list (placed ones).
    fn has_row(&self, count: u64) -> bool {
        (!self.target.is_empty() || count > 0) && summary::has_row(self.kind, &self.target, count)
    }
}

/// The recording loop's side: makes the snapshots and hands them over without waiting.
pub struct Publisher {
    shared: std::sync::Arc<Shared>,
    /// The plan's probes, by probe id.
    probes: Vec<PlannedProbe>,
    resolver: Option<Resolver>,
    begin_ns: u64,
    frequency_hz: u64,
    /// Stacks named but not yet handed over (the server held the lock).
    pending: Folded,
    alerts: VecDeque<String>,
    alerts_total: u64,
    last: Option<(u64, u64)>,
    charts: super::gpu_charts::ChartFeed,
    threads: super::threads::Threads,
    /// Whether the time off CPU is counted (`--off-cpu`).
    off_cpu: bool,
    own_cpu: super::own_cpu::OwnCpu,
}

impl Publisher {
    /// A publisher to `shared` for a capture of `probes` (name and kind by id) that began at
    /// `begin_ns`, sampling at `frequency_hz` (0: not sampling).
    pub fn new(
        shared: std::sync::Arc<Shared>,
        probes: Vec<PlannedProbe>,
        begin_ns: u64,
        frequency_hz: u64,
    ) -> Self {
        Publisher {
            shared,
            probes,
            resolver: (frequency_hz > 0).then(Resolver::default),
            begin_ns,
            frequency_hz,
            pending: Folded::default(),
            alerts: VecDeque::new(),
            alerts_total: 0,
            last: None,
            charts: super::gpu_charts::ChartFeed::new(begin_ns),
            threads: super::threads::Threads::default(),
            off_cpu: false,
            own_cpu: super::own_cpu::OwnCpu::new(crate::clock::monotonic_ns()),
        }
    }

    /// Charts the GPU metrics `feed` hands over.
    pub fn show_gpus(&mut self, feed: crate::cuda::nvml::GpuFeed) {
        self.charts.show_gpus(feed);
    }

    /// The state it publishes to, which the Stop button is pressed through.
    pub fn shared(&self) -> std::sync::Arc<Shared> {
        self.shared.clone()
    }

    /// A `--warn-over` line, for the page's alerts.
    pub fn alert(&mut self, line: &str) {
        if self.alerts.len() == ALERTS_KEPT {
            self.alerts.pop_front();
        }
        self.alerts.push_back(line.to_string());
        self.alerts_total += 1;
    }

    /// The probe table's rows at `now_ns`: the rows summary.txt shows, of the probes placed, in
    /// its order.
    /// `probes`: the plan's, by probe id, of a capture that began at `begin_ns`.
    fn probe_rows<'p>(
        (probes, begin_ns): (&'p [PlannedProbe], u64),
        stats: &[crate::pipeline::stats::ProbeStats],
        recent: &mut crate::pipeline::live::RecentCalls,
        now_ns: u64,
    ) -> Vec<Row<'p>> {
        let mut shown: Vec<_> = probes
            .iter()
            .enumerate()
            .filter_map(|(id, probe)| {
                let all = stats.get(id).map(|s| s.distribution()).unwrap_or_default();
                probe.has_row(all.count).then_some((id, probe, all))
            })
            .collect();
        // In summary.txt's order: the most time first.
        shown.sort_by(|(_, a, da), (_, b, db)| summary::by_total(&a.name, da.total_ns, &b.name, db.total_ns));
        shown
            .into_iter()
            .map(|(id, probe, all)| Row {
                name: &probe.name,
                kind: probe.kind,
                last_10s: Figures::of(recent.stretch(id, now_ns, 10 * SECOND_NS, begin_ns)),
                last_60s: Figures::of(recent.stretch(id, now_ns, RECENT_NS, begin_ns)),
                all: Figures::of(Stretch {
                    calls: all,
                    covered_ns: now_ns.saturating_sub(begin_ns),
                }),
            })
            .collect()
    }

    /// Makes a snapshot from `parts` at `tick` and hands it over, unless the server holds the
    /// state this moment: then its stacks wait for the next one.
    pub fn publish(&mut self, parts: LiveParts<'_>, tick: Tick) {
        let began = std::time::Instant::now();
        let LiveParts {
            stats,
            recent,
            stacks,
            thread_calls,
            names,
            samples_total,
            images,
            python,
            bpf,
            cuda_memory,
            off_cpu,
        } = parts;
        self.charts.update(tick.now_ns, &cuda_memory);
        self.threads
            .add(tick.now_ns, thread_calls, &stacks.threads, off_cpu.as_ref());
        self.off_cpu |= off_cpu.is_some();
        if let Some(resolver) = &self.resolver {
            let keys: Vec<_> = stacks.stacks.keys().collect();
            let frames = resolver.frames_of(&keys, bpf, images, python);
            for (key, frames) in &frames {
                let root = images
                    .comm(key.image)
                    .map_or_else(|| format!("pid {}", key.pid), str::to_string);
                self.pending
                    .add(flamegraph::fold(&root, frames, None), stacks.stacks[*key]);
            }
            if stacks.other > 0 {
                self.pending.add(OTHER_STACKS.to_string(), stacks.other);
            }
        }
        let rows = Self::probe_rows((&self.probes, self.begin_ns), stats, recent, tick.now_ns);
        let event_rate = match self.last {
            Some((at, events)) if tick.now_ns > at => {
                (tick.events - events) as f64 / ((tick.now_ns - at) as f64 / 1e9)
            }
            _ => 0.0,
        };
        self.last = Some((tick.now_ns, tick.events));
        let Ok(mut state) = self.shared.state.try_lock() else {
            return;
        };
        let pending = std::mem::take(&mut self.pending);
        if pending.samples > 0 {
            state.stacks.add(tick.now_ns, |slot| {
                for (line, n) in pending.stacks {
                    slot.add(line, n);
                }
            });
        } else {
            state.stacks.advance(tick.now_ns);
        }
        let snapshot = Snapshot {
            elapsed_s: tick.now_ns.saturating_sub(self.begin_ns) as f64 / 1e9,
            events: tick.events,
            event_rate: event_rate.round(),
            lost: tick.lost,
            xtrace_cpu: self.own_cpu.read(tick.now_ns),
            samples: samples_total,
            stacks_kept_s: state.stacks.kept_ns() / SECOND_NS,
            probes: rows,
            alerts: &self.alerts,
            alerts_total: self.alerts_total,
            done: tick.done.is_some(),
            stop_reason: tick.done,
            charts: &self.charts.charts,
            threads: self
                .threads
                .rows(tick.now_ns, names, self.frequency_hz > 0, self.off_cpu),
            off_cpu: self.off_cpu,
            threads_seen: self.threads.seen(),
        };
        state.json = serde_json::to_string(&snapshot).unwrap_or_default().into();
        state.done = tick.done.is_some();
        state.frequency_hz = self.frequency_hz;
        drop(state);
        self.shared.version.send_modify(|v| *v += 1);
        log::debug!(
            target: super::LOG,
            "published a snapshot in {:.2} ms ({} new stacks named)",
            began.elapsed().as_secs_f64() * 1e3,
            stacks.stacks.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_summary_rows_of_placed_probes() {
        let probe = |kind, target: &str| PlannedProbe {
            name: "f".into(),
            kind,
            target: target.into(),
        };
        assert!(probe("uprobe", "/bin/x").has_row(0));
        assert!(!probe("cuda", "/lib/libcudart.so").has_row(0));
        assert!(probe("cuda", "/lib/libcudart.so").has_row(3));
        // Kept for a CUDA library never loaded.
        assert!(!probe("cuda", "").has_row(0));
        assert!(!probe("uprobe", "/usr/lib/libxtrace_tool.so").has_row(5));
    }

    /// The busiest first, as summary.txt lists them: by time in all, then by name.
    #[test]
    fn probe_rows_are_in_summary_order() {
        let probe = |name: &str| PlannedProbe {
            name: name.into(),
            kind: "uprobe",
            target: "/bin/x".into(),
        };
        let probes = [probe("a"), probe("c"), probe("b"), probe("d")];
        let mut stats = vec![crate::pipeline::stats::ProbeStats::default(); 4];
        for (id, durations) in [(0, &[10u64][..]), (1, &[20, 10]), (2, &[30]), (3, &[])] {
            for &d in durations {
                stats[id].add(d);
            }
        }
        let mut recent = crate::pipeline::live::RecentCalls::new(4);
        let rows = Publisher::probe_rows((&probes, 0), &stats, &mut recent, SECOND_NS);
        let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
        assert_eq!(names, ["b", "c", "a", "d"]);
    }

    #[test]
    fn folded_lines_of_the_last_seconds() {
        let mut state = State::new();
        for (second, line) in [(1u64, "a;b"), (2, "a;c"), (3, "a;b")] {
            state
                .stacks
                .add(second * SECOND_NS, |slot| slot.add(line.to_string(), 2));
        }
        assert_eq!(
            state.folded_lines(2),
            (vec!["a;b 2".to_string(), "a;c 2".to_string()], 4)
        );
        assert_eq!(
            state.folded_lines(0),
            (vec!["a;b 4".to_string(), "a;c 2".to_string()], 6)
        );
        assert_eq!(state.folded_lines(1).1, 2);
    }
}
