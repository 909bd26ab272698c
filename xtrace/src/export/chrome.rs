//! Chrome Trace Event format (trace.json), streamed: events are written as they arrive, metadata
//! naming processes and threads at the end, so memory does not grow with the trace.
//! Object form `{"traceEvents":[...]}`; spans are complete events (`"ph":"X"`), times in µs.
use std::io::{self, Write};

use super::micros;
use crate::pipeline::writer::SpanOut;

pub struct ChromeWriter<W: Write> {
    out: W,
    /// Per probe id: the JSON-quoted name and category, prepared once.
    names: Vec<(String, String)>,
    first: bool,
}

fn quote(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"?\"".into())
}

/// A counter event; `values` are the `args` members, already JSON.
fn write_counter(
    out: &mut impl Write,
    pid: u32,
    quoted_name: &str,
    ts_ns: u64,
    values: &str,
) -> io::Result<()> {
    write!(
        out,
        "{{\"ph\":\"C\",\"name\":{quoted_name},\"ts\":{},\"pid\":{pid},\"args\":{{{values}}}}}",
        micros(ts_ns)
    )
}

/// A thread-scoped instant event; `name` and `cat` are JSON-quoted, `values` the `args` members.
fn write_instant(
    out: &mut impl Write,
    (pid, tid): (u32, u32),
    name: &str,
    cat: &str,
    ts_ns: u64,
    values: &str,
) -> io::Result<()> {
    write!(
        out,
        "{{\"ph\":\"i\",\"s\":\"t\",\"name\":{name},\"cat\":{cat},\"ts\":{},\"pid\":{pid},\"tid\":{tid},\"args\":{{{values}}}}}",
        micros(ts_ns)
    )
}

impl<W: Write> ChromeWriter<W> {
    /// Starts the trace; `probes` are (name, category) by probe id.
    pub fn new(mut out: W, probes: &[(&str, &str)]) -> io::Result<Self> {
        out.write_all(b"{\"traceEvents\":[\n")?;
        let names = probes
            .iter()
            .map(|(name, cat)| (quote(name), quote(cat)))
            .collect();
        Ok(ChromeWriter {
            out,
            names,
            first: true,
        })
    }

    fn separator(&mut self) -> io::Result<()> {
        if self.first {
            self.first = false;
            Ok(())
        } else {
            self.out.write_all(b",\n")
        }
    }

    /// A completed call; its captured values join `depth` under `args`. An instant event has
    /// only its values under `args`.
    pub fn span(&mut self, span: &SpanOut) -> io::Result<()> {
        self.separator()?;
        let (probe_name, probe_cat) = &self.names[span.probe];
        let renamed = span.name.as_deref().map(quote);
        let name = renamed.as_ref().unwrap_or(probe_name);
        let recat = span.cat.as_deref().map(quote);
        let cat = recat.as_ref().unwrap_or(probe_cat);
        let SpanOut { pid, tid, depth, .. } = span;
        if let Some(value) = span.counter {
            let values = format!("\"bytes\":{value}");
            return write_counter(&mut self.out, *pid, name, span.start_ns, &values);
        }
        if let Some(edge) = span.edge {
            let values = span.values.as_deref().unwrap_or("");
            let values = values.strip_prefix(',').unwrap_or(values);
            let (ph, id) = (if edge.begin { 'b' } else { 'e' }, edge.id);
            return write!(
                self.out,
                "{{\"ph\":\"{ph}\",\"name\":{name},\"cat\":{cat},\"id\":\"{id:#x}\",\"ts\":{},\"pid\":{pid},\"tid\":{tid},\"args\":{{{values}}}}}",
                micros(span.start_ns)
            );
        }
        if span.instant {
            let values = span.values.as_deref().unwrap_or("");
            let values = values.strip_prefix(',').unwrap_or(values);
            return write_instant(&mut self.out, (*pid, *tid), name, cat, span.start_ns, values);
        }
        write!(
            self.out,
            "{{\"ph\":\"X\",\"name\":{name},\"cat\":{cat},\"ts\":{},\"dur\":{},\"pid\":{pid},\"tid\":{tid},\"args\":{{\"depth\":{depth}{}}}}}",
            micros(span.start_ns),
            micros(span.dur_ns),
            span.values.as_deref().unwrap_or("")
        )
    }

    /// A counter sample (`"ph":"C"`): one track per process and name, one series per value.
    pub fn counter(&mut self, pid: u32, name: &str, ts_ns: u64, values: &[(String, f64)]) -> io::Result<()> {
        self.separator()?;
        let values: Vec<String> = values
            .iter()
            .map(|(series, v)| format!("{}:{}", quote(series), serde_json::json!(v)))
            .collect();
        write_counter(&mut self.out, pid, &quote(name), ts_ns, &values.join(","))
    }

    /// One CPU sample: an instant event on its thread's track named by the innermost frame.
    pub fn sample(&mut self, pid: u32, tid: u32, ts_ns: u64, leaf: &str, stack: &str) -> io::Result<()> {
        self.separator()?;
        let values = format!("\"stack\":{}", quote(stack));
        write_instant(
            &mut self.out,
            (pid, tid),
            &quote(leaf),
            "\"sample\"",
            ts_ns,
            &values,
        )
    }

    fn metadata(&mut self, what: &str, pid: u32, tid: u32, name: &str) -> io::Result<()> {
        self.separator()?;
        write!(
            self.out,
            "{{\"ph\":\"M\",\"name\":\"{what}\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":{}}}}}",
            quote(name)
        )
    }

    pub fn process_name(&mut self, pid: u32, name: &str) -> io::Result<()> {
        self.metadata("process_name", pid, pid, name)
    }

    pub fn thread_name(&mut self, pid: u32, tid: u32, name: &str) -> io::Result<()> {
        self.metadata("thread_name", pid, tid, name)
    }

    /// Closes the JSON document and returns the writer, flushed.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(b"\n],\"displayTimeUnit\":\"ns\"}\n")?;
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
            dur_ns,
            depth,
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
            instant: true,
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
    fn empty_trace_is_valid() {
        let bytes = ChromeWriter::new(Vec::new(), &[]).unwrap().finish().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(doc["traceEvents"].as_array().unwrap().len(), 0);
    }
}
