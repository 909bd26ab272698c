//! Tests of reading trace.json into a capture (`super`): the line reader against the streaming
//! parser, other layouts, and the errors of refused events and overflowing times.
use super::*;

/// A trace as xtrace writes it, with a name that needs escapes.
const TRACE: &str = r#"{"traceEvents":[
{"ph":"X","name":"work","cat":"uprobe","ts":1000.500,"dur":2.250,"pid":7,"tid":8,"args":{"depth":0}},
{"ph":"X","name":"in\"ner","cat":"uprobe","ts":1010.000,"dur":1.000,"pid":7,"tid":8,"args":{"depth":1,"arg0":3}},
{"ph":"X","name":"work","cat":"uprobe","ts":1020.000,"dur":4.000,"pid":7,"tid":9,"args":{"depth":0}},
{"ph":"i","s":"t","name":"app:tick","cat":"usdt","ts":1011.000,"pid":7,"tid":8,"args":{"arg0":1}},
{"ph":"i","s":"t","name":"hot","cat":"sample","ts":1012.000,"pid":7,"tid":8,"args":{"stack":"a;hot"}},
{"ph":"C","name":"CUDA device memory (bytes)","ts":1013.000,"pid":7,"args":{"bytes":5}},
{"ph":"M","name":"process_name","pid":7,"tid":7,"args":{"name":"app"}},
{"ph":"M","name":"thread_name","pid":7,"tid":8,"args":{"name":"worker"}}
],"displayTimeUnit":"ns"}
"#;

fn sink(capture: &mut Capture) -> Sink<'_> {
    Sink::new(capture, true)
}

fn by_lines(text: &str) -> Option<Capture> {
    let mut capture = Capture::default();
    read_lines(text.as_bytes(), &mut sink(&mut capture))?;
    Some(capture)
}

fn streamed(text: &str) -> Capture {
    let mut capture = Capture::default();
    stream(text.as_bytes(), &mut sink(&mut capture)).unwrap();
    capture
}

/// The same capture; `args` compared as JSON values (a pretty-printed trace spaces them out).
fn same(a: &Capture, b: &Capture) {
    let spans = |c: &Capture| -> Vec<(Span, Option<serde_json::Value>)> {
        c.spans
            .iter()
            .map(|s| {
                let args = s.args.as_deref().map(|a| serde_json::from_str(a).unwrap());
                (
                    Span {
                        args: None,
                        ..s.clone()
                    },
                    args,
                )
            })
            .collect()
    };
    assert_eq!(a.names, b.names);
    assert_eq!(spans(a), spans(b));
    assert_eq!(a.instants, b.instants);
    assert_eq!(a.processes, b.processes);
    assert_eq!(a.threads, b.threads);
}

#[test]
fn the_line_reader_reads_what_the_streaming_parser_reads() {
    let lines = by_lines(TRACE).expect("xtrace's own layout is read a line at a time");
    same(&lines, &streamed(TRACE));
    assert_eq!(lines.spans.len(), 3);
    assert_eq!(lines.names.len(), 2, "two spans of `work` share one name");
    assert_eq!(lines.names[lines.spans[1].name as usize].name, "in\"ner");
    assert_eq!(lines.spans[1].args.as_deref(), Some(r#"{"depth":1,"arg0":3}"#));
    assert_eq!(
        (lines.spans[0].start_ns, lines.spans[0].dur_ns),
        (1_000_500, 2_250)
    );
    assert_eq!(lines.instants.values().sum::<u64>(), 1);
    assert_eq!(lines.threads[&(7, 8)], "worker");
}

#[test]
fn what_the_chrome_writer_writes_is_read_a_line_at_a_time() {
    use crate::pipeline::{chrome::ChromeWriter, writer::SpanOut};
    let text = |w: ChromeWriter<Vec<u8>>| String::from_utf8(w.finish().unwrap()).unwrap();
    let mut w = ChromeWriter::new(Vec::new(), &[("work", "uprobe")]).unwrap();
    let span = SpanOut {
        pid: 7,
        tid: 8,
        start_ns: 1_000_500,
        kind: crate::pipeline::writer::EventKind::span(2_250, 0),
        ..Default::default()
    };
    w.span(&span).unwrap();
    w.thread_name(7, 8, "worker").unwrap();
    let c = by_lines(&text(w)).expect("the writer's layout");
    assert_eq!(
        (c.spans.len(), c.spans[0].start_ns, c.spans[0].dur_ns),
        (1, 1_000_500, 2_250)
    );
    assert_eq!(c.threads[&(7, 8)], "worker");
    let empty = by_lines(&text(ChromeWriter::new(Vec::new(), &[]).unwrap()));
    assert!(empty.expect("an empty trace").names.is_empty());
}

#[test]
fn other_layouts_are_left_to_the_streaming_parser() {
    let pretty =
        serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(TRACE).unwrap()).unwrap();
    let one_line = TRACE.replace('\n', "");
    let two_per_line = TRACE.replacen("}},\n{", "}},{", 1);
    let cut = &TRACE[..TRACE.len() - 30];
    let extra_tail = TRACE.replace("\"ns\"}", "\"ns\",\"otherData\":{}}");
    for other in [pretty.as_str(), &one_line, &two_per_line, cut, &extra_tail] {
        assert!(by_lines(other).is_none(), "{other}");
    }
    same(&streamed(&pretty), &streamed(TRACE));
    same(&streamed(&two_per_line), &streamed(TRACE));
}

/// The error `read` gives for a capture whose trace is `text`.
fn refused(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("xtrace-trace-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(crate::output::TRACE_FILE), text).unwrap();
    let what = Default::default();
    let e = read(&dir, &mut Capture::default(), what).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    e
}

#[test]
fn an_event_the_sink_refuses_is_named_by_its_line_or_its_place() {
    let bad = TRACE.replace("\"ts\":1020.000", "\"ts\":-1");
    assert!(by_lines(&bad).is_none());
    let why = "is negative or past 146 years (ts -1 µs, dur 4 µs)";
    // One event per line: the third event is on the fourth line.
    let e = refused("lines", &bad);
    assert!(e.contains(&format!("{why} at line 4;")), "{e}");
    // Any other layout: serde_json would place it on the line after, so its place is given.
    let e = refused("pretty", &bad.replace("},\n{", "},\n\n  {"));
    assert!(e.contains(&format!("{why} in event 3 of traceEvents;")), "{e}");
}

#[test]
fn huge_times_and_durations_that_add_up_past_64_bits_are_refused() {
    let huge = TRACE.replace("\"ts\":1020.000", "\"ts\":1e300");
    let mut capture = Capture::default();
    let e = stream(huge.as_bytes(), &mut sink(&mut capture))
        .unwrap_err()
        .to_string();
    assert!(e.contains("(ts 1e300 µs, dur 4 µs)"), "{e}");
    // Five spans of nearly 2^62 ns each: each allowed, their sum not.
    let long = format!("{}", (1u64 << 62) / 1000);
    let events: Vec<String> = (0..5)
        .map(|tid| format!(r#"{{"ph":"X","name":"f","ts":0,"dur":{long},"pid":1,"tid":{tid}}}"#))
        .collect();
    let trace = format!(r#"{{"traceEvents":[{}]}}"#, events.join(","));
    let e = stream(trace.as_bytes(), &mut sink(&mut capture))
        .unwrap_err()
        .to_string();
    assert!(e.contains("durations add up past 2^64 ns"), "{e}");
    let four = format!(r#"{{"traceEvents":[{}]}}"#, events[..4].join(","));
    let mut capture = Capture::default();
    stream(four.as_bytes(), &mut sink(&mut capture)).unwrap();
    assert_eq!(capture.spans.len(), 4);
}
