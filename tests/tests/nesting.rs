//! Nesting: 64 levels of recursion recorded (deeper levels counted as too deep), calls left by
//! longjmp (also inside recursion) or by their thread exiting are counted as unmatched entries and
//! never mis-paired with another return, a C++ exception caught in a traced function; several
//! processes traced at once. Fixtures: `calls` (modes `recurse`, `longjmp`, `ljrecurse`,
//! `threadexit`), `matrix` (catcher/thrower), `uselib` (lib_work x 7).

use xtrace_tests::{
    args,
    bpf::Programs,
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{trace_new_fixture, Xtrace},
    TempDir,
};

fn trace(program: &std::path::Path, mode: &[&str], probes: &[&str]) -> Outputs {
    trace_new_fixture(program, mode, probes, "nesting").0
}

#[test]
fn recursion_64_deep() {
    if !require_bpf() {
        return;
    }
    let out = trace(&fixtures().calls, &["recurse"], &["recurse"]);
    // recurse(63): 64 nested calls; recurse(69): 70, of which the 6 deepest are too deep.
    let spans = out.spans_named("recurse");
    assert_eq!(spans.len(), 128);
    for depth in 0..64 {
        let at_depth = spans.iter().filter(|s| s.depth == depth).count();
        assert_eq!(at_depth, 2, "spans at depth {depth}");
    }
    assert_eq!(u64_field(&out.summary["lost"], "too_deep"), 6);
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);
    // Every span contains the deeper ones on the same thread.
    let outer = spans.iter().find(|s| s.depth == 0).unwrap();
    let inner = spans
        .iter()
        .find(|s| s.depth == 63 && s.start_ns() < outer.end_ns())
        .unwrap();
    assert!(outer.start_ns() <= inner.start_ns() && inner.end_ns() <= outer.end_ns());
}

#[test]
fn longjmp_leaves_unmatched_entries() {
    if !require_bpf() {
        return;
    }
    let out = trace(
        &fixtures().calls,
        &["longjmp"],
        &["lj_outer", "lj_jumper", "lj_plain"],
    );
    assert_eq!(out.probe_count("lj_outer"), 3);
    assert_eq!(out.probe_count("lj_jumper"), 0);
    assert_eq!(out.probe_count("lj_plain"), 1);
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 3);
    for span in out.spans() {
        assert_eq!(span.depth, 0, "nothing nests under a stale entry: {span:?}");
    }
}

/// A longjmp from the deepest of six recursive calls back into the third: each return is paired
/// with its own call (the entry's argument is the recursion level, equal to the span's depth), and
/// the three calls left behind are unmatched. Pairing a return with the innermost open call of the
/// same function would give ljr(2)'s return ljr(5)'s entry.
#[test]
fn longjmp_inside_recursion_pairs_each_return_with_its_own_call() {
    if !require_bpf() {
        return;
    }
    let out = trace(&fixtures().calls, &["ljrecurse"], &["ljr(i32) -> i32"]);
    let spans = out.spans_named("ljr");
    assert_eq!(spans.len(), 6);
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
    assert_eq!(pairs, [(0, 0), (1, 1), (2, 2), (0, 0), (1, 1), (2, 2)]);
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 6);
}

/// An exception thrown inside `thrower` and caught in `catcher`: tracing the catching function is
/// safe and exact. (Tracing `thrower` itself would abort the process: the kernel's return probe
/// replaces its return address, which the C++ unwinder cannot walk; xtrace warns about it.)
#[test]
fn cpp_exception_caught_in_a_traced_function() {
    if !require_bpf() {
        return;
    }
    let (out, finished) = trace_new_fixture(&fixtures().matrix, &[], &["catcher"], "nesting-cpp");
    assert_eq!(out.probe_count("catcher(int)"), 4);
    assert!(out.spans_named("catcher(int)").iter().all(|s| s.depth == 0));
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);
    let warning = finished
        .stderr
        .iter()
        .find(|line| line.starts_with("xtrace: warning:") && line.contains("C++ exceptions"));
    assert!(warning.is_some(), "{:?}", finished.stderr);
}

#[test]
fn thread_exiting_mid_call() {
    if !require_bpf() {
        return;
    }
    let out = trace(&fixtures().calls, &["threadexit"], &["te_exits", "te_plain"]);
    assert_eq!(out.probe_count("te_exits"), 0);
    assert_eq!(out.probe_count("te_plain"), 2);
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 1);
}

#[test]
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
    let before = Programs::snapshot();
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
