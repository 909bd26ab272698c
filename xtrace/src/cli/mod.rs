//! Command line: `xtrace [record] ...`. `record` is also what `xtrace` does without a subcommand.
pub mod record;
pub mod status;

use clap::{Parser, Subcommand};

pub use record::RecordArgs;

#[derive(Debug, Parser)]
#[command(
    name = "xtrace",
    version,
    about = "Trace and profile a running process with eBPF",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub record: RecordArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Attach probes to processes and record spans (the default).
    Record(RecordArgs),
}

impl Cli {
    /// The record arguments, whether given with or without the `record` subcommand.
    pub fn into_record(self) -> RecordArgs {
        match self.command {
            Some(Command::Record(args)) => args,
            None => self.record,
        }
    }
}
