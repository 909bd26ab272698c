//! The CPU profile: sampled stacks, named by the in-capture symbolizer
//! (`pipeline::symbolizer`), written as `stacks.folded` (process name as the root frame, kernel
//! frames suffixed `_[k]`) and an inferno `flamegraph.svg`, and summarised as the hottest
//! functions and stacks.
use std::collections::{BTreeMap, HashMap, HashSet};

use inferno::flamegraph::color::{BasicPalette, Palette};
use serde::Serialize;

use super::flamegraph;
use crate::{
    error::Result,
    image::Images,
    pipeline::{samples::Samples, symbolizer::Frames},
    python::Python,
};

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

/// Writes `stacks.folded` and `flamegraph.svg` into `out` and returns the profile summary.
/// A stack's root frame is its process's name when it was taken, else `process_names`' for its
/// pid.
pub fn write(
    out: &crate::output::Dir,
    (samples, python): (&Samples, &Python),
    images: &Images,
    frames: &Frames,
    process_names: &HashMap<u32, String>,
    frequency_hz: u64,
    icicle: bool,
) -> Result<ProfileSummary> {
    let mut folded = Folded::default();
    for (key, frames) in frames {
        // The process's name when the sample was taken: a program an exec replaced keeps its own.
        let root = images
            .comm(key.image)
            .map(str::to_string)
            .or_else(|| process_names.get(&key.pid).cloned())
            .unwrap_or_else(|| format!("pid {}", key.pid));
        folded.add(&root, frames, samples.stacks[*key]);
    }
    let (hot_functions, hot_stacks) = folded.write(out, samples.total, frequency_hz, icicle)?;
    Ok(ProfileSummary {
        samples: samples.total,
        sample_frequency_hz: frequency_hz,
        truncated_stacks: samples.truncated,
        timeline_samples: samples.timeline.len() as u64,
        followed_processes: None,
        processes_not_followed: None,
        lost_mapping_records: images.lost(),
        hot_functions,
        hot_stacks,
        python: python.entries(),
        python_truncated: python.truncated,
        sampler_verified_insns: samples.verified_insns,
    })
}

/// The profile fields of summary.json for a capture whose stacks are not kept for the whole run
/// (`--flight`: its flight directories have them): the counts, and no hot functions or stacks.
pub fn totals(samples: &Samples, python: &Python, images: &Images, frequency_hz: u64) -> ProfileSummary {
    ProfileSummary {
        samples: samples.total,
        sample_frequency_hz: frequency_hz,
        truncated_stacks: samples.truncated,
        timeline_samples: 0,
        followed_processes: None,
        processes_not_followed: None,
        lost_mapping_records: images.lost(),
        hot_functions: Vec::new(),
        hot_stacks: Vec::new(),
        python: python.entries(),
        python_truncated: python.truncated,
        sampler_verified_insns: samples.verified_insns,
    }
}

/// Folded stacks and, per function, the samples it was the innermost frame of and those it was
/// on the stack of: what stacks.folded, flamegraph.svg and the hot lists are made of.
#[derive(Debug, Default)]
pub struct Folded {
    /// Root first, `;`-separated, with their samples.
    pub lines: BTreeMap<String, u64>,
    /// By name: (self, total).
    functions: HashMap<String, (u64, u64)>,
}

impl Folded {
    /// Adds `count` samples of the stack `frames` (outermost first) under the root frame `root`.
    pub fn add(&mut self, root: &str, frames: &[String], count: u64) {
        let line = flamegraph::fold(root, frames, None);
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

    /// Writes stacks.folded and flamegraph.svg into `out` (`total` samples at `frequency_hz`);
    /// returns the hottest functions and stacks.
    pub fn write(
        self,
        out: &crate::output::Dir,
        total: u64,
        frequency_hz: u64,
        icicle: bool,
    ) -> Result<(Vec<HotFunction>, Vec<HotStack>)> {
        let chart = flamegraph::Chart {
            title: format!("xtrace: {total} samples at {frequency_hz} Hz"),
            subtitle: None,
            count_name: "samples",
            palette: Palette::Basic(BasicPalette::Hot),
            empty: "no samples",
            icicle,
        };
        flamegraph::write(
            out,
            &self.lines,
            crate::output::STACKS_FOLDED,
            crate::output::FLAMEGRAPH_SVG,
            &chart,
        )?;
        Ok(self.hot(total))
    }

    /// The hottest functions (by self samples) and stacks, of `total` samples.
    fn hot(self, total: u64) -> (Vec<HotFunction>, Vec<HotStack>) {
        let mut hot_functions: Vec<HotFunction> = self
            .functions
            .into_iter()
            .map(|(name, (self_samples, total))| HotFunction {
                name,
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
        let mut hot_stacks: Vec<HotStack> = self
            .lines
            .into_iter()
            .map(|(stack, n)| HotStack {
                stack,
                samples: n,
                percent: percent(n, total),
            })
            .collect();
        hot_stacks.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.stack.cmp(&b.stack)));
        hot_stacks.truncate(HOT_STACKS);
        (hot_functions, hot_stacks)
    }
}

/// `n` of `total` in percent, two decimals.
pub(crate) fn percent(n: u64, total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    (n as f64 * 10_000.0 / total as f64).round() / 100.0
}
