//! The functions family (`-u`): each traced call's span, with the values its probe captures
//! (arguments at entry, paired with the span by thread and entry time; the return value, or the
//! string it points at) and its call site with `--stacks`. It owns every span, argument record
//! and long string that no other family owns, so it comes last. In summary.json, its probes'
//! `values`, and the argument records dropped and strings unread.
use std::io;

use xtrace_common::event::{SpanEvent, EXIT_TAIL_CALL};

use super::{
    summary::{Ending, ProbeRow, Sections},
    Family, Shared,
};
use crate::{
    image::Images,
    pipeline::{
        decode::Event,
        values::Values,
        writer::{EventKind, SpanOut},
    },
    probes::ProbeKind,
};

/// The functions family's state: the captured values.
pub struct FunctionsFamily {
    pub values: Values,
}

impl Family for FunctionsFamily {
    fn owns(&self, event: &Event) -> bool {
        matches!(
            event,
            Event::Span(_) | Event::SpanStr(_) | Event::Args(_) | Event::LongStr(_)
        )
    }

    fn record(&mut self, event: Event, shared: &mut Shared<'_>) -> io::Result<()> {
        match event {
            Event::Span(span) => self.span(&span, &[], shared),
            Event::SpanStr(event) => {
                let len = (event.str_len as usize).min(event.string.len());
                let span = &event.span;
                let read = &event.string[..len];
                let string = if span.exit == EXIT_TAIL_CALL {
                    std::borrow::Cow::Borrowed(read)
                } else {
                    let probe = span.probe_id as usize;
                    self.values
                        .returned_string(shared.images, (probe, span.header.pid, span.ret), read)
                };
                self.span(span, &string, shared)
            }
            Event::Args(args) => {
                self.values.args(shared.images, &args);
                Ok(())
            }
            Event::LongStr(event) => {
                self.values.long_string(&event);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn seen(&mut self, images: &mut Images, pid: u32) {
        self.values.seen(images, pid);
    }

    fn summarize(&self, _ending: &Ending<'_>, sections: &mut Sections) {
        sections.args_unpaired += self.values.dropped();
        sections.unreadable_strings += self.values.unreadable_strings();
    }

    fn probe_row(&self, id: u32, _kind: ProbeKind, row: &mut ProbeRow) {
        row.values = self.values.summary_of(id as usize);
    }
}

impl FunctionsFamily {
    /// One span; `ret_str`, the string its return value points at (`-> str`; else empty).
    fn span(&mut self, span: &SpanEvent, ret_str: &[u8], shared: &mut Shared<'_>) -> io::Result<()> {
        let id = span.probe_id as usize;
        let duration = span.header.ts_ns.saturating_sub(span.start_ns);
        let site = shared.call_site(span, duration, None);
        let tail_call = span.exit == EXIT_TAIL_CALL;
        let ret = (!tail_call).then_some((span.ret, ret_str));
        let mut values = self.values.span(id, span.header.tid, span.start_ns, ret);
        if tail_call {
            // The span ends at the jump: the callee's time is not in it.
            values
                .get_or_insert_with(String::new)
                .push_str(",\"exit\":\"tail call\"");
        }
        if let Some(site) = site {
            values.get_or_insert_with(String::new).push_str(&site);
        }
        let values = values.map(String::into_boxed_str);
        shared.emit(SpanOut {
            probe: id,
            pid: span.header.pid,
            tid: span.header.tid,
            start_ns: span.start_ns,
            kind: EventKind::span(duration, span.depth.into()),
            values,
            ..Default::default()
        })
    }
}
