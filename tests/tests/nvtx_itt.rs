//! NVTX and ITT annotation ranges on the real kernel: NVIDIA's `nvtx` and Intel's `ittapi`
//! packages from PyPI (tests/fixtures/*_ranges.py, run by the venv `cargo xtask setup` makes)
//! through xtrace's tool library as their injected tool, and NVTX v2's `libnvToolsExt.so.1`
//! probed directly (tests/fixtures/nvtx_v2.py). Counts, names, nesting and thread ids are exact.

use serde_json::Value;
use xtrace_tests::{
    args,
    fixtures::{python, script, tool_library, Fixture},
    output::Outputs,
    ranges::{
        assert_async_pair, assert_nested, assert_tracks, edges_in_time_order, owned, range, range_counts,
        thread_name, tids, trace_by_pid,
    },
    require_bpf,
    run::{run_error, Finished, Xtrace},
    TempDir,
};

/// Launches `python SCRIPT` (a tests/fixtures script) under `xtrace --nvtx`; expects both to
/// succeed and no program left, and returns the outputs and how xtrace finished.
fn launch_nvtx(script_name: &str, tmp: &TempDir) -> (Outputs, Finished) {
    let out_dir = tmp.join("out");
    let before = xtrace_tests::bpf::Attachments::snapshot();
    let finished = Xtrace::spawn(args![
        "--nvtx",
        "-o",
        &out_dir,
        "--",
        python(),
        script(script_name)
    ])
    .wait();
    finished.assert_success();
    before.assert_none_left();
    (Outputs::read(&out_dir), finished)
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn nvtx_python_client_launched() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranges-nvtx");
    let (out, finished) = launch_nvtx("nvtx_ranges.py", &tmp);
    let line = finished
        .stdout
        .lines()
        .find(|l| l.starts_with("tid "))
        .expect("the fixture's tid line");
    let (main, worker) = tids(line);
    assert_eq!(
        range_counts(&out),
        owned(&[
            ("layer", "push", 6),
            ("load", "push", 1),
            ("prefetch", "start", 1),
            ("step", "push", 3),
            ("tick", "mark", 4),
            ("warmup", "mark", 1),
            ("work", "push", 1),
        ])
    );
    assert_eq!(out.summary["ranges_unpaired"], 0);
    assert_eq!(range(&out, "load", "push")["domain"], "io");
    assert_eq!(range(&out, "step", "push")["source"], "nvtx");
    assert_nested(&out, "step", "layer");
    assert_tracks(
        &out,
        &[
            ("step", main, "nvtx"),
            ("layer", main, "nvtx"),
            ("load", main, "io"),
            ("work", worker, "nvtx"),
        ],
    );
    // The start/end range began on the main thread and ended on the worker.
    assert_async_pair(&out, "prefetch", main, worker);
    assert_eq!(out.instants("tick").len(), 4);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn itt_python_client_by_pid() {
    if !require_bpf() {
        return;
    }
    let tool = tool_library();
    let mut fixture = Fixture::spawn_with_env(
        &python(),
        &[script("itt_ranges.py").to_str().expect("UTF-8 path")],
        &[("INTEL_LIBITTNOTIFY64", &tool)],
    );
    fixture.wait_ready();
    let tmp = TempDir::new("ranges-itt");
    let (out, (main, worker), _) = trace_by_pid(fixture, args!["--itt"], &tmp);
    assert_eq!(
        range_counts(&out),
        owned(&[
            ("backward", "push", 3),
            ("fetch", "start", 2),
            ("forward", "push", 3),
            ("frame", "start", 5),
            ("load", "push", 2),
            ("step", "push", 3)
        ])
    );
    // The overlapped tasks cross: the first to begin ends first, inside the second.
    let fetch = edges_in_time_order(&out, "fetch");
    let phases: Vec<&str> = fetch.iter().map(|e| e["ph"].as_str().unwrap_or("?")).collect();
    assert_eq!(phases, ["b", "b", "e", "e"], "{fetch:?}");
    assert_eq!(fetch[0]["id"], fetch[2]["id"], "{fetch:?}");
    assert_eq!(fetch[1]["id"], fetch[3]["id"], "{fetch:?}");
    assert_ne!(fetch[0]["id"], fetch[1]["id"]);
    // Frames: 4 without an id one after another on main, then id 7 begun on the worker, ended
    // on main; all in domain "render".
    let frames = edges_in_time_order(&out, "frame");
    let seen: Vec<(&str, u64)> = frames
        .iter()
        .map(|e| (e["ph"].as_str().unwrap_or("?"), e["tid"].as_u64().unwrap_or(0)))
        .collect();
    let mut expected = [("b", main), ("e", main)].repeat(4);
    expected.extend([("b", worker), ("e", main)]);
    assert_eq!(seen, expected, "{frames:?}");
    for pair in frames.chunks(2) {
        assert_eq!(pair[0]["id"], pair[1]["id"], "{pair:?}");
    }
    assert!(frames.iter().all(|e| e["cat"] == "render"), "{frames:?}");
    assert_eq!(out.summary["ranges_unpaired"], 0);
    assert_nested(&out, "step", "forward");
    assert_nested(&out, "step", "backward");
    assert_tracks(
        &out,
        &[
            ("step", main, "train"),
            ("forward", main, "train"),
            ("load", worker, "train"),
        ],
    );
    assert!(out.spans_named("step").iter().all(|s| s.args["source"] == "itt"));
    // The worker named itself while traced; the main thread did so before xtrace attached, so
    // its track keeps the kernel's name (when the thread was still there to read it).
    assert_eq!(thread_name(&out, worker), Some(Value::from("loader")));
    assert_ne!(thread_name(&out, main), Some(Value::from("trainer")));
}

/// What tests/fixtures/nvtx_v2.py records, by (name, kind, count), sorted by name; `registered`
/// is the name of the domain mark whose message is a registered string.
fn nvtx_v2_ranges(registered: &str) -> Vec<(String, String, u64)> {
    let mut counts = owned(&[
        ("async", "start", 1),
        ("layer", "push", 6),
        ("load", "push", 1),
        ("prefetch", "start", 1),
        ("step", "push", 3),
        ("tick", "mark", 4),
        ("wide-ex", "push", 1),
        ("work", "push", 1),
        ("wstart", "start", 1),
        ("wtick", "mark", 1),
        ("xtick", "mark", 1),
    ]);
    counts.push((registered.to_string(), "mark".into(), 1));
    counts.sort();
    counts
}

/// tests/fixtures/nvtx_v2.py started (with `env`) and waiting for its `go` line.
fn nvtx_v2_fixture(env: &[(&str, &std::path::Path)]) -> Fixture {
    nvtx_v2_fixture_with(&[], env)
}

/// [`nvtx_v2_fixture`] with the script's arguments `args`.
fn nvtx_v2_fixture_with(args: &[&str], env: &[(&str, &std::path::Path)]) -> Fixture {
    let script = script("nvtx_v2.py");
    let mut argv = vec![script.to_str().expect("UTF-8 path")];
    argv.extend(args);
    let mut fixture = Fixture::spawn_with_env(&python(), &argv, env);
    fixture.wait_ready();
    fixture
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn nvtx_v2_library_by_pid_without_an_nvtx_tool() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranges-nvtx-v2");
    let (out, (main, worker), finished) = trace_by_pid(nvtx_v2_fixture(&[]), args!["--nvtx"], &tmp);
    // Every NVTX v2 function xtrace knows, in libnvToolsExt.so.1.
    assert!(
        finished
            .stderr
            .iter()
            .any(|l| l.contains("attached 18 probes (18 uprobes")),
        "{:?}",
        finished.stderr
    );
    // Without a tool, libnvToolsExt returns NULL for the domain and the registered string.
    assert_eq!(range_counts(&out), nvtx_v2_ranges("(unnamed)"));
    assert_eq!(out.summary["ranges_unpaired"], 0);
    assert!(out.summary["ranges"]
        .as_array()
        .expect("ranges")
        .iter()
        .all(|r| r["source"] == "nvtx" && r["domain"].is_null()));
    assert_nested(&out, "step", "layer");
    assert_tracks(
        &out,
        &[
            ("step", main, "nvtx"),
            ("layer", main, "nvtx"),
            ("load", main, "nvtx"),
            ("wide-ex", main, "nvtx"),
            ("work", worker, "nvtx"),
        ],
    );
    // Range ids are all 0: the end on the worker closes the oldest open start range.
    assert_async_pair(&out, "prefetch", main, worker);
    assert_eq!(out.instants("tick").len(), 4);
    assert_eq!(thread_name(&out, worker), Some(Value::from("loader")));
}

/// The process's first NVTX call passes through libnvToolsExt's initialisation, which jumps back
/// to the function's entry once it has set the library's pointers: one call, not two (before,
/// "step" was pushed 4 times and every later range sat one level deeper).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn nvtx_v2_first_call_through_the_librarys_initialisation_is_one_call() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranges-nvtx-v2-fresh");
    let fixture = nvtx_v2_fixture_with(&["fresh"], &[]);
    let (out, (main, _), _) = trace_by_pid(fixture, args!["--nvtx"], &tmp);
    assert_eq!(range_counts(&out), nvtx_v2_ranges("(unnamed)"));
    assert_eq!(out.summary["ranges_unpaired"], 0);
    assert_nested(&out, "step", "layer");
    let steps = out.spans_named("step");
    assert!(steps.iter().all(|s| s.depth == 0 && s.tid == main), "{steps:?}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn nvtx_v2_calls_of_a_process_with_the_tool_library_are_seen_once() {
    if !require_bpf() {
        return;
    }
    // Launched: xtrace sets NVTX_INJECTION64_PATH, libnvToolsExt forwards every call to the tool.
    let tmp = TempDir::new("ranges-nvtx-v2-tool");
    let (out, _) = launch_nvtx("nvtx_v2.py", &tmp);
    assert_eq!(range_counts(&out), nvtx_v2_ranges("reg"));
    assert_eq!(range(&out, "load", "push")["domain"], "io");
    assert_eq!(range(&out, "reg", "mark")["domain"], "io");
    assert_eq!(out.summary["ranges_unpaired"], 0);
    // By pid, started with the tool as its NVTX tool: only the tool's probes are attached; so too
    // when the variable names it through a symbolic link of another name.
    let tool = tool_library();
    let link_dir = TempDir::new("ranges-nvtx-v2-tool-link");
    let link = link_dir.join("nvtx-tool.so");
    std::os::unix::fs::symlink(&tool, &link).expect("symlink");
    for (injected, tmp) in [(&tool, &tmp), (&link, &link_dir)] {
        let fixture = nvtx_v2_fixture(&[("NVTX_INJECTION64_PATH", injected)]);
        let (out, _, finished) = trace_by_pid(fixture, args!["--nvtx"], tmp);
        assert!(
            finished.stderr.iter().any(|l| l.contains("attached 5 probes")),
            "{}: {:?}",
            injected.display(),
            finished.stderr
        );
        assert_eq!(range_counts(&out), nvtx_v2_ranges("reg"));
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_range_flag_for_a_pid_without_the_tool_library_is_refused() {
    if !require_bpf() {
        return;
    }
    let fixture = Fixture::spin();
    let line = run_error(args!["--nvtx", "-p", fixture.pid().to_string()]);
    assert!(
        line.contains(&format!(
            "--nvtx: pid {} has not loaded libxtrace_tool.so nor libnvToolsExt",
            fixture.pid()
        )) && line.contains("NVTX_INJECTION64_PATH"),
        "{line}"
    );
}
