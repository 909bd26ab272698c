//! Nesting of spans per thread: each span's parent (the innermost span of the same pid/tid that
//! encloses it in time), its depth, and its self time (its duration minus its direct children's).
//! Works on any mix of uprobe, USDT, CUDA and range spans, whatever order trace.json holds them in.
use std::collections::HashMap;

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

/// The most span frames a stack keeps below its process frame. A span nested deeper counts, with
/// every span below it, in one [`DEEPER_SPANS`] frame under its ancestor at this depth, as perf cuts
/// call chains at `kernel.perf_event_max_stack`: a folded stack writes its whole path, so N spans
/// nested in one another (USDT or range pairs in a deep recursion) would otherwise make N²/2 frames.
pub const MAX_SPAN_FRAMES: usize = 512;

/// The frame that stands for every span nested deeper than [`MAX_SPAN_FRAMES`].
pub const DEEPER_SPANS: &str = "[deeper spans]";

/// One distinct path in [`stacks`]' tree of paths: the path of `parent` and one frame more.
struct PathNode {
    parent: Option<u32>,
    /// An index into [`Capture::names`], or [`DEEPER`].
    name: u32,
    pid: u32,
    spans: u64,
    self_ns: u64,
}

/// [`PathNode::name`] of the [`DEEPER_SPANS`] frame.
const DEEPER: u32 = u32::MAX;

/// Every distinct call path of spans with its span count and self time, sorted by frames. Paths
/// are nodes of a tree, each span's found from its parent's, so nothing is quadratic in the
/// nesting depth; only the distinct paths are spelled out, at most 513 frames each.
pub fn stacks(capture: &Capture, nesting: &Nesting) -> Vec<SpanStack> {
    let n = capture.spans.len();
    // Parents before children: a parent is less deep.
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by_key(|&i| nesting.depth[i as usize]);
    let mut nodes: Vec<PathNode> = Vec::new();
    // (parent node, or u32::MAX for a root; pid; name) -> node.
    let mut children: HashMap<(u32, u32, u32), u32> = HashMap::new();
    let mut node_of = vec![0u32; n];
    for i in order {
        let i = i as usize;
        let span = &capture.spans[i];
        let up = nesting.parent[i].map(|p| node_of[p as usize]);
        // Below the cut already: in its ancestor's deeper-spans node.
        let below_cut = up.filter(|&up| nodes[up as usize].name == DEEPER);
        let name = if up.is_some() && nesting.depth[i] as usize >= MAX_SPAN_FRAMES {
            DEEPER
        } else {
            span.name
        };
        let node = below_cut.unwrap_or_else(|| {
            *children
                .entry((up.unwrap_or(u32::MAX), span.pid, name))
                .or_insert_with(|| {
                    nodes.push(PathNode {
                        parent: up,
                        name,
                        pid: span.pid,
                        spans: 0,
                        self_ns: 0,
                    });
                    (nodes.len() - 1) as u32
                })
        });
        node_of[i] = node;
        nodes[node as usize].spans += 1;
        nodes[node as usize].self_ns += nesting.self_ns[i];
    }
    let frame = |name: u32| {
        if name == DEEPER {
            DEEPER_SPANS.to_owned()
        } else {
            capture.names[name as usize].name.clone()
        }
    };
    let mut stacks: Vec<SpanStack> = nodes
        .iter()
        .map(|node| {
            let mut frames = vec![frame(node.name)];
            let mut at = node.parent;
            while let Some(up) = at {
                let up = &nodes[up as usize];
                frames.push(frame(up.name));
                at = up.parent;
            }
            frames.push(capture.process_name(node.pid));
            frames.reverse();
            SpanStack {
                frames,
                spans: node.spans,
                self_ns: node.self_ns,
            }
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
    }

    #[test]
    fn back_to_back_and_overlapping_spans_are_siblings() {
        // a [0,10), b [10,20) starts where a ends; c [15,30) sticks out of b.
        let spans = vec![span(0, 1, 0, 10), span(1, 1, 10, 10), span(2, 1, 15, 15)];
        let n = nest(&spans);
        assert_eq!(n.parent, vec![None, None, None]);
        assert_eq!(n.self_ns, vec![10, 10, 15]);
    }

    /// A capture of `spans` in process 7 ("app"), span names `n0`, `n1`, ... by index.
    fn capture(spans: Vec<Span>) -> Capture {
        let names = (0..=spans.iter().map(|s| s.name).max().unwrap_or(0))
            .map(|i| super::super::capture::Name {
                name: format!("n{i}"),
                cat: "uprobe".into(),
            })
            .collect();
        let spans = spans.into_iter().map(|s| Span { pid: 7, ..s }).collect();
        let mut capture = Capture {
            names,
            spans,
            ..Capture::default()
        };
        capture.processes.insert(7, "app".into());
        capture
    }

    fn frames(stack: &SpanStack) -> String {
        stack.frames.join(";")
    }

    #[test]
    fn stacks_count_each_path_with_its_self_time() {
        // Two threads: n0 [0,100) ⊃ {n1 [10,60) ⊃ n2 [20,30), n1 [70,80)}; n0 [5,105) alone.
        let c = capture(vec![
            span(0, 1, 0, 100),
            span(1, 1, 10, 50),
            span(2, 1, 20, 10),
            span(1, 1, 70, 10),
            span(0, 2, 5, 100),
        ]);
        let stacks = stacks(&c, &nest(&c.spans));
        let got: Vec<(String, u64, u64)> = stacks.iter().map(|s| (frames(s), s.spans, s.self_ns)).collect();
        assert_eq!(
            got,
            vec![
                ("app;n0".into(), 2, 40 + 100),
                ("app;n0;n1".into(), 2, 40 + 10),
                ("app;n0;n1;n2".into(), 1, 10),
            ]
        );
    }

    /// Two processes of one name are one root: their equal paths merge; a third process's do not.
    #[test]
    fn processes_of_one_name_share_their_paths() {
        let mut c = capture(vec![span(0, 1, 0, 100), span(1, 1, 10, 20)]);
        c.spans.extend([
            Span {
                pid: 8,
                ..span(0, 2, 0, 50)
            },
            Span {
                pid: 8,
                ..span(1, 2, 5, 10)
            },
            Span {
                pid: 9,
                ..span(0, 3, 0, 30)
            },
        ]);
        c.processes.insert(8, "app".into());
        c.processes.insert(9, "other".into());
        let stacks = stacks(&c, &nest(&c.spans));
        let got: Vec<(String, u64, u64)> = stacks.iter().map(|s| (frames(s), s.spans, s.self_ns)).collect();
        assert_eq!(
            got,
            vec![
                ("app;n0".into(), 2, 80 + 40),
                ("app;n0;n1".into(), 2, 20 + 10),
                ("other;n0".into(), 1, 30),
            ]
        );
    }

    #[test]
    fn spans_nested_past_the_cut_share_one_frame() {
        // A chain of MAX_SPAN_FRAMES + 1000 spans, each inside the last, each 2 ns longer than
        // the next: every one has 2 ns of self time, the innermost 1 ns.
        let n = MAX_SPAN_FRAMES + 1000;
        let chain: Vec<Span> = (0..n)
            .map(|k| span((k % 3) as u32, 1, k as u64, (2 * (n - k) - 1) as u64))
            .collect();
        let c = capture(chain);
        let stacks = stacks(&c, &nest(&c.spans));
        assert_eq!(stacks.len(), MAX_SPAN_FRAMES + 1);
        let deepest = stacks.iter().max_by_key(|s| s.frames.len()).unwrap();
        assert_eq!(deepest.frames.len(), 1 + MAX_SPAN_FRAMES + 1);
        assert_eq!(deepest.frames.last().map(String::as_str), Some(DEEPER_SPANS));
        assert_eq!(
            deepest.frames[MAX_SPAN_FRAMES],
            format!("n{}", (MAX_SPAN_FRAMES - 1) % 3)
        );
        assert_eq!((deepest.spans, deepest.self_ns), (1000, 999 * 2 + 1));
        let kept: u64 = stacks
            .iter()
            .filter(|s| s.frames.len() <= MAX_SPAN_FRAMES + 1)
            .map(|s| s.spans)
            .sum();
        assert_eq!(kept, MAX_SPAN_FRAMES as u64);
        let total: u64 = stacks.iter().map(|s| s.self_ns).sum();
        assert_eq!(total, (2 * n - 1) as u64, "the outermost span's duration");
    }

    #[test]
    fn zero_length_spans_nest_inside_longer_ones() {
        let spans = vec![span(0, 1, 0, 10), span(1, 1, 0, 0), span(2, 1, 10, 0)];
        let n = nest(&spans);
        assert_eq!(n.parent, vec![None, Some(0), None]);
    }
}
