//! The MPI family (`--mpi`): each MPI call's span, rendered by `mpi::calls` with its count,
//! datatype, bytes, peer, tag and root, and added up per function. In summary.json, the `mpi`
//! section: per function, its class, calls, time and bytes.
use std::io;

use serde::Serialize;
use xtrace_common::event::SpanEvent;

use super::{
    summary::{Ending, Sections},
    Family, Shared,
};
use crate::{
    mpi::calls::{Calls, Total},
    pipeline::{
        decode::Event,
        writer::{EventKind, SpanOut},
    },
};

/// summary.json's `mpi` section.
#[derive(Clone, Debug, Serialize)]
pub struct MpiSummary {
    /// Per MPI function called, by name.
    pub functions: Vec<MpiFunction>,
    /// Calls whose entry record was lost: counted, without bytes.
    pub without_args: u64,
}

/// One MPI function's row.
#[derive(Clone, Debug, Serialize)]
pub struct MpiFunction {
    pub name: &'static str,
    #[serde(flatten)]
    pub total: Total,
}

/// The MPI family's state.
pub struct MpiFamily {
    pub calls: Calls,
}

impl Family for MpiFamily {
    fn owns(&self, event: &Event) -> bool {
        match event {
            Event::Span(span) => self.calls.owns(span.probe_id),
            Event::Args(args) => self.calls.owns(args.probe_id),
            _ => false,
        }
    }

    fn record(&mut self, event: Event, shared: &mut Shared<'_>) -> io::Result<()> {
        match event {
            Event::Span(span) => self.span(&span, shared),
            Event::Args(args) => {
                self.calls.args(&args);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn summarize(&self, _ending: &Ending<'_>, sections: &mut Sections) {
        sections.args_unpaired += self.calls.dropped();
        if self.calls.traced() {
            sections.mpi = Some(MpiSummary {
                functions: self
                    .calls
                    .totals
                    .iter()
                    .map(|(name, total)| MpiFunction {
                        name,
                        total: total.clone(),
                    })
                    .collect(),
                without_args: self.calls.without_args,
            });
        }
    }
}

impl MpiFamily {
    /// The span of an MPI call, with what it moved; every call is sent (the summary counts each),
    /// and one shorter than `--min-duration` is left out of the trace here.
    fn span(&mut self, span: &SpanEvent, shared: &mut Shared<'_>) -> io::Result<()> {
        let (pid, tid) = (span.header.pid, span.header.tid);
        let end_ns = span.header.ts_ns;
        let values = self
            .calls
            .span(shared.images, span.probe_id, (pid, tid), (span.start_ns, end_ns));
        let duration = end_ns.saturating_sub(span.start_ns);
        let site = shared.call_site(span, duration, None);
        if duration < shared.min_duration_ns {
            if let Some(stats) = shared.stats.get_mut(span.probe_id as usize) {
                stats.short += 1;
            }
            return Ok(());
        }
        let values = values + site.as_deref().unwrap_or_default();
        shared.emit(SpanOut {
            probe: span.probe_id as usize,
            pid,
            tid,
            start_ns: span.start_ns,
            kind: EventKind::span(duration, span.depth.into()),
            values: (!values.is_empty()).then(|| values.into_boxed_str()),
            ..Default::default()
        })
    }
}
