//! Kernel-side filters: `--tid` keeps exactly the calls and CPU samples of the named threads (the
//! others never reach user space), and a thread outside the traced processes is refused; `--min-duration` sends
//! only long calls as spans while counts and totals stay exact. Fixtures: `spans threads 4 500`
//! (4 threads, each prints its tid, then calls work() exactly 500 times after `go`) and
//! `calls durations` (quick() x 100, slow() x 5 sleeping 3 ms each).

use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{run_error, trace_fixture_with},
    TempDir,
};

/// Traces the ready `fixture` with `-p PID FLAGS... -o OUT` until it exits; returns the outputs.
fn trace(fixture: &mut Fixture, flags: Vec<std::ffi::OsString>, label: &str) -> Outputs {
    let tmp = TempDir::new(label);
    let out_dir = tmp.join("out");
    trace_fixture_with(fixture, flags, &[], &out_dir);
    Outputs::read(&out_dir)
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn tid_filter_keeps_exactly_that_threads_calls() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().spans, &["threads", "4", "500"]);
    let tids = fixture.wait_ready_tids();
    assert_eq!(tids.len(), 4);
    let chosen = [tids[1], tids[3]];
    let out = trace(
        &mut fixture,
        args![
            "-u",
            "work",
            "--tid",
            chosen[0].to_string(),
            "--tid",
            chosen[1].to_string()
        ],
        "tid-filter",
    );
    let spans = out.spans();
    assert_eq!(spans.len(), 1000);
    for tid in chosen {
        let on_tid = spans.iter().filter(|s| s.tid == u64::from(tid)).count();
        assert_eq!(on_tid, 500, "spans on tid {tid}");
    }
    assert_eq!(out.probe_count("work"), 1000);
    assert_eq!(out.lost_events(), 0);
}

/// `--tid` limits CPU samples too, as `perf record -t` does: 4 threads each call work() 50 M
/// times at once (about a second of CPU on this machine), sampled at 999 Hz; every sample is on
/// one of the two named threads, and each of them has many.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn tid_filter_keeps_exactly_that_threads_samples() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().spans, &["threads", "4", "50000000"]);
    let tids = fixture.wait_ready_tids();
    let chosen = [tids[0], tids[2]];
    let out = trace(
        &mut fixture,
        args![
            "-F",
            "999",
            "--tid",
            chosen[0].to_string(),
            "--tid",
            chosen[1].to_string()
        ],
        "tid-samples",
    );
    let samples = out.timeline_samples();
    for tid in chosen {
        let on_tid = samples.iter().filter(|e| e["tid"] == tid).count();
        assert!(on_tid >= 20, "{on_tid} samples on tid {tid}");
    }
    let others: Vec<&serde_json::Value> = samples
        .iter()
        .copied()
        .filter(|e| !chosen.iter().any(|&tid| e["tid"] == tid))
        .collect();
    assert!(others.is_empty(), "samples of other threads: {others:?}");
    assert_eq!(out.summary["samples"], samples.len() as u64);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn tid_of_another_process_is_refused() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let other = Fixture::spin();
    let tmp = TempDir::new("tid-bad");
    let line = run_error(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "work",
        "--tid",
        other.pid().to_string(),
        "-o",
        tmp.join("out")
    ]);
    assert!(line.contains(&format!("thread {}", other.pid())), "{line}");
    assert!(fixture.is_running());
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn min_duration_sends_long_calls_and_counts_short_ones_exactly() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().calls, &["durations"]);
    fixture.wait_ready();
    let out = trace(
        &mut fixture,
        args!["-u", "quick(u64)", "-u", "slow", "--min-duration", "1ms"],
        "min-duration",
    );
    assert_eq!(
        out.spans_named("quick").len(),
        0,
        "no short call reaches trace.json"
    );
    let slow = out.spans_named("slow");
    assert_eq!(slow.len(), 5);
    assert!(slow.iter().all(|s| s.dur_ns() >= 3_000_000), "{slow:?}");
    let quick = out.probe("quick");
    assert_eq!(u64_field(quick, "count"), 100);
    assert_eq!(u64_field(quick, "below_min_duration"), 100);
    assert!(u64_field(quick, "total_ns") > 0);
    assert!(u64_field(quick, "max_ns") < 1_000_000);
    // The kernel's minimum and maximum of the short calls bracket their mean.
    let (min, max) = (u64_field(quick, "min_ns"), u64_field(quick, "max_ns"));
    let mean = u64_field(quick, "total_ns") / 100;
    assert!(
        0 < min && min <= mean && mean <= max,
        "min {min}, mean {mean}, max {max}"
    );
    let slow = out.probe("slow");
    assert_eq!(u64_field(slow, "count"), 5);
    assert_eq!(u64_field(slow, "below_min_duration"), 0);
    assert!(u64_field(slow, "min_ns") >= 3_000_000);
    assert_eq!(u64_field(&out.summary, "min_duration_ns"), 1_000_000);
    assert_eq!(u64_field(&out.summary, "args_unpaired"), 0);
    assert_eq!(out.lost_events(), 0);
}
