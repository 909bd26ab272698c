//! `cargo xtask bench [--runs N] [--quick]`: measures xtrace against the bare uprobe floor and
//! bpftrace on this machine, side by side, and judges the project's performance goals. Prints a
//! table on stdout and writes `target/bench/bench.json` (the same rows plus every run's raw numbers).
//! One module per measurement: per_hit, throughput, attach (and attach_bpftrace), sampling, rss,
//! flight, ranges, strings, trace_format, offcpu, python (and python_stacks, python_symbolize), store, gpu_launch; in_kernel runs the
//! attach rows in another kernel. prep builds and installs what is needed; runs, bpftrace, tracer and workload run the processes;
//! report holds the rows and writes the table and the JSON.
mod attach;
mod attach_bpftrace;
mod bpf_stats;
mod bpftrace;
mod flight;
mod gpu_launch;
mod in_kernel;
mod live;
mod offcpu;
mod per_hit;
mod prep;
mod python;
mod python_stacks;
mod python_symbolize;
mod ranges;
mod report;
mod rss;
mod runs;
mod sampling;
mod saturation;
mod store;
mod strings;
mod throughput;
mod trace_format;
mod tracer;
mod workload;

use std::{fs, time::Instant};

use anyhow::Result;
use clap::Args;
use serde_json::json;

use crate::{
    setup,
    util::{BadInput, Workspace},
};
pub use in_kernel::{guest_main, GuestArgs};
use report::Report;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Runs per measurement; the table shows medians.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub runs: u32,
    /// For iterating: a fifth of the calls per run, 1 M instead of 10 M events for the RSS run,
    /// no 1,000-function attach; goals that need the full run are not judged.
    #[arg(long)]
    pub quick: bool,
    /// Run only these measurements (comma-separated); the others' rows are left out.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Part>,
    /// Print the table as Markdown (docs/performance.md's form) instead of aligned text.
    #[arg(long)]
    pub markdown: bool,
    /// Measure the attach rows inside this kernel (a bzImage such as
    /// /boot/vmlinuz-6.1.0-N-amd64) under qemu, beside bpftrace on the same functions; writes
    /// target/bench/bench-kernel.json.
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    PerHit,
    Throughput,
    Attach,
    Sampling,
    Rss,
    Ranges,
    Strings,
    TraceFormat,
    Flight,
    OffCpu,
    Python,
    Store,
    GpuLaunch,
}

/// What every measurement needs to know about the invocation.
pub struct Config {
    pub runs: usize,
    pub quick: bool,
}

impl Config {
    /// Calls per run: `n`, or a fifth of it in quick mode.
    pub fn scale(&self, n: u64) -> u64 {
        if self.quick {
            (n / 5).max(1)
        } else {
            n
        }
    }
}

pub fn run(args: &BenchArgs) -> Result<()> {
    if let Some(path) = &args.kernel {
        if args.only.iter().any(|part| *part != Part::Attach) {
            return Err(BadInput(
                "--kernel measures the attach rows only: leave out --only, or give --only attach".into(),
            )
            .into());
        }
        return in_kernel::run(args, path);
    }
    let started = Instant::now();
    setup::run(setup::Verbosity::ChangesOnly)?;
    let ws = Workspace::locate()?;
    let env = prep::prepare(&ws)?;
    let stats = bpf_stats::StatsOff::take();
    let cfg = Config {
        runs: args.runs as usize,
        quick: args.quick,
    };
    let mut report = Report::default();
    report.machine = prep::machine(&ws, &env);
    report
        .machine
        .insert("bpf_stats_enabled".into(), json!(stats.fact));
    report.config = json!({"runs": cfg.runs, "quick": cfg.quick, "only": format!("{:?}", args.only)})
        .as_object()
        .cloned()
        .unwrap_or_default();

    report.legend = vec![
        format!(
            "Medians of {} run(s) per measurement (throughput, attach: at most 3; RSS, 1,000 functions: 1; sampling: {} pairs).",
            cfg.runs,
            cfg.runs * sampling::PAIRS_PER_RUN
        ),
        "Per-hit cost = ns per call under the tool - ns per call unprobed, same function, same binary."
            .into(),
        "floor / floor+ret = uprobe_floor: empty BPF programs on the entry uprobe / entry + uretprobe."
            .into(),
        "span lower bound = uprobe_floor --clock: floor+ret whose programs also read the clock (entry, return) and submit one span-sized record; it pairs nothing.".into(),
        "Spans (entry + return) are compared with floor+ret, bpftrace's entry probes with floor.".into(),
        "printf / span is per event, whole; beyond the hooks, each tool's cost less that of its cheapest probe on the same hooks (span - floor+ret, printf - count()).".into(),
    ];
    run_parts(&env, &cfg, &args.only, &mut report)?;

    let _ = fs::remove_dir_all(&env.tmp);
    let elapsed = started.elapsed().as_secs_f64();
    report.config.insert("elapsed_s".into(), json!(elapsed));
    let path = env.dir.join("bench.json");
    report.write_json(&path)?;
    println!();
    if args.markdown {
        print!("{}", report.markdown());
    } else {
        report.print_table();
    }
    println!(
        "\nbench: {} run(s) per measurement{}; took {:.0} s; wrote {}",
        cfg.runs,
        if cfg.quick { " (--quick)" } else { "" },
        elapsed,
        path.display()
    );
    Ok(())
}

/// Runs the measurements `only` names (all when empty), in the table's order.
fn run_parts(env: &prep::Env, cfg: &Config, only: &[Part], report: &mut Report) -> Result<()> {
    let wanted = |part: Part| only.is_empty() || only.contains(&part);
    if wanted(Part::PerHit) {
        per_hit::run(env, cfg, report)?;
    }
    if wanted(Part::Throughput) {
        throughput::run(env, cfg, report)?;
        live::run(env, cfg, report);
    }
    if wanted(Part::Attach) {
        attach::run(env, cfg, report)?;
    }
    if wanted(Part::Sampling) {
        sampling::run(env, cfg, report)?;
    }
    if wanted(Part::Strings) {
        strings::run(env, cfg, report)?;
    }
    if wanted(Part::Ranges) {
        ranges::run(env, cfg, report)?;
    }
    if wanted(Part::TraceFormat) {
        trace_format::run(env, cfg, report);
    }
    if wanted(Part::Rss) {
        rss::run(env, cfg, report)?;
    }
    if wanted(Part::Flight) {
        flight::run(env, cfg, report)?;
    }
    if wanted(Part::OffCpu) {
        offcpu::run(env, cfg, report)?;
    }
    if wanted(Part::Python) {
        python::run(env, cfg, report)?;
    }
    if wanted(Part::Store) {
        store::run(env, cfg, report)?;
    }
    if wanted(Part::GpuLaunch) {
        gpu_launch::run(env, cfg, report)?;
    }
    Ok(())
}
