//! Pipeline throughput: xtrace traces `emulated_site` while `hits rate` calls it at a fixed rate
//! on two threads, stepping the rate up (doubling) until spans are lost or the workload cannot
//! reach the rate; then the highest rate delivered with zero loss, the losses at twice that rate,
//! and (saturation.rs) the delivered rate with one and two threads calling as fast as they can.
use anyhow::Result;
use serde_json::{json, Value};

use super::{
    per_hit::finite,
    prep::Env,
    report::{fmt_count, fmt_rate, median, Report, Row, Verdict},
    saturation::{self, measure},
    Config,
};

pub const SYMBOL: &str = "emulated_site";
const THREADS: u32 = 2;
const STEPS: [f64; 6] = [125e3, 250e3, 500e3, 1e6, 2e6, 4e6];
const GOAL_RATE: f64 = 1e6;

/// The runs at one rate (median of each).
#[derive(Clone, Debug)]
struct Step {
    target: f64,
    /// Calls per second the workload made.
    called: f64,
    /// Spans per second xtrace delivered.
    delivered: f64,
    /// Worst run: spans lost, and calls made in that run.
    lost: u64,
    calls: u64,
    /// xtrace CPU time per span (median).
    cpu_ns: f64,
    errors: Vec<String>,
}

impl Step {
    fn capped(&self) -> bool {
        self.called < 0.9 * self.target
    }
}

fn step(env: &Env, cfg: &Config, target: f64) -> Step {
    let secs = if cfg.quick { 1 } else { 2 };
    let args: Vec<String> = [
        "rate",
        SYMBOL,
        &format!("{target}"),
        &secs.to_string(),
        &THREADS.to_string(),
    ]
    .map(str::to_owned)
    .into();
    let (ok, errors) = measure(env, cfg, &args, &format!("at {}", fmt_rate(target)));
    let worst = ok.iter().max_by_key(|r| r.lost).copied().unwrap_or_default();
    Step {
        target,
        called: median(&ok.iter().map(|r| r.called).collect::<Vec<_>>()),
        delivered: median(&ok.iter().map(|r| r.delivered).collect::<Vec<_>>()),
        lost: worst.lost,
        calls: worst.calls,
        cpu_ns: median(&ok.iter().map(|r| r.cpu_ns_per_span).collect::<Vec<_>>()),
        errors,
    }
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    let mut steps: Vec<Step> = Vec::new();
    for target in STEPS {
        let s = step(env, cfg, target);
        let stop = s.lost > 0 || s.capped() || !s.errors.is_empty();
        steps.push(s);
        if stop {
            break;
        }
    }
    let clean = |s: &&Step| s.lost == 0 && s.errors.is_empty() && s.delivered.is_finite();
    // The clean step that delivered most (a capped step can deliver less than the one before it).
    let best_target = steps
        .iter()
        .filter(clean)
        .max_by(|a, b| a.delivered.total_cmp(&b.delivered))
        .map(|b| b.target);
    if let Some(target) = best_target {
        if !steps.iter().any(|s| s.target >= 2.0 * target) {
            steps.push(step(env, cfg, 2.0 * target));
        }
    }
    let best = best_target.and_then(|t| steps.iter().find(|s| s.target == t));
    let raw: Vec<Value> = steps
        .iter()
        .map(|s| {
            json!({"target_per_s": s.target, "called_per_s": finite(s.called),
            "delivered_per_s": finite(s.delivered), "worst_lost": s.lost, "calls": s.calls,
            "xtrace_cpu_ns_per_span": finite(s.cpu_ns), "errors": s.errors})
        })
        .collect();
    report.raw("throughput.steps", Value::Array(raw));

    let note_cfg = format!(
        "{THREADS} threads calling {SYMBOL} at a fixed rate (1 ms batches), steps doubling from 125 k/s"
    );
    match best {
        Some(b) => report.row(
            Row::new(
                "throughput.zero_loss",
                "throughput: highest rate delivered with zero loss",
                fmt_rate(b.delivered),
            )
            .note(format!("{note_cfg}; target {}", fmt_rate(b.target)))
            .data(json!({"delivered_per_s": b.delivered, "target_per_s": b.target})),
        ),
        None => report.row(
            Row::new(
                "throughput.zero_loss",
                "throughput: highest rate delivered with zero loss",
                "none",
            )
            .note(format!("{note_cfg}; even the first step lost spans or failed")),
        ),
    }
    report.row(loss_at_twice_row(&steps, best));
    report.row(goal_row(&steps, best));

    saturation::run(env, cfg, report);
    Ok(())
}

/// The row of the losses at twice the best zero-loss rate (`best`), from the step that ran it.
fn loss_at_twice_row(steps: &[Step], best: Option<&Step>) -> Row {
    let twice = best.and_then(|b| steps.iter().find(|s| s.target >= 2.0 * b.target));
    let what = "throughput: losses at twice that rate";
    let id = "throughput.loss_at_twice";
    match twice {
        Some(t) if t.errors.is_empty() => {
            let pct = 100.0 * t.lost as f64 / t.calls.max(1) as f64;
            let mut note = format!(
                "target {}: workload called at {}, xtrace delivered {}",
                fmt_rate(t.target),
                fmt_rate(t.called),
                fmt_rate(t.delivered)
            );
            if t.capped() {
                let n = cores();
                note.push_str(&format!(
                    "; the workload could not reach the target (CPU-bound on {n} cores)"
                ));
            }
            let value = format!("{} lost of {} ({pct:.2}%)", fmt_count(t.lost), fmt_count(t.calls));
            let data = json!({"lost": t.lost, "calls": t.calls, "target_per_s": t.target,
                "called_per_s": finite(t.called), "delivered_per_s": finite(t.delivered)});
            Row::new(id, what, value).note(note).data(data)
        }
        Some(t) => Row::new(id, what, "error").note(t.errors.join("; ")),
        None => Row::new(id, what, "n/a").note("no rate was delivered without loss"),
    }
}

/// The row of the goal: zero loss up to [`GOAL_RATE`], or where spans were lost.
fn goal_row(steps: &[Step], best: Option<&Step>) -> Row {
    let goal = format!("0 lost ≤ {}", fmt_rate(GOAL_RATE));
    let reached = best.is_some_and(|b| b.delivered >= 0.99 * GOAL_RATE);
    let why = match (reached, steps.iter().find(|s| s.lost > 0)) {
        (true, _) => String::new(),
        (false, Some(l)) => format!(
            "spans were lost at {} (target {})",
            fmt_rate(l.called),
            fmt_rate(l.target)
        ),
        (false, None) => format!(
            "no loss, but 1 M/s was never delivered: the traced workload peaked at {} on {} cores",
            fmt_rate(steps.iter().map(|s| s.called).fold(0.0, f64::max)),
            cores()
        ),
    };
    Row::new(
        "throughput.goal",
        "throughput: zero loss up to 1 M events/s",
        if reached { "yes" } else { "no" },
    )
    .goal(goal, Verdict::from_bool(reached))
    .note(why)
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}
