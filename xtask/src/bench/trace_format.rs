//! Trace formats: the same workload (one thread of `hits` calling `emulated_site` a fixed number
//! of times) recorded with `--trace-format json` and with `--trace-format perfetto`, the two
//! formats interleaved (json, perfetto, json, ...; at least 5 runs each in a full run): the trace
//! file's bytes per span and xtrace's CPU time per span (GNU time's user + system, attach and
//! detach included), which holds reading the trace back for span-flamegraph.svg and profile.pb.gz
//! in either format. Goals, from the medians: perfetto's CPU per span no higher than json's, and
//! its file at least 4 times smaller. Each capture is then converted to the other format
//! (`xtrace convert DIR`, under GNU time): its CPU per span and peak RSS, for reference (no goal).
use std::{fs, process::Command};

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

const FORMATS: [&str; 2] = ["json", "perfetto"];
/// Runs per format in a full run, at least.
const MIN_RUNS: usize = 5;
/// How many times smaller than trace.json the perfetto file must be.
const GOAL_SMALLER: f64 = 4.0;

/// One format's runs: trace bytes, CPU ns and spans per run.
#[derive(Default)]
struct Samples {
    bytes: Vec<f64>,
    cpu: Vec<f64>,
    spans: Vec<f64>,
    lost: u64,
    errors: Vec<String>,
    /// `xtrace convert` of each capture to the other format: CPU ns per span, peak RSS in KiB.
    convert_cpu: Vec<f64>,
    convert_kib: Vec<f64>,
    convert_errors: Vec<String>,
}

impl Samples {
    fn bytes_per_span(&self) -> f64 {
        median(&self.bytes)
    }

    fn cpu_ns_per_span(&self) -> f64 {
        median(&self.cpu)
    }

    fn spans(&self) -> u64 {
        median(&self.spans) as u64
    }
}

/// One run of `format`, its numbers added to `s`.
fn once(env: &Env, format: &str, calls: u64, s: &mut Samples) {
    let args: Vec<String> = ["call", SYMBOL, &calls.to_string(), "1"]
        .map(str::to_owned)
        .into();
    let cpu_file = env.tmp.join("cpu.txt");
    let file = match format {
        "perfetto" => "trace.perfetto-trace",
        _ => "trace.json",
    };
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
            s.bytes.push(size as f64 / count as f64);
            s.cpu
                .push(cpu_seconds(&cpu_file).map_or(f64::NAN, |c| c * 1e9 / count as f64));
            s.spans.push(count as f64);
            s.lost = s.lost.max(lost_events(&summary));
            convert(env, count, s);
        }
        Err(e) => s.errors.push(format!("{e:#}")),
    }
}

/// `xtrace convert` of the capture just recorded (`count` spans) to the other format, under GNU
/// time: its CPU per span and peak RSS added to `s`.
fn convert(env: &Env, count: u64, s: &mut Samples) {
    let time_file = env.tmp.join("convert-time.txt");
    let ran = Command::new("/usr/bin/time")
        .args(["-f", "%U %S %M", "-o"])
        .arg(&time_file)
        .arg(&env.xtrace)
        .arg("convert")
        .arg(env.tmp.join("xtrace-out"))
        .output();
    match ran {
        Ok(out) if out.status.success() => {
            s.convert_cpu
                .push(cpu_seconds(&time_file).map_or(f64::NAN, |c| c * 1e9 / count as f64));
            let kib = fs::read_to_string(&time_file)
                .ok()
                .and_then(|t| t.lines().last()?.split_whitespace().nth(2)?.parse::<f64>().ok());
            s.convert_kib.push(kib.unwrap_or(f64::NAN));
        }
        Ok(out) => s.convert_errors.push(format!(
            "xtrace convert failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => s.convert_errors.push(format!("running xtrace convert: {e}")),
    }
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) {
    let calls = cfg.scale(1_000_000);
    let runs = if cfg.quick {
        cfg.runs.min(3)
    } else {
        cfg.runs.max(MIN_RUNS)
    };
    let mut samples = [Samples::default(), Samples::default()];
    for i in 0..runs {
        for (format, s) in FORMATS.iter().zip(&mut samples) {
            eprintln!("bench: trace format {format}, run {}/{runs}", i + 1);
            once(env, format, calls, s);
        }
    }
    let [json_run, perfetto_run] = &samples;
    let judged = !cfg.quick;
    let unjudged = "; --quick runs fewer and shorter runs, so the goal is not judged";
    for (format, m) in FORMATS.iter().zip(&samples) {
        let id = format!("trace_format.{format}");
        let what = format!("trace format {format}: trace bytes per span");
        let row = if !m.errors.is_empty() {
            Row::new(&id, what, "error").note(m.errors.join("; "))
        } else {
            let mut note = format!(
                "median of {runs} runs interleaved with the other format; {} spans of {SYMBOL}, \
                 1 thread; xtrace CPU {} per span (user+sys, with attach); lost {}",
                fmt_count(m.spans()),
                fmt_ns(m.cpu_ns_per_span()),
                fmt_count(m.lost)
            );
            let mut row = Row::new(&id, what, format!("{:.1} B", m.bytes_per_span()));
            if *format == "perfetto" {
                let smaller = json_run.bytes_per_span() / m.bytes_per_span();
                let verdict = goal_verdict(judged && json_run.errors.is_empty(), smaller >= GOAL_SMALLER);
                if !judged {
                    note.push_str(unjudged);
                }
                row = row
                    .ratio(format!("{smaller:.1}x smaller than json"))
                    .goal(format!("≥ {GOAL_SMALLER:.0}x smaller"), verdict);
            }
            row.note(note)
                .data(json!({"bytes_per_span": finite(m.bytes_per_span()),
                "xtrace_cpu_ns_per_span": finite(m.cpu_ns_per_span()), "spans": m.spans(),
                "lost": m.lost, "runs": runs, "bytes_per_span_each": m.bytes,
                "xtrace_cpu_ns_per_span_each": m.cpu}))
        };
        report.row(row);
    }
    report.row(cpu_row(json_run, perfetto_run, runs, judged, unjudged));
    for (format, m) in FORMATS.iter().zip(&samples) {
        report.row(convert_row(format, m, runs));
    }
}

/// `xtrace convert` from `format` to the other one: CPU per span, for reference.
fn convert_row(format: &str, m: &Samples, runs: usize) -> Row {
    let other = FORMATS
        .iter()
        .find(|f| **f != format)
        .copied()
        .unwrap_or("perfetto");
    let id = format!("trace_format.convert_{format}");
    let what = format!("convert {format} to {other}: CPU per span");
    if !m.convert_errors.is_empty() || m.convert_cpu.is_empty() {
        let why = match m.convert_errors.is_empty() {
            true => "no capture to convert".to_string(),
            false => m.convert_errors.join("; "),
        };
        return Row::new(&id, what, "error").note(why);
    }
    let (cpu, kib) = (median(&m.convert_cpu), median(&m.convert_kib));
    let note = format!(
        "median of {} runs: `xtrace convert DIR` of each {}-span capture of the row above, user+sys \
         (reading, writing, process start); peak RSS {:.1} MB (GNU time %M); no goal",
        m.convert_cpu.len(),
        fmt_count(m.spans()),
        kib / 1024.0
    );
    Row::new(&id, what, fmt_ns(cpu)).note(note).data(json!({
        "cpu_ns_per_span": finite(cpu), "max_rss_kib": finite(kib), "spans": m.spans(),
        "runs": runs, "cpu_ns_per_span_each": m.convert_cpu, "max_rss_kib_each": m.convert_kib}))
}

/// Perfetto's CPU per span against json's, from the medians.
fn cpu_row(json_run: &Samples, perfetto_run: &Samples, runs: usize, judged: bool, unjudged: &str) -> Row {
    let id = "trace_format.perfetto_cpu";
    let what = "trace format perfetto: xtrace CPU per span";
    let mut errors = json_run.errors.clone();
    errors.extend(perfetto_run.errors.iter().cloned());
    if !errors.is_empty() {
        return Row::new(id, what, "error")
            .goal("≤ json's", Verdict::Fail)
            .note(errors.join("; "));
    }
    let (json_cpu, perfetto_cpu) = (json_run.cpu_ns_per_span(), perfetto_run.cpu_ns_per_span());
    let ratio = perfetto_cpu / json_cpu;
    let mut note = format!(
        "medians of {runs} interleaved runs each, user+sys with attach, detach and the read-back \
         for span-flamegraph.svg and profile.pb.gz: perfetto {}, json {}",
        fmt_ns(perfetto_cpu),
        fmt_ns(json_cpu)
    );
    if !judged {
        note.push_str(unjudged);
    }
    Row::new(id, what, fmt_ns(perfetto_cpu))
        .ratio(format!("×{ratio:.3} json"))
        .goal("≤ json's", goal_verdict(judged, ratio <= 1.0))
        .note(note)
        .data(json!({"perfetto_cpu_ns_per_span": finite(perfetto_cpu),
            "json_cpu_ns_per_span": finite(json_cpu), "ratio": finite(ratio), "runs": runs}))
}

/// PASS or FAIL when the goal is judged, n/a when it is not.
fn goal_verdict(judged: bool, pass: bool) -> Verdict {
    if judged {
        Verdict::from_bool(pass)
    } else {
        Verdict::NotApplicable
    }
}
