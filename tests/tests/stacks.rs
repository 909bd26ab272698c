//! `--stacks`: each traced call named by its call site. Fixture `pystacks.py` (tests/fixtures/)
//! calls libxtfix.so's `lib_work` through ctypes from two known lines (`calls`), or the stand-in
//! CUDA runtime (`cuda`), on every CPython of this machine that is present (tests/src/python.rs);
//! `uselib` (C) calls `lib_work` from `main`. Each fixture is traced by `--pid` once ready, so its
//! interpreter is recognised before its first call, and lives until xtrace has stopped, so its
//! code objects are named. USDT probes (`-U`): `usdt_sites run` (C) fires xtsites:tick and the
//! pair xtsites:op__start/op__done from two callers with known counts, and pystacks.py's `usdt`
//! mode fires them through ctypes (libxtsites.so) from known lines. Also: without `--stacks` the
//! `call_stack` program is not loaded, and `--stacks` with no call traced is refused.

use serde_json::Value;
use xtrace_tests::{
    args,
    bpf::{Attached, Attachments},
    fixtures::{fixtures, script, Fixture},
    output::Outputs,
    python::{interpreters, Interpreter},
    require_bpf,
    run::{run_error, Xtrace},
    TempDir,
};

/// (site, count) of each call site in `sites` (summary.json's `call_sites`), the most calls
/// first (they are listed the most time first, which a preempted call can change).
fn sites(sites: &Value) -> Vec<(String, u64)> {
    let mut all: Vec<(String, u64)> = sites
        .as_array()
        .unwrap_or_else(|| panic!("call_sites: {sites}"))
        .iter()
        .map(|s| {
            (
                s["site"].as_str().unwrap().to_string(),
                s["count"].as_u64().unwrap(),
            )
        })
        .collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all
}

/// The summary.json entry of probe `name`.
fn probe<'a>(out: &'a Outputs, name: &str) -> &'a Value {
    out.summary["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no probe {name}: {}", out.summary["probes"]))
}

/// Runs `pystacks.py MODE LIBS...` on `python`, traced by pid with `FLAGS`, to the fixture's
/// `done` line; stops xtrace, then lets the fixture exit. Returns the outputs and whether the
/// `call_stack` program was loaded while xtrace was attached.
fn trace_python(
    python: &std::path::Path,
    mode: &str,
    libs: &[&str],
    flags: &[&str],
) -> (Outputs, bool, TempDir) {
    trace_python_with(python, (mode, libs), flags, &[])
}

/// [`trace_python`] with extra environment variables for xtrace.
fn trace_python_with(
    python: &std::path::Path,
    (mode, libs): (&str, &[&str]),
    flags: &[&str],
    env: &[(&str, &str)],
) -> (Outputs, bool, TempDir) {
    let mut argv = vec![
        script("pystacks.py").to_str().unwrap().to_string(),
        mode.to_string(),
    ];
    argv.extend(libs.iter().map(|l| l.to_string()));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut fixture = Fixture::spawn(python, &argv);
    fixture.wait_ready();
    let tmp = TempDir::new(&format!("stacks-{mode}"));
    let out = tmp.join("out");
    let before = Attachments::snapshot();
    let mut all = args!["-p", fixture.pid().to_string(), "-o", &out];
    all.extend(flags.iter().map(std::ffi::OsString::from));
    let mut xtrace = Xtrace::spawn_with_env(all, env);
    xtrace.wait_attached();
    let loaded = Attachments::snapshot()
        .new_since(&before)
        .iter()
        .any(|a| matches!(a, Attached::Program(_, name) if name == "call_stack"));
    fixture.send("go");
    assert_eq!(fixture.next_line(), "done");
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    before.assert_none_left();
    fixture.send("exit");
    assert!(fixture.wait().success());
    (Outputs::read(&out), loaded, tmp)
}

/// A method's site as xtrace names it: the qualified name from 3.11, the bare name on 3.10.
fn site(python: &Interpreter, qualname: &str, line: u32) -> String {
    let name = match python.minor {
        10 => qualname.rsplit('.').next().unwrap_or(qualname),
        _ => qualname,
    };
    format!("{name} (pystacks.py:{line})")
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn python_calls_through_ctypes_are_named_by_their_calling_lines() {
    if !require_bpf() {
        return;
    }
    let lib = fixtures().libxtfix.to_str().unwrap().to_string();
    let spec = format!("{lib}:lib_work");
    for python in interpreters() {
        let (out, loaded, _tmp) = trace_python(&python.path, "calls", &[&lib], &["-u", &spec, "--stacks"]);
        assert!(loaded, "{}: call_stack is loaded with --stacks", python.label);
        let work = probe(&out, "lib_work");
        assert_eq!(work["count"], 400, "{}", python.label);
        assert_eq!(
            sites(&work["call_sites"]),
            [
                (site(&python, "Loop.hot", 22), 300),
                (site(&python, "cold", 27), 100)
            ],
            "{}: {work}",
            python.label
        );
        // Each call's time is its span's: the sites' times add up to the probe's.
        let total: u64 = work["call_sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["total_ns"].as_u64().unwrap())
            .sum();
        assert_eq!(total, work["total_ns"].as_u64().unwrap(), "{}", python.label);
        // Every span carries its site.
        let spans = out.spans_named("lib_work");
        let from_hot = spans
            .iter()
            .filter(|s| s.args["site"] == site(&python, "Loop.hot", 22))
            .count();
        assert_eq!((spans.len(), from_hot), (400, 300), "{}", python.label);
        let line = format!("  {}", site(&python, "Loop.hot", 22));
        assert!(
            out.summary_txt
                .lines()
                .any(|l| l.contains("300 calls") && l.ends_with(&line)),
            "{}: {}",
            python.label,
            out.summary_txt
        );
    }
}

/// With perf-event uprobes (kernels before 6.6) too, `call_stack` runs after the entry program,
/// and each stack pairs with its span.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn perf_event_uprobes_pair_stacks_with_spans_too() {
    if !require_bpf() {
        return;
    }
    let lib = fixtures().libxtfix.to_str().unwrap().to_string();
    let python = interpreters().into_iter().next().expect("a CPython");
    let spec = format!("{lib}:lib_work");
    let env = [("XTRACE_UPROBE_ATTACH", "perf_event")];
    let (out, _, _tmp) =
        trace_python_with(&python.path, ("calls", &[&lib]), &["-u", &spec, "--stacks"], &env);
    assert_eq!(out.summary["attach_mechanism"], "perf_event");
    let work = probe(&out, "lib_work");
    let timed: Vec<bool> = work["call_sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["total_ns"].as_u64().unwrap() > 0)
        .collect();
    assert_eq!(timed, [true, true], "{work}");
    assert_eq!(
        sites(&work["call_sites"]),
        [
            (site(&python, "Loop.hot", 22), 300),
            (site(&python, "cold", 27), 100)
        ]
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cuda_launches_and_synchronizations_are_named_by_their_python_lines() {
    if !require_bpf() {
        return;
    }
    let runtime = fixtures().cudaapp.with_file_name("libcudart.so.12");
    let (runtime, lib) = (runtime.to_str().unwrap(), fixtures().libxtfix.to_str().unwrap());
    let python = interpreters().into_iter().next().expect("a CPython");
    let (out, _, _tmp) = trace_python(&python.path, "cuda", &[runtime, lib], &["--cuda", "--stacks"]);
    for (function, count, line) in [
        ("cudaLaunchKernel", 3, ("launch", 37)),
        ("cudaStreamSynchronize", 1, ("sync", 41)),
        ("cudaDeviceSynchronize", 2, ("sync", 43)),
    ] {
        let p = probe(&out, function);
        assert_eq!(
            sites(&p["call_sites"]),
            [(site(&python, line.0, line.1), count)],
            "{function}: {p}"
        );
    }
    // The launched kernel (lib_work stands for its host stub) by the line that launched it.
    let launches = &out.summary["cuda"]["launches"];
    assert_eq!(launches[0]["kernel"], "lib_work", "{launches}");
    assert_eq!(
        sites(&launches[0]["call_sites"]),
        [(site(&python, "launch", 37), 3)],
        "{launches}"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn c_callers_are_named_by_function_and_offset() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("stacks-c");
    let out = tmp.join("out");
    let mut fixture = Fixture::spawn(&fixtures().uselib, &[]);
    fixture.wait_ready();
    let flags = args!["-u", "libxtfix:lib_work", "--stacks"];
    xtrace_tests::run::trace_fixture_with(&mut fixture, flags, &[], &out);
    let out = Outputs::read(&out);
    let found = sites(&probe(&out, "lib_work")["call_sites"]);
    assert_eq!(found.len(), 1, "{found:?}");
    let (site, count) = &found[0];
    assert_eq!(*count, 7);
    assert!(
        site.starts_with("main+0x") && site.ends_with(" (uselib)"),
        "{site}"
    );
}

/// Traces `usdt_sites run` by `--pid` with `-U xtsites:* --stacks` (and the environment `env`
/// for xtrace) until the fixture exits; returns the outputs and whether `usdt_stack` was loaded.
fn trace_usdt_sites(env: &[(&str, &str)]) -> (Outputs, bool, TempDir) {
    let tmp = TempDir::new("stacks-usdt");
    let out = tmp.join("out");
    let mut fixture = Fixture::spawn(&fixtures().usdt_sites, &["run"]);
    fixture.wait_ready();
    let before = Attachments::snapshot();
    let mut argv = args!["-p", fixture.pid().to_string(), "-U", "xtsites:*", "--stacks"];
    argv.extend(args!["-o", &out]);
    let mut xtrace = Xtrace::spawn_with_env(argv, env);
    xtrace.wait_attached();
    let loaded = Attachments::snapshot()
        .new_since(&before)
        .iter()
        .any(|a| matches!(a, Attached::Program(_, name) if name == "usdt_stack"));
    fixture.send("go");
    assert_eq!(fixture.next_line(), "fired");
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    before.assert_none_left();
    fixture.go();
    assert!(fixture.wait().success());
    (Outputs::read(&out), loaded, tmp)
}

/// The functions (without their offsets) and counts of `sites`, checking each is in
/// `usdt_sites`.
fn callers(sites: &Value) -> Vec<(String, u64)> {
    self::sites(sites)
        .into_iter()
        .map(|(site, count)| {
            assert!(site.ends_with(" (usdt_sites)"), "{site}");
            let function = site.split("+0x").next().unwrap_or_default().to_string();
            (function, count)
        })
        .collect()
}

/// A USDT probe's hits and a pair's spans are counted by the caller of the function the probe
/// is in, 30 and 10 (3 and 2 spans) exactly; a span's time goes to its begin's site; the end
/// and begin probes' own rows list none. The probes have semaphores (attached twice, with the
/// same reference counter); with perf-event uprobes (kernels before 6.6) too.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn usdt_hits_and_spans_are_named_by_their_callers() {
    if !require_bpf() {
        return;
    }
    for env in [&[][..], &[("XTRACE_UPROBE_ATTACH", "perf_event")][..]] {
        let (out, loaded, _tmp) = trace_usdt_sites(env);
        assert!(loaded, "{env:?}: usdt_stack is loaded with --stacks and -U");
        let tick = probe(&out, "xtsites:tick");
        assert_eq!(tick["count"], 40, "{env:?}");
        let want = [("caller_a".to_string(), 30), ("caller_b".to_string(), 10)];
        assert_eq!(callers(&tick["call_sites"]), want, "{env:?}: {tick}");
        let op = probe(&out, "xtsites:op");
        assert_eq!(op["count"], 5, "{env:?}");
        let want = [("caller_a".to_string(), 3), ("caller_b".to_string(), 2)];
        assert_eq!(callers(&op["call_sites"]), want, "{env:?}: {op}");
        let total: u64 = op["call_sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["total_ns"].as_u64().unwrap())
            .sum();
        assert_eq!(total, op["total_ns"].as_u64().unwrap(), "{env:?}");
        for half in ["xtsites:op__start", "xtsites:op__done"] {
            assert!(probe(&out, half).get("call_sites").is_none(), "{env:?}: {half}");
        }
        // Every span and instant carries its site.
        let spans = out.spans_named("xtsites:op");
        let from_a = spans
            .iter()
            .filter(|s| s.args["site"].as_str().unwrap().starts_with("caller_a+0x"))
            .count();
        assert_eq!((spans.len(), from_a), (5, 3), "{env:?}");
        let ticks = out.instants("xtsites:tick");
        let from_b = ticks
            .iter()
            .filter(|a| a["site"].as_str().unwrap().starts_with("caller_b+0x"))
            .count();
        assert_eq!((ticks.len(), from_b), (40, 10), "{env:?}");
        assert!(
            out.summary_txt
                .lines()
                .any(|l| l.contains(" 30 calls ") && l.contains("caller_a+0x")),
            "{env:?}: {}",
            out.summary_txt
        );
    }
}

/// Through ctypes, a USDT hit and a span are named by the Python line that called the function
/// the probe is in, on every CPython present.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn python_usdt_hits_are_named_by_their_calling_lines() {
    if !require_bpf() {
        return;
    }
    let lib = fixtures().libxtsites.to_str().unwrap().to_string();
    for python in interpreters() {
        let (out, loaded, _tmp) =
            trace_python(&python.path, "usdt", &[&lib], &["-U", "xtsites:*", "--stacks"]);
        assert!(
            !loaded,
            "{}: call_stack is not loaded: no function is traced",
            python.label
        );
        let tick = probe(&out, "xtsites:tick");
        assert_eq!(tick["count"], 40, "{}", python.label);
        assert_eq!(
            sites(&tick["call_sites"]),
            [
                (site(&python, "usdt_hot", 70), 30),
                (site(&python, "usdt_cold", 78), 10)
            ],
            "{}: {tick}",
            python.label
        );
        let op = probe(&out, "xtsites:op");
        assert_eq!(
            sites(&op["call_sites"]),
            [
                (site(&python, "usdt_hot", 72), 3),
                (site(&python, "usdt_cold", 80), 2)
            ],
            "{}: {op}",
            python.label
        );
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn without_stacks_nothing_changes() {
    if !require_bpf() {
        return;
    }
    let lib = fixtures().libxtfix.to_str().unwrap().to_string();
    let python = interpreters().into_iter().next().expect("a CPython");
    let spec = format!("{lib}:lib_work");
    let (out, loaded, _tmp) = trace_python(&python.path, "calls", &[&lib], &["-u", &spec]);
    assert!(!loaded, "call_stack is not loaded without --stacks");
    let work = probe(&out, "lib_work");
    assert_eq!(work["count"], 400);
    assert!(work.get("call_sites").is_none(), "{work}");
    assert!(out
        .spans_named("lib_work")
        .iter()
        .all(|s| s.args.get("site").is_none()));
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn stacks_without_a_traced_call_is_refused() {
    if !require_bpf() {
        return;
    }
    let fixture = Fixture::spin();
    let line = run_error(args!["-p", fixture.pid().to_string(), "--stacks"]);
    assert_eq!(
        line,
        "xtrace: error: --stacks records the stack of each traced call and USDT hit, and none is \
         traced: add -u [TARGET:]SYMBOL, -U [TARGET:]PROVIDER:NAME or --cuda, or drop --stacks"
    );
}
