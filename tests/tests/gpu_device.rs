//! The GPU device timeline (`--cuda` with the tool library as CUDA's injection library) on the real
//! kernel, without a GPU: fixture `gpuapp` (tests/fixtures/gpuapp.c) launches kernels and makes
//! copies and memsets with known counts through the stand-in runtime and driver (cudart.c,
//! cudadrv.c), whose `cuInit` loads `CUDA_INJECTION64_PATH` as NVIDIA's driver does; the stand-in
//! `libcupti.so.12` (cupti.c) counts every CUPTI call and turns the driver's work into activity
//! records with the correlation ids of their launches. gpuapp loads it at start, as PyTorch maps
//! its libcupti, and prints its counts on demand.

use std::collections::BTreeMap;

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, tool_library},
    gpu::{
        assert_linked_inside_the_capture, attach_round, counts, cupti_args, device_slices, expected,
        one_call_then_counts, per_name, stdin_app, thread_names,
    },
    output::{Outputs, Span},
    require_bpf,
    run::Xtrace,
    TempDir,
};

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn untraced_the_injection_makes_no_cupti_call() {
    if !require_bpf() {
        return;
    }
    let tool = tool_library();
    let mut app = stdin_app(&[("CUDA_INJECTION64_PATH", tool.as_path())]);
    app.send("work 3");
    assert_eq!(app.next_line(), "done 3");
    app.send("sleep 300");
    app.send("counts");
    let counts = counts(&app.next_line());
    // The driver ran InitializeInjection: its watcher thread is there (named once it ran), and
    // waits.
    assert_eq!(thread_names(app.pid()), ["gpuapp", "xtrace-gpu"]);
    assert!(
        counts.len() == 18 && counts.values().all(|&n| n == 0),
        "{counts:?}"
    );
    app.send("quit");
    assert!(app.wait().success());
}

/// Each kernel ran inside its launch call, on the launching thread's correlation, with the
/// launch's grid, block and shared memory, on its stream's track; a flow arrow goes to each
/// kernel, copy and memset from the call that made it ([`assert_each_flows_from_its_call`]).
fn assert_kernels_inside_their_launches(out: &Outputs, slices: &[Span]) {
    assert_kernels_within_their_launches(out, slices, 0);
}

/// As [`assert_kernels_inside_their_launches`], to within `slack_ns` on either side.
fn assert_kernels_within_their_launches(out: &Outputs, slices: &[Span], slack_ns: i64) {
    let launches = out.spans_named("cuLaunchKernel");
    let kernels: Vec<&Span> = slices.iter().filter(|s| !s.name.starts_with("mem")).collect();
    assert_eq!((launches.len(), kernels.len()), (15, 15));
    for kernel in kernels {
        assert_eq!(kernel.pid, launches[0].pid);
        let (grid, block, shared, stream) = match kernel.name.as_str() {
            "vector_add" => ([4, 1, 1], [64, 1, 1], 128, 7),
            _ => ([2, 2, 1], [32, 2, 1], 0, 14),
        };
        assert_eq!(kernel.args["grid"], serde_json::json!(grid));
        assert_eq!(kernel.args["block"], serde_json::json!(block));
        assert_eq!(kernel.args["shared_memory"], shared);
        assert_eq!(kernel.args["registers"], 32);
        assert_eq!(kernel.args["stream"], stream);
    }
    assert_each_flows_from_its_call(out, slices, slack_ns);
}

/// One flow arrow per kernel, copy and memset of `slices`: from the call that made it (a launch,
/// a cudaMemcpy, a cudaMemset: the k-th of each kind in time is the k-th call's), on the calling
/// thread as the call began, to the slice, which lies within the call (to within `slack_ns`).
fn assert_each_flows_from_its_call(out: &Outputs, slices: &[Span], slack_ns: i64) {
    let call_of = |slice: &Span| match slice.name.as_str() {
        "memset" => "cudaMemset",
        name if name.starts_with("memcpy") => "cudaMemcpy",
        _ => "cuLaunchKernel",
    };
    let flows =
        |ph: &str| -> Vec<&serde_json::Value> { out.events.iter().filter(|e| e["ph"] == ph).collect() };
    let (starts, ends) = (flows("s"), flows("f"));
    assert_eq!((starts.len(), ends.len()), (slices.len(), slices.len()));
    for name in ["cuLaunchKernel", "cudaMemcpy", "cudaMemset"] {
        let mut calls = out.spans_named(name);
        calls.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        let made: Vec<&Span> = slices.iter().filter(|s| call_of(s) == name).collect();
        assert_eq!(made.len(), calls.len(), "{name}");
        for (slice, call) in made.iter().zip(&calls) {
            assert!(
                call.start_ns() - slack_ns <= slice.start_ns() && slice.end_ns() <= call.end_ns() + slack_ns,
                "{slice:?} outside {call:?}"
            );
            assert_eq!(slice.args["launch_tid"], call.tid);
            let end = ends
                .iter()
                .find(|e| {
                    e["tid"] == slice.tid
                        && xtrace_tests::output::us_to_ns(e["ts"].as_f64().unwrap()) == slice.start_ns()
                })
                .unwrap_or_else(|| panic!("no flow ends at {slice:?}"));
            assert_eq!(end["bp"], "e");
            let start = starts
                .iter()
                .find(|s| s["id"] == end["id"])
                .expect("its flow's start");
            let at = xtrace_tests::output::us_to_ns(start["ts"].as_f64().unwrap());
            assert!(
                start["tid"] == call.tid && call.start_ns() <= at && at <= call.end_ns(),
                "{start}"
            );
        }
    }
}

/// The summary's idle time is the span less the busy time, with its longest gaps within it,
/// longest first; every kernel's launch was seen, so each has a queueing delay, within its launch
/// call (the stand-in driver starts the kernel inside it); each copy's bandwidth is its bytes over
/// its time.
fn assert_gaps_queueing_and_bandwidth(out: &Outputs) {
    let gpu = &out.summary["gpu_device"];
    let busy = &gpu["gpus"][0];
    let ns = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert_eq!(
        ns(busy, "idle_ns"),
        ns(busy, "span_ns") - ns(busy, "busy_ns"),
        "{busy}"
    );
    let gaps: Vec<u64> = busy["longest_gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| ns(g, "dur_ns"))
        .collect();
    assert!(
        !gaps.is_empty() && gaps.windows(2).all(|w| w[0] >= w[1]),
        "{gaps:?}"
    );
    assert!(gaps.iter().sum::<u64>() <= ns(busy, "idle_ns"), "{busy}");
    assert_queueing_within_the_launches(out);
    for copy in gpu["copies"].as_array().unwrap() {
        let expected = ns(copy, "bytes") as u128 * 1_000_000_000 / ns(copy, "total_ns").max(1) as u128;
        assert_eq!(u128::from(ns(copy, "bandwidth_bytes_per_s")), expected, "{copy}");
    }
    assert!(
        out.summary_txt.contains("  launch to device start: p50 "),
        "{}",
        out.summary_txt
    );
}

/// The queueing delay of each kernel runs from its launch's API-enter callback to its start on
/// the device; the stand-in driver runs both inside its `cuLaunchKernel`, one launch after
/// another, so the k-th kernel to start is the k-th call's, and its delay is at most its start
/// less the call's. summary.json's distribution (exact count, total, min and max; percentiles
/// within 1/128) is held to those bounds, one nearest-rank percentile at a time.
fn assert_queueing_within_the_launches(out: &Outputs) {
    let queue = &out.summary["gpu_device"]["queue_delay"];
    let ns = |k: &str| queue[k].as_u64().unwrap_or_else(|| panic!("{k} in {queue}"));
    let mut kernels: Vec<Span> = device_slices(out)
        .into_iter()
        .filter(|s| !s.name.starts_with("mem"))
        .collect();
    kernels.sort_by_key(Span::start_ns);
    let mut launches = out.spans_named("cuLaunchKernel");
    launches.sort_by_key(Span::start_ns);
    assert_eq!((kernels.len(), launches.len()), (15, 15));
    let mut most: Vec<u64> = kernels
        .iter()
        .zip(&launches)
        .map(|(k, l)| {
            assert!(
                k.start_ns() >= l.start_ns() && k.start_ns() <= l.end_ns(),
                "{k:?} {l:?}"
            );
            (k.start_ns() - l.start_ns()) as u64
        })
        .collect();
    most.sort_unstable();
    assert_eq!(ns("count"), 15, "{queue}");
    assert!(
        ns("total_ns") <= most.iter().sum::<u64>(),
        "{queue}: at most {most:?}"
    );
    assert!(
        ns("min_ns") <= most[0] && ns("max_ns") <= most[14],
        "{queue}: at most {most:?}"
    );
    for (p, key) in [(50.0, "p50_ns"), (90.0, "p90_ns"), (99.0, "p99_ns")] {
        let bound = nearest_rank(&most, p);
        assert!(ns(key) <= bound + bound / 128, "{queue}: {key} over {bound}");
    }
}

/// The nearest-rank `p`-th percentile of ascending `sorted`.
fn nearest_rank(sorted: &[u64], p: f64) -> u64 {
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// summary.json's top kernels, each computed anew from its slices in trace.json (durations to
/// the nanosecond): count, total, mean and the nearest-rank p50 and p99, exactly.
fn assert_top_kernels_from_slices(out: &Outputs) {
    let mut durations: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for s in device_slices(out).iter().filter(|s| !s.name.starts_with("mem")) {
        durations
            .entry(s.name.clone())
            .or_default()
            .push(s.dur_ns() as u64);
    }
    let top = out.summary["gpu_device"]["top_kernels"].as_array().unwrap();
    assert_eq!(top.len(), durations.len(), "{top:?}");
    for kernel in top {
        let name = kernel["name"].as_str().unwrap();
        let mut d = durations[name].clone();
        d.sort_unstable();
        let total: u64 = d.iter().sum();
        let expected = serde_json::json!({
            "name": name,
            "count": d.len(),
            "total_ns": total,
            "mean_ns": total / d.len() as u64,
            "p50_ns": nearest_rank(&d, 50.0),
            "p99_ns": nearest_rank(&d, 99.0),
        });
        assert_eq!(kernel, &expected, "{name}: {d:?}");
    }
}

/// gpuapp launched under `--cuda` (5 rounds of work), with `env` added to its environment.
fn record_launched(label: &str, env: &[(&str, &str)]) -> (Outputs, xtrace_tests::run::Finished) {
    let tmp = TempDir::new(label);
    let out_dir = tmp.join("out");
    let [flag, lib] = cupti_args();
    let before = Attachments::snapshot();
    let app = fixtures().gpuapp.display().to_string();
    let args = args![
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
        "5",
        "sleep",
        "300",
        "counts"
    ];
    let finished = Xtrace::spawn_with_env(args, env).wait();
    finished.assert_success();
    before.assert_none_left();
    (Outputs::read(&out_dir), finished)
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_launched_command_gets_every_kernel_copy_and_memset_inside_its_launch() {
    if !require_bpf() {
        return;
    }
    let (out, finished) = record_launched("gpu-launch", &[]);
    let slices = device_slices(&out);
    assert_eq!(per_name(&slices), expected(5));
    assert_kernels_inside_their_launches(&out, &slices);
    let bytes: Vec<u64> = slices
        .iter()
        .filter(|s| s.name == "memcpy HtoD")
        .map(|s| s.args["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(bytes, [4096; 5]);
    // Each copy's achieved bandwidth: its bytes over its time on the device (the slice's
    // duration, in microseconds to the nanosecond).
    for copy in slices.iter().filter(|s| s.name.starts_with("memcpy ")) {
        let ns = (copy.dur * 1000.0).round() as u128;
        let bytes = u128::from(copy.args["bytes"].as_u64().unwrap());
        assert_eq!(
            u128::from(copy.args["bandwidth_bytes_per_s"].as_u64().unwrap()),
            bytes * 1_000_000_000 / ns,
            "{copy:?}"
        );
    }
    let gpu = &out.summary["gpu_device"];
    let top: Vec<(&str, u64)> = gpu["top_kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["name"].as_str().unwrap(), k["count"].as_u64().unwrap()))
        .collect::<BTreeMap<_, _>>()
        .into_iter()
        .collect();
    assert_eq!(top, [("reduce_sum", 10), ("vector_add", 5)]);
    assert_top_kernels_from_slices(&out);
    assert_eq!(gpu["gpus"][0]["kernels"], 15);
    assert_gaps_queueing_and_bandwidth(&out);
    assert_eq!(gpu["memsets"]["bytes"], 5 * 1024);
    assert_eq!(
        gpu["records_dropped"],
        serde_json::json!({"by_cupti": 0, "by_kernel": 0, "other_records_by_kernel": 0, "after_stop": 0})
    );
    assert!(
        out.summary_txt
            .contains("GPU device: 15 kernels, 10 copies, 5 memsets; 0 records dropped\n"),
        "{}",
        out.summary_txt
    );
    let tracks: Vec<&str> = out
        .events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .filter(|e| e["tid"].as_u64().is_some_and(|t| t >= 1 << 30))
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert_eq!(tracks, ["GPU 0 stream 7", "GPU 0 stream 14"]);
    let line = finished
        .stdout
        .lines()
        .find(|l| l.starts_with("counts "))
        .expect("counts");
    let c = counts(line);
    // CUDA 13's cuptiSubscribe_v2, which the stand-in has unless told otherwise.
    assert_eq!(
        (
            c["cuptiSubscribe_v2"],
            c["cuptiSubscribe"],
            c["cuptiActivityEnable"],
            c["records"]
        ),
        (1, 0, 3, 30)
    );
    assert_eq!(gpu["subscribed_with"], serde_json::json!(["cuptiSubscribe_v2"]));
    assert_eq!(c["cuptiActivityRegisterTimestampCallback"], 1);
    // Eight reads of its own clock, the narrowest bracket kept, once per CUPTI session.
    assert_eq!(c["cuptiGetTimestamp"], 8);
    assert_eq!(
        gpu["clock"],
        serde_json::json!({"used": "monotonic", "moved": 0, "offset_ns": 0, "why": ""})
    );
}

/// Device records on CUPTI's own clock (some CUPTI versions keep a context made before the
/// subscription there): ahead of CLOCK_MONOTONIC (CLOCK_REALTIME) they end after their buffer was
/// read; 3 s behind it, the first kernel begins before its launch. Either way the tool library
/// moves all 30 by the offset it measured when it subscribed, every kernel then runs inside its
/// launch (to within 1 ms: the offset is right to within half the bracket of the host's clock
/// reads around CUPTI's, microseconds, more when the reading thread is preempted), and the
/// summaries say so.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn device_records_on_cuptis_own_clock_are_moved_to_the_traces() {
    if !require_bpf() {
        return;
    }
    // CLOCK_REALTIME's lead over CLOCK_MONOTONIC: read before and after each recording, as
    // NTP may be slewing it meanwhile (milliseconds a second, seen on a VM after boot).
    let realtime_ahead = || {
        let clock = |id| {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: writes one timespec.
            unsafe { libc::clock_gettime(id, &mut t) };
            t.tv_sec * 1_000_000_000 + t.tv_nsec
        };
        clock(libc::CLOCK_REALTIME) - clock(libc::CLOCK_MONOTONIC)
    };
    for (own, lead, why) in [
        ("realtime", None, "ends after it was read"),
        ("-3000000000", Some(-3_000_000_000), "begins before its call"),
    ] {
        let before = lead.unwrap_or_else(realtime_ahead);
        let (out, _) = record_launched("gpu-clock", &[("XTFAKE_CUPTI_OWN_CLOCK", own)]);
        let after = lead.unwrap_or_else(realtime_ahead);
        let slices = device_slices(&out);
        assert_eq!(per_name(&slices), expected(5), "{own}");
        assert_kernels_within_their_launches(&out, &slices, 1_000_000);
        let clock = &out.summary["gpu_device"]["clock"];
        assert_eq!(
            (&clock["used"], &clock["moved"], &clock["why"]),
            (&"offset".into(), &30.into(), &why.into()),
            "{own}"
        );
        // The offset undoes the clock's lead when the tool library measured it, to within the
        // bracket of its measurement.
        let offset = clock["offset_ns"].as_i64().unwrap();
        let bracket = before.min(after) - 1_000_000..=before.max(after) + 1_000_000;
        assert!(
            bracket.contains(&-offset),
            "{own}: offset {offset}, ahead {before} before and {after} after"
        );
        assert_eq!(
            out.summary["gpu_device"]["records_dropped"]["after_stop"], 0,
            "{own}"
        );
        assert!(
            out.summary_txt
                .contains(&format!("  30 device records came on CUPTI's own clock ({why})")),
            "{}",
            out.summary_txt
        );
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn attach_then_detach_finalizes_cupti_and_attaching_again_works() {
    if !require_bpf() {
        return;
    }
    let tool = tool_library();
    let mut app = stdin_app(&[("CUDA_INJECTION64_PATH", tool.as_path())]);
    // Work before the attach is not recorded.
    app.send("work 2");
    assert_eq!(app.next_line(), "done 2");
    // Mid-run: each kernel linked to its launch, none from the work before the attach.
    let (first, _) = attach_round(&mut app, 4, "gpu-attach-1", &[]);
    let slices = device_slices(&first);
    assert_eq!(per_name(&slices), expected(4));
    assert_linked_inside_the_capture(&first, &slices, 12, 0);
    // Once xtrace left, the next launch's API-exit callback unsubscribes and finalizes.
    app.send("sleep 300");
    let c = one_call_then_counts(&mut app);
    assert_eq!(
        (
            c["cuptiSubscribe_v2"],
            c["cuptiActivityDisable"],
            c["cuptiUnsubscribe"],
            c["cuptiFinalize"]
        ),
        (1, 3, 1, 1),
        "{c:?}"
    );
    let records_after_first = c["records"];
    assert_eq!(records_after_first, 4 * 6);
    // A second attach subscribes again, with the callbacks registered anew after the finalize.
    let (second, _) = attach_round(&mut app, 3, "gpu-attach-2", &[]);
    let slices = device_slices(&second);
    assert_eq!(per_name(&slices), expected(3));
    // Nothing from the round between the two traces.
    assert_linked_inside_the_capture(&second, &slices, 9, 0);
    app.send("counts");
    let c = counts(&app.next_line());
    assert_eq!(
        (
            c["cuptiSubscribe_v2"],
            c["cuptiActivityRegisterTimestampCallback"]
        ),
        (2, 2),
        "{c:?}"
    );
    assert_eq!(c["records"], records_after_first + 3 * 6);
    app.send("quit");
    assert!(app.wait().success());
}

/// CUPTI refuses, as when another profiler holds it: through `cuptiSubscribe_v2` (CUDA 13) the
/// warning names the holder CUPTI gave, through `cuptiSubscribe` (CUDA 12) it cannot.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cupti_refusing_the_subscription_is_one_warning_and_host_tracing_goes_on() {
    if !require_bpf() {
        return;
    }
    for (no_v2, holder, subscribed) in [
        ("0", "CUPTI for stand-in profiler", (1, 0)),
        ("1", "Nsight Systems, torch.profiler", (0, 1)),
    ] {
        let tmp = TempDir::new("gpu-refused");
        let out_dir = tmp.join("out");
        let [flag, lib] = cupti_args();
        let app = fixtures().gpuapp.display().to_string();
        let xtrace = Xtrace::spawn_with_env(
            args![
                "--cuda", "-o", &out_dir, "--", app, flag, lib, "init", "sleep", "400", "work", "2", "counts"
            ],
            &[("XTFAKE_CUPTI_REFUSE", "1"), ("XTFAKE_CUPTI_NO_V2", no_v2)],
        );
        let finished = xtrace.wait();
        finished.assert_success();
        let out = Outputs::read(&out_dir);
        let warnings: Vec<&String> = finished
            .stderr
            .iter()
            .filter(|l| l.contains("GPU device timeline"))
            .collect();
        assert_eq!(warnings.len(), 1, "{:?}", finished.stderr);
        let expected = format!(
            ": GPU device timeline off: CUPTI refused the subscription \
             (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED): another profiler ({holder}) holds it; \
             host-side tracing goes on"
        );
        assert!(
            warnings[0].starts_with("xtrace: warning: pid ") && warnings[0].ends_with(&expected),
            "{}",
            warnings[0]
        );
        assert!(device_slices(&out).is_empty());
        assert_eq!(out.spans_named("cuLaunchKernel").len(), 6);
        assert_eq!(out.spans_named("cudaMemcpy").len(), 4);
        assert_eq!(
            out.summary["gpu_device"]["notices"].as_array().map(Vec::len),
            Some(1)
        );
        assert_eq!(
            out.summary["gpu_device"]["subscribed_with"],
            serde_json::json!([])
        );
        let line = finished
            .stdout
            .lines()
            .find(|l| l.starts_with("counts "))
            .expect("counts");
        let c = counts(line);
        assert_eq!(
            (
                (c["cuptiSubscribe_v2"], c["cuptiSubscribe"]),
                c["cuptiActivityEnable"],
                c["records"]
            ),
            (subscribed, 0, 0),
            "XTFAKE_CUPTI_NO_V2={no_v2}"
        );
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_libcupti_outside_the_supported_versions_is_named_in_one_warning() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("gpu-version");
    let out_dir = tmp.join("out");
    let [flag, lib] = cupti_args();
    let app = fixtures().gpuapp.display().to_string();
    let xtrace = Xtrace::spawn_with_env(
        args!["--cuda", "-o", &out_dir, "--", app, flag, lib, "init", "sleep", "400", "work", "1", "counts"],
        &[("XTFAKE_CUPTI_VERSION", "17")],
    );
    let finished = xtrace.wait();
    finished.assert_success();
    let warnings: Vec<&String> = finished
        .stderr
        .iter()
        .filter(|l| l.contains("GPU device timeline"))
        .collect();
    assert_eq!(warnings.len(), 1, "{:?}", finished.stderr);
    let expected = format!(
        ": GPU device timeline off: {} has CUPTI API version 17, outside the supported 18-26 (CUDA 12) \
         and 130000-139999 (CUDA 13)",
        fixtures().libcupti.display()
    );
    assert!(warnings[0].ends_with(&expected), "{}", warnings[0]);
    assert!(device_slices(&Outputs::read(&out_dir)).is_empty());
    let line = finished
        .stdout
        .lines()
        .find(|l| l.starts_with("counts "))
        .expect("counts");
    let c = counts(line);
    // Only the version was asked.
    assert_eq!(
        c.iter().filter(|(_, &n)| n > 0).collect::<Vec<_>>(),
        [(&"cuptiGetVersion".to_owned(), &1)]
    );
}
