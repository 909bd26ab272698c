//! The GPU launch rows, on the stand-in CUDA driver and CUPTI of tests/fixtures: the
//! `launches` workload (xtask/bench/launches.c) makes one-thread kernel launches through
//! `cuLaunchKernel`, interleaved: bare; with `CUDA_INJECTION64_PATH` naming xtrace's tool library
//! and nobody tracing (the driver loads it at `cuInit`, its watcher thread polls a semaphore, no
//! CUPTI call is made); and under `xtrace --pid --cuda` with the device timeline switched on
//! (CUPTI callbacks and activity records, xtrace's uprobes on the launch). The first must cost
//! nothing per launch; the second's added cost per launch is stated. The stand-in driver's launch
//! is a few hundred nanoseconds of `dlsym`, cheaper than a real one, so the ratio of the second
//! overstates what a real launch pays.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::{
    prep::{compile_with, Env},
    report::{fmt_count, fmt_ns, median, Report, Row, Verdict},
    runs::{lost_events, read_summary, ATTACH_TIMEOUT, EXIT_TIMEOUT, WORKLOAD_TIMEOUT},
    tracer::{Stdout, Tracer},
    workload::Workload,
    Config,
};

/// Launches per run: about a second bare, and under xtrace.
const BARE_LAUNCHES: u64 = 2_000_000;
const TRACED_LAUNCHES: u64 = 200_000;
/// Bare and injected pairs per run: a launch of the stand-in takes about 80 ns, so single pairs
/// swing by a few percent on a shared machine.
const PAIRS_PER_RUN: usize = 3;
/// The kernel the workload launches.
const KERNEL: &str = "step";

/// The workload and what it runs on.
struct Gpu {
    bin: PathBuf,
    libcupti: PathBuf,
    tool: PathBuf,
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    let gpu = build(env)?;
    let times = measure(env, cfg, &gpu)?;
    report_times(cfg, report, &times);
    Ok(())
}

/// The stand-in driver and CUPTI (from tests/fixtures) and the workload, in `target/bench/gpu`.
fn build(env: &Env) -> Result<Gpu> {
    let dir = env.dir.join("gpu");
    fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let stand_in = |name: &str| super::prep::fixture("../../tests/fixtures").join(name);
    let shared = |extra: &[&str]| -> Vec<String> {
        ["-shared", "-fPIC"]
            .iter()
            .chain(extra)
            .map(|s| (*s).to_string())
            .collect()
    };
    let libcuda = dir.join("libcuda.so.1");
    compile_with(&stand_in("cudadrv.c"), &libcuda, &shared(&["-ldl"]))?;
    let libcupti = dir.join("libcupti.so.12");
    // cupti.c's multi-subscriber functions live in cupti_multi.c, compiled into the same library.
    let multi = stand_in("cupti_multi.c").display().to_string();
    compile_with(&stand_in("cupti.c"), &libcupti, &shared(&[&multi]))?;
    let bin = dir.join("launches");
    let extra = [
        libcuda.display().to_string(),
        format!("-Wl,-rpath,{}", dir.display()),
        "-ldl".into(),
    ];
    compile_with(&super::prep::fixture("launches.c"), &bin, &extra)?;
    let tool_dir = env.xtrace.parent().context("the xtrace binary has a directory")?;
    Ok(Gpu {
        bin,
        libcupti,
        tool: tool_dir.join("libxtrace_tool.so"),
    })
}

/// ns per launch of each run, and what the traced runs missed.
#[derive(Default)]
struct Times {
    bare: Vec<f64>,
    injected: Vec<f64>,
    traced_bare: Vec<f64>,
    traced: Vec<f64>,
    missed: Vec<String>,
}

fn measure(env: &Env, cfg: &Config, gpu: &Gpu) -> Result<Times> {
    let (bare_n, traced_n) = (cfg.scale(BARE_LAUNCHES), cfg.scale(TRACED_LAUNCHES));
    let mut times = Times::default();
    for run in 0..cfg.runs {
        eprintln!("bench: gpu launch run {}/{}", run + 1, cfg.runs);
        for pair in 0..PAIRS_PER_RUN {
            // Alternating which goes first, so that neither always runs on a warmer machine.
            let order: [bool; 2] = match (run * PAIRS_PER_RUN + pair) % 2 {
                0 => [false, true],
                _ => [true, false],
            };
            for injected in order {
                let ns = untraced(gpu, bare_n, injected)?;
                match injected {
                    true => times.injected.push(ns),
                    false => times.bare.push(ns),
                }
            }
        }
        times.traced_bare.push(untraced(gpu, traced_n, false)?);
        let (ns, missed) = traced(env, gpu, traced_n)?;
        times.traced.push(ns);
        times.missed.extend(missed);
    }
    Ok(times)
}

/// `launches` with nobody tracing, with or without `CUDA_INJECTION64_PATH`: ns per launch.
fn untraced(gpu: &Gpu, n: u64, injected: bool) -> Result<f64> {
    let env: &[(&str, &Path)] = match injected {
        true => &[("CUDA_INJECTION64_PATH", &gpu.tool)],
        false => &[],
    };
    let mut work = Workload::spawn_env(&gpu.bin, &args(gpu, n, false), env)?;
    if injected {
        wait_for_mapping(work.pid(), "libxtrace_tool.so")?;
    }
    work.go()?;
    Ok(work.finish(WORKLOAD_TIMEOUT)?.ns_per_call)
}

fn args(gpu: &Gpu, n: u64, wait: bool) -> Vec<String> {
    vec![
        gpu.libcupti.display().to_string(),
        n.to_string(),
        if wait { "1" } else { "0" }.into(),
    ]
}

/// `launches` started with `CUDA_INJECTION64_PATH` and traced by `xtrace --pid --cuda` once it
/// has loaded the tool library; it times its launches once the device timeline is on. Returns
/// ns per launch and, when xtrace did not see every launch on the device, what it missed.
fn traced(env: &Env, gpu: &Gpu, n: u64) -> Result<(f64, Option<String>)> {
    let out_dir = env.tmp.join("gpu-out");
    let _ = fs::remove_dir_all(&out_dir);
    let injection: &[(&str, &Path)] = &[("CUDA_INJECTION64_PATH", &gpu.tool)];
    let mut work = Workload::spawn_env(&gpu.bin, &args(gpu, n, true), injection)?;
    wait_for_mapping(work.pid(), "libxtrace_tool.so")?;
    let mut cmd = Command::new(&env.xtrace);
    cmd.arg("--pid")
        .arg(work.pid().to_string())
        // A 16 MB ring overflows at the stand-in's 260,000 launches a second on 2 CPUs; a run
        // that loses events would look cheaper than it is.
        .args(["--cuda", "--buffer-size", "256M", "-o"])
        .arg(&out_dir);
    let mut tracer = Tracer::spawn("xtrace", cmd, Stdout::Lines)?;
    tracer.wait_for("xtrace: attached", ATTACH_TIMEOUT)?;
    work.go()?;
    let ns = work.finish(WORKLOAD_TIMEOUT)?.ns_per_call;
    tracer.wait_ok(EXIT_TIMEOUT)?;
    let summary = read_summary(&out_dir)?;
    let _ = fs::remove_dir_all(&out_dir);
    let seen = device_kernels(&summary);
    let lost = lost_events(&summary);
    let dropped = &summary["gpu_device"]["records_dropped"];
    let (by_cupti, by_kernel) = (
        dropped["by_cupti"].as_u64().unwrap_or(0),
        dropped["by_kernel"].as_u64().unwrap_or(0),
    );
    let missed = (seen != n || lost > 0).then(|| {
        format!(
            "{} of {} kernels on the device ({} device records dropped by CUPTI, {} by the kernel), {} events lost",
            fmt_count(seen),
            fmt_count(n),
            fmt_count(by_cupti),
            fmt_count(by_kernel),
            fmt_count(lost)
        )
    });
    Ok((ns, missed))
}

/// `gpu_device.top_kernels[name == KERNEL].count` in summary.json.
fn device_kernels(summary: &Value) -> u64 {
    summary["gpu_device"]["top_kernels"]
        .as_array()
        .and_then(|k| k.iter().find(|k| k["name"] == KERNEL))
        .and_then(|k| k["count"].as_u64())
        .unwrap_or(0)
}

/// Waits (at most 10 s) until process `pid` maps a file whose path ends with `name`.
fn wait_for_mapping(pid: u32, name: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if maps.lines().any(|line| line.ends_with(name)) {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(5));
    }
    bail!("the launches workload (pid {pid}) did not load {name} within 10 s")
}

/// The rows: the variable's cost untraced, and xtrace's added cost per launch.
fn report_times(cfg: &Config, report: &mut Report, times: &Times) {
    let Times {
        bare,
        injected,
        traced_bare,
        traced,
        missed,
    } = times;
    report.raw(
        "gpu_launch",
        json!({"bare_ns_per_launch": bare, "injected_ns_per_launch": injected,
               "traced_bare_ns_per_launch": traced_bare, "traced_ns_per_launch": traced}),
    );
    let changes: Vec<f64> = bare.iter().zip(injected).map(|(b, i)| i / b - 1.0).collect();
    let change = median(&changes);
    let verdict = match cfg.quick {
        true => Verdict::NotApplicable,
        // One-sided: the variable can only add work; a faster run beside it is the machine's noise.
        false => Verdict::from_bool(change < 0.02),
    };
    let runs: Vec<String> = changes.iter().map(|c| format!("{:+.1}%", c * 100.0)).collect();
    report.row(
        Row::new(
            "gpu.untraced_launch",
            "CUDA launch with CUDA_INJECTION64_PATH set, nobody tracing (stand-in driver)",
            format!("{:+.2}%", change * 100.0),
        )
        .ratio(format!(
            "{} vs {} bare",
            fmt_ns(median(injected)),
            fmt_ns(median(bare))
        ))
        .goal("< +2%", verdict)
        .note(format!("median of per-pair changes; runs {}", runs.join(" ")))
        .data(json!({"change": change, "bare_ns": median(bare), "injected_ns": median(injected)})),
    );
    let added = median(traced) - median(traced_bare);
    report.row(
        Row::new(
            "gpu.traced_launch",
            "CUDA launch under xtrace --cuda, device timeline on (stand-in driver and CUPTI)",
            fmt_ns(added),
        )
        .ratio(format!(
            "{} vs {} bare",
            fmt_ns(median(traced)),
            fmt_ns(median(traced_bare))
        ))
        .note(match missed.is_empty() {
            true => "added per launch; every launch's kernel on the device timeline, 0 lost".into(),
            false => format!(
                "added per launch; runs that missed launches: {}",
                missed.join("; ")
            ),
        })
        .data(json!({"added_ns_per_launch": added})),
    );
}
