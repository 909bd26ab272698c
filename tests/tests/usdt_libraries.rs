//! USDT probes of the libraries a target maps, on the real kernel: fixture `matrix`
//! (tests/fixtures/matrix.cpp) throws and catches exactly 3 C++ exceptions, which libstdc++'s own
//! `libstdcxx:throw` and `libstdcxx:catch` probes see, found by scanning the modules a process
//! maps (`--pid`) or the libraries a launched command loads at its start.

use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{trace_fixture_with, Xtrace},
    TempDir,
};

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn libstdcxx_throw_and_catch_probes_count_exceptions() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().matrix, &[]);
    fixture.wait_ready();
    // `list usdt --pid` scans every module the process maps.
    let listed = Xtrace::spawn(args!["list", "usdt", "--pid", fixture.pid().to_string()]).wait();
    listed.assert_success();
    let modules: Vec<&str> = listed.stdout.lines().filter(|l| l.ends_with(':')).collect();
    assert!(
        modules.iter().any(|m| m.contains("libstdc++.so")),
        "{}",
        listed.stdout
    );
    assert!(listed
        .stdout
        .lines()
        .any(|l| l.trim_start().starts_with("libstdcxx:throw ")));
    let tmp = TempDir::new("usdt-cxx");
    let out = tmp.join("out");
    trace_fixture_with(
        &mut fixture,
        args!["-U", "libstdcxx:throw", "-U", "libstdcxx:catch"],
        &[],
        &out,
    );
    let out = Outputs::read(&out);
    // matrix throws three times: thrower(1) from main, then thrower(1) and thrower(3) from catcher.
    assert_eq!(out.probe_count("libstdcxx:throw"), 3);
    assert_eq!(out.probe_count("libstdcxx:catch"), 3);
    assert_eq!(out.instants("libstdcxx:throw").len(), 3);
    let target = out.probe("libstdcxx:throw")["target"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        target.contains("libstdc++.so"),
        "found in libstdc++ by scanning the modules: {target}"
    );
}

/// A launched command's `-U` without TARGET searches the program and the libraries it loads at
/// its start, as `--pid` searches the modules its process maps: libstdc++'s probes of a C++
/// program (only the program's own notes were searched, and this was refused).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn launched_command_probes_in_the_libraries_it_loads_at_start() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("usdt-cxx-launched");
    let out = tmp.join("out");
    let finished = Xtrace::spawn(args![
        "-U",
        "libstdcxx:throw",
        "-U",
        "libstdcxx:catch",
        "-o",
        &out,
        "--",
        &fixtures().matrix,
        "throws"
    ])
    .wait();
    finished.assert_success();
    let out = Outputs::read(&out);
    assert_eq!(out.probe_count("libstdcxx:throw"), 3);
    assert_eq!(out.probe_count("libstdcxx:catch"), 3);
    let target = out.probe("libstdcxx:throw")["target"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(target.contains("libstdc++.so"), "{target}");
}
