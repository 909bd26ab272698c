//! Sampling overhead: the CPU-bound `spin` workload (xtask/bench/spin.c, timing its own work with
//! CLOCK_MONOTONIC) runs unprofiled and under `xtrace -F 99` and `-F 999 -- spin` (each sample
//! carrying 16K of user stack to unwind, the default), and under `-F 999 --user-stack 0` (the
//! kernel's frame-pointer walk only) for the cost of that copy, interleaved run by run so that
//! drift in the machine's speed hits all alike; the slowdown is the median profiled time over the
//! median unprofiled time, minus one.
use std::{path::Path, process::Command};

use anyhow::{bail, Context, Result};
use serde_json::json;

use super::{
    prep::{compile, fixture, Env},
    report::{median, Report, Row, Verdict},
    Config,
};

/// Work per run: about a second on a 2020s x86-64 core.
const ITERATIONS: u64 = 400_000_000;

/// Runs `command` and returns the workload's `elapsed_ns` line.
fn elapsed_ns(command: &mut Command, what: &str) -> Result<f64> {
    let out = command
        .output()
        .with_context(|| format!("could not run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("elapsed_ns ")?.trim().parse().ok())
        .with_context(|| format!("{what} printed no elapsed_ns line: {text}"))
}

fn profiled(
    env: &Env,
    spin: &Path,
    iterations: u64,
    (hz, user_stack): (u64, &str),
    run: usize,
) -> Result<f64> {
    let out = env.tmp.join(format!("sampling-{hz}-{user_stack}-{run}"));
    let mut xtrace = Command::new(&env.xtrace);
    xtrace
        .args(["-F", &hz.to_string(), "--user-stack", user_stack, "-q", "-o"])
        .arg(&out)
        .arg("--")
        .arg(spin)
        .arg(iterations.to_string());
    let ns = elapsed_ns(&mut xtrace, &format!("xtrace -F {hz} -- spin"))?;
    let _ = std::fs::remove_dir_all(&out);
    Ok(ns)
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    let spin = env.dir.join("spin");
    compile(&fixture("spin.c"), &spin)?;
    let iterations = cfg.scale(ITERATIONS);
    let (mut bare, mut at99, mut at999, mut at999_fp) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..cfg.runs {
        eprintln!("bench: sampling run {}/{}", run + 1, cfg.runs);
        let mut plain = Command::new(&spin);
        plain.arg(iterations.to_string());
        bare.push(elapsed_ns(&mut plain, "spin")?);
        at99.push(profiled(env, &spin, iterations, (99, "16K"), run)?);
        at999.push(profiled(env, &spin, iterations, (999, "16K"), run)?);
        at999_fp.push(profiled(env, &spin, iterations, (999, "0"), run)?);
    }
    let base = median(&bare);
    let rows = [
        ("sampling_99", 99, "", &at99, Some(1.0)),
        ("sampling_999", 999, "", &at999, Some(5.0)),
        ("sampling_999_fp", 999, ", --user-stack 0", &at999_fp, None),
    ];
    for (key, hz, how, times, goal) in rows {
        let slowdown = (median(times) / base - 1.0) * 100.0;
        let verdict = match goal {
            Some(_) if cfg.quick => Verdict::NotApplicable,
            Some(goal) => Verdict::from_bool(slowdown < goal),
            None => Verdict::NotApplicable,
        };
        let goal = goal.map_or_else(|| "-".to_string(), |g| format!("< {g}%"));
        report.row(
            Row::new(
                key,
                format!("sampling slowdown at {hz} Hz{how} (CPU-bound fixture)"),
                format!("{slowdown:+.2}%"),
            )
            .ratio(format!(
                "{:.3} s vs {:.3} s unprofiled",
                median(times) / 1e9,
                base / 1e9
            ))
            .goal(goal, verdict)
            .data(
                json!({"hz": hz, "user_stack": how.is_empty(), "slowdown_pct": slowdown, "median_ns": median(times),
                         "unprofiled_median_ns": base, "runs_ns": times, "unprofiled_runs_ns": bare}),
            ),
        );
    }
    Ok(())
}
