//! Lifecycle of the output files: a full output disk stops the recording with one error line,
//! detaches, and leaves the cut-short trace as `trace.json.partial`; a file that fails after the
//! trace was closed (summary.json) leaves trace.json whole, under its own name. Under sudo, the
//! outputs belong to the invoking user. Once open, the output directory is written through its
//! descriptor: swapping it for a symbolic link mid-capture sends nothing elsewhere. The default
//! output directory is always a new one, and outputs that cannot be handed over are not left
//! behind.

use std::{os::unix::fs::MetadataExt, process::Command};

use xtrace_tests::{
    args,
    bpf::Attachments,
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn full_output_disk_marks_the_trace_partial() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = TempDir::new("full-disk");
    let disk = TinyDisk::mount(tmp.join("disk"));
    let out_dir = disk.dir.join("out");
    let before = Attachments::snapshot();
    // `spin` makes ~100 spans a millisecond, ~10 MB of trace a second: 64 KiB fills at once.
    let mut xtrace = Xtrace::record_work(fixture.pid(), args!["-d", "20"], &out_dir);
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_failing_summary_leaves_the_whole_trace_its_name() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = TempDir::new("summary-fails");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::record_work(fixture.pid(), args!["-d", "0.5"], &out_dir);
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn outputs_belong_to_the_sudo_user() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sudo-owner");
    // Two directories xtrace creates, `runs` and `runs/out`, under one that exists.
    let out_dir = tmp.join("runs/out");
    let xtrace = Xtrace::spawn_with_env(
        args!["-u", "work", "-o", &out_dir, "--", &fixtures().spans, "exit", "0"],
        &[("SUDO_UID", "65534"), ("SUDO_GID", "65533")],
    );
    xtrace.wait().assert_success();
    let out = Outputs::read(&out_dir);
    assert_eq!(out.probe_count("work"), 3);
    let tmp_meta = std::fs::metadata(tmp.path()).unwrap();
    assert_eq!(
        (tmp_meta.uid(), tmp_meta.gid()),
        (0, 0),
        "a directory that existed stays root's"
    );
    for path in [
        tmp.join("runs"),
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn an_output_directory_swapped_for_a_link_mid_capture_keeps_the_outputs() {
    if !require_bpf() {
        return;
    }
    let fixture = Fixture::spin();
    let tmp = TempDir::new("swapped-out");
    let out_dir = tmp.join("out");
    let elsewhere = tmp.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let mut xtrace = Xtrace::record_work(fixture.pid(), args!["-d", "0.5"], &out_dir);
    xtrace.wait_attached();
    let moved = tmp.join("moved");
    std::fs::rename(&out_dir, &moved).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &out_dir).unwrap();
    xtrace.wait().assert_success();
    let out = Outputs::read(&moved);
    assert!(
        out.probe_count("work") > 0,
        "the outputs are in the directory xtrace opened"
    );
    assert_eq!(
        out.probe_count("work"),
        out.spans().len() as u64,
        "summary count == spans in trace.json, read back through the same directory"
    );
    let mut names: Vec<_> = std::fs::read_dir(&moved)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "profile.pb.gz",
            "span-flamegraph.svg",
            "summary.json",
            "summary.txt",
            "trace.json"
        ]
    );
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing followed the link"
    );
}

/// Without `-o`, the default directory is made anew: a symbolic link another user planted under
/// the guessable `xtrace-YYYYmmdd-HHMMSS` (here for every second of the next half minute) is
/// passed over for `…-2`, and the directory it points at, whose `summary.json` xtrace would have
/// replaced, is left as it was.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn the_default_output_directory_is_made_anew() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("default-dir");
    let victim = tmp.join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("summary.json"), "precious").unwrap();
    let shared = tmp.join("shared");
    std::fs::create_dir(&shared).unwrap();
    // One starting second for every name: `date` run afresh each time would skip a second
    // whenever the clock ticked between two runs.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for second in now..now + 30 {
        let name = std::process::Command::new("date")
            .arg(format!("-d@{second}"))
            .arg("+xtrace-%Y%m%d-%H%M%S")
            .output()
            .expect("running date");
        let name = String::from_utf8(name.stdout).unwrap();
        std::os::unix::fs::symlink(&victim, shared.join(name.trim())).unwrap();
    }
    let done = std::process::Command::new(xtrace_tests::xtrace_bin())
        .current_dir(&shared)
        .args(["-q", "-u", "work", "--"])
        .arg(&fixtures().spans)
        .args(["exit", "0"])
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65533")
        .output()
        .expect("running xtrace");
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let names: Vec<String> = std::fs::read_dir(&victim)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["summary.json"]);
    assert_eq!(
        std::fs::read_to_string(victim.join("summary.json")).unwrap(),
        "precious"
    );
    let made: Vec<std::path::PathBuf> = std::fs::read_dir(&shared)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.is_symlink())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(made[0].to_string_lossy().ends_with("-2"), "{made:?}");
    let meta = std::fs::metadata(&made[0]).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (65534, 65533));
    assert_eq!(Outputs::read(&made[0]).probe_count("work"), 3);
}

/// Under sudo, where the outputs cannot be handed to the invoking user (root without
/// CAP_CHOWN), xtrace fails with one line and leaves nothing of root's behind: not the directories
/// it made, not a `.partial` file.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn outputs_that_cannot_be_handed_over_are_not_left_behind() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("no-chown");
    let without_chown = |args: Vec<std::ffi::OsString>| {
        std::process::Command::new("setpriv")
            .arg("--bounding-set=-chown")
            .arg("--")
            .arg(xtrace_tests::xtrace_bin())
            .args(args)
            .env("SUDO_UID", "65534")
            .env("SUDO_GID", "65533")
            .output()
            .expect("running setpriv")
    };
    let out_dir = tmp.join("runs/out");
    let done = without_chown(args![
        "-q",
        "-u",
        "work",
        "-o",
        &out_dir,
        "--",
        &fixtures().spans,
        "exit",
        "0"
    ]);
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Operation not permitted"), "{stderr}");
    assert!(!tmp.join("runs").exists(), "the directory xtrace made is removed");
    let report = tmp.join("report.txt");
    let done = without_chown(args![
        "report",
        xtrace_tests::captures::data("workload-1"),
        "-o",
        &report
    ]);
    assert_eq!(done.status.code(), Some(2));
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
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
