//! Annotation ranges on the real kernel through xtrace's tool library (`libxtrace_tool.so`):
//! NVIDIA's `nvtx` and Intel's `ittapi` packages from PyPI (tests/fixtures/*_ranges.py, run by
//! the venv `cargo xtask setup` makes), and the C fixture `ranges` for the `xtrace_range_*` API.
//! Counts, names, nesting and thread ids are exact.

use serde_json::Value;
use xtrace_tests::{
    args,
    fixtures::{fixtures, python, script, tool_library, Fixture},
    output::{Outputs, Span},
    require_bpf,
    run::{run_error, trace_fixture_with, Finished, Xtrace},
    TempDir,
};

/// The `tid MAIN WORKER` line a fixture prints at its end.
fn tids(line: &str) -> (u64, u64) {
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
fn trace_by_pid(
    mut fixture: Fixture,
    flags: Vec<std::ffi::OsString>,
    tmp: &TempDir,
) -> (Outputs, (u64, u64), Finished) {
    let out = tmp.join("out");
    let finished = trace_fixture_with(&mut fixture, flags, &[], &out);
    let tids = tids(&fixture.next_line());
    (Outputs::read(&out), tids, finished)
}

/// Launches `python SCRIPT` (a tests/fixtures script) under `xtrace --nvtx`; expects both to
/// succeed and no program left, and returns the outputs and how xtrace finished.
fn launch_nvtx(script_name: &str, tmp: &TempDir) -> (Outputs, Finished) {
    let out_dir = tmp.join("out");
    let before = xtrace_tests::bpf::Attachments::snapshot();
    let finished = Xtrace::spawn(args![
        "--nvtx",
        "-o",
        &out_dir,
        "--",
        python(),
        script(script_name)
    ])
    .wait();
    finished.assert_success();
    before.assert_none_left();
    (Outputs::read(&out_dir), finished)
}

/// `ranges run` (the xtrace_range_* C fixture) traced by pid with `flags`.
fn trace_ranges_fixture(flags: Vec<std::ffi::OsString>, tmp: &TempDir) -> (Outputs, (u64, u64), Finished) {
    let mut fixture = Fixture::spawn(&fixtures().ranges, &["run"]);
    fixture.wait_ready();
    trace_by_pid(fixture, flags, tmp)
}

/// The summary.json `ranges` entry of (name, kind).
fn range<'a>(out: &'a Outputs, name: &str, kind: &str) -> &'a Value {
    out.summary["ranges"]
        .as_array()
        .expect("summary.json has ranges")
        .iter()
        .find(|r| r["name"] == name && r["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} range {name} in {}", out.summary["ranges"]))
}

/// The (name, count) of every range in summary.json, sorted by name.
fn range_counts(out: &Outputs) -> Vec<(String, String, u64)> {
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

/// What `ranges run` (tests/fixtures/ranges.c) records: (name, kind, count), sorted by name.
const API_FIXTURE_RANGES: &[(&str, &str, u64)] = &[
    ("inner", "push", 6),
    ("outer", "push", 3),
    ("tick", "mark", 4),
    ("work", "push", 5),
];

fn owned(counts: &[(&str, &str, u64)]) -> Vec<(String, String, u64)> {
    counts
        .iter()
        .map(|(n, k, c)| (n.to_string(), k.to_string(), *c))
        .collect()
}

/// Asserts every span of each (name, tid, category) is on that thread, in that category.
fn assert_tracks(out: &Outputs, tracks: &[(&str, u64, &str)]) {
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
fn assert_async_pair(out: &Outputs, name: &str, begin_tid: u64, end_tid: u64) {
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
fn assert_nested(out: &Outputs, outer: &str, inner: &str) {
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

#[test]
fn xtrace_range_api_by_pid() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranges-api");
    let (out, (main, worker), _) = trace_ranges_fixture(args!["--ranges"], &tmp);
    assert_eq!(range_counts(&out), owned(API_FIXTURE_RANGES));
    assert_eq!(out.summary["ranges_unpaired"], 0);
    for (name, tid, depth) in [("outer", main, 0), ("inner", main, 1), ("work", worker, 0)] {
        let spans = out.spans_named(name);
        assert!(
            spans
                .iter()
                .all(|s| s.tid == tid && s.depth == depth && s.cat == "xtrace"),
            "{name}: {spans:?}"
        );
        assert!(spans.iter().all(|s| s.args["source"] == "xtrace"));
    }
    assert_nested(&out, "outer", "inner");
    // inner sleeps 500 µs, work 1 ms.
    assert!(out.spans_named("inner").iter().all(|s| s.dur_ns() >= 500_000));
    assert!(out.spans_named("work").iter().all(|s| s.dur_ns() >= 1_000_000));
    let ticks = out.instants("tick");
    assert_eq!(ticks.len(), 4);
    assert_eq!(range(&out, "outer", "push")["source"], "xtrace");
    assert_eq!(range(&out, "outer", "push")["domain"], Value::Null);
    assert!(out.summary_txt.contains("xtrace outer"), "{}", out.summary_txt);
}

/// One xtrace session by pid on a running `ranges names N` fixture: `rounds` rounds, then
/// Ctrl-C. Returns (name, count) of every range, sorted by name.
fn names_session(fixture: &mut Fixture, rounds: usize, tmp: &TempDir, label: &str) -> Vec<(String, u64)> {
    let out = tmp.join(label);
    let before = xtrace_tests::bpf::Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args!["-p", fixture.pid().to_string(), "--ranges", "-o", &out]);
    xtrace.wait_attached();
    for _ in 0..rounds {
        fixture.send("round");
        assert_eq!(fixture.next_line(), "round done");
    }
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    before.assert_none_left();
    let out = Outputs::read(&out);
    assert_eq!(out.lost_events(), 0);
    range_counts(&out)
        .into_iter()
        .map(|(name, kind, count)| {
            assert_eq!(kind, "push", "{name}");
            (name, count)
        })
        .collect()
}

/// The tool library keeps the first `INTERN_LIMIT` names it sees and passes them tagged, so
/// the kernel program reads each once; names past the limit are read on every hit. Either way
/// every range keeps its own name: in a session that sees the names kept (the first read), in
/// rounds after (names xtrace remembers), and in a later session that attached after they were
/// kept (names xtrace reads from the process's memory).
#[test]
fn kept_names_and_names_past_the_limit_are_all_exact() {
    if !require_bpf() {
        return;
    }
    let n = xtrace_common::ranges::INTERN_LIMIT + 100;
    let expected = |count: u64| {
        let mut names: Vec<(String, u64)> = (0..n).map(|i| (format!("name-{i}"), count)).collect();
        names.sort();
        names
    };
    let tmp = TempDir::new("ranges-kept-names");
    let mut fixture = Fixture::spawn(&fixtures().ranges, &["names", &n.to_string()]);
    fixture.wait_ready();
    assert_eq!(names_session(&mut fixture, 2, &tmp, "first"), expected(2));
    assert_eq!(names_session(&mut fixture, 1, &tmp, "later"), expected(1));
}

/// Runs `steps` (`push NAME` / `pop`) on a `ranges script` fixture, each answered `ok`.
fn script_steps(fixture: &mut Fixture, steps: &[&str]) {
    for step in steps {
        fixture.send(step);
        assert_eq!(fixture.next_line(), "ok", "{step}");
    }
}

/// One xtrace session by pid on a `ranges script` fixture while it runs `steps`, then Ctrl-C.
fn script_session(fixture: &mut Fixture, steps: &[&str], tmp: &TempDir, label: &str) -> Outputs {
    let out = tmp.join(label);
    let before = xtrace_tests::bpf::Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args!["-p", fixture.pid().to_string(), "--ranges", "-o", &out]);
    xtrace.wait_attached();
    script_steps(fixture, steps);
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    before.assert_none_left();
    let out = Outputs::read(&out);
    assert_eq!(out.lost_events(), 0);
    out
}

/// xtrace hooks only the pop, which carries the start the library kept at the push. A pop whose
/// push the library did not keep (made while untraced) or kept in an earlier session (whose pop
/// went untraced, so the entry is stale) is counted in `ranges_unpaired`, never drawn with
/// another range's name or start; a range still open at the stop is not in the capture.
#[test]
fn ranges_begun_before_the_capture_are_unpaired_never_mispaired() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranges-script");
    let mut fixture = Fixture::spawn(&fixtures().ranges, &["script"]);
    fixture.wait_ready();
    script_steps(&mut fixture, &["push before"]);
    // `a` stays open past the stop; `b` is the only range.
    let first = script_session(&mut fixture, &["push a", "push b", "pop"], &tmp, "first");
    assert_eq!(range_counts(&first), owned(&[("b", "push", 1)]));
    assert_eq!(first.summary["ranges_unpaired"], 0);
    let b = first.spans_named("b");
    assert_eq!((b.len(), b[0].depth), (1, 1), "inside a");
    // Untraced: `a` ends (its entry stays behind), `c` begins.
    script_steps(&mut fixture, &["pop", "push c"]);
    let second = script_session(&mut fixture, &["push d", "pop", "pop", "pop"], &tmp, "second");
    // d; then c, which meets a's stale entry; then `before`, which meets nothing.
    assert_eq!(range_counts(&second), owned(&[("d", "push", 1)]));
    assert_eq!(second.summary["ranges_unpaired"], 2);
    let probes = second.summary["probes"].as_array().expect("probes");
    let pops = probes
        .iter()
        .find(|p| p["name"] == "xtrace:range_pop")
        .expect("range_pop");
    assert_eq!(pops["count"], 3);
    assert!(
        probes.iter().all(|p| p["name"] != "xtrace:range_push"),
        "xtrace does not hook pushes: {probes:?}"
    );
}

/// `range_push` fires for other tracers (xtrace hooks only the pop), which read its strings as
/// they are: its name is a plain address, never tagged, and passing it does not use up the one
/// read of a kept name that xtrace's `range_pop` relies on. Here xtrace itself is the other
/// tracer, through `-U`.
#[test]
fn range_push_passes_plain_strings_to_other_tracers() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranges-push");
    let mut fixture = Fixture::spawn(&fixtures().ranges, &["script"]);
    fixture.wait_ready();
    let out = tmp.join("out");
    let pid = fixture.pid().to_string();
    let spec = "xtrace:range_push(_,_,str)";
    let mut xtrace = Xtrace::spawn(args!["-p", &pid, "--ranges", "-U", spec, "-o", &out]);
    xtrace.wait_attached();
    script_steps(&mut fixture, &["push a", "push b", "pop", "push a", "pop", "pop"]);
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    let out = Outputs::read(&out);
    let pushed: Vec<&Value> = out
        .instants("xtrace:range_push")
        .iter()
        .map(|args| &args["arg2"])
        .collect();
    assert_eq!(pushed, [&Value::from("a"), &Value::from("b"), &Value::from("a")]);
    assert_eq!(range_counts(&out), owned(&[("a", "push", 2), ("b", "push", 1)]));
    assert_eq!(out.summary["ranges_unpaired"], 0);
}

#[test]
fn ranges_are_on_by_themselves_for_a_pid_that_loaded_the_tool_library() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranges-auto");
    let (out, _, _) = trace_ranges_fixture(args![], &tmp);
    assert_eq!(range_counts(&out), owned(API_FIXTURE_RANGES));
    assert_eq!(
        out.summary["sample_frequency_hz"], 99,
        "the CPU is sampled as without ranges"
    );
}

#[test]
fn nvtx_python_client_launched() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranges-nvtx");
    let (out, finished) = launch_nvtx("nvtx_ranges.py", &tmp);
    let line = finished
        .stdout
        .lines()
        .find(|l| l.starts_with("tid "))
        .expect("the fixture's tid line");
    let (main, worker) = tids(line);
    assert_eq!(
        range_counts(&out),
        owned(&[
            ("layer", "push", 6),
            ("load", "push", 1),
            ("prefetch", "start", 1),
            ("step", "push", 3),
            ("tick", "mark", 4),
            ("warmup", "mark", 1),
            ("work", "push", 1),
        ])
    );
    assert_eq!(out.summary["ranges_unpaired"], 0);
    assert_eq!(range(&out, "load", "push")["domain"], "io");
    assert_eq!(range(&out, "step", "push")["source"], "nvtx");
    assert_nested(&out, "step", "layer");
    assert_tracks(
        &out,
        &[
            ("step", main, "nvtx"),
            ("layer", main, "nvtx"),
            ("load", main, "io"),
            ("work", worker, "nvtx"),
        ],
    );
    // The start/end range began on the main thread and ended on the worker.
    assert_async_pair(&out, "prefetch", main, worker);
    assert_eq!(out.instants("tick").len(), 4);
}

/// The async begin/end events named `name`, in time order.
fn edges_in_time_order<'a>(out: &'a Outputs, name: &str) -> Vec<&'a Value> {
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

#[test]
fn itt_python_client_by_pid() {
    if !require_bpf() {
        return;
    }
    let tool = tool_library();
    let mut fixture = Fixture::spawn_with_env(
        &python(),
        &[script("itt_ranges.py").to_str().expect("UTF-8 path")],
        &[("INTEL_LIBITTNOTIFY64", &tool)],
    );
    fixture.wait_ready();
    let tmp = TempDir::new("ranges-itt");
    let (out, (main, worker), _) = trace_by_pid(fixture, args!["--itt"], &tmp);
    assert_eq!(
        range_counts(&out),
        owned(&[
            ("backward", "push", 3),
            ("fetch", "start", 2),
            ("forward", "push", 3),
            ("frame", "start", 5),
            ("load", "push", 2),
            ("step", "push", 3)
        ])
    );
    // The overlapped tasks cross: the first to begin ends first, inside the second.
    let fetch = edges_in_time_order(&out, "fetch");
    let phases: Vec<&str> = fetch.iter().map(|e| e["ph"].as_str().unwrap_or("?")).collect();
    assert_eq!(phases, ["b", "b", "e", "e"], "{fetch:?}");
    assert_eq!(fetch[0]["id"], fetch[2]["id"], "{fetch:?}");
    assert_eq!(fetch[1]["id"], fetch[3]["id"], "{fetch:?}");
    assert_ne!(fetch[0]["id"], fetch[1]["id"]);
    // Frames: 4 without an id one after another on main, then id 7 begun on the worker, ended
    // on main; all in domain "render".
    let frames = edges_in_time_order(&out, "frame");
    let seen: Vec<(&str, u64)> = frames
        .iter()
        .map(|e| (e["ph"].as_str().unwrap_or("?"), e["tid"].as_u64().unwrap_or(0)))
        .collect();
    let mut expected = [("b", main), ("e", main)].repeat(4);
    expected.extend([("b", worker), ("e", main)]);
    assert_eq!(seen, expected, "{frames:?}");
    for pair in frames.chunks(2) {
        assert_eq!(pair[0]["id"], pair[1]["id"], "{pair:?}");
    }
    assert!(frames.iter().all(|e| e["cat"] == "render"), "{frames:?}");
    assert_eq!(out.summary["ranges_unpaired"], 0);
    assert_nested(&out, "step", "forward");
    assert_nested(&out, "step", "backward");
    assert_tracks(
        &out,
        &[
            ("step", main, "train"),
            ("forward", main, "train"),
            ("load", worker, "train"),
        ],
    );
    assert!(out.spans_named("step").iter().all(|s| s.args["source"] == "itt"));
    // The worker named itself while traced; the main thread did so before xtrace attached, so
    // its track keeps the kernel's name (when the thread was still there to read it).
    assert_eq!(thread_name(&out, worker), Some(Value::from("loader")));
    assert_ne!(thread_name(&out, main), Some(Value::from("trainer")));
}

/// What tests/fixtures/nvtx_v2.py records, by (name, kind, count), sorted by name; `registered`
/// is the name of the domain mark whose message is a registered string.
fn nvtx_v2_ranges(registered: &str) -> Vec<(String, String, u64)> {
    let mut counts = owned(&[
        ("async", "start", 1),
        ("layer", "push", 6),
        ("load", "push", 1),
        ("prefetch", "start", 1),
        ("step", "push", 3),
        ("tick", "mark", 4),
        ("wide-ex", "push", 1),
        ("work", "push", 1),
        ("wstart", "start", 1),
        ("wtick", "mark", 1),
        ("xtick", "mark", 1),
    ]);
    counts.push((registered.to_string(), "mark".into(), 1));
    counts.sort();
    counts
}

/// tests/fixtures/nvtx_v2.py started (with `env`) and waiting for its `go` line.
fn nvtx_v2_fixture(env: &[(&str, &std::path::Path)]) -> Fixture {
    let script = script("nvtx_v2.py");
    let mut fixture = Fixture::spawn_with_env(&python(), &[script.to_str().expect("UTF-8 path")], env);
    fixture.wait_ready();
    fixture
}

/// The thread name trace.json gives `tid`.
fn thread_name(out: &Outputs, tid: u64) -> Option<Value> {
    out.metadata("thread_name")
        .iter()
        .find(|m| m["tid"].as_u64() == Some(tid))
        .map(|m| m["args"]["name"].clone())
}

#[test]
fn nvtx_v2_library_by_pid_without_an_nvtx_tool() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranges-nvtx-v2");
    let (out, (main, worker), finished) = trace_by_pid(nvtx_v2_fixture(&[]), args!["--nvtx"], &tmp);
    // Every NVTX v2 function xtrace knows, in libnvToolsExt.so.1.
    assert!(
        finished
            .stderr
            .iter()
            .any(|l| l.contains("attached 18 probes (18 uprobes")),
        "{:?}",
        finished.stderr
    );
    // Without a tool, libnvToolsExt returns NULL for the domain and the registered string.
    assert_eq!(range_counts(&out), nvtx_v2_ranges("(unnamed)"));
    assert_eq!(out.summary["ranges_unpaired"], 0);
    assert!(out.summary["ranges"]
        .as_array()
        .expect("ranges")
        .iter()
        .all(|r| r["source"] == "nvtx" && r["domain"].is_null()));
    assert_nested(&out, "step", "layer");
    assert_tracks(
        &out,
        &[
            ("step", main, "nvtx"),
            ("layer", main, "nvtx"),
            ("load", main, "nvtx"),
            ("wide-ex", main, "nvtx"),
            ("work", worker, "nvtx"),
        ],
    );
    // Range ids are all 0: the end on the worker closes the oldest open start range.
    assert_async_pair(&out, "prefetch", main, worker);
    assert_eq!(out.instants("tick").len(), 4);
    assert_eq!(thread_name(&out, worker), Some(Value::from("loader")));
}

#[test]
fn nvtx_v2_calls_of_a_process_with_the_tool_library_are_seen_once() {
    if !require_bpf() {
        return;
    }
    // Launched: xtrace sets NVTX_INJECTION64_PATH, libnvToolsExt forwards every call to the tool.
    let tmp = TempDir::new("ranges-nvtx-v2-tool");
    let (out, _) = launch_nvtx("nvtx_v2.py", &tmp);
    assert_eq!(range_counts(&out), nvtx_v2_ranges("reg"));
    assert_eq!(range(&out, "load", "push")["domain"], "io");
    assert_eq!(range(&out, "reg", "mark")["domain"], "io");
    assert_eq!(out.summary["ranges_unpaired"], 0);
    // By pid, started with the tool as its NVTX tool: only the tool's probes are attached.
    let tool = tool_library();
    let fixture = nvtx_v2_fixture(&[("NVTX_INJECTION64_PATH", &tool)]);
    let (out, _, finished) = trace_by_pid(fixture, args!["--nvtx"], &tmp);
    assert!(
        finished.stderr.iter().any(|l| l.contains("attached 5 probes")),
        "{:?}",
        finished.stderr
    );
    assert_eq!(range_counts(&out), nvtx_v2_ranges("reg"));
}

#[test]
fn a_range_flag_for_a_pid_without_the_tool_library_is_refused() {
    if !require_bpf() {
        return;
    }
    let fixture = Fixture::spin();
    let line = run_error(args!["--nvtx", "-p", fixture.pid().to_string()]);
    assert!(
        line.contains(&format!(
            "--nvtx: pid {} has not loaded libxtrace_tool.so nor libnvToolsExt",
            fixture.pid()
        )) && line.contains("NVTX_INJECTION64_PATH"),
        "{line}"
    );
}

#[test]
fn warn_over_reports_each_span_over_its_limit_live_and_counts_them() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranges-warn");
    // Every inner range sleeps 500 µs; nothing lasts 10 s.
    let flags = args!["--ranges", "--warn-over", "inner=100us", "--warn-over", "*=10s"];
    let (out, _, finished) = trace_ranges_fixture(flags, &tmp);
    assert_eq!(
        out.summary["warn_over"],
        serde_json::json!([
            {"rule": "inner=100us", "limit_ns": 100_000, "count": 6},
            {"rule": "*=10s", "limit_ns": 10_000_000_000u64, "count": 0},
        ])
    );
    let warnings: Vec<&String> = finished
        .stderr
        .iter()
        .filter(|l| l.starts_with("xtrace: warning: inner took "))
        .collect();
    assert_eq!(warnings.len(), 6, "{:?}", finished.stderr);
    assert!(warnings
        .iter()
        .all(|l| l.contains("over its limit of 100.0µs (--warn-over inner=100us)")));
}
