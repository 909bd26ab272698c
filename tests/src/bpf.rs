//! Checking that xtrace leaves nothing attached in the kernel, with bpftool; reading the keys of
//! one of its maps while it runs.
//!
//! xtrace's kernel programs are named as in [`XTRACE_PROGRAMS`]. A test takes an [`Attachments`]
//! snapshot before it starts xtrace and, after xtrace exits, asserts that nothing of xtrace's that
//! is new since then remains: no program (`bpftool prog show`), no BPF link (`bpftool link show`:
//! uprobe_multi, perf_event and raw tracepoint links) and no perf event with one of its programs
//! attached (`bpftool perf show`, which walks every process's fds: uprobe perf events and raw
//! tracepoint fds). A link or perf event is xtrace's when its program has one of xtrace's names.
//! Release is asynchronous (the kernel frees a program after the last reference — fd, perf event,
//! link — goes away), so the check polls for up to 3 s, once any background helper that removes
//! perf-event uprobes after xtrace exits (`xtrace-detach`) has ended.

use std::{
    collections::{BTreeMap, BTreeSet},
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
    "call_stack",
    "usdt_hit",
    "usdt_stack",
    "gpu_records",
    "sample",
    "thread_exit",
    "thread_exec",
    "process_fork",
    "process_exit",
];

/// How long a released program may take to disappear.
const RELEASE_GRACE: Duration = Duration::from_secs(3);

/// The name of xtrace's background helper that removes perf-event uprobes after it exits.
const BACKGROUND_HELPER: &str = "xtrace-detach";

/// Waits, up to [`crate::SAFETY_TIMEOUT`], until no background helper of xtrace's runs (a zombie
/// that a slow init keeps counts as ended).
fn wait_for_background_helpers() {
    let running = || {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .any(|entry| {
                let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                // `PID (COMM) STATE ...`; the name cannot hold `)` here.
                let Some((_, rest)) = stat.split_once(" (") else {
                    return false;
                };
                rest.strip_prefix(BACKGROUND_HELPER)
                    .and_then(|r| r.strip_prefix(") "))
                    .is_some_and(|state| !state.starts_with('Z'))
            })
    };
    let deadline = Instant::now() + crate::SAFETY_TIMEOUT;
    while running() {
        assert!(
            Instant::now() < deadline,
            "xtrace's background helper still runs {:?} after xtrace exited",
            crate::SAFETY_TIMEOUT
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// One kernel object of xtrace's: a program, a link or a perf event, with the name of its program.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Attached {
    /// A loaded program: id, name.
    Program(u64, String),
    /// A BPF link: link id, link type, program name.
    Link(u64, String, String),
    /// A perf event (or raw tracepoint fd) with a program attached: holder pid, fd, fd type,
    /// program name.
    PerfEvent(u64, u64, String, String),
}

/// Everything of xtrace's attached in the kernel at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachments(BTreeSet<Attached>);

impl Attachments {
    /// Lists the programs named like xtrace's and the links and perf events that hold them.
    pub fn snapshot() -> Attachments {
        let names: BTreeMap<u64, String> = array(&bpftool_json(&["prog", "show"]))
            .iter()
            .filter_map(|prog| {
                let name = prog["name"].as_str()?;
                let id = prog["id"].as_u64()?;
                XTRACE_PROGRAMS.contains(&name).then(|| (id, name.to_owned()))
            })
            .collect();
        let program_of = |entry: &Value| names.get(&entry["prog_id"].as_u64()?).cloned();
        let mut all: BTreeSet<Attached> = names
            .iter()
            .map(|(id, name)| Attached::Program(*id, name.clone()))
            .collect();
        for link in array(&bpftool_json(&["link", "show"])) {
            if let (Some(name), Some(id)) = (program_of(link), link["id"].as_u64()) {
                all.insert(Attached::Link(id, kind(&link["type"]), name));
            }
        }
        for event in array(&bpftool_json(&["perf", "show"])) {
            if let (Some(name), Some(pid), Some(fd)) =
                (program_of(event), event["pid"].as_u64(), event["fd"].as_u64())
            {
                all.insert(Attached::PerfEvent(pid, fd, kind(&event["fd_type"]), name));
            }
        }
        Attachments(all)
    }

    /// What `self` holds that `before` did not.
    pub fn new_since(&self, before: &Attachments) -> Vec<Attached> {
        self.0.difference(&before.0).cloned().collect()
    }

    /// Asserts that programs of xtrace's, and links or perf events that hold them, are loaded now
    /// that were not at this snapshot: proof that [`Self::assert_none_left`] sees what it checks.
    pub fn assert_attached_since(&self) {
        let new = Attachments::snapshot().new_since(self);
        assert!(
            new.iter().any(|a| matches!(a, Attached::Program(..))),
            "no program of xtrace's is loaded while it is attached: {new:?}"
        );
        assert!(
            new.iter().any(|a| !matches!(a, Attached::Program(..))),
            "no link or perf event holds xtrace's programs while it is attached: {new:?}"
        );
    }

    /// Asserts that, within the grace period, every program, link and perf event of xtrace's
    /// that appeared since this snapshot was taken is gone again.
    pub fn assert_none_left(&self) {
        // On perf-event uprobes (kernels before 6.6) xtrace exits at once and leaves their
        // removal to a background helper: it is done once the helper is.
        wait_for_background_helpers();
        let deadline = Instant::now() + RELEASE_GRACE;
        loop {
            let left = Attachments::snapshot().new_since(self);
            if left.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "xtrace left these attached {RELEASE_GRACE:?} after exiting: {left:?}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A bpftool JSON array (bpftool prints `[]` or nothing useful otherwise).
fn array(value: &Value) -> &[Value] {
    value
        .as_array()
        .map(Vec::as_slice)
        .expect("bpftool --json prints an array")
}

/// A bpftool type field: a name, or a number for types this bpftool has no name for
/// (uprobe_multi links are type 12 to bpftool 7.x).
fn kind(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
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

/// The entries (key bytes, value bytes) of map `name` that process `pid` holds, found through the
/// map ids in its /proc/PID/fdinfo.
fn map_entries(pid: u32, name: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
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
    let bytes = |field: &Value| -> Vec<u8> {
        field
            .as_array()
            .expect("raw bytes")
            .iter()
            .map(|b| u8::from_str_radix(b.as_str().unwrap().trim_start_matches("0x"), 16).unwrap())
            .collect()
    };
    array(&bpftool_json(&["map", "dump", "id", id]))
        .iter()
        .map(|entry| (bytes(&entry["key"]), bytes(&entry["value"])))
        .collect()
}

/// The u32 keys of map `name` that process `pid` holds, sorted.
pub fn map_u32_keys(pid: u32, name: &str) -> Vec<u32> {
    let mut keys: Vec<u32> = map_entries(pid, name)
        .into_iter()
        .map(|(key, _)| u32::from_le_bytes(key.try_into().expect("a 4-byte key")))
        .collect();
    keys.sort_unstable();
    keys
}

/// The u32 value at index `index` of array map `name` that process `pid` holds.
pub fn array_u32(pid: u32, name: &str, index: u32) -> u32 {
    let (_, value) = map_entries(pid, name)
        .into_iter()
        .find(|(key, _)| key.as_slice() == index.to_le_bytes())
        .unwrap_or_else(|| panic!("map {name} of process {pid} has no index {index}"));
    u32::from_le_bytes(value.try_into().expect("a 4-byte value"))
}

/// The programs process `pid` holds, by name, with the instructions the verifier processed to
/// accept each (`verified_insns` in their /proc/PID/fdinfo, Linux 5.16+). Programs loaded twice
/// under one name show the larger count.
pub fn verified_insns(pid: u32) -> BTreeMap<String, u64> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).expect("reading the fdinfo of xtrace");
    let mut counts = BTreeMap::new();
    for info in fds.filter_map(|fd| std::fs::read_to_string(fd.ok()?.path()).ok()) {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let (Some(id), Some(insns)) = (field("prog_id:"), field("verified_insns:")) else {
            continue;
        };
        let name = bpftool_json(&["prog", "show", "id", &id.to_string()])["name"]
            .as_str()
            .expect("a program's name")
            .to_owned();
        let count = counts.entry(name).or_insert(0);
        *count = insns.max(*count);
    }
    counts
}

/// Counter `index` of the `COUNTERS` map (per CPU, summed) that the programs on the perf events
/// process `pid` holds use: the programs of a background helper's uprobes, whose maps no process
/// holds any more.
pub fn counter_of_held_programs(pid: u32, index: u32) -> u64 {
    let prog = array(&bpftool_json(&["perf", "show"]))
        .iter()
        .find(|event| event["pid"].as_u64() == Some(u64::from(pid)))
        .and_then(|event| event["prog_id"].as_u64())
        .unwrap_or_else(|| panic!("process {pid} holds no perf event with a program"));
    let maps = bpftool_json(&["prog", "show", "id", &prog.to_string()]);
    let id = array(&maps["map_ids"])
        .iter()
        .map(|id| id.as_u64().expect("a map id").to_string())
        .find(|id| bpftool_json(&["map", "show", "id", id])["name"] == "COUNTERS")
        .unwrap_or_else(|| panic!("program {prog} uses no COUNTERS map"));
    let le_u64 = |bytes: &Value| -> u64 {
        let bytes: Vec<u8> = array(bytes)
            .iter()
            .map(|b| u8::from_str_radix(b.as_str().unwrap().trim_start_matches("0x"), 16).unwrap())
            .collect();
        u64::from_le_bytes(bytes.try_into().expect("an 8-byte value"))
    };
    let entries = bpftool_json(&["map", "dump", "id", &id]);
    let entry = array(&entries)
        .iter()
        .find(|entry| key_u32(&entry["key"]) == index)
        .unwrap_or_else(|| panic!("COUNTERS has no index {index}"));
    array(&entry["values"]).iter().map(|v| le_u64(&v["value"])).sum()
}

/// A 4-byte key as bpftool prints it (hex bytes), as a number.
fn key_u32(key: &Value) -> u32 {
    let bytes: Vec<u8> = array(key)
        .iter()
        .map(|b| u8::from_str_radix(b.as_str().unwrap().trim_start_matches("0x"), 16).unwrap())
        .collect();
    u32::from_le_bytes(bytes.try_into().expect("a 4-byte key"))
}
