//! The live view's cost: at the throughput goal (1 M calls/s on two threads), traced runs without
//! and with `--live` and a curl client reading its event stream, interleaved in pairs (at least
//! five); the worst loss with `--live`, and xtrace's own CPU time per span (GNU time's user +
//! system) with it against without, medians. Goal: no loss, and within 5%.
use serde_json::{json, Value};

use super::{
    per_hit::finite,
    prep::Env,
    report::{fmt_count, fmt_ns, median, Report, Row, Verdict},
    runs::{self, lost_events, probe_count, XtraceSpec},
    saturation::cpu_seconds,
    throughput::SYMBOL,
    Config,
};

const RATE: f64 = 1e6;
const THREADS: u32 = 2;
const PAIRS: usize = 5;
/// How much more CPU per span `--live` may cost.
const GOAL_RATIO: f64 = 1.05;

/// One run: spans lost and xtrace's CPU ns per span.
fn one(env: &Env, cfg: &Config, live: bool) -> anyhow::Result<(u64, f64)> {
    let secs = if cfg.quick { 1 } else { 3 };
    let args: Vec<String> = [
        "rate",
        SYMBOL,
        &format!("{RATE}"),
        &secs.to_string(),
        &THREADS.to_string(),
    ]
    .map(str::to_owned)
    .into();
    let cpu_file = env.tmp.join("cpu.txt");
    let mut spec = XtraceSpec::new(&env.hits, &args, &[SYMBOL]);
    spec.prefix = ["/usr/bin/time", "-f", "%U %S", "-o"].map(str::to_owned).into();
    spec.prefix.push(cpu_file.display().to_string());
    if live {
        spec.flags.push("--live".into());
        spec.live_client = true;
    }
    let out = runs::xtrace(env, &spec)?;
    let summary = out.summary.unwrap_or(Value::Null);
    let count = probe_count(&summary, SYMBOL);
    let cpu = cpu_seconds(&cpu_file).map_or(f64::NAN, |s| s * 1e9 / count.max(1) as f64);
    Ok((lost_events(&summary), cpu))
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) {
    let pairs = cfg.runs.max(PAIRS);
    let (mut plain, mut live, mut lost, mut errors) = (Vec::new(), Vec::new(), 0, Vec::new());
    for i in 0..pairs {
        for with_live in [false, true] {
            let what = if with_live { "with --live" } else { "without" };
            eprintln!("bench: live view cost, {what}, pair {}/{pairs}", i + 1);
            match one(env, cfg, with_live) {
                Ok((l, cpu)) if with_live => {
                    lost = lost.max(l);
                    live.push(cpu);
                }
                Ok((_, cpu)) => plain.push(cpu),
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
    }
    let (plain, live) = (median(&plain), median(&live));
    let ratio = live / plain;
    let id = "throughput.live";
    let what = "throughput: with --live and a client reading /events";
    let row = if !errors.is_empty() {
        Row::new(id, what, "error").note(errors.join("; "))
    } else {
        let pass = lost == 0 && ratio <= GOAL_RATIO;
        Row::new(id, what, format!("{} lost; CPU/span ×{ratio:.3}", fmt_count(lost)))
            .goal("0 lost, ≤ ×1.05", Verdict::from_bool(pass))
            .note(format!(
                "{pairs} interleaved pairs at 1 M calls/s on {THREADS} threads; xtrace CPU per span {} with --live, {} without (medians, user+sys)",
                fmt_ns(live),
                fmt_ns(plain)
            ))
            .data(json!({"worst_lost": lost, "cpu_ns_per_span_live": finite(live),
                "cpu_ns_per_span": finite(plain), "ratio": finite(ratio)}))
    };
    report.row(row);
}
