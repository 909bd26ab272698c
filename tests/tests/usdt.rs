//! USDT probes on the real kernel. Fixture `usdt run` (tests/fixtures/usdt.c) fires each probe a
//! known number of times with known arguments, including a hand-written note holding every operand
//! form, a semaphore-guarded probe and a note with an invalid argument string (libraries' probes:
//! usdt_libraries.rs). The semaphore is back to 0 after every way xtrace can end: SIGINT, SIGTERM, SIGHUP, SIGKILL and
//! a panic, under both attach mechanisms.

use std::ffi::OsString;

use serde_json::{json, Value};

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    kernel::kernel,
    output::{u64_field, Outputs},
    require_bpf,
    run::{Xtrace, PANIC_ENV},
    TempDir, SAFETY_TIMEOUT,
};

/// What one traced `usdt run` printed and wrote.
struct UsdtRun {
    out: Outputs,
    stderr: Vec<String>,
    /// The semaphore before attach, times the guarded probe was enabled, the semaphore after
    /// xtrace exited.
    semaphore: (u32, u32, u32),
    _tmp: TempDir,
}

fn number_after(line: &str, prefix: &str) -> u32 {
    line.strip_prefix(prefix)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("expected `{prefix}N`, got {line:?}"))
}

/// How a traced `usdt run` ends: a stop signal (SIGINT, SIGTERM or SIGHUP: a clean stop),
/// SIGKILL, or a panic mid-capture (`XTRACE_TEST_PANIC`, debug builds).
#[derive(Clone, Copy, Debug)]
enum End {
    Stop(i32),
    Sigkill,
    Panic,
}

/// The rest of a `usdt run` once it has its go line: `guarded K`, `fired`; then end `xtrace` and
/// read the semaphore the fixture sees after xtrace exited.
fn finish_run(
    mut fixture: Fixture,
    xtrace: Xtrace,
    before: &Attachments,
    end: End,
) -> (u32, u32, Vec<String>) {
    let guarded = number_after(&fixture.next_line(), "guarded ");
    assert_eq!(fixture.next_line(), "fired");
    match end {
        End::Stop(signal) => xtrace.signal(signal),
        End::Sigkill => xtrace.signal(libc::SIGKILL),
        End::Panic => {}
    }
    let finished = xtrace.wait();
    match end {
        End::Stop(_) => finished.assert_success(),
        End::Sigkill => finished.assert_killed_by(libc::SIGKILL),
        End::Panic => finished.assert_panicked(),
    }
    before.assert_none_left();
    // Perf-event uprobes (and the semaphores they raise) go in the background after xtrace exits.
    finished.wait_background_removal(SAFETY_TIMEOUT);
    fixture.send("after");
    let after = number_after(&fixture.next_line(), "sem ");
    assert!(fixture.wait().success(), "usdt fixture failed");
    (guarded, after, finished.stderr)
}

/// Traces `usdt run` by `--pid` with `flags` (and `env` for xtrace) until `end`; returns the
/// output directory (in `tmp`), xtrace's stderr and the semaphore before, used, after.
fn run_usdt(
    flags: Vec<OsString>,
    env: &[(&str, &str)],
    end: End,
    tmp: &TempDir,
) -> (Vec<String>, (u32, u32, u32)) {
    let mut fixture = Fixture::spawn(&fixtures().usdt, &["run"]);
    let early = fixture.wait_ready();
    assert_eq!(early.len(), 1, "lines before ready: {early:?}");
    let before_sem = number_after(&early[0], "sem ");
    let before = Attachments::snapshot();
    let mut all = args!["-p", fixture.pid().to_string()];
    all.extend(flags);
    all.extend(args!["-o", tmp.join("out")]);
    let mut xtrace = Xtrace::spawn_with_env(&all, env);
    xtrace.wait_attached();
    fixture.send("go");
    let (guarded, after, stderr) = finish_run(fixture, xtrace, &before, end);
    (stderr, (before_sem, guarded, after))
}

/// Traces `usdt run` by `--pid` with `flags` (and `env` for xtrace), stopped by SIGINT.
fn trace_usdt(flags: Vec<OsString>, env: &[(&str, &str)]) -> UsdtRun {
    let tmp = TempDir::new("usdt");
    let (stderr, semaphore) = run_usdt(flags, env, End::Stop(libc::SIGINT), &tmp);
    UsdtRun {
        out: Outputs::read(&tmp.join("out")),
        stderr,
        semaphore,
        _tmp: tmp,
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn semaphores_are_back_to_zero_after_every_exit_path() {
    if !require_bpf() {
        return;
    }
    // A kernel without uprobe_multi (before 6.6) refuses it when it is forced, naming the
    // version, and leaves nothing behind; the ends are then checked with perf-event uprobes.
    let mechanisms: &[&str] = if kernel().uprobe_multi {
        &["uprobe_multi", "perf_event"]
    } else {
        forced_uprobe_multi_is_refused();
        &["perf_event"]
    };
    for mechanism in mechanisms {
        for (end, env) in [
            (End::Stop(libc::SIGTERM), vec![]),
            (End::Stop(libc::SIGHUP), vec![]),
            (End::Sigkill, vec![]),
            (End::Panic, PANIC_ENV.to_vec()),
        ] {
            let tmp = TempDir::new("usdt-end");
            let mut env = env;
            env.push(("XTRACE_UPROBE_ATTACH", mechanism));
            let (stderr, semaphore) = run_usdt(args!["-U", "xtfix:guarded"], &env, end, &tmp);
            assert_eq!(
                semaphore,
                (0, 3, 0),
                "semaphore before, uses while attached, after {end:?} ({mechanism}); stderr: {stderr:?}"
            );
        }
    }
}

/// `XTRACE_UPROBE_ATTACH=uprobe_multi` on a kernel without uprobe_multi: one line naming the
/// kernel and the version that has them, exit status 2, nothing left attached, the target
/// untouched.
fn forced_uprobe_multi_is_refused() {
    let mut fixture = Fixture::spawn(&fixtures().usdt, &["run"]);
    fixture.wait_ready();
    let before = Attachments::snapshot();
    let tmp = TempDir::new("usdt-forced-multi");
    let finished = Xtrace::spawn_with_env(
        args![
            "-p",
            fixture.pid().to_string(),
            "-U",
            "xtfix:guarded",
            "-o",
            tmp.join("out")
        ],
        &[("XTRACE_UPROBE_ATTACH", "uprobe_multi")],
    )
    .wait();
    before.assert_none_left();
    assert_eq!(finished.status.code(), Some(2), "{finished:?}");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(
        finished.stderr,
        [format!(
            "xtrace: error: XTRACE_UPROBE_ATTACH=uprobe_multi: this kernel (Linux {}) has no \
             uprobe_multi links, which Linux 6.6 brought; unset XTRACE_UPROBE_ATTACH to attach \
             with perf-event uprobes",
            release.trim()
        )]
    );
    assert!(fixture.is_running());
}

/// The 12 values of every `xtfix:forms` hit.
fn forms_values() -> Value {
    json!({
        "arg0": -5, "arg1": 8589934590u64, "arg2": -2, "arg3": -16, "arg4": 9029,
        "arg5": -123456789012i64, "arg6": 3735928559u64, "arg7": -7, "arg8": -32768, "arg9": -1,
        "arg10": 255, "arg11": 777
    })
}

/// [`every_probe_form_and_pair_exactly`]: request_begin/_end pair per thread, innermost first,
/// named by the begin's string argument; op__entry/op__return pair too.
fn assert_request_and_op_spans(out: &Outputs) {
    let requests: Vec<(String, u32, i64, i64)> = out
        .spans()
        .into_iter()
        .filter(|s| s.name.starts_with("req"))
        .map(|s| {
            (
                s.name.clone(),
                s.depth as u32,
                s.args["arg0"].as_i64().unwrap(),
                s.args["end_arg0"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        requests,
        [
            ("req1".into(), 1, 1, 1),
            ("req0".into(), 0, 0, 0),
            ("req2".into(), 0, 2, 2)
        ]
    );
    let ops = out.spans_named("xtfix:op");
    assert_eq!(ops.len(), 2, "op__entry/op__return spans: {ops:?}");
    assert!(ops.iter().all(|s| s.depth == 0 && s.dur_ns() > 0));
}

/// `str:N` on a USDT string argument: `message("hello", 5)` and `message(100 x's, 100)` read up
/// to N bytes (past the 63 a `str` keeps, sent whole before the hit), and cut at N below it.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_usdt_string_is_read_up_to_the_asked_length() {
    if !require_bpf() {
        return;
    }
    for (ty, kept) in [("str:200", 100), ("str:80", 80), ("str:9", 9)] {
        let run = trace_usdt(args!["-U", format!("xtfix:message({ty})")], &[]);
        let xs = "x".repeat(kept);
        assert_eq!(
            run.out.instants("xtfix:message"),
            [
                &json!({"arg0": "hello", "arg1": 5}),
                &json!({"arg0": xs, "arg1": 100})
            ],
            "{ty}"
        );
        assert_eq!(u64_field(&run.out.summary, "unreadable_strings"), 0, "{ty}");
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn every_probe_form_and_pair_exactly() {
    if !require_bpf() {
        return;
    }
    let run = trace_usdt(
        args![
            "-U",
            "xtfix:message(str)",
            "-U",
            "xtfix:request_begin(_,name)",
            "-U",
            "xtfix:*"
        ],
        &[],
    );
    let out = &run.out;
    assert_eq!(
        run.semaphore,
        (0, 3, 0),
        "semaphore before, uses while attached, after"
    );
    assert!(
        run.stderr.iter().any(
            |l| l.starts_with("xtrace: warning: skipping USDT probe xtfix:broken") && l.contains("%xyz")
        ),
        "a warning names the skipped probe: {:?}",
        run.stderr
    );

    let plain: Vec<(i64, i64)> = out
        .instants("xtfix:plain")
        .iter()
        .map(|a| (a["arg0"].as_i64().unwrap(), a["arg1"].as_i64().unwrap()))
        .collect();
    assert_eq!(plain, [(0, 0), (1, -1000), (2, -2000), (3, -3000), (4, -4000)]);
    let guarded: Vec<&Value> = out.instants("xtfix:guarded");
    assert_eq!(
        guarded,
        [&json!({"arg0": 0}), &json!({"arg0": 1}), &json!({"arg0": 2})]
    );
    assert_eq!(out.instants("xtfix:forms"), [&forms_values(), &forms_values()]);
    let x63 = "x".repeat(63);
    assert_eq!(
        out.instants("xtfix:message"),
        [
            &json!({"arg0": "hello", "arg1": 5}),
            &json!({"arg0": x63, "arg1": 100})
        ]
    );
    assert_eq!(out.instants("xtfix:tick"), [&json!({}); 4]);
    assert!(out.instants("xtfix:broken").is_empty());
    assert_eq!(
        out.instants("xtfix:globals"),
        [&json!({"arg0": -12345, "arg1": 9876543210u64, "arg2": 9876543210u64, "arg3": 9876543210u64})],
        "%rip-relative symbol operands, the offset after or before the symbol"
    );

    assert_request_and_op_spans(out);
    assert_eq!(out.spans().len(), 5, "3 request and 2 op spans");

    for (name, count) in [
        ("xtfix:plain", 5),
        ("xtfix:guarded", 3),
        ("xtfix:forms", 2),
        ("xtfix:message", 2),
        ("xtfix:request_begin", 3),
        ("xtfix:request_end", 3),
        ("xtfix:op__entry", 2),
        ("xtfix:op__return", 2),
        ("xtfix:tick", 4),
        ("xtfix:globals", 1),
        ("xtfix:inlined", 3),
        ("xtfix:request", 3),
        ("xtfix:op", 2),
    ] {
        assert_eq!(out.probe_count(name), count, "summary count of {name}");
    }
    assert_eq!(out.probe("xtfix:request")["kind"], "usdt_span");
    assert_eq!(out.probe("xtfix:tick")["kind"], "usdt");
    assert_eq!(out.summary["probes"].as_array().unwrap().len(), 13);
    assert_eq!(out.summary["usdt_unpaired"], 0);
    assert_eq!(out.lost_events(), 0);
}

/// `--min-duration` holds for USDT begin/end spans as for functions' calls: the pairs, a few
/// microseconds each, are counted (3 requests, 2 ops), each in `below_min_duration`, and none is
/// written; instants are not durations and stay.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn min_duration_leaves_out_short_usdt_spans_and_counts_them() {
    if !require_bpf() {
        return;
    }
    let run = trace_usdt(args!["-U", "xtfix:*", "--min-duration", "1s"], &[]);
    let out = &run.out;
    assert_eq!(out.spans().len(), 0, "{:?}", out.spans());
    for (name, count) in [("xtfix:request", 3), ("xtfix:op", 2)] {
        assert_eq!(out.probe_count(name), count, "{name}");
        assert_eq!(out.probe(name)["below_min_duration"], count, "{name}");
    }
    assert_eq!(out.instants("xtfix:tick").len(), 4);
    assert!(
        out.summary_txt.contains("(0 as spans, 5 under --min-duration)"),
        "{}",
        out.summary_txt
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn launched_command_every_inlined_site() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("usdt-launch");
    let out = tmp.join("out");
    let before = Attachments::snapshot();
    let usdt = fixtures().usdt.to_str().expect("UTF-8 path").to_owned();
    // stdin is /dev/null: the fixture reads EOF at both of its waits and runs straight through.
    let finished = Xtrace::spawn(args![
        "-U",
        "xtfix:inlined",
        "-U",
        "xtfix:guarded",
        "-o",
        &out,
        "--",
        &usdt,
        "run"
    ])
    .wait();
    finished.assert_success();
    before.assert_none_left();
    let lines: Vec<&str> = finished.stdout.lines().take(3).collect();
    assert_eq!(
        lines,
        ["sem 1", "ready", "guarded 3"],
        "held at exec until attached"
    );
    let out = Outputs::read(&out);
    assert_eq!(out.summary["uprobes"], 4, "3 inlined sites and the guarded one");
    let copies: Vec<&Value> = out.instants("xtfix:inlined");
    assert_eq!(
        copies,
        [&json!({"arg0": 1}), &json!({"arg0": 2}), &json!({"arg0": 3})]
    );
    assert_eq!(out.probe_count("xtfix:inlined"), 3);
    assert_eq!(out.probe_count("xtfix:guarded"), 3);
    // The kernel names a thread at its first hit: the command exits right after its hits, often
    // before xtrace reads them, when /proc no longer has the name.
    let pid = out.summary["command"]["pid"].clone();
    let names: Vec<(&Value, &Value, &Value)> = out
        .metadata("thread_name")
        .into_iter()
        .map(|m| (&m["pid"], &m["tid"], &m["args"]["name"]))
        .collect();
    assert_eq!(
        names,
        [(&pid, &pid, &json!("usdt"))],
        "the thread that hit is named"
    );
}

/// Stopped with `-d` while `usdt loop` fires begin/end pairs (10 per ms): what the sites record
/// while they are being detached (each site's probe removed in turn: an end may still fire after
/// its begin's is gone) is after the stop and left out, so no end is unpaired. The loop starts
/// after the attach, so nothing began before the capture either.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn hits_while_detaching_are_left_out() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().usdt, &["loop"]);
    fixture.wait_ready();
    let tmp = TempDir::new("usdt-stop");
    let out_dir = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        fixture.pid().to_string(),
        "-U",
        "xtfix:request_*",
        "-d",
        "1",
        "-o",
        &out_dir
    ]);
    xtrace.wait_attached();
    fixture.go();
    xtrace.wait().assert_success();
    assert!(fixture.is_running());
    let out = Outputs::read(&out_dir);
    assert_eq!(out.summary["usdt_unpaired"], 0);
    assert_eq!(out.lost_events(), 0);
    let pairs = out.spans_named("xtfix:request").len();
    assert!(pairs > 1000, "{pairs} begin/end pairs in a second");
}

/// `usdt_unpaired` counts both halves that lack the other: an end with no open span on its
/// thread (begun before the capture) and a begin still open at the stop. Neither is a span.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn ends_without_begins_and_begins_open_at_the_stop_are_unpaired() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().usdt, &["halves"]);
    fixture.wait_ready();
    let tmp = TempDir::new("usdt-halves");
    let out_dir = tmp.join("out");
    let pid = fixture.pid().to_string();
    let mut xtrace = Xtrace::spawn(args!["-p", &pid, "-U", "xtfix:request_*", "-o", &out_dir]);
    xtrace.wait_attached();
    fixture.send("go");
    assert_eq!(fixture.next_line(), "fired");
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    fixture.go();
    assert!(fixture.wait().success());
    let out = Outputs::read(&out_dir);
    assert_eq!(out.summary["usdt_unpaired"], 2);
    assert_eq!(out.probe_count("xtfix:request_end"), 1);
    assert_eq!(out.probe_count("xtfix:request_begin"), 1);
    assert_eq!(out.probe_count("xtfix:request"), 0);
    assert!(out.spans_named("xtfix:request").is_empty());
    assert_eq!(out.lost_events(), 0);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn semaphore_probe_through_perf_event_uprobes() {
    if !require_bpf() {
        return;
    }
    let run = trace_usdt(
        args!["-U", "xtfix:guarded", "-U", "xtfix:forms"],
        &[("XTRACE_UPROBE_ATTACH", "perf_event")],
    );
    assert_eq!(
        run.semaphore,
        (0, 3, 0),
        "semaphore before, uses while attached, after"
    );
    assert_eq!(run.out.summary["attach_mechanism"], "perf_event");
    assert_eq!(run.out.summary["uprobes"], 2);
    assert_eq!(run.out.probe_count("xtfix:guarded"), 3);
    assert_eq!(
        run.out.instants("xtfix:forms"),
        [&forms_values(), &forms_values()]
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn system_wide_semaphore_in_a_process_started_after_attach() {
    if !require_bpf() {
        return;
    }
    let usdt = fixtures().usdt.to_str().expect("UTF-8 path").to_owned();
    let tmp = TempDir::new("usdt-a");
    let out = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args!["-a", "-U", format!("{usdt}:xtfix:guarded"), "-o", &out]);
    xtrace.wait_attached();
    let mut fixture = Fixture::spawn(&fixtures().usdt, &["run"]);
    let pid = u64::from(fixture.pid());
    assert_eq!(
        fixture.wait_ready(),
        ["sem 1"],
        "the kernel raised the semaphore at exec"
    );
    fixture.send("go");
    let (guarded, after, _) = finish_run(fixture, xtrace, &before, End::Stop(libc::SIGINT));
    assert_eq!(
        (guarded, after),
        (3, 0),
        "uses while attached, semaphore after xtrace exited"
    );
    let out = Outputs::read(&out);
    assert_eq!(out.probe_count("xtfix:guarded"), 3);
    let pids: Vec<u64> = out
        .events
        .iter()
        .filter(|e| e["ph"] == "i")
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, [pid; 3]);
}

/// A probe that two typed -U specs match takes the first's types, and xtrace says so (as for -u).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_probe_two_typed_specs_match_takes_the_first_and_says_so() {
    if !require_bpf() {
        return;
    }
    let run = trace_usdt(args!["-U", "xtfix:plain(u8,i64)", "-U", "xtfix:p*(i64,i64)"], &[]);
    let note = "xtrace: warning: -U 'xtfix:p*(i64,i64)': `xtfix:plain` is traced already through \
                -U 'xtfix:plain(u8,i64)', whose value types apply";
    assert_eq!(
        run.stderr.iter().filter(|l| *l == note).count(),
        1,
        "{:?}",
        run.stderr
    );
    let plain = run.out.instants("xtfix:plain");
    assert_eq!(plain.len(), 5);
    // i = 0..4 as u8; l = -1000 * i as i64.
    assert_eq!(plain[4]["arg0"], 4);
    assert_eq!(plain[4]["arg1"], -4000);
}
