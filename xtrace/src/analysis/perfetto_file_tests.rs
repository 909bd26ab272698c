//! Tests of reading a Perfetto trace into a capture (`super`), against its trace.json twin.
use super::*;
use crate::{
    analysis::capture::Capture,
    pipeline::{
        chrome::ChromeWriter,
        perfetto::PerfettoWriter,
        writer::{AsyncEdge, EventKind, SpanOut},
    },
};

const PROBES: [(&str, &str); 2] = [("work", "uprobe"), ("app:tick", "usdt")];

/// The same events, as the record pipeline hands them to either writer.
fn events() -> Vec<SpanOut> {
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
        span(8, 1_000_000, 9_000, 0),
        span(9, 1_020_000, 4_000, 0),
        SpanOut {
            probe: 1,
            kind: EventKind::INSTANT,
            values: Some(r#","arg0":1"#.into()),
            ..span(8, 1_011_000, 0, 0)
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

fn perfetto() -> Vec<u8> {
    let start = crate::clock::snapshot();
    let mut w = PerfettoWriter::new(Vec::new(), &PROBES, &start).unwrap();
    for e in events() {
        w.span(&e).unwrap();
    }
    let frame = |name: &str| crate::pipeline::perfetto::SampleFrame {
        name: name.into(),
        module: "/bin/app".into(),
        rel_pc: 0x10,
    };
    w.sample(7, 8, 1_016_000, &[frame("a"), frame("hot")]).unwrap();
    w.process_name(7, "app").unwrap();
    w.thread_name(7, 8, "worker").unwrap();
    w.finish().unwrap()
}

fn chrome() -> Vec<u8> {
    let mut w = ChromeWriter::new(Vec::new(), &PROBES).unwrap();
    for e in events() {
        w.span(&e).unwrap();
    }
    w.sample(7, 8, 1_016_000, "hot", "a;hot").unwrap();
    w.process_name(7, "app").unwrap();
    w.thread_name(7, 8, "worker").unwrap();
    w.finish().unwrap()
}

/// The capture read from `trace` in `format`, or the error's text.
fn load(name: &str, trace: &[u8]) -> Result<Capture, String> {
    // A directory of its own: the tests run in parallel.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("xtrace-pf-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), trace).unwrap();
    let mut capture = Capture::default();
    let read = super::super::trace_file::read(&dir, &mut capture, Default::default());
    std::fs::remove_dir_all(&dir).unwrap();
    read.map(|()| capture).map_err(|e| e.to_string())
}

fn args(c: &Capture) -> Vec<Option<serde_json::Value>> {
    let parsed = |a: &str| {
        let mut v: serde_json::Value = serde_json::from_str(a).unwrap();
        v.as_object_mut().unwrap().remove("depth");
        v
    };
    c.spans.iter().map(|s| s.args.as_deref().map(parsed)).collect()
}

#[test]
fn a_perfetto_trace_reads_as_its_json_twin() {
    let json = load("trace.json", &chrome()).unwrap();
    let pf = load("trace.perfetto-trace", &perfetto()).unwrap();
    assert_eq!(pf.names, json.names);
    let no_args = |c: &Capture| -> Vec<_> {
        c.spans
            .iter()
            .map(|s| (s.name, s.pid, s.tid, s.start_ns, s.dur_ns))
            .collect()
    };
    assert_eq!(no_args(&pf), no_args(&json));
    assert_eq!(args(&pf), args(&json));
    assert_eq!(pf.spans.len(), 3);
    assert_eq!(pf.instants, json.instants);
    assert_eq!(
        pf.instants.values().sum::<u64>(),
        1,
        "the USDT instant, not the sample"
    );
    assert_eq!(pf.processes, json.processes);
    assert_eq!(pf.threads, json.threads);
}

#[test]
fn a_cut_or_damaged_trace_is_refused_at_its_packets_offset() {
    let bytes = perfetto();
    // Find the offset of the third packet by walking the first two.
    let mut offsets = vec![0u64];
    let mut reader = bytes.as_slice();
    let mut at = 0;
    let mut buf = Vec::new();
    while next_packet(&mut reader, &mut buf, &mut at).unwrap() {
        offsets.push(at);
    }
    let third = offsets[2] as usize;
    let e = load("trace.perfetto-trace", &bytes[..third + 3]).unwrap_err();
    assert!(
        e.contains(&format!(
            "trace.perfetto-trace: the packet at byte {third} is cut short"
        )),
        "{e}"
    );
    assert!(e.ends_with("; the capture is damaged: record it again"), "{e}");
    let mut damaged = bytes.clone();
    damaged[third] = 0x12;
    let e = load("trace.perfetto-trace", &damaged).unwrap_err();
    assert!(
        e.contains(&format!(
            "the packet at byte {third} is not a Perfetto trace packet"
        )),
        "{e}"
    );
    let e = load("trace.perfetto-trace", b"{\"traceEvents\":[]}").unwrap_err();
    assert!(
        e.contains("the packet at byte 0 is not a Perfetto trace packet (field key 0x7b"),
        "{e}"
    );
}

#[test]
fn a_gzipped_perfetto_trace_is_read_too() {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&perfetto()).unwrap();
    let c = load("trace.perfetto-trace.gz", &gz.finish().unwrap()).unwrap();
    assert_eq!(c.spans.len(), 3);
}
