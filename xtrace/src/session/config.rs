//! What one recording is asked to do, as the command line decided it: the session's one input.
//! Plain data, built by `cli::record` from the parsed flags; the library never sees clap's types.
use std::{ffi::OsString, path::PathBuf, time::Duration};

use crate::{
    pipeline::warnings::WarnRule,
    probes::{entry::EntryMode, exits::ExitMode, ranges::Wanted},
};

/// The processes to trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetChoice {
    /// Running processes (`--pid`), each once.
    Pids(Vec<u32>),
    /// A command to launch and trace until it exits: the program and its arguments.
    Command(Vec<OsString>),
    /// Every process that maps a probed file (`-a`).
    SystemWide,
}

/// How often GPUs are read through NVML.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuPeriod {
    Off,
    Every(Duration),
}

/// When the capture's window begins (`--start-at`): on the wall clock, so that hosts that share
/// no clock but NTP's capture the same window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// At this CLOCK_REALTIME time, in ns since the Unix epoch.
    At { realtime_ns: u64 },
    /// At the next multiple of this period, counted from the Unix epoch, after xtrace starts.
    Every { period_ns: u64 },
}

/// `--flight`: keep the last stretch of events in memory, written out on a trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flight {
    /// `--flight`: the window kept, in ns.
    pub window_ns: u64,
    /// `--flight-size`: the bytes it may hold, snapshots being written included.
    pub size_bytes: u64,
    /// `--flight-after`: how long recording goes on after a trigger before the window is written.
    pub after_ns: u64,
    /// `--flight-trigger warn-over`: a span over its `--warn-over` limit triggers too.
    pub on_warn_over: bool,
}

/// One recording's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub targets: TargetChoice,
    /// Only these threads (`--tid`); empty for all.
    pub tids: Vec<u32>,
    /// `-u` specs, as written.
    pub uprobes: Vec<String>,
    /// `-U` specs, as written.
    pub usdt: Vec<String>,
    /// `--cuda`.
    pub cuda: bool,
    /// `--inject`: load the tool library into each `--pid` process with ptrace.
    pub inject: bool,
    /// `--mpi`.
    pub mpi: bool,
    /// The range sources the range flags ask for; None without any.
    pub ranges: Option<Wanted>,
    /// `--gpu-metrics`; None leaves it to whether CUDA calls are traced.
    pub gpu_metrics: Option<GpuPeriod>,
    /// `-F`; None leaves it to whether any probe is asked for.
    pub freq: Option<u64>,
    /// Bytes of user stack copied with each CPU sample.
    pub user_stack: u32,
    /// Whether processes the sampled ones start are sampled too (not `--no-inherit`).
    pub inherit: bool,
    /// Whether samples carry Python frames (not `--no-python`).
    pub python: bool,
    /// `--stacks`: each traced call's stack is recorded at its entry.
    pub stacks: bool,
    pub exits: ExitMode,
    pub entry: EntryMode,
    pub max_probes: usize,
    /// `--debug-dir`s, searched before the default ones.
    pub debug_dirs: Vec<PathBuf>,
    /// `--min-duration`, in nanoseconds.
    pub min_duration_ns: Option<u64>,
    pub warn_over: Vec<WarnRule>,
    /// `--off-cpu[=MIN]`, in nanoseconds: waits off CPU are measured, those of at least MIN
    /// with their whole stack (None: not measured).
    pub off_cpu_ns: Option<u64>,
    /// `--no-off-cpu`: off-CPU time is not measured by default.
    pub no_off_cpu: bool,
    /// `--overhead`.
    pub overhead: bool,
    /// `-d`, counted from the window's start.
    pub duration: Option<Duration>,
    /// `--start-at`: records from before it are left out; None starts at the attach.
    pub start_at: Option<StartAt>,
    /// `-o`, its placeholders not yet filled in; None for a new `xtrace-YYYYmmdd-HHMMSS`.
    pub output: Option<PathBuf>,
    /// `--label`s, as given.
    pub labels: Vec<(String, String)>,
    /// `--buffer-size`, in bytes.
    pub buffer_size: u32,
    pub gzip: bool,
    /// `--trace-format`.
    pub trace_format: crate::output::TraceFormat,
    /// `--icicle`.
    pub icicle: bool,
    /// `-q`: warnings are not shown.
    pub quiet: bool,
    /// `--live`: the address to serve the live view on, as given.
    pub live: Option<String>,
    /// `--flight`; None records the whole capture.
    pub flight: Option<Flight>,
}

impl Config {
    /// The `--pid` processes; none for a launched command or `-a`.
    pub fn pids(&self) -> &[u32] {
        match &self.targets {
            TargetChoice::Pids(pids) => pids,
            _ => &[],
        }
    }

    /// Whether no probe of any kind is asked for (then xtrace profiles the CPU, and with `--pid`
    /// traces CUDA and ranges where the process has them).
    pub fn asks_no_probe(&self) -> bool {
        self.uprobes.is_empty() && self.usdt.is_empty() && !self.cuda && !self.mpi && self.ranges.is_none()
    }

    /// Whether off-CPU time is measured without `--off-cpu` being given: with `--pid` and no
    /// probe asked for (as CPU sampling turns on by itself), unless `--no-off-cpu`. Not for a
    /// launched command or `-a`.
    pub fn off_cpu_by_default(&self) -> bool {
        self.off_cpu_ns.is_none()
            && !self.no_off_cpu
            && matches!(self.targets, TargetChoice::Pids(_))
            && self.asks_no_probe()
    }
}
