//! Throughput at saturation: one and then two threads of `hits` call `emulated_site` as fast as
//! they can while xtrace records them; the delivered rate, the losses, and xtrace's own CPU time
//! per span (GNU time's user + system, attach and detach included). Also the traced run that the
//! rate steps in throughput.rs use.
use std::fs;

use serde_json::{json, Value};

use super::{
    per_hit::finite,
    prep::Env,
    report::{fmt_count, fmt_ns, fmt_rate, median, Report, Row},
    runs::{self, lost_events, probe_count, XtraceSpec},
    throughput::SYMBOL,
    Config,
};

/// One traced run: calls/s made, spans/s delivered, spans lost, calls made, xtrace CPU ns per span.
#[derive(Clone, Copy, Default)]
pub struct Sample {
    pub called: f64,
    pub delivered: f64,
    pub lost: u64,
    pub calls: u64,
    pub cpu_ns_per_span: f64,
}

/// The user + system seconds GNU time (`-f "%U %S"`) wrote into `file`.
pub fn cpu_seconds(file: &std::path::Path) -> Option<f64> {
    fs::read_to_string(file).ok().and_then(|text| {
        text.lines().rev().find_map(|l| {
            let mut f = l.split_whitespace().map(|x| x.parse::<f64>().ok());
            Some(f.next()?? + f.next()??)
        })
    })
}

/// Up to 3 runs of `hits ARGS` under xtrace (under GNU time); the samples and the errors.
pub fn measure(env: &Env, cfg: &Config, args: &[String], what: &str) -> (Vec<Sample>, Vec<String>) {
    let (mut ok, mut errors) = (Vec::new(), Vec::new());
    let runs = cfg.runs.min(3);
    let cpu_file = env.tmp.join("cpu.txt");
    for i in 0..runs {
        eprintln!("bench: throughput {what}, run {}/{runs}", i + 1);
        let mut spec = XtraceSpec::new(&env.hits, args, &[SYMBOL]);
        spec.prefix = ["/usr/bin/time", "-f", "%U %S", "-o"].map(str::to_owned).into();
        spec.prefix.push(cpu_file.display().to_string());
        match runs::xtrace(env, &spec) {
            Ok(out) => {
                let summary = out.summary.unwrap_or(Value::Null);
                let secs = out.work.elapsed_ns as f64 / 1e9;
                let count = probe_count(&summary, SYMBOL);
                let cpu_s = cpu_seconds(&cpu_file);
                ok.push(Sample {
                    called: out.work.calls as f64 / secs,
                    delivered: count as f64 / secs,
                    lost: lost_events(&summary),
                    calls: out.work.calls,
                    cpu_ns_per_span: cpu_s.map_or(f64::NAN, |s| s * 1e9 / count.max(1) as f64),
                });
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    (ok, errors)
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) {
    for threads in [1u32, 2] {
        let per_thread = cfg.scale(2_000_000);
        let args: Vec<String> = ["call", SYMBOL, &per_thread.to_string(), &threads.to_string()]
            .map(str::to_owned)
            .into();
        let (ok, errors) = measure(env, cfg, &args, &format!("unthrottled, {threads} thread(s)"));
        let delivered = median(&ok.iter().map(|r| r.delivered).collect::<Vec<_>>());
        let cpu = median(&ok.iter().map(|r| r.cpu_ns_per_span).collect::<Vec<_>>());
        let lost = ok.iter().map(|r| r.lost).max().unwrap_or(0);
        let id = format!("throughput.unthrottled_{threads}t");
        let what = format!("throughput: {threads} thread(s) calling as fast as they can");
        let row = if ok.is_empty() {
            Row::new(&id, what, "error").note(errors.join("; "))
        } else {
            Row::new(&id, what, fmt_rate(delivered))
                .note(format!(
                    "{} calls per thread; worst run lost {}; xtrace CPU {} per span (user+sys, with attach)",
                    fmt_count(per_thread),
                    fmt_count(lost),
                    fmt_ns(cpu)
                ))
                .data(json!({"delivered_per_s": finite(delivered), "worst_lost": lost,
                    "xtrace_cpu_ns_per_span": finite(cpu)}))
        };
        report.row(row);
    }
}
