//! Lifecycle: nothing of xtrace survives it, however it ends. SIGKILL (no chance to clean up) must
//! still leave no BPF program loaded, because every attachment is an fd the kernel closes. A full
//! output disk stops the recording with one error line, detaches, and renames the cut-short trace
//! to `trace.json.partial`. A traced process that crashes mid-capture ends the recording with
//! complete outputs. A file that fails after the trace was closed (summary.json) leaves trace.json
//! whole, under its own name. Under sudo, the outputs belong to the invoking user.

use std::{os::unix::fs::MetadataExt, process::Command};

use xtrace_tests::{
    args,
    bpf::Programs,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{Finished, Xtrace},
    TempDir,
};

/// The one `xtrace: error: ` line of a run that stopped on an output error (exit 2); warnings may
/// come before it.
fn the_error(finished: &Finished) -> &str {
    assert_eq!(finished.status.code(), Some(2), "stderr: {:?}", finished.stderr);
    let errors: Vec<&String> = finished
        .stderr
        .iter()
        .filter(|l| l.starts_with("xtrace: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {:?}", finished.stderr);
    errors[0]
}

#[test]
fn sigkill_leaves_nothing_attached() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = TempDir::new("sigkill");
    let before = Programs::snapshot();
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "work",
        "-o",
        tmp.join("out")
    ]);
    xtrace.wait_attached();
    assert!(
        !Programs::snapshot().new_since(&before).is_empty(),
        "programs are visible while attached"
    );
    xtrace.signal(libc::SIGKILL);
    let finished = xtrace.wait();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&finished.status),
        Some(libc::SIGKILL)
    );
    before.assert_none_left();
    assert!(
        fixture.is_running(),
        "the traced process survives xtrace being killed"
    );
}

/// A tmpfs of 64 KiB mounted for the test's lifetime.
struct TinyDisk {
    dir: std::path::PathBuf,
}

impl TinyDisk {
    fn mount(dir: std::path::PathBuf) -> TinyDisk {
        std::fs::create_dir_all(&dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "mounting a tmpfs at {} (root is required)",
            dir.display()
        );
        TinyDisk { dir }
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

#[test]
fn full_output_disk_marks_the_trace_partial() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = TempDir::new("full-disk");
    let disk = TinyDisk::mount(tmp.join("disk"));
    let out_dir = disk.dir.join("out");
    let before = Programs::snapshot();
    // `spin` makes ~100 spans a millisecond, ~10 MB of trace a second: 64 KiB fills at once.
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "work",
        "-d",
        "20",
        "-o",
        &out_dir
    ]);
    xtrace.wait_attached();
    let finished = xtrace.wait();
    before.assert_none_left();
    let error = the_error(&finished);
    assert!(error.contains("No space left on device"), "says why: {error}");
    assert!(error.contains("trace.json"), "names the file: {error}");
    assert!(
        out_dir.join("trace.json.partial").exists(),
        "the cut-short trace is marked partial"
    );
    assert!(
        !out_dir.join("trace.json").exists(),
        "no trace.json pretends to be whole"
    );
    assert!(fixture.is_running(), "the traced process survives");
}

#[test]
fn a_failing_summary_leaves_the_whole_trace_its_name() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = TempDir::new("summary-fails");
    let out_dir = tmp.join("out");
    let before = Programs::snapshot();
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "work",
        "-d",
        "0.5",
        "-o",
        &out_dir
    ]);
    xtrace.wait_attached();
    // A directory where summary.json goes, made after xtrace checked the names: the trace is closed
    // whole before summary.json fails.
    std::fs::create_dir_all(out_dir.join("summary.json")).unwrap();
    let finished = xtrace.wait();
    before.assert_none_left();
    let error = the_error(&finished);
    assert!(error.contains("summary.json"), "names the file: {error}");
    assert!(
        !out_dir.join("trace.json.partial").exists(),
        "a whole trace is not marked partial"
    );
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("trace.json")).unwrap())
            .expect("trace.json is whole JSON");
    let work = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "work")
        .count();
    assert!(work > 0, "the trace holds the calls of work()");
    assert!(fixture.is_running(), "the traced process survives");
}

#[test]
fn outputs_belong_to_the_sudo_user() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sudo-owner");
    let out_dir = tmp.join("out");
    let xtrace = Xtrace::spawn_with_env(
        args!["-u", "work", "-o", &out_dir, "--", &fixtures().spans, "exit", "0"],
        &[("SUDO_UID", "65534"), ("SUDO_GID", "65533")],
    );
    xtrace.wait().assert_success();
    let out = Outputs::read(&out_dir);
    assert_eq!(out.probe_count("work"), 3);
    for path in [
        out_dir.clone(),
        out_dir.join("trace.json"),
        out_dir.join("summary.json"),
        out_dir.join("summary.txt"),
    ] {
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (65534, 65533),
            "owner of {}",
            path.display()
        );
    }
}

#[test]
fn target_crash_mid_capture_leaves_complete_outputs() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let pid = fixture.pid();
    let tmp = TempDir::new("crash");
    let out_dir = tmp.join("out");
    let before = Programs::snapshot();
    let mut xtrace = Xtrace::spawn(args!["-p", pid.to_string(), "-u", "work", "-o", &out_dir]);
    xtrace.wait_attached();
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSEGV) }, 0);
    let status = fixture.wait();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGSEGV)
    );
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    let out = Outputs::read(&out_dir);
    assert_eq!(out.stop_reason(), "targets_exited");
    let spans = out.spans();
    assert!(!spans.is_empty(), "spans before the crash are kept");
    assert_eq!(
        out.probe_count("work"),
        spans.len() as u64,
        "summary count == spans in trace.json"
    );
}
