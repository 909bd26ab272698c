//! The GPU device timeline on its other paths, on the real kernel with the stand-in CUDA runtime,
//! driver and CUPTI (see gpu_device.rs): a process started without the injection variable, a
//! Perfetto trace, a forked child (and one forked during a flush), a libcupti found beside the
//! runtime, records CUPTI drops and records the ring buffer has no room for, and perf-event
//! uprobes (kernels before 6.6); and `report` and `diff` of device time per kernel.

use std::collections::BTreeMap;

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, tool_library, Fixture},
    gpu::{counts, cupti_args, device_slices, expected, launched_app, per_name, stdin_app, traced_round},
    output::Outputs,
    require_bpf,
    run::Xtrace,
    TempDir, SAFETY_TIMEOUT,
};

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_process_started_without_the_injection_gets_one_notice_and_its_calls_traced() {
    if !require_bpf() {
        return;
    }
    let mut app = stdin_app(&[]);
    let tmp = TempDir::new("gpu-no-injection");
    let out_dir = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args!["-p", app.pid().to_string(), "--cuda", "-o", &out_dir]);
    xtrace.wait_attached();
    app.send("work 2");
    assert_eq!(app.next_line(), "done 2");
    xtrace.signal(libc::SIGINT);
    let finished = xtrace.wait();
    finished.assert_success();
    let notices: Vec<&String> = finished
        .stderr
        .iter()
        .filter(|l| l.contains("CUDA_INJECTION64_PATH"))
        .collect();
    assert_eq!(notices.len(), 1, "{:?}", finished.stderr);
    assert!(
        notices[0].contains(&format!(
            "--cuda: pid {} was not started with CUDA_INJECTION64_PATH set to libxtrace_tool.so",
            app.pid()
        )),
        "{}",
        notices[0]
    );
    let out = Outputs::read(&out_dir);
    assert_eq!(out.spans_named("cuLaunchKernel").len(), 6);
    assert!(device_slices(&out).is_empty());
    assert!(out.summary.get("gpu_device").is_none());
    app.send("quit");
    assert!(app.wait().success());
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn device_slices_are_in_a_perfetto_trace_too() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("gpu-perfetto");
    let out_dir = tmp.join("out");
    let [flag, lib] = cupti_args();
    let app = fixtures().gpuapp.display().to_string();
    let xtrace = Xtrace::spawn(args![
        "--cuda",
        "--trace-format",
        "perfetto",
        "-o",
        &out_dir,
        "--",
        app,
        flag,
        lib,
        "init",
        "wait-active",
        "work",
        "3",
        "sleep",
        "300"
    ]);
    xtrace.wait().assert_success();
    let decoded = xtrace_tests::perfetto::decode(&out_dir.join("trace.perfetto-trace"));
    let counts = xtrace_tests::perfetto::slice_counts(&decoded);
    for (name, n) in expected(3) {
        assert_eq!(counts.get(&name).copied(), Some(n as u64), "{name}: {counts:?}");
    }
    // A flow from each launch to its kernel, and from each copy's and memset's call to it.
    assert_eq!(
        decoded["flows"],
        serde_json::json!([
            {"from": "launch", "to": "memcpy DtoH", "count": 3},
            {"from": "launch", "to": "memcpy HtoD", "count": 3},
            {"from": "launch", "to": "memset", "count": 3},
            {"from": "launch", "to": "reduce_sum", "count": 6},
            {"from": "launch", "to": "vector_add", "count": 3},
        ])
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_forked_child_gets_its_own_watcher() {
    if !require_bpf() {
        return;
    }
    let tool = tool_library();
    let mut app = Fixture::spawn_with_env(
        &fixtures().gpuapp,
        &["init", "fork", "stdin"],
        &[("CUDA_INJECTION64_PATH", tool.as_path())],
    );
    app.wait_ready();
    // fork() copies only the calling thread: the library started the watcher again in the child.
    assert_eq!(app.next_line(), "child threads xtrace-gpu; CUPTI untouched");
    app.send("quit");
    assert!(app.wait().success());
}

/// A child forked while its parent's device timeline is on inherits the raised semaphore (a copy
/// of the parent's memory) but none of the tracer's probes, and a CUDA process's forked child
/// cannot use CUDA: its watcher waits for the semaphore to fall and rise again, and makes no
/// CUPTI call meanwhile. The parent's trace goes on, whole.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_child_forked_during_a_trace_does_not_switch_cupti_on() {
    if !require_bpf() {
        return;
    }
    let tool = tool_library();
    let mut app = stdin_app(&[("CUDA_INJECTION64_PATH", tool.as_path())]);
    let first = [("fork", "child threads xtrace-gpu; CUPTI untouched")];
    let (out, _) = traced_round(&mut app, (2, "gpu-fork-traced"), &["--cuda"], &first);
    assert_eq!(per_name(&device_slices(&out)), expected(2));
    app.send("quit");
    assert!(app.wait().success());
}

/// `xtrace --pid N` with no probe flags traces a CUDA process's calls by itself, and, when the
/// process was started with the tool library as its injection library, switches its device
/// timeline on too: no `--cuda` needed, and no notice.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_bare_pid_capture_switches_the_device_timeline_on_by_itself() {
    if !require_bpf() {
        return;
    }
    let tool = tool_library();
    let mut app = stdin_app(&[("CUDA_INJECTION64_PATH", tool.as_path())]);
    let (out, finished) = traced_round(&mut app, (2, "gpu-bare-pid"), &[], &[]);
    assert!(
        !finished
            .stderr
            .iter()
            .any(|l| l.contains("CUDA_INJECTION64_PATH")),
        "{:?}",
        finished.stderr
    );
    assert_eq!(per_name(&device_slices(&out)), expected(2));
    assert_eq!(out.spans_named("cuLaunchKernel").len(), 6);
    app.send("quit");
    assert!(app.wait().success());
}

/// A fork while the watcher is inside a flush, holding the library's state (the stand-in CUPTI
/// keeps it there until the fork is made): only the forking thread lives on in the child, so that
/// lock stays held there for ever. The child runs on and exits, without a watcher of its own
/// (one would wait for that lock for ever, and so would its exit handler); the parent's trace
/// goes on, whole.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_fork_during_a_flush_leaves_the_child_running_and_the_trace_whole() {
    if !require_bpf() {
        return;
    }
    let tool = tool_library();
    let mut app = stdin_app(&[("CUDA_INJECTION64_PATH", tool.as_path())]);
    let first = [("fork-in-flush", "child threads; CUPTI untouched")];
    let (out, _) = traced_round(&mut app, (2, "gpu-fork-in-flush"), &["--cuda"], &first);
    assert_eq!(per_name(&device_slices(&out)), expected(2));
    app.send("quit");
    assert!(app.wait().success());
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn without_a_loaded_libcupti_the_one_beside_the_runtime_is_used() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("gpu-beside");
    let out_dir = tmp.join("out");
    let app = fixtures().gpuapp.display().to_string();
    // No --cupti: the process maps no libcupti, and the stand-in's sits beside libcudart.so.12.
    let xtrace = Xtrace::spawn(args![
        "--cuda",
        "-o",
        &out_dir,
        "--",
        app,
        "init",
        "wait-active",
        "work",
        "2",
        "sleep",
        "300",
        "counts"
    ]);
    let finished = xtrace.wait();
    finished.assert_success();
    assert_eq!(per_name(&device_slices(&Outputs::read(&out_dir))), expected(2));
    let line = finished
        .stdout
        .lines()
        .find(|l| l.starts_with("counts "))
        .expect("counts");
    assert_eq!(counts(line)["cuptiSubscribe_v2"], 1);
}

/// CUDA 13's libcupti has `cuptiSubscribe_v2`, CUDA 12's only `cuptiSubscribe`: the tool library
/// subscribes with the first where it exists, and summary.json says which it used.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cuptis_subscribe_v2_is_used_where_the_libcupti_has_it() {
    if !require_bpf() {
        return;
    }
    for (no_v2, function, calls) in [
        ("0", "cuptiSubscribe_v2", (1, 0)),
        ("1", "cuptiSubscribe", (0, 1)),
    ] {
        let tmp = TempDir::new("gpu-subscribe");
        let out_dir = tmp.join("out");
        let [flag, lib] = cupti_args();
        let app = fixtures().gpuapp.display().to_string();
        let finished = Xtrace::spawn_with_env(
            args![
                "--cuda",
                "-o",
                &out_dir,
                "--",
                app,
                flag,
                lib,
                "init",
                "wait-active",
                "work",
                "2",
                "sleep",
                "300",
                "counts"
            ],
            &[("XTFAKE_CUPTI_NO_V2", no_v2)],
        )
        .wait();
        finished.assert_success();
        let out = Outputs::read(&out_dir);
        assert_eq!(per_name(&device_slices(&out)), expected(2), "{function}");
        assert_eq!(
            out.summary["gpu_device"]["subscribed_with"],
            serde_json::json!([function])
        );
        let line = finished
            .stdout
            .lines()
            .find(|l| l.starts_with("counts "))
            .expect("counts");
        let c = counts(line);
        assert_eq!(
            (c["cuptiSubscribe_v2"], c["cuptiSubscribe"], c["cuptiUnsubscribe"]),
            (calls.0, calls.1, 0),
            "{function}"
        );
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn records_cupti_drops_are_counted() {
    if !require_bpf() {
        return;
    }
    // Every third record: each round's second reduce_sum and its memset.
    let out = launched_app(
        "gpu-dropped",
        &[],
        &["init", "wait-active", "work", "5", "sleep", "300"],
        &[("XTFAKE_CUPTI_DROP_EVERY", "3")],
    );
    let mut expected = expected(5);
    expected.insert("reduce_sum".into(), 5);
    expected.remove("memset");
    assert_eq!(per_name(&device_slices(&out)), expected);
    assert_eq!(out.summary["gpu_device"]["records_dropped"]["by_cupti"], 10);
    assert!(out
        .summary_txt
        .contains("GPU device: 10 kernels, 10 copies, 0 memsets; 10 records dropped\n"));
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn records_the_ring_has_no_room_for_are_counted() {
    if !require_bpf() {
        return;
    }
    // A 16 KiB ring holds 100 records; the 3000 device activities of 500 rounds come in
    // hand-overs of 64, one right after another, at the watcher's next period, after the 3000
    // launch records (one per launch, copy and memset call) and with the two kernels' names, sent
    // once. CUPTI drops every third (each
    // round's second reduce_sum and its memset), and says how many in records of their own,
    // which may find no room either. The 2 rounds after a pause come when the ring has room.
    let out = launched_app(
        "gpu-ring-full",
        &["--buffer-size", "16K"],
        &[
            "init",
            "wait-active",
            "work",
            "500",
            "sleep",
            "300",
            "work",
            "2",
            "sleep",
            "300",
        ],
        &[("XTFAKE_CUPTI_DROP_EVERY", "3")],
    );
    let rounds = 502;
    let slices = per_name(&device_slices(&out));
    let dropped = &out.summary["gpu_device"]["records_dropped"];
    let by_kernel = dropped["by_kernel"].as_u64().expect("by_kernel");
    let by_cupti = dropped["by_cupti"].as_u64().expect("by_cupti");
    let others = dropped["other_records_by_kernel"].as_u64().expect("others");
    // How they split between the timeline and the counts depends on how fast xtrace reads; the
    // sum does not: each of the 3012 is a slice or counted, by CUPTI's count if that arrived,
    // else by the kernel program's.
    let on_timeline: usize = slices.values().sum();
    assert!(by_kernel > 0, "{dropped}");
    assert!(by_cupti <= 2 * rounds, "{dropped}");
    assert_eq!(
        on_timeline as u64 + by_kernel + by_cupti,
        6 * rounds,
        "{slices:?} {dropped}"
    );
    // A name piece the ring had no room for was kept in the kernel program's table: every
    // kernel on the timeline is named, those of the last 2 rounds at least.
    let count = |names: &[&str]| {
        names
            .iter()
            .map(|n| slices.get(*n).copied().unwrap_or(0))
            .sum::<usize>()
    };
    let kernels = count(&["vector_add", "reduce_sum"]);
    let copies = count(&["memcpy HtoD", "memcpy DtoH"]);
    let memsets = count(&["memset"]);
    assert_eq!(kernels + copies + memsets, on_timeline, "{slices:?}");
    assert!(
        slices["vector_add"] >= 2 && slices["reduce_sum"] >= 2,
        "{slices:?}"
    );
    assert!(
        kernels as u64 <= 2 * rounds && copies as u64 <= 2 * rounds && memsets == 0,
        "{slices:?}"
    );
    // The others: at most a launch record for each of the launches, copies and memsets, and the
    // subscription; the calls' API spans in the same ring are lost too.
    assert!(others <= 6 * rounds + 1, "{dropped}");
    assert_eq!(dropped["after_stop"], 0);
    assert!(out.summary["lost"]["ring_full"].as_u64().unwrap() >= by_kernel + others);
    let also = match others {
        0 => String::new(),
        n => format!(" (and {n} launch records, names or marks: raise --buffer-size)"),
    };
    let line = format!(
        "GPU device: {kernels} kernels, {copies} copies, {memsets} memsets; {} records \
         dropped{also}\n",
        by_cupti + by_kernel
    );
    assert!(out.summary_txt.contains(&line), "{line}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn perf_event_uprobes_carry_the_device_records_too() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("gpu-perf-event");
    let out_dir = tmp.join("out");
    let [flag, lib] = cupti_args();
    let app = fixtures().gpuapp.display().to_string();
    let before = Attachments::snapshot();
    // The kernels before 6.6's path: the probe's semaphore is raised by a perf-event uprobe.
    let xtrace = Xtrace::spawn_with_env(
        args![
            "--cuda",
            "-o",
            &out_dir,
            "--",
            app,
            flag,
            lib,
            "init",
            "wait-active",
            "work",
            "2",
            "sleep",
            "300"
        ],
        &[("XTRACE_UPROBE_ATTACH", "perf_event")],
    );
    let finished = xtrace.wait();
    finished.assert_success();
    // Perf-event uprobes are removed by a helper in the background after xtrace exits.
    finished.wait_background_removal(SAFETY_TIMEOUT);
    before.assert_none_left();
    assert!(
        finished.stderr.iter().any(|l| l.contains("uprobes, perf_event)")),
        "{:?}",
        finished.stderr
    );
    assert_eq!(per_name(&device_slices(&Outputs::read(&out_dir))), expected(2));
}

/// `report --format json`'s probes of kind `gpu` against the capture's own summary.json: each
/// kernel's count, total and mean exactly, its p50 and p99 within the histogram's 1/128; each copy
/// direction's and the memsets' count and total exactly.
fn assert_report_is_the_summarys_device_time(capture: &std::path::Path) {
    let report = xtrace_tests::captures::xtrace(args!["report", capture, "--format", "json"]);
    assert_eq!(report.code, Some(0), "{}", report.stderr);
    let report: serde_json::Value = serde_json::from_str(&report.stdout).expect("report's JSON");
    let gpu: BTreeMap<&str, &serde_json::Value> = report["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .filter(|p| p["kind"] == "gpu")
        .map(|p| (p["name"].as_str().unwrap(), p))
        .collect();
    let summary = Outputs::read(capture).summary;
    let device = &summary["gpu_device"];
    let ns = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    let kernels = device["top_kernels"].as_array().expect("top_kernels");
    for kernel in kernels {
        let name = kernel["name"].as_str().unwrap();
        let probe = gpu[name];
        for key in ["count", "total_ns", "mean_ns"] {
            assert_eq!(probe[key], kernel[key], "{name} {key}: {probe} {kernel}");
        }
        for key in ["p50_ns", "p99_ns"] {
            let (got, exact) = (ns(probe, key), ns(kernel, key));
            assert!(
                got.abs_diff(exact) <= exact / 128,
                "{name} {key}: {probe} {kernel}"
            );
        }
    }
    let copies = device["copies"].as_array().expect("copies");
    for copy in copies {
        let name = format!("memcpy {}", copy["kind"].as_str().unwrap());
        assert_eq!(
            (&gpu[name.as_str()]["count"], &gpu[name.as_str()]["total_ns"]),
            (&copy["count"], &copy["total_ns"]),
            "{name}"
        );
    }
    let memsets = &device["memsets"];
    assert_eq!(
        (&gpu["memset"]["count"], &gpu["memset"]["total_ns"]),
        (&memsets["count"], &memsets["total_ns"])
    );
    assert_eq!(gpu.len(), kernels.len() + copies.len() + 1, "{gpu:?}");
}

/// `report` lists each kernel's device time as a probe of kind `gpu`, and `diff` compares it
/// kernel by kernel: here 5 rounds of work, then 8.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn report_and_diff_compare_device_time_per_kernel() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("gpu-report");
    let [flag, lib] = cupti_args();
    let app = fixtures().gpuapp.display().to_string();
    let record = |dir: &std::path::Path, rounds: &str| {
        let flags = args![
            "-q",
            "--cuda",
            "-o",
            dir,
            "--",
            &app,
            &flag,
            &lib,
            "init",
            "wait-active",
            "work",
            rounds
        ];
        Xtrace::spawn(flags).wait().assert_success();
    };
    let (base, new) = (tmp.join("base"), tmp.join("new"));
    record(&base, "5");
    record(&new, "8");
    let report = xtrace_tests::captures::xtrace(args!["report", &base, "--top", "50"]);
    assert_eq!(report.code, Some(0), "{}", report.stderr);
    let row = |text: &str, name: &str| -> Vec<String> {
        let line = text.lines().find(|l| l.split_whitespace().next() == Some(name));
        line.unwrap_or_else(|| panic!("no {name} row:\n{text}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    let kernel = row(&report.stdout, "vector_add");
    assert_eq!(kernel[1..3], ["gpu", "5"], "{kernel:?}");
    assert_eq!(row(&report.stdout, "reduce_sum")[1..3], ["gpu", "10"]);
    assert_report_is_the_summarys_device_time(&base);
    let diff = xtrace_tests::captures::xtrace(args!["diff", &base, &new, "--min-count", "1000"]);
    assert_eq!(diff.code, Some(0), "{}", diff.stdout);
    // PROBE, BASE N, NEW N, ...
    assert_eq!(row(&diff.stdout, "vector_add")[1..3], ["5", "8"]);
    assert_eq!(row(&diff.stdout, "reduce_sum")[1..3], ["10", "16"]);
}
