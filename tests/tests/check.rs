//! `xtrace check` on the real kernel: as root every item is ok and it exits 0, but for the BPF
//! features the kernel is older than (uprobe_multi before 6.6), which are `limited`;
//! without a capability xtrace needs it names the one missing, leaves the BPF items unknown (the
//! kernel could not be asked) and exits 1; with only CAP_BPF and CAP_PERFMON it can record and
//! names the optional capabilities it lacks. Nothing stays loaded either way.

use xtrace_tests::{
    args,
    bpf::Attachments,
    kernel::{check_lines, version, CHECK_ITEMS as ITEMS},
    require_bpf,
    run::Xtrace,
};

/// (item, status) of each line of the check's output.
fn statuses(stdout: &str) -> Vec<(String, String)> {
    check_lines(stdout)
        .into_iter()
        .map(|line| (line.item, line.status))
        .collect()
}

fn status_of<'a>(statuses: &'a [(String, String)], item: &str) -> &'a str {
    &statuses.iter().find(|(name, _)| name == item).unwrap().1
}

/// The development machine (6.18, root, BTF, uprobe_multi) has everything; Debian 12's 6.1 (the
/// kernel matrix) lacks uprobe_multi, which the check calls limited, naming the fallback and the
/// version that has it. Decided by the version, not by the check under test.
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
    let has_uprobe_multi = version() >= (6, 6);
    for (name, status) in &found {
        if name == "uprobe_multi" && !has_uprobe_multi {
            continue;
        }
        assert_eq!(status, "ok", "{name}: {}", finished.stdout);
    }
    if !has_uprobe_multi {
        let line = check_lines(&finished.stdout).remove(4);
        assert_eq!(
            (line.item.as_str(), line.status.as_str()),
            ("uprobe_multi", "limited")
        );
        assert!(
            line.detail.ends_with(
                "uprobes attach as perf-event uprobes, one per function: removing them takes \
                 ~0.1 s each, and finishes in the background after xtrace exits (Linux 6.6 has \
                 uprobe_multi)"
            ),
            "{line:?}"
        );
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
        let expected = if item == "uprobe_multi" && version() < (6, 6) {
            "limited"
        } else {
            "ok"
        };
        assert_eq!(status_of(&found, item), expected, "{item}: {}", finished.stdout);
    }
    for item in ["CAP_SYS_PTRACE", "CAP_SYSLOG", "CAP_SYS_ADMIN"] {
        assert_eq!(status_of(&found, item), "limited", "{item}");
    }
}
