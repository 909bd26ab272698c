//! The sampling family's summary.json section (`profile`): the counts, and from the stacks named
//! by the in-capture symbolizer the folded stacks ([`Folded`], which `export::profile` writes as
//! stacks.folded and flamegraph.svg) with the hottest functions and stacks.
use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::model::folded::fold;

/// Hottest functions and stacks listed in summary.json.
const HOT_FUNCTIONS: usize = 20;
const HOT_STACKS: usize = 15;

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HotFunction {
    pub name: String,
    /// Samples in which it was the innermost frame.
    #[serde(rename = "self")]
    pub self_samples: u64,
    /// Samples in which it was on the stack.
    pub total: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HotStack {
    /// Folded, outermost first.
    pub stack: String,
    pub samples: u64,
    pub percent: f64,
}

/// The profile fields of summary.json.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ProfileSummary {
    pub samples: u64,
    pub sample_frequency_hz: u64,
    /// User stacks cut at 127 frames.
    pub truncated_stacks: u64,
    /// Samples also written to trace.json as instant events (the first 100,000).
    pub timeline_samples: u64,
    /// Processes started by sampled processes and sampled from then on; null when none are
    /// followed (`-a`, `--no-inherit`).
    pub followed_processes: Option<u64>,
    /// Processes started by sampled processes that were not sampled because the table of sampled
    /// processes was full; null when none are followed.
    pub processes_not_followed: Option<u64>,
    /// Fork, exec and mapping records the kernel's side band dropped because its ring was full:
    /// samples of those processes may show bare addresses.
    pub lost_mapping_records: u64,
    pub hot_functions: Vec<HotFunction>,
    pub hot_stacks: Vec<HotStack>,
    /// One entry per sampled process that maps a CPython: the interpreter recognised and how,
    /// or why not (empty with `--no-python`).
    pub python: Vec<crate::python::PythonEntry>,
    /// Python frame walks cut short: past 128 frames, or at a frame freed under the walk.
    pub python_truncated: u64,
    /// Instructions the kernel's verifier processed to load the sampling program, Python walk
    /// included (null where the kernel does not say).
    pub sampler_verified_insns: Option<u32>,
}

/// Folded stacks and, per function, the samples it was the innermost frame of and those it was
/// on the stack of: what stacks.folded, flamegraph.svg and the hot lists are made of.
#[derive(Clone, Debug, Default)]
pub struct Folded {
    /// Root first, `;`-separated, with their samples.
    pub lines: BTreeMap<String, u64>,
    /// By name: (self, total).
    functions: HashMap<String, (u64, u64)>,
}

impl Folded {
    /// Adds `count` samples of the stack `frames` (outermost first) under the root frame `root`.
    pub fn add(&mut self, root: &str, frames: &[String], count: u64) {
        let line = fold(root, frames, None);
        *self.lines.entry(line).or_default() += count;
        let mut seen = HashSet::new();
        for frame in frames {
            let name = frame.strip_suffix("_[k]").unwrap_or(frame).to_string();
            if seen.insert(name.clone()) {
                self.functions.entry(name).or_default().1 += count;
            }
        }
        if let Some(leaf) = frames.last() {
            let name = leaf.strip_suffix("_[k]").unwrap_or(leaf).to_string();
            self.functions.entry(name).or_default().0 += count;
        }
    }

    /// The bytes it holds, about: its strings and their entries.
    pub fn bytes(&self) -> usize {
        let entry = 64;
        let lines: usize = self.lines.keys().map(|l| l.len() + entry).sum();
        let functions: usize = self.functions.keys().map(|f| f.len() + entry).sum();
        lines + functions
    }

    /// The hottest functions (by self samples) and stacks, of `total` samples.
    pub fn hot(&self, total: u64) -> (Vec<HotFunction>, Vec<HotStack>) {
        let mut hot_functions: Vec<HotFunction> = self
            .functions
            .iter()
            .map(|(name, &(self_samples, total))| HotFunction {
                name: name.clone(),
                self_samples,
                total,
            })
            .collect();
        hot_functions.sort_by(|a, b| {
            (b.self_samples, b.total)
                .cmp(&(a.self_samples, a.total))
                .then(a.name.cmp(&b.name))
        });
        hot_functions.truncate(HOT_FUNCTIONS);
        let hot_stacks = hottest(&self.lines, HOT_STACKS)
            .into_iter()
            .map(|(stack, n)| HotStack {
                stack: stack.clone(),
                samples: n,
                percent: percent(n, total),
            })
            .collect();
        (hot_functions, hot_stacks)
    }
}

/// The `n` folded stacks of `lines` with the most counts, most first (ties by stack).
pub fn hottest(lines: &BTreeMap<String, u64>, n: usize) -> Vec<(&String, u64)> {
    let mut hot: Vec<(&String, u64)> = lines.iter().map(|(stack, &count)| (stack, count)).collect();
    hot.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    hot.truncate(n);
    hot
}

/// `n` of `total` in percent, two decimals.
pub fn percent(n: u64, total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    (n as f64 * 10_000.0 / total as f64).round() / 100.0
}
