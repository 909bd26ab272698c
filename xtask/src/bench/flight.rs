//! Peak RSS of xtrace as a flight recorder: `hits rate` calls `emulated_site` 1 M times a second
//! on two threads for two minutes (12 s with --quick) while xtrace keeps the last 60 s in a 16 MB
//! buffer (`--flight 60s --flight-size 16M`, under GNU time, `%M` = maximum resident set). The
//! rate needs far more than 16 MB for 60 s, so the window shortens and events age out: the RSS
//! must stay flat however long the run. The median of `--runs` runs.
use std::{fs, time::Duration};

use anyhow::{Context, Result};
use serde_json::json;

use super::{
    prep::Env,
    report::{fmt_count, median, Report, Row, Verdict},
    runs::{self, lost_events, probe_count, XtraceSpec},
    Config,
};

const SYMBOL: &str = "emulated_site";
const THREADS: u64 = 2;
const RATE: u64 = 1_000_000;
const SECS: u64 = 120;
const BUFFER: &str = "16M";
const GOAL_MB: f64 = 100.0;

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    let secs = if cfg.quick { SECS / 10 } else { SECS };
    let id = "rss.flight";
    let what = format!("peak RSS of xtrace --flight 60s --flight-size {BUFFER}, 1 M events/s for {secs} s");
    let goal = format!("< {GOAL_MB:.0} MB");
    let mut runs = Vec::new();
    for i in 0..cfg.runs {
        eprintln!("bench: flight recorder RSS, {secs} s, run {}/{}", i + 1, cfg.runs);
        match once(env, secs) {
            Ok(run) => runs.push(run),
            Err(e) => {
                report.row(
                    Row::new(id, what, "error")
                        .goal(goal, Verdict::Fail)
                        .note(format!("{e:#}")),
                );
                return Ok(());
            }
        }
    }
    let mb = median(
        &runs
            .iter()
            .map(|r| r.kib as f64 * 1024.0 / 1e6)
            .collect::<Vec<_>>(),
    );
    let lost = runs.iter().map(|r| r.lost).max().unwrap_or(0);
    let each: Vec<String> = runs
        .iter()
        .map(|r| format!("{:.1}", r.kib as f64 * 1024.0 / 1e6))
        .collect();
    let note = format!(
        "median of {} runs ({} MB); each: {} calls counted or more, {} aged out of the window or \
         more, {} lost at most; the last window kept {:.2} s; GNU time %M",
        runs.len(),
        each.join(", "),
        fmt_count(runs.iter().map(|r| r.calls).min().unwrap_or(0)),
        fmt_count(runs.iter().map(|r| r.aged_out).min().unwrap_or(0)),
        fmt_count(lost),
        runs.iter().map(|r| r.kept_ns).min().unwrap_or(0) as f64 / 1e9,
    );
    let per_run: Vec<_> = runs
        .iter()
        .map(|r| {
            json!({"max_rss_kib": r.kib, "calls": r.calls, "aged_out_events": r.aged_out,
                "kept_ns": r.kept_ns, "lost": r.lost})
        })
        .collect();
    report.row(
        Row::new(id, what, format!("{mb:.1} MB"))
            .goal(goal, Verdict::from_bool(mb < GOAL_MB))
            .note(note)
            .data(json!({"mb": mb, "seconds": secs, "rate": RATE, "buffer": BUFFER, "runs": per_run})),
    );
    Ok(())
}

/// One run's numbers.
struct Once {
    kib: u64,
    calls: u64,
    aged_out: u64,
    kept_ns: u64,
    lost: u64,
}

/// Records `secs` seconds of 1 M calls a second with the flight recorder, under GNU time.
fn once(env: &Env, secs: u64) -> Result<Once> {
    let time_out = env.tmp.join("flight-rss.txt");
    let args: Vec<String> = [
        "rate",
        SYMBOL,
        &RATE.to_string(),
        &secs.to_string(),
        &THREADS.to_string(),
    ]
    .map(str::to_owned)
    .into();
    let mut spec = XtraceSpec::new(&env.hits, &args, &[SYMBOL]);
    spec.flags = ["--flight", "60s", "--flight-size", BUFFER]
        .map(str::to_owned)
        .into();
    spec.prefix = ["/usr/bin/time", "-f", "%M", "-o"].map(str::to_owned).into();
    spec.prefix.push(time_out.display().to_string());
    spec.exit_timeout = Duration::from_secs(120);
    spec.keep_outputs = true;
    let result = runs::xtrace(env, &spec);
    let out = env.tmp.join("xtrace-out");
    let last = fs::read_to_string(out.join("flight-001").join("summary.json")).ok();
    let _ = fs::remove_dir_all(&out);
    let summary = result?
        .summary
        .context("xtrace did not exit within 120 s after the workload")?;
    let text =
        fs::read_to_string(&time_out).with_context(|| format!("could not read {}", time_out.display()))?;
    let kib: u64 = text
        .lines()
        .rev()
        .find_map(|l| l.trim().parse().ok())
        .with_context(|| format!("GNU time wrote no maximum RSS: {text}"))?;
    let last: serde_json::Value = last
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .context("flight-001/summary.json is not JSON")?
        .context("xtrace wrote no flight-001")?;
    Ok(Once {
        kib,
        calls: probe_count(&summary, SYMBOL),
        aged_out: summary["flight"]["aged_out_events"].as_u64().unwrap_or(0),
        kept_ns: last["flight"]["kept_ns"].as_u64().unwrap_or(0),
        lost: lost_events(&summary),
    })
}
