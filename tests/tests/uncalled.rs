//! Code entered without a return address (a program's entry point, signal-return and lazy-binding
//! trampolines) is not traced: a span's return probe would write the kernel's trampoline address
//! over what the stack holds there. At `_start` that is `argc`: before xtrace knew, `-u '*'` over
//! `spans exit 0` made the fixture see argc -8192, print its usage and exit 64.

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, gocalls},
    output::{u64_field, Outputs},
    require_bpf,
    run::{listed_symbols, run_error, Xtrace},
    TempDir,
};

#[test]
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
fn list_symbols_shows_no_probe_for_the_entry_point() {
    if !require_bpf() {
        return;
    }
    let rows = listed_symbols(args![gocalls(), "_rt0_amd64_linux"]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][3..], ["-", "_rt0_amd64_linux"]);
}
