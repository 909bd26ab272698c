//! Callgrind format (KCachegrind, callgrind_annotate) of a capture: one function per span name
//! and per sampled frame, with self cost and call edges; outermost spans are called by their
//! process, the root frame of sampled stacks. Events: `Span_ns` (self time of spans;
//! an edge carries the callee spans' total time and their number as `calls=`) and `Samples` (self
//! samples; an edge carries the samples with the callee below the caller, `calls=1` when no span
//! backs it). Positions are all line 0: xtrace has no source lines.
use std::{collections::BTreeMap, fmt::Write};

use crate::analysis::{capture::Capture, spans::Nesting};

#[derive(Default)]
struct Cost {
    span_ns: u64,
    samples: u64,
}

#[derive(Default)]
struct Edge {
    calls: u64,
    span_ns: u64,
    samples: u64,
}

#[derive(Default)]
struct Function {
    own: Cost,
    callees: BTreeMap<String, Edge>,
}

/// A function name on one line.
fn clean(name: &str) -> String {
    name.replace(['\n', '\r'], " ")
}

/// `fn=(id) name` the first time a name appears, `fn=(id)` after (callgrind name compression).
fn compressed(ids: &mut BTreeMap<String, usize>, key: &str, name: &str, out: &mut String) {
    match ids.get(name) {
        Some(id) => {
            let _ = writeln!(out, "{key}=({id})");
        }
        None => {
            let id = ids.len() + 1;
            let _ = writeln!(out, "{key}=({id}) {name}");
            ids.insert(name.to_string(), id);
        }
    }
}

/// The callgrind text of `capture`.
pub fn write(capture: &Capture, nesting: &Nesting) -> String {
    let mut functions: BTreeMap<String, Function> = BTreeMap::new();
    for (i, span) in capture.spans.iter().enumerate() {
        let name = clean(&capture.names[span.name as usize].name);
        functions.entry(name.clone()).or_default().own.span_ns += nesting.self_ns[i];
        // An outermost span is called by its process, the root frame of the sampled stacks too:
        // readers take a function's inclusive cost from the edges into it, so one reached by a
        // sampled edge (main → f) and no span edge would show no span time.
        let caller = clean(&match nesting.parent[i] {
            Some(parent) => capture.names[capture.spans[parent as usize].name as usize]
                .name
                .clone(),
            None => capture.process_name(span.pid),
        });
        let edge = functions
            .entry(caller)
            .or_default()
            .callees
            .entry(name)
            .or_default();
        edge.calls += 1;
        edge.span_ns += span.dur_ns;
    }
    for (stack, n) in &capture.folded {
        let frames: Vec<String> = stack.split(';').map(clean).collect();
        if let Some(leaf) = frames.last() {
            functions.entry(leaf.clone()).or_default().own.samples += n;
        }
        for pair in frames.windows(2) {
            let edge = functions
                .entry(pair[0].clone())
                .or_default()
                .callees
                .entry(pair[1].clone())
                .or_default();
            edge.samples += n;
        }
    }
    let (spans, samples) = (!capture.spans.is_empty(), !capture.folded.is_empty());
    let costs = |span_ns: u64, samples_n: u64| match (spans, samples) {
        (true, true) => format!("{span_ns} {samples_n}"),
        (true, false) => span_ns.to_string(),
        _ => samples_n.to_string(),
    };
    let events = match (spans, samples) {
        (true, true) => "Span_ns Samples",
        (true, false) => "Span_ns",
        _ => "Samples",
    };
    let total_ns: u64 = nesting.self_ns.iter().sum();
    let mut out = String::new();
    let _ = writeln!(out, "# callgrind format\nversion: 1\ncreator: xtrace");
    let _ = writeln!(out, "positions: line\nevents: {events}");
    let _ = writeln!(out, "summary: {}\n", costs(total_ns, capture.samples()));
    let _ = writeln!(out, "fl=(1) ???");
    let mut ids: BTreeMap<String, usize> = BTreeMap::new();
    for (f, function) in &functions {
        compressed(&mut ids, "fn", f, &mut out);
        let _ = writeln!(out, "0 {}", costs(function.own.span_ns, function.own.samples));
        for (callee, edge) in &function.callees {
            compressed(&mut ids, "cfn", callee, &mut out);
            // Readers take a `calls=0` cost line for self cost: an edge seen only in samples
            // (which cannot count calls) says 1.
            let _ = writeln!(out, "calls={} 0", edge.calls.max(1));
            let _ = writeln!(out, "0 {}", costs(edge.span_ns, edge.samples));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{
        capture::{Name, Span},
        spans::nest,
    };

    #[test]
    fn functions_edges_and_costs() {
        let names = ["main", "work"].map(|n| Name {
            name: n.into(),
            cat: "uprobe".into(),
        });
        let span = |name, start_ns, dur_ns| Span {
            name,
            pid: 1,
            tid: 1,
            start_ns,
            dur_ns,
            args: None,
        };
        let capture = Capture {
            names: names.to_vec(),
            spans: vec![span(1, 10, 20), span(1, 40, 30), span(0, 0, 100)],
            folded: vec![("app;main;work".into(), 3), ("app;main".into(), 1)],
            processes: [(1, "app".to_string())].into(),
            ..Capture::default()
        };
        let text = write(&capture, &nest(&capture.spans));
        assert_eq!(
            text,
            "# callgrind format\nversion: 1\ncreator: xtrace\npositions: line\n\
             events: Span_ns Samples\nsummary: 100 4\n\nfl=(1) ???\n\
             fn=(1) app\n0 0 0\ncfn=(2) main\ncalls=1 0\n0 100 4\n\n\
             fn=(2)\n0 50 1\ncfn=(3) work\ncalls=2 0\n0 50 3\n\n\
             fn=(3)\n0 50 3\n\n"
        );
    }
}
