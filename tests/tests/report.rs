//! `xtrace report DIR` on recorded and synthetic captures (no root needed): golden files for every
//! text format, bottlenecks, and one-line errors with exit 2 for what is not a capture.

use std::os::unix::fs::PermissionsExt;

use xtrace_tests::{
    args,
    captures::{data, golden, noisy_durations, write_capture, xtrace},
    require_bpf,
    run::Xtrace,
    TempDir,
};

/// The fixture capture: the demo workload (train_step → load_batch, forward, backward → matmul ×2,
/// optimizer_step on 2 threads), traced for 0.3 s with CPU sampling at 499 Hz.
const WORKLOAD: &str = "workload-1";

#[test]
fn report_formats_match_golden_files() {
    for (format, file) in [
        ("text", "workload-1.report.txt"),
        ("json", "workload-1.report.json"),
        ("csv", "workload-1.report.csv"),
        ("callgrind", "workload-1.callgrind"),
    ] {
        let ran = xtrace(args!["report", data(WORKLOAD), "--format", format]);
        assert_eq!(ran.code, Some(0), "--format {format}: {}", ran.stderr);
        assert_eq!(ran.stderr, "", "--format {format} prints nothing on stderr");
        golden(file, &ran.stdout);
    }
    // The default format is text.
    let ran = xtrace(args!["report", data(WORKLOAD)]);
    golden("workload-1.report.txt", &ran.stdout);
}

/// `--top N` bounds every table of the text report, the threads (sorted by traced time) too.
#[test]
fn top_bounds_the_threads_table_too() {
    let ran = xtrace(args!["report", data(WORKLOAD), "--top", "1"]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let threads: Vec<&str> = ran
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("THREADS"))
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(threads.len(), 3, "{}", ran.stdout);
    assert_eq!(threads[0], "THREADS: TOP 1 BY TRACED TIME (of 2)");
    assert!(
        threads[2].contains("24390  24407  workload    134  313.95ms"),
        "{}",
        threads[2]
    );
    let ran = xtrace(args!["report", data(WORKLOAD), "--top", "0"]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(!ran.stdout.contains("THREADS"), "{}", ran.stdout);
    assert!(!ran.stdout.contains("TOP"), "{}", ran.stdout);
}

#[test]
fn report_numbers_agree_with_the_capture() {
    let ran = xtrace(args!["report", data(WORKLOAD), "--format", "json"]);
    let report: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data(WORKLOAD).join("summary.json")).unwrap()).unwrap();
    // Counts and totals per probe are the recorder's exact ones.
    for probe in summary["probes"].as_array().unwrap() {
        let name = probe["name"].as_str().unwrap();
        let row = report["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(row["count"], probe["count"], "{name}");
        assert_eq!(row["min_ns"], probe["min_ns"], "{name}");
        assert_eq!(row["max_ns"], probe["max_ns"], "{name}");
        let (a, b) = (
            row["total_ns"].as_u64().unwrap(),
            probe["total_ns"].as_u64().unwrap(),
        );
        assert!(
            a.abs_diff(b) <= row["count"].as_u64().unwrap(),
            "{name}: {a} vs {b}"
        );
    }
    // Leaf functions have self = total; train_step encloses nearly everything.
    let probe = |name: &str| {
        report["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(probe("matmul")["self_ns"], probe("matmul")["total_ns"]);
    assert!(
        probe("train_step")["self_ns"].as_u64().unwrap() * 100
            < probe("train_step")["total_ns"].as_u64().unwrap()
    );
    assert_eq!(report["samples"], summary["samples"]);
    assert_eq!(report["threads"].as_array().unwrap().len(), 2);
    assert_eq!(report["lost_events"], 0);
}

#[test]
fn outliers_list_the_span_with_its_thread_and_arguments() {
    let tmp = TempDir::new("report-outlier");
    let mut durations = noisy_durations(7, 40, 100_000.0, 1.0);
    durations.retain(|d| *d < 130_000);
    durations.push(2_000_000);
    write_capture(tmp.path(), Some(1), &[("work", durations)]);
    let ran = xtrace(args!["report", tmp.path(), "--format", "json"]);
    let report: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    let b = &report["bottlenecks"];
    assert_eq!(b["outliers_total"], 1, "{b}");
    assert_eq!(b["outliers"][0]["dur_ns"], 2_000_000);
    assert_eq!(b["outliers"][0]["thread"], "app");
    assert_eq!(b["outliers"][0]["tid"], 10);
    // Too few spans for --min-count: not searched.
    let ran = xtrace(args![
        "report",
        tmp.path(),
        "--format",
        "json",
        "--min-count",
        "1000"
    ]);
    let report: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(report["bottlenecks"]["outliers_total"], 0);
}

#[test]
fn waits_that_dominate_are_pointed_out() {
    let tmp = TempDir::new("report-waits");
    write_capture(
        tmp.path(),
        Some(1),
        &[
            ("cudaLaunchKernel", vec![10_000; 20]),
            ("cudaStreamSynchronize", vec![900_000; 20]),
        ],
    );
    let ran = xtrace(args!["report", tmp.path()]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stdout
            .contains("hint: waits dominate: 98.9% of the traced time is CUDA synchronization"),
        "{}",
        ran.stdout
    );
}

/// `-o` naming a directory is a file that cannot be written: said with the advice for a file.
#[test]
fn report_to_a_directory_is_refused_in_one_line() {
    let tmp = TempDir::new("report-o-dir");
    let line = xtrace(args!["report", data(WORKLOAD), "-o", tmp.path()])
        .user_error()
        .to_string();
    assert_eq!(
        line,
        format!(
            "xtrace: error: cannot write {}: Is a directory (os error 21); give another file with -o FILE",
            tmp.path().display()
        )
    );
}

/// `-o -` is standard output; a device is written to and stays a device (through a symbolic link
/// too); a symbolic link to a file, or a name ending in `/`, is refused and nothing changes.
#[test]
fn report_to_standard_output_devices_and_links() {
    let to_stdout = xtrace(args!["report", data(WORKLOAD), "--format", "csv"]);
    let ran = xtrace(args!["report", data(WORKLOAD), "--format", "csv", "-o", "-"]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert_eq!(ran.stdout, to_stdout.stdout);
    assert_eq!(ran.stderr, "xtrace: wrote standard output\n");
    let tmp = TempDir::new("report-o-links");
    let null = tmp.join("null");
    std::os::unix::fs::symlink("/dev/null", &null).unwrap();
    let ran = xtrace(args!["report", data(WORKLOAD), "-o", &null]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(std::fs::symlink_metadata(&null).unwrap().file_type().is_symlink());
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(
        &std::fs::metadata("/dev/null").unwrap().file_type()
    ));
    let victim = tmp.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let link = tmp.join("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let line = xtrace(args!["report", data(WORKLOAD), "-o", &link])
        .user_error()
        .to_string();
    assert_eq!(
        line,
        format!(
            "xtrace: error: cannot write {}: it is a symbolic link, which xtrace does not follow; \
             give another file with -o FILE",
            link.display()
        )
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    let slash = format!("{}/new/", tmp.path().display());
    let line = xtrace(args!["report", data(WORKLOAD), "-o", &slash])
        .user_error()
        .to_string();
    assert!(
        line.ends_with("a file name cannot end in '/'; give another file with -o FILE"),
        "{line}"
    );
    assert!(!tmp.join("new").exists());
}

#[test]
fn what_is_not_a_capture_is_refused_in_one_line() {
    let tmp = TempDir::new("report-bad");
    let line = xtrace(args!["report", tmp.path()]).user_error().to_string();
    assert!(
        line.ends_with(
            "not an xtrace capture (no summary.json); give a directory written by `xtrace -o DIR`"
        ),
        "{line}"
    );
    let line = xtrace(args!["report", tmp.join("missing")])
        .user_error()
        .to_string();
    assert!(
        line.contains("not an xtrace capture (no such directory)"),
        "{line}"
    );
    let file = tmp.join("file");
    std::fs::write(&file, "x").unwrap();
    let line = xtrace(args!["report", &file]).user_error().to_string();
    assert!(line.contains("not an xtrace capture (not a directory)"), "{line}");

    std::fs::write(tmp.join("summary.json"), "{\"duration_ns\": 1}").unwrap();
    let line = xtrace(args!["report", tmp.path()]).user_error().to_string();
    assert!(
        line.contains("(no trace.json, trace.perfetto-trace or their .gz)"),
        "{line}"
    );

    std::fs::write(tmp.join("trace.json"), "{\"traceEvents\":[]}").unwrap();
    let line = xtrace(args!["report", tmp.path()]).user_error().to_string();
    assert!(
        line.ends_with("the capture is empty (no spans and no samples); record again with probes (-u, -U, --cuda) or CPU sampling (-F) while the program does work"),
        "{line}"
    );

    std::fs::write(tmp.join("trace.json"), "{\"traceEvents\":[{\"ph\":\"X\",\"ts\":1").unwrap();
    let line = xtrace(args!["report", tmp.path()]).user_error().to_string();
    assert!(line.contains("trace.json: EOF while parsing"), "{line}");
    assert!(
        line.ends_with("; the capture is damaged: record it again"),
        "{line}"
    );

    std::fs::write(tmp.join("summary.json"), "not json").unwrap();
    let line = xtrace(args!["report", tmp.path()]).user_error().to_string();
    assert!(line.contains("summary.json: expected ident"), "{line}");

    write_capture(tmp.path(), Some(2), &[("work", vec![1_000; 3])]);
    let line = xtrace(args!["report", tmp.path()]).user_error().to_string();
    assert!(
        line.ends_with("capture format version 2 is newer than version 1, which this xtrace reads; analyse it with the xtrace that recorded it"),
        "{line}"
    );
    // No format_version: an older capture, read as version 1.
    write_capture(tmp.path(), None, &[("work", vec![1_000; 3])]);
    assert_eq!(xtrace(args!["report", tmp.path()]).code, Some(0));
}

/// A capture file the system will not open (its permissions, a link loop) is named with the
/// system's reason, and not called damaged.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_capture_file_that_cannot_be_read_is_no_damage() {
    if !require_bpf() {
        return; // running as another user needs root
    }
    let tmp = TempDir::new("report-unreadable");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    write_capture(tmp.path(), Some(1), &[("work", vec![1_000; 3])]);
    let summary = tmp.join("summary.json");
    std::fs::set_permissions(&summary, std::fs::Permissions::from_mode(0o600)).unwrap();
    let finished = Xtrace::spawn_unprivileged(args!["report", tmp.path()]).wait();
    assert_eq!(finished.status.code(), Some(2), "{:?}", finished.stderr);
    assert_eq!(
        finished.stderr,
        [format!(
            "xtrace: error: {}: cannot be read: permission denied; make it readable to this user, or run as its owner or root",
            summary.display()
        )]
    );
    let trace = tmp.join("trace.json");
    std::fs::remove_file(&trace).unwrap();
    std::os::unix::fs::symlink(&trace, &trace).unwrap();
    let line = xtrace(args!["report", tmp.path()]).user_error().to_string();
    assert!(
        line.ends_with(&format!(
            "{}: cannot be read: too many levels of symbolic links",
            trace.display()
        )),
        "{line}"
    );
    // The capture directory itself a link loop: not "no such directory".
    let looped = tmp.join("looped");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    let line = xtrace(args!["report", &looped]).user_error().to_string();
    assert_eq!(
        line,
        format!(
            "xtrace: error: {}: cannot be read: too many levels of symbolic links",
            looped.display()
        )
    );
}

/// Spans nested thousands deep (USDT or range pairs in a recursion) are cut at 512 frames, the
/// deeper ones shown as one `[deeper spans]` frame: a folded path per span would be quadratic.
#[test]
fn spans_nested_thousands_deep_are_cut_into_one_frame() {
    let tmp = TempDir::new("report-deep");
    write_capture(tmp.path(), Some(1), &[("work", vec![1_000])]);
    let n = 4_000u64;
    let spans: Vec<String> = (0..n)
        .map(|k| {
            format!(
                "{{\"ph\":\"X\",\"name\":\"r{}\",\"cat\":\"usdt\",\"ts\":{k},\"dur\":{},\"pid\":10,\"tid\":10}}",
                k % 2,
                2 * (n - k)
            )
        })
        .collect();
    std::fs::write(
        tmp.join("trace.json"),
        format!("{{\"traceEvents\":[\n{}\n]}}\n", spans.join(",\n")),
    )
    .unwrap();
    let svg = tmp.join("deep.svg");
    let ran = xtrace(args![
        "report",
        tmp.path(),
        "--format",
        "span-flamegraph",
        "-o",
        &svg
    ]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let svg = std::fs::read_to_string(&svg).unwrap();
    // 3,488 spans below the cut, each with 2 µs of self time (the innermost: its whole 2 µs).
    assert!(
        svg.contains("<title>[deeper spans] (6,976,000 ns"),
        "{}",
        &svg[..svg.len().min(2000)]
    );
}

/// stdout that cannot be written (a full disk behind a redirection; /dev/full here) is an error,
/// not an empty report that exits 0; a reader that stops early (`| head`) is none.
#[test]
fn a_stdout_that_cannot_be_written_is_an_error() {
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full")
    };
    let wl = data(WORKLOAD);
    // `diff` draws diff.svg in the working directory.
    let tmp = TempDir::new("report-stdout-full");
    for argv in [
        args!["report", &wl, "--format", "json"],
        args!["diff", &wl, &wl],
        args!["list", "symbols", "/lib/x86_64-linux-gnu/libm.so.6"],
    ] {
        let ran = std::process::Command::new(xtrace_tests::xtrace_bin())
            .args(&argv)
            .current_dir(tmp.path())
            .stdout(full())
            .output()
            .expect("running xtrace");
        assert_eq!(ran.status.code(), Some(2), "{argv:?}");
        let stderr = String::from_utf8_lossy(&ran.stderr);
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("xtrace: error: "))
            .collect();
        assert_eq!(
            errors,
            [
                "xtrace: error: cannot write to standard output: No space left on device (os error 28); \
              send it where there is room"
            ],
            "{argv:?}"
        );
    }
    // A standard output closed from the start (`>&-`): not the /dev/null Rust's runtime opens
    // in its place, where the report would vanish with exit 0.
    for (argv, error) in [
        (
            args!["report", &wl],
            "xtrace: error: cannot write to standard output: it was closed when xtrace started; \
             redirect it to a file or to /dev/null",
        ),
        (
            args!["report", &wl, "-o", "-"],
            "xtrace: error: cannot write -: it was closed when xtrace started; give another file \
             with -o FILE",
        ),
    ] {
        let ran = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$@" >&-"#)
            .arg("sh")
            .arg(xtrace_tests::xtrace_bin())
            .args(&argv)
            .output()
            .expect("running xtrace");
        assert_eq!(ran.status.code(), Some(2), "{argv:?}");
        assert_eq!(String::from_utf8_lossy(&ran.stderr).trim_end(), error, "{argv:?}");
    }
    // A reader that goes away: no error, exit 0; also for standard output named with `-o -`.
    let base = data(WORKLOAD);
    for argv in [
        args!["report", &wl, "--format", "json"],
        args!["report", &wl, "--format", "json", "-o", "-"],
        args!["report", &wl, "--format", "pprof", "-o", "-"],
        args!["diff", &base, data("workload-2"), "-o", "-"],
    ] {
        let mut head = std::process::Command::new(xtrace_tests::xtrace_bin())
            .args(&argv)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running xtrace");
        drop(head.stdout.take());
        let ran = head.wait_with_output().expect("waiting for xtrace");
        let stderr = String::from_utf8_lossy(&ran.stderr);
        assert_eq!(ran.status.code(), Some(0), "{argv:?}: {stderr}");
        assert!(!stderr.contains("error"), "{argv:?}: {stderr}");
    }
}
