//! `xtrace check` on the real kernel: as root on this machine every item is ok and it exits 0;
//! without a capability xtrace needs it names the one missing, leaves the BPF items unknown (the
//! kernel could not be asked) and exits 1; with only CAP_BPF and CAP_PERFMON it can record and
//! names the optional capabilities it lacks. Nothing stays loaded either way.

use xtrace_tests::{args, bpf::Attachments, require_bpf, run::Xtrace};

/// The items, in order, as `xtrace check` lists them.
const ITEMS: [&str; 14] = [
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

/// (item, status) of each line of the check's output.
fn statuses(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .map(|line| {
            // The longest name the line starts with: `btf tracepoints`, not `btf`.
            let name = ITEMS
                .iter()
                .filter(|item| line.starts_with(*item))
                .max_by_key(|item| item.len())
                .unwrap_or_else(|| panic!("unknown item in {line:?}"));
            let status = line[name.len()..].split_whitespace().next().unwrap_or("");
            (name.to_string(), status.to_string())
        })
        .collect()
}

fn status_of<'a>(statuses: &'a [(String, String)], item: &str) -> &'a str {
    &statuses.iter().find(|(name, _)| name == item).unwrap().1
}

/// This machine (kernel 6.18, root, BTF, uprobe_multi) has everything.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn as_root_every_item_is_ok() {
    if !require_bpf() {
        return;
    }
    let before = Attachments::snapshot();
    let finished = Xtrace::spawn(args!["check"]).wait();
    finished.assert_success();
    let found = statuses(&finished.stdout);
    let names: Vec<&str> = found.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ITEMS);
    for (name, status) in &found {
        assert_eq!(status, "ok", "{name}: {}", finished.stdout);
    }
    assert_eq!(finished.stderr, ["xtrace: recording can work on this host"]);
    before.assert_none_left();
}

/// Without CAP_BPF the check names it, cannot ask the kernel about BPF, and exits 1.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn without_cap_bpf_the_check_names_it_and_fails() {
    if !require_bpf() {
        return;
    }
    let before = Attachments::snapshot();
    let finished = Xtrace::spawn_with_capabilities(&["perfmon"], args!["check"]).wait();
    assert_eq!(finished.status.code(), Some(1), "{finished:?}");
    let found = statuses(&finished.stdout);
    assert_eq!(status_of(&found, "capabilities"), "missing");
    let line = finished
        .stdout
        .lines()
        .find(|l| l.starts_with("capabilities"))
        .unwrap();
    assert!(
        line.ends_with("missing CAP_BPF (xtrace needs CAP_BPF and CAP_PERFMON, or root): run it with sudo"),
        "{line}"
    );
    for item in [
        "bpf programs",
        "ring buffer",
        "uprobe_multi",
        "btf tracepoints",
        "sleepable uprobes",
    ] {
        assert_eq!(status_of(&found, item), "unknown", "{item}: {}", finished.stdout);
    }
    for item in ["CAP_SYS_PTRACE", "CAP_SYSLOG", "CAP_SYS_ADMIN"] {
        assert_eq!(status_of(&found, item), "limited", "{item}");
    }
    assert_eq!(
        finished.stderr,
        ["xtrace: recording cannot work on this host: fix the items marked missing"]
    );
    before.assert_none_left();
}

/// CAP_BPF and CAP_PERFMON are all recording needs: the kernel answers every BPF item, and the
/// optional capabilities are named as limits.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn with_cap_bpf_and_cap_perfmon_recording_can_work() {
    if !require_bpf() {
        return;
    }
    let finished = Xtrace::spawn_with_capabilities(&["bpf", "perfmon"], args!["check"]).wait();
    finished.assert_success();
    let found = statuses(&finished.stdout);
    for item in [
        "capabilities",
        "bpf programs",
        "ring buffer",
        "uprobe_multi",
        "btf tracepoints",
        "sleepable uprobes",
    ] {
        assert_eq!(status_of(&found, item), "ok", "{item}: {}", finished.stdout);
    }
    for item in ["CAP_SYS_PTRACE", "CAP_SYSLOG", "CAP_SYS_ADMIN"] {
        assert_eq!(status_of(&found, item), "limited", "{item}");
    }
}
