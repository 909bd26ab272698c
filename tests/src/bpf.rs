//! Checking that xtrace leaves no BPF program loaded, with `bpftool prog show --json`; reading
//! the keys of one of its maps while it runs.
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
    "process_fork",
    "process_exit",
];

/// How long a released program may take to disappear.
const RELEASE_GRACE: Duration = Duration::from_secs(3);

/// The xtrace programs loaded at one moment: (id, name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Programs(BTreeSet<(u64, String)>);

impl Programs {
    /// Lists the currently loaded programs named like xtrace's.
    pub fn snapshot() -> Programs {
        let list = bpftool_json(&["prog", "show"]);
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

/// `bpftool ARGS --json`, parsed.
fn bpftool_json(args: &[&str]) -> Value {
    let output = Command::new("bpftool")
        .args(args)
        .arg("--json")
        .output()
        .unwrap_or_else(|e| panic!("running bpftool (install the bpftool package): {e}"));
    assert!(
        output.status.success(),
        "bpftool {args:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("bpftool printed invalid JSON: {e}"))
}

/// The u32 keys of map `name` that process `pid` holds (found through the map ids in its
/// /proc/PID/fdinfo), sorted.
pub fn map_u32_keys(pid: u32, name: &str) -> Vec<u32> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).expect("reading the fdinfo of xtrace");
    let ids: BTreeSet<String> = fds
        .filter_map(|fd| std::fs::read_to_string(fd.ok()?.path()).ok())
        .filter_map(|info| {
            let line = info.lines().find(|l| l.starts_with("map_id:"))?;
            Some(line["map_id:".len()..].trim().to_owned())
        })
        .collect();
    let id = ids
        .iter()
        .find(|id| bpftool_json(&["map", "show", "id", id])["name"] == name)
        .unwrap_or_else(|| panic!("process {pid} holds no map named {name}"));
    let mut keys: Vec<u32> = bpftool_json(&["map", "dump", "id", id])
        .as_array()
        .expect("a map dump is an array")
        .iter()
        .map(|entry| {
            let bytes: Vec<u8> = entry["key"]
                .as_array()
                .expect("raw key bytes")
                .iter()
                .map(|b| u8::from_str_radix(b.as_str().unwrap().trim_start_matches("0x"), 16).unwrap())
                .collect();
            u32::from_le_bytes(bytes.try_into().expect("a 4-byte key"))
        })
        .collect();
    keys.sort_unstable();
    keys
}
