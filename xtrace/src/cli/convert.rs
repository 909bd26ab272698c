//! `xtrace convert DIR --trace-format perfetto`: writes a capture's trace in another format
//! beside the one it has (see `export::convert`).
use std::path::PathBuf;

use clap::Args;

use crate::{analysis::Result, output::TraceFormat};

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The capture: a directory written by `xtrace -o DIR`, with a trace.json or trace.json.gz.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// The format to write: perfetto (trace.perfetto-trace, beside trace.json).
    ///
    /// The trace already there stays; a trace of the new format already there is never written
    /// over. `xtrace report` and `xtrace diff` read the capture alike from either trace.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = TraceFormat::Perfetto)]
    pub trace_format: TraceFormat,

    /// Write the new trace compressed (trace.perfetto-trace.gz).
    #[arg(long)]
    pub gzip: bool,
}

/// Converts; returns the note saying what was written.
pub fn run(args: &ConvertArgs) -> Result<String> {
    let name = crate::export::convert::run(&args.dir, args.trace_format, args.gzip)?;
    Ok(format!("wrote {}", crate::output::shown(&args.dir.join(name))))
}
