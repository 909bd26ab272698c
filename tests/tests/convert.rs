//! `xtrace convert` and the readers of trace.perfetto-trace (no root needed): the recorded demo
//! captures tests/data/workload-1 and -2 (spans on 2 threads and CPU samples) are converted, the
//! Perfetto trace is checked with Perfetto's own definitions (tests/tools/perfetto_decode.py),
//! and `report` (every format), `diff` and `flamegraph --diff` must give byte for byte what they
//! give on trace.json; converted back, the Perfetto trace is the same trace.json, event for event.
//! A cut or damaged Perfetto trace is one line naming the file and the byte offset of the packet,
//! exit 2, for `report`, `diff` and `convert` alike.

use std::path::{Path, PathBuf};

use xtrace_tests::{
    args,
    captures::{data, xtrace_in, Ran},
    perfetto::{decode, slice_counts, trace_events},
    TempDir,
};

const CAPTURES: [&str; 2] = ["workload-1", "workload-2"];

/// `ROOT/json/NAME` (the recorded capture with its trace.json) and `ROOT/perfetto/NAME` (the same
/// capture with trace.perfetto-trace converted from it instead), for both captures.
fn twins(tmp: &TempDir) -> (PathBuf, PathBuf) {
    let (json, perfetto) = (tmp.join("json"), tmp.join("perfetto"));
    for name in CAPTURES {
        let (j, p) = (json.join(name), perfetto.join(name));
        std::fs::create_dir_all(&j).unwrap();
        std::fs::create_dir_all(&p).unwrap();
        for file in ["summary.json", "stacks.folded", "trace.json"] {
            std::fs::copy(data(name).join(file), j.join(file)).unwrap();
        }
        let ran = xtrace_in(&json, args!["convert", name]);
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        assert_eq!(ran.stderr, format!("xtrace: wrote {name}/trace.perfetto-trace\n"));
        for file in ["summary.json", "stacks.folded"] {
            std::fs::copy(j.join(file), p.join(file)).unwrap();
        }
        std::fs::rename(j.join("trace.perfetto-trace"), p.join("trace.perfetto-trace")).unwrap();
    }
    (json, perfetto)
}

/// The same command in both trees; both must give the same exit status, output and files.
fn same(json: &Path, perfetto: &Path, args: Vec<std::ffi::OsString>, files: &[&str]) -> Ran {
    let j = xtrace_in(json, args.clone());
    let p = xtrace_in(perfetto, args.clone());
    assert_eq!(j.code, p.code, "{args:?}: {}{}", j.stderr, p.stderr);
    assert_eq!(j.stdout, p.stdout, "{args:?}");
    assert_eq!(j.stderr, p.stderr, "{args:?}");
    for file in files {
        let read = |root: &Path| std::fs::read(root.join(file)).unwrap();
        assert!(read(json) == read(perfetto), "{args:?}: {file} differs");
    }
    j
}

#[test]
fn report_and_diff_read_a_perfetto_capture_as_its_json_twin() {
    let tmp = TempDir::new("convert-twins");
    let (json, perfetto) = twins(&tmp);
    for name in CAPTURES {
        let decoded = decode(&perfetto.join(name).join("trace.perfetto-trace"));
        let text = std::fs::read_to_string(data(name).join("trace.json")).unwrap();
        let complete = text.matches("\"ph\":\"X\"").count() as u64;
        assert!(complete > 100, "{name}: {complete} spans");
        assert_eq!(slice_counts(&decoded).values().sum::<u64>(), complete, "{name}");
    }
    for format in ["text", "json", "csv", "callgrind"] {
        let ran = same(
            &json,
            &perfetto,
            args!["report", "workload-1", "--format", format],
            &[],
        );
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        assert!(ran.stdout.len() > 500, "{format}: {}", ran.stdout);
    }
    for (format, file) in [("pprof", "p.pb.gz"), ("span-flamegraph", "s.svg")] {
        let ran = same(
            &json,
            &perfetto,
            args!["report", "workload-2", "--format", format, "-o", file],
            &[file],
        );
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    }
    let ran = same(
        &json,
        &perfetto,
        args!["diff", "workload-1", "workload-2", "-o", "d.svg"],
        &["d.svg"],
    );
    assert!(ran.stdout.contains("train_step"), "{}", ran.stdout);
    let ran = same(
        &json,
        &perfetto,
        args!["flamegraph", "--diff", "workload-1", "workload-2", "-o", "f.svg"],
        &["f.svg"],
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
}

/// The offset, header size (key and length) and body size of each packet of a Perfetto trace
/// (key 0x0a, varint length, bytes).
fn packets(bytes: &[u8]) -> Vec<(usize, usize, usize)> {
    let mut at = 0;
    let mut found = Vec::new();
    while at < bytes.len() {
        assert_eq!(bytes[at], 0x0a, "a packet's key at byte {at}");
        let (mut len, mut shift, mut i) = (0usize, 0, at + 1);
        loop {
            len |= usize::from(bytes[i] & 0x7f) << shift;
            shift += 7;
            i += 1;
            if bytes[i - 1] & 0x80 == 0 {
                break;
            }
        }
        found.push((at, i - at, len));
        at = i + len;
    }
    found
}

#[test]
fn a_cut_or_damaged_perfetto_trace_is_one_line_with_the_packets_offset() {
    let tmp = TempDir::new("convert-damaged");
    let (_, perfetto) = twins(&tmp);
    let file = perfetto.join("workload-1").join("trace.perfetto-trace");
    let whole = std::fs::read(&file).unwrap();
    let all = packets(&whole);
    let (at, header, body) = all[all.len() / 2];
    std::fs::write(&file, &whole[..at + header + body - 1]).unwrap();
    let ran = xtrace_in(&perfetto, args!["report", "workload-1"]);
    assert_eq!(
        ran.user_error(),
        format!(
            "xtrace: error: workload-1/trace.perfetto-trace: the packet at byte {at} is cut short: \
             the file ends {} bytes into its {body}; the capture is damaged: record it again",
            body - 1
        )
    );
    let mut damaged = whole.clone();
    damaged[at] = 0x12;
    std::fs::write(&file, &damaged).unwrap();
    let ran = xtrace_in(&perfetto, args!["diff", "workload-1", "workload-2"]);
    assert_eq!(
        ran.user_error(),
        format!(
            "xtrace: error: workload-1/trace.perfetto-trace: the packet at byte {at} is not a \
             Perfetto trace packet (field key 0x12, where a packet's is 0xa); the capture is \
             damaged: record it again"
        )
    );
}

#[test]
fn convert_never_writes_over_a_trace() {
    let tmp = TempDir::new("convert-over");
    let (json, perfetto) = twins(&tmp);
    std::fs::write(json.join("workload-1/trace.perfetto-trace"), "mine").unwrap();
    let ran = xtrace_in(&json, args!["convert", "workload-1"]);
    assert_eq!(
        ran.user_error(),
        "xtrace: error: workload-1/trace.perfetto-trace: cannot be converted: it is there \
         already, and convert never writes over a trace; remove it first"
    );
    assert_eq!(
        std::fs::read_to_string(json.join("workload-1/trace.perfetto-trace")).unwrap(),
        "mine"
    );
    // A Perfetto capture with a trace.json already there: its trace.json is the one converted.
    std::fs::write(perfetto.join("workload-1/trace.json"), "mine").unwrap();
    let ran = xtrace_in(
        &perfetto,
        args!["convert", "workload-1", "--trace-format", "json"],
    );
    assert_eq!(
        ran.user_error(),
        "xtrace: error: workload-1/trace.json: cannot be converted: it is in that format \
         already; give another --trace-format"
    );
    assert_eq!(
        std::fs::read_to_string(perfetto.join("workload-1/trace.json")).unwrap(),
        "mine"
    );
}

#[test]
fn a_perfetto_trace_converts_back_to_the_same_trace_json() {
    let tmp = TempDir::new("convert-back");
    let (_, perfetto) = twins(&tmp);
    for name in CAPTURES {
        let ran = xtrace_in(&perfetto, args!["convert", name]);
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        assert_eq!(ran.stderr, format!("xtrace: wrote {name}/trace.json\n"));
        let back = trace_events(&perfetto.join(name).join("trace.json"));
        let recorded = trace_events(&data(name).join("trace.json"));
        assert_eq!(back.len(), recorded.len(), "{name}");
        assert!(back == recorded, "{name}: the events differ");
    }
}

#[test]
fn a_cut_perfetto_trace_converts_to_one_line_and_no_file() {
    let tmp = TempDir::new("convert-cut");
    let (_, perfetto) = twins(&tmp);
    let dir = perfetto.join("workload-2");
    let file = dir.join("trace.perfetto-trace");
    let whole = std::fs::read(&file).unwrap();
    let all = packets(&whole);
    let (at, header, body) = all[all.len() - 2];
    std::fs::write(&file, &whole[..at + header + 3]).unwrap();
    let ran = xtrace_in(&perfetto, args!["convert", "workload-2"]);
    assert_eq!(
        ran.user_error(),
        format!(
            "xtrace: error: workload-2/trace.perfetto-trace: the packet at byte {at} is cut short: \
             the file ends 3 bytes into its {body}; the capture is damaged: record it again"
        )
    );
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["stacks.folded", "summary.json", "trace.perfetto-trace"]);
}
