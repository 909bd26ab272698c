//! Probe specifications and their attachment. `spec` parses what the user wrote, `elf` finds
//! symbols in executables and libraries (`glob` matches their names), `uprobe` resolves function
//! spans, `usdt` resolves USDT call sites, `attach` attaches both; `sampler` starts CPU sampling and
//! `follow` has it follow the processes that sampled processes start.
pub mod attach;
pub mod attach_drain;
mod attach_multi;
mod attach_perf;
pub mod branches;
mod detach;
pub mod elf;
pub mod entry;
pub mod exits;
pub mod follow;
pub mod glob;
pub mod ifunc;
pub mod insn;
mod left_out;
pub mod mpi_plan;
pub mod names;
pub mod needed;
pub mod nvtx;
pub mod offcpu;
pub mod planner;
pub mod ranges;
pub mod sampler;
pub mod spec;
pub mod symver;
pub mod teardown;
pub mod uprobe;
pub mod usdt;

use spec::ArgType;

/// A probe's family, as summary.json's `kind` and trace.json's `cat` name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    /// A function's calls (`-u`).
    Uprobe,
    /// A USDT probe's hits (`-U`).
    Usdt,
    /// A USDT begin/end pair's spans.
    UsdtSpan,
    /// A CUDA runtime or driver function.
    Cuda,
    /// An MPI function (`--mpi`).
    Mpi,
    /// `dlopen`, watched for CUDA libraries loaded later.
    Loader,
    /// A libnvToolsExt function, for NVTX ranges of a process without the tool library.
    Nvtx,
}

impl ProbeKind {
    /// Its name in the outputs.
    pub fn name(self) -> &'static str {
        match self {
            ProbeKind::Uprobe => "uprobe",
            ProbeKind::Usdt => "usdt",
            ProbeKind::UsdtSpan => "usdt_span",
            ProbeKind::Cuda => "cuda",
            ProbeKind::Mpi => "mpi",
            ProbeKind::Loader => "loader",
            ProbeKind::Nvtx => "nvtx",
        }
    }

    /// Whether its probe sits at one offset of a function (a USDT probe's sites are many).
    pub fn at_function(self) -> bool {
        !matches!(self, ProbeKind::Usdt | ProbeKind::UsdtSpan)
    }

    /// Whether probes of this kind are named by what the user asked for (a function, a USDT
    /// probe), so that one name in two files must be told apart.
    pub fn named_by_user(self) -> bool {
        matches!(self, ProbeKind::Uprobe | ProbeKind::Usdt | ProbeKind::UsdtSpan)
    }
}

/// One attached probe as user space knows it; its index in the probe table is the BPF cookie.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeInfo {
    /// Demangled symbol name, as shown in traces and summaries.
    pub name: String,
    pub kind: ProbeKind,
    /// The file the probe is in, as the traced process sees it.
    pub target: String,
    /// File offset of the probed instruction.
    pub offset: u64,
    /// Arguments and return value captured (from the first spec that named this function).
    pub capture: Capture,
}

/// What each probe captures, by probe id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capture {
    pub args: Vec<ArgType>,
    pub ret: Option<ArgType>,
    /// Go code: `args` are read from Go's register ABI (see `args::GO_ABI`).
    pub go: bool,
}

impl ProbeInfo {
    /// Whether the probe is in some file: the probes `--cuda` keeps for libraries loaded later
    /// have no target until one is.
    pub fn is_placed(&self) -> bool {
        !self.target.is_empty()
    }
}
