//! `xtrace merge DIR... -o OUT`: the captures of a distributed job (one per rank or host) as one
//! capture on one clock (see `export::merge`).
use std::path::PathBuf;

use clap::Args;

use crate::{
    analysis::{Error, Result},
    export::merge::{Align, Options},
    output::TraceFormat,
};

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The captures: directories written by `xtrace -o DIR`, each with its trace (two or more).
    ///
    /// Each is placed on the merged trace's clock by the clock pairs in its summary.json, read as
    /// it started and as it ended: captures of several hosts line up as far as their wall clocks
    /// agree (NTP keeps them within about a millisecond; PTP much closer). Its processes keep
    /// their names, after the host they ran on (`node7: python3 (rank 3 of 8)`), and are
    /// numbered apart (pid + N * 4194304 for the Nth capture).
    #[arg(value_name = "DIR", num_args = 2.., required = true)]
    pub dirs: Vec<PathBuf>,

    /// The directory to write the merged capture into (created if missing).
    ///
    /// It gets the merged trace, summary.json (the parts, each with its clock shift and drift)
    /// and, where the captures have them, their stacks.folded under one root frame per host and
    /// rank. `xtrace report` and `xtrace flamegraph` read it as any capture.
    #[arg(short = 'o', long = "output", value_name = "OUT", required = true)]
    pub output: PathBuf,

    /// The merged trace's format: perfetto (trace.perfetto-trace) or json (trace.json).
    ///
    /// The captures merged may hold either format. As for recording, the environment variable
    /// XTRACE_TRACE_FORMAT sets the default (the flag wins).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = TraceFormat::Perfetto,
          env = "XTRACE_TRACE_FORMAT")]
    pub trace_format: TraceFormat,

    /// Write the merged trace compressed.
    #[arg(long)]
    pub gzip: bool,

    /// Also name the stragglers of each step: the spans of this name (repeatable).
    ///
    /// A traced function (`-u train_step`) or a range (an NVTX range's name). The Nth span of the
    /// name on each rank is one step; a rank arrives where its first MPI collective inside the
    /// step begins, else where the step ends, and the rank that arrives last kept the others
    /// waiting. Without it, only MPI collectives (recorded with --mpi) are examined.
    #[arg(long = "step", value_name = "NAME")]
    pub steps: Vec<String>,

    /// How to line the captures up: by their clock pairs, or also by their MPI collectives.
    ///
    /// `collectives` then moves each capture so that the ends of its synchronizing collectives
    /// (MPI_Barrier, MPI_Allreduce, the all-gathers and all-to-alls, recorded with --mpi), which
    /// every rank leaves together, meet the reference capture's: the median difference over the
    /// calls paired by their order. Use it when the hosts' clocks agree less well than the
    /// collectives take (NTP's millisecond against microsecond collectives). summary.json's
    /// `merged[].aligned` says how far each moved.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = Align::Clocks)]
    pub align: Align,
}

/// Merges; returns the note saying what was written.
pub fn run(args: &MergeArgs) -> Result<String> {
    let out = std::fs::canonicalize(&args.output).ok();
    for dir in &args.dirs {
        if out.is_some() && std::fs::canonicalize(dir).ok() == out {
            return Err(Error::NotMergeable {
                path: args.output.clone(),
                reason: "it is one of the captures merged; give another directory with -o".into(),
            });
        }
    }
    let options = Options {
        format: args.trace_format,
        gzip: args.gzip,
        steps: args.steps.clone(),
        align: args.align,
    };
    let parts = crate::export::merge::run(&args.dirs, &args.output, &options)?;
    let most = |f: fn(&crate::export::merge::Part) -> u64| parts.iter().map(f).max().unwrap_or(0);
    Ok(format!(
        "merged {} captures into {}: shifted by up to {}, their clocks drifted up to {} (summary.json merged)",
        parts.len(),
        crate::output::shown(&args.output),
        crate::model::duration::human(most(|p| p.shift_ns)),
        crate::model::duration::human(most(|p| p.clock_drift_ns)),
    ))
}
