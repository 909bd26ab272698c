//! Attach and detach time for many functions: a generated fixture with 1,000 small noinline
//! functions f0..f999 (its main waits for a line, calls each once, exits) is traced with
//! `xtrace --pid PID -u f0 ... -u fN-1` for N = 10, 100 and 1,000; attach_ns and detach_ns come from
//! summary.json, which also says how xtrace attached (uprobe_multi links, or perf-event uprobes on
//! kernels before 6.6). Detaching perf-event uprobes is slow (each waits for the kernel's uprobe
//! grace periods), so the 1,000-function run is given a bounded time and reported as "> limit" past it.
use std::{fmt::Write as _, fs, path::Path, time::Duration};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::{
    prep::{compile, Env},
    report::{fmt_count, fmt_ns, median, Report, Row, Verdict},
    runs::{self, XtraceSpec},
    Config,
};

const FUNCTIONS: usize = 1000;
const LIMIT: Duration = Duration::from_secs(240);
const GOAL: &str = "< 1 s";

/// The fixture's C source: FUNCTIONS functions and a main that calls each once after a line on stdin.
fn source() -> String {
    let mut c = format!("#include <stdio.h>\n#include <time.h>\n#define N {FUNCTIONS}\n");
    for i in 0..FUNCTIONS {
        let _ = writeln!(
            c,
            "__attribute__((noinline)) long f{i}(long x) {{ return x * {} + {i}; }}",
            i + 2
        );
    }
    c.push_str("static long (*const table[])(long) = {");
    for i in 0..FUNCTIONS {
        let _ = write!(c, "f{i},");
    }
    c.push_str("};\nint main(void) {\n  char line[64];\n  if (!fgets(line, sizeof line, stdin)) return 1;\n");
    c.push_str("  volatile long acc = 0;\n  struct timespec a, b;\n  clock_gettime(CLOCK_MONOTONIC, &a);\n");
    c.push_str("  for (int i = 0; i < N; i++) acc += table[i](i);\n");
    c.push_str("  clock_gettime(CLOCK_MONOTONIC, &b);\n");
    c.push_str("  long long ns = (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);\n");
    c.push_str("  printf(\"ns_per_call %.3f\\n\", (double)ns / N);\n");
    c.push_str("  printf(\"calls %d\\nelapsed_ns %lld\\n\", N, ns);\n");
    c.push_str("  return 0;\n}\n");
    c
}

/// One run with `n` functions.
struct Once {
    attach_ns: u64,
    /// None past the limit.
    detach_ns: Option<u64>,
    spans: u64,
    /// Seconds from the workload's exit to xtrace's.
    exit_s: f64,
    /// summary.json's attach_mechanism.
    mechanism: String,
}

fn once(env: &Env, bin: &Path, n: usize, limit: Duration) -> Result<Once> {
    let names: Vec<String> = (0..n).map(|i| format!("f{i}")).collect();
    let symbols: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut spec = XtraceSpec::new(bin, &[], &symbols);
    spec.exit_timeout = limit;
    let out = runs::xtrace(env, &spec)?;
    let exit_s = out.finished.waited.as_secs_f64();
    let Some(summary) = out.summary else {
        return Ok(Once {
            attach_ns: 0,
            detach_ns: None,
            spans: 0,
            exit_s,
            mechanism: String::new(),
        });
    };
    let spans = summary["probes"]
        .as_array()
        .map_or(0, |p| p.iter().filter_map(|p| p["count"].as_u64()).sum());
    let field = |name: &str| {
        summary[name]
            .as_u64()
            .with_context(|| format!("summary.json has no {name}"))
    };
    Ok(Once {
        attach_ns: field("attach_ns")?,
        detach_ns: Some(field("detach_ns")?),
        spans,
        exit_s,
        mechanism: summary["attach_mechanism"].as_str().unwrap_or("?").to_string(),
    })
}

/// The runs with one number of functions.
#[derive(Default)]
struct Size {
    attach: Vec<f64>,
    detach: Vec<f64>,
    timed_out: bool,
    mechanism: String,
    notes: Vec<String>,
    per_run: Vec<Value>,
}

fn measure(env: &Env, bin: &Path, n: usize, runs: usize) -> Size {
    let mut size = Size::default();
    for i in 0..runs {
        eprintln!("bench: attach/detach {n} functions, run {}/{runs}", i + 1);
        match once(env, bin, n, LIMIT) {
            Ok(Once {
                attach_ns: a,
                detach_ns: d,
                spans,
                exit_s,
                mechanism,
            }) => {
                let run = json!({"attach_ns": a, "detach_ns": d, "spans": spans,
                    "xtrace_exit_s": exit_s, "attach_mechanism": mechanism});
                size.mechanism = mechanism;
                size.per_run.push(run);
                match d {
                    Some(d) => {
                        size.attach.push(a as f64);
                        size.detach.push(d as f64);
                    }
                    None => size.timed_out = true,
                }
                if d.is_some() && spans != n as u64 {
                    size.notes.push(format!("a run saw {spans} spans, not {n}"));
                }
            }
            Err(e) => {
                size.notes.push(format!("{e:#}"));
                size.per_run.push(json!({"error": format!("{e:#}")}));
            }
        }
    }
    size
}

fn rows(n: usize, size: &Size, report: &mut Report) {
    let (a, d) = (median(&size.attach), median(&size.detach));
    for (kind, ns) in [("attach", a), ("detach", d)] {
        let id = format!("attach.{kind}_{n}");
        let what = format!(
            "{kind} {} functions ({} uprobes, {})",
            fmt_count(n as u64),
            2 * n,
            size.mechanism
        );
        let timed_out = kind == "detach" && size.timed_out;
        let mut row = if timed_out {
            let secs = LIMIT.as_secs();
            Row::new(&id, what, format!("> {secs} s")).note(format!(
                "xtrace had not exited {secs} s after the workload exited; killed"
            ))
        } else if ns.is_finite() {
            Row::new(&id, what, fmt_ns(ns))
                .ratio(format!("{}/function", fmt_ns(ns / n as f64)))
                .data(json!({"ns": ns, "ns_per_function": ns / n as f64, "functions": n}))
        } else {
            Row::new(&id, what, "error")
        };
        if !size.notes.is_empty() {
            row = row.note(size.notes.join("; "));
        }
        if n == FUNCTIONS {
            row = row.goal(GOAL, Verdict::from_bool(ns.is_finite() && ns < 1e9 && !timed_out));
        }
        report.row(row);
    }
}

/// Rows for the 1,000-function run when it is not made; `detach_100` projects its detach time.
fn not_run(why: &str, detach_100: f64, over_limit: bool, report: &mut Report) {
    let projected = detach_100 * (FUNCTIONS / 100) as f64;
    for kind in ["attach", "detach"] {
        let what = format!("{kind} 1,000 functions ({} uprobes)", 2 * FUNCTIONS);
        let mut row = Row::new(&format!("attach.{kind}_{FUNCTIONS}"), what, "not run");
        if kind == "detach" && projected.is_finite() {
            row = row.ratio(format!("~{} projected", fmt_ns(projected)));
        }
        let verdict = if kind == "detach" && over_limit {
            Verdict::Fail
        } else {
            Verdict::NotApplicable
        };
        report.row(row.goal(GOAL, verdict).note(why));
    }
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    let src = env.dir.join("funcs.c");
    fs::write(&src, source()).with_context(|| format!("could not write {}", src.display()))?;
    let bin = env.dir.join("funcs");
    compile(&src, &bin)?;
    let mut raw = serde_json::Map::new();
    let mut detach_100 = f64::NAN;
    for n in [10, 100] {
        let size = measure(env, &bin, n, cfg.runs.min(3));
        rows(n, &size, report);
        detach_100 = median(&size.detach);
        raw.insert(n.to_string(), Value::Array(size.per_run));
    }
    // Linear in the number of uprobes on kernels where each detach waits for an RCU grace period.
    let projected = detach_100 * (FUNCTIONS / 100) as f64;
    if cfg.quick {
        not_run(
            "skipped in --quick mode (projection: 10 x the 100-function detach)",
            detach_100,
            false,
            report,
        );
    } else if projected > 1.5 * LIMIT.as_nanos() as f64 {
        let why = format!(
            "not run: 10 x the 100-function detach exceeds the {} s limit",
            LIMIT.as_secs()
        );
        not_run(&why, detach_100, true, report);
    } else {
        let size = measure(env, &bin, FUNCTIONS, 1);
        rows(FUNCTIONS, &size, report);
        raw.insert(FUNCTIONS.to_string(), Value::Array(size.per_run));
    }
    report.raw("attach", Value::Object(raw));
    Ok(())
}
