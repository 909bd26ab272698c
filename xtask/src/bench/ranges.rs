//! Range cost through xtrace's tool library: the `ranges` workload (xtask/bench/ranges.c) makes
//! push/pop pairs through `xtrace_range_push`/`_pop`, untraced (a semaphore check each), under the
//! floor (uprobe_floor: empty uprobes on the two 1-byte-nop USDT sites, semaphores raised) and under
//! `xtrace --ranges --pid`. Cost per pair = ns per pair under the tool - ns per pair untraced; runs
//! are interleaved.
//!
//! xtrace hooks only `range_pop`, which carries the start the library keeps at the push. That
//! keeping (a clock read and a thread-local entry) also runs under the floor, whose `range_pop`
//! semaphore is raised; it is measured as the floor on `range_pop` alone minus the floor on
//! `range_push` alone (which keeps nothing), and the ratio is to the floor without it: two bare
//! hits.
use std::{path::Path, process::Command};

use anyhow::{Context, Result};
use serde_json::json;

use super::{
    per_hit::finite,
    prep::{compile_with, fixture, Env},
    report::{fmt_count, fmt_ns, median, Report, Row, Verdict},
    runs::{self, XtraceSpec, ATTACH_TIMEOUT, EXIT_TIMEOUT, WORKLOAD_TIMEOUT},
    tracer::{Stdout, Tracer},
    workload::Workload,
    Config,
};

/// Pairs per run: about a second untraced and under each tracer.
const UNTRACED_PAIRS: u64 = 100_000_000;
const TRACED_PAIRS: u64 = 500_000;

/// The USDT probes one pair fires, and each alone.
const SITES: &str = "usdt:xtrace:range_push,xtrace:range_pop";
const PUSH_SITE: &str = "usdt:xtrace:range_push";
const POP_SITE: &str = "usdt:xtrace:range_pop";

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    let tool_dir = env.xtrace.parent().context("the xtrace binary has a directory")?;
    let tool = tool_dir.join("libxtrace_tool.so");
    let bin = env.dir.join("ranges");
    let include = fixture("../../xtrace/tool/include");
    let extra = [
        format!("-I{}", include.display()),
        format!("-L{}", tool_dir.display()),
        "-lxtrace_tool".into(),
        format!("-Wl,-rpath,{}", tool_dir.display()),
        // DT_RPATH, not DT_RUNPATH: `cargo xtask` runs with cargo's LD_LIBRARY_PATH, which would
        // otherwise pick the debug build's library over the release one the floor attaches to.
        "-Wl,--disable-new-dtags".into(),
    ];
    compile_with(&fixture("ranges.c"), &bin, &extra)?;
    let times = measure(env, cfg, &bin, &tool)?;
    report_times(cfg, report, &times);
    Ok(())
}

/// The ns per pair of each run, untraced and under each tracer, and what xtrace's runs missed.
#[derive(Default)]
struct Times {
    untraced: Vec<f64>,
    floor: Vec<f64>,
    push_only: Vec<f64>,
    pop_only: Vec<f64>,
    traced: Vec<f64>,
    missed: Vec<String>,
}

/// Runs the workload `bin` untraced, under the floor (on both sites and on each alone, through
/// the tool library `tool`) and under xtrace, `cfg.runs` times interleaved.
fn measure(env: &Env, cfg: &Config, bin: &Path, tool: &Path) -> Result<Times> {
    let (untraced_n, traced_n) = (cfg.scale(UNTRACED_PAIRS), cfg.scale(TRACED_PAIRS));
    let mut times = Times::default();
    for run in 0..cfg.runs {
        eprintln!("bench: ranges run {}/{}", run + 1, cfg.runs);
        let mut work = Workload::spawn(bin, &[untraced_n.to_string()])?;
        work.go()?;
        times.untraced.push(work.finish(WORKLOAD_TIMEOUT)?.ns_per_call);

        // Like xtrace --pid: the workload has mapped the library when the floor attaches.
        for (sites, into) in [
            (SITES, &mut times.floor),
            (PUSH_SITE, &mut times.push_only),
            (POP_SITE, &mut times.pop_only),
        ] {
            let mut work = Workload::spawn(bin, &[traced_n.to_string()])?;
            let mut cmd = Command::new(&env.floor);
            cmd.arg(tool).arg(sites);
            let mut tracer = Tracer::spawn("uprobe_floor", cmd, Stdout::Lines)?;
            tracer.wait_for("attached", ATTACH_TIMEOUT)?;
            work.go()?;
            into.push(work.finish(WORKLOAD_TIMEOUT)?.ns_per_call);
            tracer.close_stdin();
            tracer.wait_ok(EXIT_TIMEOUT)?;
        }

        let spec = XtraceSpec {
            flags: vec!["--ranges".into()],
            ..XtraceSpec::new(bin, &[traced_n.to_string()], &[])
        };
        let out = runs::xtrace(env, &spec)?;
        times.traced.push(out.work.ns_per_call);
        let summary = out.summary.context("xtrace wrote no summary")?;
        let seen = summary["ranges"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["name"] == "step"))
            .and_then(|r| r["count"].as_u64())
            .unwrap_or(0);
        if seen != traced_n || runs::lost_events(&summary) > 0 {
            times.missed.push(format!(
                "saw {} of {} ranges",
                fmt_count(seen),
                fmt_count(traced_n)
            ));
        }
    }
    Ok(times)
}

/// The raw times and the rows: untraced, floor, and xtrace against the floor.
fn report_times(cfg: &Config, report: &mut Report, times: &Times) {
    let Times {
        untraced,
        floor,
        push_only,
        pop_only,
        traced,
        missed,
    } = times;
    let base = median(untraced);
    let keeping = (median(pop_only) - median(push_only)).max(0.0);
    let floor_cost = median(floor) - base - keeping;
    let traced_cost = median(traced) - base;
    let ratio = traced_cost / floor_cost;
    report.raw(
        "ranges",
        json!({"untraced_ns_per_pair": untraced, "floor_ns_per_pair": floor,
               "floor_push_only_ns_per_pair": push_only, "floor_pop_only_ns_per_pair": pop_only,
               "traced_ns_per_pair": traced}),
    );
    let verdict = |pass: bool| {
        if cfg.quick {
            Verdict::NotApplicable
        } else {
            Verdict::from_bool(pass)
        }
    };
    report.row(
        Row::new(
            "ranges.untraced",
            "range push+pop, untraced (2 semaphore checks)",
            fmt_ns(base),
        )
        .goal("< 10 ns", verdict(base < 10.0))
        .data(json!({"ns_per_pair": base})),
    );
    report.row(
        Row::new(
            "ranges.floor",
            "range push+pop: floor (empty uprobes, 2 nop USDT sites)",
            fmt_ns(floor_cost),
        )
        .note(format!(
            "without the library's start keeping ({} per pair), which xtrace's one hook needs",
            fmt_ns(keeping)
        ))
        .data(json!({"ns_per_pair": floor_cost, "start_keeping_ns_per_pair": keeping})),
    );
    let mut row = Row::new(
        "ranges.traced",
        "range push+pop: xtrace --ranges (hooks range_pop only)",
        fmt_ns(traced_cost),
    )
    .ratio(format!("{ratio:.2}x floor"))
    .goal("≤ 1.20x floor", verdict(floor_cost > 0.0 && ratio <= 1.2))
    .data(json!({"ns_per_pair": traced_cost, "ratio_to_floor": finite(ratio)}));
    row = row.note(if missed.is_empty() {
        "every range delivered, 0 lost".to_string()
    } else {
        format!("runs that missed ranges: {}", missed.join("; "))
    });
    report.row(row);
}
