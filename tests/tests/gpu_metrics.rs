//! `--gpu-metrics` end to end through the stand-in NVML (tests/fixtures/nvml.c, loaded by xtrace
//! from LD_LIBRARY_PATH as the real libnvidia-ml.so.1 would be): two GPUs whose every counter is
//! a known function of how many times it was read, so each reading of each counter track in
//! trace.json is predicted exactly; the traced process's device memory follows the allocations
//! `gpumem` makes through the stand-in CUDA runtime; per-process utilization and, on the GPU
//! with GPM (the stand-in's "H100"), SM occupancy, tensor-core activity and DRAM bandwidth; the
//! same tracks in trace.perfetto-trace, read back by `xtrace view`'s charts.

use std::{path::PathBuf, time::Duration};

use serde_json::{json, Value};
use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{Finished, Xtrace},
    TempDir,
};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const H100: &str = "NVIDIA H100 80GB HBM3 (stand-in)";
const A100: &str = "NVIDIA A100-SXM4-40GB (stand-in)";

/// The counter events of GPU `index`'s track `track`, in order; their times never go back.
fn track<'o>(out: &'o Outputs, index: u32, track: &str) -> Vec<&'o Value> {
    let pid = 0x7fff_0000 + u64::from(index);
    let events: Vec<&Value> = out
        .events
        .iter()
        .filter(|e| e["ph"] == "C" && e["pid"] == pid && e["name"] == track)
        .collect();
    let times: Vec<f64> = events.iter().map(|e| e["ts"].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{track}: {times:?}");
    events
}

/// The values of series `series` of a track's events.
fn values(events: &[&Value], series: &str) -> Vec<f64> {
    events
        .iter()
        .map(|e| {
            e["args"][series]
                .as_f64()
                .unwrap_or_else(|| panic!("{series} in {e}"))
        })
        .collect()
}

/// `values` with runs of one value made one.
fn steps(values: &[f64]) -> Vec<f64> {
    let mut steps = values.to_vec();
    steps.dedup();
    steps
}

/// `f(0), f(1), ...` for `n` reads.
fn expected(n: usize, f: impl Fn(u64) -> f64) -> Vec<f64> {
    (0..n as u64).map(f).collect()
}

/// Runs `gpumem` with the stand-in NVML's process directory, traces it by pid with
/// `--gpu-metrics=20ms` and `extra_env`, and walks its memory through 1 MiB, 3 MiB and 2 MiB,
/// each held 400 ms (20 readings).
fn trace_gpumem(label: &str, extra_env: &[(&str, &str)]) -> (PathBuf, Finished, u32, TempDir) {
    let tmp = TempDir::new(label);
    let gpu_dir = tmp.join("gpu");
    std::fs::create_dir(&gpu_dir).unwrap();
    let mut fixture = Fixture::spawn_with_env(
        &fixtures().gpumem,
        &[],
        &[("XTRACE_STANDIN_GPU_DIR", gpu_dir.as_path())],
    );
    fixture.wait_ready();
    let out = tmp.join("out");
    let mut env: Vec<(&str, String)> = fixtures().nvml_env(&gpu_dir);
    env.extend(extra_env.iter().map(|(k, v)| (*k, v.to_string())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let pid = fixture.pid();
    let mut xtrace = Xtrace::spawn_with_env(
        args!["--cuda", "--gpu-metrics=20ms", "-p", pid.to_string(), "-o", &out],
        &env,
    );
    xtrace.wait_attached();
    std::thread::sleep(Duration::from_millis(200));
    for (command, held) in [
        ("alloc 1048576", MIB),
        ("alloc 2097152", 3 * MIB),
        ("free", 2 * MIB),
    ] {
        fixture.send(command);
        assert_eq!(fixture.next_line(), format!("held {held}"));
        std::thread::sleep(Duration::from_millis(400));
    }
    fixture.send("exit");
    assert!(fixture.wait().success());
    let finished = xtrace.wait();
    finished.assert_success();
    (out, finished, pid, tmp)
}

/// GPU `index`'s device counters: the n-th reading of each is the stand-in's value for its n-th
/// read, and the summary's maxima are the highest of them.
fn assert_device_counters(out: &Outputs, index: u32, gpu: &Value) -> usize {
    let i = u64::from(index);
    let n = gpu["samples"].as_u64().unwrap() as usize;
    assert!(n >= 50, "1.4 s at 20 ms: {n} samples");
    let utilization = track(out, index, "utilization (%)");
    assert_eq!(utilization.len(), n, "one reading a sample");
    let gpu_util = expected(n, |k| ((10 * k + i) % 101) as f64);
    assert_eq!(values(&utilization, "gpu"), gpu_util);
    assert_eq!(
        values(&utilization, "memory"),
        expected(n, |k| (3 * k % 101) as f64)
    );
    let used = |k| ((i + 1) * GIB + k * MIB) as f64;
    assert_eq!(
        values(&track(out, index, "memory used (bytes)"), "used"),
        expected(n, used)
    );
    let power = |k| (100_000 + 500 * k) as f64 / 1000.0;
    assert_eq!(
        values(&track(out, index, "power (W)"), "power"),
        expected(n, power)
    );
    assert_eq!(
        values(&track(out, index, "temperature (C)"), "gpu"),
        expected(n, |k| (40 + k % 30) as f64)
    );
    assert_eq!(
        values(&track(out, index, "SM clock (MHz)"), "sm"),
        expected(n, |k| (1000 + 10 * k) as f64)
    );
    let pcie = track(out, index, "PCIe (KB/s)");
    assert_eq!(values(&pcie, "tx"), expected(n, |k| (100 * k) as f64));
    assert_eq!(values(&pcie, "rx"), expected(n, |k| (200 * k) as f64));
    let max_util = gpu_util.iter().copied().fold(0.0, f64::max);
    assert_eq!(gpu["max_gpu_utilization_pct"], json!(max_util));
    assert_eq!(gpu["max_memory_used_bytes"], json!(used(n as u64 - 1)));
    assert_eq!(gpu["max_power_w"], json!(power(n as u64 - 1)));
    n
}

/// GPU 0's readings of `pid`: its memory steps as the runtime allocated and freed; its
/// utilization is the stand-in's for each read that found it.
fn assert_traced_process(out: &Outputs, gpu: &Value, pid: u32) {
    let series = format!("pid {pid}");
    let memory = values(&track(out, 0, "traced processes' memory (bytes)"), &series);
    assert_eq!(steps(&memory), [MIB as f64, (3 * MIB) as f64, (2 * MIB) as f64]);
    assert_eq!(gpu["max_traced_process_memory_bytes"], json!((3 * MIB) as f64));
    let sm = track(out, 0, "traced processes' SM utilization (%)");
    let m = sm.len();
    assert!(
        m + 2 >= memory.len() && m <= memory.len() + 2,
        "{m} vs {}",
        memory.len()
    );
    let sm_util = expected(m, |k| ((5 * k + 1) % 101) as f64);
    assert_eq!(values(&sm, &series), sm_util);
    for (name, f) in [
        ("memory", (|k| ((5 * k + 2) % 101) as f64) as fn(u64) -> f64),
        ("encoder", |k| (k % 7) as f64),
        ("decoder", |k| (k % 11) as f64),
    ] {
        let events = track(out, 0, &format!("traced processes' {name} utilization (%)"));
        assert_eq!(values(&events, &series), expected(m, f), "{name}");
    }
    assert_eq!(
        gpu["max_traced_process_sm_utilization_pct"],
        json!(sm_util.iter().copied().fold(0.0, f64::max))
    );
    // The uprobes' account of the same allocations ends where NVML's does.
    let cuda: Vec<&Value> = out
        .events
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "CUDA device memory (bytes)")
        .collect();
    assert_eq!(cuda.last().unwrap()["args"]["bytes"], 2 * MIB, "{cuda:?}");
}

/// GPU 0's GPM tracks: the metrics between sample k-1 and k, for k = 2, 3, ...; xtrace takes a
/// GPM sample at most every 100 ms (1.4 s of readings every 20 ms: 13 or 14 samples).
fn assert_gpm(out: &Outputs, gpu: &Value, readings: usize) {
    let occupancy = values(&track(out, 0, "SM occupancy (%)"), "occupancy");
    let n = occupancy.len() + 1;
    assert!(
        n >= 10 && n * 5 <= readings + 5,
        "{n} GPM samples in {readings} readings"
    );
    let k = |j: u64| j + 2;
    assert_eq!(occupancy, expected(n - 1, |j| (10 + k(j) % 80) as f64));
    let tensor = values(&track(out, 0, "tensor-core activity (%)"), "tensor");
    assert_eq!(tensor, expected(n - 1, |j| (2 * k(j) % 100) as f64));
    let dram = values(&track(out, 0, "DRAM bandwidth (%)"), "dram");
    assert_eq!(dram, expected(n - 1, |j| 0.5 * k(j) as f64));
    assert_eq!(gpu["gpm"], true);
    for (key, series) in [
        ("max_sm_occupancy_pct", &occupancy),
        ("max_tensor_active_pct", &tensor),
        ("max_dram_bandwidth_pct", &dram),
    ] {
        assert_eq!(
            gpu[key],
            json!(series.iter().copied().fold(0.0, f64::max)),
            "{key}"
        );
    }
}

fn assert_no_gpm(out: &Outputs, index: u32, gpu: &Value) {
    for name in [
        "SM occupancy (%)",
        "tensor-core activity (%)",
        "DRAM bandwidth (%)",
    ] {
        assert!(track(out, index, name).is_empty(), "GPU {index}: {name}");
    }
    assert_eq!(gpu["gpm"], false);
    assert_eq!(gpu["max_sm_occupancy_pct"], Value::Null);
}

/// summary.txt's GPU lines: the peaks of summary.json.
fn assert_summary_text(out: &Outputs, gpus: &[Value]) {
    let peak = |gpu: &Value, key: &str| format!("{:.0}", gpu[key].as_f64().unwrap());
    let lines: Vec<&str> = out
        .summary_txt
        .lines()
        .skip_while(|l| !l.starts_with("GPU 0 ("))
        .collect();
    let head = |gpu: &Value, name| {
        format!(
            "GPU {} ({name}): {} readings, peak utilization {}%, memory used {} bytes, power {} W",
            gpu["index"],
            gpu["samples"],
            peak(gpu, "max_gpu_utilization_pct"),
            peak(gpu, "max_memory_used_bytes"),
            peak(gpu, "max_power_w"),
        )
    };
    let expected = [
        head(&gpus[0], H100),
        format!(
            "  traced processes: peak SM utilization {}%",
            peak(&gpus[0], "max_traced_process_sm_utilization_pct")
        ),
        format!(
            "  GPM peaks: SM occupancy {}%, tensor-core activity {}%, DRAM bandwidth {}%",
            peak(&gpus[0], "max_sm_occupancy_pct"),
            peak(&gpus[0], "max_tensor_active_pct"),
            peak(&gpus[0], "max_dram_bandwidth_pct"),
        ),
        head(&gpus[1], A100),
    ];
    assert_eq!(lines, expected, "{}", out.summary_txt);
}

fn gpu_names(out: &Outputs) -> Vec<String> {
    let mut names: Vec<String> = out
        .metadata("process_name")
        .iter()
        .filter(|e| e["pid"].as_u64().is_some_and(|p| p >= 0x7fff_0000))
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn gpu_metrics_from_the_stand_in_nvml_exactly() {
    if !require_bpf() {
        return;
    }
    let (out, finished, pid, _tmp) = trace_gpumem("gpu-metrics", &[]);
    let out = Outputs::read(&out);
    assert!(
        !finished
            .stderr
            .iter()
            .any(|l| l.contains("GPU metrics") || l.contains("GPM")),
        "{:?}",
        finished.stderr
    );
    let gpus = out.summary["gpus"].as_array().expect("summary.json gpus");
    assert_eq!(gpus.len(), 2);
    assert_eq!((&gpus[0]["index"], &gpus[0]["name"]), (&json!(0), &json!(H100)));
    assert_eq!((&gpus[1]["index"], &gpus[1]["name"]), (&json!(1), &json!(A100)));
    assert_eq!(
        gpu_names(&out),
        [format!("GPU 0: {H100}"), format!("GPU 1: {A100}")]
    );
    let n0 = assert_device_counters(&out, 0, &gpus[0]);
    let n1 = assert_device_counters(&out, 1, &gpus[1]);
    assert_eq!(n0, n1, "both GPUs are read each period");
    assert_traced_process(&out, &gpus[0], pid);
    // The runtime publishes on GPU 0 only: GPU 1 holds no process.
    assert!(track(&out, 1, "traced processes' memory (bytes)").is_empty());
    assert_eq!(gpus[1]["max_traced_process_memory_bytes"], Value::Null);
    assert_gpm(&out, &gpus[0], n0);
    assert_no_gpm(&out, 1, &gpus[1]);
    assert_summary_text(&out, gpus);
}

/// A driver without GPM on any GPU: no GPM track, and nothing said about it (one debug line).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn gpm_unsupported_is_silent() {
    if !require_bpf() {
        return;
    }
    let (out, finished, pid, _tmp) = trace_gpumem("gpu-metrics-nogpm", &[("XTRACE_STANDIN_GPM", "off")]);
    let out = Outputs::read(&out);
    assert!(
        !finished
            .stderr
            .iter()
            .any(|l| l.contains("GPM") || l.contains("GPU metrics")),
        "{:?}",
        finished.stderr
    );
    let gpus = out.summary["gpus"].as_array().unwrap();
    for (index, gpu) in gpus.iter().enumerate() {
        assert_no_gpm(&out, index as u32, gpu);
    }
    assert_traced_process(&out, &gpus[0], pid);
}

/// In trace.perfetto-trace each series is its own counter track (`TRACK SERIES` where a track has
/// several), with the same values; `xtrace view` of the capture reads them back into its charts.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn gpu_metrics_in_perfetto_and_in_view() {
    if !require_bpf() {
        return;
    }
    let format = [("XTRACE_TRACE_FORMAT", "perfetto")];
    let (out, _finished, pid, _tmp) = trace_gpumem("gpu-metrics-perfetto", &format);
    let decoded = xtrace_tests::perfetto::decode(&out.join("trace.perfetto-trace"));
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let n = summary["gpus"][0]["samples"].as_u64().unwrap() as usize;
    let counter = |track: &str| -> Vec<f64> {
        let found = decoded["counters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["pid"] == 0x7fff_0000u64 && c["track"] == track);
        let values = &found.unwrap_or_else(|| panic!("no {track}: {}", decoded["counters"]))["values"];
        values
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    assert_eq!(
        counter("power (W)"),
        expected(n, |k| (100_000 + 500 * k) as f64 / 1000.0)
    );
    assert_eq!(counter("PCIe (KB/s) tx"), expected(n, |k| (100 * k) as f64));
    assert_eq!(
        counter("utilization (%) gpu"),
        expected(n, |k| (10 * k % 101) as f64)
    );
    assert_eq!(
        steps(&counter("traced processes' memory (bytes)")),
        [MIB as f64, (3 * MIB) as f64, (2 * MIB) as f64]
    );
    let occupancy = counter("SM occupancy (%)");
    assert!(occupancy.len() >= 9, "{occupancy:?}");
    assert_eq!(
        occupancy,
        expected(occupancy.len(), |j| (10 + (j + 2) % 80) as f64)
    );

    // The view's charts end at the last readings, series named as in trace.json where the
    // Perfetto track names them.
    let mut view = Xtrace::spawn(args!["view", &out]);
    let line = view.wait_stderr("xtrace: live view at ");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/live_gpu_page.py");
    let run = std::process::Command::new(xtrace_tests::fixtures::python())
        .arg(&script)
        .args(["view", url])
        .output()
        .expect("running live_gpu_page.py");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    view.wait().assert_success();
    let seen: Value = serde_json::from_slice(&run.stdout).expect("JSON");
    let shown = |gpu: &str, track: &str, series: &str| seen["charts"][gpu][track][series].as_f64();
    let last = (n - 1) as f64;
    assert_eq!(shown("0", "power (W)", "power"), Some(100.0 + 0.5 * last));
    assert_eq!(shown("0", "PCIe (KB/s)", "tx"), Some(100.0 * last));
    assert_eq!(shown("0", "PCIe (KB/s)", "rx"), Some(200.0 * last));
    assert_eq!(shown("0", "SM clock (MHz)", "sm"), Some(1000.0 + 10.0 * last));
    // One traced process: Perfetto's track of it does not name its series.
    let memory = "traced processes' memory (bytes)";
    assert_eq!(shown("0", memory, "value"), Some((2 * MIB) as f64), "{seen}");
    let cuda = shown("cuda", "CUDA device memory (bytes)", &format!("pid {pid}"));
    assert_eq!(cuda, Some((2 * MIB) as f64), "{seen}");
}
