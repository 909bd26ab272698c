//! Bad flags, environment variables and output directories: each case must print exactly one
//! stderr line starting `xtrace: error: ` that names the problem, exit with code 2, and leave no
//! xtrace BPF program loaded. Cases: invalid flag combinations (a pid and a command, --tid,
//! --no-inherit with -a, list without a subcommand), an unusable or taken output directory, bad
//! XTRACE_UPROBE_ATTACH and XTRACE_TOOL_LIB, --debug-dir that is no directory, an invalid
//! ring-buffer size, an invalid --exits mode and an unknown --trace-format (flag or
//! XTRACE_TRACE_FORMAT).

use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    require_bpf,
    run::{error_on_spinner, run_error, run_error_with_env},
    TempDir,
};

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn pid_and_command_together() {
    if !require_bpf() {
        return;
    }
    let fixture = Fixture::spin();
    let tmp = TempDir::new("pid-and-cmd");
    run_error(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "work",
        "-o",
        tmp.join("out"),
        "--",
        &fixtures().spans,
        "exit",
        "0"
    ]);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn unusable_output_directory() {
    if !require_bpf() {
        return;
    }
    let line = error_on_spinner(args!["-u", "work", "-o", "/proc/xtrace-no-such-dir"]);
    assert!(
        line.contains("cannot write /proc/xtrace-no-such-dir"),
        "names the directory: {line}"
    );
}

/// An output name taken by a directory, and `-o` naming a file, fail before anything is attached
/// (a taken name used to fail only when the recording ended).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn output_names_taken() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("taken-output");
    let out = tmp.join("out");
    std::fs::create_dir_all(out.join("trace.json")).unwrap();
    let line = error_on_spinner(args!["-u", "work", "-o", &out]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: cannot write {}: it is a directory; choose another output directory with -o DIR",
            out.join("trace.json").display()
        )
    );
    let file = tmp.join("a-file");
    std::fs::write(&file, "").unwrap();
    let line = error_on_spinner(args!["-u", "work", "-o", &file]);
    assert!(
        line.ends_with("a-file: it is a file, not a directory; choose another output directory with -o DIR"),
        "{line}"
    );
    let line = error_on_spinner(args!["-u", "work", "-o", "/dev/null"]);
    assert_eq!(
        line,
        "xtrace: error: cannot write /dev/null: it is not a directory; choose another output \
         directory with -o DIR"
    );
}

/// `xtrace list` without what to list: one line naming what is missing (clap would show the
/// command's help, whose first line is no error).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn list_without_a_subcommand() {
    if !require_bpf() {
        return;
    }
    let line = run_error(args!["list"]);
    assert_eq!(
        line,
        "xtrace: error: a subcommand is missing: list what could be traced, e.g. `xtrace list \
         symbols TARGET [GLOB]`; see `xtrace --help`"
    );
}

/// --tid with a launched command (whose threads do not exist yet) is refused; with -a the
/// thread must exist.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn tid_without_pid() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("tid-launch");
    let line = run_error(args![
        "-u",
        "work",
        "--tid",
        "12345",
        "-o",
        tmp.join("out"),
        "--",
        &fixtures().spans,
        "exit",
        "0"
    ]);
    assert_eq!(
        line,
        "xtrace: error: the argument '--tid <TID>' cannot be used with '[COMMAND]...'; see `xtrace --help`"
    );
    let spans = format!("{}:work", fixtures().spans.display());
    let line = run_error(args![
        "-a",
        "-u",
        &spans,
        "--tid",
        "999999999",
        "-o",
        tmp.join("out")
    ]);
    assert_eq!(
        line,
        "xtrace: error: no thread with id 999999999: check it with `ls /proc/999999999`"
    );
    // kthreadd (pid 2) runs no user code: with probes only, it would record nothing.
    let line = run_error(args!["-a", "-u", &spans, "--tid", "2", "-o", tmp.join("out")]);
    assert_eq!(
        line,
        "xtrace: error: thread 2 is a kernel thread: it runs no user code to probe; name a thread \
         of a user process, or sample it with -F HZ"
    );
}

/// --no-inherit limits sampling to the targets; -a samples every process, so it has none.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn no_inherit_with_system_wide() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("no-inherit-a");
    let line = run_error(args!["-a", "--no-inherit", "-o", tmp.join("out")]);
    assert_eq!(
        line,
        "xtrace: error: the argument '--system-wide' cannot be used with '--no-inherit'; see `xtrace --help`"
    );
}

/// An XTRACE_UPROBE_ATTACH that names no mechanism is refused before anything is created: no
/// output directory is left behind.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn bad_attach_variable() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("attach-env");
    let out = tmp.join("out");
    let line = run_error_with_env(
        args!["-u", "work", "-o", &out, "--", &fixtures().spans, "exit", "0"],
        &[("XTRACE_UPROBE_ATTACH", "bogus")],
    );
    assert_eq!(
        line,
        "xtrace: error: environment variable XTRACE_UPROBE_ATTACH=bogus is not understood: set it \
         to uprobe_multi or perf_event, or unset it"
    );
    assert!(!out.exists(), "no output directory made");
}

/// XTRACE_TOOL_LIB set to what is not a file is named, not taken for a missing build.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn tool_library_variable_not_a_file() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("tool-env");
    let line = run_error_with_env(
        args![
            "--ranges",
            "-o",
            tmp.join("out"),
            "--",
            &fixtures().spans,
            "exit",
            "0"
        ],
        &[("XTRACE_TOOL_LIB", "/nonexistent/libxtrace_tool.so")],
    );
    assert_eq!(
        line,
        "xtrace: error: --ranges: XTRACE_TOOL_LIB=/nonexistent/libxtrace_tool.so is not a file; set it \
         to the path of libxtrace_tool.so, or unset it; see `xtrace --help`"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn debug_dir_that_is_no_directory() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("bad-debug-dir");
    for (dir, why) in [
        ("/proc/self/exe", "not a directory"),
        (
            "/nonexistent-xtrace-debug",
            "No such file or directory (os error 2)",
        ),
    ] {
        let line = error_on_spinner(args!["-u", "work", "--debug-dir", dir, "-o", tmp.join("out")]);
        assert_eq!(
            line,
            format!(
                "xtrace: error: invalid value '{dir}' for '--debug-dir <DIR>': {why}; give the \
                 directory that holds the debug files; see `xtrace --help`"
            )
        );
    }
    assert!(!tmp.join("out").exists(), "nothing is created for invalid flags");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn invalid_buffer_size() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("bad-buffer");
    let line = error_on_spinner(args!["-u", "work", "--buffer-size", "3M", "-o", tmp.join("out")]);
    assert!(line.contains("power of two"), "says what a valid size is: {line}");
    assert!(!tmp.join("out").exists(), "nothing is created for invalid flags");
    // A ring too small for one sample and its stack copy would lose every sample.
    for (flags, enough) in [
        (args!["-F", "99"], "32K"),
        (args!["-F", "99", "--user-stack", "2K"], "8K"),
    ] {
        let mut all = flags;
        all.extend(args!["--buffer-size", "4K", "-o", tmp.join("out")]);
        let line = error_on_spinner(all);
        assert!(
            line.starts_with("xtrace: error: --buffer-size 4K cannot hold a CPU sample with its stack copy")
                && line.contains(&format!("give --buffer-size {enough} or more")),
            "{line}"
        );
        assert!(!tmp.join("out").exists());
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn invalid_exits_mode() {
    if !require_bpf() {
        return;
    }
    let line = error_on_spinner(args!["-u", "work", "--exits", "return"]);
    assert!(
        line.contains("'return' for '--exits <HOW>'") && line.contains("auto, uretprobe, ret"),
        "names the input and the valid values: {line}"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn unknown_trace_format() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("bad-trace-format");
    let line = error_on_spinner(args![
        "-u",
        "work",
        "--trace-format",
        "protobuf",
        "-o",
        tmp.join("out")
    ]);
    assert_eq!(
        line,
        "xtrace: error: invalid value 'protobuf' for '--trace-format <FORMAT>' \
         [possible values: json, perfetto]; see `xtrace --help`"
    );
    // The same from the environment variable that sets the default.
    let line = run_error_with_env(
        args!["-u", "work", "-o", tmp.join("out"), "--", "true"],
        &[("XTRACE_TRACE_FORMAT", "protobuf")],
    );
    assert!(
        line.starts_with("xtrace: error: invalid value 'protobuf' for '--trace-format <FORMAT>'"),
        "{line}"
    );
    assert!(!tmp.join("out").exists(), "nothing is created for invalid flags");
}
