//! A Perfetto trace written by the recording's writer, converted to trace.json, against the
//! trace.json the same events make directly.
use super::*;
use crate::{
    analysis::trace_file::Progress,
    clock::Snapshot,
    export::replay::Placement,
    output::{Sink, TraceFormat},
    pipeline::{
        perfetto::SampleFrame,
        writer::{EventKind, EventWriter, Flow, FlowKind},
    },
};

const PROBES: [(&str, &str); 2] = [("work", "uprobe"), ("app:tick", "usdt")];

fn frame(name: &str, module: &str) -> SampleFrame {
    SampleFrame {
        name: name.into(),
        module: module.into(),
        rel_pc: 0x10,
    }
}

/// Every kind of span, instant, counter value and async edge the record pipeline hands either
/// writer.
fn spans() -> Vec<SpanOut> {
    let span = |tid, start_ns, dur_ns, depth| SpanOut {
        pid: 7,
        tid,
        start_ns,
        kind: EventKind::span(dur_ns, depth),
        ..Default::default()
    };
    vec![
        SpanOut {
            values: Some(r#","arg0":3,"ret":"0x10""#.into()),
            ..span(8, 1_000_500, 2_250, 1)
        },
        SpanOut {
            kind: EventKind::Span {
                dur_ns: 1_000,
                depth: 1,
                flow: Some(Flow {
                    id: 5,
                    end: true,
                    kind: FlowKind::Launch,
                }),
            },
            ..span(8, 1_003_000, 1_000, 1)
        },
        span(8, 1_000_000, 9_000, 0),
        span(9, 1_020_000, 4_000, 0),
        SpanOut {
            probe: 1,
            kind: EventKind::INSTANT,
            values: Some(r#","arg0":1"#.into()),
            ..span(8, 1_011_000, 0, 0)
        },
        SpanOut {
            probe: 1,
            kind: EventKind::Instant {
                flow: Some(Flow {
                    id: 5,
                    end: false,
                    kind: FlowKind::Launch,
                }),
            },
            ..span(9, 1_002_000, 0, 0)
        },
        // An off-CPU wait of thread 9 and the wake-up by thread 8 that ended it, with its arrow
        // to thread 9's wait for a CPU.
        SpanOut {
            name: Some("wake".into()),
            cat: Some(crate::model::wait::TIMELINE_CATEGORY.into()),
            kind: EventKind::Instant {
                flow: Some(Flow {
                    id: FlowKind::WAKE_BIT | 1,
                    end: false,
                    kind: FlowKind::Wake,
                }),
            },
            ..span(8, 1_030_000, 0, 0)
        },
        SpanOut {
            name: Some("futex".into()),
            cat: Some(crate::model::wait::TIMELINE_CATEGORY.into()),
            values: Some(r#","state":"sleeping","runnable_ns":2000"#.into()),
            ..span(9, 1_025_000, 5_000, 0)
        },
        SpanOut {
            name: Some("runnable".into()),
            cat: Some(crate::model::wait::TIMELINE_CATEGORY.into()),
            kind: EventKind::Span {
                dur_ns: 2_000,
                depth: 0,
                flow: Some(Flow {
                    id: FlowKind::WAKE_BIT | 1,
                    end: true,
                    kind: FlowKind::Wake,
                }),
            },
            ..span(9, 1_030_000, 2_000, 0)
        },
        // Thread 9's short waits (`--off-cpu`): a counter of its own.
        SpanOut {
            name: Some("short waits (ns)".into()),
            cat: Some(crate::model::wait::TIMELINE_CATEGORY.into()),
            kind: EventKind::ThreadCounter(12_345),
            ..span(9, 1_018_000, 0, 0)
        },
        SpanOut {
            name: Some("CUDA device memory (bytes)".into()),
            kind: EventKind::Counter(5),
            ..span(8, 1_013_000, 0, 0)
        },
        SpanOut {
            name: Some("fetch".into()),
            cat: Some("itt".into()),
            kind: EventKind::Async(AsyncEdge { begin: true, id: 1 }),
            values: Some(r#","size":4"#.into()),
            ..span(8, 1_014_000, 0, 0)
        },
        SpanOut {
            name: Some("fetch".into()),
            cat: Some("itt".into()),
            kind: EventKind::Async(AsyncEdge { begin: false, id: 1 }),
            ..span(9, 1_015_000, 0, 0)
        },
    ]
}

/// Every kind of event, as the record pipeline hands them to either writer.
fn record<W: std::io::Write>(w: &mut EventWriter<W>) {
    for s in &spans() {
        w.span(s).unwrap();
    }
    let frames = vec![
        frame("main", "/bin/app"),
        frame("hot", "/bin/app"),
        frame("ksys_read", KERNEL_MAPPING),
    ];
    let sample = TimelineSample {
        leaf: "ksys_read_[k]".into(),
        folded: "main;hot;ksys_read_[k]".into(),
        frames,
    };
    w.sample(7, 8, 1_016_000, &sample).unwrap();
    w.counter(7, "power (W)", 1_017_000, &[("value".into(), 41.5)])
        .unwrap();
    w.process_name(7, "app").unwrap();
    w.thread_name(7, 8, "worker").unwrap();
}

fn clocks() -> Snapshot {
    Snapshot {
        monotonic_ns: 1_000_000,
        realtime_ns: 5_000_000,
        boottime_ns: 1_000_100,
        read_ns: 40,
        error_ns: None,
    }
}

/// The trace `record` makes in `format`, written to `dir/name`.
fn write(dir: &Path, name: &str, format: TraceFormat) {
    let file = std::fs::File::create(dir.join(name)).unwrap();
    let mut w = EventWriter::starting(Sink::new(file, false).0, &PROBES, format, clocks()).unwrap();
    record(&mut w);
    w.ending(clocks()).unwrap();
    w.finish().unwrap().close().unwrap();
}

/// The events of a trace.json, each as its JSON text (keys sorted), sorted: a multiset.
fn events(path: &Path) -> Vec<String> {
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut events: Vec<String> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let mut e = e.clone();
            // Perfetto keeps neither an async range's thread nor its id.
            if matches!(e["ph"].as_str(), Some("b" | "e")) {
                let e = e.as_object_mut().unwrap();
                e.remove("tid");
                e.remove("id");
            }
            e.to_string()
        })
        .collect();
    events.sort();
    events
}

/// Replays into a new trace at `out` in `format`, from `from` (None: the Perfetto trace of
/// capture `dir`, whose depths are read from the trace with `depths`, else worked out; Some:
/// that trace.json).
fn convert(dir: &Path, (from, depths): (Option<&Path>, bool), out: &Path, format: TraceFormat) {
    let file = std::fs::File::create(out).unwrap();
    let mut writer = EventWriter::starting(Sink::new(file, false).0, &[], format, clocks()).unwrap();
    let mut r = Replay {
        writer: &mut writer,
        placement: Placement::default(),
        progress: Progress::default(),
        held: None,
    };
    match from {
        None => replay(dir, &dir.join("trace.perfetto-trace"), &mut r, depths).unwrap(),
        Some(json) => {
            let reader = Box::new(std::fs::File::open(json).unwrap());
            crate::export::convert::replay_events(json, reader, &mut r).unwrap();
        }
    }
    writer.finish().unwrap().close().unwrap();
}

#[test]
fn a_perfetto_trace_converts_to_the_trace_json_of_the_same_events() {
    let dir = std::env::temp_dir().join(format!("xtrace-replay-pf-{}", std::process::id()));
    let (pf, twice) = (dir.join("pf"), dir.join("twice"));
    std::fs::create_dir_all(&pf).unwrap();
    std::fs::create_dir_all(&twice).unwrap();
    write(&dir, "trace.json", TraceFormat::Json);
    write(&pf, "trace.perfetto-trace", TraceFormat::Perfetto);
    // The depths the trace gives, and the depths worked out from the nesting (an older trace's
    // way), agree: the fixture's nested spans are on one source track.
    convert(&pf, (None, true), &dir.join("converted.json"), TraceFormat::Json);
    convert(&pf, (None, false), &dir.join("nested.json"), TraceFormat::Json);
    // trace.json to Perfetto and back: the same events again, flows included.
    let json = dir.join("trace.json");
    convert(
        &dir,
        (Some(&json), false),
        &twice.join("trace.perfetto-trace"),
        TraceFormat::Perfetto,
    );
    convert(&twice, (None, true), &dir.join("twice.json"), TraceFormat::Json);
    let want = events(&json);
    let (got, nested, back) = (
        events(&dir.join("converted.json")),
        events(&dir.join("nested.json")),
        events(&dir.join("twice.json")),
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(got, want);
    assert_eq!(got.len(), 20, "{got:#?}");
    assert!(got.iter().any(|e| e.contains("\"depth\":1")), "{got:#?}");
    assert_eq!(nested, want);
    assert_eq!(back, want);
}
