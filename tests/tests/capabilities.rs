//! Privileges on the real kernel: without root, xtrace needs CAP_BPF and CAP_PERFMON and names
//! the one it lacks (exit 2, nothing attached); with both it needs nothing more: it traces and
//! samples a launched command as user 65534, following its children through raw tracepoints
//! without reading tracefs (which only root may read here).

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{as_nobody, expect_user_error, Finished, Xtrace},
    TempDir,
};

/// A scratch directory user 65534 may create the output directory in, so that only a missing
/// capability can be the error.
fn open_to_all(label: &str) -> TempDir {
    let tmp = TempDir::new(label);
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    tmp
}

/// Root without CAP_SYS_PTRACE (a container drops it) may not read another user's /proc files: it
/// is told the capability, not to run as root.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn root_without_cap_sys_ptrace_is_told_the_capability() {
    if !require_bpf() {
        return;
    }
    let mut other = as_nobody(&[])
        .args(["sleep", "60"])
        .spawn()
        .expect("starting sleep as 65534");
    let pid = other.id();
    let finished = Xtrace::spawn_without_ptrace(args!["list", "symbols", "--pid", pid.to_string()]).wait();
    other.kill().unwrap();
    other.wait().unwrap();
    assert_eq!(finished.status.code(), Some(2), "{:?}", finished.stderr);
    assert_eq!(
        finished.stderr,
        [format!("xtrace: error: cannot read /proc/{pid}/exe: permission denied to root without CAP_SYS_PTRACE (a container drops it): give xtrace that capability (docker run --cap-add SYS_PTRACE), or trace a process of its own user")]
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn without_root_needs_cap_bpf_and_cap_perfmon() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = open_to_all("no-root");
    let pid = fixture.pid().to_string();
    let error = |missing: &str| {
        format!(
            "xtrace: error: missing capability {missing} (xtrace needs CAP_BPF and CAP_PERFMON, or \
             root): run it with sudo"
        )
    };
    for (caps, missing) in [
        (&[][..], "CAP_BPF and CAP_PERFMON"),
        (&["bpf"][..], "CAP_PERFMON"),
        (&["perfmon"][..], "CAP_BPF"),
    ] {
        let before = Attachments::snapshot();
        let xtrace =
            Xtrace::spawn_with_capabilities(caps, args!["-p", &pid, "-u", "work", "-o", tmp.join("out")]);
        assert_eq!(
            expect_user_error(&before, xtrace),
            error(missing),
            "with {caps:?}"
        );
    }
    assert!(fixture.is_running(), "the traced process survives the errors");
    assert!(!tmp.join("out").exists(), "nothing is written before the check");
}

/// Runs xtrace with `args` as user 65534 holding only capabilities `caps`; expects it to succeed
/// and leave nothing attached.
fn record_as_nobody(caps: &[&str], args: Vec<std::ffi::OsString>) -> Finished {
    let before = Attachments::snapshot();
    let finished = Xtrace::spawn_with_capabilities(caps, args).wait();
    finished.assert_success();
    before.assert_none_left();
    finished
}

/// Runs xtrace with `args` as user 65534 holding only CAP_BPF and CAP_PERFMON.
fn record_with_the_two_capabilities(args: Vec<std::ffi::OsString>) {
    record_as_nobody(&["bpf", "perfmon"], args);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cap_bpf_and_cap_perfmon_suffice_without_root() {
    if !require_bpf() {
        return;
    }
    let tmp = open_to_all("caps-only");
    // Spans of a launched command.
    let spans_out = tmp.join("spans");
    record_with_the_two_capabilities(args![
        "-u",
        "work",
        "-o",
        &spans_out,
        "--",
        &fixtures().spans,
        "exit",
        "0"
    ]);
    let out = Outputs::read(&spans_out);
    assert_eq!(out.probe_count("work"), 3);
    let meta = std::fs::metadata(spans_out.join("trace.json")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (65534, 65534),
        "the files are the user's"
    );
    // Samples of a launched command and of the two processes it starts (stdin is /dev/null, so
    // `children` does not wait): one forked, one that execs.
    let profile_out = tmp.join("profile");
    record_with_the_two_capabilities(args![
        "-F",
        "999",
        "-o",
        &profile_out,
        "--",
        &fixtures().profile,
        "children",
        "400"
    ]);
    let out = Outputs::read_profiled(&profile_out);
    assert_eq!(out.summary["followed_processes"], 2);
    assert_eq!(out.summary["processes_not_followed"], 0);
    let folded = out.folded();
    let forked = folded
        .iter()
        .any(|(stack, _)| stack.ends_with(";main;children;split;hot_a"));
    let execed = folded
        .iter()
        .any(|(stack, _)| stack.ends_with(";main;split;hot_a") && !stack.contains("children"));
    assert!(
        forked && execed,
        "both children sampled and symbolized: {folded:?}"
    );
}

/// Whether /proc/kallsyms shows user 65534 holding `caps` every address as 0, as `head` reads it.
fn kallsyms_hidden_from_nobody(caps: &[&str]) -> bool {
    let mut head = as_nobody(caps);
    head.args(["head", "-n1", "/proc/kallsyms"]);
    let output = head.output().expect("setpriv runs");
    let line = String::from_utf8_lossy(&output.stdout).into_owned();
    let address = line.split_whitespace().next().expect("kallsyms has a first line");
    u64::from_str_radix(address, 16) == Ok(0)
}

/// Without CAP_SYSLOG (and with kernel.perf_event_paranoid at 2, its default) the kernel shows
/// the two-capability user no kallsyms address: xtrace says once that kernel frames stay bare
/// addresses, and how to name them; with CAP_SYSLOG it names them and says nothing.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn kernel_frames_are_named_only_where_kallsyms_shows_addresses() {
    if !require_bpf() {
        return;
    }
    let tmp = open_to_all("caps-kallsyms");
    let warning = "xtrace: warning: kernel frames will show bare addresses: /proc/kallsyms hides \
                   addresses from this user";
    let mut hidden_seen = Vec::new();
    for caps in [&["bpf", "perfmon"][..], &["bpf", "perfmon", "syslog"][..]] {
        let hidden = kallsyms_hidden_from_nobody(caps);
        hidden_seen.push(hidden);
        let out = tmp.join(&caps.join("-"));
        let finished = record_as_nobody(
            caps,
            args![
                "-F",
                "999",
                "-o",
                &out,
                "--",
                &fixtures().profile,
                "syscalls",
                "400"
            ],
        );
        let warned = finished.stderr.iter().filter(|l| l.starts_with(warning)).count();
        assert_eq!(
            warned,
            usize::from(hidden),
            "with {caps:?}: {:?}",
            finished.stderr
        );
        let folded = Outputs::read_profiled(&out).folded();
        let named = folded
            .iter()
            .any(|(stack, _)| stack.contains(";do_syscall_64_[k]"));
        let bare = folded.iter().any(|(stack, _)| stack.contains(";0xffff"));
        assert_eq!((named, bare), (!hidden, hidden), "with {caps:?}: {folded:?}");
    }
    let kptr_restrict = std::fs::read_to_string("/proc/sys/kernel/kptr_restrict").unwrap();
    if kptr_restrict.trim() != "2" {
        assert!(
            !hidden_seen[1],
            "CAP_SYSLOG shows kallsyms addresses unless kptr_restrict is 2"
        );
    }
}
