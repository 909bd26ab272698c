//! A full ring buffer is never a silent loss. xtrace records `spans threads 1 10000` (one thread
//! calling work() 10,000 times) through a 4 KiB ring while it is stopped (SIGSTOP), so nothing
//! is read while the calls run and the ring fills. Every call is then either a span in trace.json
//! or a drop counted in `lost.ring_full`, exactly. The ring's 4,096 bytes hold the thread's
//! 40-byte name record and 72 span records of 48 bytes (each record takes its length rounded up to
//! 8 plus an 8-byte header: 48 + 72 × 56 = 4,080), so 72 spans arrive and 9,928 calls are counted
//! lost.

use std::time::{Duration, Instant};

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::Xtrace,
    TempDir,
};

const CALLS: u64 = 10_000;
/// Span records that fit in a 4 KiB ring after the thread's name record.
const FITS: u64 = 72;

/// The state letter of process `pid` in /proc/PID/stat (R, S, T, ...).
fn state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("reading /proc/PID/stat");
    let (_, rest) = stat
        .rsplit_once(')')
        .expect("stat has the command in parentheses");
    rest.trim_start().chars().next().expect("a state letter")
}

#[test]
fn a_full_ring_counts_every_dropped_call() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().spans, &["threads", "1", &CALLS.to_string()]);
    fixture.wait_ready();
    let tmp = TempDir::new("ring-loss");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::record_work(fixture.pid(), args!["--buffer-size", "4K"], &out_dir);
    xtrace.wait_attached();
    xtrace.signal(libc::SIGSTOP);
    let deadline = Instant::now() + Duration::from_secs(5);
    while state(xtrace.pid()) != 'T' {
        assert!(Instant::now() < deadline, "xtrace did not stop on SIGSTOP");
        std::thread::sleep(Duration::from_millis(5));
    }
    fixture.go();
    assert!(fixture.wait().success(), "the fixture failed");
    xtrace.signal(libc::SIGCONT);
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();

    let out = Outputs::read(&out_dir);
    assert_eq!(out.stop_reason(), "targets_exited");
    let spans = out.spans_named("work").len() as u64;
    assert_eq!(spans, FITS, "spans that fit in the ring");
    assert_eq!(
        out.probe_count("work"),
        spans,
        "summary count == spans in trace.json"
    );
    let lost = &out.summary["lost"];
    assert_eq!(
        u64_field(lost, "ring_full"),
        CALLS - FITS,
        "lost.ring_full: {lost}"
    );
    assert_eq!(u64_field(lost, "too_deep"), 0);
    assert_eq!(u64_field(lost, "no_thread_slot"), 0);
    assert_eq!(out.lost_events(), CALLS - FITS, "lost_events");
    assert!(
        finished.stdout.contains(&format!("{} lost", CALLS - FITS)),
        "the summary table shows the loss: {}",
        finished.stdout
    );
}
