//! Chrome Trace Event format (trace.json), streamed: events are written as they arrive, metadata
//! naming processes and threads at the end, so memory does not grow with the trace.
//! Object form `{"traceEvents":[...]}`; spans are complete events (`"ph":"X"`), times in µs.
//! Events are formatted into one buffer, handed to the output in 1 MiB pieces: a span is a few
//! byte copies and integer conversions, not a `write!` per field through the output's layers,
//! and a piece as large as the output's own buffer goes to the file without another copy.
use std::io::{self, Write};

use super::writer::{EventKind, FlowKind, SpanOut};
use crate::model::wait::TIMELINE_CATEGORY;

/// The first line of the trace; events follow one per line (which `xtrace report` relies on to
/// read a trace a line at a time).
pub const HEAD_LINE: &[u8] = b"{\"traceEvents\":[";
/// The last line.
pub const TAIL_LINE: &[u8] = b"],\"displayTimeUnit\":\"ns\"}";

/// Buffered bytes handed to the output at once: as many as the output file's buffer holds.
const SPILL: usize = crate::output::FILE_BUFFER;

pub struct ChromeWriter<W: Write> {
    out: W,
    /// Events not yet handed to `out`.
    buf: Vec<u8>,
    /// Per probe id: the JSON-quoted name and category, prepared once.
    names: Vec<(String, String)>,
    first: bool,
    /// Complete events (`"ph":"X"`, spans) written.
    complete: u64,
}

fn quote(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"?\"".into())
}

/// Appends an integer.
fn push_int(buf: &mut Vec<u8>, n: impl itoa::Integer) {
    buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends nanoseconds as Chrome trace microseconds with all nanosecond digits: 1234567 →
/// `1234.567`.
fn push_micros(buf: &mut Vec<u8>, ns: u64) {
    push_int(buf, ns / 1000);
    let frac = ns % 1000;
    let digit = |d: u64| b'0' + (d % 10) as u8;
    buf.extend_from_slice(&[b'.', digit(frac / 100), digit(frac / 10), digit(frac)]);
}

/// The `"ts":T,"pid":P` members, and `,"tid":T` when there is a thread.
fn push_when_where(buf: &mut Vec<u8>, ts_ns: u64, pid: u32, tid: Option<u32>) {
    buf.extend_from_slice(b"\"ts\":");
    push_micros(buf, ts_ns);
    buf.extend_from_slice(b",\"pid\":");
    push_int(buf, pid);
    if let Some(tid) = tid {
        buf.extend_from_slice(b",\"tid\":");
        push_int(buf, tid);
    }
}

/// A counter event; `values` are the `args` members, already JSON.
fn push_counter(buf: &mut Vec<u8>, pid: u32, quoted_name: &str, ts_ns: u64, values: &str) {
    buf.extend_from_slice(b"{\"ph\":\"C\",\"name\":");
    buf.extend_from_slice(quoted_name.as_bytes());
    buf.push(b',');
    push_when_where(buf, ts_ns, pid, None);
    push_args(buf, values);
}

/// A thread-scoped instant event; `name` and `cat` are JSON-quoted, `values` the `args` members.
fn push_instant(buf: &mut Vec<u8>, (pid, tid): (u32, u32), name: &str, cat: &str, ts_ns: u64, values: &str) {
    buf.extend_from_slice(b"{\"ph\":\"i\",\"s\":\"t\",");
    push_name_cat(buf, name, cat);
    push_when_where(buf, ts_ns, pid, Some(tid));
    push_args(buf, values);
}

/// `"name":N,"cat":C,` (both already JSON-quoted).
fn push_name_cat(buf: &mut Vec<u8>, name: &str, cat: &str) {
    buf.extend_from_slice(b"\"name\":");
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b",\"cat\":");
    buf.extend_from_slice(cat.as_bytes());
    buf.push(b',');
}

/// One end of a flow arrow: `{"ph":"s","name":"launch","cat":"gpu","id":ID,"ts":...,"pid":...,
/// "tid":...}`, or `"ph":"f"` with `"bp":"e"`. Chrome's viewer and Perfetto's importer bind an
/// `s` to the innermost slice of its thread open at its `ts`, and an `f` with `"bp":"e"` to the
/// innermost one enclosing its `ts` (without it, to the next slice that begins after). Perfetto
/// reads the events in time order, events of one time in file order, and binds an `f` only to a
/// flow whose `s` it has read: so an `f` is at its slice's start, written after its `s` (a
/// launch's came before; a wake-up's `s` is at the same time as the woken thread's `runnable`
/// slice, and written before it). Perfetto then keeps the flow from the earlier-starting of the
/// two slices to the later (the first read on a tie): from the launch to the GPU work, from the
/// waker's `wake` instant to the woken thread's `runnable` slice.
fn push_flow(buf: &mut Vec<u8>, flow: super::writer::Flow, ts_ns: u64, (pid, tid): (u32, u32)) {
    buf.extend_from_slice(if flow.end {
        b"{\"ph\":\"f\",\"bp\":\"e\","
    } else {
        b"{\"ph\":\"s\","
    });
    let (name, cat) = flow.kind.quoted_name_cat();
    push_name_cat(buf, name, cat);
    let _ = write!(buf, "\"id\":\"{:#x}\",", flow.id);
    push_when_where(buf, ts_ns, pid, Some(tid));
    buf.push(b'}');
}

/// A complete event (`"ph":"X"`) named `name` of category `cat`, quoted, from `start_ns` for
/// `dur_ns`, on its thread, its `depth` and `values` (`,"k":v` members) under `args`.
fn push_complete(
    buf: &mut Vec<u8>,
    (name, cat): (&str, &str),
    (start_ns, dur_ns): (u64, u64),
    (pid, tid, depth): (u32, u32, u32),
    values: &str,
) {
    buf.extend_from_slice(b"{\"ph\":\"X\",");
    push_name_cat(buf, name, cat);
    buf.extend_from_slice(b"\"ts\":");
    push_micros(buf, start_ns);
    buf.extend_from_slice(b",\"dur\":");
    push_micros(buf, dur_ns);
    buf.extend_from_slice(b",\"pid\":");
    push_int(buf, pid);
    buf.extend_from_slice(b",\"tid\":");
    push_int(buf, tid);
    buf.extend_from_slice(b",\"args\":{\"depth\":");
    push_int(buf, depth);
    buf.extend_from_slice(values.as_bytes());
    buf.extend_from_slice(b"}}");
}

/// `,"args":{VALUES}}`: the `args` object and the event's closing brace.
fn push_args(buf: &mut Vec<u8>, values: &str) {
    buf.extend_from_slice(b",\"args\":{");
    buf.extend_from_slice(values.as_bytes());
    buf.extend_from_slice(b"}}");
}

impl<W: Write> ChromeWriter<W> {
    /// Starts the trace; `probes` are (name, category) by probe id.
    pub fn new(mut out: W, probes: &[(&str, &str)]) -> io::Result<Self> {
        out.write_all(HEAD_LINE)?;
        out.write_all(b"\n")?;
        let names = probes
            .iter()
            .map(|(name, cat)| (quote(name), quote(cat)))
            .collect();
        Ok(ChromeWriter {
            out,
            buf: Vec::with_capacity(SPILL + 4096),
            names,
            first: true,
            complete: 0,
        })
    }

    /// Starts an event: the separator after the one before it.
    fn separator(&mut self) {
        if self.first {
            self.first = false;
        } else {
            self.buf.extend_from_slice(b",\n");
        }
    }

    /// Ends an event: hands the buffer to the output once it holds `SPILL` bytes.
    fn spill(&mut self) -> io::Result<()> {
        if self.buf.len() >= SPILL {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// A completed call; its captured values join `depth` under `args`. An instant event has
    /// only its values under `args`.
    pub fn span(&mut self, span: &SpanOut) -> io::Result<()> {
        self.separator();
        // A replayed event (`xtrace convert`, `xtrace merge`) has no probe, and its own name.
        let (probe_name, probe_cat) = match self.names.get(span.probe) {
            Some((name, cat)) => (name.as_str(), cat.as_str()),
            None => ("\"?\"", "\"?\""),
        };
        let renamed = span.name.as_deref().map(quote);
        let name = renamed.as_deref().unwrap_or(probe_name);
        let recat = span.cat.as_deref().map(quote);
        let cat = recat.as_deref().unwrap_or(probe_cat);
        let SpanOut { pid, tid, .. } = *span;
        let values = span.values.as_deref().unwrap_or("");
        let buf = &mut self.buf;
        match span.kind {
            EventKind::Counter(value) => {
                push_counter(buf, pid, name, span.start_ns, &format!("\"bytes\":{value}"));
            }
            EventKind::ThreadCounter(value) => {
                // A process's counter in trace.json: the tid in its name, and beside it.
                let track = super::writer::json_counter_name(span.name.as_deref().unwrap_or("counter"), tid);
                buf.extend_from_slice(b"{\"ph\":\"C\",");
                push_name_cat(buf, &quote(&track), cat);
                push_when_where(buf, span.start_ns, pid, Some(tid));
                push_args(buf, &format!("\"value\":{value}"));
            }
            EventKind::Async(edge) => {
                let values = values.strip_prefix(',').unwrap_or(values);
                buf.extend_from_slice(if edge.begin {
                    b"{\"ph\":\"b\","
                } else {
                    b"{\"ph\":\"e\","
                });
                push_name_cat(buf, name, cat);
                let _ = write!(buf, "\"id\":\"{:#x}\",", edge.id);
                push_when_where(buf, span.start_ns, pid, Some(tid));
                push_args(buf, values);
            }
            EventKind::Instant { flow: Some(flow) } => {
                if flow.kind == FlowKind::Wake {
                    // The wake-up's own instant, which the flow's start binds to where no slice
                    // of the waker is open.
                    let values = values.strip_prefix(',').unwrap_or(values);
                    push_instant(buf, (pid, tid), name, cat, span.start_ns, values);
                    buf.extend_from_slice(b",\n");
                }
                push_flow(buf, flow, span.start_ns, (pid, tid));
            }
            EventKind::Instant { flow: None } => {
                let values = values.strip_prefix(',').unwrap_or(values);
                push_instant(buf, (pid, tid), name, cat, span.start_ns, values);
            }
            EventKind::Span { dur_ns, depth, flow } => {
                if span.cat.as_deref() != Some(TIMELINE_CATEGORY) {
                    self.complete += 1;
                }
                push_complete(
                    buf,
                    (name, cat),
                    (span.start_ns, dur_ns),
                    (pid, tid, depth),
                    values,
                );
                if let Some(flow) = flow {
                    buf.extend_from_slice(b",\n");
                    push_flow(buf, flow, span.start_ns, (pid, tid));
                }
            }
        }
        self.spill()
    }

    /// A counter sample (`"ph":"C"`): one track per process and name, one series per value.
    pub fn counter(&mut self, pid: u32, name: &str, ts_ns: u64, values: &[(String, f64)]) -> io::Result<()> {
        self.separator();
        let values: Vec<String> = values
            .iter()
            .map(|(series, v)| format!("{}:{}", quote(series), serde_json::json!(v)))
            .collect();
        push_counter(&mut self.buf, pid, &quote(name), ts_ns, &values.join(","));
        self.spill()
    }

    /// One CPU sample: an instant event on its thread's track named by the innermost frame.
    pub fn sample(&mut self, pid: u32, tid: u32, ts_ns: u64, leaf: &str, stack: &str) -> io::Result<()> {
        self.separator();
        let values = format!("\"stack\":{}", quote(stack));
        push_instant(
            &mut self.buf,
            (pid, tid),
            &quote(leaf),
            "\"sample\"",
            ts_ns,
            &values,
        );
        self.spill()
    }

    fn metadata(&mut self, what: &str, pid: u32, tid: u32, name: &str) -> io::Result<()> {
        self.separator();
        let _ = write!(
            self.buf,
            "{{\"ph\":\"M\",\"name\":\"{what}\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":{}}}}}",
            quote(name)
        );
        self.spill()
    }

    pub fn process_name(&mut self, pid: u32, name: &str) -> io::Result<()> {
        self.metadata("process_name", pid, pid, name)
    }

    pub fn thread_name(&mut self, pid: u32, tid: u32, name: &str) -> io::Result<()> {
        self.metadata("thread_name", pid, tid, name)
    }

    /// The complete events (spans) written so far: functions', USDT begin/end pairs', ranges',
    /// GPU work's; not off-CPU waits.
    pub fn spans(&self) -> u64 {
        self.complete
    }

    /// Closes the JSON document and returns the writer, flushed.
    pub fn finish(mut self) -> io::Result<W> {
        self.buf.push(b'\n');
        self.buf.extend_from_slice(TAIL_LINE);
        self.buf.push(b'\n');
        self.out.write_all(&self.buf)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_valid_chrome_json() {
        let probes = [("outer(int)", "uprobe"), ("in\"ner", "uprobe")];
        let mut w = ChromeWriter::new(Vec::new(), &probes).unwrap();
        let span = |probe, start_ns, dur_ns, depth, values: Option<&str>| SpanOut {
            probe,
            pid: 10,
            tid: 11,
            start_ns,
            kind: EventKind::span(dur_ns, depth),
            values: values.map(Into::into),
            ..Default::default()
        };
        w.span(&span(0, 1_000_000, 5_000, 0, None)).unwrap();
        w.span(&span(1, 1_001_000, 1_234, 1, Some(r#","arg0":-1,"ret":"0x10""#)))
            .unwrap();
        w.span(&SpanOut {
            name: Some("re\"named".into()),
            ..span(0, 1_002_000, 10, 0, None)
        })
        .unwrap();
        w.span(&SpanOut {
            kind: EventKind::INSTANT,
            ..span(1, 1_003_000, 0, 0, Some(r#","arg0":7"#))
        })
        .unwrap();
        w.process_name(10, "app").unwrap();
        w.thread_name(10, 11, "worker").unwrap();
        let bytes = w.finish().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let events = doc["traceEvents"].as_array().unwrap();
        assert_eq!(events.len(), 6);
        assert_eq!(events[0]["ph"], "X");
        assert_eq!(events[0]["name"], "outer(int)");
        assert_eq!(events[0]["cat"], "uprobe");
        assert_eq!(events[0]["ts"].as_f64(), Some(1000.0));
        assert_eq!(events[0]["dur"].as_f64(), Some(5.0));
        assert_eq!(events[1]["name"], "in\"ner");
        assert_eq!(events[1]["dur"].as_f64(), Some(1.234));
        assert_eq!(events[1]["args"]["depth"], 1);
        assert_eq!(events[1]["args"]["arg0"], -1);
        assert_eq!(events[1]["args"]["ret"], "0x10");
        assert_eq!(
            (events[1]["pid"].as_u64(), events[1]["tid"].as_u64()),
            (Some(10), Some(11))
        );
        assert_eq!(events[2]["name"], "re\"named");
        assert_eq!(events[2]["cat"], "uprobe");
        assert_eq!(events[3]["ph"], "i");
        assert_eq!(events[3]["s"], "t");
        assert_eq!(events[3]["ts"].as_f64(), Some(1003.0));
        assert_eq!(events[3]["args"]["arg0"], 7);
        assert!(events[3].get("dur").is_none());
        assert_eq!(events[4]["name"], "process_name");
        assert_eq!(events[4]["args"]["name"], "app");
        assert_eq!(events[5]["name"], "thread_name");
        assert_eq!(events[5]["tid"], 11);
    }

    #[test]
    fn micros_keep_nanoseconds() {
        let micros = |ns| {
            let mut buf = Vec::new();
            push_micros(&mut buf, ns);
            String::from_utf8(buf).unwrap()
        };
        assert_eq!(micros(1_234_567), "1234.567");
        assert_eq!(micros(1_234_050), "1234.050");
        assert_eq!(micros(5), "0.005");
        assert_eq!(micros(0), "0.000");
        assert_eq!(micros(u64::MAX), "18446744073709551.615");
    }

    #[test]
    fn empty_trace_is_valid() {
        let bytes = ChromeWriter::new(Vec::new(), &[]).unwrap().finish().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(doc["traceEvents"].as_array().unwrap().len(), 0);
    }
}
