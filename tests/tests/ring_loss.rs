//! A full ring buffer is never a silent loss, and a burst past a quarter of the ring wakes the
//! reader once per wait. xtrace records two `spans threads 1 10000` processes (each one thread
//! calling work() 10,000 times, on its go line) through a 4 KiB ring, stopped (SIGSTOP) while each
//! process makes its calls, so nothing is read meanwhile and the ring fills. Every call is then
//! either a span in trace.json or a drop counted in `lost.ring_full`, exactly. The ring's 4,096
//! bytes hold a thread's 40-byte name record and 72 span records of 48 bytes (each record takes its
//! length rounded up to 8 plus an 8-byte header: 48 + 72 × 56 = 4,080), so each burst delivers 72
//! spans and 9,928 calls are counted lost.
//!
//! The kernel's `WOKEN` flag is 0 while xtrace waits on the empty ring, 1 once a burst took the
//! unread data past the quarter mark (xtrace, stopped, cannot clear it), and 0 again once xtrace
//! has drained the ring and waits again; the second burst sets it again.

use std::time::{Duration, Instant};

use xtrace_tests::{
    args,
    bpf::{array_u32, Attachments},
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{process_state, Xtrace},
    TempDir,
};

const CALLS: u64 = 10_000;
/// Span records that fit in a 4 KiB ring after the thread's name record.
const FITS: u64 = 72;

/// Polls (up to 5 s) until `done` holds, else fails with `what`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// With xtrace stopped, lets `fixture` make its calls and checks that they woke xtrace's ring.
fn burst_while_stopped(xtrace: &Xtrace, fixture: &mut Fixture) {
    xtrace.signal(libc::SIGSTOP);
    wait_until("xtrace did not stop on SIGSTOP", || {
        process_state(xtrace.pid()) == 'T'
    });
    assert_eq!(array_u32(xtrace.pid(), "WOKEN", 0), 0, "WOKEN while xtrace waits");
    fixture.go();
    assert!(fixture.wait().success(), "the fixture failed");
    assert_eq!(
        array_u32(xtrace.pid(), "WOKEN", 0),
        1,
        "a record past the quarter mark woke xtrace"
    );
    xtrace.signal(libc::SIGCONT);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_full_ring_counts_every_dropped_call() {
    if !require_bpf() {
        return;
    }
    let calls = CALLS.to_string();
    let mut first = Fixture::spawn(&fixtures().spans, &["threads", "1", &calls]);
    let mut second = Fixture::spawn(&fixtures().spans, &["threads", "1", &calls]);
    first.wait_ready();
    second.wait_ready();
    let tmp = TempDir::new("ring-loss");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        first.pid().to_string(),
        "-p",
        second.pid().to_string(),
        "-u",
        "work",
        "--buffer-size",
        "4K",
        "-o",
        &out_dir
    ]);
    xtrace.wait_attached();
    burst_while_stopped(&xtrace, &mut first);
    wait_until("xtrace did not clear WOKEN after draining", || {
        array_u32(xtrace.pid(), "WOKEN", 0) == 0
    });
    burst_while_stopped(&xtrace, &mut second);
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();

    let out = Outputs::read(&out_dir);
    assert_eq!(out.stop_reason(), "targets_exited");
    let spans = out.spans_named("work");
    for pid in [first.pid(), second.pid()] {
        let delivered = spans.iter().filter(|s| s.pid == u64::from(pid)).count() as u64;
        assert_eq!(delivered, FITS, "spans of process {pid} that fit in the ring");
    }
    assert_eq!(
        out.probe_count("work"),
        2 * FITS,
        "summary count == spans in trace.json"
    );
    let lost = &out.summary["lost"];
    let dropped = 2 * (CALLS - FITS);
    assert_eq!(u64_field(lost, "ring_full"), dropped, "lost.ring_full: {lost}");
    assert_eq!(u64_field(lost, "too_deep"), 0);
    assert_eq!(u64_field(lost, "no_thread_slot"), 0);
    assert_eq!(out.lost_events(), dropped, "lost_events");
    assert!(
        finished.stdout.contains(&format!("{dropped} lost")),
        "the summary table shows the loss: {}",
        finished.stdout
    );
}
