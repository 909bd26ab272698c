//! The live view's probe table holds the rows summary.txt shows, with summary.json's counts:
//! `gpumem` calls the stand-in CUDA runtime under `--cuda --live`, whose plan also keeps a block
//! of probes for CUDA libraries loaded later (never placed here); the last snapshot names each
//! function once, hides the CUDA functions never called, and ends with summary.json's counts.

use std::{collections::BTreeMap, time::Duration};

use serde_json::Value;
use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    live::{read_events, View},
    output::Outputs,
    require_bpf,
    run::Xtrace,
    TempDir,
};

const MIB: u64 = 1 << 20;

/// name → count of the rows of a snapshot's probe table.
fn page_rows(snapshot: &Value) -> Vec<(String, u64)> {
    snapshot["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["all"]["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn live_probe_rows_are_the_summary_rows() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("live-rows");
    let mut fixture = Fixture::spawn(&fixtures().gpumem, &[]);
    fixture.wait_ready();
    let pid = fixture.pid();
    let out = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args!["--cuda", "--live", "-p", pid.to_string(), "-o", &out]);
    let view = View::from_line(&xtrace.wait_stderr("xtrace: live view at "));
    xtrace.wait_attached();
    let events = read_events(&view);
    for (command, held) in [
        ("alloc 1048576", MIB),
        ("alloc 2097152", 3 * MIB),
        ("free", 2 * MIB),
    ] {
        fixture.send(command);
        assert_eq!(fixture.next_line(), format!("held {held}"));
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(view.stop().status, 200);
    xtrace.wait().assert_success();
    fixture.send("exit");
    let outputs = Outputs::read(&out);
    let messages = events.join().expect("the event stream's reader");
    let last = messages.last().expect("a last snapshot");
    assert_eq!(last["done"], true, "{last}");

    let rows = page_rows(last);
    let mut seen = std::collections::BTreeSet::new();
    for (name, _) in &rows {
        assert!(seen.insert(name.clone()), "{name} has one row: {rows:?}");
    }
    // summary.txt's rows: the CUDA functions called, and every other probe.
    let summary: BTreeMap<String, u64> = outputs.summary["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] != "cuda" || p["count"].as_u64() > Some(0))
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["count"].as_u64().unwrap(),
            )
        })
        .collect();
    let page: BTreeMap<String, u64> = rows.into_iter().collect();
    assert_eq!(page, summary);
    assert_eq!((page["cudaMalloc"], page["cudaFree"]), (2, 1), "{page:?}");
    for name in page.keys() {
        assert!(
            outputs
                .summary_txt
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{name} is a row of summary.txt:\n{}",
            outputs.summary_txt
        );
    }
}
