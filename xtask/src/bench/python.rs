//! Python rows, on Debian's static CPython 3.11 (`/usr/bin/python3.11`) and the pure-Python
//! `pyspin.py spin` workload (xtask/bench/, outer -> inner -> step, timing its own work with
//! CLOCK_MONOTONIC as spin.c does):
//! - the sampling slowdown at 999 Hz with Python frames: unprofiled and under
//!   `xtrace -F 999 -- python3.11 pyspin.py spin`, paired runs interleaved, the median of each
//!   pair's ratio (sampling.rs's method); every profiled run must show `inner (pyspin.py:LINE)`
//!   among summary.json's hot functions, or the row fails;
//! - the sampling program's kernel time per sample with the Python walk, from `--overhead`,
//!   beside the same on the native spin: the program runs on every CPU's tick and returns early
//!   off the traced process, so its mean per run mixes both kinds; an idle capture (`sleep`)
//!   gives the early return's cost, taken out of each capture's total before dividing by its
//!   samples. The goal is on the walk's share, the difference from the same capture with
//!   `--no-python`;
//! - the per-call cost of `--stacks` with Python frames (python_stacks.rs);
//! - the time spent naming 100,000 samples of a 100-frame Python stack (python_symbolize.rs).
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::{
    prep::{compile, fixture, Env},
    report::{fmt_ns, median, Report, Row, Verdict},
    sampling::{elapsed_ns, PAIRS_PER_RUN},
    Config,
};

/// The interpreter every Python row runs: Debian's, statically linked, always on this machine.
pub const PYTHON: &str = "/usr/bin/python3.11";

/// `pyspin.py spin` iterations per run: about half a second of pure Python on this 2-CPU VM.
const ITERATIONS: u64 = 3_000_000;

/// What the Python walk may add to the kernel's time per sample (ns). The walk of pyspin.py's
/// four Python frames added 1.7 µs a sample on the 2-CPU VM (the median of 5 runs; runs 1.5 to
/// 2.3 µs, one at -0.9 µs): 2.75 µs leaves it a margin of 60% and fails a walk that doubles
/// (3.4 µs). The VM's run-to-run swing is not much narrower than that margin.
const WALK_BOUND_NS: f64 = 2750.0;

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    if !Path::new(PYTHON).exists() {
        report.row(
            Row::new("python", "Python rows", "n/a")
                .goal("-", Verdict::NotApplicable)
                .note(format!("{PYTHON} is missing")),
        );
        return Ok(());
    }
    let script = fixture("pyspin.py");
    slowdown(env, cfg, &script, report)?;
    kernel_time(env, cfg, &script, report)?;
    super::python_stacks::run(env, cfg, &script, report)?;
    super::python_symbolize::run(env, cfg, &script, report)
}

/// `pyspin.py spin N` on the bench's Python.
fn spin_command(script: &Path, iterations: u64) -> Command {
    let mut cmd = Command::new(PYTHON);
    cmd.arg(script).arg("spin").arg(iterations.to_string());
    cmd
}

/// `xtrace -F 999 -q [FLAGS] -o OUT -- COMMAND`, returning the workload's elapsed_ns (when it
/// prints one) and summary.json.
fn capture(env: &Env, flags: &[&str], command: &Command, name: &str) -> Result<(Option<f64>, Value)> {
    let out = env.tmp.join(format!("python-{name}"));
    let _ = fs::remove_dir_all(&out);
    let mut xtrace = Command::new(&env.xtrace);
    xtrace
        .args(["-F", "999", "-q"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(command.get_program())
        .args(command.get_args());
    let what = format!("xtrace -F 999 {} -- {name}", flags.join(" "));
    let ns = if name == "idle" {
        let status = xtrace.status().with_context(|| format!("could not run {what}"))?;
        anyhow::ensure!(status.success(), "{what} failed ({status})");
        None
    } else {
        Some(elapsed_ns(&mut xtrace, &what)?)
    };
    let path = out.join("summary.json");
    let text = fs::read_to_string(&path).with_context(|| format!("could not read {}", path.display()))?;
    let _ = fs::remove_dir_all(&out);
    Ok((
        ns,
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?,
    ))
}

/// Whether summary.json's hot functions include pyspin.py's `inner`, named from its Python frame.
fn saw_python(summary: &Value) -> bool {
    summary["hot_functions"].as_array().is_some_and(|hot| {
        hot.iter().any(|f| {
            f["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("inner (pyspin.py:"))
        })
    })
}

fn slowdown(env: &Env, cfg: &Config, script: &Path, report: &mut Report) -> Result<()> {
    let iterations = cfg.scale(ITERATIONS);
    let (mut bare, mut profiled, mut seen) = (Vec::new(), Vec::new(), 0);
    let pairs = cfg.runs * PAIRS_PER_RUN;
    for run in 0..pairs {
        eprintln!("bench: Python sampling pair {}/{pairs}", run + 1);
        bare.push(elapsed_ns(
            &mut spin_command(script, iterations),
            "pyspin.py spin",
        )?);
        let (ns, summary) = capture(env, &[], &spin_command(script, iterations), "spin")?;
        profiled.push(ns.unwrap_or(f64::NAN));
        seen += usize::from(saw_python(&summary));
    }
    let paired: Vec<f64> = profiled
        .iter()
        .zip(&bare)
        .map(|(p, b)| (p / b - 1.0) * 100.0)
        .collect();
    let slowdown = median(&paired);
    let verdict = if seen < pairs {
        Verdict::Fail
    } else if cfg.quick {
        Verdict::NotApplicable
    } else {
        Verdict::from_bool(slowdown < 5.0)
    };
    let frames = if seen < pairs {
        format!("Python frames MISSING from {} of {pairs} profiles", pairs - seen)
    } else {
        "inner (pyspin.py) among every profile's hot functions".into()
    };
    report.row(
        Row::new(
            "python.sampling_999",
            "Python sampling slowdown at 999 Hz (pure-Python CPU-bound fixture, python3.11)",
            format!("{slowdown:+.2}%"),
        )
        .ratio(format!(
            "{:.3} s vs {:.3} s unprofiled",
            median(&profiled) / 1e9,
            median(&bare) / 1e9
        ))
        .note(format!(
            "median of {} paired runs; runs {}; {frames}",
            paired.len(),
            paired
                .iter()
                .map(|p| format!("{p:+.1}%"))
                .collect::<Vec<_>>()
                .join(" ")
        ))
        .goal("< 5%", verdict)
        .data(
            json!({"hz": 999, "slowdown_pct": slowdown, "paired_slowdowns_pct": paired,
            "median_ns": median(&profiled), "unprofiled_median_ns": median(&bare),
            "runs_ns": profiled, "unprofiled_runs_ns": bare, "python_frames_seen_runs": seen}),
        ),
    );
    Ok(())
}

/// The `sample` program's (runs, run time ns) in summary.json's `overhead`, and the samples kept.
fn sample_program(summary: &Value) -> (f64, f64, f64) {
    let entry = summary["overhead"]
        .as_array()
        .and_then(|o| o.iter().find(|p| p["name"] == "sample"));
    let field = |k: &str| entry.and_then(|e| e[k].as_f64()).unwrap_or(f64::NAN);
    let samples = summary["samples"].as_f64().unwrap_or(f64::NAN);
    (field("runs"), field("run_time_ns"), samples)
}

/// Kernel ns per kept sample: the capture's run time less its early returns at `idle_ns` each.
fn per_sample((runs, time, samples): (f64, f64, f64), idle_ns: f64) -> f64 {
    (time - (runs - samples) * idle_ns) / samples
}

/// Kernel time per sample with the Python walk, and what the walk adds: each run captures
/// pyspin.py twice, with its Python frames and with `--no-python` (the process is never
/// registered, so the walk stops at its first map lookup), and the walk's share is the median of
/// the runs' differences. The goal bounds that share, not the total: the 16K stack copy and the
/// kernel's frame-pointer walk are most of a sample, so a bound on the total loose enough for this
/// VM's noise would let the walk double unseen. The native spin is shown beside it.
fn kernel_time(env: &Env, cfg: &Config, script: &Path, report: &mut Report) -> Result<()> {
    let spin: PathBuf = env.dir.join("spin");
    compile(&fixture("spin.c"), &spin)?;
    let iterations = cfg.scale(ITERATIONS);
    let (mut py, mut walk, mut native, mut idle) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut raw = Vec::new();
    for run in 0..cfg.runs {
        eprintln!(
            "bench: Python kernel time per sample, run {}/{}",
            run + 1,
            cfg.runs
        );
        let mut sleep = Command::new("sleep");
        sleep.arg("1");
        let i = sample_program(&capture(env, &["--overhead"], &sleep, "idle")?.1);
        let spin_py = spin_command(script, iterations);
        let p = sample_program(&capture(env, &["--overhead"], &spin_py, "spin")?.1);
        let flags = ["--overhead", "--no-python"];
        let q = sample_program(&capture(env, &flags, &spin_py, "spin")?.1);
        let mut native_cmd = Command::new(&spin);
        native_cmd.arg(cfg.scale(400_000_000).to_string());
        let n = sample_program(&capture(env, &["--overhead"], &native_cmd, "native")?.1);
        // Runs off the traced process: all of them, less the few samples of `sleep` itself.
        let idle_ns = i.1 / i.0;
        py.push(per_sample(p, idle_ns));
        walk.push(per_sample(p, idle_ns) - per_sample(q, idle_ns));
        native.push(per_sample(n, idle_ns));
        idle.push(idle_ns);
        raw.push(json!({"python": [p.0, p.1, p.2], "no_python": [q.0, q.1, q.2],
            "native": [n.0, n.1, n.2], "idle": [i.0, i.1, i.2]}));
    }
    let (py_ns, walk_ns, native_ns) = (median(&py), median(&walk), median(&native));
    let verdict = if walk_ns.is_finite() {
        Verdict::from_bool(walk_ns < WALK_BOUND_NS)
    } else {
        Verdict::NotApplicable
    };
    let list = |v: &[f64]| v.iter().map(|v| fmt_ns(*v)).collect::<Vec<_>>().join(" ");
    report.row(
        Row::new(
            "python.kernel_per_sample",
            "kernel time per sample with the Python walk (--overhead, pyspin.py at 999 Hz)",
            fmt_ns(py_ns),
        )
        .ratio(format!("{} native spin", fmt_ns(native_ns)))
        .note(format!(
            "median of {} runs; the walk adds {} (the goal's: less the same with --no-python, \
             per run {}); each capture's run time less its runs off the process at an idle \
             capture's mean ({}), over its samples; runs {}",
            py.len(),
            fmt_ns(walk_ns),
            list(&walk),
            fmt_ns(median(&idle)),
            list(&py)
        ))
        .goal(format!("walk < {}", fmt_ns(WALK_BOUND_NS)), verdict)
        .data(
            json!({"python_ns_per_sample": py_ns, "native_ns_per_sample": native_ns,
            "walk_ns_per_sample": walk_ns, "idle_ns_per_run": median(&idle), "python_runs": py,
            "walk_runs": walk, "native_runs": native, "idle_runs": idle,
            "raw_runs_time_samples": raw}),
        ),
    );
    Ok(())
}
