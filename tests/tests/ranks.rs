//! Ranks, hosts and labels, on the real kernel: a target's rank in a distributed job is read from
//! its launcher's variables (a launched command's from xtrace's own environment, as under `srun
//! xtrace -- CMD`; a running process's from /proc/PID/environ), named on its process track and in
//! summary.json, and fills `{rank}` in `-o`, as the host name fills `{host}`; `--label`s go into
//! summary.json. Fixture `spans` (tests/fixtures/spans.c): `exit 0` calls work() 3 times,
//! `threads 2 5` calls it 5 times on each of 2 threads.

use std::path::Path;

use serde_json::json;

use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{run_error, run_error_with_env, trace_fixture_with, Xtrace},
    TempDir,
};

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("host name")
        .trim()
        .to_owned()
}

/// The `process_name` of process `pid` in trace.json.
fn process_name(out: &Outputs, pid: u64) -> String {
    let named = out.metadata("process_name");
    let event = named
        .iter()
        .find(|e| e["pid"] == pid)
        .unwrap_or_else(|| panic!("no process_name of pid {pid}: {named:?}"));
    event["args"]["name"].as_str().expect("a name").to_owned()
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_launched_commands_rank_comes_from_the_launchers_variables() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranks-launched");
    let torchrun = [("RANK", "3"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "8")];
    let flags = args![
        "-u",
        "work",
        "--label",
        "job=train",
        "--label",
        "commit=1a2b",
        "--label",
        "job=eval",
        "-o",
        tmp.join("{host}-r{rank}"),
        "--",
        &fixtures().spans,
        "exit",
        "0"
    ];
    Xtrace::spawn_with_env(flags, &torchrun).wait().assert_success();
    let host = host();
    let out = Outputs::read(&tmp.join(&format!("{host}-r3")));
    assert_eq!(out.spans_named("work").len(), 3);
    assert_eq!(out.summary["host"], host.as_str());
    // A key given twice keeps its last value.
    assert_eq!(out.summary["labels"], json!({"commit": "1a2b", "job": "eval"}));
    let target = &out.summary["targets"][0];
    assert_eq!(
        target["rank"],
        json!({"rank": 3, "local_rank": 1, "world_size": 8, "launcher": "torchrun"})
    );
    let pid = target["pid"].as_u64().expect("a pid");
    assert_eq!(process_name(&out, pid), "spans (rank 3 of 8)");
    let line = format!("on {host}: pid {pid} rank 3 of 8 (torchrun); labels commit=1a2b job=eval");
    assert!(
        out.summary_txt.lines().any(|l| l == line),
        "no {line:?} in:\n{}",
        out.summary_txt
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_running_processs_rank_comes_from_its_own_environment() {
    if !require_bpf() {
        return;
    }
    let ompi = [
        ("OMPI_COMM_WORLD_RANK", Path::new("1")),
        ("OMPI_COMM_WORLD_SIZE", Path::new("2")),
    ];
    let mut fixture = Fixture::spawn_with_env(&fixtures().spans, &["threads", "2", "5"], &ompi);
    fixture.wait_ready();
    let pid = fixture.pid();
    let tmp = TempDir::new("ranks-pid");
    trace_fixture_with(&mut fixture, args!["-u", "work"], &[], &tmp.join("rank{rank}"));
    let out = Outputs::read(&tmp.join("rank1"));
    assert_eq!(out.spans_named("work").len(), 10);
    assert_eq!(
        out.summary["targets"][0]["rank"],
        json!({"rank": 1, "local_rank": null, "world_size": 2, "launcher": "open-mpi"})
    );
    assert_eq!(out.summary["labels"], json!({}));
    assert_eq!(process_name(&out, pid.into()), "spans (rank 1 of 2)");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn placeholders_without_a_rank_or_misspelled_and_bad_labels_are_refused() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranks-bad");
    let spans = &fixtures().spans;
    let line = run_error(args![
        "-u",
        "work",
        "-o",
        tmp.join("r{rank}"),
        "--",
        spans,
        "exit",
        "0"
    ]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: -o {}: no rank for {{rank}}: neither the target's environment nor \
             xtrace's sets RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMI_RANK; write the rank \
             in the path instead",
            tmp.join("r{rank}").display()
        )
    );
    let line = run_error_with_env(
        args!["-u", "work", "-o", tmp.join("{rnak}"), "--", spans, "exit", "0"],
        &[("RANK", "0")],
    );
    assert!(
        line.ends_with("{rnak} is no placeholder; use {rank} or {host}, or write the name out"),
        "{line}"
    );
    let line = run_error(args!["-u", "work", "--label", "1job=x", "--", spans, "exit", "0"]);
    assert!(
        line.contains("`1job=x`: the key `1job` must start with a letter or _"),
        "{line}"
    );
    // Nothing was made for the refused captures.
    assert_eq!(std::fs::read_dir(tmp.path()).expect("tmp").count(), 0);
}

/// CLOCK_REALTIME now, in ns.
fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64
}

/// A window that begins later: xtrace attaches at once, leaves out every call that began before
/// the time, and -d counts from it; summary.json says when it began.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn start_at_leaves_out_what_began_before_it() {
    if !require_bpf() {
        return;
    }
    let spinner = Fixture::spin();
    let tmp = TempDir::new("start-at");
    let start_ns = realtime_ns() + 1_500_000_000;
    let when = format!("@{}.{:09}", start_ns / 1_000_000_000, start_ns % 1_000_000_000);
    let out_dir = tmp.join("out");
    let mut xtrace = Xtrace::record_work(spinner.pid(), args!["--start-at", &when, "-d", "0.5"], &out_dir);
    let notice = xtrace.wait_attached();
    assert!(notice.contains(", capturing from --start-at in "), "{notice}");
    xtrace.wait().assert_success();
    let out = Outputs::read(&out_dir);
    assert_eq!(out.summary["start_at_ns"], start_ns);
    assert_eq!(out.stop_reason(), "duration");
    assert!(out.summary["duration_ns"].as_u64().unwrap() >= 500_000_000);
    // The window's start on the trace's clock (CLOCK_MONOTONIC, µs).
    let clock = &out.summary["clock"]["start"];
    let offset =
        clock["realtime_ns"].as_u64().unwrap() as f64 - clock["monotonic_ns"].as_u64().unwrap() as f64;
    let start_us = (start_ns as f64 - offset) / 1e3;
    let work = out.spans_named("work");
    assert!(!work.is_empty(), "the spinner calls work() all the time");
    let first = work.iter().map(|s| s.ts).fold(f64::MAX, f64::min);
    // The clock pair is read within a microsecond.
    assert!(
        first >= start_us - 1.0,
        "a span began {} µs before the window",
        start_us - first
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn start_at_a_period_begins_on_its_multiple_and_a_past_time_is_refused() {
    if !require_bpf() {
        return;
    }
    let spinner = Fixture::spin();
    let tmp = TempDir::new("start-at-period");
    let out_dir = tmp.join("out");
    let xtrace = Xtrace::record_work(spinner.pid(), args!["--start-at", "/5s", "-d", "0.2"], &out_dir);
    let finished = xtrace.wait();
    finished.assert_success();
    let out = Outputs::read(&out_dir);
    let start = out.summary["start_at_ns"].as_u64().expect("start_at_ns");
    // On the multiple, unless attaching took past it (under heavy load): then it is said.
    let late = finished
        .stderr
        .iter()
        .any(|l| l.contains("after --start-at's time: the capture begins now"));
    assert!(
        late || start.is_multiple_of(5_000_000_000),
        "{start}: {:?}",
        finished.stderr
    );
    let line = run_error(args![
        "-p",
        spinner.pid().to_string(),
        "-u",
        "work",
        "--start-at",
        "@1000"
    ]);
    assert!(
        line.starts_with("xtrace: error: --start-at @1000.000: that time passed ")
            && line.ends_with(" ago; give a later time, or /PERIOD for the next multiple of a period"),
        "{line}"
    );
    let line = run_error(args![
        "-p",
        spinner.pid().to_string(),
        "-u",
        "work",
        "--start-at",
        "noon"
    ]);
    assert!(line.contains("`noon` is not a time such as /10s"), "{line}");
}
