//! The off-CPU family's summary.json section (`off_cpu`): per thread, time by scheduler state and
//! by wait and who woke it; the stacks that waited longest, named by the in-capture symbolizer and
//! folded with the wait as the leaf (what `export::offcpu` writes as offcpu.folded and
//! offcpu.svg); the contended locks (`locks_summary`). A flight recorder window's section is made
//! the same way from the waits of its window.
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::profile_summary::{hottest, percent};
use crate::{
    image::Images,
    model::folded::fold,
    pipeline::{
        offcpu::{OffCpu, ThreadTime},
        symbolizer::Resolver,
    },
};

/// Stacks listed in the summary.
const HOT_STACKS: usize = 15;
/// Waits and wakers listed per thread.
const PER_THREAD: usize = 8;

/// One wait of a thread.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WaitSummary {
    /// `futex`, `read`, `clock_nanosleep`, `runnable`, `fsync, uninterruptible` …
    pub wait: String,
    pub intervals: u64,
    pub ns: u64,
}

/// A thread that woke another from waits of at least MIN.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WakerSummary {
    /// 0 for the idle task (comm `swapper/N`) and for a thread outside xtrace's PID namespace
    /// (its own comm); 0 with the comm `[interrupt]` for wake-ups from interrupts (a timer, an
    /// I/O completion), whichever thread was running; 0 with the comm `[unseen]` for wake-ups
    /// not seen.
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub wakeups: u64,
}

/// One thread's time off CPU.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ThreadSummary {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub intervals: u64,
    pub off_cpu_ns: u64,
    /// Preempted or waiting for a CPU.
    pub runnable_ns: u64,
    /// Interruptible sleep (`S`).
    pub sleeping_ns: u64,
    /// Uninterruptible sleep (`D`): disk and other I/O.
    pub uninterruptible_ns: u64,
    /// The longest waits first.
    pub waits: Vec<WaitSummary>,
    /// The most wake-ups first.
    pub woken_by: Vec<WakerSummary>,
}

/// A stack that waited, folded outermost first with its wait as the leaf.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HotWait {
    pub stack: String,
    pub ns: u64,
    pub percent: f64,
}

/// The `off_cpu` section of summary.json.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OffCpuSummary {
    /// `--off-cpu`'s MIN: waits as long are sent with their whole stack, shorter ones added up.
    pub min_ns: u64,
    pub intervals: u64,
    pub off_cpu_ns: u64,
    /// Waits sent one by one (at least MIN, in a system call).
    pub sent: u64,
    /// Waits not counted: the kernel's table was full or the ring buffer was.
    pub lost: u64,
    pub threads: Vec<ThreadSummary>,
    pub hot_stacks: Vec<HotWait>,
    /// The locks waited on longest (futex waits), most time first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub locks: Vec<super::locks_summary::LockSummary>,
}

/// The off-CPU stacks named and the summary made, ready to be written (by another thread, for a
/// flight recorder window).
#[derive(Debug)]
pub struct Named {
    /// Nanoseconds per folded stack: what offcpu.folded and offcpu.svg are written from.
    pub folded: BTreeMap<String, u64>,
    /// Without its hot stacks, which [`Named::summary`] adds from `folded`.
    summary: OffCpuSummary,
}

/// Names the stacks of `off` with `resolver` and makes its summary. `names` gives a thread's name
/// by (pid, tid), and a process's by (pid, pid); `lost` is the waits the kernel could not count.
pub fn name(
    (off, python): (&OffCpu, &crate::python::Python),
    resolver: &Resolver,
    images: &mut Images,
    names: &HashMap<(u32, u32), String>,
    lost: u64,
) -> Named {
    let mut folded: BTreeMap<String, u64> = BTreeMap::new();
    for (wait, samples) in &off.stacks {
        let named = resolver.frames(samples, images, python);
        let leaf = format!("[{}]", wait.name());
        for (key, frames) in &named {
            let root = images
                .comm(key.image)
                .map(str::to_string)
                .filter(|name| !name.is_empty())
                .or_else(|| {
                    names
                        .get(&(key.pid, key.pid))
                        .cloned()
                        .filter(|name| !name.is_empty())
                })
                .unwrap_or_else(|| format!("pid {}", key.pid));
            let line = fold(&root, frames, Some(&leaf));
            *folded.entry(line).or_default() += samples.stacks[*key];
        }
    }
    let threads: Vec<ThreadSummary> = off
        .threads
        .iter()
        .map(|(&(pid, tid), time)| thread_summary(pid, tid, time, names))
        .collect();
    let locks = super::locks_summary::top(&off.locks, resolver, images, python);
    let summary = OffCpuSummary {
        locks,
        min_ns: off.min_ns,
        intervals: threads.iter().map(|t| t.intervals).sum(),
        off_cpu_ns: off.total_ns(),
        sent: off.sent,
        lost,
        threads,
        hot_stacks: Vec::new(),
    };
    Named { folded, summary }
}

impl Named {
    /// The bytes it holds, about: its folded stacks and its threads' and locks' lines.
    pub fn bytes(&self) -> usize {
        let folded: usize = self.folded.keys().map(|k| k.len() + 64).sum();
        let threads = self.summary.threads.len() * 1024 + self.summary.locks.len() * 4096;
        folded + threads
    }

    /// The `off_cpu` section, with the stacks that waited longest.
    pub fn summary(&self) -> OffCpuSummary {
        let total = self.summary.off_cpu_ns;
        let hot = hottest(&self.folded, HOT_STACKS);
        OffCpuSummary {
            hot_stacks: hot
                .into_iter()
                .map(|(stack, ns)| HotWait {
                    stack: stack.clone(),
                    ns,
                    percent: percent(ns, total),
                })
                .collect(),
            ..self.summary.clone()
        }
    }
}

fn thread_summary(
    pid: u32,
    tid: u32,
    time: &ThreadTime,
    names: &HashMap<(u32, u32), String>,
) -> ThreadSummary {
    let (intervals, off_cpu_ns) = time.total();
    let by_state = |state: &str| {
        time.waits
            .iter()
            .filter(|(w, _)| w.state_name() == state)
            .map(|(_, (_, ns))| ns)
            .sum()
    };
    let mut waits: Vec<WaitSummary> = time
        .waits
        .iter()
        .map(|(wait, &(intervals, ns))| WaitSummary {
            wait: wait.name(),
            intervals,
            ns,
        })
        .collect();
    waits.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.wait.cmp(&b.wait)));
    waits.truncate(PER_THREAD);
    let mut woken_by: Vec<WakerSummary> = time
        .wakers
        .iter()
        .map(|((pid, tid, comm), &wakeups)| WakerSummary {
            pid: *pid,
            tid: *tid,
            comm: comm.clone(),
            wakeups,
        })
        .collect();
    woken_by.sort_by(|a, b| {
        b.wakeups
            .cmp(&a.wakeups)
            .then((a.pid, a.tid).cmp(&(b.pid, b.tid)))
    });
    woken_by.truncate(PER_THREAD);
    ThreadSummary {
        pid,
        tid,
        comm: names.get(&(pid, tid)).cloned().unwrap_or_default(),
        intervals,
        off_cpu_ns,
        runnable_ns: by_state("runnable"),
        sleeping_ns: by_state("sleeping"),
        uninterruptible_ns: by_state("uninterruptible"),
        waits,
        woken_by,
    }
}
