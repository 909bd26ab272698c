//! Off-CPU cost: the `switches` workload (xtask/bench/switches.c: two threads pinned to one CPU
//! handing a token over pipes, two off-CPU waits per round trip, timing its rounds itself in
//! batches) runs bare, under `xtrace --off-cpu -F 1` (sampling at 1 Hz, so that what is added is
//! the scheduler programs'), and bare again while xtrace traces another process (a sleeping
//! `sleep`): the added ns per wait for a traced and for an untraced thread. On a virtual machine
//! the same bare ping-pong runs at about 1.3 µs or about 2 µs a wait from one process to the next
//! (the whole run in one mode: it is not the scheduler, the switches are the same), so one run of
//! each against the other measures the mode, not xtrace: each run of this bench starts each
//! ping-pong (bare, traced, untraced, bpftrace's) `TRIES` times, interleaved, and keeps each one's
//! fastest batch per wait. A mix with 100 µs of work before each hand-off (about 10,000 waits a
//! second) gives the slowdown of a realistic program, and bpftrace's offcputime-style script (a
//! start time per thread at switch-out, the time off CPU summed at switch-in) the same
//! ping-pong's cost beside xtrace's.
//! Each figure is the median over runs of that run's difference to the bare figure of the same
//! run. The `syscalls` workload (xtask/bench/syscalls.c: getppid(2) in 20 timed batches, none
//! blocking, reporting its fastest batch) runs the same three ways: the time the off-CPU programs
//! add to each system call (their raw tracepoint on sys_exit runs at every return of every thread)
//! for a traced and for an untraced thread.
use std::{path::Path, process::Command, time::Duration};

use anyhow::{bail, Context, Result};
use serde_json::json;

use super::{
    prep::{compile, fixture, Env},
    report::{median, Report, Row, Verdict},
    runs::{lost_events, read_summary, ATTACH_TIMEOUT, EXIT_TIMEOUT},
    tracer::{Stdout, Tracer},
    Config,
};

/// Round trips of one bare ping-pong: 100,000 waits, in 20 batches.
const ROUNDS: u64 = 50_000;
/// Starts of each ping-pong (bare, traced, untraced, bpftrace) in one run: each kept at its
/// fastest, so that a run is unlikely to compare one mode of the machine with the other.
const TRIES: usize = 5;
/// Round trips of the mix, each with `MIX_WORK_NS` of work per thread: about 1 s, 10,000 waits.
const MIX_ROUNDS: u64 = 5_000;
const MIX_WORK_NS: u64 = 100_000;
/// System calls of a `syscalls` run, in 20 batches: about 0.25 s bare here.
const SYSCALLS: u64 = 2_000_000;
/// How long a run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// bpftrace's script: per thread of the command (`-c`), the time it switched out; at its switch
/// back in, the time off CPU summed and the wait counted.
const BPFTRACE_SCRIPT: &str = "tracepoint:sched:sched_switch { \
     if (pid == cpid) { @start[tid] = nsecs; } \
     $t = @start[args->next_pid]; \
     if ($t) { @off = sum(nsecs - $t); @waits = count(); delete(@start[args->next_pid]); } }";

/// One run's figures, parsed from the workload's lines.
struct Ran {
    elapsed_ns: f64,
    /// What the figure is divided by: `switches`' off-CPU waits, `syscalls`' calls.
    waits: u64,
    /// Time per wait (per call) in the fastest batch: `switches`' `fastest_batch_ns` over
    /// `batch_waits`; `syscalls` prints only its fastest batch.
    fastest_ns: f64,
}

fn parse(lines: &[String], what: &str) -> Result<Ran> {
    let field = |name: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .with_context(|| format!("{what} printed no `{name}` line: {}", lines.join(" | ")))
    };
    let (elapsed_ns, waits) = (
        field("elapsed_ns ")?,
        field("waits ").or_else(|_| field("calls "))?,
    );
    let fastest_ns = match (field("fastest_batch_ns "), field("batch_waits ")) {
        (Ok(ns), Ok(batch)) if batch > 0.0 => ns / batch,
        _ => elapsed_ns / waits.max(1.0),
    };
    Ok(Ran {
        elapsed_ns,
        waits: waits as u64,
        fastest_ns,
    })
}

/// Keeps in `best` the faster start (by its fastest batch), or the first error: a start that
/// failed fails the run's figure.
fn keep_fastest(best: &mut Option<Result<(Ran, (u64, u64))>>, start: Result<(Ran, (u64, u64))>) {
    match (best.as_ref(), &start) {
        (Some(Err(_)), _) => {}
        (Some(Ok((b, _))), Ok((ran, _))) if b.fastest_ns <= ran.fastest_ns => {}
        _ => *best = Some(start),
    }
}

/// Runs `cmd` to success; its stdout's lines.
fn output(cmd: &mut Command, what: &str) -> Result<Vec<String>> {
    let out = cmd.output().with_context(|| format!("could not run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

fn bare(bin: &Path, args: &[String]) -> Result<Ran> {
    let what = bin.file_name().unwrap_or_default().to_string_lossy();
    parse(&output(Command::new(bin).args(args), &what)?, &what)
}

/// Under `xtrace --off-cpu -F 1`: the run, and the off-CPU intervals xtrace measured and lost.
fn traced(env: &Env, bin: &Path, args: &[String]) -> Result<(Ran, u64, u64)> {
    let out = env.tmp.join("offcpu-traced");
    let mut cmd = Command::new(&env.xtrace);
    cmd.args(["--off-cpu", "-F", "1", "-q", "-o"])
        .arg(&out)
        .arg("--")
        .arg(bin)
        .args(args);
    let ran = parse(
        &output(&mut cmd, "xtrace --off-cpu")?,
        "the workload under xtrace",
    )?;
    let summary = read_summary(&out)?;
    let intervals = summary["off_cpu"]["intervals"].as_u64().unwrap_or(0);
    let lost = lost_events(&summary) + summary["off_cpu"]["lost"].as_u64().unwrap_or(0);
    let _ = std::fs::remove_dir_all(&out);
    Ok((ran, intervals, lost))
}

/// Bare, while xtrace traces the off-CPU time of a sleeping process.
fn beside(env: &Env, bin: &Path, args: &[String]) -> Result<Ran> {
    let mut sleeper = Command::new("sleep")
        .arg("600")
        .spawn()
        .context("could not start sleep")?;
    let out = env.tmp.join("offcpu-beside");
    let mut cmd = Command::new(&env.xtrace);
    cmd.args(["--off-cpu", "-F", "1", "-o"])
        .arg(&out)
        .args(["--pid", &sleeper.id().to_string()]);
    let ran = (|| {
        let mut tracer = Tracer::spawn("xtrace", cmd, Stdout::Lines)?;
        tracer.wait_for("xtrace: attached", ATTACH_TIMEOUT)?;
        let ran = bare(bin, args)?;
        tracer.interrupt()?;
        tracer.wait_ok(EXIT_TIMEOUT)?;
        Ok(ran)
    })();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let _ = std::fs::remove_dir_all(&out);
    ran
}

/// Under bpftrace's script: the run, and the waits bpftrace counted.
fn bpftrace(bpftrace: &Path, bin: &Path, args: &[String]) -> Result<(Ran, u64)> {
    let command = std::iter::once(bin.display().to_string())
        .chain(args.iter().cloned())
        .collect::<Vec<_>>();
    let mut cmd = Command::new(bpftrace);
    cmd.arg("-c").arg(command.join(" ")).args(["-e", BPFTRACE_SCRIPT]);
    let tracer = Tracer::spawn("bpftrace", cmd, Stdout::Lines)?;
    let done = tracer.wait_ok(RUN_TIMEOUT)?;
    let ran = parse(&done.lines, "switches under bpftrace")?;
    let waits = super::bpftrace::map_count(&done.lines, "waits").unwrap_or(0);
    Ok((ran, waits))
}

/// bpftrace 0.17 finds tracepoints through tracefs; where it is not mounted (xtrace's programs use
/// BTF tracepoints, which need none), it is mounted for the runs and unmounted when dropped.
struct Tracefs {
    mounted: bool,
}

impl Tracefs {
    const AT: &'static str = "/sys/kernel/tracing";

    fn ensure() -> Result<Self> {
        if Path::new(Self::AT).join("events").is_dir() {
            return Ok(Tracefs { mounted: false });
        }
        let status = Command::new("mount")
            .args(["-t", "tracefs", "tracefs", Self::AT])
            .status()
            .context("could not run mount")?;
        if !status.success() {
            bail!(
                "tracefs is not mounted at {} and mounting it failed ({status})",
                Self::AT
            );
        }
        eprintln!(
            "bench: mounted tracefs at {} for bpftrace; unmounted after",
            Self::AT
        );
        Ok(Tracefs { mounted: true })
    }
}

impl Drop for Tracefs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(Self::AT).status();
        }
    }
}

/// The runs of one measurement: each run's figure against the bare run beside it.
#[derive(Default)]
struct Series {
    added: Vec<f64>,
    notes: Vec<u64>,
    lost: u64,
    errors: Vec<String>,
}

impl Series {
    fn add(&mut self, figure: Result<f64>) {
        match figure {
            Ok(v) => self.added.push(v),
            Err(e) => self.errors.push(format!("{e:#}")),
        }
    }
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    let bin = env.dir.join("switches");
    compile(&fixture("switches.c"), &bin)?;
    let ping = vec![cfg.scale(ROUNDS).to_string(), "0".to_string()];
    let mix = vec![cfg.scale(MIX_ROUNDS).to_string(), MIX_WORK_NS.to_string()];
    let calls_bin = env.dir.join("syscalls");
    compile(&fixture("syscalls.c"), &calls_bin)?;
    let calls = (calls_bin.as_path(), vec![cfg.scale(SYSCALLS).to_string()]);
    let runs = cfg.runs.max(5);
    let tracefs = env.bpftrace.as_ref().ok().map(|_| Tracefs::ensure());
    let (mut traced_s, mut beside_s, mut mix_s, mut bpf_s) = <(Series, Series, Series, Series)>::default();
    let mut per_call = <(Series, Series)>::default();
    let per_wait = |with: &Ran, without: &Ran| with.fastest_ns - without.fastest_ns;
    let with_bpftrace = match (&env.bpftrace, &tracefs) {
        (Ok(path), Some(Ok(_))) => Some(path),
        _ => None,
    };
    for run in 0..runs {
        eprintln!("bench: off-cpu run {}/{runs}", run + 1);
        let [mut base, mut t, mut u, mut b] = [None, None, None, None];
        for _ in 0..TRIES {
            keep_fastest(&mut base, bare(&bin, &ping).map(|ran| (ran, (0, 0))));
            keep_fastest(&mut t, traced(env, &bin, &ping).map(|(ran, i, l)| (ran, (i, l))));
            keep_fastest(&mut u, beside(env, &bin, &ping).map(|ran| (ran, (0, 0))));
            if let Some(path) = with_bpftrace {
                keep_fastest(&mut b, bpftrace(path, &bin, &ping).map(|(ran, w)| (ran, (w, 0))));
            }
        }
        let base = base.context("no bare run")??.0;
        let t = t.context("no traced run")?.map(|(ran, (intervals, lost))| {
            traced_s.notes.push(intervals);
            traced_s.lost += lost;
            per_wait(&ran, &base)
        });
        traced_s.add(t);
        beside_s.add(
            u.context("no untraced run")?
                .map(|(ran, _)| per_wait(&ran, &base)),
        );
        if let Some(b) = b {
            let b = b.map(|(ran, (waits, _))| {
                bpf_s.notes.push(waits);
                per_wait(&ran, &base)
            });
            bpf_s.add(b);
        }
        let mix_base = bare(&bin, &mix)?;
        let m = traced(env, &bin, &mix).map(|(ran, _, lost)| {
            mix_s.lost += lost;
            (ran.elapsed_ns / mix_base.elapsed_ns - 1.0) * 100.0
        });
        mix_s.add(m);
        syscall_run(env, (calls.0, &calls.1), &mut per_call)?;
    }
    let no_bpftrace = match (&env.bpftrace, &tracefs) {
        (Err(why), _) => Some(why.clone()),
        (_, Some(Err(e))) => Some(format!("{e:#}")),
        _ => None,
    };
    let series = [&traced_s, &beside_s, &mix_s, &bpf_s, &per_call.0, &per_call.1];
    rows(cfg, series, no_bpftrace.as_ref(), report);
    Ok(())
}

/// One run of `syscalls`: bare, traced, and bare beside a traced process; the time each adds per
/// system call goes to `traced` and `untraced`.
fn syscall_run(
    env: &Env,
    (bin, args): (&Path, &[String]),
    (traced_s, untraced_s): &mut (Series, Series),
) -> Result<()> {
    let per_call =
        |with: &Ran, without: &Ran| (with.elapsed_ns - without.elapsed_ns) / without.waits.max(1) as f64;
    let base = bare(bin, args)?;
    let t = traced(env, bin, args).map(|(ran, intervals, lost)| {
        traced_s.notes.push(intervals);
        traced_s.lost += lost;
        per_call(&ran, &base)
    });
    traced_s.add(t);
    untraced_s.add(beside(env, bin, args).map(|ran| per_call(&ran, &base)));
    Ok(())
}

/// The rows' (key, what, goal), in the order `run` passes their series; a goal in ns, or in
/// percent for the mix (index 2).
const SPECS: [(&str, &str, Option<f64>); 6] = [
    (
        "offcpu.traced_ns_per_wait",
        "off-CPU: added time per wait, traced thread (ping-pong)",
        Some(1000.0),
    ),
    (
        "offcpu.untraced_ns_per_wait",
        "off-CPU: added time per wait, untraced thread (ping-pong)",
        Some(200.0),
    ),
    (
        "offcpu.mix_slowdown",
        "off-CPU: slowdown of a mix (100 µs of work per wait)",
        Some(3.0),
    ),
    (
        "offcpu.bpftrace_ns_per_wait",
        "bpftrace offcputime-style script: added time per wait",
        None,
    ),
    (
        "offcpu.traced_ns_per_syscall",
        "off-CPU: added time per system call, traced thread (getppid)",
        Some(TRACED_SYSCALL_GOAL_NS),
    ),
    (
        "offcpu.untraced_ns_per_syscall",
        "off-CPU: added time per system call, untraced thread (getppid)",
        Some(UNTRACED_SYSCALL_GOAL_NS),
    ),
];

/// The goals per system call. Every return of every thread runs `off_cpu_return` once the
/// programs are attached (and the kernel takes its slower system-call exit for the tracepoint);
/// an untraced thread's run ends at its first read (its process's `SAMPLE_PID_HINTS` byte is 0), a
/// traced one's after two
/// fields of its storage are read: tens of ns each, which these bound with room for the noise.
const TRACED_SYSCALL_GOAL_NS: f64 = 100.0;
const UNTRACED_SYSCALL_GOAL_NS: f64 = 50.0;

/// The rows: (key, what, unit, goal) per series, in the order `run` passes them.
fn rows(cfg: &Config, series: [&Series; 6], no_bpftrace: Option<&String>, report: &mut Report) {
    for (i, ((key, what, goal), s)) in SPECS.into_iter().zip(series).enumerate() {
        if let (3, Some(why)) = (i, no_bpftrace) {
            report.row(Row::new(key, what, "-").note(why.clone()));
            continue;
        }
        if s.added.is_empty() {
            report.row(Row::new(key, what, "error").note(s.errors.join("; ")));
            continue;
        }
        let value = median(&s.added);
        let percent = i == 2;
        let shown = if percent {
            format!("{value:+.2}%")
        } else {
            format!("{value:.0} ns")
        };
        let verdict = match goal {
            Some(goal) if !cfg.quick && s.errors.is_empty() => {
                Verdict::from_bool(value < goal && s.lost == 0)
            }
            _ => Verdict::NotApplicable,
        };
        let goal_text = goal.map_or_else(
            || "-".to_string(),
            |g| {
                if percent {
                    format!("< {g}%, no loss")
                } else {
                    format!("< {g} ns, no loss")
                }
            },
        );
        let runs: Vec<String> = s
            .added
            .iter()
            .map(|v| {
                if percent {
                    format!("{v:+.1}%")
                } else {
                    format!("{v:.0}")
                }
            })
            .collect();
        // The ping-pong rows (not the mix's, nor the system calls') keep each start's fastest.
        let each = match i {
            0 | 1 | 3 => format!(" (each the fastest of {TRIES} starts)"),
            _ => String::new(),
        };
        let mut note = format!(
            "median of {} runs{each} against the bare run beside each: {}",
            s.added.len(),
            runs.join(" ")
        );
        match i {
            0 | 4 => note.push_str(&format!(
                "; xtrace measured {} intervals a run (median); lost {}",
                median_u64(&s.notes),
                s.lost
            )),
            2 => note.push_str(&format!("; lost {}", s.lost)),
            3 => note.push_str(&format!(
                "; bpftrace counted {} waits a run (median)",
                median_u64(&s.notes)
            )),
            _ => {}
        }
        if !s.errors.is_empty() {
            note.push_str(&format!(
                "; {} run(s) failed: {}",
                s.errors.len(),
                s.errors.join("; ")
            ));
        }
        report.row(
            Row::new(key, what, shown)
                .goal(goal_text, verdict)
                .note(note)
                .data(json!({"median": value, "runs": s.added, "lost": s.lost, "counted": s.notes})),
        );
    }
}

fn median_u64(values: &[u64]) -> u64 {
    let as_f64: Vec<f64> = values.iter().map(|&v| v as f64).collect();
    let m = median(&as_f64);
    if m.is_finite() {
        m as u64
    } else {
        0
    }
}
