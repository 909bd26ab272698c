//! The per-call cost of `--stacks` with Python frames: `pyspin.py calls` calls pycall.c's
//! `pyb_call` (a shared library loaded with ctypes, its first instruction a `nop` the kernel
//! emulates) in a loop DEPTH Python frames deep, unprobed, traced (`-u LIB:pyb_call`) and traced
//! with its stack (`--stacks`), runs interleaved. The cost is the median ns per call with
//! `--stacks` less the median traced without: the `call_stack` program, its Python walk and what
//! user space does for it on the traced thread's time. Both traced runs carry `--overhead`, so
//! the row also gives `call_stack`'s own kernel time per call (its clock reads are in both), and
//! a 256M ring buffer, so that no event is lost.
use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::{
    prep::{compile_with, fixture, Env},
    python::PYTHON,
    report::{fmt_count, fmt_ns, median, Report, Row, Verdict},
    runs::{self, lost_events, probe_count, XtraceSpec, WORKLOAD_TIMEOUT},
    workload::Workload,
    Config,
};
use std::path::Path;

/// Python frames on the stack at each call: `<module>`, `main`, 7 `deep` and `loop`.
const DEPTH: u32 = 10;

/// Calls per run: about a second under `--stacks` here.
const CALLS: u64 = 200_000;

/// The ring buffer of both traced runs: with the default 16M, a busy 2-CPU VM lost up to a third
/// of the `--stacks` events (ring full), and a lost event is user-space work not done.
const BUFFER: &str = "256M";

const TOOLS: [&str; 3] = ["unprobed", "span", "stacks"];

/// One run's ns per call, and for the traced runs summary.json.
fn one(env: &Env, tool: &str, args: &[String], spec: &str) -> Result<(f64, Option<Value>)> {
    let python = Path::new(PYTHON);
    if tool == "unprobed" {
        let mut work = Workload::spawn(python, args)?;
        work.go()?;
        return Ok((work.finish(WORKLOAD_TIMEOUT)?.ns_per_call, None));
    }
    let mut x = XtraceSpec::new(python, args, &[spec]);
    x.flags = vec!["--overhead".into(), "--buffer-size".into(), BUFFER.into()];
    if tool == "stacks" {
        x.flags.push("--stacks".into());
    }
    let out = runs::xtrace(env, &x)?;
    let summary = out.summary.context("xtrace wrote no summary")?;
    let calls = out.work.calls;
    let seen = probe_count(&summary, "pyb_call");
    anyhow::ensure!(
        seen == calls && lost_events(&summary) == 0,
        "xtrace saw {} of {} pyb_call calls, {} events lost",
        fmt_count(seen),
        fmt_count(calls),
        lost_events(&summary)
    );
    Ok((out.work.ns_per_call, Some(summary)))
}

/// `call_stack`'s kernel ns per run, and the call sites summary.json gives `pyb_call`.
fn stacks_facts(summary: &Value) -> (f64, Vec<String>) {
    let kernel = summary["overhead"]
        .as_array()
        .and_then(|o| o.iter().find(|p| p["name"] == "call_stack"))
        .and_then(|p| p["ns_per_run"].as_f64())
        .unwrap_or(f64::NAN);
    let probes = summary["probes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let sites = probes
        .iter()
        .filter(|p| p["name"] == "pyb_call")
        .flat_map(|p| p["call_sites"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s["site"].as_str().map(str::to_owned))
        .collect();
    (kernel, sites)
}

pub fn run(env: &Env, cfg: &Config, script: &Path, report: &mut Report) -> Result<()> {
    let lib = env.dir.join("libpycall.so");
    let flags = ["-shared".to_owned(), "-fPIC".to_owned()];
    compile_with(&fixture("pycall.c"), &lib, &flags)?;
    let n = cfg.scale(CALLS);
    let args: Vec<String> = vec![
        script.display().to_string(),
        "calls".into(),
        lib.display().to_string(),
        n.to_string(),
        DEPTH.to_string(),
    ];
    let spec = format!("{}:pyb_call", lib.display());
    let mut ns: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let (mut kernel, mut sites, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..cfg.runs {
        for tool in TOOLS {
            eprintln!(
                "bench: Python --stacks {tool} ({} calls), run {}/{}",
                fmt_count(n),
                i + 1,
                cfg.runs
            );
            match one(env, tool, &args, &spec) {
                Ok((v, summary)) => {
                    ns.entry(tool).or_default().push(v);
                    if let Some(s) = summary.filter(|_| tool == "stacks") {
                        let (k, named) = stacks_facts(&s);
                        kernel.push(k);
                        sites.extend(named);
                    }
                }
                Err(e) => {
                    eprintln!("bench: run failed: {e:#}");
                    errors.push(format!("{tool}: {e:#}"));
                }
            }
        }
    }
    let med = |tool: &str| ns.get(tool).map_or(f64::NAN, |v| median(v));
    let (base, span, stacks) = (med("unprobed"), med("span"), med("stacks"));
    let cost = stacks - span;
    sites.sort();
    sites.dedup();
    let python_site = sites.iter().any(|s| s.starts_with("loop (pyspin.py:"));
    let verdict = match (cost.is_finite(), python_site) {
        (false, _) => Verdict::NotApplicable,
        (true, false) => Verdict::Fail,
        (true, true) => Verdict::from_bool(cost <= 3000.0),
    };
    let mut notes = vec![
        format!(
            "span without it {} over unprobed ({} a call)",
            fmt_ns(span - base),
            fmt_ns(base)
        ),
        format!("call_stack's kernel time {} a call", fmt_ns(median(&kernel))),
        format!(
            "call sites: {}",
            if sites.is_empty() {
                "none".into()
            } else {
                sites.join(", ")
            }
        ),
    ];
    if !errors.is_empty() {
        notes.push(format!("failed runs: {}", errors.join("; ")));
    }
    report.row(
        Row::new(
            "python.stacks_per_call",
            format!("--stacks per call, {DEPTH} Python frames deep (ctypes call, python3.11)"),
            fmt_ns(cost),
        )
        .note(notes.join("; "))
        .goal("≤ 3µs", verdict)
        .data(json!({"ns_per_call_added": cost, "depth": DEPTH, "calls": n,
            "unprobed_ns_per_call": base, "span_ns_per_call": span, "stacks_ns_per_call": stacks,
            "call_stack_kernel_ns": kernel, "call_sites": sites, "runs_ns_per_call": ns,
            "errors": errors})),
    );
    Ok(())
}
