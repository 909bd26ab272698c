//! What the running kernel offers, for tests whose right outcome depends on it (the kernel matrix
//! runs them on Debian 12's 6.1 as well as on the development kernel). Asked the way users ask:
//! through `xtrace check`, whose BPF items load a program of each kind and let the kernel answer,
//! never from the version string. Also the parser of the check's lines, shared with check.rs.

use std::sync::OnceLock;

use crate::run::Xtrace;

/// The items, in order, as `xtrace check` lists them.
pub const CHECK_ITEMS: [&str; 14] = [
    "kernel",
    "btf",
    "bpf programs",
    "ring buffer",
    "uprobe_multi",
    "btf tracepoints",
    "sleepable uprobes",
    "lockdown",
    "perf_event_paranoid",
    "kptr_restrict",
    "capabilities",
    "CAP_SYS_PTRACE",
    "CAP_SYSLOG",
    "CAP_SYS_ADMIN",
];

/// One line of `xtrace check`: the item, its status word (`ok`, `limited`, ...) and the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckLine {
    pub item: String,
    pub status: String,
    pub detail: String,
}

/// The lines of the check's stdout; panics on a line that names no known item.
pub fn check_lines(stdout: &str) -> Vec<CheckLine> {
    stdout
        .lines()
        .map(|line| {
            // The longest name the line starts with: `btf tracepoints`, not `btf`.
            let item = CHECK_ITEMS
                .iter()
                .filter(|item| line.starts_with(*item))
                .max_by_key(|item| item.len())
                .unwrap_or_else(|| panic!("unknown item in {line:?}"));
            let rest = line[item.len()..].trim_start();
            let (status, detail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            CheckLine {
                item: item.to_string(),
                status: status.to_string(),
                detail: detail.trim().to_string(),
            }
        })
        .collect()
}

/// The BPF features of the running kernel that change what xtrace does.
#[derive(Debug)]
pub struct Kernel {
    /// The check's own lines, for the tests that assert them.
    pub check: Vec<CheckLine>,
    /// uprobe_multi links (Linux 6.6): without them xtrace attaches perf-event uprobes.
    pub uprobe_multi: bool,
    /// Sleepable uprobe programs: without them a string on a page not yet touched is not read.
    pub sleepable_uprobes: bool,
    /// BTF-typed tracepoints (`tp_btf/sched_switch`).
    pub btf_tracepoints: bool,
}

impl Kernel {
    /// The status word of `item` in the check.
    pub fn status(&self, item: &str) -> &str {
        self.line(item).status.as_str()
    }

    pub fn line(&self, item: &str) -> &CheckLine {
        self.check
            .iter()
            .find(|line| line.item == item)
            .unwrap_or_else(|| panic!("xtrace check has no {item} line: {:?}", self.check))
    }
}

/// (major, minor) of the running kernel's release, for the tests of `xtrace check` itself, which
/// cannot take its word for what the kernel has.
pub fn version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("reading osrelease");
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let mut next = || {
        parts
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a release like 6.1.0")
    };
    (next(), next())
}

/// The running kernel, asked once per test binary with `xtrace check` (as root, like the tests).
pub fn kernel() -> &'static Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    KERNEL.get_or_init(|| {
        let finished = Xtrace::spawn(crate::args!["check"]).wait();
        let check = check_lines(&finished.stdout);
        let ok = |item: &str| check.iter().any(|line| line.item == item && line.status == "ok");
        Kernel {
            uprobe_multi: ok("uprobe_multi"),
            sleepable_uprobes: ok("sleepable uprobes"),
            btf_tracepoints: ok("btf tracepoints"),
            check,
        }
    })
}
