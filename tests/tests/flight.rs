//! The flight recorder (`--flight`) on `spans phases`, which calls `work` exactly N times for each
//! line N it reads: phases separated by pauses longer than the window show what it keeps.
//! SIGUSR1 writes DIR/flight-001 with the last phase only (the one before aged out, counted), a
//! second SIGUSR1 flight-002, the stop the last one; DIR's summary covers the whole run; `report`
//! and `convert` read a flight directory. `--flight-after` keeps what follows a trigger; a small
//! `--flight-size` shortens the window, every event either kept or counted as aged out;
//! `--flight-trigger warn-over` writes on a span over its limit, once a window; a Perfetto-format directory is
//! read by `report`. With sampling (`profile phases`), each directory holds the CPU samples of its
//! window. Bad flight flags get one line naming the valid values, exit 2.

use std::{path::Path, thread, time::Duration};

use serde_json::Value;
use xtrace_tests::{
    args,
    captures::xtrace as run_xtrace,
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{error_on_spinner, Xtrace},
    TempDir,
};

const WROTE: &str = "xtrace: flight recorder: wrote ";

/// `spans phases`, started and ready.
fn phases() -> Fixture {
    let mut fixture = Fixture::spawn(&fixtures().spans, &["phases"]);
    fixture.wait_ready();
    fixture
}

/// Makes the fixture call `work` `n` times, and waits until it has.
fn phase(fixture: &mut Fixture, n: u64) {
    fixture.send(&n.to_string());
    assert_eq!(fixture.next_line(), "done");
}

/// The flight directory's outputs, with its `flight` summary.
fn flight_dir(dir: &Path) -> (Outputs, Value) {
    let out = Outputs::read(dir);
    let flight = out.summary["flight"].clone();
    assert!(
        flight.is_object(),
        "{} has a flight summary: {}",
        dir.display(),
        out.summary
    );
    (out, flight)
}

/// Checks a flight directory holds exactly `n` work spans, counted in its summary too, all
/// within `window_ns` of each other, and says what triggered it.
fn check_window(dir: &Path, n: u64, window_ns: u64, trigger: &str) -> Value {
    let (out, flight) = flight_dir(dir);
    let spans = out.spans_named("work");
    assert_eq!(spans.len() as u64, n, "work spans in {}", dir.display());
    assert_eq!(out.probe_count("work"), n, "summary count in {}", dir.display());
    if let (Some(first), Some(last)) = (
        spans.iter().map(|s| s.start_ns()).min(),
        spans.iter().map(|s| s.end_ns()).max(),
    ) {
        assert!(((last - first) as u64) < window_ns, "spans lie within the window");
    }
    assert_eq!(flight["trigger"], trigger, "{flight}");
    assert_eq!(u64_field(&flight, "window_ns"), window_ns);
    assert!(u64_field(&flight, "kept_ns") <= window_ns, "{flight}");
    assert_eq!(
        u64_field(&out.summary, "duration_ns"),
        u64_field(&flight, "kept_ns")
    );
    flight
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn signals_and_the_stop_write_the_last_window() {
    if !require_bpf() {
        return;
    }
    let mut fixture = phases();
    let tmp = TempDir::new("flight");
    let out_dir = tmp.join("out");
    let mut xtrace = Xtrace::record_work(fixture.pid(), args!["--flight", "1s"], &out_dir);
    xtrace.wait_attached();
    // 100 calls, then longer than the window: they age out.
    phase(&mut fixture, 100);
    thread::sleep(Duration::from_millis(1500));
    phase(&mut fixture, 37);
    xtrace.signal(libc::SIGUSR1);
    let line = xtrace.wait_stderr(WROTE);
    assert!(line.contains("flight-001 (37 events over the last "), "{line}");
    let first = check_window(&out_dir.join("flight-001"), 37, 1_000_000_000, "signal");
    // `xtrace view` serves a flight window as any capture.
    xtrace_tests::live::view_shows_the_summary(&out_dir.join("flight-001"));
    assert_eq!(
        u64_field(&first, "aged_out_events"),
        100,
        "the first phase aged out: {first}"
    );
    // The next directory holds what came since.
    phase(&mut fixture, 50);
    xtrace.signal(libc::SIGUSR1);
    xtrace.wait_stderr(WROTE);
    let second = check_window(&out_dir.join("flight-002"), 50, 1_000_000_000, "signal");
    assert_eq!(u64_field(&second, "aged_out_events"), 0);
    phase(&mut fixture, 20);
    xtrace.signal(libc::SIGINT);
    let finished = xtrace.wait();
    finished.assert_success();
    check_window(&out_dir.join("flight-003"), 20, 1_000_000_000, "stop");

    // The capture directory: the whole run's counts, names but no spans in its trace.
    let whole = Outputs::read(&out_dir);
    assert_eq!(whole.probe_count("work"), 207);
    assert!(
        whole.spans().is_empty(),
        "the events are in the flight directories only"
    );
    let flight = &whole.summary["flight"];
    assert_eq!(u64_field(flight, "aged_out_events"), 100, "{flight}");
    assert_eq!(u64_field(flight, "size_bytes"), 64 << 20);
    assert_eq!(
        flight["directories"],
        serde_json::json!(["flight-001", "flight-002", "flight-003"])
    );

    // `report` of the capture directory points to its flight directories.
    let ran = run_xtrace(args!["report", &out_dir]);
    assert!(
        ran.user_error().ends_with(&format!(
            "a --flight capture keeps its events in its flight directories, not here; give one of \
             them, e.g. {}",
            out_dir.join("flight-001").display()
        )),
        "{}",
        ran.stderr
    );
    // Each stands alone for the other tools.
    let ran = run_xtrace(args!["report", out_dir.join("flight-001")]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stdout.lines().any(|l| l.contains("work") && l.contains("37")),
        "{}",
        ran.stdout
    );
    let ran = run_xtrace(args!["convert", out_dir.join("flight-002")]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(out_dir.join("flight-002/trace.perfetto-trace").is_file());
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn flight_after_keeps_what_follows_the_trigger() {
    if !require_bpf() {
        return;
    }
    let mut fixture = phases();
    let tmp = TempDir::new("flight-after");
    let out_dir = tmp.join("out");
    let flags = args!["--flight", "5s", "--flight-after", "1s"];
    let mut xtrace = Xtrace::record_work(fixture.pid(), flags, &out_dir);
    xtrace.wait_attached();
    phase(&mut fixture, 10);
    xtrace.signal(libc::SIGUSR1);
    phase(&mut fixture, 15);
    let line = xtrace.wait_stderr(WROTE);
    assert!(line.contains("flight-001 (25 events"), "{line}");
    check_window(&out_dir.join("flight-001"), 25, 5_000_000_000, "signal");
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    check_window(&out_dir.join("flight-002"), 0, 5_000_000_000, "stop");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_small_size_shortens_the_window() {
    if !require_bpf() {
        return;
    }
    let mut fixture = phases();
    let tmp = TempDir::new("flight-size");
    let out_dir = tmp.join("out");
    let flags = args!["--flight", "10s", "--flight-size", "1M"];
    let mut xtrace = Xtrace::record_work(fixture.pid(), flags, &out_dir);
    xtrace.wait_attached();
    // Ten phases a slot (100 ms) or more apart: more than 1M holds.
    for _ in 0..10 {
        phase(&mut fixture, 3000);
        thread::sleep(Duration::from_millis(150));
    }
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    let (out, flight) = flight_dir(&out_dir.join("flight-001"));
    let kept = out.spans_named("work").len() as u64;
    let aged = u64_field(&flight, "aged_out_events");
    assert!(kept > 0 && aged > 0, "some kept, some aged out: {flight}");
    assert_eq!(kept + aged, 30_000, "every event kept or counted: {flight}");
    assert!(
        u64_field(&flight, "kept_ns") < 10_000_000_000,
        "the window shortened: {flight}"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_span_over_its_limit_triggers() {
    if !require_bpf() {
        return;
    }
    let mut fixture = phases();
    let tmp = TempDir::new("flight-warn");
    let out_dir = tmp.join("out");
    let flags = args![
        "--flight",
        "5s",
        "--flight-trigger",
        "warn-over",
        "--warn-over",
        "work=1ns"
    ];
    let mut xtrace = Xtrace::record_work(fixture.pid(), flags, &out_dir);
    xtrace.wait_attached();
    phase(&mut fixture, 5);
    xtrace.wait_stderr(WROTE);
    check_window(&out_dir.join("flight-001"), 5, 5_000_000_000, "warn-over");
    // More slow spans within the window trigger nothing more: the stop writes them.
    phase(&mut fixture, 7);
    thread::sleep(Duration::from_millis(300));
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    check_window(&out_dir.join("flight-002"), 7, 5_000_000_000, "stop");
    let whole = Outputs::read(&out_dir);
    assert_eq!(
        whole.summary["flight"]["directories"],
        serde_json::json!(["flight-001", "flight-002"])
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn bad_flight_flags() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("flight-bad");
    let out = tmp.join("out");
    let cases = [
        (
            args!["--flight", "0"],
            "invalid value '0' for '--flight <DURATION>': `0` is not a duration such as 50us, 2ms or 1s (units: ns, us, ms, s)",
        ),
        (
            args!["--flight", "1s", "--flight-size", "512K"],
            "invalid value '512K' for '--flight-size <BYTES>': `512K` is less than 1M, the least the flight recorder holds (e.g. 16M, 64M, 1G)",
        ),
        (
            args!["--flight", "1s", "--flight-trigger", "often"],
            "invalid value 'often' for '--flight-trigger <TRIGGER>' [possible values: warn-over]",
        ),
    ];
    for (flags, expected) in cases {
        let mut all = args!["-u", "work", "-o", &out];
        all.extend(flags);
        let line = error_on_spinner(all);
        assert_eq!(line, format!("xtrace: error: {expected}; see `xtrace --help`"));
        assert!(!out.exists(), "nothing is created for invalid flags");
    }
    let line = error_on_spinner(args!["-u", "work", "--flight-after", "1s", "-o", &out]);
    assert!(
        line.starts_with("xtrace: error: ") && line.contains("--flight <DURATION>"),
        "names the flag it needs: {line}"
    );
}

/// CPU samples go into the window with their stacks: `profile phases 300` spins 300 ms of its
/// CPU time in phase_a, waits longer than the 1 s window, then spins 300 ms in phase_b, sampled
/// at 999 Hz. flight-001 holds phase_b's samples and none of phase_a's, which aged out and are
/// counted; stacks.folded, the summary and the timeline agree on every sample; `report` reads it.
/// The capture directory counts every sample of the run and keeps no stacks.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn each_window_holds_the_cpu_samples_taken_in_it() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().profile, &["phases", "300"]);
    fixture.wait_ready();
    let tmp = TempDir::new("flight-samples");
    let out_dir = tmp.join("out");
    let pid = fixture.pid().to_string();
    let flags = args!["-p", &pid, "-F", "999", "--flight", "1s", "-o", &out_dir];
    let mut xtrace = Xtrace::spawn(flags);
    xtrace.wait_attached();
    fixture.send("go");
    for (phase, pause) in [("a", 1500), ("b", 0)] {
        fixture.send(phase);
        assert_eq!(fixture.next_line(), "done");
        thread::sleep(Duration::from_millis(pause));
    }
    xtrace.signal(libc::SIGUSR1);
    xtrace.wait_stderr(WROTE);
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();

    let dir = out_dir.join("flight-001");
    let out = Outputs::read_profiled(&dir);
    let flight = &out.summary["flight"];
    let folded = out.folded();
    let samples = u64_field(&out.summary, "samples");
    assert_eq!(folded.iter().map(|(_, n)| n).sum::<u64>(), samples, "{folded:?}");
    assert_eq!(out.timeline_samples().len() as u64, samples);
    assert_eq!(u64_field(&out.summary, "timeline_samples"), samples);
    assert!(
        folded.iter().all(|(stack, _)| !stack.contains("phase_a")),
        "phase A aged out: {folded:?}"
    );
    // 300 ms of phase_b's CPU time at 999 Hz: 300 ticks of the CPUs it ran on fall in it, give
    // or take one per time it was scheduled in; a third either way for a busy machine.
    let on_b: u64 = folded
        .iter()
        .filter(|(stack, _)| stack.contains(";phase_b"))
        .map(|(_, n)| n)
        .sum();
    assert!(
        (200..=400).contains(&on_b),
        "{on_b} samples in phase_b: {folded:?}"
    );
    // One thread, sampled at most once a tick: no more than the window's ticks.
    let kept_ns = u64_field(flight, "kept_ns");
    assert!(
        samples <= 999 * kept_ns / 1_000_000_000 + 2,
        "{samples} in {kept_ns} ns"
    );
    // Phase A's ~300 samples fell out of the window, counted.
    assert!(u64_field(flight, "aged_out_events") >= 200, "{flight}");
    let ran = run_xtrace(args!["report", &dir]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(ran.stdout.contains("phase_b"), "{}", ran.stdout);

    // The run: every sample counted, each in a directory or aged out; the stacks are in those.
    let whole = Outputs::read(&out_dir);
    assert!(!out_dir.join("stacks.folded").exists());
    let last = Outputs::read_profiled(&out_dir.join("flight-002"));
    assert_eq!(
        u64_field(&whole.summary, "samples"),
        samples
            + u64_field(&last.summary, "samples")
            + u64_field(&whole.summary["flight"], "aged_out_events"),
        "{}",
        whole.summary
    );
    assert!(whole.summary["hot_functions"].as_array().unwrap().is_empty());
}

/// A flight directory in Perfetto's format, read by `report` as any capture.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn perfetto_flight_directories_are_read_by_report() {
    if !require_bpf() {
        return;
    }
    let mut fixture = phases();
    let tmp = TempDir::new("flight-perfetto");
    let out_dir = tmp.join("out");
    let flags = args!["--flight", "5s", "--trace-format", "perfetto"];
    let mut xtrace = Xtrace::record_work(fixture.pid(), flags, &out_dir);
    xtrace.wait_attached();
    phase(&mut fixture, 12);
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    let dir = out_dir.join("flight-001");
    assert!(dir.join("trace.perfetto-trace").is_file());
    let ran = run_xtrace(args!["report", &dir, "--format", "csv"]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stdout
            .lines()
            .any(|l| l.split(',').nth(1) == Some("work") && l.split(',').nth(2) == Some("12")),
        "{}",
        ran.stdout
    );
}
