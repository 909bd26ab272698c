//! Uprobes in a shared library: TARGET given as a library name (`libxtfix`, resolved through the
//! traced process's mappings) and as the library's full path. Fixture: `uselib`, linked against
//! `libxtfix.so`, calls `lib_work` exactly 7 times after `go`.

use xtrace_tests::{
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::trace_fixture_to_exit,
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
fn library_target_by_name() {
    if !require_bpf() {
        return;
    }
    trace_uselib("libxtfix:lib_work");
}

#[test]
fn library_target_by_path() {
    if !require_bpf() {
        return;
    }
    let path = fixtures().libxtfix.to_str().expect("UTF-8 path").to_owned();
    trace_uselib(&format!("{path}:lib_work"));
}
