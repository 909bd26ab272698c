//! From ring-buffer bytes to aggregates and trace events: `reader` drains the ring buffer, `decode`
//! turns records into events, `stats` aggregates per probe, `values` pairs captured arguments with
//! their spans, `threads` names pids and tids.
pub mod decode;
pub mod reader;
pub mod stats;
pub mod threads;
pub mod values;
pub mod writer;

use std::io::Write;

use crate::pipeline::{
    decode::Event,
    stats::ProbeStats,
    threads::Names,
    values::{Capture, Values},
    writer::{SpanOut, TraceWriter},
};

/// Everything the records of one recording feed into.
pub struct Pipeline<W: Write + Send + 'static> {
    /// Indexed by probe id.
    pub stats: Vec<ProbeStats>,
    pub trace: TraceWriter<W>,
    pub names: Names,
    pub values: Values,
    /// Records that could not be decoded (wrong size or unknown kind); never expected.
    pub undecodable: u64,
    /// Spans whose probe id is not in the probe table; never expected.
    pub unknown_probe: u64,
    pub events: u64,
}

impl<W: Write + Send + 'static> Pipeline<W> {
    /// `captures` says, by probe id, which values each probe captures.
    pub fn new(captures: Vec<Capture>, trace: TraceWriter<W>) -> Self {
        let stats = vec![ProbeStats::default(); captures.len()];
        Pipeline {
            stats,
            trace,
            names: Names::default(),
            values: Values::new(captures),
            undecodable: 0,
            unknown_probe: 0,
            events: 0,
        }
    }

    /// Handles one ring-buffer record.
    pub fn record(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.events += 1;
        match decode::decode(bytes) {
            Ok(Event::Span(span)) => {
                let id = span.probe_id as usize;
                let Some(stats) = self.stats.get_mut(id) else {
                    self.unknown_probe += 1;
                    return Ok(());
                };
                let duration = span.header.ts_ns.saturating_sub(span.start_ns);
                stats.add(duration);
                self.names.saw(span.header.pid, span.header.tid);
                let values = self
                    .values
                    .span(id, span.header.tid, span.start_ns, span.ret)
                    .map(String::into_boxed_str);
                self.trace.span(SpanOut {
                    probe: id,
                    pid: span.header.pid,
                    tid: span.header.tid,
                    start_ns: span.start_ns,
                    dur_ns: duration,
                    depth: span.depth,
                    values,
                })
            }
            Ok(Event::Thread(thread)) => {
                let len = thread
                    .comm
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(thread.comm.len());
                let name = String::from_utf8_lossy(&thread.comm[..len]).into_owned();
                self.names.named(thread.header.pid, thread.header.tid, name);
                Ok(())
            }
            Ok(Event::Args(args)) => {
                self.values.args(&args);
                Ok(())
            }
            Err(_) => {
                self.undecodable += 1;
                Ok(())
            }
        }
    }
}
