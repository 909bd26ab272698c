//! Nesting: 64 levels of recursion recorded (deeper levels counted as too deep), calls left by
//! longjmp (also inside recursion), by a C++ exception or by their thread exiting are counted as
//! unmatched entries and never mis-paired with another return; exits probed at `ret` and
//! tail-call instructions (`--exits`) pair like return probes; several processes traced at once.
//! Fixtures: `calls` (modes `recurse`, `longjmp`, `ljrecurse`, `threadexit`, `tail`), `matrix`
//! (catcher/thrower, at -O0 and -O2), `uselib` (lib_work x 7).

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{run_error, trace_fixture_with, Finished, Xtrace},
    TempDir,
};

use std::ffi::OsString;

/// Traces fixture `program` (run as `program mode...`) with `xtrace -p PID FLAGS...`.
fn trace_with(program: &std::path::Path, mode: &[&str], flags: Vec<OsString>) -> (Outputs, Finished) {
    trace_with_env(program, mode, flags, &[])
}

/// [`trace_with`] with environment variables for xtrace.
fn trace_with_env(
    program: &std::path::Path,
    mode: &[&str],
    flags: Vec<OsString>,
    env: &[(&str, &str)],
) -> (Outputs, Finished) {
    let mut fixture = Fixture::spawn(program, mode);
    fixture.wait_ready();
    let tmp = TempDir::new("nesting-flags");
    let out = tmp.join("out");
    let finished = trace_fixture_with(&mut fixture, flags, env, &out);
    (Outputs::read(&out), finished)
}

/// How function exits are probed in C code: return probes (`auto`), and the exit instructions.
const EXIT_MODES: [&[&str]; 2] = [&[], &["--exits", "ret"]];

/// Traces `calls MODE` with a `-u` for each of `probes`, after the `exits` flags.
fn trace_calls(mode: &str, probes: &[&str], exits: &[&str]) -> Outputs {
    let mut flags: Vec<OsString> = exits.iter().map(OsString::from).collect();
    for probe in probes {
        flags.extend(args!["-u", *probe]);
    }
    trace_with(&fixtures().calls, &[mode], flags).0
}

/// (arg0, ret) of each span of `name`, in start order.
fn arg_and_ret(out: &Outputs, name: &str) -> Vec<(i64, i64)> {
    let mut spans = out.spans_named(name);
    spans.sort_by_key(|s| s.start_ns());
    spans
        .iter()
        .map(|s| (s.args["arg0"].as_i64().unwrap(), s.args["ret"].as_i64().unwrap()))
        .collect()
}

/// In both exit modes.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn recursion_64_deep() {
    if !require_bpf() {
        return;
    }
    for exits in EXIT_MODES {
        let out = trace_calls("recurse", &["recurse"], exits);
        // recurse(63): 64 nested calls; recurse(69): 70, of which the 6 deepest are too deep.
        let spans = out.spans_named("recurse");
        assert_eq!(spans.len(), 128, "{exits:?}");
        for depth in 0..64 {
            let at_depth = spans.iter().filter(|s| s.depth == depth).count();
            assert_eq!(at_depth, 2, "spans at depth {depth}, {exits:?}");
        }
        assert_eq!(u64_field(&out.summary["lost"], "too_deep"), 6, "{exits:?}");
        assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0, "{exits:?}");
        // Every span contains the deeper ones on the same thread.
        let outer = spans.iter().find(|s| s.depth == 0).unwrap();
        let inner = spans
            .iter()
            .find(|s| s.depth == 63 && s.start_ns() < outer.end_ns())
            .unwrap();
        assert!(outer.start_ns() <= inner.start_ns() && inner.end_ns() <= outer.end_ns());
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn longjmp_leaves_unmatched_entries() {
    if !require_bpf() {
        return;
    }
    let out = trace_calls("longjmp", &["lj_outer", "lj_jumper", "lj_plain"], &[]);
    assert_eq!(out.probe_count("lj_outer"), 3);
    assert_eq!(out.probe_count("lj_jumper"), 0);
    assert_eq!(out.probe_count("lj_plain"), 1);
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 3);
    for span in out.spans() {
        assert_eq!(span.depth, 0, "nothing nests under a stale entry: {span:?}");
    }
}

/// `_setjmp` returns twice and saves its own return address: a return probe would have it save
/// the kernel's trampoline instead, and the longjmp back would land there (with one, the
/// fixture died of SIGSEGV after 64 such calls). Its exit is probed at its instruction, a tail
/// call to `__sigsetjmp`, under every `--exits` mode, and the fixture runs to its end.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn setjmp_is_traced_without_a_return_probe() {
    if !require_bpf() {
        return;
    }
    for exits in [&["--exits", "uretprobe"][..], &[]] {
        let out = trace_calls("longjmp", &["libc:_setjmp", "lj_outer", "lj_plain"], exits);
        assert_eq!(out.probe_count("_setjmp"), 3, "{exits:?}");
        for span in out.spans_named("_setjmp") {
            assert_eq!(span.args["exit"], "tail call", "{span:?}");
            assert_eq!(span.depth, 1, "under lj_outer: {span:?}");
        }
        assert_eq!(out.probe_count("lj_outer"), 3, "{exits:?}");
        assert_eq!(out.probe_count("lj_plain"), 1, "{exits:?}");
        assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0, "{exits:?}");
    }
}

/// A function named as one that returns twice whose exit cannot be probed apart from its entry
/// (`savectx` in calls.c is nothing but its `ret`) is refused, with one line and exit 2.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_returns_twice_function_without_probeable_exits_is_refused() {
    if !require_bpf() {
        return;
    }
    let calls = fixtures().calls.to_str().expect("UTF-8 path").to_owned();
    let line = run_error(args!["-u", "savectx", "--", &calls, "tail"]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: {calls}: cannot trace `savectx`: it returns twice, as setjmp does, and \
             its exit instructions cannot be found to probe, while a return probe would break its \
             second return; trace a function that calls it"
        )
    );
}

/// A longjmp from the deepest of six recursive calls back into the third: each return is paired
/// with its own call (the entry's argument is the recursion level, equal to the span's depth), and
/// the three calls left behind are unmatched. Pairing a return with the innermost open call of the
/// same function would give ljr(2)'s return ljr(5)'s entry.
/// In both exit modes.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn longjmp_inside_recursion_pairs_each_return_with_its_own_call() {
    if !require_bpf() {
        return;
    }
    for exits in EXIT_MODES {
        let out = trace_calls("ljrecurse", &["ljr(i32) -> i32"], exits);
        let spans = out.spans_named("ljr");
        assert_eq!(spans.len(), 6, "{exits:?}");
        let mut levels: Vec<(u64, i64, i64)> = spans
            .iter()
            .map(|s| {
                let arg = s.args["arg0"].as_i64().unwrap();
                assert_eq!(s.args["ret"].as_i64(), Some(arg), "{s:?}");
                (s.depth, arg, s.start_ns())
            })
            .collect();
        levels.sort_by_key(|&(_, _, start)| start);
        let pairs: Vec<(u64, i64)> = levels.iter().map(|&(d, a, _)| (d, a)).collect();
        assert_eq!(
            pairs,
            [(0, 0), (1, 1), (2, 2), (0, 0), (1, 1), (2, 2)],
            "{exits:?}"
        );
        assert_eq!(u64_field(&out.summary, "unmatched_entries"), 6, "{exits:?}");
    }
}

/// Exceptions thrown inside `thrower` (for odd i) and caught in `catcher`, with both traced: the
/// file has exception tables, so both functions' exits are probed at their own instructions and
/// the process survives the two exceptions unwinding through `thrower` (with a return probe it
/// would abort: the unwinder cannot walk the kernel's trampoline). thrower's two returns and
/// catcher's four are exact, values included; thrower's three thrown-through calls (one called
/// from main, whose frame the catcher calls then reuse) are unmatched. At -O2, GCC moves the throw into `thrower.cold`, which is decoded too. Both attach mechanisms.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cpp_exception_through_traced_functions() {
    if !require_bpf() {
        return;
    }
    let f = fixtures();
    for (program, mechanism) in [
        (&f.matrix, "uprobe_multi"),
        (&f.matrix_o2, "uprobe_multi"),
        (&f.matrix_o2, "perf_event"),
    ] {
        let (out, finished) = trace_with_env(
            program,
            &[],
            args![
                "-u",
                "thrower(i32) -> i64",
                "-u",
                "catcher(i32) -> i64",
                "--overhead"
            ],
            &[("XTRACE_UPROBE_ATTACH", mechanism)],
        );
        // 9 entries; 6 exits, all at ret instructions (thrower's 2 returns, catcher's 4): no
        // return probe was placed.
        let mut runs: Vec<(&str, u64)> = out.summary["overhead"]
            .as_array()
            .expect("summary.json overhead")
            .iter()
            .filter(|c| c["name"] != "thread_exit" && c["name"] != "thread_exec")
            .map(|c| (c["name"].as_str().unwrap(), u64_field(c, "runs")))
            .collect();
        runs.sort_unstable();
        assert_eq!(
            runs,
            [("span_enter", 9), ("span_ret", 6)],
            "{program:?} {mechanism}"
        );
        assert!(
            finished
                .stderr
                .iter()
                .any(|l| l.contains(&format!("uprobes, {mechanism})"))),
            "{:?}",
            finished.stderr
        );
        assert_eq!(arg_and_ret(&out, "thrower(int)"), [(0, 0), (2, 2)], "{program:?}");
        assert_eq!(
            arg_and_ret(&out, "catcher(int)"),
            [(0, 0), (1, -1), (2, 2), (3, -3)],
            "{program:?}"
        );
        // thrower(1), thrown from main, is left open at the frame the catcher calls reuse: the
        // first catcher's entry drops it (its exits are probed, so no tail call of it is open).
        for catcher in out.spans_named("catcher(int)") {
            assert_eq!(catcher.depth, 0, "{program:?}");
        }
        for thrower in out.spans_named("thrower(int)") {
            assert_eq!(thrower.depth, 1);
            let arg = thrower.args["arg0"].as_i64();
            let catcher = out
                .spans_named("catcher(int)")
                .into_iter()
                .find(|c| c.args["arg0"].as_i64() == arg)
                .unwrap();
            assert!(catcher.start_ns() <= thrower.start_ns() && thrower.end_ns() <= catcher.end_ns());
        }
        assert_eq!(u64_field(&out.summary, "unmatched_entries"), 3, "{program:?}");
        let notice = finished.stderr.iter().find(|line| {
            line.starts_with("xtrace: warning:")
                && line.contains(
                    "has exception tables: 2 traced function(s) that call others end at their own ret",
                )
        });
        assert!(notice.is_some(), "{:?}", finished.stderr);
    }
}

/// With `--exits uretprobe`, tracing the catching function is still exact, and xtrace warns that
/// an exception thrown through a traced function would abort the process.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cpp_exception_caught_in_a_return_probed_function() {
    if !require_bpf() {
        return;
    }
    let (out, finished) = trace_with(
        &fixtures().matrix,
        &[],
        args!["--exits", "uretprobe", "-u", "catcher(i32) -> i64"],
    );
    assert_eq!(
        arg_and_ret(&out, "catcher(int)"),
        [(0, 0), (1, -1), (2, 2), (3, -3)]
    );
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);
    let warning = finished.stderr.iter().find(|line| {
        line.starts_with("xtrace: warning:") && line.contains("with --exits uretprobe, an exception")
    });
    assert!(warning.is_some(), "{:?}", finished.stderr);
}

/// A function that leaves by a tail call (`jmp tc_target`): with `--exits ret` its span ends at
/// the jump, marked `"exit":"tail call"` and without a return value, and the callee's span follows
/// at the same depth; with return probes (C code, `auto`) the kernel returns from both, so
/// tc_forward's span holds tc_target's and gets its return value.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn tail_calls() {
    if !require_bpf() {
        return;
    }
    let probes = args!["-u", "tc_forward(i32) -> i32", "-u", "tc_target(i32) -> i32"];
    let mut flags = args!["--exits", "ret"];
    flags.extend(probes.clone());
    let (out, _) = trace_with(&fixtures().calls, &["tail"], flags);
    let mut forward = out.spans_named("tc_forward");
    forward.sort_by_key(|s| s.start_ns());
    let got: Vec<(u64, i64, Option<&str>, bool)> = forward
        .iter()
        .map(|s| {
            (
                s.depth,
                s.args["arg0"].as_i64().unwrap(),
                s.args["exit"].as_str(),
                s.args.get("ret").is_some(),
            )
        })
        .collect();
    let want: Vec<(u64, i64, Option<&str>, bool)> =
        (0..5).map(|k| (0, k, Some("tail call"), false)).collect();
    assert_eq!(got, want);
    let target: Vec<(i64, i64)> = arg_and_ret(&out, "tc_target");
    assert_eq!(target, (1..6).map(|k| (k, 2 * k)).collect::<Vec<_>>());
    assert!(out.spans_named("tc_target").iter().all(|s| s.depth == 0));
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);

    let (out, _) = trace_with(&fixtures().calls, &["tail"], probes);
    assert_eq!(
        arg_and_ret(&out, "tc_forward"),
        (0..5).map(|k| (k, 2 * k + 2)).collect::<Vec<_>>()
    );
    assert!(out.spans_named("tc_target").iter().all(|s| s.depth == 1));
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);
}

/// A function that leaves by a jump to code no symbol names (as stripped libc's
/// `pthread_mutex_unlock` does): `--exits ret` cannot see that exit, so in C code (no exception
/// tables) it keeps a return probe, with a warning, and every call is a span. Before, it got no
/// exit at all and all five calls were lost as unmatched.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_jump_to_unnamed_code_keeps_the_return_probe() {
    if !require_bpf() {
        return;
    }
    let flags = args!["--exits", "ret", "-u", "tc_unnamed(i32) -> i32"];
    let (out, finished) = trace_with(&fixtures().calls, &["tail"], flags);
    assert_eq!(
        arg_and_ret(&out, "tc_unnamed"),
        (0..5).map(|k| (k, 3 * k)).collect::<Vec<_>>()
    );
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);
    let warning = format!(
        "xtrace: warning: {}: 1 traced function(s) have no size in the symbol table, start with \
         their return, leave at an instruction uprobes refuse or may leave through code no symbol \
         names or an indirect jump, so their returns are probed with return probes",
        fixtures().calls.display()
    );
    assert!(finished.stderr.contains(&warning), "{:#?}", finished.stderr);
}

/// A function that leaves only through a jump through a register (`jmp *%rax`: a call through a
/// pointer, as virtual-call and closure wrappers end at -O2) has no exit to probe. In C code
/// `--exits ret` keeps its return probe (before, every call was lost as unmatched); in C++ code,
/// where a return probe could abort the process when an exception unwinds through it, `auto`
/// refuses it by name (before, it was attached and recorded 0 spans, silently), and `--exits
/// uretprobe` traces it.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_function_leaving_through_an_indirect_jump() {
    if !require_bpf() {
        return;
    }
    let flags = args!["--exits", "ret", "-u", "tc_pointer(i32) -> i32"];
    let (out, _) = trace_with(&fixtures().calls, &["tail"], flags);
    assert_eq!(
        arg_and_ret(&out, "tc_pointer"),
        (0..5).map(|k| (k, 4 * (k + 2))).collect::<Vec<_>>()
    );
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);

    let matrix = fixtures().matrix_o2.to_str().expect("UTF-8 path").to_owned();
    let mut fixture = Fixture::spawn(&fixtures().matrix_o2, &[]);
    fixture.wait_ready();
    let pid = fixture.pid().to_string();
    let tmp = TempDir::new("indirect-exit");
    let line = run_error(args!["-p", &pid, "-u", "pcall", "-o", tmp.join("refused")]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: {matrix}: cannot trace `pcall(long (*)(long), long)`: it has no exit \
             instruction that can be probed (it leaves through an indirect jump, or never \
             returns), and in code with exception tables a return probe could abort the process \
             when an exception unwinds through it; --exits uretprobe traces it with a return \
             probe at that risk, or trace a function that calls it"
        )
    );
    let out_dir = tmp.join("uretprobe");
    trace_fixture_with(
        &mut fixture,
        args!["--exits", "uretprobe", "-u", "pcall(u64, i64) -> i64"],
        &[],
        &out_dir,
    );
    let out = Outputs::read(&out_dir);
    let mut spans = out.spans_named("pcall(long (*)(long), long)");
    spans.sort_by_key(|s| s.start_ns());
    let got: Vec<(i64, i64)> = spans
        .iter()
        .map(|s| (s.args["arg1"].as_i64().unwrap(), s.args["ret"].as_i64().unwrap()))
        .collect();
    assert_eq!(got, [(0, 1), (1, 2), (2, 3)]);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn thread_exiting_mid_call() {
    if !require_bpf() {
        return;
    }
    let out = trace_calls("threadexit", &["te_exits", "te_plain"], &[]);
    assert_eq!(out.probe_count("te_exits"), 0);
    assert_eq!(out.probe_count("te_plain"), 2);
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 1);
}

/// A process that execs inside a traced call (from its only thread, which keeps its thread id):
/// the call never returns and counts as one unmatched entry, and the thread's next traced call
/// announces it again, under the name it has after the exec.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn exec_mid_call() {
    if !require_bpf() {
        return;
    }
    for exits in EXIT_MODES {
        let out = trace_calls("exec", &["ex_execs", "ex_plain"], exits);
        assert_eq!(out.probe_count("ex_execs"), 0, "{exits:?}");
        assert_eq!(out.probe_count("ex_plain"), 2, "{exits:?}");
        assert_eq!(u64_field(&out.summary, "unmatched_entries"), 1, "{exits:?}");
        let spans = out.spans_named("ex_plain");
        let pid = spans[0].pid;
        assert!(spans.iter().all(|s| s.pid == pid && s.tid == pid), "{spans:?}");
        let names: Vec<&str> = out
            .metadata("thread_name")
            .into_iter()
            .filter(|m| m["tid"].as_u64() == Some(pid))
            .map(|m| m["args"]["name"].as_str().expect("thread name"))
            .collect();
        assert_eq!(names, ["post-exec"], "{exits:?}");
    }
}

/// A thread other than the main one execs inside a traced call. The kernel ties a process's
/// uprobe links to its main thread, which that exec ends: xtrace closes the process's links and
/// attaches them again, and says so, and the new program's call is traced, on the thread that
/// took the process id, under its new name. The call that execs never returns: one unmatched.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn exec_by_another_thread_attaches_the_probes_again() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().calls, &["threadexec"]);
    fixture.wait_ready();
    let pid = fixture.pid();
    let tmp = TempDir::new("nesting-thread-exec");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        pid.to_string(),
        "-u",
        "ex_execs",
        "-u",
        "ex_plain",
        "-o",
        &out_dir
    ]);
    xtrace.wait_attached();
    fixture.send("go");
    fixture.wait_ready(); // the program it execs
    let notice = xtrace.wait_stderr("xtrace: pid ");
    assert_eq!(
        notice,
        format!(
            "xtrace: pid {pid}: a thread other than its first ran exec, which ends the kernel's \
             probes of the process: attached its 4 uprobes again (its calls in between are not \
             traced)"
        )
    );
    fixture.go();
    assert!(fixture.wait().success());
    xtrace.wait().assert_success();
    before.assert_none_left();
    let out = Outputs::read(&out_dir);
    assert_eq!(out.probe_count("ex_execs"), 0);
    assert_eq!(out.probe_count("ex_plain"), 2);
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 1);
    let mut spans = out.spans_named("ex_plain");
    spans.sort_by_key(|s| s.start_ns());
    assert!(
        spans
            .iter()
            .all(|s| s.pid == u64::from(pid) && s.tid == u64::from(pid)),
        "{spans:?}"
    );
    let names: Vec<&str> = out
        .metadata("thread_name")
        .into_iter()
        .filter(|m| m["tid"].as_u64() == Some(u64::from(pid)))
        .map(|m| m["args"]["name"].as_str().expect("thread name"))
        .collect();
    assert_eq!(names, ["post-exec"]);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn several_processes_at_once() {
    if !require_bpf() {
        return;
    }
    let mut a = Fixture::spawn(&fixtures().uselib, &[]);
    let mut b = Fixture::spawn(&fixtures().uselib, &[]);
    a.wait_ready();
    b.wait_ready();
    let tmp = TempDir::new("nesting-pids");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        a.pid().to_string(),
        "-p",
        b.pid().to_string(),
        "-u",
        "libxtfix:lib_work",
        "-o",
        &out_dir
    ]);
    xtrace.wait_attached();
    a.go();
    b.go();
    assert!(a.wait().success() && b.wait().success());
    xtrace.wait().assert_success();
    before.assert_none_left();
    let out = Outputs::read(&out_dir);
    for pid in [a.pid(), b.pid()] {
        let spans = out
            .spans()
            .into_iter()
            .filter(|s| s.pid == u64::from(pid))
            .count();
        assert_eq!(spans, 7, "spans of pid {pid}");
    }
    // One probe (one file), one link per process and program: 2 processes x 2 uprobes.
    assert_eq!(out.probe_count("lib_work"), 14);
    assert_eq!(u64_field(&out.summary, "uprobes"), 4);
}
