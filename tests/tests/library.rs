//! Uprobes in a shared library: TARGET given as a library name (`libxtfix`, resolved through the
//! traced process's mappings, or for a launched command through its DT_NEEDED libraries and their
//! RUNPATH) and as the library's full path. Fixture: `uselib`, linked against `libxtfix.so` (with
//! a RUNPATH to the fixture directory, which the linker cache does not know), calls `lib_work`
//! exactly 7 times after `go` (or at once with `now`).

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{run_error, trace_fixture_to_exit, Xtrace},
    TempDir,
};

fn trace_uselib(probe: &str) {
    let fx = fixtures();
    let mut fixture = Fixture::spawn(&fx.uselib, &[]);
    fixture.wait_ready();
    let pid = u64::from(fixture.pid());
    let tmp = TempDir::new("uselib");
    let out_dir = tmp.join("out");
    trace_fixture_to_exit(&mut fixture, &[probe], &out_dir);
    let out = Outputs::read(&out_dir);

    let spans = out.spans();
    assert_eq!(spans.len(), 7, "spans for {probe}: {spans:?}");
    for span in &spans {
        assert_eq!(span.name, "lib_work", "span name: {span:?}");
        assert_eq!(span.pid, pid, "span pid: {span:?}");
        assert_eq!(span.tid, pid, "uselib is single-threaded: {span:?}");
        assert_eq!(span.depth, 0, "span depth: {span:?}");
    }
    assert_eq!(out.probe_count("lib_work"), 7);
    assert_eq!(out.lost_events(), 0);
    assert_eq!(out.stop_reason(), "targets_exited");
    let target = out.probe("lib_work")["target"]
        .as_str()
        .expect("probe target is a string")
        .to_owned();
    assert_eq!(
        std::fs::canonicalize(&target).ok(),
        std::fs::canonicalize(&fx.libxtfix).ok(),
        "probe target {target:?} is the library file"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn library_target_by_name() {
    if !require_bpf() {
        return;
    }
    trace_uselib("libxtfix:lib_work");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn library_target_by_path() {
    if !require_bpf() {
        return;
    }
    let path = fixtures().libxtfix.to_str().expect("UTF-8 path").to_owned();
    trace_uselib(&format!("{path}:lib_work"));
}

/// A library a `--pid` process maps that was deleted, or replaced on disk by another file (as a
/// package upgrade renames the new one over it), is probed as the process maps it (through
/// /proc/PID/map_files), not refused or looked up in the file now at its path. The process loads
/// a copy of libxtfix.so (LD_LIBRARY_PATH wins over uselib's RUNPATH).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_deleted_or_replaced_library_is_the_one_mapped() {
    if !require_bpf() {
        return;
    }
    let fx = fixtures();
    for replaced in [false, true] {
        let tmp = TempDir::new("lib-gone");
        let copy = tmp.join("libxtfix.so");
        std::fs::copy(&fx.libxtfix, &copy).unwrap();
        let mut fixture = Fixture::spawn_with_env(&fx.uselib, &[], &[("LD_LIBRARY_PATH", tmp.path())]);
        fixture.wait_ready();
        if replaced {
            // Another ELF file, without lib_work, renamed over the library's path.
            let other = tmp.join("other.so");
            std::fs::copy(&fx.uselib, &other).unwrap();
            std::fs::rename(&other, &copy).unwrap();
        } else {
            std::fs::remove_file(&copy).unwrap();
        }
        let out_dir = tmp.join("out");
        trace_fixture_to_exit(&mut fixture, &["libxtfix:lib_work"], &out_dir);
        let out = Outputs::read(&out_dir);
        assert_eq!(out.spans_named("lib_work").len(), 7, "replaced: {replaced}");
        assert_eq!(out.probe_count("lib_work"), 7);
        assert_eq!(out.probe("lib_work")["target"], copy.display().to_string());
        assert_eq!(out.lost_events(), 0);
    }
}

/// A launched command's library is found where the command will load it from (its RUNPATH), not
/// only in the linker cache: before, `-u libxtfix:lib_work -- uselib` said the library was not
/// in the linker cache.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn library_target_by_name_for_a_launched_command() {
    if !require_bpf() {
        return;
    }
    let fx = fixtures();
    let tmp = TempDir::new("uselib-launch");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args![
        "-u",
        "libxtfix:lib_work",
        "-o",
        &out_dir,
        "--",
        &fx.uselib,
        "now"
    ]);
    xtrace.wait_attached();
    xtrace.wait().assert_success();
    before.assert_none_left();
    let out = Outputs::read(&out_dir);
    assert_eq!(out.spans_named("lib_work").len(), 7);
    assert_eq!(out.probe_count("lib_work"), 7);
    let target = out.probe("lib_work")["target"].as_str().expect("target");
    assert_eq!(
        std::fs::canonicalize(target).ok(),
        std::fs::canonicalize(&fx.libxtfix).ok()
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_library_the_launched_command_does_not_load_is_refused() {
    if !require_bpf() {
        return;
    }
    let spans = fixtures().spans.to_str().expect("UTF-8 path").to_owned();
    let line = run_error(args!["-u", "libxtfix:lib_work", "--", &spans, "exit", "0"]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: library `libxtfix` is neither among the libraries {spans} loads at its \
             start (DT_NEEDED, found through RPATH/RUNPATH, LD_LIBRARY_PATH and the defaults) nor in \
             the linker cache (ldconfig -p): give its path as TARGET"
        )
    );
}
