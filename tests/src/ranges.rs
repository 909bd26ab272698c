//! Helpers for the annotation-range tests (tests/tests/ranges.rs, tests/tests/nvtx_itt.rs): the
//! summary's `ranges` entries, the thread ids a fixture prints, and assertions on tracks, nesting
//! and async begin/end pairs in trace.json.

use serde_json::Value;

use crate::{
    fixtures::Fixture,
    output::{Outputs, Span},
    run::{trace_fixture_with, Finished},
    TempDir,
};

/// The `tid MAIN WORKER` line a fixture prints at its end.
pub fn tids(line: &str) -> (u64, u64) {
    let parts: Vec<u64> = line
        .strip_prefix("tid ")
        .unwrap_or_else(|| panic!("expected `tid MAIN WORKER`, got {line:?}"))
        .split(' ')
        .map(|n| n.parse().expect("a tid"))
        .collect();
    (parts[0], parts[1])
}

/// Traces a started fixture by pid with `flags` to its exit; returns the outputs, its tids and
/// how xtrace finished.
pub fn trace_by_pid(
    mut fixture: Fixture,
    flags: Vec<std::ffi::OsString>,
    tmp: &TempDir,
) -> (Outputs, (u64, u64), Finished) {
    let out = tmp.join("out");
    let finished = trace_fixture_with(&mut fixture, flags, &[], &out);
    let tids = tids(&fixture.next_line());
    (Outputs::read(&out), tids, finished)
}

/// The summary.json `ranges` entry of (name, kind).
pub fn range<'a>(out: &'a Outputs, name: &str, kind: &str) -> &'a Value {
    out.summary["ranges"]
        .as_array()
        .expect("summary.json has ranges")
        .iter()
        .find(|r| r["name"] == name && r["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} range {name} in {}", out.summary["ranges"]))
}

/// The (name, count) of every range in summary.json, sorted by name.
pub fn range_counts(out: &Outputs) -> Vec<(String, String, u64)> {
    let mut counts: Vec<(String, String, u64)> = out.summary["ranges"]
        .as_array()
        .expect("summary.json has ranges")
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap_or_default().to_string(),
                r["kind"].as_str().unwrap_or_default().to_string(),
                r["count"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    counts.sort();
    counts
}

pub fn owned(counts: &[(&str, &str, u64)]) -> Vec<(String, String, u64)> {
    counts
        .iter()
        .map(|(n, k, c)| (n.to_string(), k.to_string(), *c))
        .collect()
}

/// Asserts every span of each (name, tid, category) is on that thread, in that category.
pub fn assert_tracks(out: &Outputs, tracks: &[(&str, u64, &str)]) {
    for &(name, tid, cat) in tracks {
        let spans = out.spans_named(name);
        assert!(
            spans.iter().all(|s| s.tid == tid && s.cat == cat),
            "{name}: {spans:?}"
        );
    }
}

/// Asserts the one start/end range `name` began on `begin_tid` and ended on `end_tid`: one async
/// pair with one id.
pub fn assert_async_pair(out: &Outputs, name: &str, begin_tid: u64, end_tid: u64) {
    let edges = edges_in_time_order(out, name);
    assert_eq!(edges.len(), 2, "{edges:?}");
    assert_eq!(
        (edges[0]["ph"].as_str(), edges[0]["tid"].as_u64()),
        (Some("b"), Some(begin_tid))
    );
    assert_eq!(
        (edges[1]["ph"].as_str(), edges[1]["tid"].as_u64()),
        (Some("e"), Some(end_tid))
    );
    assert_eq!(edges[0]["id"], edges[1]["id"]);
}

/// Asserts every span named `inner` lies within one named `outer` on the same thread, one level
/// deeper.
pub fn assert_nested(out: &Outputs, outer: &str, inner: &str) {
    let outers = out.spans_named(outer);
    for span in out.spans_named(inner) {
        let parent: Vec<&Span> = outers
            .iter()
            .filter(|o| o.tid == span.tid && o.start_ns() <= span.start_ns() && span.end_ns() <= o.end_ns())
            .collect();
        assert_eq!(parent.len(), 1, "{inner} at {} lies in one {outer}", span.ts);
        assert_eq!(
            span.depth,
            parent[0].depth + 1,
            "{inner} is one level below {outer}"
        );
    }
}

/// The async begin/end events named `name`, in time order.
pub fn edges_in_time_order<'a>(out: &'a Outputs, name: &str) -> Vec<&'a Value> {
    let mut edges: Vec<&Value> = out
        .events
        .iter()
        .filter(|e| e["name"] == name && (e["ph"] == "b" || e["ph"] == "e"))
        .collect();
    edges.sort_by(|a, b| {
        a["ts"]
            .as_f64()
            .partial_cmp(&b["ts"].as_f64())
            .expect("timestamps")
    });
    edges
}

/// The thread name trace.json gives `tid`.
pub fn thread_name(out: &Outputs, tid: u64) -> Option<Value> {
    out.metadata("thread_name")
        .iter()
        .find(|m| m["tid"].as_u64() == Some(tid))
        .map(|m| m["args"]["name"].clone())
}
