//! The GPU device timeline's idle gaps (summary.json `gpu_device.gpus[].longest_gaps`): the
//! stretches between a process's device work on one GPU (kernels, copies and memsets, their
//! union), the longest first, each with what the process's host threads were doing in it, from
//! the host spans the pipeline kept (`pipeline::host_spans`): the spans that covered most of it.
use serde::Serialize;

use crate::pipeline::host_spans::{HostActivity, HostSpans};

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
                    host: Vec::new(),
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
            }]
        );
    }
}
