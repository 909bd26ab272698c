//! `xtrace record`: flags for choosing targets, probes, and outputs. Each flag's meaning lives
//! here, in its doc comment: the first paragraph is `-h`'s line, the whole text `--help`'s, and the
//! CLI reference and man pages are generated from them (`cargo xtask man`).
use std::path::PathBuf;

use clap::{ArgGroup, Args};

use super::record_values::{
    parse_buffer_size, parse_duration, parse_flight_size, parse_flight_window, parse_gpu_period, parse_label,
    parse_off_cpu_min, parse_span_duration, parse_start_at, parse_store, parse_user_stack, parse_warn_rule,
};
use crate::{
    output::TraceFormat,
    probes::{entry::EntryMode, exits::ExitMode, ranges::Wanted},
    session::{Config, Flight, GpuPeriod, StartAt, TargetChoice},
};

/// The `--help` headings that group the record flags.
mod heading {
    pub const TARGETS: &str = "Targets";
    pub const PROBES: &str = "Probes";
    pub const SAMPLING: &str = "Sampling";
    pub const GPU: &str = "GPU and annotations";
    pub const FILTERS: &str = "Filters";
    pub const OUTPUT: &str = "Output";
    pub const TUNING: &str = "Tuning";
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["pid", "command", "system_wide"])))]
pub struct RecordArgs {
    /// Trace this running process, all its threads (repeatable).
    ///
    /// All its threads are traced, including threads created later. Repeatable. Cannot be
    /// combined with a launched command or -a.
    #[arg(
        allow_negative_numbers = true,
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command",
        help_heading = heading::TARGETS
    )]
    pub pid: Vec<u32>,

    /// Trace every process that maps each probe's file.
    ///
    /// Includes processes started after xtrace attached, except xtrace itself (its own calls to
    /// `-u libc:malloc` would feed the ring it reads). Every -u and -U then needs a TARGET. Stops
    /// on a signal or -d. CPU samples (-F) include xtrace, as `perf record -a` includes perf.
    #[arg(short = 'a', long = "system-wide", conflicts_with_all = ["pid", "command"],
          help_heading = heading::TARGETS)]
    pub system_wide: bool,

    /// Stop after this many seconds (fractions allowed, e.g. 0.5).
    ///
    /// Counted from the moment every probe is attached, or from --start-at.
    #[arg(allow_negative_numbers = true, short = 'd', long = "duration", value_name = "SECONDS",
          value_parser = parse_duration, help_heading = heading::TARGETS)]
    pub duration: Option<std::time::Duration>,

    /// Begin the capture at WHEN: /PERIOD, @UNIX-SECONDS or an RFC 3339 time.
    ///
    /// /10s is the next multiple of 10 seconds on the wall clock after xtrace starts, so that
    /// many hosts started by one launcher capture the same window without talking to each other
    /// (their clocks as close as NTP keeps them); @1764417600 and 2026-11-29T12:00:00Z name a
    /// time. xtrace attaches at once, then leaves out what happens before WHEN; -d counts from
    /// WHEN. A launched command starts at once. Off-CPU totals added up in the kernel and GPU
    /// readings still cover the time from the attach. A WHEN already past is refused.
    #[arg(long = "start-at", value_name = "WHEN", value_parser = parse_start_at,
          help_heading = heading::TARGETS)]
    pub start_at: Option<StartAt>,

    /// Launch COMMAND with ARGS and trace it until it exits.
    ///
    /// Found in $PATH unless it contains a `/`. It is held before exec until every probe is
    /// attached, so no call is missed; its exit status is reported. Cannot be combined with --pid.
    #[arg(last = true, value_name = "COMMAND",
          value_parser = clap::value_parser!(std::ffi::OsString), help_heading = heading::TARGETS)]
    pub command: Vec<std::ffi::OsString>,

    /// Record one span per call of each function named (repeatable).
    ///
    /// SPEC is `[TARGET:]SYMBOL[(TYPE, ...)][ -> TYPE]`: TARGET is a path, a library name such as
    /// `libc` found in the process's mappings, or omitted for the main executable; SYMBOL is a
    /// name (mangled or demangled) or a glob (`*`, `?`, `[a-z]`), e.g. `'libfoo:ns::Matrix::*'`;
    /// the types read arguments and the return value (docs/reference/probe-specs.md); `str`
    /// keeps 63 bytes of a string argument, `str:N` up to N (1 to 4096). Each
    /// function gets a uprobe on its entry and a return probe or uprobes on its exit instructions
    /// (see --exits).
    #[arg(short = 'u', long = "uprobe", value_name = "[TARGET:]SYMBOL",
          help_heading = heading::PROBES)]
    pub uprobe: Vec<String>,

    /// Attach to every call site of the named USDT probes (repeatable).
    ///
    /// USDT is `[TARGET:]PROVIDER:NAME[(TYPE, ...)]`, the `<sys/sdt.h>` markers. PROVIDER and NAME
    /// may be globs; TARGET is a path or library name, or omitted for every module of the process.
    /// Probes named *_begin/*_end, *_start/*_end, *__entry/*__return, *_start/*_done pair per
    /// thread into spans; others are instant events. NAME `BEGIN..END[|END...]` pairs any probes,
    /// e.g. 'postgresql:transaction__start..transaction__commit|transaction__abort': spans named
    /// for the words BEGIN and the ENDs share (`postgresql:transaction`; else BEGIN), recording
    /// the END that closed them as `end`. `(str,_,name)` reads arguments as strings (`name` names
    /// the span).
    #[arg(short = 'U', long = "usdt", value_name = "[TARGET:]PROVIDER:NAME",
          help_heading = heading::PROBES)]
    pub usdt: Vec<String>,

    /// How -u functions' returns are probed: auto, uretprobe or ret.
    ///
    /// `auto` probes the ret and tail-call instructions of the functions an exception or panic
    /// could unwind through (in files with exception tables, those that call others; in Go code,
    /// every function) and uses return probes elsewhere; `uretprobe` uses return probes everywhere
    /// (cheaper, but such an exception aborts the process); `ret` probes the exit instructions of
    /// every function (docs/internals/probe-placement.md).
    #[arg(long = "exits", value_name = "HOW", value_enum, default_value_t = ExitMode::Auto,
          help_heading = heading::PROBES)]
    pub exits: ExitMode,

    /// Where -u functions' entries are probed: auto or symbol.
    ///
    /// `auto` moves the probe of a function that starts with instructions the kernel single-steps
    /// (~10x dearer a hit) onto the first one it emulates, where nothing a span shows changes;
    /// `symbol` probes each function's first instruction (after a leading endbr64), as bpftrace
    /// does (docs/internals/probe-placement.md).
    #[arg(long = "entry", value_name = "WHERE", value_enum, default_value_t = EntryMode::Auto,
          help_heading = heading::PROBES)]
    pub entry: EntryMode,

    /// Refuse to attach more than N functions.
    ///
    /// A too-wide glob (one that matches whole libraries) is caught before it attaches.
    #[arg(
        allow_negative_numbers = true,
        long = "max-probes",
        value_name = "N",
        default_value_t = 10_000,
        help_heading = heading::PROBES
    )]
    pub max_probes: usize,

    /// Also look for the debug files of stripped files in DIR (repeatable).
    ///
    /// Searched before /usr/lib/debug and /lib/debug: DIR/.build-id/NN/NNNN….debug by build ID, or
    /// DIR/<the file's directory>/NAME by .gnu_debuglink. Their symbols name functions for -u and
    /// CPU samples. DIR must be a directory.
    #[arg(long = "debug-dir", value_name = "DIR", value_parser = crate::elf::debug_file::parse_dir,
          help_heading = heading::PROBES)]
    pub debug_dirs: Vec<PathBuf>,

    /// Sample on-CPU stacks HZ times a second on every CPU.
    ///
    /// Samples the traced processes (every process with -a), besides any probes. Without -u, -U,
    /// --cuda, --nvtx, --itt or --ranges, xtrace samples at 99 Hz. At least 1, at most the
    /// kernel's kernel.perf_event_max_sample_rate.
    #[arg(allow_negative_numbers = true, short = 'F', long = "freq", value_name = "HZ",
          value_parser = clap::value_parser!(u64).range(1..), help_heading = heading::SAMPLING)]
    pub freq: Option<u64>,

    /// Bytes of user stack copied with each CPU sample (at most 16K; 0: frame pointers only).
    ///
    /// Copied from the stack pointer up, to unwind code built without frame pointers from its CFI
    /// (.eh_frame/.debug_frame). An optional K suffix; 0 walks frame pointers only, in the kernel.
    #[arg(allow_hyphen_values = true, long = "user-stack", value_name = "BYTES",
          default_value = "16K", value_parser = parse_user_stack, help_heading = heading::SAMPLING)]
    pub user_stack: u32,

    /// Measure the time the traced threads spend off CPU: where they wait, in what, for how long.
    ///
    /// MIN is a duration (default 1ms; units ns, us, ms, s; 0 for every wait). A wait in a system
    /// call of at least MIN is recorded with the whole stack its thread returns to, unwound as a
    /// CPU sample's; shorter waits, and waits for a CPU (runnable), are added up in the kernel per
    /// thread, wait and frame-pointer stack. Writes offcpu.folded and offcpu.svg (nanoseconds per
    /// stack, the wait as the leaf: [futex], [read], [runnable]) and an off_cpu section in the
    /// summary: per thread, time by state and by wait, and who woke it. On by itself, at 1ms,
    /// with --pid and no -u, -U, --cuda, --mpi, --nvtx, --itt or --ranges (--no-off-cpu turns
    /// it off); a kernel without what it needs then costs a notice, not the capture.
    #[arg(long = "off-cpu", value_name = "MIN", num_args = 0..=1, require_equals = true,
          default_missing_value = "1ms", value_parser = parse_off_cpu_min,
          help_heading = heading::SAMPLING)]
    pub off_cpu: Option<u64>,

    /// Do not measure off-CPU time where it is on by itself (--pid without probes).
    ///
    /// Each system call of every thread on the host then runs no off-CPU program: the cost
    /// docs/performance.md states for --off-cpu is not paid. CPU sampling is not affected.
    #[arg(long = "no-off-cpu", conflicts_with = "off_cpu", help_heading = heading::SAMPLING)]
    pub no_off_cpu: bool,

    /// Sample only the target processes, not the processes they start.
    ///
    /// By default every process a sampled process starts (fork, vfork, posix_spawn; then its own
    /// children, and so on) is sampled too, as perf record does: a launched shell script's
    /// commands, torchrun's workers, DataLoader workers forked after attach. Probes (-u, -U,
    /// --cuda, ranges) apply to the targets only either way.
    #[arg(long = "no-inherit", conflicts_with = "system_wide", help_heading = heading::SAMPLING)]
    pub no_inherit: bool,

    /// Leave Python frames out of CPU samples and off-CPU waits.
    ///
    /// By default each sampled CPython process (3.10 to 3.13, a shared libpython or a static
    /// python) is recognised when first seen, and each sample of it carries its Python frames,
    /// read by the kernel program from the interpreter's thread state, in place of the
    /// interpreter's eval loop frames; so does each wait `--off-cpu` sends with its stack (one of
    /// at least MIN in a system call), read as the thread returns from that call. summary.txt
    /// says for each Python process which interpreter was recognised and how, or why not.
    #[arg(long = "no-python", help_heading = heading::SAMPLING)]
    pub no_python: bool,

    /// Record where each traced call came from: its stack at entry, Python frames included.
    ///
    /// At the entry of every traced function (-u) and CUDA call (--cuda), and at every hit of a
    /// USDT probe (-U; of a pair, its begin), a second kernel program (loaded only with this flag)
    /// walks the thread's Python frames, as for a CPU sample, and its native stack by frame
    /// pointers (no stack copy, whatever --user-stack says). Each call is named by its call site:
    /// the innermost Python frame, `qualname (file.py:LINE)` at the calling line, else the native
    /// caller, `function+0xOFF (module)` (of a USDT probe: the caller of the function the probe is
    /// in). summary.json's call_sites (per probe and USDT span, and per CUDA kernel for launches)
    /// and summary.txt list the top 5 by time, with their counts; each span in the trace carries
    /// its site. Needs a traced call (-u, -U or --cuda); --no-python leaves the Python frames out.
    #[arg(long = "stacks", help_heading = heading::PROBES)]
    pub stacks: bool,

    /// Trace CUDA runtime and driver calls, with kernel names.
    ///
    /// Kernel launches with their kernels' names, copies, allocations and synchronization, in
    /// every libcudart.so*/libcuda.so* the target maps (or loads later with dlopen), or in an
    /// executable that links cudart statically. On by itself with --pid and no -u/-U when the
    /// process maps a CUDA library.
    ///
    /// Also the GPU device timeline: when each kernel, copy and memset ran on the GPU, per GPU and
    /// stream, from CUPTI inside the process. A launched command gets CUDA_INJECTION64_PATH set to
    /// libxtrace_tool.so; a --pid process must have been started with it. CUPTI is used only while
    /// xtrace is attached.
    #[arg(long = "cuda", help_heading = heading::GPU)]
    pub cuda: bool,

    /// Load the tool library into a --pid process started without CUDA_INJECTION64_PATH.
    ///
    /// For the GPU device timeline of a running CUDA process: xtrace stops one thread with ptrace
    /// at a system call (the main thread, or another when it only computes), has it load
    /// libxtrace_tool.so from a memfd (dlopen) and start the library's watcher, and lets it go on
    /// where it was. Needs CAP_SYS_PTRACE, glibc 2.34 or later and x86_64; refused under Yama
    /// ptrace_scope 3, with another tracer attached, or when no thread makes a system call within
    /// 2 s. The library stays loaded after xtrace leaves, inert until the next trace; a second
    /// --inject finds it and loads nothing.
    #[arg(long = "inject", requires_all = ["pid", "cuda"], help_heading = heading::GPU)]
    pub inject: bool,

    /// Trace MPI calls: sends, receives, waits and collectives, with bytes and peers.
    ///
    /// A span for each call of an MPI function of the target's MPI library (Open MPI's
    /// libmpi.so*, MPICH's libmpich.so*): MPI_Send/Recv and their non-blocking forms, the waits,
    /// MPI_Barrier, MPI_Bcast, MPI_Allreduce and the other collectives, MPI_Init and
    /// MPI_Finalize. Each span has the call's count, datatype and bytes (count times the
    /// datatype's size, for the predefined datatypes), its peer and tag or its root;
    /// summary.json's `mpi` section adds them up per function. Run one xtrace per rank under the
    /// launcher (`mpirun -np 4 xtrace --mpi -o 'out/{rank}' -- ./app`), then `xtrace merge`.
    #[arg(long = "mpi", help_heading = heading::PROBES)]
    pub mpi: bool,

    /// Record NVTX ranges, marks and thread names as spans.
    ///
    /// Through xtrace's tool library, which NVTX loads from NVTX_INJECTION64_PATH. For a launched
    /// command xtrace sets NVTX_INJECTION64_PATH and INTEL_LIBITTNOTIFY64 to the tool library and
    /// keeps only NVTX ranges; with --pid it also traces libnvToolsExt's functions in a process
    /// started without the tool library.
    #[arg(long = "nvtx", help_heading = heading::GPU)]
    pub nvtx: bool,

    /// Record Intel ITT tasks, frames and thread names as spans.
    ///
    /// Through xtrace's tool library, which ITT loads from INTEL_LIBITTNOTIFY64. For a launched
    /// command xtrace sets both tool variables and keeps only ITT ranges.
    #[arg(long = "itt", help_heading = heading::GPU)]
    pub itt: bool,

    /// Record every annotation range: NVTX, ITT and xtrace_range_*.
    ///
    /// Both tool variables are set for a launched command. On by itself with --pid and no -u/-U
    /// when the process has loaded xtrace's tool library or maps libnvToolsExt. XTRACE_TOOL_LIB
    /// names the tool library when it is not next to the xtrace binary.
    #[arg(long = "ranges", help_heading = heading::GPU)]
    pub ranges: bool,

    /// Sample every NVIDIA GPU through NVML each PERIOD (default 100ms; `off` disables it).
    ///
    /// Utilization, memory, power, temperature, SM clock, PCIe, the traced processes' device
    /// memory and utilization, and on Hopper and later SM occupancy, tensor-core activity and
    /// DRAM bandwidth (GPM), as counter tracks in the trace. PERIOD is at least 10ms. On by itself
    /// whenever CUDA calls are traced. Without NVML (no driver, no permission): one warning, and
    /// the recording goes on.
    #[arg(long = "gpu-metrics", value_name = "PERIOD", num_args = 0..=1, require_equals = true,
          default_missing_value = "100ms", value_parser = parse_gpu_period,
          help_heading = heading::GPU)]
    pub gpu_metrics: Option<GpuPeriod>,

    /// Send only calls lasting at least DURATION as spans (e.g. 50us, 2ms, 1s).
    ///
    /// Units ns, us (or µs), ms, s. Shorter calls are counted, summed and put in a per-probe log2
    /// histogram in the kernel, so count, total, mean, min and max in summary.json stay exact;
    /// they are absent from the trace. USDT begin/end spans and CUDA calls shorter than DURATION
    /// are left out the same way; USDT instants and annotation ranges are not filtered.
    #[arg(allow_hyphen_values = true, long = "min-duration", value_name = "DURATION",
          value_parser = parse_span_duration, help_heading = heading::FILTERS)]
    pub min_duration: Option<u64>,

    /// Warn about every span over DURATION whose name PATTERN matches, e.g. 'work=100ms'.
    ///
    /// PATTERN is a glob over span names: function spans, USDT begin/end spans, CUDA calls,
    /// push/pop ranges. Repeatable; the first matching rule applies. The first 100 warnings are
    /// shown while recording, then one line saying the rest are only counted; summary.json's
    /// warn_over counts them all. -q hides the lines.
    #[arg(long = "warn-over", value_name = "PATTERN=DURATION", value_parser = parse_warn_rule,
          help_heading = heading::FILTERS)]
    pub warn_over: Vec<crate::pipeline::warnings::WarnRule>,

    /// Record only the calls and samples of this thread (repeatable).
    ///
    /// Filtered in the kernel, as with `perf record -t`. The thread id as xtrace sees it (the
    /// host's, also for a process in a container, unless xtrace itself runs in one). With --pid
    /// the thread must belong to a traced process; with -a it must exist, and be a kernel thread
    /// only when sampling; not with a launched command, whose threads do not exist yet.
    #[arg(
        allow_negative_numbers = true,
        long = "tid",
        value_name = "TID",
        conflicts_with = "command",
        help_heading = heading::FILTERS
    )]
    pub tid: Vec<u32>,

    /// Draw the flamegraphs as icicle graphs (stacks hanging from the top).
    #[arg(long = "icicle", help_heading = heading::OUTPUT)]
    pub icicle: bool,

    /// Directory for the outputs [default: xtrace-YYYYmmdd-HHMMSS].
    ///
    /// trace.json, summary.json, summary.txt, and as the capture has them stacks.folded,
    /// flamegraph.svg, span-flamegraph.svg, profile.pb.gz (docs/reference/output-formats.md).
    /// Created if missing; the default is always a new directory (-2, -3, ... appended where the
    /// name is taken). In a distributed job, `{rank}` in DIR becomes the target's rank (from the
    /// launcher's variables in the first target's environment, else in xtrace's own: RANK,
    /// OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMI_RANK) and `{host}` the host name, so that one
    /// command line gives every rank its own directory: -o 'prof/{host}-{rank}'.
    #[arg(short = 'o', long = "output", value_name = "DIR", help_heading = heading::OUTPUT)]
    pub output: Option<PathBuf>,

    /// Label the capture with KEY=VALUE, e.g. job=train or commit=1a2b3c (repeatable).
    ///
    /// Labels go into summary.json's labels, beside the host name and each target's rank, so
    /// that captures of many hosts and runs can be told apart. A KEY starts with a letter or _
    /// and holds letters, digits, _, . and -; a VALUE is any printable text. A key given twice
    /// keeps its last value.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label,
          help_heading = heading::OUTPUT)]
    pub labels: Vec<(String, String)>,

    /// After the capture, store its statistics in a store of runs (see `xtrace push`):
    /// --store sqlite:PATH, --store clickhouse://HOST:PORT/DB, or --store alone for the SQLite
    /// file ~/.local/share/xtrace/runs.db (of the user who ran sudo, under sudo).
    ///
    /// Nothing is stored without it. A store that cannot be reached costs a warning: the capture
    /// is written as always, and `xtrace push DIR --store URL` sends it later. The run is stored
    /// once however often it is pushed; the capture directory's stored.txt lists where it went.
    #[arg(long = "store", value_name = "URL", num_args = 0..=1, default_missing_value = "", value_parser = parse_store, help_heading = heading::OUTPUT)]
    pub store: Option<crate::store::Url>,

    /// With --store: also store every span of the trace (name, pid, tid, start, duration).
    ///
    /// A row per span, for queries of your own on the store's `spans` table; a capture of
    /// millions of spans makes millions of rows. Without it only statistics are stored.
    #[arg(long = "store-spans", requires = "store", help_heading = heading::OUTPUT)]
    pub store_spans: bool,

    /// Write the trace compressed as it is recorded: trace.perfetto-trace.gz (trace.json.gz with
    /// --trace-format json).
    ///
    /// Perfetto opens it as is; several times smaller: for large captures. `xtrace report` and
    /// `xtrace diff` read either.
    #[arg(long = "gzip", help_heading = heading::OUTPUT)]
    pub gzip: bool,

    /// The trace file's format: perfetto (trace.perfetto-trace) or json (trace.json).
    ///
    /// perfetto, the default, writes Perfetto's own protobuf format: open it at ui.perfetto.dev
    /// or with trace_processor. About a quarter of JSON's bytes, every overlapping slice kept
    /// (each source on its own track under its thread), CPU samples as call stacks on their
    /// threads, counters with their units, clock snapshots that convert the times to wall time.
    /// json writes Chrome's trace.json, for chrome://tracing, speedscope and scripts. `xtrace
    /// report` and `xtrace diff` read either format alike, and `xtrace convert` writes one from
    /// the other. With --gzip, trace.perfetto-trace.gz or trace.json.gz. The environment variable
    /// XTRACE_TRACE_FORMAT sets the default (the flag wins).
    #[arg(long = "trace-format", value_name = "FORMAT", value_enum, default_value_t = TraceFormat::Perfetto,
          env = "XTRACE_TRACE_FORMAT", help_heading = heading::OUTPUT)]
    pub trace_format: TraceFormat,

    /// Serve a live view of the capture on IP:PORT [default: 127.0.0.1 and a free port].
    ///
    /// A page that updates every second while recording: per-probe count, rate, p50 and p99 over
    /// the last 10 s, the last minute and the whole capture; events, their rate and loss; the
    /// --warn-over alerts; a flamegraph of the CPU samples of a recent window (with -F); and a
    /// Stop button that ends the capture as Ctrl-C does. Its URL, printed on stderr with an
    /// `ssh -L` line for a remote host, holds a random token that the page trades for a cookie;
    /// any request without it, or naming another host or origin, is refused. Only an explicit IP
    /// address that is not loopback (0.0.0.0 for all) opens it to other machines, with a
    /// warning; a host name is refused. The server closes when the capture stops.
    #[arg(long = "live", value_name = "IP:PORT", num_args = 0..=1, require_equals = true,
          default_missing_value = crate::live::DEFAULT_ADDR, help_heading = heading::OUTPUT)]
    pub live: Option<String>,

    /// Keep only the last DURATION of events, in memory, written out on a trigger (e.g. 30s).
    ///
    /// For captures that run for hours: the trace events go into a buffer that keeps the last
    /// DURATION (units ns, us, ms, s; at least 1ms) in at most --flight-size bytes, instead of
    /// into the trace file. SIGUSR1 (`kill -USR1 PID`), the stop, and with --flight-trigger a
    /// span over its --warn-over limit each write the buffer as DIR/flight-001, flight-002, ...:
    /// a capture directory that `xtrace report`, `diff` and `convert` read, holding the events
    /// since the previous one, at most DURATION. DIR's summary.json covers the whole run; its
    /// trace holds names only. Events that fell out of the window are counted in summary.json's
    /// flight.aged_out_events, not as lost. CPU samples and --off-cpu's waits are kept in the
    /// window too: each directory has its own profile and off_cpu section.
    #[arg(long = "flight", value_name = "DURATION", value_parser = parse_flight_window,
          help_heading = heading::OUTPUT)]
    pub flight: Option<u64>,

    /// The most memory the --flight buffer takes (at least 1M) [default: 64M].
    ///
    /// A number of bytes with an optional K, M or G suffix. It covers the buffer and a directory
    /// still being written. When the event rate would need more, the oldest events go first and
    /// the window kept is shorter than --flight asks: each flight-NNN/summary.json says the
    /// window it covers (flight.kept_ns).
    #[arg(long = "flight-size", value_name = "BYTES", value_parser = parse_flight_size,
          requires = "flight", help_heading = heading::OUTPUT)]
    pub flight_size: Option<u64>,

    /// Go on recording for DURATION after a --flight trigger before writing, so that the window
    /// holds what came after it too (e.g. 2s).
    #[arg(long = "flight-after", value_name = "DURATION", value_parser = parse_span_duration,
          requires = "flight", help_heading = heading::OUTPUT)]
    pub flight_after: Option<u64>,

    /// Write the --flight buffer on this besides SIGUSR1 and the stop: warn-over (a span over
    /// its --warn-over limit; at most once a window, however many follow).
    #[arg(long = "flight-trigger", value_name = "TRIGGER", value_enum, requires = "flight",
          help_heading = heading::OUTPUT)]
    pub flight_trigger: Option<FlightTrigger>,

    /// Print nothing but errors (no attach notice, no live status, no summary table).
    #[arg(short = 'q', long = "quiet", help_heading = heading::OUTPUT)]
    pub quiet: bool,

    /// Measure xtrace's own kernel programs while recording.
    ///
    /// The kernel's BPF run-time statistics, on for the capture only, give each program's runs
    /// and run time, in summary.json's overhead and a summary line: CPU time taken from the traced
    /// threads, besides the kernel's uprobe trap. While on, the kernel adds two clock reads to
    /// every run of every BPF program on the machine. Needs CAP_SYS_ADMIN.
    #[arg(long = "overhead", help_heading = heading::TUNING)]
    pub overhead: bool,

    /// Size of the kernel ring buffer that carries events to xtrace (4K to 1G).
    ///
    /// A power of two with an optional K, M or G suffix. A larger buffer rides out longer bursts
    /// before lost.ring_full counts drops. The kernel maps the buffer's data twice into xtrace, so
    /// its resident memory counts those pages twice (about 32 MB for the default 16M).
    #[arg(allow_hyphen_values = true, long = "buffer-size", value_name = "BYTES",
          default_value = "16M", value_parser = parse_buffer_size, help_heading = heading::TUNING)]
    pub buffer_size: u32,
}

/// What else writes the --flight buffer out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FlightTrigger {
    /// A span over its --warn-over limit.
    WarnOver,
}

/// `--flight-size`'s default: 64M.
const DEFAULT_FLIGHT_SIZE: u64 = 64 << 20;

impl RecordArgs {
    /// The recording these flags ask for.
    pub fn config(&self) -> Config {
        let targets = if self.system_wide {
            TargetChoice::SystemWide
        } else if !self.command.is_empty() {
            TargetChoice::Command(self.command.clone())
        } else {
            TargetChoice::Pids(self.pid.clone())
        };
        Config {
            targets,
            tids: self.tid.clone(),
            uprobes: self.uprobe.clone(),
            usdt: self.usdt.clone(),
            cuda: self.cuda,
            inject: self.inject,
            mpi: self.mpi,
            ranges: (self.ranges || self.nvtx || self.itt).then_some(Wanted {
                xtrace: self.ranges,
                nvtx: self.ranges || self.nvtx,
                itt: self.ranges || self.itt,
            }),
            gpu_metrics: self.gpu_metrics,
            freq: self.freq,
            user_stack: self.user_stack,
            inherit: !self.no_inherit,
            python: !self.no_python,
            stacks: self.stacks,
            exits: self.exits,
            entry: self.entry,
            max_probes: self.max_probes,
            debug_dirs: self.debug_dirs.clone(),
            min_duration_ns: self.min_duration,
            warn_over: self.warn_over.clone(),
            overhead: self.overhead,
            off_cpu_ns: self.off_cpu,
            no_off_cpu: self.no_off_cpu,
            duration: self.duration,
            start_at: self.start_at,
            output: self.output.clone(),
            labels: self.labels.clone(),
            buffer_size: self.buffer_size,
            gzip: self.gzip,
            trace_format: self.trace_format,
            icicle: self.icicle,
            quiet: self.quiet,
            live: self.live.clone(),
            flight: self.flight.map(|window_ns| Flight {
                window_ns,
                size_bytes: self.flight_size.unwrap_or(DEFAULT_FLIGHT_SIZE),
                after_ns: self.flight_after.unwrap_or(0),
                on_warn_over: self.flight_trigger == Some(FlightTrigger::WarnOver),
            }),
        }
    }
}
