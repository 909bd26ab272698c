//! `xtrace record`: flags for choosing targets, probes, and outputs.
use std::path::PathBuf;

use clap::{ArgGroup, Args};

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["pid", "command"])))]
pub struct RecordArgs {
    /// Trace this running process, all its threads (repeatable).
    #[arg(short = 'p', long = "pid", value_name = "PID", conflicts_with = "command")]
    pub pid: Vec<u32>,

    /// Attach a uprobe + uretprobe pair to SYMBOL, recording one span per call (repeatable).
    /// TARGET is a path, a library name such as `libc` found in the process's mappings, or omitted
    /// for the main executable.
    #[arg(short = 'u', long = "uprobe", value_name = "[TARGET:]SYMBOL", required = true)]
    pub uprobe: Vec<String>,

    /// Stop after this many seconds (fractions allowed).
    #[arg(short = 'd', long = "duration", value_name = "SECONDS", value_parser = parse_duration)]
    pub duration: Option<std::time::Duration>,

    /// Directory for trace.json, summary.json and summary.txt [default: xtrace-YYYYmmdd-HHMMSS].
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,

    /// Print nothing but errors (no attach notice, no summary table).
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,

    /// Launch COMMAND with ARGS and trace it until it exits.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if !(seconds.is_finite() && seconds > 0.0 && seconds < 1e9) {
        return Err(format!("`{text}` must be a positive number of seconds"));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0.5").unwrap().as_millis(), 500);
        assert_eq!(parse_duration("3").unwrap().as_secs(), 3);
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("inf").is_err());
    }
}
