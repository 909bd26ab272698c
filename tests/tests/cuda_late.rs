//! `--cuda` and CUDA libraries loaded after recording started, as Python loads them when it
//! imports torch: fixture `cudalate` (tests/fixtures/cudalate.c) dlopen()s the stand-in
//! `libcudart.so.12` (which needs `libcuda.so.1`) after the go line, waits for a second line, then
//! makes known calls. xtrace sees the dlopen return, attaches both libraries, says so, and the
//! calls are traced like those of a library mapped from the start.

use std::path::Path;

use serde_json::json;
use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::Xtrace,
    TempDir,
};

fn canonical(path: &Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .display()
        .to_string()
}

/// A run of `cudalate LIBCUDART [ARGS...]` traced by pid with `--cuda`: its outputs, the two
/// notices of the probes attached once the runtime's dlopen returned (sorted), xtrace's stderr
/// and the fixture's pid.
fn trace_late(args: &[&str], label: &str) -> (Outputs, Vec<String>, Vec<String>, u32) {
    let runtime = fixtures().cudaapp.with_file_name("libcudart.so.12");
    let mut argv = vec![runtime.to_str().unwrap()];
    argv.extend(args);
    let mut fixture = Fixture::spawn(&fixtures().cudalate, &argv);
    fixture.wait_ready();
    let tmp = TempDir::new(label);
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args!["-p", fixture.pid().to_string(), "--cuda", "-o", &out_dir]);
    let attached = xtrace.wait_attached();
    // Only the dlopen probe in libc: no CUDA library is mapped yet.
    assert!(attached.starts_with("xtrace: attached 1 probe "), "{attached}");
    fixture.send("go");
    assert_eq!(fixture.next_line(), "loaded");
    let mut notices = vec![
        xtrace.wait_stderr("xtrace: attached "),
        xtrace.wait_stderr("xtrace: attached "),
    ];
    notices.sort();
    fixture.go();
    assert!(fixture.wait().success(), "the fixture failed");
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    (Outputs::read(&out_dir), notices, finished.stderr, fixture.pid())
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn libraries_loaded_after_attach_are_traced() {
    if !require_bpf() {
        return;
    }
    let runtime = fixtures().cudaapp.with_file_name("libcudart.so.12");
    let driver = fixtures().cudaapp.with_file_name("libcuda.so.1");
    let (out, notices, stderr, pid) = trace_late(&[], "cuda-late");
    // What the stand-in driver lacks is said, as for a library mapped from the start.
    let lacks = format!(
        "xtrace: warning: {} lacks 2 CUDA functions, not traced: cuMemcpyPeer, cuEventSynchronize",
        canonical(&driver)
    );
    assert!(stderr.contains(&lacks), "{stderr:?}");
    // Every function of xtrace's CUDA table that the stand-ins export: 29 in cudart.c, 32 in
    // cudadrv.c.
    assert_eq!(
        notices,
        [
            format!(
                "xtrace: attached 29 CUDA probes to {}, loaded by pid {pid} after the start",
                canonical(&runtime)
            ),
            format!(
                "xtrace: attached 32 CUDA probes to {}, loaded by pid {pid} after the start",
                canonical(&driver)
            ),
        ]
    );
    for (name, calls) in [
        ("dlopen", 1),
        ("cudaMalloc", 3),
        ("cuMemAlloc_v2", 3),
        ("cudaMemcpy", 2),
        ("cudaDeviceSynchronize", 1),
        ("cuCtxSynchronize", 1),
        ("cudaFree", 3),
        ("cuMemFree_v2", 3),
    ] {
        assert_eq!(out.probe_count(name), calls, "{name}");
    }
    assert_eq!(out.probe("cudaMalloc")["target"], canonical(&runtime));
    assert_eq!(out.probe("cuMemAlloc_v2")["target"], canonical(&driver));
    let dlopen = out.spans_named("dlopen");
    assert_eq!(dlopen.len(), 1);
    assert_eq!(dlopen[0].args["arg0"], runtime.to_str().unwrap());
    // Functions of the kept probe ids that were never called are not listed.
    assert!(out.summary["probes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["target"] != ""));
    let cuda = &out.summary["cuda"];
    assert_eq!(
        cuda["memcpy"],
        json!([
            {"kind": "HtoD", "calls": 1, "bytes": 512},
            {"kind": "DtoH", "calls": 1, "bytes": 256},
        ])
    );
    assert_eq!(
        cuda["memory"],
        json!([{
            "pid": pid,
            "allocations": 3,
            "frees": 3,
            "live": [],
            "live_bytes": 0,
            "peak_bytes": 1024 + 2048 + 3072,
            "unknown_frees": 0,
        }])
    );
    assert_eq!(cuda["sync_calls"], 1);
}

/// Kernels whose host stubs lie in plugins loaded in turn at one address (libplugin_a.so,
/// libplugin_b.so, libplugin_a.so again, each closed after its launch) are named each by its own
/// plugin: the names found by address are found again after every dlopen (all three were named
/// plugin_a before).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn kernels_of_plugins_loaded_in_turn_at_one_address_keep_their_names() {
    if !require_bpf() {
        return;
    }
    let plugins = fixtures().cudaapp.with_file_name("");
    let (out, ..) = trace_late(&[plugins.to_str().unwrap()], "cuda-late-plugins");
    assert_eq!(
        out.summary["cuda"]["launches"],
        json!([{"kernel": "plugin_a", "count": 2}, {"kernel": "plugin_b", "count": 1}]),
        "{}",
        out.summary["cuda"]
    );
}
