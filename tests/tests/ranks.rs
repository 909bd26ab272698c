//! Ranks, hosts and labels, on the real kernel: a target's rank in a distributed job is read from
//! its launcher's variables (a launched command's from xtrace's own environment, as under `srun
//! xtrace -- CMD`; a running process's from /proc/PID/environ), named on its process track and in
//! summary.json, and fills `{rank}` in `-o`, as the host name fills `{host}`; `--label`s go into
//! summary.json. Fixture `spans` (tests/fixtures/spans.c): `exit 0` calls work() 3 times,
//! `threads 2 5` calls it 5 times on each of 2 threads.

use std::path::Path;

use serde_json::json;

use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{run_error, run_error_with_env, trace_fixture_with, Xtrace},
    TempDir,
};

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("host name")
        .trim()
        .to_owned()
}

/// The `process_name` of process `pid` in trace.json.
fn process_name(out: &Outputs, pid: u64) -> String {
    let named = out.metadata("process_name");
    let event = named
        .iter()
        .find(|e| e["pid"] == pid)
        .unwrap_or_else(|| panic!("no process_name of pid {pid}: {named:?}"));
    event["args"]["name"].as_str().expect("a name").to_owned()
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_launched_commands_rank_comes_from_the_launchers_variables() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranks-launched");
    let torchrun = [("RANK", "3"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "8")];
    let flags = args![
        "-u",
        "work",
        "--label",
        "job=train",
        "--label",
        "commit=1a2b",
        "--label",
        "job=eval",
        "-o",
        tmp.join("{host}-r{rank}"),
        "--",
        &fixtures().spans,
        "exit",
        "0"
    ];
    Xtrace::spawn_with_env(flags, &torchrun).wait().assert_success();
    let host = host();
    let out = Outputs::read(&tmp.join(&format!("{host}-r3")));
    assert_eq!(out.spans_named("work").len(), 3);
    assert_eq!(out.summary["host"], host.as_str());
    // A key given twice keeps its last value.
    assert_eq!(out.summary["labels"], json!({"commit": "1a2b", "job": "eval"}));
    let target = &out.summary["targets"][0];
    assert_eq!(
        target["rank"],
        json!({"rank": 3, "local_rank": 1, "world_size": 8, "launcher": "torchrun"})
    );
    let pid = target["pid"].as_u64().expect("a pid");
    assert_eq!(process_name(&out, pid), "spans (rank 3 of 8)");
    let line = format!("on {host}: pid {pid} rank 3 of 8 (torchrun); labels commit=1a2b job=eval");
    assert!(
        out.summary_txt.lines().any(|l| l == line),
        "no {line:?} in:\n{}",
        out.summary_txt
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_running_processs_rank_comes_from_its_own_environment() {
    if !require_bpf() {
        return;
    }
    let ompi = [
        ("OMPI_COMM_WORLD_RANK", Path::new("1")),
        ("OMPI_COMM_WORLD_SIZE", Path::new("2")),
    ];
    let mut fixture = Fixture::spawn_with_env(&fixtures().spans, &["threads", "2", "5"], &ompi);
    fixture.wait_ready();
    let pid = fixture.pid();
    let tmp = TempDir::new("ranks-pid");
    trace_fixture_with(&mut fixture, args!["-u", "work"], &[], &tmp.join("rank{rank}"));
    let out = Outputs::read(&tmp.join("rank1"));
    assert_eq!(out.spans_named("work").len(), 10);
    assert_eq!(
        out.summary["targets"][0]["rank"],
        json!({"rank": 1, "local_rank": null, "world_size": 2, "launcher": "open-mpi"})
    );
    assert_eq!(out.summary["labels"], json!({}));
    assert_eq!(process_name(&out, pid.into()), "spans (rank 1 of 2)");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn placeholders_without_a_rank_or_misspelled_and_bad_labels_are_refused() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ranks-bad");
    let spans = &fixtures().spans;
    let line = run_error(args![
        "-u",
        "work",
        "-o",
        tmp.join("r{rank}"),
        "--",
        spans,
        "exit",
        "0"
    ]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: -o {}: no rank for {{rank}}: neither the target's environment nor \
             xtrace's sets RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMI_RANK; write the rank \
             in the path instead",
            tmp.join("r{rank}").display()
        )
    );
    let line = run_error_with_env(
        args!["-u", "work", "-o", tmp.join("{rnak}"), "--", spans, "exit", "0"],
        &[("RANK", "0")],
    );
    assert!(
        line.ends_with("{rnak} is no placeholder; use {rank} or {host}, or write the name out"),
        "{line}"
    );
    let line = run_error(args!["-u", "work", "--label", "1job=x", "--", spans, "exit", "0"]);
    assert!(
        line.contains("`1job=x`: the key `1job` must start with a letter or _"),
        "{line}"
    );
    // Nothing was made for the refused captures.
    assert_eq!(std::fs::read_dir(tmp.path()).expect("tmp").count(), 0);
}
