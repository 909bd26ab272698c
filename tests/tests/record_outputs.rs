//! What a recording writes besides trace.json and the summaries, on the real kernel: `--gzip`
//! streams trace.json.gz, and a capture with spans also gets span-flamegraph.svg and
//! profile.pb.gz. Fixture `spans threads 2 50`: 2 threads call `work` exactly 50 times each.

use std::io::Read;

use serde_json::Value;
use xtrace_tests::{
    fixtures::{fixtures, Fixture},
    require_bpf,
    run::trace_fixture_with,
    TempDir,
};

fn gunzip(path: &std::path::Path) -> Vec<u8> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut bytes)
        .unwrap_or_else(|e| panic!("{} is not gzip: {e}", path.display()));
    bytes
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn gzip_trace_span_flamegraph_and_pprof_are_written() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().spans, &["threads", "2", "50"]);
    fixture.wait_ready();
    let tmp = TempDir::new("record-outputs");
    let out = tmp.join("out");
    let finished = trace_fixture_with(
        &mut fixture,
        xtrace_tests::args!["-u", "work", "--gzip", "--icicle"],
        &[],
        &out,
    );
    assert!(
        !out.join("trace.json").exists(),
        "--gzip writes no plain trace.json"
    );
    let trace: Value =
        serde_json::from_slice(&gunzip(&out.join("trace.json.gz"))).expect("trace.json.gz holds JSON");
    let spans = trace["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == "work")
        .count();
    assert_eq!(spans, 100);
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).expect("summary.json"))
            .expect("JSON");
    assert_eq!(summary["probes"][0]["count"], 100);
    let svg = std::fs::read_to_string(out.join("span-flamegraph.svg")).expect("span-flamegraph.svg");
    assert!(
        svg.contains("<svg") && svg.contains("work"),
        "the span flamegraph shows work"
    );
    assert!(
        svg.contains("inverted = true"),
        "--icicle hangs the span flamegraph too, without CPU sampling"
    );
    let pprof = gunzip(&out.join("profile.pb.gz"));
    assert!(!pprof.is_empty(), "profile.pb.gz holds a profile");
    let printed = format!("{}\n{}", finished.stdout, finished.stderr.join("\n"));
    assert!(
        printed.contains("trace.json.gz"),
        "the wrote line names trace.json.gz: {printed}"
    );
}
