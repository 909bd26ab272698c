//! Uprobe spans on a running multi-threaded process (`--pid`): exact span counts per thread, pids,
//! process metadata, stop on target exit, and summary.json statistics consistent with trace.json.
//! Fixture: `spans threads 4 1000` (4 threads, each calls `work` exactly 1000 times after `go`).

use std::collections::BTreeMap;

use xtrace_tests::{
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{trace_fixture_to_exit, trace_fixture_with, Finished},
    TempDir,
};

const THREADS: u64 = 4;
const CALLS: u64 = 1000;

struct ThreadsRun {
    out: Outputs,
    finished: Finished,
    pid: u64,
    tids: Vec<u64>,
    _tmp: TempDir,
}

fn run_threads() -> ThreadsRun {
    let fx = fixtures();
    let mut fixture = Fixture::spawn(&fx.spans, &["threads", &THREADS.to_string(), &CALLS.to_string()]);
    let tids: Vec<u64> = fixture.wait_ready_tids().into_iter().map(u64::from).collect();
    assert_eq!(tids.len() as u64, THREADS, "fixture printed tids {tids:?}");
    let pid = u64::from(fixture.pid());
    let tmp = TempDir::new("threads");
    let out_dir = tmp.join("out");
    let finished = trace_fixture_to_exit(&mut fixture, &["work"], &out_dir);
    ThreadsRun {
        out: Outputs::read(&out_dir),
        finished,
        pid,
        tids,
        _tmp: tmp,
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn threads_exact_spans_per_thread() {
    if !require_bpf() {
        return;
    }
    let run = run_threads();
    let spans = run.out.spans();

    assert_eq!(spans.len() as u64, THREADS * CALLS, "number of X spans");
    for span in &spans {
        assert_eq!(span.name, "work", "unexpected span {span:?}");
        assert_eq!(span.cat, "uprobe", "span category: {span:?}");
        assert_eq!(span.pid, run.pid, "span pid: {span:?}");
        assert_eq!(span.depth, 0, "work is never nested: {span:?}");
        assert!(span.dur >= 0.0, "negative duration: {span:?}");
    }
    let mut per_tid: BTreeMap<u64, u64> = BTreeMap::new();
    for span in &spans {
        *per_tid.entry(span.tid).or_default() += 1;
    }
    let mut expected_tids = run.tids.clone();
    expected_tids.sort_unstable();
    assert_eq!(
        per_tid.keys().copied().collect::<Vec<_>>(),
        expected_tids,
        "span tids must be exactly the fixture's worker threads"
    );
    for (tid, count) in &per_tid {
        assert_eq!(*count, CALLS, "spans on tid {tid}");
    }

    assert_eq!(run.out.probe_count("work"), THREADS * CALLS, "summary count");
    assert_eq!(run.out.lost_events(), 0, "lost events: {}", run.out.summary);
    assert_eq!(
        u64_field(&run.out.summary, "decode_errors"),
        0,
        "every record decoded: {}",
        run.out.summary
    );
    for cause in ["ring_full", "too_deep", "no_thread_slot"] {
        assert_eq!(u64_field(&run.out.summary["lost"], cause), 0, "lost.{cause}");
    }
    assert_eq!(run.out.stop_reason(), "targets_exited");
    let probe = run.out.probe("work");
    assert_eq!(probe["kind"].as_str(), Some("uprobe"), "probe kind: {probe}");
    let target = probe["target"].as_str().expect("probe target is a string");
    assert_eq!(
        std::fs::canonicalize(target).ok(),
        std::fs::canonicalize(&fixtures().spans).ok(),
        "probe target {target:?} is the fixture executable"
    );
    assert!(run.out.summary["command"].is_null(), "no command under --pid");
    let targets = run.out.summary["targets"]
        .as_array()
        .expect("summary.json targets is an array");
    assert_eq!(targets.len(), 1, "targets: {targets:?}");
    assert_eq!(u64_field(&targets[0], "pid"), run.pid, "targets[0].pid");
    assert_eq!(targets[0]["comm"].as_str(), Some("spans"), "targets[0].comm");

    assert!(
        run.out.summary_txt.contains("work"),
        "summary.txt names the probe:\n{}",
        run.out.summary_txt
    );
    assert!(
        run.finished.stdout.contains("work"),
        "the summary is printed on stdout; stdout was:\n{}",
        run.finished.stdout
    );

    let process_names = run.out.metadata("process_name");
    let named = process_names.iter().find(|m| m["pid"].as_u64() == Some(run.pid));
    let named =
        named.unwrap_or_else(|| panic!("no process_name metadata for pid {}: {process_names:?}", run.pid));
    let name = named["args"]["name"].as_str().unwrap_or_default();
    assert!(name.contains("spans"), "process_name metadata: {named}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn summary_statistics_match_trace() {
    if !require_bpf() {
        return;
    }
    let run = run_threads();
    let spans = run.out.spans_named("work");
    let probe = run.out.probe("work");
    let stat = |key: &str| u64_field(probe, key);

    assert_eq!(stat("count"), spans.len() as u64, "count == number of spans");
    assert_eq!(stat("count"), THREADS * CALLS);
    let (min, p50, p90, p99, max) = (
        stat("min_ns"),
        stat("p50_ns"),
        stat("p90_ns"),
        stat("p99_ns"),
        stat("max_ns"),
    );
    assert!(
        min <= p50 && p50 <= p90 && p90 <= p99 && p99 <= max,
        "percentiles out of order: {probe}"
    );
    let mean = stat("mean_ns");
    assert!(min <= mean && mean <= max, "mean outside [min, max]: {probe}");

    let durations: Vec<i64> = spans.iter().map(|s| s.dur_ns()).collect();
    let sum: i64 = durations.iter().sum();
    assert_eq!(
        i64::try_from(stat("total_ns")).unwrap(),
        sum,
        "total_ns == sum of trace durations (rounded to ns)"
    );
    assert_eq!(
        i64::try_from(min).unwrap(),
        *durations.iter().min().unwrap(),
        "min_ns == shortest span"
    );
    assert_eq!(
        i64::try_from(max).unwrap(),
        *durations.iter().max().unwrap(),
        "max_ns == longest span"
    );
}

/// The contract lists `thread_name` metadata next to `process_name`: every thread that has spans
/// should be named, so Perfetto shows more than bare tids.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn thread_name_metadata_for_each_thread() {
    if !require_bpf() {
        return;
    }
    let run = run_threads();
    let thread_names = run.out.metadata("thread_name");
    for tid in &run.tids {
        assert!(
            thread_names.iter().any(|m| m["pid"].as_u64() == Some(run.pid)
                && m["tid"].as_u64() == Some(*tid)
                && m["args"]["name"].is_string()),
            "no thread_name metadata for tid {tid}: {thread_names:?}"
        );
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn overhead_counts_each_program_run_exactly() {
    if !require_bpf() {
        return;
    }
    let (threads, calls) = (2u64, 500u64);
    let mut fixture = Fixture::spawn(
        &fixtures().spans,
        &["threads", &threads.to_string(), &calls.to_string()],
    );
    fixture.wait_ready_tids();
    let tmp = TempDir::new("overhead");
    let out_dir = tmp.join("out");
    let finished = trace_fixture_with(
        &mut fixture,
        xtrace_tests::args!["-u", "work", "--overhead"],
        &[],
        &out_dir,
    );
    let out = Outputs::read(&out_dir);
    let costs = out.summary["overhead"].as_array().expect("summary.json overhead");
    let runs = |name: &str| {
        let cost = costs
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} in overhead: {costs:?}"));
        let (runs, ns) = (u64_field(cost, "runs"), u64_field(cost, "run_time_ns"));
        assert!(ns > 0, "{name} took time: {cost}");
        let per_run = cost["ns_per_run"].as_f64().expect("ns_per_run");
        assert!((per_run * runs as f64 - ns as f64).abs() < 1.0, "{cost}");
        runs
    };
    // One entry and one return per call; nothing else attached to `work` ran.
    assert_eq!(runs("span_enter"), threads * calls);
    assert_eq!(runs("span_exit"), threads * calls);
    assert!(
        finished
            .stdout
            .lines()
            .any(|l| l.starts_with("overhead: xtrace's kernel programs ran for ")
                && l.contains("span_enter 1000 × ")
                && l.contains("span_exit 1000 × ")),
        "summary line: {}",
        finished.stdout
    );
}
