//! USDT notes and the specs that name them, on the real kernel: `xtrace list usdt` (every note,
//! malformed notes in order, another machine's file), probes of one file named two ways or of
//! one name in two files, two probes at one call site, and bad -U specs as one-line errors.
//! Fixtures `usdt` and `usdt_malformed` (tests/fixtures/usdt.c and its hand-written notes).

use std::ffi::OsString;

use serde_json::json;

use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{run_error, Finished, Xtrace},
    TempDir,
};

#[test]
fn list_usdt_shows_every_note() {
    let usdt = fixtures().usdt.to_str().expect("UTF-8 path").to_owned();
    let finished = Xtrace::spawn(args!["list", "usdt", &usdt]).wait();
    finished.assert_success();
    let rows: Vec<Vec<&str>> = finished
        .stdout
        .lines()
        .filter(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(
        names,
        [
            "xtfix:guarded",
            "xtfix:plain",
            "xtfix:forms",
            "xtfix:globals",
            "xtfix:broken",
            "xtfix:inlined",
            "xtfix:inlined",
            "xtfix:inlined",
            "xtfix:message",
            "xtfix:request_begin",
            "xtfix:request_end",
            "xtfix:op__entry",
            "xtfix:op__return",
            "xtfix:tick"
        ]
    );
    assert_ne!(rows[0][2], "-", "xtfix:guarded has a semaphore: {:?}", rows[0]);
    assert!(
        rows[1..].iter().all(|r| r[2] == "-"),
        "only guarded has one: {rows:?}"
    );
    assert_eq!(rows[4][3..], ["8@%rdi", "-4@%xyz"]);
    assert_eq!(rows[2].len(), 3 + 12, "forms lists 12 arguments: {:?}", rows[2]);
    assert_eq!(finished.stderr, ["xtrace: 14 USDT call sites in 1 file"]);
}

/// A file of another machine (its ELF machine field made AArch64's) is refused by the USDT paths
/// as by `-u`: one line naming the architecture (its notes were listed with x86 registers, and
/// `-a -U` attached to it).
#[test]
fn usdt_of_another_machines_file_is_refused() {
    let tmp = TempDir::new("usdt-arm");
    let arm = tmp.join("usdt-arm");
    let mut elf = std::fs::read(&fixtures().usdt).expect("reading usdt");
    elf[18..20].copy_from_slice(&183u16.to_le_bytes()); // e_machine: EM_AARCH64
    std::fs::write(&arm, elf).expect("writing the copy");
    let line = format!(
        "xtrace: error: {}: Aarch64 code, not x86-64; xtrace traces x86-64 executables and libraries",
        arm.display()
    );
    let listed = Xtrace::spawn(args!["list", "usdt", &arm]).wait();
    assert_eq!(
        (listed.status.code(), listed.stderr.clone()),
        (Some(2), vec![line.clone()])
    );
    let spec = format!("{}:xtfix:tick", arm.display());
    let traced = Xtrace::spawn(args!["-a", "-U", &spec, "-d", "0.2", "-o", tmp.join("out")]).wait();
    assert_eq!((traced.status.code(), traced.stderr), (Some(2), vec![line]));
}

#[test]
fn list_usdt_warns_about_each_malformed_note_in_order() {
    let file = fixtures().usdt_malformed.to_str().expect("UTF-8 path").to_owned();
    let finished = Xtrace::spawn(args!["list", "usdt", &file]).wait();
    finished.assert_success();
    let rows: Vec<&str> = finished.stdout.lines().filter(|l| l.starts_with("  ")).collect();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(names, ["good:twin_a", "good:twin_b", "good:hit"], "{rows:?}");
    let malformed = |n: u32| {
        format!("xtrace: warning: {file}: USDT note {n} is malformed (empty provider or probe name); skipped")
    };
    assert_eq!(
        finished.stderr,
        [
            malformed(1),
            malformed(2),
            "xtrace: 3 USDT call sites in 1 file".to_string()
        ]
    );
}

/// Launches `usdt run` under `-U first -U second -o out`, which must succeed.
fn launch_run_with(first: &str, second: &str, out: &std::path::Path) -> Finished {
    let finished = Xtrace::spawn(args![
        "-U",
        first,
        "-U",
        second,
        "-o",
        out,
        "--",
        &fixtures().usdt,
        "run"
    ])
    .wait();
    finished.assert_success();
    finished
}

/// One file named two ways (its path and a symbolic link) is one file: its probe, typed twice,
/// takes the first spec's types, and xtrace says so (it was silent, the second spelling's types
/// applying or not by chance of order).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_probe_of_one_file_named_two_ways_is_typed_once() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("usdt-two-names");
    let link = tmp.join("usdt-link");
    std::os::unix::fs::symlink(&fixtures().usdt, &link).expect("symlink");
    let out_dir = tmp.join("out");
    let first = format!("{}:xtfix:plain(u8,i64)", fixtures().usdt.display());
    let second = format!("{}:xtfix:plain(i64,i64)", link.display());
    let finished = launch_run_with(&first, &second, &out_dir);
    let note = format!(
        "xtrace: warning: -U '{second}': `xtfix:plain` is traced already through -U '{first}', \
         whose value types apply"
    );
    assert!(finished.stderr.contains(&note), "{:?}", finished.stderr);
    let out = Outputs::read(&out_dir);
    let plain = out.instants("xtfix:plain");
    assert_eq!(plain.len(), 5);
    assert_eq!((&plain[4]["arg0"], &plain[4]["arg1"]), (&json!(4), &json!(-4000)));
}

/// A USDT probe of one name in two files is named with its file, as functions are, so that
/// `report` and `diff` never count the two as one: the program's ticks are `xtfix:tick (usdt)`,
/// and a copy of it that never runs has `xtfix:tick (usdt-copy)` with none.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_usdt_probe_of_one_name_in_two_files_is_named_with_its_file() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("usdt-two-files");
    let copy = tmp.join("usdt-copy");
    std::fs::copy(&fixtures().usdt, &copy).expect("copying usdt");
    let out_dir = tmp.join("out");
    launch_run_with(
        &format!("{}:xtfix:tick", fixtures().usdt.display()),
        &format!("{}:xtfix:tick", copy.display()),
        &out_dir,
    );
    let out = Outputs::read(&out_dir);
    assert_eq!(out.probe_count("xtfix:tick (usdt)"), 4);
    assert_eq!(out.probe_count("xtfix:tick (usdt-copy)"), 0);
    assert_eq!(out.instants("xtfix:tick (usdt)").len(), 4);
}

/// Two notes that name one address (hand-written notes can): both probes are placed there, each
/// reads its own arguments, and each hit is recorded once (the second was dropped before).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn two_probes_at_one_call_site_are_both_recorded() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("usdt-twin");
    let out_dir = tmp.join("out");
    let finished = Xtrace::spawn(args![
        "-U",
        "good:*",
        "-o",
        &out_dir,
        "--",
        &fixtures().usdt_malformed
    ])
    .wait();
    finished.assert_success();
    assert!(
        finished
            .stderr
            .iter()
            .any(|l| l.contains("attached 3 probes (3 uprobes")),
        "{:?}",
        finished.stderr
    );
    let out = Outputs::read(&out_dir);
    for (name, arg) in [("good:twin_a", 7), ("good:twin_b", 9)] {
        let hits = out.instants(name);
        assert_eq!(hits.len(), 1, "{name}");
        assert_eq!(hits[0]["arg0"], arg, "{name}");
        assert_eq!(out.probe_count(name), 1, "{name}");
    }
    assert_eq!(out.probe_count("good:hit"), 1);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn bad_usdt_specs_are_one_line_errors() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().usdt, &["run"]);
    fixture.wait_ready();
    let pid = fixture.pid().to_string();
    let usdt = fixtures().usdt.to_str().expect("UTF-8 path").to_owned();
    let cases: [(Vec<OsString>, &str); 5] = [
        (args!["-p", &pid, "-U", "xtfix:nothing*"], "matches no probe in"),
        (
            args!["-p", &pid, "-U", format!("{usdt}:xtfix:broken")],
            "1 matching site(s) skipped, first USDT probe xtfix:broken",
        ),
        (args!["-p", &pid, "-U", "xtfix"], "write [TARGET:]PROVIDER:NAME"),
        (
            args!["-p", &pid, "-U", "xtfix:tick(u64,int)"],
            "unknown argument type `int` at column 16",
        ),
        (args!["-a", "-U", "xtfix:*"], "every -U needs a TARGET"),
    ];
    for (flags, expected) in cases {
        let line = run_error(flags.clone());
        assert!(line.contains(expected), "{flags:?}: {line}");
    }
    let line = run_error(args!["-p", &pid, "-U", "xtfix:nothing*"]);
    assert!(line.contains("probes there include xtfix:guarded"), "{line}");
}
