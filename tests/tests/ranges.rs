//! Annotation ranges on the real kernel through xtrace's tool library (`libxtrace_tool.so`) and
//! its own `xtrace_range_*` API, driven by the C fixture `ranges` (tests/fixtures/ranges.c).
//! NVTX and ITT clients are in nvtx_itt.rs. Counts, names, nesting and thread ids are exact.

use serde_json::Value;
use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    ranges::{assert_nested, owned, range, range_counts, trace_by_pid},
    require_bpf,
    run::{Finished, Xtrace},
    TempDir,
};

/// `ranges run` (the xtrace_range_* C fixture) traced by pid with `flags`.
fn trace_ranges_fixture(flags: Vec<std::ffi::OsString>, tmp: &TempDir) -> (Outputs, (u64, u64), Finished) {
    let mut fixture = Fixture::spawn(&fixtures().ranges, &["run"]);
    fixture.wait_ready();
    trace_by_pid(fixture, flags, tmp)
}

/// What `ranges run` (tests/fixtures/ranges.c) records: (name, kind, count), sorted by name.
const API_FIXTURE_RANGES: &[(&str, &str, u64)] = &[
    ("inner", "push", 6),
    ("outer", "push", 3),
    ("tick", "mark", 4),
    ("work", "push", 5),
];

/// A child forked while the range sites are probed reaches them too and lives on: the sites are
/// 1-byte nops, not the 5-byte nop Linux 6.18 turns into a call to a trampoline page a forked
/// child does not have (its first range killed it with SIGSEGV). Only the launched process is
/// traced, so the child's range is not recorded.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_forked_child_survives_its_ranges() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranges-fork");
    let out_dir = tmp.join("out");
    let finished = Xtrace::spawn(args![
        "--ranges",
        "-o",
        &out_dir,
        "--",
        &fixtures().ranges,
        "fork"
    ])
    .wait();
    finished.assert_success();
    assert!(finished.stdout.contains("child exit 6"), "{}", finished.stdout);
    let out = Outputs::read(&out_dir);
    assert_eq!(out.summary["command"]["exit_code"], 0, "the child exited 6");
    let names: Vec<(&str, u64)> = out.summary["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(names, [("parent", 1)]);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
    // Ranges are spans: the recording draws them, as `xtrace report` would.
    let svg = std::fs::read_to_string(out.dir.join("span-flamegraph.svg")).expect("span-flamegraph.svg");
    assert!(svg.contains("outer") && svg.contains("inner"));
    assert!(out.dir.join("profile.pb.gz").is_file());
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
