//! Stragglers among the ranks of a merged capture: for each collective call (the Nth call of an
//! MPI collective, or the Nth NVTX range of an NCCL collective, on every rank is one collective)
//! and each step (`merge --step NAME`: the Nth span of that name on every rank), the rank that
//! arrived last, and by how much. A rank arrives
//! at a collective when its call begins; at a step when its first collective inside the step
//! begins (where it starts to wait for the others), else when the step ends. The straggler kept
//! everyone waiting for `late_ns`: its arrival less the next-latest rank's. What it was doing
//! meanwhile is its own spans that overlap that wait, added up by name; where its capture
//! sampled (`-F`), its CPU samples during the wait by call stack; and where it has the GPU device
//! timeline, its device's kernels, copies and memsets during the wait and how long the device was
//! busy.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{
    mpi_api::{functions, Class},
    nccl_api,
};

/// One rank's spans, on the merged clock.
#[derive(Default)]
pub struct RankSpans {
    /// How the rank is shown: `node7 rank 3`.
    pub rank: String,
    /// (name, start, end), by start: its spans, the GPU device's slices apart.
    pub spans: Vec<(String, u64, u64)>,
    /// (time, folded call stack) of its CPU samples, by time; None when its capture did not
    /// sample.
    pub samples: Option<Vec<(u64, String)>>,
    /// (name, start, end) of its GPU device's slices, by start; None when its capture has no
    /// device timeline.
    pub gpu: Option<Vec<(String, u64, u64)>>,
}

/// summary.json `stragglers[]`: one collective or step name.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Stragglers {
    pub name: String,
    /// `collective` or `step`.
    pub kind: &'static str,
    /// How many times every rank took part (the fewest calls of any rank).
    pub rounds: u64,
    /// Per rank that arrived last at least once, the most often first.
    pub ranks: Vec<LastRank>,
}

/// A rank that arrived last.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LastRank {
    pub rank: String,
    /// Rounds it arrived last at.
    pub times_last: u64,
    /// The others' wait for it alone, added up over those rounds (ns).
    pub late_total_ns: u64,
    pub late_max_ns: u64,
    /// Its own spans that overlapped those waits, by name, the most time first (at most 5).
    pub meanwhile: Vec<Meanwhile>,
    /// Its CPU samples during those waits, where its capture sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<WaitSamples>,
    /// Its GPU device's activity during those waits, where its capture has the device timeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<WaitGpu>,
}

/// A straggler's CPU samples during the others' waits for it.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct WaitSamples {
    /// All of them.
    pub count: u64,
    /// By call stack, the most samples first (at most 5).
    pub stacks: Vec<StackCount>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct StackCount {
    /// Folded, outermost frame first (the timeline keeps the innermost 32).
    pub stack: String,
    pub count: u64,
}

/// A straggler's GPU device activity during the others' waits for it.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct WaitGpu {
    /// How long at least one kernel, copy or memset ran, added up over the waits (ns).
    pub busy_ns: u64,
    /// Kernels, copies and memsets by name, the most time first (at most 5).
    pub slices: Vec<Meanwhile>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Meanwhile {
    pub name: String,
    pub overlap_ns: u64,
}

/// The stragglers of every MPI collective the ranks called, then of every NCCL collective (spans
/// of these names are NCCL's NVTX ranges: see `export::merge`), then of each step name in `steps`.
/// Each rank's spans are indexed once (see [`Index`]): a capture of millions of spans takes
/// O(n log n), plus the spans that overlap the waits.
pub fn find(ranks: &[RankSpans], steps: &[String]) -> Vec<Stragglers> {
    if ranks.len() < 2 {
        return Vec::new();
    }
    let collectives: Vec<&'static str> = functions()
        .into_iter()
        .filter(|f| f.class == Class::Collective)
        .map(|f| f.name)
        .chain(nccl_api::COLLECTIVES.iter().copied())
        .collect();
    let indexes: Vec<Index> = ranks.iter().map(|r| Index::new(r, &collectives)).collect();
    let mut found = Vec::new();
    for name in &collectives {
        let arrivals: Vec<Vec<u64>> = indexes.iter().map(|i| i.calls(name)).collect();
        found.extend(rounds(name, "collective", ranks, &indexes, &arrivals));
    }
    for step in steps {
        let arrivals: Vec<Vec<u64>> = ranks
            .iter()
            .zip(&indexes)
            .map(|(r, index)| {
                r.spans
                    .iter()
                    .filter(|s| s.0 == *step)
                    .map(|&(_, start, end)| index.first_collective(start, end).unwrap_or(end))
                    .collect()
            })
            .collect();
        found.extend(rounds(step, "step", ranks, &indexes, &arrivals));
    }
    found
}

/// One rank's spans (by start) made quick to ask: the starts of its collective calls by name and
/// all together, and its spans and GPU slices as [`Overlaps`].
struct Index<'a> {
    /// The starts of its collective calls, by name, in order.
    by_name: BTreeMap<&'a str, Vec<u64>>,
    /// The starts of all its collective calls, in order.
    collective_starts: Vec<u64>,
    spans: Overlaps<'a>,
    samples: Option<&'a [(u64, String)]>,
    gpu: Option<Overlaps<'a>>,
}

impl<'a> Index<'a> {
    fn new(rank: &'a RankSpans, collectives: &[&str]) -> Index<'a> {
        let mut by_name: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        let mut collective_starts = Vec::new();
        for (name, start, _) in &rank.spans {
            if collectives.contains(&name.as_str()) {
                by_name.entry(name.as_str()).or_default().push(*start);
                collective_starts.push(*start);
            }
        }
        Index {
            by_name,
            collective_starts,
            spans: Overlaps::new(&rank.spans),
            samples: rank.samples.as_deref(),
            gpu: rank.gpu.as_deref().map(Overlaps::new),
        }
    }

    /// The starts of its calls of collective `name`.
    fn calls(&self, name: &str) -> Vec<u64> {
        self.by_name.get(name).cloned().unwrap_or_default()
    }

    /// The start of its first collective call that starts in [start, end).
    fn first_collective(&self, start: u64, end: u64) -> Option<u64> {
        let at = self.collective_starts.partition_point(|&s| s < start);
        self.collective_starts.get(at).copied().filter(|&s| s < end)
    }

    /// Its samples taken in [from, to).
    fn samples(&self, (from, to): (u64, u64)) -> Option<&'a [(u64, String)]> {
        let samples = self.samples?;
        let first = samples.partition_point(|s| s.0 < from);
        let end = samples.partition_point(|s| s.0 < to);
        Some(&samples[first..end.max(first)])
    }
}

/// Spans (by start) with a segment tree of the latest end under each node, which finds the spans
/// overlapping a window without looking at those that ended before it.
struct Overlaps<'a> {
    spans: &'a [(String, u64, u64)],
    /// `latest[leaves + i]` is span i's end; an inner node holds its children's latest end.
    latest: Vec<u64>,
    leaves: usize,
}

impl<'a> Overlaps<'a> {
    fn new(spans: &'a [(String, u64, u64)]) -> Overlaps<'a> {
        let leaves = spans.len().next_power_of_two();
        let mut latest = vec![0; 2 * leaves];
        for (i, s) in spans.iter().enumerate() {
            latest[leaves + i] = s.2;
        }
        for node in (1..leaves).rev() {
            latest[node] = latest[2 * node].max(latest[2 * node + 1]);
        }
        Overlaps {
            spans,
            latest,
            leaves,
        }
    }

    /// Calls `each` with every span that overlaps [from, to): its name, and its part of the
    /// window as (start, end).
    fn each(&self, (from, to): (u64, u64), mut each: impl FnMut(&'a str, (u64, u64))) {
        let before = self.spans.partition_point(|s| s.1 < to);
        // (node, first leaf under it, how many leaves under it)
        let mut stack = vec![(1, 0, self.leaves)];
        while let Some((node, first, width)) = stack.pop() {
            if first >= before || self.latest[node] <= from {
                continue;
            }
            if width == 1 {
                let (name, start, end) = &self.spans[first];
                let (start, end) = ((*start).max(from), (*end).min(to));
                if end > start {
                    each(name.as_str(), (start, end));
                }
                continue;
            }
            let half = width / 2;
            stack.push((2 * node + 1, first + half, half));
            stack.push((2 * node, first, half));
        }
    }
}

/// What one rank's rounds as the last to arrive add up to.
#[derive(Default)]
struct Tally<'a> {
    times_last: u64,
    late_total_ns: u64,
    late_max_ns: u64,
    /// Its spans' overlap with the waits, by name.
    meanwhile: BTreeMap<&'a str, u64>,
    /// Its samples during the waits: how many, and by stack.
    samples: u64,
    stacks: BTreeMap<&'a str, u64>,
    /// Its GPU slices' overlap with the waits, by name, and the time any ran.
    gpu: BTreeMap<&'a str, u64>,
    gpu_busy_ns: u64,
}

impl<'a> Tally<'a> {
    /// What rank `index` did during the wait [from, to) for it at collective or step `name`.
    fn add(&mut self, index: &Index<'a>, name: &str, window: (u64, u64)) {
        index.spans.each(window, |span, (start, end)| {
            if span != name {
                *self.meanwhile.entry(span).or_default() += end - start;
            }
        });
        for (_, stack) in index.samples(window).unwrap_or_default() {
            self.samples += 1;
            *self.stacks.entry(stack.as_str()).or_default() += 1;
        }
        if let Some(gpu) = &index.gpu {
            let mut ran: Vec<(u64, u64)> = Vec::new();
            gpu.each(window, |slice, (start, end)| {
                *self.gpu.entry(slice).or_default() += end - start;
                ran.push((start, end));
            });
            self.gpu_busy_ns += union_ns(&mut ran);
        }
    }

    /// The tally as summary.json gives it, for rank `index`.
    fn into_last(self, rank: &str, index: &Index) -> LastRank {
        LastRank {
            rank: rank.to_string(),
            times_last: self.times_last,
            late_total_ns: self.late_total_ns,
            late_max_ns: self.late_max_ns,
            meanwhile: top(self.meanwhile),
            samples: index.samples.map(|_| WaitSamples {
                count: self.samples,
                stacks: top(self.stacks)
                    .into_iter()
                    .map(|m| StackCount {
                        stack: m.name,
                        count: m.overlap_ns,
                    })
                    .collect(),
            }),
            gpu: index.gpu.as_ref().map(|_| WaitGpu {
                busy_ns: self.gpu_busy_ns,
                slices: top(self.gpu),
            }),
        }
    }
}

/// The 5 largest of `by_name`, largest first (then by name).
fn top(by_name: BTreeMap<&str, u64>) -> Vec<Meanwhile> {
    let mut top: Vec<Meanwhile> = by_name
        .into_iter()
        .map(|(name, overlap_ns)| Meanwhile {
            name: name.to_string(),
            overlap_ns,
        })
        .collect();
    top.sort_by(|a, b| b.overlap_ns.cmp(&a.overlap_ns).then(a.name.cmp(&b.name)));
    top.truncate(5);
    top
}

/// How long at least one of `intervals` covers.
fn union_ns(intervals: &mut [(u64, u64)]) -> u64 {
    intervals.sort_unstable();
    let (mut total, mut reach) = (0, 0);
    for &(start, end) in intervals.iter() {
        let start = start.max(reach);
        if end > start {
            total += end - start;
            reach = end;
        }
    }
    total
}

/// The stragglers of `name`, given each rank's arrival at each of its rounds.
fn rounds<'a>(
    name: &str,
    kind: &'static str,
    ranks: &[RankSpans],
    indexes: &[Index<'a>],
    arrivals: &[Vec<u64>],
) -> Option<Stragglers> {
    let rounds = arrivals.iter().map(Vec::len).min().unwrap_or(0);
    if rounds == 0 {
        return None;
    }
    let mut last: BTreeMap<usize, Tally<'a>> = BTreeMap::new();
    for round in 0..rounds {
        let mut at: Vec<(u64, usize)> = arrivals.iter().enumerate().map(|(r, a)| (a[round], r)).collect();
        at.sort_unstable();
        let (arrived, rank) = at[at.len() - 1];
        let (next, _) = at[at.len() - 2];
        let late = arrived - next;
        let tally = last.entry(rank).or_default();
        tally.times_last += 1;
        tally.late_total_ns += late;
        tally.late_max_ns = tally.late_max_ns.max(late);
        tally.add(&indexes[rank], name, (next, arrived));
    }
    let mut ranks: Vec<LastRank> = last
        .into_iter()
        .map(|(r, tally)| tally.into_last(&ranks[r].rank, &indexes[r]))
        .collect();
    ranks.sort_by(|a, b| {
        b.times_last
            .cmp(&a.times_last)
            .then(b.late_total_ns.cmp(&a.late_total_ns))
    });
    Some(Stragglers {
        name: name.to_string(),
        kind,
        rounds: rounds as u64,
        ranks,
    })
}

/// summary.txt's lines: the rank most often last at each collective and step, where it was late
/// by at least `floor_ns` on average (below the clocks' alignment, lateness is noise).
pub fn text(found: &[Stragglers], floor_ns: u64) -> String {
    let human = crate::model::duration::human;
    let mut out = String::new();
    for s in found {
        let Some(worst) = s
            .ranks
            .first()
            .filter(|w| w.late_total_ns / w.times_last.max(1) >= floor_ns)
        else {
            continue;
        };
        let meanwhile: Vec<String> = worst
            .meanwhile
            .iter()
            .map(|m| format!("{} {}", m.name, human(m.overlap_ns)))
            .collect();
        out += &format!(
            "straggler at {} {}: {} arrived last {} of {} times, {} late on average (at most {}){}\n",
            s.kind,
            s.name,
            worst.rank,
            worst.times_last,
            s.rounds,
            human(worst.late_total_ns / worst.times_last.max(1)),
            human(worst.late_max_ns),
            match meanwhile.is_empty() {
                true => String::new(),
                false => format!("; meanwhile {}", meanwhile.join(", ")),
            }
        );
        out.pop();
        out += &activity(worst);
        out.push('\n');
    }
    out
}

/// What summary.txt says of a straggler's samples and GPU during the waits, where it has them.
fn activity(last: &LastRank) -> String {
    let human = crate::model::duration::human;
    let mut out = String::new();
    if let Some(samples) = &last.samples {
        out += &format!("; {} CPU samples", samples.count);
        if let Some(most) = samples.stacks.first() {
            // The innermost three frames say where it was.
            let frames: Vec<&str> = most.stack.rsplitn(4, ';').take(3).collect();
            let frames: Vec<&str> = frames.into_iter().rev().collect();
            out += &format!(", most in {} ({})", frames.join(";"), most.count);
        }
    }
    if let Some(gpu) = &last.gpu {
        out += &format!("; GPU busy {}", human(gpu.busy_ns));
        if let Some(most) = gpu.slices.first() {
            out += &format!(", most in {} ({})", most.name, human(most.overlap_ns));
        }
    }
    out
}

#[cfg(test)]
#[path = "stragglers_tests.rs"]
mod tests;
