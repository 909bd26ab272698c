//! The library's error type. Every variant renders as one line saying what failed, on which input,
//! and what to do; `exit_code` separates bad input (2) from internal failures (1) (and a stop
//! before a launched command started: 128 + the signal).
//! [`stripped_note`] and [`not_found_hint`] word the ends of the symbol-not-found messages.
use std::path::PathBuf;

/// The accepted form of a `-U` pairing, which its errors end with.
pub const PAIRING_FORM: &str = "a pairing is [TARGET:]PROVIDER:BEGIN..END[|END...], e.g. \
     -U 'postgresql:transaction__start..transaction__commit|transaction__abort'";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no process with pid {pid}: check the pid with `ps -p {pid}`")]
    NoSuchProcess { pid: u32 },
    #[error(
        "pid {pid} is a thread of process {tgid}: pass --pid {tgid} (add --tid {pid} for that thread only)"
    )]
    ThreadNotProcess { pid: u32, tgid: u32 },
    #[error("process {pid} has exited (a zombie waiting for its parent): trace a running process")]
    Exited { pid: u32 },
    #[error("process {pid}'s main thread has exited (pthread_exit) while {threads} other thread(s) run: its mappings are no longer readable through /proc/{pid}, so xtrace cannot resolve its files; attach before the main thread exits, or launch it with `xtrace -- COMMAND`")]
    LeaderExited { pid: u32, threads: usize },
    #[error("process {pid} exited while xtrace was attaching: trace a process that keeps running, or launch it with `xtrace -- COMMAND`")]
    ExitedDuringAttach { pid: u32 },
    #[error("stopped by {signal} while attaching, before `{command}` started: it did not run and nothing was recorded; stop xtrace after it says it attached")]
    StoppedBeforeStart {
        command: String,
        signal: &'static str,
        number: i32,
    },
    #[error(
        "thread {tid} belongs to none of the --pid processes: list their threads with `ls /proc/PID/task`"
    )]
    NotATargetThread { tid: u32 },
    #[error("no thread with id {tid}: check it with `ls /proc/{tid}`")]
    NoSuchThread { tid: u32 },
    #[error("pid {pid} is a kernel thread: it runs no user code to probe; pass the pid of a user process")]
    KernelThread { pid: u32 },
    #[error("thread {tid} is a kernel thread: it runs no user code to probe; name a thread of a user process, or sample it with -F HZ")]
    KernelThreadTid { tid: u32 },
    #[error(
        "cannot read /proc/{pid}/{what}: permission denied; trace a process you own, or run xtrace as root"
    )]
    ProcNotPermitted { pid: u32, what: String },
    #[error(
        "cannot read /proc/{pid}/{what}: permission denied to root without CAP_SYS_PTRACE (a container drops it): give xtrace that capability (docker run --cap-add SYS_PTRACE), or trace a process of its own user"
    )]
    ProcNeedsPtrace { pid: u32, what: String },
    #[error(
        "cannot read /proc/{pid}/{what}: permission denied, even with CAP_SYS_PTRACE: the kernel or a security module keeps this process from being inspected, so xtrace cannot trace it"
    )]
    ProcProtected { pid: u32, what: String },
    #[error("pid {pid} is xtrace itself: pass the pid of the process to trace")]
    SelfTrace { pid: u32 },
    #[error("/proc is not of xtrace's own PID namespace (a container that kept the host's /proc, or none mounted): mount /proc for xtrace's namespace, or run xtrace in the host's PID namespace")]
    ProcOfAnotherNamespace,
    #[error("process {pid} is in a PID namespace nested in xtrace's (it is pid {ns_pid} there), and xtrace in a container traces only its own namespace's processes: run xtrace in the host's PID namespace, or in that process's")]
    NestedNamespaceTarget { pid: u32, ns_pid: u32 },
    #[error("{path}: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error("{path}: is a {what}, not a file; give an executable or shared library as TARGET")]
    NotAFile { path: PathBuf, what: &'static str },
    #[error("{path}: not an ELF file ({reason}); give an executable or shared library as TARGET")]
    NotElf { path: PathBuf, reason: String },
    #[error("{path}: {architecture} code, not x86-64; xtrace traces x86-64 executables and libraries")]
    NotX86_64 { path: PathBuf, architecture: String },
    #[error("{path}: cannot probe `{symbol}`: {why}; trace a function that calls it")]
    Unprobeable {
        path: PathBuf,
        symbol: String,
        why: String,
    },
    #[error("{path}: cannot trace `{symbol}`: it returns twice, as setjmp does, and its exit instructions cannot be found to probe, while a return probe would break its second return; trace a function that calls it")]
    ReturnsTwice { path: PathBuf, symbol: String },
    #[error("{path}: cannot trace `{symbol}`: it is Go code and has no exit instruction that can be probed (no ret, or one uprobes refuse), while a return probe would make the Go runtime abort the process; trace a function that calls it")]
    GoStack { path: PathBuf, symbol: String },
    #[error("{path}: cannot trace `{symbol}`: it is entered without a return address (a program's entry point, a signal-return or lazy-binding trampoline), where a span's return probe would overwrite what the stack holds; trace a function it calls")]
    Uncalled { path: PathBuf, symbol: String },
    #[error("{path}: cannot trace `{symbol}`: it is a GNU indirect function (IFUNC), whose code a resolver picks when the library is loaded; xtrace runs the resolvers only of libraries it has loaded itself (libc, libm), and finds what the others picked only in a traced process (--pid) whose library has a slot for it; trace the implementation by its own name (`xtrace list symbols` lists the file's functions) or a function that calls it")]
    IfuncUnresolved { path: PathBuf, symbol: String },
    #[error("{path}: cannot trace `{symbol}`: it is a GNU indirect function (IFUNC) whose resolver picks code outside this file (the kernel's vDSO), where uprobes cannot go; trace a function that calls it")]
    IfuncOutside { path: PathBuf, symbol: String },
    #[error("{path}: cannot trace `{symbol}`: it is a GNU indirect function (IFUNC) whose resolver picks no code (it returns a null address, having only set up data), so nothing calls it; trace a function that does the work")]
    IfuncPicksNothing { path: PathBuf, symbol: String },
    #[error("{path}: cannot trace `{symbol}`: it unwinds the stack from its own frame (C++ throws, thread cancellation and pthread_exit, backtraces), which a return probe would cut short (a throw would abort the process, a thread skip its cleanup handlers), and it leaves through no exit instruction that can be probed; trace a function that calls it")]
    UnwindsOwnStack { path: PathBuf, symbol: String },
    #[error("{path}: cannot trace `{symbol}`: it has no exit instruction that can be probed (it leaves through an indirect jump, or never returns), and in code with exception tables a return probe could abort the process when an exception unwinds through it; --exits uretprobe traces it with a return probe at that risk, or trace a function that calls it")]
    NoProbeableExit { path: PathBuf, symbol: String },
    #[error("symbol `{symbol}` not found in {path}{}", not_found_hint(*.stripped, .debug_refused.as_deref(), .close))]
    SymbolNotFound {
        symbol: String,
        path: PathBuf,
        /// The file has only its exported `.dynsym` symbols.
        stripped: bool,
        /// The debug file found for it but not taken, and why (`PATH (why)`).
        debug_refused: Option<String>,
        /// Up to five names close to `symbol`.
        close: Vec<String>,
    },
    #[error("USDT probe `{spec}` matches no probe in {searched}{hint}")]
    UsdtNotFound {
        spec: String,
        searched: String,
        hint: String,
    },
    #[error("-U '{spec}': `{name}` matches no USDT probe of provider {provider} in {searched}{hint}; {form}", form = PAIRING_FORM)]
    PairNotFound {
        spec: String,
        provider: String,
        name: String,
        searched: String,
        hint: String,
    },
    #[error(
        "library `{name}` is not loaded by pid {pid}: check `grep {name} /proc/{pid}/maps` or give its path"
    )]
    LibraryNotMapped { name: String, pid: u32 },
    #[error("library `{name}` not found in the linker cache (ldconfig -p): give its path as TARGET")]
    LibraryNotFound { name: String },
    #[error("library `{name}` is neither among the libraries {program} loads at its start (DT_NEEDED, found through RPATH/RUNPATH, LD_LIBRARY_PATH and the defaults) nor in the linker cache (ldconfig -p): give its path as TARGET")]
    LibraryNotNeeded { name: String, program: PathBuf },
    #[error("`{spec}` takes the probes past --max-probes {max}: narrow the pattern, or raise --max-probes if that many are meant")]
    TooManyProbes { spec: String, max: usize },
    #[error("-F {hz} is above the kernel's sampling limit of {max} Hz (kernel.perf_event_max_sample_rate): choose at most -F {max}")]
    FrequencyTooHigh { hz: u64, max: u64 },
    #[error("--buffer-size {ring} cannot hold a CPU sample with its stack copy, up to {needed} bytes with --user-stack {stack}: give --buffer-size {enough} or more, or a smaller --user-stack")]
    RingTooSmallForSamples {
        ring: String,
        needed: u64,
        stack: String,
        enough: String,
    },
    #[error("{0}; see `xtrace --help`")]
    Usage(String),
    #[error("--stacks records the stack of each traced call and USDT hit, and none is traced: add -u [TARGET:]SYMBOL, -U [TARGET:]PROVIDER:NAME or --cuda, or drop --stacks")]
    StacksWithoutCalls,
    #[error("invalid probe `{spec}`: {reason}")]
    BadProbe { spec: String, reason: String },
    #[error("-U '{spec}': {reason}; {form}", form = PAIRING_FORM)]
    BadPairing { spec: String, reason: String },
    #[error("command `{command}` not found in PATH: check the name or give its path")]
    CommandNotFound { command: String },
    #[error("cannot run `{command}`: {why}; give the path of an executable")]
    CommandUnusable { command: String, why: String },
    #[error("cannot start `{command}`: {source}")]
    Launch { command: String, source: std::io::Error },
    #[error(
        "missing capability {missing} (xtrace needs CAP_BPF and CAP_PERFMON, or root): run it with sudo"
    )]
    MissingCapability { missing: String },
    #[error("cannot write {path}: {source}; choose another output directory with -o DIR")]
    Output { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}; give another file with -o FILE")]
    OutputFile { path: PathBuf, source: std::io::Error },
    #[error("-o {path}: {{{name}}} is no placeholder; use {{rank}} or {{host}}, or write the name out")]
    UnknownPlaceholder { path: String, name: String },
    #[error(
        "-o {path}: no rank for {{rank}}: neither the target's environment nor xtrace's sets {}; \
         write the rank in the path instead",
        crate::model::rank::RANK_VARIABLES
    )]
    NoRank { path: String },
    #[error("--start-at {at}: that time passed {ago} ago; give a later time, or /PERIOD for the next multiple of a period")]
    StartAtPassed { at: String, ago: String },
    #[error("attaching {what}: {source}")]
    Attach {
        what: String,
        source: aya::programs::ProgramError,
    },
    #[error(transparent)]
    Inject(Box<crate::inject::Error>),
    #[error("loading the kernel programs: {0}; is BPF enabled in this kernel (CONFIG_BPF_SYSCALL)?")]
    Load(#[from] aya::EbpfError),
    #[error("BPF map {name}: {source}")]
    Map {
        name: &'static str,
        source: aya::maps::MapError,
    },
    #[error("environment variable {name}={value} is not understood: set it to {expected}, or unset it")]
    BadEnvironment {
        name: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("this kernel (Linux {release}) offers no BPF: the bpf() system call {why}; xtrace needs Linux 5.15 or later with BPF, which sandboxes such as gVisor do not provide: run it on the host, or in a VM with such a kernel")]
    NoBpf { release: String, why: String },
    #[error("{what}: this kernel (Linux {release}) has no {feature}, which Linux {since} brought; {remedy}")]
    KernelLacks {
        what: String,
        release: String,
        feature: &'static str,
        since: &'static str,
        remedy: &'static str,
    },
    #[error("--live={given}: not an IP address with a port; give one such as --live=127.0.0.1:8080 (a host name is refused: what it resolves to could change under the page), or --live alone for loopback and a free port")]
    LiveAddress { given: String },
    #[error("--live={addr}: the port is in use by another program; choose another port, or give --live alone for a free one")]
    LivePortInUse { addr: String },
    #[error("--live={addr}: cannot listen there: {source}; give an IP address of this host, or --live alone for loopback")]
    LiveBind { addr: String, source: std::io::Error },
    #[error("--overhead: the kernel refused to turn on BPF run-time statistics ({0}); it needs CAP_SYS_ADMIN: run xtrace as root, or drop --overhead")]
    Overhead(String),
}

impl Error {
    /// Exit status for this error: 2 for bad input or environment the user can fix, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Attach { .. } | Error::Load(_) | Error::Map { .. } | Error::Io { .. } => 1,
            // As a shell reports a command a signal ended.
            Error::StoppedBeforeStart { number, .. } => 128 + *number as u8,
            _ => 2,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// Boxed: the injector's errors are larger than the others.
impl From<crate::inject::Error> for Error {
    fn from(e: crate::inject::Error) -> Self {
        Error::Inject(Box::new(e))
    }
}

/// What a stripped file's "not found" says of it, with the debug file found for it but not
/// taken (`PATH (why)`).
pub fn stripped_note(stripped: bool, refused: Option<&str>) -> String {
    match (stripped, refused) {
        (false, _) => String::new(),
        (true, Some(refused)) => format!(
            " (the file is stripped, and {refused} is not its debug file: only its exported \
             .dynsym functions are known)"
        ),
        (true, None) => " (the file is stripped and no debug file of it was found: only its \
                         exported .dynsym functions are known; --debug-dir names where debug files are)"
            .into(),
    }
}

/// The end of [`Error::SymbolNotFound`]'s message: the stripped note, then the close names, or
/// where to see them all.
pub fn not_found_hint(stripped: bool, refused: Option<&str>, close: &[String]) -> String {
    let stripped = stripped_note(stripped, refused);
    if close.is_empty() {
        format!("{stripped}; list the functions with `xtrace list symbols`")
    } else {
        format!("{stripped}; did you mean: {}?", close.join(", "))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
