//! Peak RSS of xtrace for a 10-million-event capture: two threads of `hits` call `emulated_site`
//! 5 M times each while xtrace (under GNU time, `%M` = maximum resident set) records every call;
//! the median of `--runs` captures.
//! trace.json gets large (~1 GB), so it is written under target/bench/tmp, measured and deleted,
//! and the run is skipped with a note when the disk has less than 5 GB free.
use std::{fs, path::Path, process::Command, time::Duration};

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
const EVENTS: u64 = 10_000_000;
const GOAL_MB: f64 = 150.0;
const MIN_FREE_BYTES: u64 = 5_000_000_000;

/// Free bytes on the file system holding `dir` (`df -Pk`).
fn free_bytes(dir: &Path) -> Option<u64> {
    let out = Command::new("df").arg("-Pk").arg(dir).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let kb: u64 = text.lines().nth(1)?.split_whitespace().nth(3)?.parse().ok()?;
    Some(kb * 1024)
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    let events = if cfg.quick { EVENTS / 10 } else { EVENTS };
    let id = "rss.peak";
    let what = format!("peak RSS of xtrace, {} M-event capture", events / 1_000_000);
    let goal = format!("< {GOAL_MB:.0} MB @ 10 M");
    let free = free_bytes(&env.tmp).unwrap_or(0);
    if free < MIN_FREE_BYTES {
        report.row(
            Row::new(id, what, "not run")
                .goal(goal, Verdict::NotApplicable)
                .note(format!(
                    "only {:.1} GB free under {}; needs 5 GB",
                    free as f64 / 1e9,
                    env.tmp.display()
                )),
        );
        return Ok(());
    }
    let mut runs = Vec::new();
    for i in 0..cfg.runs {
        eprintln!(
            "bench: peak RSS, {} events, run {}/{}",
            fmt_count(events),
            i + 1,
            cfg.runs
        );
        match once(env, events) {
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
    let mb = median(&runs.iter().map(Once::mb).collect::<Vec<_>>());
    let (spans, lost) = (
        runs.iter().map(|r| r.spans).min().unwrap_or(0),
        runs.iter().map(|r| r.lost).max().unwrap_or(0),
    );
    let verdict = if cfg.quick {
        Verdict::NotApplicable
    } else {
        Verdict::from_bool(mb < GOAL_MB && lost == 0)
    };
    let each: Vec<String> = runs.iter().map(|r| format!("{:.1}", r.mb())).collect();
    let mut note = format!(
        "median of {} runs ({} MB); each: {} spans delivered or more, {} lost at most; trace.json \
         {:.2} GB (deleted); {} threads, GNU time %M",
        runs.len(),
        each.join(", "),
        fmt_count(spans),
        fmt_count(lost),
        runs.iter().map(|r| r.trace_bytes).max().unwrap_or(0) as f64 / 1e9,
        THREADS
    );
    if lost > 0 {
        note.push_str("; a run lost events, so it did not capture them all: FAIL");
    }
    if cfg.quick {
        note.push_str("; --quick captures 1 M events, so the 10 M goal is not judged");
    }
    let per_run: Vec<_> = runs
        .iter()
        .map(|r| {
            json!({"max_rss_kib": r.kib, "mb": r.mb(), "spans": r.spans, "lost": r.lost,
                "trace_json_bytes": r.trace_bytes})
        })
        .collect();
    report.row(
        Row::new(id, what, format!("{mb:.1} MB"))
            .goal(goal, verdict)
            .note(note)
            .data(json!({"mb": mb, "events": events, "runs": per_run})),
    );
    Ok(())
}

/// One capture's numbers.
struct Once {
    kib: u64,
    spans: u64,
    lost: u64,
    trace_bytes: u64,
}

impl Once {
    /// The peak RSS in MB (10^6 bytes).
    fn mb(&self) -> f64 {
        self.kib as f64 * 1024.0 / 1e6
    }
}

/// Records `events` calls under GNU time; trace.json is measured and deleted.
fn once(env: &Env, events: u64) -> Result<Once> {
    let time_out = env.tmp.join("rss.txt");
    let args: Vec<String> = [
        "call",
        SYMBOL,
        &(events / THREADS).to_string(),
        &THREADS.to_string(),
    ]
    .map(str::to_owned)
    .into();
    let mut spec = XtraceSpec::new(&env.hits, &args, &[SYMBOL]);
    spec.prefix = ["/usr/bin/time", "-f", "%M", "-o"].map(str::to_owned).into();
    spec.prefix.push(time_out.display().to_string());
    spec.exit_timeout = Duration::from_secs(300);
    spec.keep_outputs = true;
    let result = runs::xtrace(env, &spec);
    let trace = env.tmp.join("xtrace-out").join("trace.json");
    let trace_bytes = fs::metadata(&trace).map_or(0, |m| m.len());
    let _ = fs::remove_dir_all(env.tmp.join("xtrace-out"));
    let summary = result?
        .summary
        .context("xtrace did not exit within 300 s after the workload")?;
    let text =
        fs::read_to_string(&time_out).with_context(|| format!("could not read {}", time_out.display()))?;
    let kib: u64 = text
        .lines()
        .rev()
        .find_map(|l| l.trim().parse().ok())
        .with_context(|| format!("GNU time wrote no maximum RSS: {text}"))?;
    Ok(Once {
        kib,
        spans: probe_count(&summary, SYMBOL),
        lost: lost_events(&summary),
        trace_bytes,
    })
}
