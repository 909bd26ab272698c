//! The kernel's table of goroutines with open calls of Go code (`GO_STACKS`, see
//! xtrace-ebpf/src/goroutine.rs). The kernel removes a goroutine when its last open call ends; a
//! process that exits or runs exec with calls open leaves its goroutines there, so xtrace removes
//! those of processes that are gone and those of programs replaced by an exec (the kernel notes
//! each process's exec count after its exec in `GO_EXECS`), about once a second and at the end,
//! and counts their open calls as unmatched entries, as the kernel does for a thread that exits
//! inside traced calls.
use std::time::{Duration, Instant};

use aya::{
    maps::{HashMap, MapData},
    Ebpf,
};
use xtrace_common::probe::{EntryStack, MAX_DEPTH};

use crate::error::{Error, Result};

/// How often the table is swept while recording.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

pub struct Goroutines {
    table: HashMap<MapData, [u64; 3], EntryStack>,
    /// Process id → its exec count since its latest exec.
    execs: HashMap<MapData, u32, u64>,
    /// Open calls of the goroutines removed.
    pub unmatched: u64,
    swept: Instant,
}

impl Goroutines {
    /// Takes the table from `ebpf`.
    pub fn take(ebpf: &mut Ebpf) -> Result<Goroutines> {
        let table = HashMap::try_from(super::take_map(ebpf, "GO_STACKS")?).map_err(|source| Error::Map {
            name: "GO_STACKS",
            source,
        })?;
        let execs = HashMap::try_from(super::take_map(ebpf, "GO_EXECS")?).map_err(|source| Error::Map {
            name: "GO_EXECS",
            source,
        })?;
        Ok(Goroutines {
            table,
            execs,
            unmatched: 0,
            swept: Instant::now(),
        })
    }

    /// Removes the goroutines of processes that are gone or run another program: now when `now`,
    /// else at most once per [`SWEEP_EVERY`].
    pub fn sweep(&mut self, now: bool) {
        if !now && self.swept.elapsed() < SWEEP_EVERY {
            return;
        }
        self.swept = Instant::now();
        // Keys first: removing while walking the kernel's table could skip some.
        let keys: Vec<[u64; 3]> = self.table.keys().filter_map(|k| k.ok()).collect();
        let execs: std::collections::HashMap<u64, u64> = self
            .execs
            .iter()
            .filter_map(|e| e.ok())
            .map(|(pid, execs)| (u64::from(pid), execs))
            .collect();
        for key in keys {
            let replaced = execs.get(&key[0]).is_some_and(|&now| now != key[2]);
            if alive(key[0]) && !replaced {
                continue;
            }
            if let Ok(stack) = self.table.get(&key, 0) {
                self.unmatched += u64::from(stack.depth).min(MAX_DEPTH as u64);
            }
            let _ = self.table.remove(&key);
        }
    }
}

/// Whether process `pid` runs: it exists and is no zombie (its parent may not have reaped it yet).
fn alive(pid: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `PID (COMM) STATE ...`: COMM may hold spaces and parentheses; the state follows the last `)`.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_is_alive_and_pid_0_is_not() {
        assert!(super::alive(u64::from(std::process::id())));
        assert!(!super::alive(0));
        assert!(!super::alive(u64::from(u32::MAX)));
    }
}
