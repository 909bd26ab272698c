//! The traced processes' host spans, kept while the GPU device timeline is on, so that the summary
//! can say what each process's threads were doing while its GPU sat idle
//! (`family::gpu_gaps`): CUDA API calls, traced functions, USDT pairs, push/pop ranges, as the
//! trace has them (device slices and off-CPU waits are not kept). The pipeline hands it every
//! event it writes or keeps.
//!
//! Bounded: past [`MAX_SPANS`] the shorter half is forgotten, and from then on spans no longer
//! than the longest forgotten one are not kept. [`HostSpans::forgotten_up_to_ns`] says that
//! length: a forgotten span overlaps a gap by at most it, so every overlap reported above it is
//! exact and in its right place.
use std::collections::HashMap;

use serde::Serialize;

use super::writer::{EventKind, SpanOut};
use crate::model::wait::TIMELINE_CATEGORY;

/// Most spans kept (32 bytes each).
pub const MAX_SPANS: usize = 1 << 18;

#[derive(Clone, Copy, Debug)]
struct HostSpan {
    pid: u32,
    tid: u32,
    start_ns: u64,
    end_ns: u64,
    /// Its nesting depth on its thread.
    depth: u32,
    /// Index into `HostSpans::labels`.
    label: u32,
}

/// What one host thread did during a stretch of time: a span and how much of the stretch it
/// covered.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct HostActivity {
    pub tid: u32,
    /// The span's name: the traced function, CUDA call, USDT pair or range.
    pub name: String,
    /// Its nesting depth among traced spans on its thread (0: outermost).
    pub depth: u32,
    /// The part of the stretch it covered.
    pub overlap_ns: u64,
}

/// The host spans of one recording (see the module's header).
#[derive(Debug, Default)]
pub struct HostSpans {
    /// The trace's name of each probe, by probe id: a span without a name of its own has its
    /// probe's.
    probe_names: Vec<Box<str>>,
    /// The label of each probe's name, once used (spans of a probe mostly have its name).
    probe_labels: Vec<Option<u32>>,
    spans: Vec<HostSpan>,
    labels: Vec<Box<str>>,
    by_label: HashMap<Box<str>, u32>,
    forgotten_up_to_ns: u64,
}

impl HostSpans {
    /// An empty store for a trace whose probes are named `probe_names`, by probe id.
    pub fn new(probe_names: Vec<Box<str>>) -> Self {
        HostSpans {
            probe_labels: vec![None; probe_names.len()],
            probe_names,
            ..HostSpans::default()
        }
    }

    /// Keeps `event` if it is a host span.
    pub fn add(&mut self, event: &SpanOut) {
        let EventKind::Span { dur_ns, depth, .. } = event.kind else {
            return;
        };
        let device = event.tid & super::gpu::TRACK_BIT != 0;
        let not_host = matches!(event.cat.as_deref(), Some("gpu" | TIMELINE_CATEGORY));
        if device || not_host || (self.forgotten_up_to_ns > 0 && dur_ns <= self.forgotten_up_to_ns) {
            return;
        }
        let label = match (event.name.as_deref(), self.probe_labels.get(event.probe)) {
            (Some(name), _) => self.label(name),
            (None, Some(&Some(label))) => label,
            (None, Some(None)) => {
                let name = self.probe_names[event.probe].clone();
                let label = self.label(&name);
                self.probe_labels[event.probe] = Some(label);
                label
            }
            (None, None) => return,
        };
        if self.spans.len() >= MAX_SPANS {
            self.forget_shorter_half();
            if dur_ns <= self.forgotten_up_to_ns {
                return;
            }
        }
        self.spans.push(HostSpan {
            pid: event.pid,
            tid: event.tid,
            start_ns: event.start_ns,
            end_ns: event.start_ns.saturating_add(dur_ns),
            depth,
            label,
        });
    }

    /// The label of `name`, given one the first time.
    fn label(&mut self, name: &str) -> u32 {
        if let Some(&label) = self.by_label.get(name) {
            return label;
        }
        let label = self.labels.len() as u32;
        self.labels.push(name.into());
        self.by_label.insert(name.into(), label);
        label
    }

    fn forget_shorter_half(&mut self) {
        let half = self.spans.len() / 2;
        let dur = |s: &HostSpan| s.end_ns - s.start_ns;
        self.spans
            .select_nth_unstable_by(half, |a, b| dur(b).cmp(&dur(a)));
        let longest_forgotten = self.spans[half..].iter().map(dur).max().unwrap_or(0);
        self.spans.truncate(half);
        self.forgotten_up_to_ns = self.forgotten_up_to_ns.max(longest_forgotten);
    }

    /// 0, or the length up to which spans may have been forgotten (more than [`MAX_SPANS`]).
    pub fn forgotten_up_to_ns(&self) -> u64 {
        self.forgotten_up_to_ns
    }

    /// The spans of process `pid` that overlap `start_ns..end_ns`, at most `n`, the most
    /// overlapping first (then the deeper, then the earlier).
    pub fn during(&self, pid: u32, (start_ns, end_ns): (u64, u64), n: usize) -> Vec<HostActivity> {
        let mut found: Vec<(u64, &HostSpan)> = self
            .spans
            .iter()
            .filter(|s| s.pid == pid)
            .filter_map(|s| {
                let overlap = s.end_ns.min(end_ns).saturating_sub(s.start_ns.max(start_ns));
                (overlap > 0).then_some((overlap, s))
            })
            .collect();
        found.sort_by(|(a, sa), (b, sb)| {
            b.cmp(a)
                .then(sb.depth.cmp(&sa.depth))
                .then(sa.start_ns.cmp(&sb.start_ns))
        });
        found
            .into_iter()
            .take(n)
            .map(|(overlap_ns, s)| HostActivity {
                tid: s.tid,
                name: self.labels[s.label as usize].to_string(),
                depth: s.depth,
                overlap_ns,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(probe: usize, pid: u32, (start_ns, dur_ns): (u64, u64), depth: u32) -> SpanOut {
        SpanOut {
            probe,
            pid,
            tid: pid + 1,
            start_ns,
            kind: EventKind::span(dur_ns, depth),
            ..SpanOut::default()
        }
    }

    /// Overlaps are cut to the stretch; other processes, device slices and waits are not host
    /// spans of the process; ties go to the deeper span.
    #[test]
    fn the_spans_during_a_stretch_most_overlapping_first() {
        let mut host = HostSpans::new(vec!["outer".into(), "sync".into(), "launch".into()]);
        host.add(&span(0, 7, (0, 1000), 0));
        host.add(&span(1, 7, (100, 300), 1));
        host.add(&span(2, 7, (390, 20), 1));
        host.add(&span(1, 8, (100, 300), 0));
        host.add(&SpanOut {
            tid: super::super::gpu::track_tid(0, 7),
            ..span(1, 7, (100, 300), 0)
        });
        host.add(&SpanOut {
            cat: Some(TIMELINE_CATEGORY.into()),
            ..span(1, 7, (100, 300), 0)
        });
        host.add(&SpanOut {
            name: Some("named".into()),
            ..span(1, 7, (50, 60), 2)
        });
        let during = host.during(7, (100, 400), 5);
        let got: Vec<(&str, u32, u64)> = during
            .iter()
            .map(|a| (a.name.as_str(), a.depth, a.overlap_ns))
            .collect();
        assert_eq!(
            got,
            [
                ("sync", 1, 300),
                ("outer", 0, 300),
                ("named", 2, 10),
                ("launch", 1, 10)
            ]
        );
        assert_eq!(during[0].tid, 8);
        assert_eq!(host.during(7, (100, 400), 1).len(), 1);
        assert!(host.during(9, (0, 1000), 5).is_empty());
    }

    /// Past the bound the shorter half goes, and shorter spans are not kept after it.
    #[test]
    fn past_its_bound_the_shorter_half_is_forgotten() {
        let mut host = HostSpans::new(vec!["f".into()]);
        for i in 0..MAX_SPANS as u64 {
            host.add(&span(0, 1, (i * 10, i % 100 + 1), 0));
        }
        assert_eq!(host.forgotten_up_to_ns(), 0);
        host.add(&span(0, 1, (0, 1000), 0));
        assert!(host.spans.len() <= MAX_SPANS / 2 + 1, "{}", host.spans.len());
        let floor = host.forgotten_up_to_ns();
        assert!((40..=60).contains(&floor), "{floor}");
        assert!(host.spans.iter().all(|s| s.end_ns - s.start_ns >= floor));
        let kept = host.spans.len();
        host.add(&span(0, 1, (0, floor), 0));
        assert_eq!(host.spans.len(), kept);
    }
}
