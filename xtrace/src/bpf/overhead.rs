//! `--overhead`: how much CPU time xtrace's own kernel programs took in the traced processes. The
//! kernel counts each program's runs and run time only while someone holds a statistics file
//! descriptor (`BPF_ENABLE_STATS`), so xtrace holds one for the capture and reads the counts
//! before it unloads its programs. The count costs two clock reads per program run, and covers
//! the program only, not the kernel's uprobe trap around it.
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use aya::sys::{enable_stats, Stats};
use serde::Serialize;

use crate::error::{Error, Result};

/// Run-time statistics, on while this lives.
#[derive(Debug)]
pub struct StatsOn(#[allow(dead_code)] OwnedFd);

/// Turns the kernel's per-program run-time statistics on for this capture.
pub fn enable() -> Result<StatsOn> {
    enable_stats(Stats::RunTime)
        .map(StatsOn)
        .map_err(|e| Error::Overhead(e.io_error.to_string()))
}

/// One kernel program's share of the capture.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProgramCost {
    pub name: String,
    /// Times the program ran (a hit of one of its probes, or a sample).
    pub runs: u64,
    /// Time spent in it, over all runs.
    pub run_time_ns: u64,
    pub ns_per_run: f64,
}

impl ProgramCost {
    fn new(name: &str, runs: u64, run_time_ns: u64) -> Self {
        ProgramCost {
            name: name.to_owned(),
            runs,
            run_time_ns,
            ns_per_run: if runs == 0 {
                0.0
            } else {
                run_time_ns as f64 / runs as f64
            },
        }
    }
}

/// The programs that ran, most time first: those aya loaded and `others` (name, file descriptor),
/// the ones loaded for uprobe_multi links. Programs without statistics are left out.
pub fn read(ebpf: &aya::Ebpf, others: &[(&str, BorrowedFd)]) -> Vec<ProgramCost> {
    // Both kinds read the same kernel counters through their file descriptors (a program aya
    // never loaded has none).
    let loaded = ebpf
        .programs()
        .filter_map(|(name, program)| Some((name, program.fd().ok()?.as_fd())));
    let mut costs: Vec<ProgramCost> = loaded
        .chain(others.iter().copied())
        .filter_map(|(name, fd)| {
            let (runs, ns) = fdinfo_stats(fd)?;
            Some(ProgramCost::new(name, runs, ns))
        })
        .collect();
    costs.retain(|c| c.runs > 0);
    costs.sort_by(|a, b| b.run_time_ns.cmp(&a.run_time_ns).then(a.name.cmp(&b.name)));
    costs
}

/// `run_cnt` and `run_time_ns` of a program's file descriptor, from its fdinfo.
fn fdinfo_stats(fd: BorrowedFd) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    parse_fdinfo(&text)
}

fn parse_fdinfo(text: &str) -> Option<(u64, u64)> {
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
    };
    Some((field("run_cnt:")?, field("run_time_ns:")?))
}

/// The summary line: total program time, then each program's runs and time per run.
pub fn line(costs: &[ProgramCost]) -> String {
    let total: u64 = costs.iter().map(|c| c.run_time_ns).sum();
    let each: Vec<String> = costs
        .iter()
        .map(|c| format!("{} {} × {:.0}ns", c.name, c.runs, c.ns_per_run))
        .collect();
    format!(
        "overhead: xtrace's kernel programs ran for {} ({})",
        crate::model::duration::human(total),
        each.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_gives_runs_and_time() {
        let text = "pos:\t0\nflags:\t02000002\nprog_type:\t2\nprog_id:\t7\nrun_time_ns:\t123456\nrun_cnt:\t42\nrecursion_misses:\t0\n";
        assert_eq!(parse_fdinfo(text), Some((42, 123_456)));
        assert_eq!(parse_fdinfo("prog_type:\t2\n"), None);
    }

    #[test]
    fn line_totals_and_lists_each_program() {
        let costs = [
            ProgramCost::new("span_exit", 4, 800),
            ProgramCost::new("span_enter", 4, 400),
        ];
        assert_eq!(costs[0].ns_per_run, 200.0);
        assert_eq!(
            line(&costs),
            "overhead: xtrace's kernel programs ran for 1.2µs (span_exit 4 × 200ns, span_enter 4 × 100ns)"
        );
    }
}
