//! Command line: `xtrace [record] ...`, `xtrace list ...`, `xtrace flamegraph --diff ...`,
//! `xtrace report DIR`, `xtrace diff BASE NEW`, `xtrace convert DIR`, `xtrace merge DIR... -o OUT`,
//! `xtrace push`, `xtrace history`, `xtrace gate`, `xtrace check` and `xtrace generate -o DIR`.
//! `record` is also what `xtrace` does without a subcommand.
pub mod convert;
pub mod diff;
pub mod flamegraph;
pub mod generate;
pub mod list;
pub mod merge;
pub mod record;
mod record_values;
pub mod report;
pub mod status;
pub mod store;
pub mod view;

use clap::{Parser, Subcommand};

pub use record::RecordArgs;

/// `xtrace --version`: the package version and the commit it was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("XTRACE_COMMIT"), ")");

#[derive(Debug, Parser)]
#[command(
    name = "xtrace",
    version = VERSION,
    about = "Trace and profile a running process with eBPF",
    long_about = "Trace and profile a running process with eBPF, without restarting it: spans of \
                  the functions you name (-u), USDT probes (-U), CUDA calls (--cuda), NVTX/ITT \
                  ranges and CPU samples (-F), written as a Chrome/Perfetto trace, a summary, \
                  flamegraphs and pprof. `xtrace --pid PID` alone profiles the process. Run \
                  `xtrace check` first to see whether this host can record.",
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
    // Boxed: its flags outweigh every other command's.
    Record(Box<RecordArgs>),
    /// List what could be traced, e.g. `xtrace list symbols TARGET [GLOB]`.
    List(list::ListArgs),
    /// Draw a differential flamegraph of two captures: `xtrace flamegraph --diff BASE NEW`.
    Flamegraph(flamegraph::FlamegraphArgs),
    /// Re-render a capture: statistics, bottlenecks, or pprof/callgrind/span flamegraph.
    Report(report::ReportArgs),
    /// Compare two captures; exit 1 when a probe regressed (a CI gate).
    Diff(diff::DiffArgs),
    /// Write a capture's trace.json as trace.perfetto-trace beside it.
    Convert(convert::ConvertArgs),
    /// Merge the captures of a distributed job (its ranks, its hosts) into one, on one clock.
    Merge(merge::MergeArgs),
    /// Store a capture's statistics in a store of runs (SQLite or ClickHouse), once.
    Push(store::PushArgs),
    /// Show functions' statistics across the runs of a store, run by run or by label.
    History(store::HistoryArgs),
    /// Judge a run against stored baseline runs; exit 1 when a function regressed (a CI gate).
    Gate(store::GateArgs),
    /// Check whether this host can record: kernel, BTF, BPF features, settings, capabilities.
    ///
    /// Each item is `ok`, `missing` (recording cannot work until it is fixed), `limited`
    /// (recording works without what it gives) or `unknown` (it could not be found out), with
    /// what to do. Exit status 0 when recording can work, 1 when an item is missing; 2, with one
    /// error line instead of the items, on a kernel without BPF (gVisor).
    Check,
    /// Serve a finished capture with the live view's page: `xtrace view DIR`, or two compared:
    /// `xtrace view --diff BASE NEW`.
    ///
    /// The probe table (count, rate, p50 and p99 of summary.json, as `xtrace report` shows them)
    /// and the flamegraph of stacks.folded; with `--diff`, what `xtrace diff BASE NEW` prints and
    /// its differential flamegraph. Behind the same token, Host and Origin checks as
    /// `record --live`, until Ctrl-C or the page's Close button.
    View(view::ViewArgs),
    /// Write the man pages, shell completions and Markdown CLI reference into a directory.
    Generate(generate::GenerateArgs),
}

impl Cli {
    /// The subcommand, `record` when none was named.
    pub fn into_command(self) -> Command {
        self.command
            .unwrap_or_else(|| Command::Record(Box::new(self.record)))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    /// A negative number given to a numeric flag is refused by that flag's own check, which names
    /// it, not taken for an unknown flag (`unexpected argument '-1' found`).
    #[test]
    fn negative_values_name_their_flag() {
        for (args, flag) in [
            (&["-d", "-1"][..], "'--duration <SECONDS>'"),
            (&["-F", "-1"], "'--freq <HZ>'"),
            (&["--min-duration", "-1ms"], "'--min-duration <DURATION>'"),
            (&["--user-stack", "-1"], "'--user-stack <BYTES>'"),
            (&["--buffer-size", "-4K"], "'--buffer-size <BYTES>'"),
            (&["--max-probes", "-1"], "'--max-probes <N>'"),
            (&["-p", "-5"], "'--pid <PID>'"),
            (&["report", "x", "--top", "-1"], "'--top <N>'"),
            (&["report", "x", "--min-count", "-1"], "'--min-count <N>'"),
            (
                &["diff", "a", "b", "--threshold", "-5%"],
                "'--threshold <PERCENT>'",
            ),
            (&["diff", "a", "b", "--min-count", "-1"], "'--min-count <N>'"),
            (&["list", "symbols", "-p", "-1"], "'--pid <PID>'"),
        ] {
            let argv = std::iter::once("xtrace").chain(args.iter().copied());
            let error = super::Cli::try_parse_from(argv).unwrap_err().to_string();
            let wanted = format!("invalid value '{}' for {flag}", args[args.len() - 1]);
            assert!(error.contains(&wanted), "{args:?}: {error}");
        }
    }

    /// Off-CPU time is on by itself at 1 ms only for `--pid` without probes and without
    /// `--no-off-cpu`; an explicit `--off-cpu` keeps its own MIN; the two flags conflict.
    #[test]
    fn off_cpu_is_on_by_itself_for_a_pid_without_probes() {
        let config = |args: &[&str]| {
            let argv = std::iter::once("xtrace").chain(args.iter().copied());
            let config = super::Cli::try_parse_from(argv).unwrap().record.config();
            (config.off_cpu_by_default(), config.off_cpu_ns)
        };
        assert_eq!(config(&["-p", "1"]), (true, None));
        assert_eq!(config(&["-p", "1", "-F", "999", "-d", "1"]), (true, None));
        assert_eq!(config(&["-p", "1", "--no-off-cpu"]), (false, None));
        assert_eq!(config(&["-p", "1", "--off-cpu=5ms"]), (false, Some(5_000_000)));
        for probe in [
            &["-u", "f"][..],
            &["-U", "p:n"],
            &["--cuda"],
            &["--mpi"],
            &["--nvtx"],
            &["--itt"],
            &["--ranges"],
        ] {
            let args: Vec<&str> = ["-p", "1"].iter().chain(probe).copied().collect();
            assert_eq!(config(&args), (false, None), "{probe:?}");
        }
        assert_eq!(config(&["--", "true"]), (false, None));
        assert_eq!(config(&["-a", "-F", "99"]), (false, None));
        let argv = ["xtrace", "-p", "1", "--off-cpu", "--no-off-cpu"];
        let error = super::Cli::try_parse_from(argv).unwrap_err().to_string();
        assert!(
            error.contains("'--off-cpu[=<MIN>]' cannot be used with '--no-off-cpu'"),
            "{error}"
        );
    }
}
