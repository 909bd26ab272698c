//! `cargo xtask bench --kernel PATH`: the attach rows in another kernel, under qemu, beside
//! bpftrace on the same functions. Kernels before 6.6 have no uprobe_multi: xtrace attaches one
//! perf-event uprobe per hook there, exits once its outputs are written, and leaves the removal to
//! a background helper; the rows say how long attaching took, how soon xtrace exited, how long the
//! helper took, and how long bpftrace took to attach and to exit after Ctrl-C.
//!
//! The host builds everything (the release xtrace, the fixture) and boots the guest with the
//! kernel matrix's plan mechanism (`kernel::boot_with_plan`); inside, this same xtask binary runs
//! `bench-guest` ([`guest_main`]), which prints its report as one JSON line on the console. The
//! host reads it back, prints the table and writes `target/bench/bench-kernel.json`.
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};

use super::{attach, attach_bpftrace, prep, report::Report, BenchArgs, Config};
use crate::{kernel, setup, util::Workspace};

/// The console line that carries the guest's report.
const REPORT_LINE: &str = "kmatrix: bench-report ";
/// How long xtrace, its helper and bpftrace each get per run in the guest: removing 2,000
/// perf-event uprobes under software emulation takes minutes.
const GUEST_LIMIT: Duration = Duration::from_secs(600);
/// How long the whole guest run may take.
const GUEST_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// `cargo xtask bench-guest`: what the guest runs (hidden; `bench --kernel` writes its command).
#[derive(Debug, Args)]
pub struct GuestArgs {
    /// The release xtrace, on the guest's tmpfs.
    #[arg(long)]
    pub xtrace: PathBuf,
    /// The compiled many-functions fixture, on the guest's tmpfs.
    #[arg(long)]
    pub funcs: PathBuf,
    #[arg(long)]
    pub runs: u32,
    #[arg(long)]
    pub quick: bool,
}

/// Runs the attach rows inside the guest and prints the report as one console line.
pub fn guest_main(args: &GuestArgs) -> Result<()> {
    let dir = std::env::temp_dir().join("xtrace-bench");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).with_context(|| format!("could not create {}", tmp.display()))?;
    let env = prep::Env {
        xtrace: args.xtrace.clone(),
        floor: PathBuf::new(),
        hits: PathBuf::new(),
        bpftrace: prep::bpftrace_installed(),
        dir,
        tmp,
    };
    let cfg = Config {
        runs: args.runs as usize,
        quick: args.quick,
    };
    let mut report = Report::default();
    report.machine = prep::machine_facts(&env);
    attach::measure_sizes(&env, &args.funcs, &cfg, GUEST_LIMIT, &mut report);
    attach_bpftrace::run(&env, &args.funcs, &cfg, GUEST_LIMIT, &mut report);
    println!("{REPORT_LINE}{}", report.to_json());
    Ok(())
}

/// The host's side: checks `path` first, builds, boots the guest and prints what it measured.
pub fn run(args: &BenchArgs, path: &Path) -> Result<()> {
    let guest = kernel::GuestKernel::open(path)?;
    kernel::require_qemu()?;
    setup::run(setup::Verbosity::ChangesOnly)?;
    let ws = Workspace::locate()?;
    let env = prep::prepare(&ws)?;
    let funcs = attach::compile_fixture(&env.dir)?;
    let xtask = std::env::current_exe().context("could not find the xtask binary")?;
    let mut plan = String::from("# Written by `cargo xtask bench --kernel`; sourced by guest-init.sh.\n");
    for file in [&env.xtrace, &funcs] {
        plan.push_str(&format!("onto_tmpfs {}\n", kernel::quoted(file)?));
    }
    plan.push_str(&format!(
        "{} bench-guest --xtrace {} --funcs {} --runs {}{}\necho \"kmatrix: bench-exit $?\"\n",
        kernel::quoted(&xtask)?,
        kernel::quoted(&env.xtrace)?,
        kernel::quoted(&funcs)?,
        args.runs,
        if args.quick { " --quick" } else { "" }
    ));
    let dir = ws.target.join("bench").join("kernel");
    let boot = kernel::boot_with_plan(&guest, &dir, &plan, GUEST_TIMEOUT)?;
    let Some(doc) = boot
        .lines
        .iter()
        .find_map(|l| l.trim_end_matches('\r').strip_prefix(REPORT_LINE))
    else {
        let why = boot.error.as_deref().unwrap_or("it printed no report");
        bail!("the bench in kernel {} did not finish: {why}", guest.release);
    };
    let doc: Value = serde_json::from_str(doc).context("the guest's bench report is not JSON")?;
    let mut report = Report::from_json(&doc)?;
    report
        .machine
        .insert("guest".into(), json!(format!("qemu, {}", boot.accel)));
    let host = prep::machine(&ws, &env);
    report.machine.insert("xtrace".into(), host["xtrace"].clone());
    report.legend = vec![
        "Inside the guest kernel, under qemu. Medians of at most 3 runs (1,000 functions: 1 run; bpftrace: 1 run per size).".into(),
        "Each function has a uprobe and a uretprobe. xtrace exits once its outputs are written; on kernels without uprobe_multi a helper (xtrace-detach) removes the uprobes in the background, timed from xtrace's exit until it is gone.".into(),
        "bpftrace counts the same hooks and removes its uprobes before it exits: its exit is timed from Ctrl-C.".into(),
    ];
    let out = ws.target.join("bench").join("bench-kernel.json");
    report.write_json(&out)?;
    println!();
    if args.markdown {
        print!("{}", report.markdown());
    } else {
        report.print_table();
    }
    println!("\nbench: in kernel {}; wrote {}", guest.release, out.display());
    Ok(())
}
