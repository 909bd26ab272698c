//! Launching a command under xtrace (`-- COMMAND ARGS...`): nested spans with depths and
//! containment, stop when the command exits, and the command's exit status in summary.json.
//! Fixture: `spans nested 10` (outer() ×10, each calling inner() twice) and `spans exit 3`.

use std::collections::BTreeMap;

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::fixtures,
    output::{u64_field, Outputs, Span},
    require_bpf,
    run::Xtrace,
    TempDir,
};

/// Runs `xtrace <args>` to completion, expecting the attached line and exit 0 with no program
/// left, and returns its outputs.
fn run_to_exit(args: Vec<std::ffi::OsString>, out_dir: &std::path::Path) -> Outputs {
    run_to_exit_noticed(args, out_dir).0
}

/// [`run_to_exit`], also returning the attached line.
fn run_to_exit_noticed(args: Vec<std::ffi::OsString>, out_dir: &std::path::Path) -> (Outputs, String) {
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args);
    let notice = xtrace.wait_attached();
    let finished = xtrace.wait();
    finished.assert_success();
    assert!(!finished.left_processes, "the command outlived xtrace");
    before.assert_none_left();
    (Outputs::read(out_dir), notice)
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn nested_spans_have_depth_and_containment() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("nested");
    let out_dir = tmp.join("out");
    let out = run_to_exit(
        args![
            "-u",
            "outer",
            "-u",
            "inner",
            "-o",
            &out_dir,
            "--",
            &fixtures().spans,
            "nested",
            "10"
        ],
        &out_dir,
    );

    let outer = out.spans_named("outer");
    let inner = out.spans_named("inner");
    assert_eq!(outer.len(), 10, "outer spans");
    assert_eq!(inner.len(), 20, "inner spans");
    assert_eq!(out.spans().len(), 30, "no other spans");
    assert_eq!(out.probe_count("outer"), 10);
    assert_eq!(out.probe_count("inner"), 20);
    assert_eq!(out.stop_reason(), "targets_exited");
    assert_eq!(out.lost_events(), 0);

    let command_pid = u64_field(&out.summary["command"], "pid");
    for span in outer.iter().chain(&inner) {
        assert_eq!(span.pid, command_pid, "span pid is the command's: {span:?}");
    }
    for span in &outer {
        assert_eq!(span.depth, 0, "outer depth: {span:?}");
    }
    for span in &inner {
        assert_eq!(span.depth, 1, "inner depth: {span:?}");
    }

    let contains =
        |o: &Span, i: &Span| o.tid == i.tid && o.start_ns() <= i.start_ns() && i.end_ns() <= o.end_ns();
    for i in &inner {
        assert!(
            outer.iter().any(|o| contains(o, i)),
            "inner span {i:?} lies within no outer span on its thread"
        );
    }
    let mut per_outer: BTreeMap<usize, usize> = BTreeMap::new();
    for (n, o) in outer.iter().enumerate() {
        per_outer.insert(n, inner.iter().filter(|i| contains(o, i)).count());
    }
    assert!(
        per_outer.values().all(|&n| n == 2),
        "every outer span contains exactly two inner spans: {per_outer:?}"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn launched_command_exit_status() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("exit3");
    let out_dir = tmp.join("out");
    let spans_path = &fixtures().spans;
    let out = run_to_exit(
        args!["record", "-u", "work", "-o", &out_dir, "--", spans_path, "exit", "3"],
        &out_dir,
    );

    let spans = out.spans_named("work");
    assert_eq!(spans.len(), 3, "work spans");
    assert_eq!(out.probe_count("work"), 3);
    assert_eq!(out.stop_reason(), "targets_exited");

    let command = &out.summary["command"];
    assert!(command.is_object(), "summary.json command: {command}");
    assert_eq!(command["exit_code"].as_i64(), Some(3), "command: {command}");
    assert!(command["signal"].is_null(), "command: {command}");
    assert_eq!(command["ended_by_xtrace"], false, "command: {command}");
    assert_eq!(out.summary["targets"][0]["exited"], true);
    let argv: Vec<&str> = command["argv"]
        .as_array()
        .expect("command.argv is an array")
        .iter()
        .map(|a| a.as_str().expect("argv entries are strings"))
        .collect();
    assert_eq!(argv.len(), 3, "argv: {argv:?}");
    assert!(argv[0].ends_with("spans"), "argv[0]: {argv:?}");
    assert_eq!(&argv[1..], ["exit", "3"], "argv: {argv:?}");
    let pid = u64_field(command, "pid");
    assert!(
        spans.iter().all(|s| s.pid == pid),
        "spans carry the command pid {pid}"
    );
}

/// The launched child's last steps before its exec (the end of its wait at the gate, the exec
/// itself) call no C library function: tracing the library's exec and cancellation functions in
/// a command that calls none counts none (the child's `__pthread_disable_asynccancel` after its
/// read, and with `--exits ret` `execvp` and `execvpe`, had been counted as the command's).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn the_launchers_own_calls_before_the_exec_are_not_the_commands() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("launcher-calls");
    let out_dir = tmp.join("out");
    let out = run_to_exit(
        args![
            "record",
            "-u",
            "work",
            "-u",
            "libc.so.6:exec*",
            "-u",
            "libc.so.6:__pthread_*asynccancel",
            "--exits",
            "ret",
            "-o",
            &out_dir,
            "--",
            &fixtures().spans,
            "exit",
            "0"
        ],
        &out_dir,
    );
    assert_eq!(out.probe_count("work"), 3);
    let probes = out.summary["probes"].as_array().expect("probes");
    let library: Vec<_> = probes.iter().filter(|p| p["name"] != "work").collect();
    for name in ["execvp", "execvpe", "__pthread_disable_asynccancel"] {
        assert!(
            library.iter().any(|p| p["name"] == name),
            "{name} not probed: {library:?}"
        );
    }
    let counted: Vec<_> = library.iter().filter(|p| p["count"] != 0).collect();
    assert!(counted.is_empty(), "{counted:?}");
}

/// A launched command that exits before any record names it, its name read from /proc before or
/// after its exec (as xtrace's launcher thread) or not at all, is named as the kernel names it
/// after its exec: its file's name.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_short_command_with_no_traced_call_is_named_by_its_file() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("short-named");
    let out_dir = tmp.join("out");
    let out = run_to_exit(
        args![
            "-u",
            "inner",
            "-o",
            &out_dir,
            "--",
            &fixtures().spans,
            "exit",
            "0"
        ],
        &out_dir,
    );
    assert_eq!(out.probe_count("inner"), 0);
    let pid = u64_field(&out.summary["command"], "pid");
    assert_eq!(out.summary["targets"][0]["comm"], "spans");
    let names = out.metadata("process_name");
    let named = names
        .iter()
        .find(|m| m["pid"].as_u64() == Some(pid))
        .expect("named");
    assert_eq!(named["args"]["name"], "spans", "{names:?}");
}

/// A command argument that is not UTF-8 (a file name, say) reaches the command unchanged; the
/// summary shows it lossily.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn launched_command_takes_arguments_that_are_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("not-utf8");
    let out_dir = tmp.join("out");
    let raw = std::ffi::OsStr::from_bytes(b"\xff");
    // `spans exit ARG` calls work() 3 times and exits with atoi(ARG): 0 here.
    let out = run_to_exit(
        args!["-u", "work", "-o", &out_dir, "--", &fixtures().spans, "exit", raw],
        &out_dir,
    );
    assert_eq!(out.probe_count("work"), 3);
    let command = &out.summary["command"];
    assert_eq!(command["exit_code"].as_i64(), Some(0), "command: {command}");
    assert_eq!(command["argv"][2], "\u{fffd}", "command: {command}");
}

/// The attach notice and summary.txt show the command as words a shell reads back: an argument
/// with a space and a newline is quoted on one line, not split over two.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn launched_command_is_shown_quoted_on_one_line() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("quoted");
    let out_dir = tmp.join("out");
    let spans = &fixtures().spans;
    // atoi("3 it's\nhere") is 3.
    let (out, notice) = run_to_exit_noticed(
        args!["-u", "work", "-o", &out_dir, "--", spans, "exit", "3 it's\nhere"],
        &out_dir,
    );
    let shown = format!(r"{} exit $'3 it\'s\nhere'", spans.display());
    let pid = u64_field(&out.summary["command"], "pid");
    assert_eq!(
        notice,
        format!(
            "xtrace: attached 1 probe (2 uprobes, uprobe_multi) to `{shown}` (pid {pid}); Ctrl-C to stop"
        )
    );
    let summary = &out.summary_txt;
    let line = format!("command `{shown}` (pid {pid}) exited with status 3");
    assert!(
        summary.lines().any(|l| l == line),
        "{line:?} in summary.txt:\n{summary}"
    );
}

/// Whether process `pid` has a handler for SIGINT (its `SigCgt` mask in /proc/PID/status).
fn catches_sigint(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
}

/// Ctrl-C while xtrace plans and attaches the probes of every libc function: the command, held
/// before its exec, never runs (its `touch` leaves no file), xtrace says so in one line and exits
/// as a shell reports a command SIGINT ended (130), leaving nothing attached.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_stop_while_attaching_leaves_the_command_unrun() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("launch-stop-early");
    let marker = tmp.join("ran");
    let before = Attachments::snapshot();
    let xtrace = Xtrace::spawn(args![
        "-u",
        "libc:*",
        "-o",
        tmp.join("out"),
        "--",
        "touch",
        &marker
    ]);
    // xtrace catches the stop signals from its start, before it reads any symbol.
    while !catches_sigint(xtrace.pid()) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    xtrace.signal(libc::SIGINT);
    let finished = xtrace.wait();
    assert_eq!(finished.status.code(), Some(130), "{:?}", finished.stderr);
    // libc's warnings, then the one error line.
    let (warnings, rest): (Vec<&String>, Vec<&String>) = finished
        .stderr
        .iter()
        .partition(|l| l.starts_with("xtrace: warning: "));
    assert!(!warnings.is_empty());
    assert_eq!(
        rest,
        [&format!(
            "xtrace: error: stopped by SIGINT while attaching, before `touch {}` started: it did not \
             run and nothing was recorded; stop xtrace after it says it attached",
            marker.display()
        )]
    );
    before.assert_none_left();
    assert!(!marker.exists(), "the command ran");
}

/// The command's file replaced (renamed over, as a rebuild does) while xtrace reads libc's
/// symbols: xtrace reads and attaches to the file it resolved, through its descriptor, so no probe
/// lands at that file's offsets in the new one, and it says the command runs a file its probes
/// are not in.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_command_replaced_while_xtrace_attaches_is_said_and_left_whole() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("launch-replaced");
    let program = tmp.join("app");
    std::fs::copy(&fixtures().spans, &program).expect("copying spans");
    let before = Attachments::snapshot();
    let xtrace = Xtrace::spawn(args![
        "-u",
        "libc:*",
        "-u",
        "work",
        "-o",
        tmp.join("out"),
        "--",
        &program,
        "exit",
        "0"
    ]);
    while !catches_sigint(xtrace.pid()) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // xtrace has resolved the command by now; it reads libc's 3,000 functions for a while.
    std::thread::sleep(std::time::Duration::from_millis(30));
    let new = tmp.join("app.new");
    std::fs::copy(&fixtures().many, &new).expect("copying many");
    std::fs::rename(&new, &program).expect("replacing the command");
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    let warning = format!(
        "xtrace: warning: {} was replaced while xtrace read it: the command runs the new file, and \
         its probes are in the old one, so they see nothing; run xtrace again",
        program.display()
    );
    assert!(finished.stderr.contains(&warning), "{:?}", finished.stderr);
    let out = Outputs::read(&tmp.join("out"));
    assert_eq!(out.probe_count("work"), 0);
    // `many` ran whole, no probe in its code: it ignores its arguments and, its stdin empty,
    // exits 1 (not killed by a signal).
    assert_eq!(
        out.summary["command"]["exit_code"], 1,
        "{}",
        out.summary["command"]
    );

    // A script runs its interpreter, and `env` another program: neither is a replacement.
    let script = tmp.join("script.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("writing a script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let spans = fixtures().spans.clone();
    let commands = [args![&script], args!["env", "A=1", &spans, "exit", "0"]];
    for command in commands {
        let out_dir = tmp.join("out2");
        let _ = std::fs::remove_dir_all(&out_dir);
        let mut argv = args!["-F", "99", "-o", &out_dir, "--"];
        argv.extend(command.iter().cloned());
        let finished = Xtrace::spawn(argv).wait();
        finished.assert_success();
        assert!(
            !finished.stderr.iter().any(|l| l.contains("was replaced")),
            "{command:?}: {:?}",
            finished.stderr
        );
    }
}

/// One launched file named three ways (the command, its absolute path, a symbolic link to it) is
/// one probe: each call is one span (each was counted three times before).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_launched_file_named_several_ways_is_attached_once() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("launch-names");
    let program = tmp.join("prog");
    std::fs::copy(&fixtures().spans, &program).expect("copying spans");
    let link = tmp.join("link");
    std::os::unix::fs::symlink(&program, &link).expect("symlink");
    let out_dir = tmp.join("out");
    let out = run_to_exit(
        args![
            "-u",
            "inner",
            "-u",
            format!("{}:inner", program.display()),
            "-u",
            format!("{}:inner", link.display()),
            "-o",
            &out_dir,
            "--",
            &program,
            "nested",
            "3"
        ],
        &out_dir,
    );
    assert_eq!(u64_field(&out.summary, "uprobes"), 2);
    assert_eq!(out.probe_count("inner"), 6);
    assert_eq!(out.spans_named("inner").len(), 6);
}
