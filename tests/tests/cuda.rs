//! `--cuda` on the real kernel, without a GPU: fixture `cudaapp` (tests/fixtures/cudaapp.cpp)
//! calls the stand-in `libcudart.so.12` / `libcuda.so.1` (cudart.c, cudadrv.c), which export the
//! real libraries' C symbols and signatures, a known number of times with known sizes.

use serde_json::{json, Value};
use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::{Outputs, Span},
    require_bpf,
    run::{run_error, trace_fixture_with, Finished, Xtrace},
    TempDir,
};

/// Traces a fresh `cudaapp` by pid with `flags`.
fn trace_by_pid(flags: Vec<std::ffi::OsString>, label: &str) -> (Outputs, Finished, TempDir) {
    let mut fixture = Fixture::spawn(&fixtures().cudaapp, &[]);
    fixture.wait_ready();
    let tmp = TempDir::new(label);
    let out = tmp.join("out");
    let finished = trace_fixture_with(&mut fixture, flags, &[], &out);
    (Outputs::read(&out), finished, tmp)
}

fn cuda(out: &Outputs) -> &Value {
    &out.summary["cuda"]
}

/// The kernel of cudaapp.cpp with a 95-byte mangled name, as c++filt writes it.
const ELEMENTWISE: &str = "void nn::detail::vectorized_elementwise_kernel<4, nn::detail::AddFunctor<float>, std::array<char*, 2ul> >(int, nn::detail::AddFunctor<float>, std::array<char*, 2ul>)";

/// Whether `kernel` is `PREFIX` and a hex number then `SUFFIX`.
fn is_handle(kernel: &str, prefix: &str, suffix: &str) -> bool {
    kernel
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_suffix(suffix))
        .is_some_and(|hex| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The one kernel name of `kernels` that is `PREFIX`, a hex number, `SUFFIX`.
fn one_handle<'k>(kernels: &'k [Value], prefix: &str, suffix: &str) -> &'k str {
    let named: Vec<&str> = kernels
        .iter()
        .filter_map(|k| k["kernel"].as_str())
        .filter(|k| is_handle(k, prefix, suffix))
        .collect();
    assert_eq!(named.len(), 1, "{prefix}…{suffix} in {kernels:?}");
    named[0]
}

/// The launches, copies and errors cudaapp.cpp makes after "ready", whatever the process; what it
/// did before "ready" (a launch of `nn::scale`, the lookup of `early()`) was traced with a
/// launched command, not by pid.
fn assert_launches_and_copies(out: &Outputs, before_ready: bool) {
    let cuda = cuda(out);
    let kernels = cuda["launches"].as_array().unwrap();
    // By pid, early()'s lookup was not seen: its handle is shown with the module that launched it.
    let early = match before_ready {
        true => "early()",
        false => one_handle(kernels, "CUfunction 0x", " (cudaapp)"),
    };
    // A handle of the runtime's that nothing names; launched by libcudart's __cudaLaunchKernel,
    // which is no module to show.
    let unnamed = one_handle(kernels, "cudaKernel_t 0x", "");
    let mut expected = vec![
        json!({"kernel": "nn::scale(float*, int)", "count": if before_ready { 4 } else { 3 }}),
        json!({"kernel": early, "count": 1}),
        json!({"kernel": unnamed, "count": 1}),
        json!({"kernel": "nn::relu(float*, int)", "count": 5}),
        json!({"kernel": "vecAdd(float*, float*, float*, int)", "count": 5}),
        json!({"kernel": "void nn::gemm<float>(float const*, float const*, float*, int)", "count": 3}),
        json!({"kernel": "axpy(float, float*, float*)", "count": 2}),
        json!({"kernel": "cold(float*)", "count": 2}),
        json!({"kernel": "nn::softmax(float*, int)", "count": 2}),
        json!({"kernel": "nn::reduce(float*, int)", "count": 1}),
        json!({"kernel": ELEMENTWISE, "count": 1}),
    ];
    // Most launched first, then by name.
    expected.sort_by_key(|k| (std::cmp::Reverse(k["count"].as_u64()), k["kernel"].to_string()));
    assert_eq!(cuda["launches"], Value::Array(expected), "{cuda:#}");
    assert_eq!(
        cuda["memcpy"],
        json!([
            {"kind": "HtoD", "calls": 5, "bytes": 13500},
            {"kind": "DtoH", "calls": 2, "bytes": 4096},
            {"kind": "DtoD", "calls": 1, "bytes": 1000},
        ])
    );
    // Each memset counted once, by its outermost call (the stand-in runtime calls the driver).
    assert_eq!(
        (&cuda["memset_calls"], &cuda["memset_bytes"]),
        (&json!(5), &json!(4096 + 3000 + 700 + 512 * 4 + 100 * 2))
    );
    assert_eq!(cuda["sync_calls"], 3);
    assert_eq!(cuda["graph_launches"], 1);
    assert_eq!(cuda["errors"], json!({"cuMemAlloc_v2": 1, "cudaMalloc": 1}));
    assert_eq!(cuda["calls_without_args"], 0);
}

fn launches<'a>(spans: &'a [Span], kernel: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.args["kernel"] == kernel).collect()
}

/// The byte values of trace.json's counter track `name`, in order; its times never go back
/// (a viewer draws the track in time order).
fn counter_track(out: &Outputs, name: &str) -> Vec<u64> {
    let track: Vec<&Value> = out
        .events
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == name)
        .collect();
    let times: Vec<f64> = track.iter().map(|e| e["ts"].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{name}: {times:?}");
    track
        .iter()
        .map(|e| e["args"]["bytes"].as_u64().unwrap_or(u64::MAX))
        .collect()
}

/// [`cuda_calls_by_pid_exactly`]: runtime calls that call the driver show both spans; each
/// operation is counted once.
fn assert_call_counts_by_pid(out: &Outputs) {
    for (name, count) in [
        ("cudaMalloc", 4),
        ("cuMemAlloc_v2", 5),
        ("cudaMallocPitch", 1),
        ("cudaMalloc3D", 1),
        ("cuMemAllocPitch_v2", 3),
        ("cudaFree", 4),
        ("cuMemFree_v2", 5),
        ("cudaHostAlloc", 1),
        ("cuMemHostAlloc", 1),
        ("cudaMallocHost", 1),
        ("cuMemAllocHost_v2", 3),
        ("cudaFreeHost", 1),
        ("cuMemFreeHost", 2),
        ("cudaLaunchKernel", 15),
        ("cudaLaunchKernelExC", 2),
        ("cudaLaunchCooperativeKernel", 1),
        ("cuLaunchKernel", 11),
        ("cuModuleGetFunction", 2),
        ("cuLibraryGetKernel", 2),
        ("cuLaunchCooperativeKernel", 1),
        ("cuLaunchKernelEx", 2),
        ("cudaMemcpy", 5),
        ("cuMemcpyHtoD_v2", 11),
        ("cudaMemcpy2D", 1),
        // cudaMemset, cudaMemsetAsync and each of cudaMemset2D's 7 rows.
        ("cudaMemset", 9),
        ("cudaMemsetAsync", 1),
        ("cudaMemset2D", 1),
        ("cuMemsetD8_v2", 9),
        ("cuMemsetD32_v2", 1),
        ("cuMemsetD16Async", 1),
        ("cuMemsetD16_v2", 1),
        ("cudaDeviceSynchronize", 2),
        ("cuCtxSynchronize", 2),
        ("cudaGraphLaunch", 1),
    ] {
        assert_eq!(out.probe_count(name), count, "{name}");
    }
}

/// [`cuda_calls_by_pid_exactly`]: the device memory and pinned host memory accounts, their
/// counter tracks, and the time blocked in synchronizations.
fn assert_memory_accounts_by_pid(out: &Outputs) {
    let memory = &cuda(out)["memory"][0];
    assert_eq!(memory["peak_bytes"], 1_063_864);
    assert_eq!(memory["live_bytes"], 1_051_576);
    assert_eq!(memory["allocations"], 7);
    assert_eq!(memory["frees"], 5);
    assert_eq!(memory["unknown_frees"], 0);
    let live: Vec<(u64, &str)> = memory["live"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["bytes"].as_u64().unwrap(), a["function"].as_str().unwrap()))
        .collect();
    assert_eq!(live, [(1_048_576, "cudaMalloc"), (3000, "cudaMalloc")]);
    // Each synchronization busy-waits 5, 3 and 5 ms in the stand-in driver.
    let blocked = cuda(out)["sync_blocked_ns"].as_u64().unwrap();
    assert!(blocked >= 13_000_000, "blocked {blocked} ns");

    assert_eq!(
        counter_track(out, "CUDA device memory (bytes)"),
        [
            1_048_576, 1_052_672, 1_055_672, 1_063_864, 1_059_768, 1_051_576,
            // The pitched allocations count the bytes asked for (100 x 3, 64 x 2, and
            // 16 x 4 x 2 by cudaMalloc3D), not the 128-byte rows the stand-in driver pads them to.
            1_051_876, 1_052_004, 1_051_704, 1_051_576, 1_051_704, 1_051_576
        ]
    );
    // Pinned host memory is its own account and track; nested driver calls count once.
    let pinned = &cuda(out)["pinned_host"][0];
    assert_eq!(
        (
            &pinned["peak_bytes"],
            &pinned["live_bytes"],
            &pinned["allocations"],
            &pinned["frees"]
        ),
        (&json!(66_560), &json!(65_536), &json!(3), &json!(2))
    );
    assert_eq!(pinned["live"][0]["function"], "cudaHostAlloc");
    assert_eq!(
        counter_track(out, "CUDA pinned host memory (bytes)"),
        [65_536, 66_536, 66_560, 65_560, 65_536]
    );
}

/// [`cuda_calls_by_pid_exactly`]: each kernel's launches with their grid, block, shared memory and
/// stream, through the runtime and the driver.
fn assert_launch_configs_by_pid(spans: &[Span]) {
    let relu = launches(spans, "nn::relu(float*, int)");
    assert_eq!(relu.len(), 5);
    assert!(relu.iter().all(|s| s.name == "cudaLaunchKernel"
        && s.args["grid"] == json!([64, 2, 1])
        && s.args["block"] == json!([256, 1, 1])
        && s.args["shared_mem"] == 0
        && s.args["stream"] == "0x0"));
    let gemm = launches(
        spans,
        "void nn::gemm<float>(float const*, float const*, float*, int)",
    );
    assert_eq!(gemm.len(), 3);
    assert!(gemm
        .iter()
        .all(|s| s.args["shared_mem"] == 1024 && s.args["stream"] == "0x5151"));
    // cudaLaunchKernelExC reads its config struct; the stand-in forwards to cudaLaunchKernel,
    // which names the same kernel.
    let softmax = launches(spans, "nn::softmax(float*, int)");
    let ex: Vec<&&Span> = softmax
        .iter()
        .filter(|s| s.name == "cudaLaunchKernelExC")
        .collect();
    assert_eq!(ex.len(), 2);
    assert!(ex.iter().all(|s| s.args["grid"] == json!([8, 4, 2])
        && s.args["block"] == json!([32, 8, 1])
        && s.args["shared_mem"] == 4096
        && s.args["stream"] == "0x77"));
    // Driver launches: handles named by cuModuleGetFunction, and by cuLibraryGetKernel through
    // cuKernelGetFunction; cuLaunchKernel's block z, shared memory and stream are stack arguments.
    let vecadd = launches(spans, "vecAdd(float*, float*, float*, int)");
    let names: Vec<&str> = vecadd.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names.iter().filter(|n| **n == "cuLaunchKernel").count(),
        5,
        "4 direct, 1 from cuLaunchCooperativeKernel: {names:?}"
    );
    assert_eq!(vecadd.len(), 6, "{names:?}");
    assert!(vecadd.iter().all(|s| s.args["grid"] == json!([4, 2, 1])
        && s.args["block"] == json!([128, 1, 1])
        && s.args["shared_mem"] == 256
        && s.args["stream"] == "0x55"));
    let axpy = launches(spans, "axpy(float, float*, float*)");
    assert_eq!(
        axpy.len(),
        4,
        "2 cuLaunchKernelEx and the 2 cuLaunchKernel they make"
    );
    assert!(axpy.iter().all(|s| s.args["grid"] == json!([2, 2, 2])
        && s.args["block"] == json!([64, 2, 1])
        && s.args["shared_mem"] == 512
        && s.args["stream"] == "0x66"));
    // nvcc 13's stub launches with the handle it kept before xtrace attached: named from the
    // stub's static, which the process holds.
    let scale = launches(spans, "nn::scale(float*, int)");
    assert_eq!(scale.len(), 3);
    assert!(scale.iter().all(|s| s.name == "cudaLaunchKernel"
        && s.args["grid"] == json!([32, 1, 1])
        && s.args["block"] == json!([64, 1, 1])
        && s.args["stream"] == "0x5151"));
}

/// [`cuda_calls_by_pid_exactly`]: pitched allocations' sizes, handle lookups named whole, copy
/// and memset sizes, and a failed allocation.
fn assert_lookups_copies_and_failures_by_pid(out: &Outputs, spans: &[Span]) {
    let mut pitched: Vec<(&str, u64)> = spans
        .iter()
        .filter(|s| s.name.contains("Pitch") || s.name.contains("3D"))
        .map(|s| (s.name.as_str(), s.args["bytes"].as_u64().unwrap_or(0)))
        .collect();
    pitched.sort_unstable();
    assert_eq!(
        pitched,
        [
            ("cuMemAllocPitch_v2", 128),
            ("cuMemAllocPitch_v2", 128),
            ("cuMemAllocPitch_v2", 300),
            ("cudaMalloc3D", 128),
            ("cudaMallocPitch", 300)
        ]
    );
    // Lookups name their handles whole: a name longer than the 63 bytes the kernel program reads,
    // and one it could not read at all (on a page the driver touched only during the call).
    let mut asked: Vec<String> = ["cuModuleGetFunction", "cuLibraryGetKernel"]
        .iter()
        .flat_map(|f| out.spans_named(f))
        .map(|s| s.args["name"].as_str().unwrap().to_string())
        .collect();
    asked.sort_unstable();
    assert_eq!(
        asked,
        [
            "axpy(float, float*, float*)",
            "cold(float*)",
            "vecAdd(float*, float*, float*, int)",
            ELEMENTWISE
        ]
    );
    assert_eq!(launches(spans, ELEMENTWISE).len(), 1);
    assert_eq!(launches(spans, "cold(float*)").len(), 2);
    let copy2d = out.spans_named("cudaMemcpy2D");
    assert_eq!(copy2d[0].args["bytes"], 700);
    assert_eq!(copy2d[0].args["kind"], "HtoD");
    // The cooperative launch and the cudaLaunchKernel the stand-in makes inside it.
    let reduce = launches(spans, "nn::reduce(float*, int)");
    let mut names: Vec<&str> = reduce.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["cudaLaunchCooperativeKernel", "cudaLaunchKernel"]);
    assert!(reduce.iter().all(|s| s.args["grid"] == json!([4, 1, 1])
        && s.args["block"] == json!([128, 1, 1])
        && s.args["shared_mem"] == 512));
    let memset2d = out.spans_named("cudaMemset2D");
    assert_eq!(memset2d[0].args["bytes"], 700);
    assert_eq!(out.spans_named("cuMemsetD32_v2")[0].args["bytes"], 2048);
    assert_eq!(out.spans_named("cuMemsetD16Async")[0].args["bytes"], 200);
    let failed: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "cudaMalloc" && s.args.get("error").is_some())
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].args["error"], 2);
    assert_eq!(failed[0].args["bytes"], 1u64 << 41);
    assert_eq!(
        failed[0].args["ptr"],
        Value::Null,
        "a failed call hands out no pointer"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cuda_calls_by_pid_exactly() {
    if !require_bpf() {
        return;
    }
    let (out, finished, _tmp) = trace_by_pid(args!["--cuda"], "cuda-pid");
    let dir = fixtures().cudaapp.parent().unwrap().display().to_string();
    let warning = format!(
        "xtrace: warning: {dir}/libcuda.so.1 lacks 2 CUDA functions, not traced: cuMemcpyPeer, cuEventSynchronize"
    );
    assert!(finished.stderr.contains(&warning), "{:?}", finished.stderr);
    assert_launches_and_copies(&out, false);

    assert_call_counts_by_pid(&out);
    assert_memory_accounts_by_pid(&out);
    let spans = out.spans();
    assert_launch_configs_by_pid(&spans);
    assert_lookups_copies_and_failures_by_pid(&out, &spans);

    assert!(finished
        .stdout
        .contains("CUDA: 26 kernel launches (11 kernels), 1 graph launches"));
    assert!(finished.stdout.contains("  memset  5 calls, 10044 bytes"));
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cuda_on_by_itself_for_a_pid_that_maps_cuda() {
    if !require_bpf() {
        return;
    }
    let (out, finished, _tmp) = trace_by_pid(Vec::new(), "cuda-auto");
    assert_launches_and_copies(&out, false);
    assert!(out.summary["samples"].is_u64(), "sampling stays on by default");
    // GPU metrics come on with CUDA tracing; without NVML (CI has no NVIDIA driver) that is one
    // warning and the recording goes on.
    let nvml = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]
        .iter()
        .any(|d| std::path::Path::new(d).join("libnvidia-ml.so.1").exists());
    let notices: Vec<&String> = finished
        .stderr
        .iter()
        .filter(|l| l.starts_with("xtrace: warning: GPU metrics off: "))
        .collect();
    if nvml {
        assert!(out.summary["gpus"].is_array(), "{:?}", finished.stderr);
    } else {
        assert_eq!(notices.len(), 1, "{:?}", finished.stderr);
        assert!(notices[0].contains("NVML could not be loaded"), "{}", notices[0]);
        assert!(notices[0].ends_with("; tracing continues"), "{}", notices[0]);
        assert!(out.summary.get("gpus").is_none());
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn gpu_metrics_off_leaves_no_notice() {
    if !require_bpf() {
        return;
    }
    let (out, finished, _tmp) = trace_by_pid(args!["--cuda", "--gpu-metrics=off"], "cuda-nogpu");
    assert_launches_and_copies(&out, false);
    assert!(
        !finished.stderr.iter().any(|l| l.contains("GPU metrics")),
        "{:?}",
        finished.stderr
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cuda_in_a_launched_command() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("cuda-launch");
    let out = tmp.join("out");
    let xtrace = Xtrace::spawn(args!["--cuda", "-o", &out, "--", &fixtures().cudaapp]);
    let finished = xtrace.wait();
    finished.assert_success();
    assert_launches_and_copies(&Outputs::read(&out), true);
}

/// CUDA programs gone within a millisecond of their launches (`cudaapp quick`: 10 programs in
/// turn, each launching two host-stub kernels 15 times, then exec'ing the next or exiting) have
/// no /proc/PID/maps left when xtrace reads their launches: each launch is named from the
/// mappings the kernel's side band reported while its program ran, never `cudaKernel_t 0x…`.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cuda_of_a_process_gone_at_once_names_every_launch() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("cuda-quick");
    let out = tmp.join("out");
    let xtrace = Xtrace::spawn(args!["--cuda", "-o", &out, "--", &fixtures().cudaapp, "quick"]);
    xtrace.wait().assert_success();
    let out = Outputs::read(&out);
    assert_eq!(
        cuda(&out)["launches"],
        json!([
            {"kernel": "nn::relu(float*, int)", "count": 100},
            {"kernel": "void nn::gemm<float>(float const*, float const*, float*, int)", "count": 50},
        ]),
        "{:#}",
        cuda(&out)
    );
    let spans = out.spans();
    assert_eq!(launches(&spans, "nn::relu(float*, int)").len(), 100);
    assert_eq!(
        launches(
            &spans,
            "void nn::gemm<float>(float const*, float const*, float*, int)"
        )
        .len(),
        50
    );
}

/// `--min-duration` leaves short CUDA calls out of trace.json, as other calls, but the CUDA summary
/// still counts each one: launches, copies, memsets, and the memory frees give back (the kernel
/// sends every CUDA call; user space drops the short ones from the trace).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cuda_summary_is_whole_under_min_duration() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("cuda-min-duration");
    let out = tmp.join("out");
    let xtrace = Xtrace::spawn(args![
        "--cuda",
        "--min-duration",
        "1s",
        "-o",
        &out,
        "--",
        &fixtures().cudaapp
    ]);
    xtrace.wait().assert_success();
    let out = Outputs::read(&out);
    assert_launches_and_copies(&out, true);
    let memory = &cuda(&out)["memory"][0];
    assert_eq!(
        (&memory["allocations"], &memory["frees"], &memory["live_bytes"]),
        (&json!(7), &json!(5), &json!(1048576 + 3000)),
        "{memory:#}"
    );
    assert_eq!(out.spans().len(), 0, "every call is shorter than 1 s");
    let launches = out.probe("cudaLaunchKernel");
    assert_eq!(launches["below_min_duration"], launches["count"]);
    // The device memory track still follows every allocation and free.
    assert!(!counter_track(&out, "CUDA device memory (bytes)").is_empty());
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cuda_without_a_cuda_library_watches_or_is_refused() {
    if !require_bpf() {
        return;
    }
    // A process may load CUDA later: xtrace says so and watches its dlopen calls.
    let fixture = Fixture::spin();
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args![
        "--cuda",
        "-p",
        fixture.pid().to_string(),
        "-d",
        "0.5",
        "-o",
        TempDir::new("cuda-none").join("out")
    ]);
    assert!(xtrace.wait_attached().starts_with("xtrace: attached 1 probe "));
    let finished = xtrace.wait();
    finished.assert_success();
    assert!(
        finished.stderr.iter().any(|l| l
            == "xtrace: warning: --cuda: no CUDA library is loaded yet; xtrace attaches to \
                libcudart/libcuda when the program loads them (dlopen)"),
        "{:?}",
        finished.stderr
    );
    before.assert_none_left();
    // System-wide there is nothing to watch: without a CUDA library in the linker cache (as on a
    // machine without the CUDA driver) --cuda -a is refused.
    if std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libcuda"))
    {
        return;
    }
    let line = run_error(args!["--cuda", "-a", "-d", "1"]);
    assert!(
        line.starts_with(
            "xtrace: error: --cuda: the target has no CUDA library (libcudart.so*, libcuda.so*)"
        ),
        "{line}"
    );
}
