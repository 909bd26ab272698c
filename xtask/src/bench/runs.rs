//! One measured run of the `hits` workload under one tool: nothing (unprobed), the bare uprobe
//! floor, an xtrace span capture, bpftrace `count()` or bpftrace `printf` streaming. Every tracer
//! is attached before the workload is told to start, and every run checks how many events the
//! tool actually saw, so a number is never reported for calls a tracer missed silently.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{
    bpftrace,
    prep::Env,
    tracer::{tail, Finished, Stdout, Tracer},
    workload::{Workload, WorkloadOut},
};

pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(120);
pub const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(600);
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    Unprobed,
    /// An empty program on the entry uprobe.
    Floor,
    /// Empty programs on the entry uprobe and the uretprobe: the hooks a span needs.
    FloorReturn,
    /// The hooks plus a clock read on each and one span-sized record at the return (no
    /// per-thread state): the least a span costs in the kernel, a lower bound, not a tracer.
    FloorClock,
    Span,
    /// An xtrace span with its exit probed at the function's `ret` (`--exits ret`), as xtrace
    /// does by default for C++ and Rust functions that call others.
    SpanRet,
    /// An xtrace span with its call's stack taken at entry (`--stacks`): `call_stack` beside
    /// `span_enter`, the caller's return address and a frame-pointer walk (C code, no Python).
    SpanStacks,
    BpftraceCount,
    BpftracePrintf,
}

impl Tool {
    pub const ALL: [Tool; 9] = [
        Self::Unprobed,
        Self::Floor,
        Self::FloorReturn,
        Self::FloorClock,
        Self::Span,
        Self::SpanRet,
        Self::SpanStacks,
        Self::BpftraceCount,
        Self::BpftracePrintf,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::Unprobed => "unprobed call",
            Self::Floor => "floor: empty uprobe",
            Self::FloorReturn => "floor+ret: empty uprobe + uretprobe",
            Self::FloorClock => "span lower bound: floor+ret, 2 clock reads, 1 record",
            Self::Span => "xtrace span",
            Self::SpanRet => "xtrace span, exit at ret (--exits ret)",
            Self::SpanStacks => "xtrace span with its stack (--stacks)",
            Self::BpftraceCount => "bpftrace count()",
            Self::BpftracePrintf => "bpftrace printf",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Self::Unprobed => "unprobed",
            Self::Floor => "floor",
            Self::FloorReturn => "floor_return",
            Self::FloorClock => "floor_clock",
            Self::Span => "xtrace_span",
            Self::SpanRet => "xtrace_span_ret",
            Self::SpanStacks => "xtrace_span_stacks",
            Self::BpftraceCount => "bpftrace_count",
            Self::BpftracePrintf => "bpftrace_printf",
        }
    }

    pub fn needs_bpftrace(self) -> bool {
        matches!(self, Self::BpftraceCount | Self::BpftracePrintf)
    }
}

/// What one run measured.
#[derive(Clone, Debug)]
pub struct RunOut {
    pub work: WorkloadOut,
    /// Events the tool saw (spans, the count, printed lines); `None` for unprobed and the floor.
    pub delivered: Option<u64>,
    /// Events the tool says it lost.
    pub lost: Option<u64>,
}

/// Runs `hits ARGS` once under `tool`; `symbol` is the probed function in `env.hits`.
pub fn run(env: &Env, tool: Tool, symbol: &str, args: &[String]) -> Result<RunOut> {
    match tool {
        Tool::Unprobed => {
            let mut work = Workload::spawn(&env.hits, args)?;
            work.go()?;
            let work = work.finish(WORKLOAD_TIMEOUT)?;
            Ok(RunOut {
                work,
                delivered: None,
                lost: None,
            })
        }
        Tool::Floor | Tool::FloorReturn | Tool::FloorClock => {
            let mut cmd = Command::new(&env.floor);
            cmd.arg(&env.hits).arg(symbol);
            match tool {
                Tool::FloorReturn => _ = cmd.arg("--return"),
                Tool::FloorClock => _ = cmd.arg("--clock"),
                _ => {}
            }
            let mut floor = Tracer::spawn("uprobe_floor", cmd, Stdout::Lines)?;
            floor.wait_for("attached", ATTACH_TIMEOUT)?;
            let mut work = Workload::spawn(&env.hits, args)?;
            work.go()?;
            let work = work.finish(WORKLOAD_TIMEOUT)?;
            floor.close_stdin();
            floor.wait_ok(EXIT_TIMEOUT)?;
            Ok(RunOut {
                work,
                delivered: None,
                lost: None,
            })
        }
        Tool::Span | Tool::SpanRet | Tool::SpanStacks => {
            let mut spec = XtraceSpec::new(&env.hits, args, &[symbol]);
            if tool == Tool::SpanRet {
                spec.flags = vec!["--exits".into(), "ret".into()];
            }
            if tool == Tool::SpanStacks {
                spec.flags = vec!["--stacks".into()];
            }
            let out = xtrace(env, &spec)?;
            let summary = out.summary.context("xtrace wrote no summary")?;
            Ok(RunOut {
                work: out.work,
                delivered: Some(probe_count(&summary, symbol)),
                lost: Some(lost_events(&summary)),
            })
        }
        Tool::BpftraceCount | Tool::BpftracePrintf => bpftrace::run(env, tool, symbol, args),
    }
}

/// An xtrace capture: `[PREFIX...] xtrace --pid PID -u SYMBOL... -o OUT` on a workload.
pub struct XtraceSpec {
    pub workload: PathBuf,
    pub args: Vec<String>,
    pub symbols: Vec<String>,
    /// Other xtrace flags (e.g. `--ranges`).
    pub flags: Vec<String>,
    /// Runs xtrace under this command (e.g. `/usr/bin/time -f %M -o FILE`).
    pub prefix: Vec<String>,
    /// How long xtrace may take to exit after the workload exits; then it is killed.
    pub exit_timeout: Duration,
    /// Keep trace.json after the run (it is deleted otherwise).
    pub keep_outputs: bool,
    /// Extra environment variables for xtrace.
    pub env: Vec<(String, String)>,
    /// With `--live` in `flags`: a curl client reads the live view's event stream from the
    /// attach to the end.
    pub live_client: bool,
}

impl XtraceSpec {
    pub fn new(workload: &Path, args: &[String], symbols: &[&str]) -> Self {
        Self {
            workload: workload.to_owned(),
            args: args.to_vec(),
            symbols: symbols.iter().map(|s| (*s).to_owned()).collect(),
            flags: Vec::new(),
            prefix: Vec::new(),
            exit_timeout: EXIT_TIMEOUT,
            keep_outputs: false,
            env: Vec::new(),
            live_client: false,
        }
    }
}

pub struct XtraceOut {
    pub work: WorkloadOut,
    /// From xtrace's spawn until it printed that every probe is attached (planning, loading and
    /// attaching), timed as bpftrace's attach is.
    pub ready: Duration,
    /// summary.json; `None` when xtrace was killed after `exit_timeout`.
    pub summary: Option<Value>,
    pub finished: Finished,
}

pub fn xtrace(env: &Env, spec: &XtraceSpec) -> Result<XtraceOut> {
    let out_dir = env.tmp.join("xtrace-out");
    if out_dir.exists() {
        fs::remove_dir_all(&out_dir).with_context(|| format!("could not clear {}", out_dir.display()))?;
    }
    let mut work = Workload::spawn(&spec.workload, &spec.args)?;
    let mut cmd = match spec.prefix.split_first() {
        Some((program, rest)) => {
            let mut cmd = Command::new(program);
            cmd.args(rest).arg(&env.xtrace);
            cmd
        }
        None => Command::new(&env.xtrace),
    };
    cmd.arg("--pid").arg(work.pid().to_string());
    for symbol in &spec.symbols {
        cmd.args(["-u", symbol]);
    }
    cmd.args(&spec.flags);
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
    cmd.arg("-o").arg(&out_dir);
    let spawned = Instant::now();
    let mut tracer = Tracer::spawn("xtrace", cmd, Stdout::Lines)?;
    tracer.wait_for("xtrace: attached", ATTACH_TIMEOUT)?;
    let ready = spawned.elapsed();
    let client = match spec.live_client {
        true => Some(live_client(env, &tracer.lines())?),
        false => None,
    };
    work.go()?;
    let work = work.finish(WORKLOAD_TIMEOUT)?;
    let finished = tracer.wait(spec.exit_timeout)?;
    if let Some(mut client) = client {
        // The stream ends with the capture; a client still reading is stopped.
        if super::workload::wait_until(&mut client, Duration::from_secs(5))?.is_none() {
            let _ = client.kill();
            let _ = client.wait();
        }
    }
    let summary = match finished.status {
        None => None,
        Some(status) if !status.success() => bail!("xtrace failed ({status}): {}", tail(&finished.lines)),
        Some(_) => Some(read_summary(&out_dir)?),
    };
    if !spec.keep_outputs {
        let _ = fs::remove_dir_all(&out_dir);
    }
    Ok(XtraceOut {
        work,
        ready,
        summary,
        finished,
    })
}

/// The summary.json xtrace wrote into `out_dir`.
pub fn read_summary(out_dir: &Path) -> Result<Value> {
    let path = out_dir.join("summary.json");
    let text = fs::read_to_string(&path).with_context(|| format!("could not read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// curl reading the live view's `/events` (to /dev/null), the token in the URL xtrace printed
/// first traded for the cookie.
fn live_client(env: &Env, lines: &[String]) -> Result<std::process::Child> {
    let url = lines
        .iter()
        .find_map(|l| l.split_whitespace().find(|w| w.starts_with("http://")))
        .context("xtrace printed no live view URL")?;
    let base = url.split("/?").next().unwrap_or(url);
    let jar = env.tmp.join("live-cookies.txt");
    let traded = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-c"])
        .arg(&jar)
        .arg(url)
        .status()
        .context("could not run curl")?;
    if !traded.success() {
        bail!("curl could not open the live view: {traded}");
    }
    Command::new("curl")
        .args(["-s", "-N", "-o", "/dev/null", "-b"])
        .arg(&jar)
        .arg(format!("{base}/events"))
        .spawn()
        .context("could not run curl")
}

/// `probes[name == symbol].count` in summary.json (0 when absent).
pub fn probe_count(summary: &Value, symbol: &str) -> u64 {
    let probes = summary["probes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    probes
        .iter()
        .filter(|p| p["name"].as_str() == Some(symbol))
        .filter_map(|p| p["count"].as_u64())
        .sum()
}

pub fn lost_events(summary: &Value) -> u64 {
    summary["lost_events"].as_u64().unwrap_or(0)
}
