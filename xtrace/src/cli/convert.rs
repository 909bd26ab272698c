//! `xtrace convert DIR [--trace-format FORMAT]`: writes a capture's trace in the other format
//! beside the one it has (see `export::convert`).
use std::path::PathBuf;

use clap::Args;

use crate::{analysis::Result, output::TraceFormat};

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The capture: a directory written by `xtrace -o DIR`, with a trace.json, a
    /// trace.perfetto-trace or their .gz.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// The format to write: perfetto (trace.perfetto-trace) or json (trace.json) [default: the
    /// format the capture's trace is not in].
    ///
    /// Every event is written again: spans, instants, counters, async ranges, flow arrows, CPU
    /// samples, process and thread names. From a Perfetto trace, a span's `depth` is the one
    /// recorded (from an older xtrace's trace, its nesting on its track), an async range's id its
    /// track and its thread its process, and a counter of one series is named `value`: what
    /// Perfetto does not keep. The trace already there stays; a
    /// trace of the new format already there is never written over. `xtrace report` and `xtrace
    /// diff` read the capture alike from either trace.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub trace_format: Option<TraceFormat>,

    /// Write the new trace compressed (trace.json.gz, trace.perfetto-trace.gz).
    #[arg(long)]
    pub gzip: bool,
}

/// Converts; returns the note saying what was written.
pub fn run(args: &ConvertArgs) -> Result<String> {
    let name = crate::export::convert::run(&args.dir, args.trace_format, args.gzip)?;
    Ok(format!("wrote {}", crate::output::shown(&args.dir.join(name))))
}
