//! `--trace-format perfetto`: trace.perfetto-trace read back with Perfetto's own protobuf
//! definitions (tests/tools/perfetto_decode.py), every packet checked, then its slices, tracks and
//! counters asserted exactly. Fixtures: `spans threads 4 1000` (4 threads, 1000 `work` calls
//! each) and `spans nested 10` (outer() ×10, each calling inner() twice), as uprobe_spans.rs and
//! launch.rs assert them on trace.json; `cudaapp` with the stand-in CUDA libraries, whose memory
//! counters cuda.rs asserts; and the ITT client (tests/fixtures/itt_ranges.py), whose two
//! overlapped `fetch` tasks cross without nesting. The default format is perfetto, and a JSON
//! recording converted to Perfetto and back is the same trace.json, event for event.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use xtrace_tests::{
    args,
    bpf::Attachments,
    captures::xtrace,
    fixtures::{fixtures, python, script, tool_library, Fixture},
    perfetto::{counter, decode, slice_counts, trace_events},
    require_bpf,
    run::{trace_fixture_with, Xtrace},
    TempDir,
};

fn read_json(path: &std::path::Path) -> Value {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_slice(&text).expect("JSON")
}

/// The names of the files in `dir`, sorted.
fn files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn each_threads_spans_are_on_its_own_uprobe_track() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().spans, &["threads", "4", "1000"]);
    let mut tids: Vec<u64> = fixture.wait_ready_tids().into_iter().map(u64::from).collect();
    tids.sort_unstable();
    let pid = u64::from(fixture.pid());
    let tmp = TempDir::new("perfetto-threads");
    let out = tmp.join("out");
    trace_fixture_with(
        &mut fixture,
        args!["-u", "work", "--trace-format", "perfetto"],
        &[],
        &out,
    );
    // The span flamegraph and the profile's spans are read back from the Perfetto trace.
    assert_eq!(
        files(&out),
        [
            "profile.pb.gz",
            "span-flamegraph.svg",
            "summary.json",
            "summary.txt",
            "trace.perfetto-trace"
        ]
    );
    let svg = std::fs::read_to_string(out.join("span-flamegraph.svg")).unwrap();
    assert!(
        svg.contains("xtrace: 4000 spans, "),
        "the span flamegraph's title"
    );
    // `xtrace report` reads the capture as it reads a trace.json one.
    let report = xtrace(args!["report", &out, "--format", "csv"]);
    assert_eq!(report.code, Some(0), "{}", report.stderr);
    assert!(
        report.stdout.lines().any(|l| l.starts_with("uprobe,work,4000,")),
        "{}",
        report.stdout
    );
    let decoded = decode(&out.join("trace.perfetto-trace"));
    let expected: Vec<Value> = tids
        .iter()
        .map(|tid| json!({"pid": pid, "tid": tid, "track": "uprobe", "name": "work", "depth": 0, "count": 1000}))
        .collect();
    let mut slices = decoded["slices"].as_array().unwrap().clone();
    slices.sort_by_key(|s| s["tid"].as_u64());
    assert_eq!(slices, expected);
    // One process, its 4 threads named at the end, a uprobe track under each.
    let threads: Vec<u64> = decoded["tracks"]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .inspect(|t| assert!(t[2].is_string(), "thread named: {t}"))
        .map(|t| t[1].as_u64().unwrap())
        .collect();
    assert_eq!(threads, tids);
    assert_eq!(decoded["tracks"]["processes"].as_array().unwrap().len(), 1);
    assert_eq!(decoded["tracks"]["processes"][0][0], pid);
    assert_eq!(decoded["tracks"]["children"], json!({"uprobe": 4}));
    assert_eq!(
        decoded["clocks"],
        json!([[1, 3, 6], [1, 3, 6]]),
        "start and end snapshots"
    );

    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["probes"][0]["count"], 4000);
    let clock = &summary["clock"];
    let field = |at: &str, name: &str| clock[at][name].as_u64().unwrap() as i128;
    let mono = field("end", "monotonic_ns") - field("start", "monotonic_ns");
    let wall = field("end", "realtime_ns") - field("start", "realtime_ns");
    assert!(mono > 0, "{clock}");
    // The wall clock runs with the monotonic one (NTP slews it by at most 0.05%).
    assert!((wall - mono).abs() < 10_000_000, "{clock}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn nested_spans_nest_on_one_track_compressed() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("perfetto-nested");
    let out = tmp.join("out");
    let before = Attachments::snapshot();
    let finished = Xtrace::spawn(args![
        "-u",
        "outer",
        "-u",
        "inner",
        "--trace-format",
        "perfetto",
        "--gzip",
        "-o",
        &out,
        "--",
        &fixtures().spans,
        "nested",
        "10"
    ])
    .wait();
    finished.assert_success();
    before.assert_none_left();
    assert_eq!(
        files(&out),
        [
            "profile.pb.gz",
            "span-flamegraph.svg",
            "summary.json",
            "summary.txt",
            "trace.perfetto-trace.gz"
        ]
    );
    let decoded = decode(&out.join("trace.perfetto-trace.gz"));
    let pid = read_json(&out.join("summary.json"))["command"]["pid"].clone();
    assert_eq!(
        decoded["slices"],
        json!([
            {"pid": pid, "tid": pid, "track": "uprobe", "name": "inner", "depth": 1, "count": 20},
            {"pid": pid, "tid": pid, "track": "uprobe", "name": "outer", "depth": 0, "count": 10},
        ])
    );
    assert_eq!(decoded["tracks"]["processes"], json!([[pid, "spans"]]));
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cuda_calls_and_memory_counters_with_their_units() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().cudaapp, &[]);
    fixture.wait_ready();
    let tmp = TempDir::new("perfetto-cuda");
    let out = tmp.join("out");
    trace_fixture_with(
        &mut fixture,
        args!["--cuda", "--trace-format", "perfetto"],
        &[],
        &out,
    );
    let decoded = decode(&out.join("trace.perfetto-trace"));
    // The values cuda.rs asserts on trace.json's counter events.
    assert_eq!(
        counter(&decoded, "CUDA device memory (bytes)"),
        (
            vec![
                1_048_576, 1_052_672, 1_055_672, 1_063_864, 1_059_768, 1_051_576, 1_051_876, 1_052_004,
                1_051_704, 1_051_576, 1_051_704, 1_051_576
            ],
            "UNIT_SIZE_BYTES".to_string()
        )
    );
    assert_eq!(
        counter(&decoded, "CUDA pinned host memory (bytes)"),
        (
            vec![65_536, 66_536, 66_560, 65_560, 65_536],
            "UNIT_SIZE_BYTES".to_string()
        )
    );
    // Every call the summary counts is a slice on its thread's cuda track.
    let summary = read_json(&out.join("summary.json"));
    let counted: BTreeMap<String, u64> = summary["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "cuda" && p["count"].as_u64() > Some(0))
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(counted["cudaMemcpy"], 5);
    assert_eq!(slice_counts(&decoded), counted);
    assert!(decoded["slices"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["track"] == "cuda"));
    assert_eq!(decoded["args"]["cudaMemcpy"], json!(["bytes", "kind"]));
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn overlapping_tasks_that_do_not_nest_are_all_kept() {
    if !require_bpf() {
        return;
    }
    let tool = tool_library();
    let mut fixture = Fixture::spawn_with_env(
        &python(),
        &[script("itt_ranges.py").to_str().expect("UTF-8 path")],
        &[("INTEL_LIBITTNOTIFY64", &tool)],
    );
    fixture.wait_ready();
    let tmp = TempDir::new("perfetto-itt");
    let out = tmp.join("out");
    trace_fixture_with(
        &mut fixture,
        args!["--itt", "--trace-format", "perfetto"],
        &[],
        &out,
    );
    let decoded = decode(&out.join("trace.perfetto-trace"));
    assert_eq!(
        slice_counts(&decoded),
        BTreeMap::from([
            ("backward".to_string(), 3),
            ("forward".to_string(), 3),
            ("load".to_string(), 2),
            ("step".to_string(), 3)
        ])
    );
    // step holds forward and backward, on the thread's track of the domain "train".
    for s in decoded["slices"].as_array().unwrap() {
        assert_eq!(s["track"], "train", "{s}");
        let depth = if s["name"] == "step" || s["name"] == "load" {
            0
        } else {
            1
        };
        assert_eq!(s["depth"], depth, "{s}");
    }
    // The two fetch tasks cross, and the frames: each async range on a track of its own.
    let mut asyncs: Vec<(String, u64)> = decoded["async"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap().to_string(),
                a["depth"].as_u64().unwrap(),
            )
        })
        .collect();
    asyncs.sort();
    let mut expected = vec![("fetch".to_string(), 0); 2];
    expected.extend(vec![("frame".to_string(), 0); 5]);
    assert_eq!(asyncs, expected);
}

/// stacks.folded's stacks without their root frame (the process's name), with their counts added
/// up: the stacks a Perfetto trace's call stacks must hold.
fn folded_without_root(dir: &std::path::Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(dir.join("stacks.folded")).unwrap();
    let mut stacks = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        let frames = stack.split_once(';').map_or("", |(_, rest)| rest);
        *stacks.entry(frames.to_string()).or_default() += count.parse::<u64>().unwrap();
    }
    stacks
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn samples_are_call_stacks_whose_frames_match_stacks_folded() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("perfetto-samples");
    let out = tmp.join("out");
    let before = Attachments::snapshot();
    Xtrace::spawn(args![
        "-F",
        "999",
        "--trace-format",
        "perfetto",
        "-o",
        &out,
        "--",
        &fixtures().profile,
        "syscalls",
        "400"
    ])
    .wait()
    .assert_success();
    before.assert_none_left();
    let decoded = decode(&out.join("trace.perfetto-trace"));
    let summary = read_json(&out.join("summary.json"));
    let samples = summary["samples"].as_u64().unwrap();
    assert!(samples >= 10, "{samples} samples");
    // Every sample is on the timeline (fewer than 100,000), each a call stack of its thread
    // whose frames, outermost first, are those stacks.folded lists for it.
    let decoded_samples: BTreeMap<String, u64> = serde_json::from_value(decoded["samples"].clone()).unwrap();
    assert_eq!(decoded_samples, folded_without_root(&out));
    assert_eq!(decoded_samples.values().sum::<u64>(), samples);
    // Kernel frames (the system calls) are under [kernel.kallsyms].
    assert!(
        decoded_samples
            .keys()
            .any(|s| s.contains(";main;") && s.ends_with("_[k]")),
        "{decoded_samples:?}"
    );
    let pid = summary["command"]["pid"].as_u64().unwrap();
    assert_eq!(decoded["sample_threads"], json!([[pid, pid, samples]]));
    // No sample is left as an instant.
    assert_eq!(decoded["instants"], json!([]));
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn the_default_trace_is_perfetto_and_reports_as_its_converted_json() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("perfetto-default");
    let out = tmp.join("out");
    let before = Attachments::snapshot();
    Xtrace::spawn_default_format(args![
        "-u",
        "outer",
        "-u",
        "inner",
        "-o",
        &out,
        "--",
        &fixtures().spans,
        "nested",
        "10"
    ])
    .wait()
    .assert_success();
    before.assert_none_left();
    assert_eq!(
        files(&out),
        [
            "profile.pb.gz",
            "span-flamegraph.svg",
            "summary.json",
            "summary.txt",
            "trace.perfetto-trace"
        ]
    );
    let report = |dir: &std::path::Path| xtrace(args!["report", dir, "--format", "json"]);
    let from_perfetto = report(&out);
    assert_eq!(from_perfetto.code, Some(0), "{}", from_perfetto.stderr);
    let ran = xtrace(args!["convert", &out]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    // The capture's trace.json, read first now.
    let events = trace_events(&out.join("trace.json"));
    let spans = events.iter().filter(|e| e.contains(r#""ph":"X""#)).count();
    assert_eq!(spans, 30, "10 outer and 20 inner");
    assert_eq!(
        events.iter().filter(|e| e.contains(r#""depth":1"#)).count(),
        20,
        "inner nests in outer"
    );
    let from_json = report(&out);
    assert_eq!(from_json.stdout, from_perfetto.stdout);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_json_recording_converts_to_perfetto_and_back_event_for_event() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("perfetto-round-trip");
    let threads = tmp.join("threads");
    let mut fixture = Fixture::spawn(&fixtures().spans, &["threads", "4", "1000"]);
    fixture.wait_ready_tids();
    trace_fixture_with(
        &mut fixture,
        args!["-u", "work", "-F", "999", "--trace-format", "json"],
        &[],
        &threads,
    );
    let sampled = tmp.join("sampled");
    Xtrace::spawn(args![
        "-F",
        "999",
        "--trace-format",
        "json",
        "-o",
        &sampled,
        "--",
        &fixtures().profile,
        "syscalls",
        "200"
    ])
    .wait()
    .assert_success();
    for (out, spans) in [(&threads, 4000), (&sampled, 0)] {
        let ran = xtrace(args!["convert", out]);
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        // The Perfetto trace alone, in a capture of its own, converted back.
        let back = out.with_extension("back");
        std::fs::create_dir(&back).unwrap();
        for file in ["summary.json", "stacks.folded"] {
            if out.join(file).exists() {
                std::fs::copy(out.join(file), back.join(file)).unwrap();
            }
        }
        std::fs::rename(
            out.join("trace.perfetto-trace"),
            back.join("trace.perfetto-trace"),
        )
        .unwrap();
        let ran = xtrace(args!["convert", &back]);
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        let recorded = trace_events(&out.join("trace.json"));
        let converted = trace_events(&back.join("trace.json"));
        let count = |ph: &str| recorded.iter().filter(|e| e.contains(ph)).count();
        assert_eq!(count(r#""ph":"X""#), spans);
        if spans == 0 {
            assert!(count(r#""cat":"sample""#) > 0, "CPU samples on the timeline");
        }
        assert_eq!(converted.len(), recorded.len(), "{}", out.display());
        assert!(converted == recorded, "{}: the events differ", out.display());
    }
}
