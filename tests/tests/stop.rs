//! Stop paths: `-d` expiry, SIGINT, SIGTERM and SIGHUP while tracing `spans spin` (calls `work` forever,
//! ~100 per ms) under `--pid`, and `-d` expiry with a launched command (which then gets SIGTERM).
//! duration_ns covers every span of a launched command.
//! On every path xtrace exits 0, writes valid outputs whose span count matches the summary, records
//! the stop reason, and leaves no BPF program loaded.

use std::{thread, time::Duration};

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::Xtrace,
    TempDir,
};

/// How xtrace is told to stop.
#[derive(Clone, Copy, Debug)]
enum Stop {
    Duration,
    Signal(i32),
}

/// Checks shared by every stop path: spans == summary count > 0, all on `pid`, expected reason.
fn check_outputs(out: &Outputs, pid: u64, reason: &str) {
    assert_eq!(out.stop_reason(), reason, "stop_reason in {}", out.summary);
    let spans = out.spans();
    assert!(!spans.is_empty(), "no spans recorded");
    assert!(spans.iter().all(|s| s.name == "work"), "only work spans");
    assert!(
        spans.iter().all(|s| s.pid == pid && s.tid == pid),
        "spans belong to the single-threaded fixture {pid}"
    );
    assert_eq!(
        out.probe_count("work"),
        spans.len() as u64,
        "summary count == number of X spans in trace.json"
    );
    assert!(
        u64_field(&out.summary, "duration_ns") > 0,
        "duration_ns: {}",
        out.summary
    );
}

fn stop_spin_under_pid(stop: Stop, reason: &str) {
    let mut fixture = Fixture::spin();
    let pid = fixture.pid();
    let tmp = TempDir::new("stop");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();

    let flags = match stop {
        Stop::Duration => args!["-d", "0.5"],
        Stop::Signal(_) => args![],
    };
    let mut xtrace = Xtrace::record_work(pid, flags, &out_dir);
    xtrace.wait_attached();
    before.assert_attached_since();
    if let Stop::Signal(signal) = stop {
        thread::sleep(Duration::from_millis(300));
        xtrace.signal(signal);
    }
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    assert!(
        fixture.is_running(),
        "a --pid target must survive xtrace stopping ({stop:?})"
    );

    let out = Outputs::read(&out_dir);
    check_outputs(&out, u64::from(pid), reason);
    assert!(out.summary["command"].is_null(), "no command under --pid");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn duration_expiry_stops() {
    if !require_bpf() {
        return;
    }
    stop_spin_under_pid(Stop::Duration, "duration");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn sigint_stops() {
    if !require_bpf() {
        return;
    }
    stop_spin_under_pid(Stop::Signal(libc::SIGINT), "interrupted");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn sigterm_stops() {
    if !require_bpf() {
        return;
    }
    stop_spin_under_pid(Stop::Signal(libc::SIGTERM), "terminated");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn sighup_stops() {
    if !require_bpf() {
        return;
    }
    stop_spin_under_pid(Stop::Signal(libc::SIGHUP), "hangup");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn duration_expiry_terminates_launched_command() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("stop-launch");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args![
        "-u",
        "work",
        "-d",
        "0.5",
        "-o",
        &out_dir,
        "--",
        &fixtures().spans,
        "spin"
    ]);
    xtrace.wait_attached();
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();

    let out = Outputs::read(&out_dir);
    let command = &out.summary["command"];
    let pid = u64_field(command, "pid");
    check_outputs(&out, pid, "duration");
    assert_eq!(
        command["signal"].as_i64(),
        Some(i64::from(libc::SIGTERM)),
        "the command was ended by SIGTERM: {command}"
    );
    assert!(command["exit_code"].is_null(), "command: {command}");
    assert_eq!(command["ended_by_xtrace"], true, "command: {command}");
    assert_eq!(
        out.summary["targets"][0]["exited"], false,
        "running when the capture ended"
    );
    let line = format!(
        "command `{} spin` (pid {pid}) was still running when xtrace stopped; xtrace ended it (killed by signal 15)",
        fixtures().spans.display()
    );
    assert!(out.summary_txt.lines().any(|l| l == line), "{}", out.summary_txt);
    assert!(
        !finished.left_processes,
        "the launched command {pid} outlived xtrace"
    );
}

/// duration_ns runs from the moment every probe was attached, before a launched command is let
/// go: it covers every span the command made (`spans nested 1000`: 3,000 calls from its start).
/// Three runs: a late clock shows only when the command's first call beats it.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn duration_covers_every_span_of_a_launched_command() {
    if !require_bpf() {
        return;
    }
    for run in 0..3 {
        let tmp = TempDir::new("stop-extent");
        let out_dir = tmp.join("out");
        let xtrace = Xtrace::spawn(args![
            "-u",
            "outer",
            "-u",
            "inner",
            "-o",
            &out_dir,
            "--",
            &fixtures().spans,
            "nested",
            "1000"
        ]);
        xtrace.wait().assert_success();
        let out = Outputs::read(&out_dir);
        let spans = out.spans();
        assert_eq!(spans.len(), 3000, "run {run}");
        let first = spans.iter().map(|s| s.start_ns()).min().unwrap();
        let last = spans.iter().map(|s| s.end_ns()).max().unwrap();
        let duration = u64_field(&out.summary, "duration_ns") as i64;
        assert!(
            duration >= last - first,
            "run {run}: duration_ns {duration} is shorter than the spans' extent {}",
            last - first
        );
    }
}

/// `-d` is kept to within 100 ms while two threads call a traced function as fast as they can
/// (`spans threads 2 N`, ~700,000 calls/s between them here): the reader drains the ring a few
/// milliseconds at a time, between its checks of the stop conditions.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn duration_is_kept_while_calls_flood_the_ring() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().spans, &["threads", "2", "100000000"]);
    fixture.wait_ready();
    let tmp = TempDir::new("stop-flood");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::record_work(fixture.pid(), args!["-d", "0.5"], &out_dir);
    xtrace.wait_attached();
    fixture.go();
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    let out = Outputs::read(&out_dir);
    assert_eq!(out.stop_reason(), "duration");
    let duration = u64_field(&out.summary, "duration_ns");
    assert!(
        (500_000_000..=600_000_000).contains(&duration),
        "duration_ns {duration}: -d 0.5 kept to within 100 ms"
    );
    let calls = out.probe_count("work");
    assert!(calls > 10_000, "the threads were calling: {calls} spans");
}

/// Two processes, one inside `forever` (a call that never returns) and one calling `work` ~100
/// times a millisecond: each has its own entry link. The stop closes both at once before the
/// return probes, so no call of `work` enters without a return probe left to end it: 0 unmatched
/// entries (the open `forever` call is counted nowhere). Closed one after another, the second
/// link kept firing while the first waited out the kernel's grace period, which the open call
/// holds: thousands of unmatched entries.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_stop_with_a_call_left_open_counts_no_unmatched_entries() {
    if !require_bpf() {
        return;
    }
    let busy = Fixture::spin();
    for round in 0..3 {
        let mut open = Fixture::spawn(&fixtures().spans, &["forever"]);
        open.wait_ready();
        let tmp = TempDir::new("stop-open-call");
        let out_dir = tmp.join("out");
        let before = Attachments::snapshot();
        let mut xtrace = Xtrace::spawn(args![
            "-p",
            open.pid().to_string(),
            "-p",
            busy.pid().to_string(),
            "-u",
            "forever",
            "-u",
            "work",
            "-d",
            "0.5",
            "-o",
            &out_dir
        ]);
        xtrace.wait_attached();
        open.go();
        let finished = xtrace.wait();
        finished.assert_success();
        before.assert_none_left();
        let out = Outputs::read(&out_dir);
        assert!(out.probe_count("work") > 1000, "{}", out.summary);
        assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0, "round {round}");
    }
}
