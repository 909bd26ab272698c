//! The time xtrace spends naming sampled stacks of a 100-frame Python stack, per 100,000 samples:
//! `pyspin.py recurse` runs two processes (one per CPU of the 2-CPU VM), each 100 frames of
//! `recurse` deep, spinning in the innermost one, sampled at [`HZ`] with `--overhead`, whose
//! summary.json's `symbolize` gives the time spent naming (each Python walk as it came, cached
//! per code object, and each distinct stack's native frames at the end) and the samples named.
//! Every run's stacks.folded must show the samples with exactly 100 `recurse` frames, or the row
//! fails. The first walk (every code object read: a cold cache) is shown beside the warm mean.
use std::{fs, path::Path, process::Command};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::{
    prep::Env,
    python::PYTHON,
    report::{fmt_count, fmt_ns, median, Report, Row, Verdict},
    sampling::elapsed_ns,
    Config,
};

/// Sampling rate: 20 times the default 999 Hz. The kernel accepts up to
/// `kernel.perf_event_max_sample_rate` (100,000 here), but the walk of 100 frames takes the
/// sampled CPU about 10 µs a sample, so far faster rates leave the workload little CPU to be
/// sampled in.
const HZ: u64 = 20_000;
/// Python frames of `recurse` on each sampled stack.
const DEPTH: usize = 100;
/// Processes spinning: one per CPU of the VM.
const PROCESSES: u64 = 2;
/// Seconds of spinning: at [`HZ`] on [`PROCESSES`] CPUs, 90,000 to 145,000 samples named on the
/// busy 2-CPU VM, where xtrace and the workload share the CPUs (11,000 to 18,000 a second). A
/// run that names fewer is scaled up to 100,000, and with it the capture's fixed cost (reading
/// the debug files and kallsyms once), so it is kept near 100,000 rather than made shorter.
const SECONDS: f64 = 8.0;
/// The samples the goal is stated for.
const PER: f64 = 100_000.0;
/// Share of the samples that must carry exactly [`DEPTH`] `recurse` frames: the rest are the
/// start-up and the fork, before the recursion is 100 deep.
const MIN_DEEP_SHARE: f64 = 0.9;
/// A 256M ring: the 16K stack copies of 40,000 samples a second fill the default 16M.
const BUFFER: &str = "256M";

/// What one capture gave.
struct Capture {
    /// summary.json's `symbolize`.
    cost: Value,
    /// Samples in stacks.folded with exactly [`DEPTH`] `recurse` frames, and all of them.
    deep: u64,
    total: u64,
    /// Most `recurse` frames on any sample.
    most: usize,
}

pub fn run(env: &Env, cfg: &Config, script: &Path, report: &mut Report) -> Result<()> {
    let seconds = if cfg.quick { SECONDS / 5.0 } else { SECONDS };
    let mut captures = Vec::new();
    for run in 0..cfg.runs {
        eprintln!("bench: Python symbolization, run {}/{}", run + 1, cfg.runs);
        captures.push(capture(env, script, seconds, run)?);
    }
    let field = |c: &Capture, k: &str| c.cost[k].as_f64().unwrap_or(f64::NAN);
    let per: Vec<f64> = captures
        .iter()
        .map(|c| field(c, "ns") / field(c, "samples") * PER)
        .collect();
    let value = median(&per);
    let deep_ok = captures
        .iter()
        .all(|c| c.most == DEPTH && c.deep as f64 >= MIN_DEEP_SHARE * c.total as f64);
    let verdict = match (deep_ok, value.is_finite()) {
        (false, _) => Verdict::Fail,
        (true, false) => Verdict::NotApplicable,
        (true, true) => Verdict::from_bool(value < 1e9),
    };
    let last = captures.last().context("no capture")?;
    let (samples, walks) = (field(last, "samples"), field(last, "python_walks"));
    let (python_ns, first_ns) = (field(last, "python_ns"), field(last, "python_first_walk_ns"));
    let warm_ns = (python_ns - first_ns) / (walks - 1.0);
    let frames = if deep_ok {
        format!(
            "{} of {} samples with exactly {DEPTH} recurse frames",
            fmt_count(last.deep),
            fmt_count(last.total)
        )
    } else {
        let runs: Vec<String> = captures
            .iter()
            .map(|c| format!("{}/{} (most {})", c.deep, c.total, c.most))
            .collect();
        format!("{DEPTH}-frame stacks MISSING: runs {}", runs.join(" "))
    };
    report.row(
        Row::new(
            "python.symbolize_100k",
            format!("symbolizing 100,000 samples of a {DEPTH}-frame Python stack (--overhead's symbolize)"),
            fmt_ns(value),
        )
        .ratio(format!("{} a sample", fmt_ns(value / PER)))
        .note(format!(
            "median of {} runs, each scaled to 100,000 from its samples named (last: {}, {} distinct \
             stacks; {} naming Python walks, {} native frames at the end); first walk {} (cold: {} \
             code objects read), then {} a walk; {}; -F {HZ}, {PROCESSES} processes on a shared \
             2-CPU VM: noisy; runs {}",
            per.len(),
            fmt_count(samples as u64),
            field(last, "stacks"),
            fmt_ns(python_ns),
            fmt_ns(field(last, "native_ns")),
            fmt_ns(first_ns),
            field(last, "python_codes_read"),
            fmt_ns(warm_ns),
            frames,
            per.iter().map(|v| fmt_ns(*v)).collect::<Vec<_>>().join(" ")
        ))
        .goal("< 1 s", verdict)
        .data(
            json!({"ns_per_100k_samples": value, "runs_ns_per_100k": per, "hz": HZ,
            "depth": DEPTH, "processes": PROCESSES, "warm_walk_ns": warm_ns,
            "symbolize_runs": captures.iter().map(|c| c.cost.clone()).collect::<Vec<_>>(),
            "deep_samples_runs": captures.iter().map(|c| [c.deep, c.total]).collect::<Vec<_>>()}),
        ),
    );
    Ok(())
}

/// `xtrace -F HZ --overhead -- python3.11 pyspin.py recurse SECONDS 100 2`: its `symbolize` and
/// the `recurse` frames of its samples.
fn capture(env: &Env, script: &Path, seconds: f64, run: usize) -> Result<Capture> {
    let out = env.tmp.join(format!("python-symbolize-{run}"));
    let _ = fs::remove_dir_all(&out);
    let mut xtrace = Command::new(&env.xtrace);
    xtrace
        .args([
            "-F",
            &HZ.to_string(),
            "--overhead",
            "--buffer-size",
            BUFFER,
            "-q",
            "-o",
        ])
        .arg(&out)
        .arg("--")
        .arg(PYTHON)
        .arg(script)
        .args([
            "recurse",
            &seconds.to_string(),
            &DEPTH.to_string(),
            &PROCESSES.to_string(),
        ]);
    let what = format!("xtrace -F {HZ} --overhead -- pyspin.py recurse");
    elapsed_ns(&mut xtrace, &what)?;
    let read = |name: &str| {
        let path = out.join(name);
        fs::read_to_string(&path).with_context(|| format!("could not read {}", path.display()))
    };
    let summary: Value = serde_json::from_str(&read("summary.json")?).context("summary.json is not JSON")?;
    let folded = read("stacks.folded")?;
    let _ = fs::remove_dir_all(&out);
    let cost = summary["symbolize"].clone();
    anyhow::ensure!(cost.is_object(), "{what}: summary.json has no symbolize");
    let (mut deep, mut total, mut most) = (0, 0, 0);
    for line in folded.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let count: u64 = count.parse().with_context(|| format!("stacks.folded: {line}"))?;
        let frames = stack
            .split(';')
            .filter(|f| f.starts_with("recurse (pyspin.py:"))
            .count();
        total += count;
        deep += if frames == DEPTH { count } else { 0 };
        most = most.max(frames);
    }
    Ok(Capture {
        cost,
        deep,
        total,
        most,
    })
}
