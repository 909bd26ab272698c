//! Lifecycle: nothing of xtrace survives it, however it ends, and its detach does not hang on a
//! call that never returns. SIGKILL and a panic (no chance to clean up) must still leave no BPF
//! program, link or perf event, because every attachment is an fd the kernel closes; a launched
//! command gets SIGTERM when xtrace dies (one still held before its exec leaves quietly), and the
//! trace keeps the name it is written under, `trace.json.partial`. A traced process that crashes
//! mid-capture ends the recording with complete outputs. The output files' own lifecycle is in
//! lifecycle_outputs.rs.

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{run_error, Finished, Xtrace, PANIC_ENV},
    TempDir,
};

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn sigkill_leaves_nothing_attached() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = TempDir::new("sigkill");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::record_work(fixture.pid(), args![], tmp.join("out"));
    xtrace.wait_attached();
    before.assert_attached_since();
    xtrace.signal(libc::SIGKILL);
    let finished = xtrace.wait();
    finished.assert_killed_by(libc::SIGKILL);
    before.assert_none_left();
    assert!(
        fixture.is_running(),
        "the traced process survives xtrace being killed"
    );
}

/// A call that never returns (`forever`) while its thread calls `work` 100 times a second: since
/// Linux 6.12 its pending return probe holds the kernel's uretprobe SRCU lock for as long as the
/// thread keeps hitting return probes, and each uprobe link's close waits for that lock. Closed one
/// after another, the links left xtrace in uninterruptible sleep for as long as the program ran;
/// closed together, it stops at `-d` and leaves nothing attached while the program runs on.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_call_that_never_returns_does_not_hang_the_detach() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().spans, &["forever"]);
    fixture.wait_ready();
    let tmp = TempDir::new("never-returns");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "forever",
        "-u",
        "work",
        "-d",
        "1",
        "-o",
        &out_dir
    ]);
    xtrace.wait_attached();
    fixture.go();
    // A hung detach sleeps in the kernel, deaf to SIGKILL, until the program stops: the watchdog
    // stops it after 20 s, so that the test fails instead of hanging the suite.
    let (done, finished_rx) = std::sync::mpsc::channel::<()>();
    let pid = fixture.pid() as i32;
    let watchdog = std::thread::spawn(move || {
        let hung = finished_rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .is_err();
        if hung {
            // SAFETY: kill(2) with the fixture's pid, which this test still owns.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        hung
    });
    let finished = xtrace.wait();
    let _ = done.send(());
    assert!(
        !watchdog.join().unwrap(),
        "xtrace hung detaching until the traced program was killed"
    );
    finished.assert_success();
    before.assert_none_left();
    assert!(fixture.is_running(), "the program runs on");
    let out = Outputs::read(&out_dir);
    assert_eq!(out.stop_reason(), "duration");
    assert_eq!(out.probe_count("forever"), 0, "its one call never returned");
    let work = out.probe_count("work");
    assert!(work >= 30, "work ran 100 times a second: {work} spans");
}

/// Launches `spans spin` under xtrace (with `env`), lets it record, ends xtrace with `signal` (or
/// lets the panic that `env` asks for end it), and checks what every abnormal end must leave:
/// nothing attached, no process of the command alive, and the trace marked partial.
fn end_abnormally(env: &[(&str, &str)], signal: Option<i32>) -> Finished {
    let tmp = TempDir::new("abnormal-end");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn_with_env(
        args!["-u", "work", "-o", &out_dir, "--", &fixtures().spans, "spin"],
        env,
    );
    xtrace.wait_attached();
    before.assert_attached_since();
    if let Some(signal) = signal {
        std::thread::sleep(std::time::Duration::from_millis(200));
        xtrace.signal(signal);
    }
    let finished = xtrace.wait();
    before.assert_none_left();
    assert!(
        !finished.left_processes,
        "the launched command is gone once xtrace is"
    );
    assert!(
        out_dir.join("trace.json.partial").exists(),
        "the trace is marked partial"
    );
    for name in ["trace.json", "summary.json", "summary.txt"] {
        assert!(!out_dir.join(name).exists(), "no {name} pretends to be whole");
    }
    assert_eq!(
        run_error(args!["report", &out_dir]),
        format!(
            "xtrace: error: {}: a recording cut short (trace.json.partial was never completed: \
             xtrace was killed, panicked or could not write it); record it again",
            out_dir.display()
        ),
        "xtrace report says what the directory holds"
    );
    finished
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn sigkill_ends_a_launched_command_and_leaves_a_partial_trace() {
    if !require_bpf() {
        return;
    }
    let finished = end_abnormally(&[], Some(libc::SIGKILL));
    finished.assert_killed_by(libc::SIGKILL);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_panic_mid_capture_is_one_line_and_leaves_nothing_attached() {
    if !require_bpf() {
        return;
    }
    // XTRACE_TEST_PANIC (debug builds only) panics once the first events are read; without
    // RUST_BACKTRACE the report is one line.
    let finished = end_abnormally(&PANIC_ENV, None);
    finished.assert_panicked();
    let after_attach: Vec<&String> = finished
        .stderr
        .iter()
        .skip_while(|l| !l.starts_with("xtrace: attached"))
        .skip(1)
        .collect();
    assert_eq!(
        after_attach.len(),
        1,
        "one line after the attached one: {after_attach:?}"
    );
    let line = after_attach[0];
    assert!(
        line.starts_with("xtrace: internal error: XTRACE_TEST_PANIC is set at xtrace/src/session/run.rs:")
            && line.ends_with(
                "(thread main); this is a bug in xtrace: please report it, with the output of \
             RUST_BACKTRACE=1"
            ),
        "{line}"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn target_crash_mid_capture_leaves_complete_outputs() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let pid = fixture.pid();
    let tmp = TempDir::new("crash");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::record_work(pid, args![], &out_dir);
    xtrace.wait_attached();
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSEGV) }, 0);
    let status = fixture.wait();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGSEGV)
    );
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    let out = Outputs::read(&out_dir);
    assert_eq!(out.stop_reason(), "targets_exited");
    let spans = out.spans();
    assert!(!spans.is_empty(), "spans before the crash are kept");
    assert_eq!(
        out.probe_count("work"),
        spans.len() as u64,
        "summary count == spans in trace.json"
    );
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            // After the parenthesised name: state, then the parent's pid.
            let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
            after.split_whitespace().nth(1) == Some(pid.to_string().as_str())
        })
        .collect()
}

/// SIGKILL while the launched command waits to exec (xtrace is still attaching): the waiting
/// child leaves quietly. It used to report the closed gate to its dead parent and abort inside
/// Rust's spawn code ("fatal runtime error: assertion failed: output.write(&bytes).is_ok()"),
/// leaving a core file. The command is caught before its exec by polling for xtrace's child while
/// that child still runs xtrace's own binary (retried if the exec wins).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn sigkill_before_the_command_starts_ends_the_waiting_child_quietly() {
    if !require_bpf() {
        return;
    }
    let xtrace_bin = std::fs::canonicalize(xtrace_tests::xtrace_bin()).expect("xtrace binary");
    for _ in 0..10 {
        let tmp = TempDir::new("sigkill-held");
        let xtrace = Xtrace::spawn(args![
            "-u",
            "libc:*",
            "-o",
            tmp.join("out"),
            "--",
            &fixtures().spans,
            "spin"
        ]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let held = loop {
            let exe = children_of(xtrace.pid())
                .into_iter()
                .find_map(|c| Some((c, std::fs::read_link(format!("/proc/{c}/exe")).ok()?)));
            match exe {
                Some((child, exe)) if exe == xtrace_bin => break Some(child),
                Some(_) => break None, // exec'd already
                None if std::time::Instant::now() > deadline => panic!("xtrace started no command"),
                None => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        };
        let Some(child) = held else {
            xtrace.signal(libc::SIGKILL);
            xtrace.wait();
            continue;
        };
        xtrace.signal(libc::SIGKILL);
        // Read to EOF: the child writes to the same stderr until it exits.
        let finished = xtrace.wait();
        finished.assert_killed_by(libc::SIGKILL);
        assert!(
            !finished.stderr.iter().any(|l| l.contains("fatal runtime error")),
            "{:#?}",
            finished.stderr
        );
        let state = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        let state = state.rsplit_once(") ").map_or("", |(_, rest)| rest);
        assert!(
            state.is_empty() || state.starts_with('Z'),
            "the waiting child is gone: {state}"
        );
        return;
    }
    panic!("the command exec'd before xtrace could be killed, 10 times");
}
