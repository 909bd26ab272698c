//! System-wide (`-a`): probes on a file fire in every process that maps it, including processes
//! started after xtrace attached; trace.json names each process. Fixture: `uselib` (lib_work x 7
//! after `go`), two instances started after attach. Sampling every process symbolizes processes
//! that live a few milliseconds: fixture `profile forks MS` (40 children, alternately forked and
//! exec'd, each living about MS ms).

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{run_error, Xtrace},
    TempDir,
};

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn processes_started_after_attach_are_traced() {
    if !require_bpf() {
        return;
    }
    let lib = fixtures().libxtfix.to_str().expect("UTF-8 path").to_owned();
    let tmp = TempDir::new("system-wide");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args!["-a", "-u", format!("{lib}:lib_work"), "-o", &out_dir]);
    let notice = xtrace.wait_attached();
    assert!(notice.contains("every process"), "{notice}");
    let mut a = Fixture::spawn(&fixtures().uselib, &[]);
    let mut b = Fixture::spawn(&fixtures().uselib, &[]);
    a.wait_ready();
    b.wait_ready();
    a.go();
    b.go();
    assert!(a.wait().success() && b.wait().success());
    // Nothing ends a system-wide capture but a signal or -d.
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    before.assert_none_left();

    let out = Outputs::read(&out_dir);
    assert_eq!(out.stop_reason(), "interrupted");
    assert_eq!(out.probe_count("lib_work"), 14);
    assert_eq!(
        u64_field(&out.summary, "uprobes"),
        2,
        "one entry and one return uprobe"
    );
    let process_names = out.metadata("process_name");
    for pid in [a.pid(), b.pid()] {
        let spans = out
            .spans()
            .into_iter()
            .filter(|s| s.pid == u64::from(pid))
            .count();
        assert_eq!(spans, 7, "spans of pid {pid}");
        let named = process_names
            .iter()
            .any(|m| m["pid"] == pid && m["args"]["name"] == "uselib");
        assert!(named, "pid {pid} is named uselib: {process_names:?}");
    }
}

/// xtrace's own calls are never traced: with `-a -u libc:malloc` its reader and writer threads,
/// which allocate for every batch they handle, would feed the ring they read (about a thousand of
/// its own spans a second before). uselib's 7 calls to lib_work are there.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn xtrace_does_not_trace_itself() {
    if !require_bpf() {
        return;
    }
    let lib = fixtures().libxtfix.to_str().expect("UTF-8 path").to_owned();
    let tmp = TempDir::new("system-wide-self");
    let out_dir = tmp.join("out");
    let probes = args![
        "-u",
        "libc:malloc",
        "-u",
        "libc:free",
        "-u",
        format!("{lib}:lib_work")
    ];
    let mut all = args!["-a", "-o", &out_dir];
    all.extend(probes);
    let mut xtrace = Xtrace::spawn(all);
    xtrace.wait_attached();
    let mut fixture = Fixture::spawn(&fixtures().uselib, &[]);
    fixture.wait_ready();
    fixture.go();
    assert!(fixture.wait().success());
    xtrace.signal(libc::SIGINT);
    let own = u64::from(xtrace.pid());
    xtrace.wait().assert_success();
    let out = Outputs::read(&out_dir);
    assert_eq!(out.spans_named("lib_work").len(), 7);
    assert!(out.probe_count("malloc") > 0, "uselib and others allocate");
    let mine = out.spans().into_iter().filter(|s| s.pid == own).count();
    assert_eq!(mine, 0, "spans of xtrace itself (pid {own})");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn system_wide_needs_a_target_file() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("system-wide-bad");
    let line = run_error(args!["-a", "-u", "lib_work", "-o", tmp.join("out")]);
    assert!(
        line.contains("-a/--system-wide") && line.contains("TARGET"),
        "{line}"
    );
    let line = run_error(args!["-a", "-p", "1", "-u", "libc:malloc", "-o", tmp.join("out")]);
    assert!(line.contains("--system-wide") && line.contains("--pid"), "{line}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn sampling_every_process_symbolizes_children_that_live_milliseconds() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("system-wide-forks");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args!["-a", "-F", "999", "-o", &out_dir]);
    xtrace.wait_attached();
    let mut fixture = Fixture::spawn(&fixtures().profile, &["forks", "5"]);
    fixture.wait_ready();
    fixture.send("go");
    let children = fixture.children_until_exited();
    fixture.go();
    assert!(fixture.wait().success());
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    before.assert_none_left();

    let out = Outputs::read_profiled(&out_dir);
    assert_eq!(children.len(), 40);
    assert_eq!(out.summary["followed_processes"], serde_json::Value::Null);
    assert_eq!(out.summary["lost_mapping_records"], 0);
    out.assert_forks_symbolized(&children);
}
