//! A process in its own PID and mount namespaces, traced by `--pid`: `unshare --pid --mount --fork`
//! mounts a tmpfs over a directory that stays empty on the host, copies `uselib` and `libxtfix.so`
//! into it and runs `uselib` from there as pid 1 of the new PID namespace. The library's path exists
//! only inside the namespace, so probing it works only through /proc/PID/root; the trace must name
//! the host pid on every span and report the namespace pid beside it.

use std::path::Path;

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::Xtrace,
    TempDir,
};

/// Starts `uselib` inside new PID and mount namespaces with its files under `root` (a directory
/// that stays empty on the host) and waits for its ready line. Returns the fixture (the `unshare`
/// process) and uselib's host pid.
fn spawn_in_namespaces(root: &Path) -> (Fixture, u32) {
    let fx = fixtures();
    let script =
        r#"mount -t tmpfs xtrace-test "$0" && cp "$1" "$2" "$0"/ && LD_LIBRARY_PATH="$0" exec "$0"/uselib"#;
    let root_arg = root.to_str().expect("UTF-8 path");
    let uselib = fx.uselib.to_str().expect("UTF-8 path");
    let libxtfix = fx.libxtfix.to_str().expect("UTF-8 path");
    let mut fixture = Fixture::spawn(
        Path::new("unshare"),
        &[
            "--pid", "--mount", "--fork", "sh", "-c", script, root_arg, uselib, libxtfix,
        ],
    );
    fixture.wait_ready();
    let unshare = fixture.pid();
    let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
        .expect("reading unshare's children");
    let child: u32 = children
        .split_whitespace()
        .next()
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("unshare has no child: {children:?}"));
    (fixture, child)
}

#[test]
fn pid_in_other_namespaces_resolves_files_through_its_root() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("containers");
    let root = tmp.join("root");
    std::fs::create_dir(&root).expect("creating the namespace's directory");
    let (mut fixture, pid) = spawn_in_namespaces(&root);
    assert!(
        !root.join("libxtfix.so").exists(),
        "the library must exist only inside the namespace"
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("uselib status");
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("NSpid:") && l.ends_with("\t1")),
        "uselib is pid 1 of its namespace: {status}"
    );

    // `list symbols --pid` sees the namespace's library too.
    let listed = Xtrace::spawn(args![
        "list",
        "symbols",
        "--pid",
        pid.to_string(),
        "libxtfix:lib_*"
    ])
    .wait();
    listed.assert_success();
    assert!(
        listed.stdout.lines().any(|l| l.contains("lib_work")),
        "list symbols output:\n{}",
        listed.stdout
    );

    let before = Attachments::snapshot();
    let out_dir = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        pid.to_string(),
        "-u",
        "libxtfix:lib_work",
        "-o",
        &out_dir
    ]);
    xtrace.wait_attached();
    fixture.go();
    assert!(fixture.wait().success(), "the namespaced fixture failed");
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();

    let out = Outputs::read(&out_dir);
    let spans = out.spans();
    assert_eq!(out.probe_count("lib_work"), 7);
    assert_eq!(spans.len(), 7, "spans: {spans:?}");
    for span in &spans {
        assert_eq!(span.pid, u64::from(pid), "spans carry the host pid: {span:?}");
        assert_eq!(span.tid, u64::from(pid), "uselib is single-threaded: {span:?}");
    }
    let library = root.join("libxtfix.so");
    assert_eq!(
        out.probe("lib_work")["target"].as_str(),
        library.to_str(),
        "the target is the path the process sees"
    );
    let targets = out.summary["targets"].as_array().expect("targets array");
    assert_eq!(targets.len(), 1, "targets: {targets:?}");
    assert_eq!(targets[0]["pid"], u64::from(pid));
    assert_eq!(targets[0]["ns_pid"], 1);
    assert_eq!(targets[0]["comm"], "uselib");
    let names = out.metadata("process_name");
    assert_eq!(names.len(), 1, "process names: {names:?}");
    assert_eq!(names[0]["pid"], u64::from(pid));
    assert_eq!(names[0]["args"]["name"], "uselib (pid 1 in its namespace)");
}
