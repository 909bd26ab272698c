//! The GPU device timeline's idle gaps (summary.json `gpu_device.gpus[].longest_gaps`): the
//! stretches between a process's device work on one GPU (kernels, copies and memsets, their
//! union), the longest first, each with what the process's host threads were doing in it, from
//! the host spans the pipeline kept (`pipeline::host_spans`): the spans that covered most of it.
use std::collections::HashMap;

use serde::Serialize;

use crate::pipeline::{
    host_spans::{HostActivity, HostSpans},
    samples::TimedSample,
};

/// Gaps listed per GPU, longest first.
pub const LONGEST_GAPS: usize = 5;

/// Host spans listed per gap, most overlapping first.
pub const HOST_SPANS_PER_GAP: usize = 5;

/// A stretch of time in which a GPU ran nothing of a process.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Gap {
    /// When it began (CLOCK_MONOTONIC ns, the trace's clock).
    pub start_ns: u64,
    pub dur_ns: u64,
    /// The process's host spans that overlapped it, the most overlapping first (at most
    /// [`HOST_SPANS_PER_GAP`]).
    pub host: Vec<HostActivity>,
    /// With CPU sampling: the process's samples taken in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<GapSamples>,
}

/// The CPU samples of a gap's process taken in the gap, among those on the timeline (the
/// recording's first `samples::TIMELINE_MAX`).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct GapSamples {
    pub count: u64,
    /// The innermost frames sampled most, at most [`HOT_FRAMES_PER_GAP`], most samples first.
    pub hot_frames: Vec<HotFrame>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct HotFrame {
    /// As the timeline names the sample (its innermost frame, `_[k]` for the kernel's).
    pub frame: String,
    pub samples: u64,
}

/// Innermost frames listed per gap.
pub const HOT_FRAMES_PER_GAP: usize = 5;

/// Adds to `gap` of process `pid` its samples among `timeline`, whose stacks' innermost frames
/// `leaves` has by stack hash (a sample whose stack has none is left out, as the timeline leaves
/// it out).
pub fn add_samples(gap: &mut Gap, pid: u32, timeline: &[TimedSample], leaves: &HashMap<u64, &str>) {
    let stretch = gap.start_ns..gap.start_ns + gap.dur_ns;
    let mut by_frame: HashMap<&str, u64> = HashMap::new();
    let mut count = 0;
    for sample in timeline
        .iter()
        .filter(|s| s.pid == pid && stretch.contains(&s.ts_ns))
    {
        if let Some(leaf) = leaves.get(&sample.stack) {
            count += 1;
            *by_frame.entry(leaf).or_default() += 1;
        }
    }
    let mut hot_frames: Vec<HotFrame> = by_frame
        .into_iter()
        .map(|(frame, samples)| HotFrame {
            frame: frame.to_owned(),
            samples,
        })
        .collect();
    hot_frames.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.frame.cmp(&b.frame)));
    hot_frames.truncate(HOT_FRAMES_PER_GAP);
    gap.samples = Some(GapSamples { count, hot_frames });
}

/// Total length of the union of `intervals`, and the gaps between its pieces, longest first.
pub fn union_ns(intervals: &mut [(u64, u64)]) -> (u64, Vec<Gap>) {
    intervals.sort_unstable();
    let mut total = 0;
    let mut gaps = Vec::new();
    let mut current: Option<(u64, u64)> = None;
    for &(start, end) in intervals.iter() {
        current = match current {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                total += e - s;
                gaps.push(Gap {
                    start_ns: e,
                    dur_ns: start - e,
                    ..Gap::default()
                });
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    gaps.sort_by(|a, b| b.dur_ns.cmp(&a.dur_ns).then(a.start_ns.cmp(&b.start_ns)));
    (total + current.map_or(0, |(s, e)| e - s), gaps)
}

/// The [`LONGEST_GAPS`] longest of process `pid`'s `gaps` (longest first already), each with
/// what its host threads did in it.
pub fn longest(pid: u32, mut gaps: Vec<Gap>, host: Option<&HostSpans>) -> Vec<Gap> {
    gaps.truncate(LONGEST_GAPS);
    if let Some(host) = host {
        for gap in &mut gaps {
            let stretch = (gap.start_ns, gap.start_ns + gap.dur_ns);
            gap.host = host.during(pid, stretch, HOST_SPANS_PER_GAP);
        }
    }
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::writer::{EventKind, SpanOut};

    /// Overlapping and touching intervals count once; gaps are not busy.
    #[test]
    fn busy_time_is_the_union_of_intervals() {
        let mut intervals = vec![(10, 20), (15, 30), (30, 35), (50, 60), (62, 70)];
        let (busy, gaps) = union_ns(&mut intervals);
        assert_eq!(busy, 25 + 10 + 8);
        let gaps: Vec<(u64, u64)> = gaps.iter().map(|g| (g.start_ns, g.dur_ns)).collect();
        assert_eq!(gaps, [(35, 15), (60, 2)]);
        assert_eq!(union_ns(&mut []), (0, vec![]));
    }

    /// Each listed gap gets the process's spans that covered it.
    #[test]
    fn the_longest_gaps_say_what_the_host_did() {
        let mut host = HostSpans::new(vec!["cudaStreamSynchronize".into()]);
        host.add(&SpanOut {
            pid: 4,
            tid: 5,
            start_ns: 37,
            kind: EventKind::span(10, 0),
            ..SpanOut::default()
        });
        let mut intervals: Vec<(u64, u64)> = (0..8).map(|i| (i * 100, i * 100 + 60 + i)).collect();
        intervals.push((30, 35));
        let (_, gaps) = union_ns(&mut intervals);
        let gaps = longest(4, gaps, Some(&host));
        assert_eq!(gaps.len(), LONGEST_GAPS);
        assert!(
            gaps.iter().all(|g| g.dur_ns <= 40 && g.host.is_empty()),
            "{gaps:?}"
        );
        let (_, gaps) = union_ns(&mut [(0, 30), (40, 45)]);
        let gaps = longest(4, gaps, Some(&host));
        assert_eq!(
            gaps,
            [Gap {
                start_ns: 30,
                dur_ns: 10,
                host: vec![HostActivity {
                    tid: 5,
                    name: "cudaStreamSynchronize".into(),
                    depth: 0,
                    overlap_ns: 3,
                }],
                samples: None,
            }]
        );
    }

    /// A gap counts its process's samples inside it, by innermost frame.
    #[test]
    fn a_gap_counts_the_samples_taken_in_it() {
        let sample = |ts_ns, pid, stack| TimedSample {
            ts_ns,
            pid,
            tid: pid,
            stack,
        };
        let timeline = [
            sample(9, 4, 1),
            sample(10, 4, 1),
            sample(12, 4, 2),
            sample(13, 4, 1),
            sample(14, 5, 1),
            sample(15, 4, 3),
            sample(20, 4, 1),
        ];
        let leaves = HashMap::from([(1, "busy"), (2, "ioctl_[k]")]);
        let mut gap = Gap {
            start_ns: 10,
            dur_ns: 10,
            ..Gap::default()
        };
        add_samples(&mut gap, 4, &timeline, &leaves);
        let hot = |frame: &str, samples| HotFrame {
            frame: frame.into(),
            samples,
        };
        assert_eq!(
            gap.samples,
            Some(GapSamples {
                count: 3,
                hot_frames: vec![hot("busy", 2), hot("ioctl_[k]", 1)],
            })
        );
    }
}
