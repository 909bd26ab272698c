//! Nesting of spans per thread: each span's parent (the innermost span of the same pid/tid that
//! encloses it in time), its depth, and its self time (its duration minus its direct children's).
//! Works on any mix of uprobe, USDT, CUDA and range spans, whatever order trace.json holds them in.
use std::collections::BTreeMap;

use super::capture::{Capture, Span};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Nesting {
    /// Per span (same index as the capture's spans): the enclosing span.
    pub parent: Vec<Option<u32>>,
    /// Per span: its duration minus those of its direct children (never below 0).
    pub self_ns: Vec<u64>,
    /// Per span: how many spans enclose it (0 = outermost on its thread).
    pub depth: Vec<u32>,
}

impl Nesting {
    /// Span indices from the outermost ancestor down to `index` itself.
    pub fn path(&self, index: usize) -> Vec<usize> {
        let mut path = vec![index];
        let mut at = index;
        while let Some(parent) = self.parent[at] {
            at = parent as usize;
            path.push(at);
        }
        path.reverse();
        path
    }
}

/// Nests `spans`: sorted per thread by start (longer first on ties), a span's parent is the
/// innermost open span that contains it entirely. A span that overlaps its predecessor without
/// fitting inside it (an impossible nesting, e.g. after lost events) is made a sibling instead.
pub fn nest(spans: &[Span]) -> Nesting {
    let n = spans.len();
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&spans[a as usize], &spans[b as usize]);
        (x.pid, x.tid, x.start_ns, std::cmp::Reverse(x.dur_ns), a).cmp(&(
            y.pid,
            y.tid,
            y.start_ns,
            std::cmp::Reverse(y.dur_ns),
            b,
        ))
    });
    let mut nesting = Nesting {
        parent: vec![None; n],
        self_ns: spans.iter().map(|s| s.dur_ns).collect(),
        depth: vec![0; n],
    };
    let mut open: Vec<u32> = Vec::new();
    let mut thread = None;
    for &i in &order {
        let span = &spans[i as usize];
        if thread != Some((span.pid, span.tid)) {
            thread = Some((span.pid, span.tid));
            open.clear();
        }
        while let Some(&top) = open.last() {
            let outer = &spans[top as usize];
            // Inside, and starting before the end (a zero-length span at an end is not a child).
            let contains = outer.start_ns <= span.start_ns
                && span.end_ns() <= outer.end_ns()
                && span.start_ns < outer.end_ns();
            if contains {
                break;
            }
            open.pop();
        }
        if let Some(&top) = open.last() {
            nesting.parent[i as usize] = Some(top);
            nesting.depth[i as usize] = nesting.depth[top as usize] + 1;
            let parent_self = &mut nesting.self_ns[top as usize];
            *parent_self = parent_self.saturating_sub(span.dur_ns);
        }
        open.push(i);
    }
    nesting
}

/// The spans that share one call path, for time-weighted flamegraphs and profiles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanStack {
    /// The process name, then span names from the outermost to this one.
    pub frames: Vec<String>,
    pub spans: u64,
    /// Their self time: the flamegraph width of this exact path.
    pub self_ns: u64,
}

/// Every distinct call path of spans with its span count and self time, sorted by frames.
pub fn stacks(capture: &Capture, nesting: &Nesting) -> Vec<SpanStack> {
    let mut paths: BTreeMap<(u32, Vec<u32>), (u64, u64)> = BTreeMap::new();
    for (i, span) in capture.spans.iter().enumerate() {
        let names = nesting
            .path(i)
            .into_iter()
            .map(|s| capture.spans[s].name)
            .collect();
        let entry = paths.entry((span.pid, names)).or_default();
        entry.0 += 1;
        entry.1 += nesting.self_ns[i];
    }
    let mut stacks: Vec<SpanStack> = paths
        .into_iter()
        .map(|((pid, names), (spans, self_ns))| SpanStack {
            frames: std::iter::once(capture.process_name(pid))
                .chain(names.iter().map(|&n| capture.names[n as usize].name.clone()))
                .collect(),
            spans,
            self_ns,
        })
        .collect();
    stacks.sort_by(|a, b| a.frames.cmp(&b.frames));
    // Two processes of one name are one root: merge equal paths.
    stacks.dedup_by(|later, kept| {
        if later.frames == kept.frames {
            kept.spans += later.spans;
            kept.self_ns += later.self_ns;
            true
        } else {
            false
        }
    });
    stacks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(name: u32, tid: u32, start_ns: u64, dur_ns: u64) -> Span {
        Span {
            name,
            pid: 1,
            tid,
            start_ns,
            dur_ns,
            args: None,
        }
    }

    #[test]
    fn self_time_subtracts_direct_children_only() {
        // outer [0,100) ⊃ mid [10,60) ⊃ leaf [20,30); sibling [70,80); other thread overlaps.
        let spans = vec![
            span(3, 1, 20, 10),
            span(1, 1, 10, 50),
            span(0, 1, 0, 100),
            span(2, 1, 70, 10),
            span(0, 2, 5, 100),
        ];
        let n = nest(&spans);
        assert_eq!(n.parent, vec![Some(1), Some(2), None, Some(2), None]);
        assert_eq!(n.self_ns, vec![10, 40, 40, 10, 100]);
        assert_eq!(n.depth, vec![2, 1, 0, 1, 0]);
        assert_eq!(n.path(0), vec![2, 1, 0]);
    }

    #[test]
    fn back_to_back_and_overlapping_spans_are_siblings() {
        // a [0,10), b [10,20) starts where a ends; c [15,30) sticks out of b.
        let spans = vec![span(0, 1, 0, 10), span(1, 1, 10, 10), span(2, 1, 15, 15)];
        let n = nest(&spans);
        assert_eq!(n.parent, vec![None, None, None]);
        assert_eq!(n.self_ns, vec![10, 10, 15]);
    }

    #[test]
    fn zero_length_spans_nest_inside_longer_ones() {
        let spans = vec![span(0, 1, 0, 10), span(1, 1, 0, 0), span(2, 1, 10, 0)];
        let n = nest(&spans);
        assert_eq!(n.parent, vec![None, Some(0), None]);
    }
}
