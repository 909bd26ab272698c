//! From ring-buffer bytes to aggregates and trace events: `reader` drains the ring buffer, `decode`
//! turns records into events, `stats` aggregates per probe, `threads` names pids and tids.
pub mod decode;
pub mod reader;
pub mod stats;
pub mod threads;
pub mod writer;

use std::io::Write;

use crate::pipeline::{
    decode::Event,
    stats::ProbeStats,
    threads::Names,
    writer::{SpanOut, TraceWriter},
};

/// Everything the records of one recording feed into.
pub struct Pipeline<W: Write + Send + 'static> {
    /// Indexed by probe id.
    pub stats: Vec<ProbeStats>,
    pub trace: TraceWriter<W>,
    pub names: Names,
    /// Records that could not be decoded (wrong size or unknown kind); never expected.
    pub undecodable: u64,
    /// Spans whose probe id is not in the probe table; never expected.
    pub unknown_probe: u64,
    pub events: u64,
}

impl<W: Write + Send + 'static> Pipeline<W> {
    pub fn new(probes: usize, trace: TraceWriter<W>) -> Self {
        let stats = vec![ProbeStats::default(); probes];
        Pipeline {
            stats,
            trace,
            names: Names::default(),
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
                self.trace.span(SpanOut {
                    probe: id,
                    pid: span.header.pid,
                    tid: span.header.tid,
                    start_ns: span.start_ns,
                    dur_ns: duration,
                    depth: span.depth,
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
            Err(_) => {
                self.undecodable += 1;
                Ok(())
            }
        }
    }
}
