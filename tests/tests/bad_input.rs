//! Bad input: each case must print exactly one stderr line starting `xtrace: error: ` that names
//! the problem, exit with code 2, and leave no xtrace BPF program loaded. Cases: nonexistent and
//! reaped pids, a pid that exits during attach, a non-ELF, a directory, a FIFO, a device and
//! another machine's ELF as TARGET, an unknown symbol (with a close-name suggestion), a command
//! that cannot run, a zombie pid, a truncated ELF, and control characters in a name. Bad flags,
//! environment variables and output directories are in bad_options.rs.

use std::{os::unix::fs::PermissionsExt, process::Command};

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    require_bpf,
    run::{error_on_spinner, run_error, Xtrace},
    TempDir,
};

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn nonexistent_pid() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("bad-pid");
    let line = run_error(args!["-p", "999999999", "-u", "work", "-o", tmp.join("out")]);
    assert!(line.contains("999999999"), "names the pid: {line}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn reaped_pid() {
    if !require_bpf() {
        return;
    }
    let mut child = Command::new("true").spawn().expect("spawning true");
    let pid = child.id().to_string();
    child.wait().expect("reaping true");
    let tmp = TempDir::new("reaped-pid");
    let line = run_error(args!["-p", &pid, "-u", "work", "-o", tmp.join("out")]);
    assert!(line.contains(&pid), "names the pid {pid}: {line}");
}

/// A process that exits while xtrace attaches: `spans exit-when-probed` exits the moment the
/// breakpoint of `-u work` appears in its code, while xtrace still has the sampler to start.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn pid_that_exits_during_attach() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().spans, &["exit-when-probed"]);
    fixture.wait_ready();
    let pid = fixture.pid();
    let tmp = TempDir::new("exits-during-attach");
    let line = run_error(args![
        "-p",
        pid.to_string(),
        "-u",
        "work",
        "-F",
        "99",
        "-o",
        tmp.join("out")
    ]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: process {pid} exited while xtrace was attaching: trace a process that \
             keeps running, or launch it with `xtrace -- COMMAND`"
        )
    );
    assert!(
        fixture.wait().success(),
        "the fixture saw the breakpoint and exited"
    ); // The output directory xtrace made for the recording is gone again: nothing was written.
    assert!(!tmp.join("out").exists(), "an empty output directory left behind");
}

/// A process whose main thread has exited (`pthread_exit`) while another thread runs: /proc/PID
/// shows no mappings any more, so it is refused, saying why and what to do.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn pid_whose_main_thread_has_exited() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().calls, &["leaderexit"]);
    fixture.wait_ready();
    let pid = fixture.pid();
    let line = run_error(args!["-p", pid.to_string(), "-u", "argfn"]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: process {pid}'s main thread has exited (pthread_exit) while 1 other \
             thread(s) run: its mappings are no longer readable through /proc/{pid}, so xtrace \
             cannot resolve its files; attach before the main thread exits, or launch it with \
             `xtrace -- COMMAND`"
        )
    );
    fixture.go();
    assert!(fixture.wait().success());
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn target_not_elf() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = TempDir::new("not-elf");
    let line = run_error(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "/etc/passwd:foo",
        "-o",
        tmp.join("out")
    ]);
    assert!(line.contains("not an ELF"), "says not an ELF: {line}");
    assert!(fixture.is_running(), "the traced process survives the error");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn target_is_directory() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = TempDir::new("dir-target");
    let line = run_error(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "/tmp:foo",
        "-o",
        tmp.join("out")
    ]);
    assert!(line.contains("directory"), "says directory: {line}");
    assert!(fixture.is_running(), "the traced process survives the error");
}

/// A FIFO as TARGET would block xtrace in open(), a device like /dev/zero would be read without
/// end: both are refused, naming what they are, before anything is opened.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn target_is_not_a_regular_file() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("fifo-target");
    let fifo = tmp.join("fifo");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("running mkfifo");
    assert!(made.success());
    let spec = format!("{}:work", fifo.display());
    let line = error_on_spinner(args!["-u", &spec, "-o", tmp.join("out")]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: {}: is a FIFO, not a file; give an executable or shared library as TARGET",
            fifo.display()
        )
    );
    let line = error_on_spinner(args!["-u", "/dev/zero:work", "-o", tmp.join("out")]);
    assert!(
        line.contains("/dev/zero: is a character device, not a file"),
        "{line}"
    );
    let line = error_on_spinner(args!["-U", "/dev/zero:p:n", "-o", tmp.join("out")]);
    assert!(
        line.contains("/dev/zero: is a character device, not a file"),
        "{line}"
    );
    // A regular file by its type whose content cannot be read.
    let line = error_on_spinner(args!["-u", "/proc/self/mem:work", "-o", tmp.join("out")]);
    assert_eq!(
        line,
        "xtrace: error: /proc/self/mem: Input/output error (os error 5); give an executable or \
         shared library that can be read"
    );
    // Without root too: `list` must not hang on it either.
    let listed = Xtrace::spawn(args!["list", "symbols", &fifo]).wait();
    assert_eq!(listed.status.code(), Some(2), "{:?}", listed.stderr);
    assert!(listed.stderr[0].contains("is a FIFO"), "{:?}", listed.stderr);
}

/// An ELF file for another machine (here the `spans` fixture relabelled aarch64) is refused: its
/// offsets would be probed as x86-64 code.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn target_of_another_architecture() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("arch-target");
    let foreign = tmp.join("spans-aarch64");
    let mut elf = std::fs::read(&fixtures().spans).expect("reading the spans fixture");
    elf[0x12..0x14].copy_from_slice(&183u16.to_le_bytes()); // e_machine = EM_AARCH64
    std::fs::write(&foreign, elf).unwrap();
    let spec = format!("{}:work", foreign.display());
    let line = error_on_spinner(args!["-u", &spec, "-o", tmp.join("out")]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: {}: Aarch64 code, not x86-64; xtrace traces x86-64 executables and libraries",
            foreign.display()
        )
    );
}

/// A function whose first instruction the kernel's uprobes refuse (a lock prefix), named exactly,
/// is refused before anything is attached, naming it and the instruction. (Before, the kernel's
/// refusal of the whole uprobe_multi link was taken for a kernel without uprobe_multi.) A glob
/// skips such functions with a warning and traces the rest.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn function_the_kernel_cannot_probe() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("unprobeable");
    let program = &fixtures().unprobeable;
    let line = run_error(args!["-u", "locked_entry", "-o", tmp.join("out"), "--", program]);
    // `lock incl xt_count(%rip)`: f0 ff 05, then the 4-byte displacement.
    let head = format!(
        "xtrace: error: {}: cannot probe `locked_entry`: its `inc` (f0 ff 05 ",
        program.display()
    );
    let tail = ") has a lock prefix, which the kernel's uprobes refuse; trace a function that calls it";
    assert!(line.starts_with(&head) && line.ends_with(tail), "{line}");
    assert_eq!(
        line.len(),
        head.len() + "xx xx xx xx".len() + tail.len(),
        "{line}"
    );
    // Named exactly after a glob already left it out: still refused.
    let again = run_error(args![
        "-u",
        "*_entry",
        "-u",
        "locked_entry",
        "-o",
        tmp.join("out"),
        "--",
        program
    ]);
    assert_eq!(again, line);
    // `int3`: the kernel takes the probe, but the program hung at the first call.
    let trap = run_error(args!["-u", "trap_entry", "-o", tmp.join("out"), "--", program]);
    assert_eq!(
        trap,
        format!(
            "xtrace: error: {}: cannot probe `trap_entry`: its `int3` (cc) is the program's own \
             trap, which a uprobe cannot step over (the program would hang); trace a function that \
             calls it",
            program.display()
        )
    );
    // `vmovdqu (%rdi),%xmm1`: the kernel looks its opcode byte up as `outs` and refuses it.
    let load = run_error(args!["-u", "load_entry", "-o", tmp.join("out"), "--", program]);
    assert_eq!(
        load,
        format!(
            "xtrace: error: {}: cannot probe `load_entry`: its `vmovdqu` (c5 fa 6f 0f) has a VEX \
             prefix and the opcode byte 0x6f, which the kernel's uprobes look up as a one-byte \
             opcode and refuse; trace a function that calls it",
            program.display()
        )
    );
    let out = tmp.join("glob");
    let before = Attachments::snapshot();
    let finished = Xtrace::spawn(args!["-u", "*_entry", "-u", "plain", "-o", &out, "--", program]).wait();
    finished.assert_success();
    before.assert_none_left();
    let warning = format!(
        "xtrace: warning: {}: 5 matched function(s) start with an instruction the kernel's uprobes \
         refuse (a lock or segment-override prefix, a vector instruction whose opcode byte they \
         refuse) or would not run (a vector instruction they take for a jump, a trap of the \
         program's own) and are not traced: locked_entry, segment_entry, trap_entry, load_entry, \
         vector_entry",
        program.display()
    );
    assert!(finished.stderr.contains(&warning), "{:?}", finished.stderr);
    let outputs = xtrace_tests::output::Outputs::read(&out);
    assert_eq!(outputs.probe_count("plain"), 5);
    assert_eq!(
        outputs.summary["probes"].as_array().unwrap().len(),
        1,
        "only plain is traced"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn unknown_symbol_suggests_close_names() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = TempDir::new("bad-symbol");
    let line = run_error(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "wrok",
        "-o",
        tmp.join("out")
    ]);
    assert!(line.contains("wrok"), "names the missing symbol: {line}");
    // The fixture's path may contain "work" (e.g. /work/...): look only outside of it.
    let dir = fixtures().spans.parent().unwrap().to_str().unwrap().to_owned();
    let canonical = std::fs::canonicalize(&dir).unwrap();
    let without_paths = line
        .replace(&dir, "<fixtures>")
        .replace(canonical.to_str().unwrap(), "<fixtures>");
    let suggests_work = without_paths
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|word| word == "work");
    assert!(suggests_work, "suggests `work`: {line}");
    assert!(fixture.is_running(), "the traced process survives the error");
}

/// pid 2 (kthreadd) exists but is a kernel thread: said so, not "no process".
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn kernel_thread_pid() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("kthread");
    let line = run_error(args!["-p", "2", "-u", "work", "-o", tmp.join("out")]);
    assert_eq!(
        line,
        "xtrace: error: pid 2 is a kernel thread: it runs no user code to probe; pass the pid of a user process"
    );
}

/// A process whose /proc files the user may not read (pid 1, for uid 65534) is not "no process".
#[test]
fn process_not_permitted() {
    let finished = Xtrace::spawn_unprivileged(args!["list", "symbols", "--pid", "1"]).wait();
    assert_eq!(finished.status.code(), Some(2), "{:?}", finished.stderr);
    assert_eq!(
        finished.stderr,
        ["xtrace: error: cannot read /proc/1/exe: permission denied; trace a process you own, or run xtrace as root"]
    );
}

/// A command path that is a directory, not executable, or missing says which, not "not found in
/// PATH".
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn command_that_cannot_run() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("bad-command");
    let plain = tmp.join("not-executable");
    std::fs::copy(&fixtures().spans, &plain).unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let missing = tmp.join("missing");
    for (command, why) in [
        (tmp.path().to_path_buf(), "it is a directory".to_string()),
        (plain.clone(), "it is not executable (chmod +x)".to_string()),
        (
            missing.clone(),
            "No such file or directory (os error 2)".to_string(),
        ),
    ] {
        let line = run_error(args!["-u", "work", "-o", tmp.join("out"), "--", &command]);
        assert_eq!(
            line,
            format!(
                "xtrace: error: cannot run `{}`: {why}; give the path of an executable",
                command.display()
            )
        );
    }
}

/// A command whose interpreter is missing (here a script's `#!` line; a binary's dynamic linker
/// alike) exists, so exec's ENOENT is explained, and the failed start leaves the last recording in
/// the output directory as it was.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn command_whose_interpreter_is_missing() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("bad-interpreter");
    let out = tmp.join("out");
    let recorded = Xtrace::spawn(args![
        "-q",
        "-u",
        "work",
        "-o",
        &out,
        "--",
        &fixtures().spans,
        "exit",
        "0"
    ]);
    recorded.wait().assert_success();
    let files = |dir: &std::path::Path| {
        let mut names: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
            .collect();
        names.sort();
        names
    };
    let before = files(&out);
    assert!(before.iter().any(|(name, _)| name.ends_with("/summary.json")));
    let script = tmp.join("script");
    std::fs::write(&script, "#!/nonexistent/interpreter -u\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let line = run_error(args!["-F", "99", "-o", &out, "--", &script]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: cannot start `{}`: its interpreter /nonexistent/interpreter does not \
             exist (No such file or directory (os error 2))",
            script.display()
        )
    );
    assert_eq!(files(&out), before, "the last recording is left as it was");
    let fresh = tmp.join("fresh");
    run_error(args!["-F", "99", "-o", &fresh, "--", &script]);
    assert!(!fresh.exists(), "no output directory made");
}

/// A TARGET whose path is not UTF-8 (only a launched command may be) is named in the error, with
/// what to do, for `list symbols` and inside a `-u` spec.
#[test]
fn arguments_that_are_not_utf8_are_named() {
    use std::os::unix::ffi::OsStringExt;
    let path = std::ffi::OsString::from_vec(b"/tmp/bad\xffname".to_vec());
    let mut spec = path.clone();
    spec.push(":main");
    for (args, n) in [
        (vec!["list".into(), "symbols".into(), path.clone()], 3),
        (args!["-u", spec, "--", "/bin/true"], 2),
    ] {
        assert_eq!(
            run_error(args),
            format!(
                "xtrace: error: argument {n} (`/tmp/bad\u{fffd}name{}`) is not valid UTF-8, which \
                 only directories (-o DIR, the captures of report and diff) and a launched command \
                 with its arguments (after `--`) may be; give that file a UTF-8 name or a symlink \
                 with one",
                if n == 2 { ":main" } else { "" }
            )
        );
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn zombie_pid() {
    if !require_bpf() {
        return;
    }
    // An exited child that is not reaped yet stays a zombie.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .contains("zombie")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "child {pid} never became a zombie"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let tmp = TempDir::new("bad-zombie");
    let line = run_error(args!["-p", pid.to_string(), "-u", "work", "-o", tmp.join("out")]);
    assert!(
        line.contains(&format!("process {pid} has exited")),
        "says the process exited: {line}"
    );
    child.wait().unwrap();
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn truncated_elf_target() {
    if !require_bpf() {
        return;
    }
    let fixture = Fixture::spin();
    let tmp = TempDir::new("bad-truncated");
    let truncated = tmp.join("truncated");
    let bytes = std::fs::read(&fixtures().spans).unwrap();
    std::fs::write(&truncated, &bytes[..200]).unwrap();
    let target = format!("{}:work", truncated.display());
    let line = run_error(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        target,
        "-o",
        tmp.join("out")
    ]);
    assert!(
        line.contains("not an ELF file"),
        "says the file is no usable ELF: {line}"
    );
    assert!(line.contains("truncated"), "names the file: {line}");
}

/// A name the user gave with a newline or a terminal escape in it is shown escaped: the error
/// stays one line and cannot drive the terminal.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn control_characters_in_a_name() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = TempDir::new("control-chars");
    let line = run_error(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "/no/such\nfile\u{1b}[2J:work",
        "-o",
        tmp.join("out")
    ]);
    assert!(
        line.contains("/no/such\\nfile\\u{1b}[2J"),
        "the name, escaped: {line}"
    );
    assert!(fixture.is_running(), "the traced process survives the error");
}

/// `xtrace list symbols` of a glob that matches nothing, or of a file without function symbols,
/// does not advise running `xtrace list symbols`, which is what was run.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn list_symbols_that_match_nothing() {
    if !require_bpf() {
        return;
    }
    let spans = fixtures().spans.display().to_string();
    let line = run_error(args!["list", "symbols", &spans, "zz*qq"]);
    assert_eq!(
        line,
        format!("xtrace: error: {spans}: no function matches `zz*qq`; list them all with `xtrace list symbols {spans}`")
    );
    // Of a process: listed as it maps the file (which may be deleted or replaced on disk since).
    let fixture = Fixture::spin();
    let pid = fixture.pid().to_string();
    for (glob, all) in [("zz*qq", "*"), ("libc:zz*qq", "libc:*")] {
        let line = run_error(args!["list", "symbols", "--pid", &pid, glob]);
        assert!(
            line.contains(": no function matches `zz*qq`")
                && line.ends_with(&format!(
                    "; list them all with `xtrace list symbols --pid {pid} '{all}'`"
                )),
            "{line}"
        );
    }
    drop(fixture);
    // A stripped copy with no exported function.
    let tmp = TempDir::new("list-stripped");
    let stripped = tmp.join("stripped");
    let ran = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&fixtures().spans)
        .status()
        .expect("running strip");
    assert!(ran.success());
    let line = run_error(args!["list", "symbols", &stripped]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: {}: no function symbols (it is stripped, exports none, and no debug file \
             of it was found; --debug-dir names where debug files are); trace its calls into \
             libraries (-u LIB:FUNC) or sample it (-F HZ)",
            stripped.display()
        )
    );
}
