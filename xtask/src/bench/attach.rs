//! Attach and detach time for many functions: a generated fixture with 1,000 small noinline
//! functions f0..f999 (its main waits for a line, calls each once, exits) is traced with
//! `xtrace --pid PID -u f0 ... -u fN-1` for N = 10, 100 and 1,000. The attach time runs from xtrace's
//! start until it says every probe is attached (planning, loading and attaching: timed as
//! bpftrace's is), beside summary.json's attach_ns (loading and attaching alone); detach_ns comes
//! from summary.json, which also says how xtrace attached (uprobe_multi links, or perf-event uprobes on
//! kernels before 6.6). Detaching perf-event uprobes is slow (each waits for the kernel's uprobe
//! grace periods), so the 1,000-function run is given a bounded time and reported as "> limit" past it.
//! There xtrace exits once its outputs are written and a helper (`xtrace-detach`) removes the
//! uprobes in the background: the rows say how soon xtrace exited after the workload and how long
//! the helper took. `cargo xtask bench --kernel` runs these rows in another kernel (`in_kernel`).
use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::{
    prep::{compile, Env},
    report::{fmt_count, fmt_ns, median, Report, Row, Verdict},
    runs::{self, XtraceSpec},
    Config,
};

pub const FUNCTIONS: usize = 1000;
pub const LIMIT: Duration = Duration::from_secs(240);
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
    /// From xtrace's start until it said it was attached.
    ready_ns: u64,
    /// summary.json's attach_ns: loading and attaching.
    attach_ns: u64,
    /// None past the limit.
    detach_ns: Option<u64>,
    spans: u64,
    /// Seconds from the workload's exit to xtrace's.
    exit_s: f64,
    /// summary.json's attach_mechanism.
    mechanism: String,
    /// How long the background helper took to remove the uprobes after xtrace exited (None: no
    /// helper, or still running at the limit, as `teardown_timed_out` says).
    teardown_ns: Option<u64>,
    teardown_timed_out: bool,
}

/// The pid of the helper xtrace left removing uprobes, from its line
/// `xtrace: removing 600 uprobes in the background (pid 4242)`.
fn helper_pid(lines: &[String]) -> Option<u32> {
    lines.iter().find_map(|line| {
        let rest = line.split("in the background (pid ").nth(1)?;
        rest.strip_suffix(')')?.parse().ok()
    })
}

/// Waits until process `pid` is no longer the removal helper (it exited); the time waited, or
/// None after `limit`.
fn wait_for_helper(pid: u32, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let comm = PathBuf::from(format!("/proc/{pid}/comm"));
    while start.elapsed() < limit {
        match fs::read_to_string(&comm) {
            Ok(name) if name.trim() == "xtrace-detach" => {}
            _ => return Some(start.elapsed()),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn once(env: &Env, bin: &Path, n: usize, limit: Duration) -> Result<Once> {
    let names: Vec<String> = (0..n).map(|i| format!("f{i}")).collect();
    let symbols: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut spec = XtraceSpec::new(bin, &[], &symbols);
    spec.exit_timeout = limit;
    let out = runs::xtrace(env, &spec)?;
    let exit_s = out.finished.waited.as_secs_f64();
    // The next run waits for this one's uprobes to be gone, so runs do not overlap.
    let helper = helper_pid(&out.finished.lines);
    let teardown = helper.map(|pid| wait_for_helper(pid, limit));
    let teardown_ns = teardown.flatten().map(|d| d.as_nanos() as u64);
    let teardown_timed_out = matches!(teardown, Some(None));
    let Some(summary) = out.summary else {
        return Ok(Once {
            ready_ns: out.ready.as_nanos() as u64,
            attach_ns: 0,
            detach_ns: None,
            spans: 0,
            exit_s,
            mechanism: String::new(),
            teardown_ns,
            teardown_timed_out,
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
        ready_ns: out.ready.as_nanos() as u64,
        attach_ns: field("attach_ns")?,
        detach_ns: Some(field("detach_ns")?),
        spans,
        exit_s,
        mechanism: summary["attach_mechanism"].as_str().unwrap_or("?").to_string(),
        teardown_ns,
        teardown_timed_out,
    })
}

/// The runs with one number of functions.
#[derive(Default)]
struct Size {
    /// From xtrace's start until attached.
    attach: Vec<f64>,
    /// Of that, loading and attaching (summary.json's attach_ns).
    loading: Vec<f64>,
    detach: Vec<f64>,
    timed_out: bool,
    /// Seconds from the workload's exit to xtrace's, of the runs that ended.
    exit_s: Vec<f64>,
    /// The background helper's time to remove the uprobes, of the runs that had one.
    teardown: Vec<f64>,
    teardown_timed_out: bool,
    /// How long xtrace, and then its helper, were each given.
    limit: Duration,
    mechanism: String,
    notes: Vec<String>,
    per_run: Vec<Value>,
}

fn measure(env: &Env, bin: &Path, n: usize, runs: usize, limit: Duration) -> Size {
    let mut size = Size {
        limit,
        ..Size::default()
    };
    for i in 0..runs {
        eprintln!("bench: attach/detach {n} functions, run {}/{runs}", i + 1);
        match once(env, bin, n, limit) {
            Ok(Once {
                ready_ns,
                attach_ns: a,
                detach_ns: d,
                spans,
                exit_s,
                mechanism,
                teardown_ns,
                teardown_timed_out,
            }) => {
                let run = json!({"ready_ns": ready_ns, "attach_ns": a, "detach_ns": d, "spans": spans,
                    "xtrace_exit_s": exit_s, "attach_mechanism": mechanism,
                    "background_removal_ns": teardown_ns});
                size.mechanism = mechanism;
                size.teardown.extend(teardown_ns.map(|ns| ns as f64));
                size.teardown_timed_out |= teardown_timed_out;
                if d.is_some() {
                    size.exit_s.push(exit_s);
                }
                size.per_run.push(run);
                match d {
                    Some(d) => {
                        size.attach.push(ready_ns as f64);
                        size.loading.push(a as f64);
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
            let secs = size.limit.as_secs();
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
        let mut notes = size.notes.clone();
        let loading = median(&size.loading);
        if kind == "attach" && loading.is_finite() {
            notes.insert(
                0,
                format!(
                    "from xtrace's start; loading and attaching alone {}",
                    fmt_ns(loading)
                ),
            );
        }
        if !notes.is_empty() {
            row = row.note(notes.join("; "));
        }
        if n == FUNCTIONS {
            row = row.goal(GOAL, Verdict::from_bool(ns.is_finite() && ns < 1e9 && !timed_out));
        }
        report.row(row);
    }
    exit_rows(n, size, report);
}

/// How soon xtrace exited after the workload (the stop: outputs written, programs stopped), and,
/// where uprobes were left to a background helper, how long it took to remove them.
fn exit_rows(n: usize, size: &Size, report: &mut Report) {
    let functions = fmt_count(n as u64);
    let exit = median(&size.exit_s);
    if exit.is_finite() {
        let mut row = Row::new(
            &format!("attach.exit_{n}"),
            format!("xtrace exits after the workload, {functions} functions"),
            fmt_ns(exit * 1e9),
        )
        .data(json!({"seconds": exit, "functions": n}));
        if n == FUNCTIONS {
            row = row.goal(GOAL, Verdict::from_bool(exit < 1.0));
        }
        report.row(row);
    }
    if size.teardown.is_empty() && !size.teardown_timed_out {
        return;
    }
    let what = format!("background removal, {functions} functions (xtrace-detach)");
    let id = format!("attach.removal_{n}");
    let row = if size.teardown_timed_out {
        Row::new(&id, what, format!("> {} s", size.limit.as_secs()))
            .note("the helper was still removing uprobes at the limit")
    } else {
        let ns = median(&size.teardown);
        Row::new(&id, what, fmt_ns(ns))
            .ratio(format!("{}/function", fmt_ns(ns / n as f64)))
            .data(json!({"ns": ns, "ns_per_function": ns / n as f64, "functions": n}))
    };
    report.row(row);
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
    let bin = compile_fixture(&env.dir)?;
    measure_sizes(env, &bin, cfg, LIMIT, report);
    Ok(())
}

/// Writes and compiles the fixture in `dir`; its path.
pub fn compile_fixture(dir: &Path) -> Result<PathBuf> {
    let src = dir.join("funcs.c");
    fs::write(&src, source()).with_context(|| format!("could not write {}", src.display()))?;
    let bin = dir.join("funcs");
    compile(&src, &bin)?;
    Ok(bin)
}

/// The rows for 10, 100 and (unless `--quick` or projected past `limit`) 1,000 functions of the
/// fixture `bin`, each run of xtrace and of its helper given `limit`.
pub fn measure_sizes(env: &Env, bin: &Path, cfg: &Config, limit: Duration, report: &mut Report) {
    let mut raw = serde_json::Map::new();
    let mut detach_100 = f64::NAN;
    for n in [10, 100] {
        let size = measure(env, bin, n, cfg.runs.min(3), limit);
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
    } else if projected > 1.5 * limit.as_nanos() as f64 {
        let why = format!(
            "not run: 10 x the 100-function detach exceeds the {} s limit",
            limit.as_secs()
        );
        not_run(&why, detach_100, true, report);
    } else {
        let size = measure(env, bin, FUNCTIONS, 1, limit);
        rows(FUNCTIONS, &size, report);
        raw.insert(FUNCTIONS.to_string(), Value::Array(size.per_run));
    }
    report.raw("attach", Value::Object(raw));
}
