//! A kernel without BPF (gVisor, a kernel built without CONFIG_BPF_SYSCALL), made real for xtrace
//! alone by a seccomp filter under which bpf() fails with ENOSYS: `xtrace check` and every
//! recording command say so in one line that names the kernel, exit 2, and leave nothing attached.

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    require_bpf,
    run::{expect_user_error, Xtrace},
    TempDir,
};

/// The error line's start, and the running kernel's release it names.
fn assert_no_bpf_line(line: &str) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let expected = format!(
        "xtrace: error: this kernel (Linux {}) offers no BPF: ",
        release.trim()
    );
    assert!(line.starts_with(&expected), "{line}");
    assert!(line.contains("(ENOSYS)") && line.contains("gVisor"), "{line}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn check_says_the_kernel_offers_no_bpf() {
    if !require_bpf() {
        return;
    }
    let finished = Xtrace::spawn_without_bpf(args!["check"]).wait();
    assert_eq!(finished.status.code(), Some(2), "{:?}", finished.stderr);
    assert_eq!(finished.stderr.len(), 1, "{:?}", finished.stderr);
    assert_no_bpf_line(&finished.stderr[0]);
    assert_eq!(
        finished.stdout, "",
        "no table of items none of which could be asked"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn every_recording_says_the_kernel_offers_no_bpf() {
    if !require_bpf() {
        return;
    }
    let fixture = Fixture::spin();
    let tmp = TempDir::new("no-bpf");
    let pid = fixture.pid().to_string();
    let spans = fixtures().spans.clone();
    for (n, flags) in [
        args!["-p", &pid, "-u", "work"],
        args!["-p", &pid, "-F", "99"],
        args!["-a", "-F", "99", "-d", "1"],
        args!["-u", "work", "--", &spans, "threads", "1", "1"],
    ]
    .into_iter()
    .enumerate()
    {
        let before = Attachments::snapshot();
        let out = tmp.join(&format!("out{n}"));
        let mut all = args!["-o", &out];
        all.extend(flags);
        let line = expect_user_error(&before, Xtrace::spawn_without_bpf(all));
        assert_no_bpf_line(&line);
        assert!(!out.exists(), "no output directory: {}", out.display());
    }
}
