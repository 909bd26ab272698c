//! Sampling overhead: the CPU-bound `spin` workload (xtask/bench/spin.c, timing its own work with
//! CLOCK_MONOTONIC) runs unprofiled and under `xtrace -F 99` and `-F 999 -- spin` (each sample
//! carrying 16K of user stack to unwind, the default), and under `-F 999 --user-stack 0` (the
//! kernel's frame-pointer walk only) for the cost of that copy, interleaved run by run so that
//! drift in the machine's speed hits all alike. The slowdown is the median over runs of each run's
//! profiled time over the unprofiled time of the same run, minus one: paired so that the run-to-run
//! swing of this machine (±2% on a 2-core VM, more than the 99 Hz goal) cancels within a pair
//! instead of deciding the verdict. The median profiled time over the median unprofiled time is
//! shown beside it.
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

/// Paired runs per `--runs`: one pair is a few seconds, and a 2-core VM's run-to-run swing in CPU
/// speed (±1.5% here, the same in wall and thread CPU time) is wider than the 99 Hz goal (1%), so
/// a verdict from 5 pairs flipped from run to run; the median of 15 pairs holds still.
pub(super) const PAIRS_PER_RUN: usize = 3;

/// Runs `command` and returns the workload's `elapsed_ns` line.
pub(super) fn elapsed_ns(command: &mut Command, what: &str) -> Result<f64> {
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

/// What is measured: (row key, frequency, `--user-stack`, slowdown goal in percent).
const SETTINGS: [(&str, u64, &str, Option<f64>); 3] = [
    ("sampling_99", 99, "16K", Some(1.0)),
    ("sampling_999", 999, "16K", Some(5.0)),
    // The cost of the stack copy: the default against the frame-pointer walk only.
    ("sampling_999_fp", 999, "0", None),
];

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    let spin = env.dir.join("spin");
    compile(&fixture("spin.c"), &spin)?;
    let iterations = cfg.scale(ITERATIONS);
    let mut bare = Vec::new();
    let mut profiled_ns = vec![Vec::new(); SETTINGS.len()];
    let pairs = cfg.runs * PAIRS_PER_RUN;
    for run in 0..pairs {
        eprintln!("bench: sampling pair {}/{pairs}", run + 1);
        let mut plain = Command::new(&spin);
        plain.arg(iterations.to_string());
        bare.push(elapsed_ns(&mut plain, "spin")?);
        for ((_, hz, user_stack, _), times) in SETTINGS.iter().zip(&mut profiled_ns) {
            times.push(profiled(env, &spin, iterations, (*hz, user_stack), run)?);
        }
    }
    let base = median(&bare);
    for ((key, hz, user_stack, goal), times) in SETTINGS.into_iter().zip(&profiled_ns) {
        let paired: Vec<f64> = times
            .iter()
            .zip(&bare)
            .map(|(profiled, plain)| (profiled / plain - 1.0) * 100.0)
            .collect();
        let slowdown = median(&paired);
        let of_medians = (median(times) / base - 1.0) * 100.0;
        let verdict = match goal {
            Some(goal) if !cfg.quick => Verdict::from_bool(slowdown < goal),
            _ => Verdict::NotApplicable,
        };
        let goal = goal.map_or_else(|| "-".to_string(), |g| format!("< {g}%"));
        let how = if user_stack == "0" { ", --user-stack 0" } else { "" };
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
            .note(format!(
                "median of {} paired runs; runs {}; of the medians {of_medians:+.2}%",
                paired.len(),
                paired.iter().map(|p| format!("{p:+.1}%")).collect::<Vec<_>>().join(" ")
            ))
            .goal(goal, verdict)
            .data(
                json!({"hz": hz, "user_stack": user_stack, "slowdown_pct": slowdown, "paired_slowdowns_pct": paired,
                         "slowdown_of_medians_pct": of_medians, "median_ns": median(times),
                         "unprofiled_median_ns": base, "runs_ns": times, "unprofiled_runs_ns": bare}),
            ),
        );
    }
    Ok(())
}
