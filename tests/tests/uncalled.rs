//! Code a return probe would break is not traced. Code entered without a return address (a
//! program's entry point, signal-return and lazy-binding trampolines): a span's return probe would
//! write the kernel's trampoline address over what the stack holds there. At `_start` that is
//! `argc`: before xtrace knew, `-u '*'` over `spans exit 0` made the fixture see argc -8192, print
//! its usage and exit 64. And the unwinder's entry points and glibc's thread exit, which unwind
//! from their own return address; libc functions with return probes get a warning about thread
//! cancellation.

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, gocalls, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{listed_symbols, run_error, trace_fixture_to_exit, Xtrace},
    TempDir,
};

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn start_named_exactly_is_refused() {
    if !require_bpf() {
        return;
    }
    let spans = fixtures().spans.to_str().expect("UTF-8 path").to_owned();
    let line = run_error(args!["-u", "_start", "--", &spans, "exit", "0"]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: {spans}: cannot trace `_start`: it is entered without a return address \
             (a program's entry point, a signal-return or lazy-binding trampoline), where a span's \
             return probe would overwrite what the stack holds; trace a function it calls"
        )
    );
}

/// A glob that matches `_start` leaves it out with a warning; the command sees its own
/// arguments (it exits 0 having called work 3 times, instead of printing its usage).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_glob_leaves_start_out_and_the_command_keeps_its_arguments() {
    if !require_bpf() {
        return;
    }
    let spans = fixtures().spans.to_str().expect("UTF-8 path").to_owned();
    let tmp = TempDir::new("uncalled-glob");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args![
        "-u", "_st*", "-u", "work", "-o", &out_dir, "--", &spans, "exit", "0"
    ]);
    xtrace.wait_attached();
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    let warning = format!(
        "xtrace: warning: {spans}: 1 matched function(s) are entered without a return address (a \
         program's entry point, a signal-return or lazy-binding trampoline), where a span's return \
         probe would overwrite what the stack holds, so they are not traced: _start"
    );
    assert!(finished.stderr.contains(&warning), "{:#?}", finished.stderr);
    let out = Outputs::read(&out_dir);
    assert_eq!(u64_field(&out.summary["command"], "exit_code"), 0);
    assert_eq!(out.probe_count("work"), 3);
}

/// The entry point is known from the ELF header whatever its name: Go's `_rt0_amd64_linux`.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn list_symbols_shows_no_probe_for_the_entry_point() {
    if !require_bpf() {
        return;
    }
    let rows = listed_symbols(args![gocalls(), "_rt0_amd64_linux"]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][3..], ["-", "_rt0_amd64_linux"]);
}

/// The unwinder's entry points find their caller through their own return address, which a
/// return probe replaces: before xtrace refused them, `-u 'libgcc_s:*'` made every C++ throw
/// abort the process (`terminate called after throwing`). Named, one is refused; a glob leaves
/// the five out, and the `matrix` fixture's three throws are caught (it exits 0).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn unwinders_are_refused_and_throws_still_work() {
    if !require_bpf() {
        return;
    }
    let matrix = fixtures().matrix.to_str().expect("UTF-8 path").to_owned();
    let mut fixture = Fixture::spawn(&fixtures().matrix, &[]);
    fixture.wait_ready();
    let pid = fixture.pid().to_string();
    let tmp = TempDir::new("unwinders");
    let line = run_error(args![
        "-p",
        &pid,
        "-u",
        "libgcc_s:_Unwind_RaiseException",
        "-o",
        tmp.join("named")
    ]);
    let libgcc = line
        .strip_prefix("xtrace: error: ")
        .and_then(|rest| rest.split_once(": cannot trace "))
        .map(|(path, _)| path.to_owned())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(libgcc.contains("libgcc_s.so"), "{line}");
    assert_eq!(
        line,
        format!(
            "xtrace: error: {libgcc}: cannot trace `_Unwind_RaiseException`: it unwinds the stack \
             from its own frame (C++ throws, thread cancellation and pthread_exit, backtraces), \
             which a return probe would cut short (a throw would abort the process, a thread skip \
             its cleanup handlers), and it leaves through no exit instruction that can be probed; \
             trace a function that calls it"
        )
    );
    let out_dir = tmp.join("glob");
    let finished = trace_fixture_to_exit(&mut fixture, &["libgcc_s:*"], &out_dir);
    let warning = format!(
        "xtrace: warning: {libgcc}: 5 matched function(s) unwind the stack from their own frame \
         (C++ throws, thread cancellation and pthread_exit, backtraces), which a return probe would \
         cut short, and leave through no exit instruction that can be probed, so they are not \
         traced: _Unwind_RaiseException, _Unwind_ForcedUnwind, _Unwind_Resume, \
         _Unwind_Resume_or_Rethrow, _Unwind_Backtrace"
    );
    assert!(
        finished.stderr.contains(&warning),
        "{matrix}: {:#?}",
        finished.stderr
    );
    let out = Outputs::read(&out_dir);
    assert_eq!(out.stop_reason(), "targets_exited");
    assert!(out.probe_count("_Unwind_Find_FDE") > 0, "the throws unwound");
}

/// libc's exception tables are C's, for thread cancellation: a return probe there is said to cut
/// cancellation and pthread_exit short, with the remedy; `--exits ret` needs no such warning.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn return_probes_in_libc_warn_of_cancellation() {
    if !require_bpf() {
        return;
    }
    let spans = fixtures().spans.to_str().expect("UTF-8 path").to_owned();
    let tmp = TempDir::new("cleanups");
    let run = |exits: &str, dir: &str| {
        let finished = Xtrace::spawn(args![
            "--exits",
            exits,
            "-u",
            "libc:malloc",
            "-o",
            tmp.join(dir),
            "--",
            &spans,
            "exit",
            "0"
        ])
        .wait();
        finished.assert_success();
        finished.stderr
    };
    let stderr = run("auto", "auto");
    let warning = stderr
        .iter()
        .find(|l| l.contains("traced function(s) have return probes"))
        .unwrap_or_else(|| panic!("{stderr:#?}"));
    assert!(
        warning.ends_with(
            "libc.so.6: 1 traced function(s) have return probes: a thread cancelled, or ending \
             with pthread_exit, while one of them is on its stack skips the cleanup handlers and \
             C++ destructors of the frames above it (the unwinder cannot pass a return probe); \
             --exits ret probes their exit instructions instead (slower)"
        ),
        "{warning}"
    );
    let stderr = run("ret", "ret");
    assert!(
        !stderr.iter().any(|l| l.contains("have return probes")),
        "{stderr:#?}"
    );
}
