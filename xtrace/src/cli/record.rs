//! `xtrace record`: flags for choosing targets, probes, and outputs.
use std::path::PathBuf;

use clap::{ArgGroup, Args};

use crate::probes::{entry::EntryMode, exits::ExitMode};

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["pid", "command", "system_wide"])))]
pub struct RecordArgs {
    /// Trace this running process, all its threads (repeatable).
    #[arg(
        allow_negative_numbers = true,
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pub pid: Vec<u32>,

    /// Trace every process that maps each probe's file, including processes started after attach
    /// (each -u and -U then needs a TARGET). Stops on Ctrl-C or -d.
    #[arg(short = 'a', long = "system-wide", conflicts_with_all = ["pid", "command"])]
    pub system_wide: bool,

    /// Attach a uprobe + uretprobe pair to SYMBOL, recording one span per call (repeatable).
    /// TARGET is a path, a library name such as `libc` found in the process's mappings, or omitted
    /// for the main executable. SYMBOL is a name (mangled or demangled) or a glob: `*`, `?`, `[a-z]`,
    /// e.g. `'libfoo:ns::Matrix::*'`.
    #[arg(short = 'u', long = "uprobe", value_name = "[TARGET:]SYMBOL")]
    pub uprobe: Vec<String>,

    /// Attach to every call site of a USDT probe (repeatable). PROVIDER and NAME may be globs;
    /// TARGET is a path or library name, or omitted for every module of the process. Probes named
    /// *_begin/*_end, *_start/*_end, *__entry/*__return pair into spans; others are instant
    /// events. `(str,_,name)` reads arguments as strings (`name` names the span).
    #[arg(short = 'U', long = "usdt", value_name = "[TARGET:]PROVIDER:NAME")]
    pub usdt: Vec<String>,

    /// Trace CUDA runtime and driver calls (kernel launches with kernel names, copies, allocations,
    /// synchronization) in every libcudart.so*/libcuda.so* the target maps, or in an executable
    /// that links cudart statically. On by itself with --pid and no -u/-U when the process maps
    /// a CUDA library.
    #[arg(long = "cuda")]
    pub cuda: bool,

    /// Record NVTX ranges, marks and thread names as spans (through xtrace's tool library, which
    /// NVTX loads from NVTX_INJECTION64_PATH; set for a launched command).
    #[arg(long = "nvtx")]
    pub nvtx: bool,

    /// Record Intel ITT tasks, frames, and thread names as spans (through xtrace's tool library,
    /// which ITT loads from INTEL_LIBITTNOTIFY64; set for a launched command).
    #[arg(long = "itt")]
    pub itt: bool,

    /// Record every annotation range: NVTX, ITT and the xtrace_range_* API. On by itself with
    /// --pid and no -u/-U when the process has loaded xtrace's tool library.
    #[arg(long = "ranges")]
    pub ranges: bool,

    /// Sample every NVIDIA GPU through NVML each PERIOD (default 100ms; `off` to disable):
    /// utilization, memory, power, temperature, SM clock, PCIe, and the traced processes' device
    /// memory, as counter tracks in trace.json. On by itself whenever CUDA calls are traced.
    #[arg(long = "gpu-metrics", value_name = "PERIOD", num_args = 0..=1, require_equals = true,
          default_missing_value = "100ms", value_parser = parse_gpu_period)]
    pub gpu_metrics: Option<GpuPeriod>,

    /// Sample on-CPU stacks of the traced processes (every process with -a) this many times a
    /// second on every CPU. Without -u, -U, --cuda, --nvtx, --itt or --ranges, xtrace samples at
    /// 99 Hz.
    #[arg(allow_negative_numbers = true, short = 'F', long = "freq", value_name = "HZ", value_parser = clap::value_parser!(u64).range(1..))]
    pub freq: Option<u64>,

    /// Bytes of user stack copied with each CPU sample, from the stack pointer up, to unwind code
    /// built without frame pointers from its CFI (.eh_frame/.debug_frame); 0 walks frame pointers
    /// only. At most 16K, with an optional K suffix.
    #[arg(allow_hyphen_values = true, long = "user-stack", value_name = "BYTES", default_value = "16K", value_parser = parse_user_stack)]
    pub user_stack: u32,

    /// Sample only the target processes, not the processes they start. By default a process that
    /// a sampled process starts (fork, vfork, posix_spawn) is sampled too, as perf record does.
    #[arg(long = "no-inherit", conflicts_with = "system_wide")]
    pub no_inherit: bool,

    /// Draw the flamegraph as an icicle graph (stacks hanging from the top).
    #[arg(long = "icicle")]
    pub icicle: bool,

    /// Send only calls lasting at least this long as spans (e.g. 50us, 2ms, 1s). Shorter calls are
    /// counted and timed in the kernel, so per-probe counts and totals stay exact.
    #[arg(allow_hyphen_values = true, long = "min-duration", value_name = "DURATION", value_parser = parse_span_duration)]
    pub min_duration: Option<u64>,

    /// Warn while recording about every span longer than DURATION whose name PATTERN (a glob)
    /// matches, e.g. 'work=100ms' (repeatable; the first matching rule applies). The first 100
    /// are shown; all are counted in summary.json.
    #[arg(long = "warn-over", value_name = "PATTERN=DURATION", value_parser = parse_warn_rule)]
    pub warn_over: Vec<crate::pipeline::warnings::WarnRule>,

    /// Measure xtrace's own kernel programs while recording (the kernel's BPF run-time
    /// statistics): runs and time per program in summary.json `overhead` and the summary. Adds
    /// two clock reads to every probe hit while on.
    #[arg(long = "overhead")]
    pub overhead: bool,

    /// Record only calls made by this thread (repeatable); filtered in the kernel. With --pid the
    /// thread must belong to one of the processes; not with a launched command, whose threads do
    /// not exist yet.
    #[arg(
        allow_negative_numbers = true,
        long = "tid",
        value_name = "TID",
        conflicts_with = "command"
    )]
    pub tid: Vec<u32>,

    /// How -u functions' returns are probed: `auto` probes the ret and tail-call instructions of
    /// functions an exception or panic could unwind through (in files with exception tables, those
    /// that call others) and uses return probes elsewhere; `uretprobe` uses return probes
    /// everywhere (cheaper, but such an exception aborts the process); `ret` probes the exit
    /// instructions of every function.
    #[arg(long = "exits", value_name = "HOW", value_enum, default_value_t = ExitMode::Auto)]
    pub exits: ExitMode,

    /// Where -u functions' entries are probed: `auto` moves the probe of a function that starts
    /// with instructions the kernel single-steps (~10x dearer a hit) onto the first one it
    /// emulates, when nothing a span shows changes; `symbol` probes the first instruction (after a
    /// leading endbr64).
    #[arg(long = "entry", value_name = "WHERE", value_enum, default_value_t = EntryMode::Auto)]
    pub entry: EntryMode,

    /// Refuse to attach more than this many functions (globs can match whole libraries).
    #[arg(
        allow_negative_numbers = true,
        long = "max-probes",
        value_name = "N",
        default_value_t = 10_000
    )]
    pub max_probes: usize,

    /// Also look for the separate debug files of stripped files in DIR (repeatable; before
    /// /usr/lib/debug and /lib/debug): DIR/.build-id/NN/NNNN….debug by build ID, or
    /// DIR/<the file's directory>/NAME by .gnu_debuglink. Their symbols name functions for -u and
    /// CPU samples.
    #[arg(long = "debug-dir", value_name = "DIR", value_parser = crate::debug_file::parse_dir)]
    pub debug_dirs: Vec<PathBuf>,

    /// Stop after this many seconds (fractions allowed).
    #[arg(allow_negative_numbers = true, short = 'd', long = "duration", value_name = "SECONDS", value_parser = parse_duration)]
    pub duration: Option<std::time::Duration>,

    /// Directory for the outputs: trace.json, summary.json, summary.txt, and as the capture has them
    /// stacks.folded, flamegraph.svg, span-flamegraph.svg, profile.pb.gz [default:
    /// xtrace-YYYYmmdd-HHMMSS].
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,

    /// Size of the kernel ring buffer that carries events to xtrace: a power of two from 4K to
    /// 1G, with an optional K, M or G suffix. A larger buffer rides out longer bursts.
    #[arg(allow_hyphen_values = true, long = "buffer-size", value_name = "BYTES", default_value = "16M", value_parser = parse_buffer_size)]
    pub buffer_size: u32,

    /// Write the trace compressed as it is recorded, as trace.json.gz (Perfetto opens it): for
    /// large captures.
    #[arg(long = "gzip")]
    pub gzip: bool,

    /// Print nothing but errors (no attach notice, no live status, no summary table).
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,

    /// Launch COMMAND with ARGS and trace it until it exits.
    #[arg(last = true, value_name = "COMMAND", value_parser = clap::value_parser!(std::ffi::OsString))]
    pub command: Vec<std::ffi::OsString>,
}

/// `--gpu-metrics[=PERIOD]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuPeriod {
    Off,
    Every(std::time::Duration),
}

fn parse_gpu_period(text: &str) -> Result<GpuPeriod, String> {
    if text == "off" {
        return Ok(GpuPeriod::Off);
    }
    let ns = parse_span_duration(text)?;
    if ns < 10_000_000 {
        return Err(format!(
            "`{text}` is shorter than the 10ms NVML can usefully sample at"
        ));
    }
    Ok(GpuPeriod::Every(std::time::Duration::from_nanos(ns)))
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(format!("`{text}` must be a positive number of seconds"));
    }
    if seconds >= 1e9 {
        return Err(format!("`{text}` is too long: at most 999999999 seconds"));
    }
    let duration = std::time::Duration::from_secs_f64(seconds);
    if duration.is_zero() {
        return Err(format!("`{text}` is shorter than 1ns"));
    }
    Ok(duration)
}

/// `50us` → 50,000 (ns). Units: ns, us (or µs), ms, s; fractions allowed.
fn parse_warn_rule(text: &str) -> Result<crate::pipeline::warnings::WarnRule, String> {
    crate::pipeline::warnings::WarnRule::parse(text, parse_span_duration)
}

fn parse_span_duration(text: &str) -> Result<u64, String> {
    let units = [("ns", 1.0), ("us", 1e3), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)];
    let bad = || format!("`{text}` is not a duration such as 50us, 2ms or 1s (units: ns, us, ms, s)");
    let (number, scale) = units
        .iter()
        .find_map(|(unit, scale)| text.strip_suffix(unit).map(|n| (n, *scale)))
        .ok_or_else(bad)?;
    let value: f64 = number.trim().parse().map_err(|_| bad())?;
    // `nan` and `inf` parse as floats, but are no durations.
    if !value.is_finite() {
        return Err(bad());
    }
    let ns = value * scale;
    if ns >= 1e18 {
        return Err(format!("`{text}` is too long: at most 1000000000s"));
    }
    if ns.is_nan() || ns < 1.0 {
        return Err(format!("`{text}` must be at least 1ns"));
    }
    Ok(ns.round() as u64)
}

/// `256K` → 262,144: a number of bytes with an optional K, M or G suffix.
fn parse_bytes(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.as_bytes().last() {
        Some(b'K' | b'k') => (&text[..text.len() - 1], 1u64 << 10),
        Some(b'M' | b'm') => (&text[..text.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("`{text}` is not a size in bytes (e.g. 4096, 16K, 16M)"))
}

fn parse_user_stack(text: &str) -> Result<u32, String> {
    let bytes = parse_bytes(text)?;
    let max = xtrace_common::event::USER_STACK_MAX as u64;
    if bytes > max {
        return Err(format!(
            "`{text}` is more than the {}K of user stack a sample can carry",
            max >> 10
        ));
    }
    Ok(bytes as u32)
}

fn parse_buffer_size(text: &str) -> Result<u32, String> {
    let bytes = parse_bytes(text)?;
    if !bytes.is_power_of_two() || !(4096..=1 << 30).contains(&bytes) {
        return Err(format!("`{text}` must be a power of two from 4K to 1G"));
    }
    Ok(bytes as u32)
}

#[cfg(test)]
mod tests {
    use super::{parse_buffer_size, parse_duration, parse_span_duration, parse_user_stack};

    #[test]
    fn span_durations() {
        assert_eq!(parse_span_duration("50us"), Ok(50_000));
        assert_eq!(parse_span_duration("50µs"), Ok(50_000));
        assert_eq!(parse_span_duration("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_span_duration("2s"), Ok(2_000_000_000));
        assert_eq!(parse_span_duration("100ns"), Ok(100));
        for bad in ["50", "ms", "-1ms", "0ns", "1h", "abcms"] {
            assert!(parse_span_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn user_stack_sizes() {
        assert_eq!(parse_user_stack("16K"), Ok(16384));
        assert_eq!(parse_user_stack("0"), Ok(0));
        assert_eq!(parse_user_stack("4000"), Ok(4000));
        assert!(parse_user_stack("17K").unwrap_err().contains("16K"));
        assert!(parse_user_stack("lots").is_err());
    }

    #[test]
    fn buffer_sizes() {
        assert_eq!(parse_buffer_size("16M"), Ok(16 << 20));
        assert_eq!(parse_buffer_size("4096"), Ok(4096));
        assert_eq!(parse_buffer_size("256k"), Ok(256 << 10));
        assert_eq!(parse_buffer_size("1G"), Ok(1 << 30));
        for bad in ["3M", "2048", "2G", "abc", "", "M", "99999999999999999999K"] {
            assert!(parse_buffer_size(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn gpu_periods() {
        use super::{parse_gpu_period, GpuPeriod};
        assert_eq!(parse_gpu_period("off"), Ok(GpuPeriod::Off));
        assert_eq!(
            parse_gpu_period("250ms"),
            Ok(GpuPeriod::Every(std::time::Duration::from_millis(250)))
        );
        assert!(parse_gpu_period("1ms").is_err());
        assert!(parse_gpu_period("fast").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0.5").unwrap().as_millis(), 500);
        assert_eq!(parse_duration("3").unwrap().as_secs(), 3);
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("inf").is_err());
        // Too long is said to be too long, not "not positive"; below 1 ns is not accepted as 0.
        assert_eq!(
            parse_duration("1e20"),
            Err("`1e20` is too long: at most 999999999 seconds".into())
        );
        assert_eq!(
            parse_duration("0.0000000001"),
            Err("`0.0000000001` is shorter than 1ns".into())
        );
        assert_eq!(
            parse_span_duration("99999999999999999999s"),
            Err("`99999999999999999999s` is too long: at most 1000000000s".into())
        );
        assert_eq!(
            parse_span_duration("0.1ns"),
            Err("`0.1ns` must be at least 1ns".into())
        );
        for text in ["nanms", "infs", "-infus"] {
            assert_eq!(
                parse_span_duration(text),
                Err(format!(
                    "`{text}` is not a duration such as 50us, 2ms or 1s (units: ns, us, ms, s)"
                ))
            );
        }
    }
}
