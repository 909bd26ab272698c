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
    run::{expect_user_error, Xtrace},
    TempDir,
};

/// A scratch directory user 65534 may create the output directory in, so that only a missing
/// capability can be the error.
fn open_to_all(label: &str) -> TempDir {
    let tmp = TempDir::new(label);
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    tmp
}

#[test]
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

/// Runs xtrace with `args` as user 65534 holding only CAP_BPF and CAP_PERFMON; expects it to
/// succeed and leave nothing attached.
fn record_with_the_two_capabilities(args: Vec<std::ffi::OsString>) {
    let before = Attachments::snapshot();
    Xtrace::spawn_with_capabilities(&["bpf", "perfmon"], args)
        .wait()
        .assert_success();
    before.assert_none_left();
}

#[test]
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
