//! Kernel-side filters: `--tid` keeps exactly the calls of the named threads (the others never
//! reach user space), and a thread outside the traced processes is refused. Fixture: `spans threads
//! 4 500` (4 threads, each prints its tid, then calls work() exactly 500 times after `go`).

use xtrace_tests::{
    args,
    bpf::Programs,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{run_error, Xtrace},
    TempDir,
};

#[test]
fn tid_filter_keeps_exactly_that_threads_calls() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().spans, &["threads", "4", "500"]);
    let tids = fixture.wait_ready_tids();
    assert_eq!(tids.len(), 4);
    let chosen = [tids[1], tids[3]];
    let tmp = TempDir::new("tid-filter");
    let out_dir = tmp.join("out");
    let before = Programs::snapshot();
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "work",
        "--tid",
        chosen[0].to_string(),
        "--tid",
        chosen[1].to_string(),
        "-o",
        &out_dir
    ]);
    xtrace.wait_attached();
    fixture.go();
    assert!(fixture.wait().success());
    xtrace.wait().assert_success();
    before.assert_none_left();

    let out = Outputs::read(&out_dir);
    let spans = out.spans();
    assert_eq!(spans.len(), 1000);
    for tid in chosen {
        let on_tid = spans.iter().filter(|s| s.tid == u64::from(tid)).count();
        assert_eq!(on_tid, 500, "spans on tid {tid}");
    }
    assert_eq!(out.probe_count("work"), 1000);
    assert_eq!(out.lost_events(), 0);
}

#[test]
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
