//! A process in its own PID and mount namespaces, traced by `--pid`: `unshare --pid --mount --fork`
//! mounts a tmpfs over a directory that stays empty on the host, copies `uselib` and `libxtfix.so`
//! into it and runs `uselib` from there as pid 1 of the new PID namespace. The library's path exists
//! only inside the namespace, so probing it works only through /proc/PID/root; the trace must name
//! the host pid on every span and report the namespace pid beside it.
//!
//! And xtrace itself in a container: `unshare --pid --fork --mount-proc xtrace ...` runs it as the
//! first process of new PID and mount namespaces with their own /proc. Every pid it reports must
//! then be that namespace's (the ones the fixtures print), and a process outside the namespace,
//! which hits the same probe, must not be traced. A `--pid` in a namespace nested in xtrace's, and
//! a /proc that is not xtrace's namespace's, are refused.

use std::path::Path;

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{child_pid, fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{expect_user_error, namespace_pid, namespace_pids, nsenter_flags, only_child, Xtrace},
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
    let child = only_child(fixture.pid());
    (fixture, child)
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn xtrace_in_a_pid_namespace_samples_and_follows_with_its_pids() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("containers-sampling");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let profile = &fixtures().profile;
    let finished =
        Xtrace::spawn_in_pid_namespace(args!["-F", "999", "-o", &out_dir, "--", profile, "forks", "5"])
            .wait();
    finished.assert_success();
    before.assert_none_left();
    // The fixture prints each child's pid as fork() returned it: the namespace's.
    let children: Vec<u32> = finished.stdout.lines().filter_map(child_pid).collect();
    assert_eq!(children.len(), 40, "stdout: {}", finished.stdout);

    let out = Outputs::read_profiled(&out_dir);
    let parent = out.summary["targets"][0]["pid"].as_u64().unwrap() as u32;
    assert_eq!(out.summary["targets"][0]["ns_pid"], serde_json::Value::Null);
    assert_eq!(out.summary["followed_processes"], 40);
    assert_eq!(out.summary["processes_not_followed"], 0);
    assert_eq!(out.summary["lost_mapping_records"], 0);
    let by_pid = out.samples_by_pid();
    assert!(
        by_pid
            .iter()
            .all(|(pid, _)| *pid == parent || children.contains(pid)),
        "samples of processes other than the launched one ({parent}) and its children {children:?}: {by_pid:?}"
    );
    out.assert_forks_symbolized(&children);
    out.assert_symbolized(parent);
    let names = out.metadata("process_name");
    assert!(
        names
            .iter()
            .any(|name| name["pid"] == parent && name["args"]["name"] == "profile"),
        "process names: {names:?}"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn xtrace_in_a_pid_namespace_traces_only_its_processes_with_its_pids() {
    if !require_bpf() {
        return;
    }
    let fx = fixtures();
    let spans = fx.spans.to_str().expect("UTF-8 path");
    let tmp = TempDir::new("containers-system-wide");
    let out_dir = tmp.join("out");
    // A process outside the namespace, calling the probed function 5 times.
    let mut outside = Fixture::spawn(&fx.spans, &["threads", "1", "5"]);
    outside.wait_ready_tids();
    let before = Attachments::snapshot();
    let mut xtrace =
        Xtrace::spawn_in_pid_namespace(args!["-a", "-u", format!("{spans}:work"), "-o", &out_dir]);
    xtrace.wait_attached();
    let xtrace_pid = only_child(xtrace.pid());
    // A process inside it: 2 threads calling it 7 times each, printing their tids there.
    let [pid_ns, mount_ns] = nsenter_flags(xtrace_pid, xtrace_pid);
    let mut inside = Fixture::spawn(
        Path::new("nsenter"),
        &[&pid_ns, &mount_ns, "--", spans, "threads", "2", "7"],
    );
    let mut tids: Vec<u64> = inside.wait_ready_tids().into_iter().map(u64::from).collect();
    tids.sort_unstable();
    let inside_pid = u64::from(namespace_pid(only_child(inside.pid())));
    outside.go();
    inside.go();
    assert!(outside.wait().success() && inside.wait().success());
    // SAFETY: kill has no memory-safety preconditions; xtrace is alive until it is signalled.
    assert_eq!(unsafe { libc::kill(xtrace_pid as i32, libc::SIGINT) }, 0);
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();

    let out = Outputs::read(&out_dir);
    let spans = out.spans();
    assert_eq!(
        spans.len(),
        14,
        "only the 14 calls inside the namespace: {spans:?}"
    );
    for tid in &tids {
        let calls = spans.iter().filter(|span| span.tid == *tid).count();
        assert_eq!(calls, 7, "thread {tid} (tids {tids:?}): {spans:?}");
    }
    assert!(
        spans.iter().all(|span| span.pid == inside_pid),
        "every span carries the namespace pid {inside_pid}: {spans:?}"
    );
    let names = out.metadata("process_name");
    assert_eq!(names.len(), 1, "process names: {names:?}");
    assert_eq!(names[0]["pid"], inside_pid);
    assert_eq!(names[0]["args"]["name"], "spans");
}

/// The refusal of a /proc that is not of xtrace's PID namespace.
const PROC_NOT_OWN: &str = "xtrace: error: /proc is not of xtrace's own PID namespace (a container \
                            that kept the host's /proc, or none mounted): mount /proc for xtrace's \
                            namespace, or run xtrace in the host's PID namespace";

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn xtrace_in_a_pid_namespace_with_the_hosts_proc_is_refused() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("containers-host-proc");
    let before = Attachments::snapshot();
    let xtrace = Xtrace::spawn_in_pid_namespace_with_host_proc(args![
        "-u",
        "work",
        "-o",
        tmp.join("out"),
        "--",
        &fixtures().spans,
        "exit",
        "0"
    ]);
    let line = expect_user_error(&before, xtrace);
    assert_eq!(line, PROC_NOT_OWN);
    assert!(!tmp.join("out").exists(), "no output directory is made");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn xtrace_in_a_pid_namespace_refuses_a_process_of_a_nested_one_and_a_proc_not_its_own() {
    if !require_bpf() {
        return;
    }
    let spans = fixtures().spans.to_str().expect("UTF-8 path");
    // `spans spin` as pid 1 of an inner namespace nested in an outer one, each with its /proc:
    // the outer unshare's mount namespace has the outer /proc, the inner unshare's (the outer
    // namespace's pid 1) the inner /proc.
    let unshare = ["unshare", "--pid", "--fork", "--mount-proc"];
    let mut command: Vec<&str> = unshare[1..].to_vec();
    command.extend(unshare);
    command.extend([spans, "spin"]);
    let mut fixture = Fixture::spawn(Path::new("unshare"), &command);
    fixture.wait_ready();
    let outer_init = only_child(fixture.pid());
    let target = only_child(outer_init);
    let pids = namespace_pids(target);
    assert_eq!(
        pids.len(),
        3,
        "host, outer and inner pids of the target: {pids:?}"
    );
    assert_eq!(pids[2], 1);
    let tmp = TempDir::new("containers-nested");
    let record = args!["-p", pids[1].to_string(), "-u", "work", "-o", tmp.join("out")];

    // In the outer namespace with the inner one's /proc, which does not show xtrace.
    let before = Attachments::snapshot();
    let xtrace = Xtrace::spawn_in_namespaces_of(outer_init, outer_init, record.clone());
    let wrong_proc = expect_user_error(&before, xtrace);
    // In the outer namespace with its own /proc.
    let xtrace = Xtrace::spawn_in_namespaces_of(outer_init, fixture.pid(), record);
    let nested = expect_user_error(&before, xtrace);
    // SAFETY: kill has no memory-safety preconditions; the outer namespace's first process is
    // alive, and with it go all the namespaces' processes.
    assert_eq!(unsafe { libc::kill(outer_init as i32, libc::SIGKILL) }, 0);
    fixture.wait();
    assert_eq!(wrong_proc, PROC_NOT_OWN);
    assert_eq!(
        nested,
        format!(
            "xtrace: error: process {} is in a PID namespace nested in xtrace's (it is pid 1 there), \
             and xtrace in a container traces only its own namespace's processes: run xtrace in the \
             host's PID namespace, or in that process's",
            pids[1]
        )
    );
}

/// A launched command that runs in its own mount namespace, where its path names another file
/// than on the host (a bind mount), and exits before the capture ends: its frames are not named
/// from the host's file at that path (the file's device and inode tell them apart, and so does
/// its build ID), but from the file it mapped, held open since it was mapped (`hot_a`, `hot_b`).
/// Here the namespace runs `profile split`; the host's file is `spans`, whose functions
/// (`outer`, `run_threads`, ...) named profile's frames once.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_gone_process_of_another_mount_namespace_is_not_named_from_the_hosts_file() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("containers-bind");
    // A second, as the build ID test below runs it.
    let folded = profiled_over_a_bind_mount(&tmp, &fixtures().spans, 1000);
    let in_prog: u64 = folded
        .iter()
        .filter(|(stack, _)| stack.starts_with("prog;"))
        .map(|(_, n)| n)
        .sum();
    assert!(in_prog >= 100, "{folded:?}");
    // Functions of spans that profile does not have (both have `main` and `spin`).
    let spans_names = ["outer", "inner", "work", "run_threads", "forever"];
    for (stack, _) in &folded {
        let frames: Vec<&str> = stack.split(';').collect();
        assert!(
            !frames.iter().any(|f| spans_names.contains(f)),
            "a frame named from the host's file: {stack}"
        );
    }
    assert!(
        samples_in(&folded, "hot_a") >= 50 && samples_in(&folded, "hot_b") >= 15,
        "{folded:?}"
    );
}

/// The same program at another inode, as a bind mount, an overlay or a reinstalled package shows
/// it: a launched command that runs a copy of `profile` in its own mount namespace, over another
/// copy on the host, and exits before the capture ends. The host's file at its path has another
/// device or inode than the one mapped, but the build ID the mapped file had (read while it was
/// mapped): its frames are named from it (`hot_a`, `hot_b`), not left as `prog+0xOFFSET`.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_gone_process_is_named_from_a_file_with_its_build_id() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("containers-build-id");
    // A second: the build ID is read while the program runs, when xtrace applies its mapping
    // (the first samples may hold xtrace up for a few hundred milliseconds: kallsyms is read).
    let folded = profiled_over_a_bind_mount(&tmp, &fixtures().profile, 1000);
    assert!(
        samples_in(&folded, "hot_a") >= 50 && samples_in(&folded, "hot_b") >= 50,
        "{folded:?}"
    );
    assert!(
        !folded
            .iter()
            .any(|(stack, _)| stack.starts_with("prog;") && stack.contains(";prog+0x")),
        "{folded:?}"
    );
}

/// The folded stacks of `profile split MS`, launched from `tmp/inside/prog` (a copy of profile) in
/// a mount namespace of its own where it is bind-mounted over `tmp/host` (`tmp/host/prog`, a
/// copy of `host_program`), at the path `tmp/host/prog`; sampled at 999 Hz.
fn profiled_over_a_bind_mount(tmp: &TempDir, host_program: &std::path::Path, ms: u32) -> Vec<(String, u64)> {
    let (host, inside) = (tmp.join("host"), tmp.join("inside"));
    for (dir, program) in [(&host, host_program), (&inside, fixtures().profile.as_path())] {
        std::fs::create_dir(dir).expect("creating a directory");
        std::fs::copy(program, dir.join("prog")).expect("copying a fixture");
    }
    let script = format!(r#"mount --bind "$0" "$1" && exec "$1"/prog split {ms}"#);
    let out_dir = tmp.join("out");
    let finished = Xtrace::spawn(args![
        "-F", "999", "-o", &out_dir, "--", "unshare", "--mount", "sh", "-c", script, &inside, &host
    ])
    .wait();
    finished.assert_success();
    Outputs::read_profiled(&out_dir).folded()
}

/// Samples of process `prog` with `frame` on their stack.
fn samples_in(folded: &[(String, u64)], frame: &str) -> u64 {
    folded
        .iter()
        .filter(|(stack, _)| stack.starts_with("prog;") && stack.split(';').any(|f| f == frame))
        .map(|(_, n)| n)
        .sum()
}
