//! Checking that xtrace leaves no BPF program loaded, with `bpftool prog show --json`.
//!
//! xtrace's kernel programs are named as in [`XTRACE_PROGRAMS`]. A test takes a
//! [`Programs`] snapshot before it starts xtrace and, after xtrace exits, asserts that no program
//! with those names and a new id remains. Program release is asynchronous (the kernel frees it
//! after the last reference — fd, perf event, link — goes away), so the check polls for up to 3 s.

use std::{
    collections::BTreeSet,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

/// Names of the kernel programs xtrace loads.
pub const XTRACE_PROGRAMS: &[&str] = &[
    "span_enter",
    "span_exit",
    "span_ret",
    "usdt_hit",
    "sample",
    "thread_exit",
    "thread_exec",
];

/// How long a released program may take to disappear.
const RELEASE_GRACE: Duration = Duration::from_secs(3);

/// The xtrace programs loaded at one moment: (id, name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Programs(BTreeSet<(u64, String)>);

impl Programs {
    /// Lists the currently loaded programs named like xtrace's.
    pub fn snapshot() -> Programs {
        let output = Command::new("bpftool")
            .args(["prog", "show", "--json"])
            .output()
            .unwrap_or_else(|e| panic!("running bpftool (install the bpftool package): {e}"));
        assert!(
            output.status.success(),
            "bpftool prog show --json failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let list: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("bpftool printed invalid JSON: {e}"));
        let programs = list
            .as_array()
            .expect("bpftool prog show --json prints an array")
            .iter()
            .filter_map(|prog| {
                let name = prog["name"].as_str()?;
                let id = prog["id"].as_u64()?;
                XTRACE_PROGRAMS.contains(&name).then(|| (id, name.to_owned()))
            })
            .collect();
        Programs(programs)
    }

    /// Programs in `self` that were not in `before`.
    pub fn new_since(&self, before: &Programs) -> Vec<(u64, String)> {
        self.0.difference(&before.0).cloned().collect()
    }

    /// Asserts that, within the grace period, every xtrace program loaded since this snapshot
    /// was taken is gone again.
    pub fn assert_none_left(&self) {
        let deadline = Instant::now() + RELEASE_GRACE;
        loop {
            let left = Programs::snapshot().new_since(self);
            if left.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "xtrace left BPF programs loaded {RELEASE_GRACE:?} after exiting: {left:?}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}
