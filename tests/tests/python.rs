//! Python frames in CPU samples, on the real interpreters of this machine (the `pyfix.py`
//! fixture): Debian's static python3.11 and pyenv's CPython 3.10 to 3.13 with a shared libpython.
//! Every test runs on each interpreter present, says which ran, and says which it skipped.

use xtrace_tests::{
    args,
    fixtures::{script, Fixture},
    output::Outputs,
    python::interpreters,
    require_bpf,
    run::{only_child, trace_fixture_with, Xtrace},
    TempDir,
};

/// The Python frames of a folded stack, outermost first.
fn python_frames(stack: &str) -> Vec<&str> {
    stack.split(';').filter(|f| f.contains("(pyfix.py:")).collect()
}

/// Whether `stack` has Python frame `caller` directly above Python frame `callee` (native frames
/// between them, the interpreter's call machinery, allowed).
fn calls(stack: &str, caller: &str, callee: &str) -> bool {
    python_frames(stack).windows(2).any(|w| w == [caller, callee])
}

/// `split` runs hot() 3000 units under three_parts() for every 1000 under one_part(): of the
/// samples in hot(), 75% are under three_parts and 25% under one_part, within 5 points.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn python_time_splits_75_25_between_two_callers_of_one_hot_function() {
    if !require_bpf() {
        return;
    }
    for python in interpreters() {
        let (out, _tmp) = python.record("split", "3", &[]);
        python.assert_recognised(&out);
        let (hot, three, one) = (
            python.frame("hot", 8),
            python.frame("three_parts", 15),
            python.frame("one_part", 19),
        );
        let split = python.frame("split", 23);
        let under = |caller: &str| out.samples_where(|s| calls(s, caller, &hot) && calls(s, &split, caller));
        let (a, b) = (under(&three) as f64, under(&one) as f64);
        assert!(a + b > 300.0, "{}: {a} + {b} samples in hot()", python.label);
        let share = a * 100.0 / (a + b);
        assert!(
            (70.0..=80.0).contains(&share),
            "{}: three_parts {share:.1}% of hot()",
            python.label
        );
        assert_eq!(out.summary["python_truncated"], 0, "{}", python.label);
    }
}

/// CPython 3.12+ run with `-X perf` calls each Python function through a trampoline in anonymous
/// memory, without CFI (3.12's keeps no frame pointer either): samples still unwind through
/// them to `_start`, the split is as without it, and the trampolines' perf-map names (`py::hot:…`)
/// give way to the Python frames they stand for.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn python_run_with_x_perf_unwinds_through_its_trampolines() {
    if !require_bpf() {
        return;
    }
    for python in interpreters().into_iter().filter(|p| p.minor >= 12) {
        let (out, _tmp) = python.run_with(&["-X", "perf"], ("split", "3"), &["-F", "999"]);
        let pid = out.summary["command"]["pid"].as_u64().expect("the command's pid");
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
        python.assert_recognised(&out);
        let (hot, three, one, split) = (
            python.frame("hot", 8),
            python.frame("three_parts", 15),
            python.frame("one_part", 19),
            python.frame("split", 23),
        );
        let in_hot = |s: &str| s.contains(hot.as_str());
        let all = out.samples_where(in_hot);
        let rooted = out.samples_where(|s| in_hot(s) && s.split(';').nth(1) == Some("_start"));
        assert!(all > 300, "{}: {all} samples in hot()", python.label);
        assert!(
            rooted * 100 >= all * 95,
            "{}: {rooted} of {all} samples in hot() reach _start",
            python.label
        );
        assert_eq!(
            out.samples_where(|s| in_hot(s) && s.contains(";py::")),
            0,
            "{}",
            python.label
        );
        let under = |caller: &str| out.samples_where(|s| calls(s, caller, &hot) && calls(s, &split, caller));
        let (a, b) = (under(&three) as f64, under(&one) as f64);
        let share = a * 100.0 / (a + b);
        assert!(
            (70.0..=80.0).contains(&share),
            "{}: three_parts {share:.1}% of hot()",
            python.label
        );
        // The trampoline's name stands where no walk came (the interpreter starting up).
        eprintln!(
            "python: {}: -X perf: {rooted} of {all} samples in hot() reach _start; {} name a trampoline",
            python.label,
            out.samples_where(|s| s.contains(";py::"))
        );
    }
}

/// `-X perf` in a container: a process in its own PID and mount namespaces, with a /tmp of its
/// own, writes its perf map there under the pid it sees; xtrace reads it through the process's
/// root and names the trampolines from it (`--no-python`: no Python frames replace them).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn x_perf_in_a_container_is_named_from_the_perf_map_in_its_own_tmp() {
    if !require_bpf() {
        return;
    }
    let Some(python) = interpreters().into_iter().find(|p| p.minor >= 12) else {
        return;
    };
    // The fixture is copied into the new /tmp, which hides the host's (the checkout may be there).
    let inside = r#"src=$(cat "$1") && mount -t tmpfs xtrace-test /tmp && printf '%s\n' "$src" > /tmp/pyfix.py && exec "$0" -X perf /tmp/pyfix.py pid 6"#;
    let (py, pyfix) = (python.path.to_str().unwrap(), script("pyfix.py"));
    let mut fixture = Fixture::spawn(
        std::path::Path::new("unshare"),
        &[
            "--pid",
            "--mount",
            "--fork",
            "sh",
            "-c",
            inside,
            py,
            pyfix.to_str().unwrap(),
        ],
    );
    fixture.wait_ready();
    let pid = only_child(fixture.pid());
    let tmp = TempDir::new("python-x-perf-container");
    let out = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        pid.to_string(),
        "-F",
        "999",
        "--no-python",
        "-d",
        "2",
        "-o",
        &out
    ]);
    xtrace.wait_attached();
    fixture.go();
    // xtrace stops while the process still runs (its map is read through its root).
    xtrace.wait().assert_success();
    let out = Outputs::read_profiled(&out);
    let named = out.samples_where(|s| s.contains(";py::hot:") && s.contains(";py::split:"));
    assert!(
        named > 300,
        "{}: {named} samples under py::split and py::hot",
        python.label
    );
    assert!(!std::path::Path::new(&format!("/tmp/perf-{pid}.map")).exists());
    assert!(fixture.wait().success(), "the container's python failed");
}

/// A `multiprocessing` child, started by fork and by spawn: recognised as a process of its own
/// (the parent too, and on spawn the resource tracker), its frames named, its split as the
/// parent's would be.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_multiprocessing_child_is_walked_whether_forked_or_spawned() {
    if !require_bpf() {
        return;
    }
    for python in interpreters() {
        for method in ["fork", "spawn"] {
            let label = format!("{} {method}", python.label);
            let (out, _tmp) = python.record(method, "2", &[]);
            let entries = out.summary["python"].as_array().expect("python entries");
            let pids: std::collections::BTreeSet<u64> =
                entries.iter().filter_map(|e| e["pid"].as_u64()).collect();
            assert!(
                entries.len() >= 2 && pids.len() == entries.len(),
                "{label}: {entries:?}"
            );
            assert!(
                entries.iter().all(|e| e["status"] == "recognised"),
                "{label}: {entries:?}"
            );
            let (child, split) = (python.frame("in_child", 128), python.frame("split", 23));
            let (three, one, hot) = (
                python.frame("three_parts", 15),
                python.frame("one_part", 19),
                python.frame("hot", 8),
            );
            let under = |caller: &str| {
                out.samples_where(|s| {
                    calls(s, &child, &split) && calls(s, &split, caller) && calls(s, caller, &hot)
                })
            };
            let (a, b) = (under(&three) as f64, under(&one) as f64);
            assert!(a + b > 200.0, "{label}: {a} + {b} samples in the child's hot()");
            let share = a * 100.0 / (a + b);
            assert!(
                (70.0..=80.0).contains(&share),
                "{label}: three_parts {share:.1}% of hot()"
            );
        }
    }
}

/// A method, a closure, a generator and a lambda each call hot(): each is named as CPython's
/// `co_qualname` names it (3.10: `co_name`), with its definition line.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn python_methods_closures_generators_and_lambdas_are_named_as_cpython_names_them() {
    if !require_bpf() {
        return;
    }
    for python in interpreters() {
        let (out, _tmp) = python.record("shapes", "3", &[]);
        python.assert_recognised(&out);
        let hot = python.frame("hot", 8);
        for (name, line) in [
            ("Trainer.step", 32),
            ("make_closure.<locals>.inner", 37),
            ("generate", 43),
            ("shapes.<locals>.<lambda>", 50),
        ] {
            let frame = python.frame(name, line);
            let shapes = python.frame("shapes", 48);
            let n =
                out.samples_where(|s| calls(s, &frame, &hot) && python_frames(s).contains(&shapes.as_str()));
            assert!(n > 20, "{}: {n} samples of {frame} calling {hot}", python.label);
        }
    }
}

/// `sorted(key=key_of)`: the C sort calls the Python key function, so a stack runs Python
/// (sort_keys), native (the sort: `list_sort` where the build names it; Debian's static python
/// keeps only its exported symbols), then Python again (key_of).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn python_frames_sit_on_both_sides_of_a_native_sorted() {
    if !require_bpf() {
        return;
    }
    for python in interpreters() {
        let (out, _tmp) = python.record("sort", "2", &[]);
        python.assert_recognised(&out);
        let (outer, key) = (python.frame("sort_keys", 64), python.frame("key_of", 59));
        let interleaved = out.samples_where(|s| {
            let frames: Vec<&str> = s.split(';').collect();
            let at = |name: &str| frames.iter().position(|f| *f == name);
            let (Some(a), Some(c)) = (at(&outer), at(&key)) else {
                return false;
            };
            let between = frames.get(a + 1..c).unwrap_or_default();
            let native = |f: &&str| !f.contains("(pyfix.py:") && *f != "_PyEval_EvalFrameDefault";
            let named = !python.recognised[1].starts_with("(shared") || between.contains(&"list_sort");
            between.iter().any(native) && named
        });
        assert!(
            interleaved > 50,
            "{}: {interleaved} samples with {outer}, the sort, {key}",
            python.label
        );
    }
}

/// Two threads spin each in its own function: both are named, and never in one stack.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn python_threads_are_each_in_their_own_function() {
    if !require_bpf() {
        return;
    }
    for python in interpreters() {
        let (out, _tmp) = python.record("threads", "2", &[]);
        python.assert_recognised(&out);
        let hot = python.frame("hot", 8);
        let (a, b) = (python.frame("worker_a", 71), python.frame("worker_b", 76));
        let in_a = out.samples_where(|s| calls(s, &a, &hot));
        let in_b = out.samples_where(|s| calls(s, &b, &hot));
        assert!(
            in_a > 50 && in_b > 50,
            "{}: {in_a} in {a}, {in_b} in {b}",
            python.label
        );
        assert_eq!(
            out.samples_where(|s| s.contains(&a) && s.contains(&b)),
            0,
            "{}",
            python.label
        );
    }
}

/// A Python process that ran before the capture, traced by `--pid`: recognised from what it
/// already runs, its frames named.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_python_process_started_before_the_capture_is_named_by_pid() {
    if !require_bpf() {
        return;
    }
    for python in interpreters() {
        let mut fixture = Fixture::spawn(&python.path, &[script("pyfix.py").to_str().unwrap(), "pid", "2"]);
        fixture.wait_ready();
        let tmp = TempDir::new("python-pid");
        let out = tmp.join("out");
        trace_fixture_with(&mut fixture, args!["-F", "999"], &[], &out);
        let out = Outputs::read_profiled(&out);
        python.assert_recognised(&out);
        let (split, three, hot) = (
            python.frame("split", 23),
            python.frame("three_parts", 15),
            python.frame("hot", 8),
        );
        let n = out.samples_where(|s| calls(s, &split, &three) && calls(s, &three, &hot));
        assert!(
            n > 200,
            "{}: {n} samples in split > three_parts > hot",
            python.label
        );
    }
}

/// The sampling program with its Python walk loads within a bounded verifier effort (a
/// regression in the walk's verification fails here); `--no-python` leaves the walk and the
/// Python frames out.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn the_python_walk_verifies_within_its_bound_and_no_python_leaves_it_out() {
    if !require_bpf() {
        return;
    }
    let Some(python) = interpreters().into_iter().next() else {
        return;
    };
    let (with, _tmp) = python.record("split", "1", &[]);
    let insns = with.summary["sampler_verified_insns"]
        .as_u64()
        .expect("verified_insns");
    eprintln!("python: the sampling program verified in {insns} instructions");
    assert!(insns < 150_000, "{insns} verified instructions");
    let (without, _tmp2) = python.record("split", "1", &["--no-python"]);
    let bare = without.summary["sampler_verified_insns"]
        .as_u64()
        .expect("verified_insns");
    assert!(bare < insns / 4, "{bare} without the walk, {insns} with it");
    assert_eq!(without.summary["python"], serde_json::json!([]));
    assert_eq!(without.samples_where(|s| s.contains("(pyfix.py:")), 0);
    assert!(without.samples_where(|s| s.contains("_PyEval_EvalFrameDefault")) > 0);
}

/// `--overhead` says what naming the samples' stacks took (summary.json's `symbolize`): every
/// sample written to stacks.folded counted once, Python frames named from walks, code objects
/// read fewer than the frames named (the cache names the rest), and the times adding up.
/// Without `--overhead` it is left out.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn overhead_counts_the_samples_and_python_frames_symbolized() {
    if !require_bpf() {
        return;
    }
    let Some(python) = interpreters().into_iter().next() else {
        return;
    };
    let (out, _tmp) = python.record("split", "2", &["--overhead"]);
    python.assert_recognised(&out);
    let cost = &out.summary["symbolize"];
    let field = |k: &str| {
        cost[k]
            .as_u64()
            .unwrap_or_else(|| panic!("symbolize.{k}: {cost}"))
    };
    let folded = out.folded();
    let written: u64 = folded.iter().map(|(_, n)| n).sum();
    assert_eq!(field("samples"), written, "{cost}");
    assert_eq!(
        field("samples"),
        out.summary["samples"].as_u64().unwrap(),
        "{cost}"
    );
    // Stacks that fold alike (one line) may differ in their addresses.
    assert!(
        field("stacks") >= folded.len() as u64 && field("stacks") <= written,
        "{cost}"
    );
    assert_eq!(field("ns"), field("native_ns") + field("python_ns"), "{cost}");
    assert!(field("native_ns") > 0 && field("python_ns") > 0, "{cost}");
    // Sampling only: one walk per sample of the recognised process, at least one for each
    // sample with Python frames, each with <module> and split at least.
    let with_python = out.samples_where(|s| s.contains("(pyfix.py:"));
    assert!(with_python > 100, "{with_python} samples with Python frames");
    let walks = field("python_walks");
    assert!(
        (with_python..=written).contains(&walks),
        "{with_python} with Python frames: {cost}"
    );
    assert!(field("python_frames") >= 2 * with_python, "{cost}");
    let codes = field("python_codes_read");
    assert!(codes >= 4 && codes * 100 < field("python_frames"), "{cost}");
    let first = field("python_first_walk_ns");
    assert!(first > 0 && first <= field("python_ns"), "{cost}");
    assert!(
        out.summary_txt.lines().any(|l| l.starts_with("symbolize: ")
            && l.contains(&format!(
                " naming {written} samples' stacks ({} distinct",
                field("stacks")
            ))),
        "{}",
        out.summary_txt
    );
    let (bare, _tmp2) = python.record("split", "1", &[]);
    assert!(bare.summary.get("symbolize").is_none(), "{}", bare.summary);
}
