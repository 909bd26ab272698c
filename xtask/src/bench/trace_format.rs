//! Trace formats: the same workload (one thread of `hits` calling `emulated_site` a fixed number
//! of times) recorded with `--trace-format json` and with `--trace-format perfetto`: the trace
//! file's bytes per span and xtrace's CPU time per span (GNU time's user + system, attach and
//! detach included), which holds reading the trace back for span-flamegraph.svg and profile.pb.gz
//! in either format.
use std::fs;

use serde_json::{json, Value};

use super::{
    per_hit::finite,
    prep::Env,
    report::{fmt_count, fmt_ns, median, Report, Row},
    runs::{self, lost_events, probe_count, XtraceSpec},
    saturation::cpu_seconds,
    throughput::SYMBOL,
    Config,
};

/// One format's runs (medians): trace bytes per span, CPU ns per span, spans per run.
struct Measured {
    bytes_per_span: f64,
    cpu_ns_per_span: f64,
    spans: u64,
    lost: u64,
    errors: Vec<String>,
}

fn measure(env: &Env, cfg: &Config, format: &str, calls: u64) -> Measured {
    let args: Vec<String> = ["call", SYMBOL, &calls.to_string(), "1"]
        .map(str::to_owned)
        .into();
    let cpu_file = env.tmp.join("cpu.txt");
    let file = match format {
        "perfetto" => "trace.perfetto-trace",
        _ => "trace.json",
    };
    let (mut bytes, mut cpu, mut spans, mut lost, mut errors) = (vec![], vec![], vec![], 0, vec![]);
    let runs = cfg.runs.min(3);
    for i in 0..runs {
        eprintln!("bench: trace format {format}, run {}/{runs}", i + 1);
        let mut spec = XtraceSpec::new(&env.hits, &args, &[SYMBOL]);
        spec.flags = vec!["--trace-format".into(), format.into()];
        spec.prefix = ["/usr/bin/time", "-f", "%U %S", "-o"].map(str::to_owned).into();
        spec.prefix.push(cpu_file.display().to_string());
        spec.keep_outputs = true;
        match runs::xtrace(env, &spec) {
            Ok(out) => {
                let summary = out.summary.unwrap_or(Value::Null);
                let count = probe_count(&summary, SYMBOL).max(1);
                let size = fs::metadata(env.tmp.join("xtrace-out").join(file)).map_or(0, |m| m.len());
                bytes.push(size as f64 / count as f64);
                cpu.push(cpu_seconds(&cpu_file).map_or(f64::NAN, |s| s * 1e9 / count as f64));
                spans.push(count as f64);
                lost = lost.max(lost_events(&summary));
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    Measured {
        bytes_per_span: median(&bytes),
        cpu_ns_per_span: median(&cpu),
        spans: median(&spans) as u64,
        lost,
        errors,
    }
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) {
    let calls = cfg.scale(1_000_000);
    let json_run = measure(env, cfg, "json", calls);
    let perfetto_run = measure(env, cfg, "perfetto", calls);
    for (format, m) in [("json", &json_run), ("perfetto", &perfetto_run)] {
        let id = format!("trace_format.{format}");
        let what = format!("trace format {format}: trace bytes per span");
        let row = if m.errors.is_empty() {
            let mut note = format!(
                "{} spans of {SYMBOL}, 1 thread; xtrace CPU {} per span (user+sys, with attach); lost {}",
                fmt_count(m.spans),
                fmt_ns(m.cpu_ns_per_span),
                fmt_count(m.lost)
            );
            if format == "perfetto" {
                let ratio = json_run.bytes_per_span / m.bytes_per_span;
                note.push_str(&format!("; {ratio:.1}x smaller than json"));
            }
            Row::new(&id, what, format!("{:.1} B", m.bytes_per_span))
                .note(note)
                .data(json!({"bytes_per_span": finite(m.bytes_per_span),
                    "xtrace_cpu_ns_per_span": finite(m.cpu_ns_per_span), "spans": m.spans, "lost": m.lost}))
        } else {
            Row::new(&id, what, "error").note(m.errors.join("; "))
        };
        report.row(row);
    }
}
