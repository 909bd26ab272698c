//! The USDT family (`-U`, and the tool library's `xtrace:*` range probes): a hit counted for its
//! probe, then written as an instant, the begin or end of a span, or a range's push or pop; hits
//! while the probes are detached kept only where they end what began before the stop; long string
//! arguments (`str:N`) put in place. Ranges are hits of USDT probes, decoded by the same table of
//! call sites and kept names, so they are this family's too; `pipeline::ranges` pairs them. In
//! summary.json, the halves left unpaired (`usdt_unpaired`, each pair's `open` and
//! `unmatched_ends`) and, with ranges asked for, the `ranges` section.
use std::io;

use xtrace_common::event::{UsdtEvent, UsdtStrEvent};

use super::{
    summary::{Ending, PairSummary, ProbeRow, Sections},
    Family, Shared,
};
use crate::pipeline::{
    decode::Event,
    ranges::{self, Ranges},
    usdt::{self, Hit, Usdt},
    writer::{EventKind, SpanOut},
};
use crate::probes::ProbeKind;

/// The USDT family's state.
pub struct UsdtFamily {
    /// The call sites and probes, and the spans open between a begin and an end probe.
    pub usdt: Usdt,
    /// The annotation ranges open and their statistics.
    pub ranges: Ranges,
    /// End probes that fired with no span of their pair open on their thread.
    pub unpaired: u64,
}

impl Family for UsdtFamily {
    fn owns(&self, event: &Event) -> bool {
        match event {
            Event::Usdt(_) | Event::UsdtStr(_) => true,
            Event::LongStr(event) => self.usdt.owns(event.probe_id),
            _ => false,
        }
    }

    fn record(&mut self, event: Event, shared: &mut Shared<'_>) -> io::Result<()> {
        match event {
            Event::Usdt(event) => self.hit(&event, &[], shared),
            Event::UsdtStr(event) => self.hit_with_strings(&event, shared),
            Event::LongStr(event) => {
                self.usdt.long_string(&event);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn summarize(&self, _ending: &Ending<'_>, sections: &mut Sections) {
        sections.usdt_unpaired += self.unpaired + self.usdt.still_open();
        sections.ranges = self.ranges.sections();
    }

    fn probe_row(&self, id: u32, kind: ProbeKind, row: &mut ProbeRow) {
        if kind == ProbeKind::UsdtSpan {
            let (open, unmatched_ends) = self.usdt.unpaired(id);
            row.pair = Some(PairSummary { open, unmatched_ends });
        }
    }
}

impl UsdtFamily {
    pub fn new(usdt: Usdt, ranges: Ranges) -> Self {
        UsdtFamily {
            usdt,
            ranges,
            unpaired: 0,
        }
    }

    /// A USDT hit after the stop at `stop`, when it ends a span or a range begun before it (see
    /// [`crate::pipeline::Pipeline::stop_at`]); None for any other, which is left out.
    fn ends_after_stop(&mut self, event: &UsdtEvent, strings: &[&[u8]], stop: u64) -> Option<Hit> {
        if self.usdt.ends_open(event) {
            return Some(self.usdt.hit(event, strings));
        }
        let hit = self.usdt.range(event, strings)?;
        let (pid, tid) = (event.header.pid, event.header.tid);
        match &hit {
            Hit::Range { op, args, .. } if self.ranges.ends_open(*op, args, (pid, tid), stop) => Some(hit),
            _ => None,
        }
    }

    /// A USDT hit with strings, the long ones (`str:N`) sent before it in their place.
    fn hit_with_strings(&mut self, event: &UsdtStrEvent, shared: &mut Shared<'_>) -> io::Result<()> {
        let header = &event.event.header;
        let long = self.usdt.take_long(header.tid, header.ts_ns);
        let mut strings = usdt::strings(&event.str_len, &event.strings);
        for (arg, bytes) in &long {
            if let Some(string) = strings.get_mut(*arg) {
                *string = bytes;
            }
        }
        self.hit(&event.event, &strings, shared)
    }

    /// One USDT hit: counted for its probe, then written as an instant or a span.
    fn hit(&mut self, event: &UsdtEvent, strings: &[&[u8]], shared: &mut Shared<'_>) -> io::Result<()> {
        let (pid, tid, ts_ns) = (event.header.pid, event.header.tid, event.header.ts_ns);
        let hit = match shared.window.stopped_at.filter(|&stop| ts_ns > stop) {
            None => self.usdt.hit(event, strings),
            Some(stop) => match self.ends_after_stop(event, strings, stop) {
                Some(hit) => hit,
                None => return Ok(()),
            },
        };
        let probe = match &hit {
            Hit::Instant { probe, .. }
            | Hit::Opened { probe }
            | Hit::Closed { probe, .. }
            | Hit::Unpaired { probe }
            | Hit::Range { probe, .. } => *probe as usize,
            Hit::Unknown => {
                *shared.unknown_probe += 1;
                return Ok(());
            }
        };
        let Some(stats) = shared.stats.get_mut(probe) else {
            *shared.unknown_probe += 1;
            return Ok(());
        };
        stats.add(0);
        shared.names.saw(pid, tid);
        let site = self.call_site(&hit, (tid, ts_ns), shared);
        self.write(hit, (pid, tid, ts_ns), site, shared)
    }

    /// With `--stacks`: the call site of `hit` of thread `tid` at `ts_ns` (an instant's, a
    /// begin's, or for an end that closes a span its begin's, whose time is added to it), as
    /// trace.json `args` members (`,"site":"main (x.py:12)"`).
    fn call_site(&self, hit: &Hit, (tid, ts_ns): (u32, u64), shared: &mut Shared<'_>) -> Option<String> {
        let sites = shared.call_sites.as_deref_mut()?;
        let site = match *hit {
            Hit::Instant { probe, .. } => sites.usdt_hit(tid, probe, None, ts_ns),
            Hit::Opened { probe } => sites.usdt_hit(tid, probe, self.usdt.span_of(probe), ts_ns),
            Hit::Closed { span, start_ns, .. } => {
                sites.usdt_closed(tid, span, start_ns, ts_ns.saturating_sub(start_ns))
            }
            _ => None,
        }?;
        Some(format!(
            ",\"site\":{}",
            serde_json::to_string(site).unwrap_or_default()
        ))
    }

    /// What a counted hit of thread (pid, tid) at `ts_ns` writes.
    fn write(
        &mut self,
        hit: Hit,
        (pid, tid, ts_ns): (u32, u32, u64),
        site: Option<String>,
        shared: &mut Shared<'_>,
    ) -> io::Result<()> {
        match hit {
            Hit::Instant { probe, args } => shared.emit(SpanOut {
                probe: probe as usize,
                pid,
                tid,
                start_ns: ts_ns,
                values: Some((args + site.as_deref().unwrap_or("")).into_boxed_str()),
                kind: EventKind::INSTANT,
                ..Default::default()
            }),
            Hit::Closed {
                span,
                start_ns,
                depth,
                name,
                args,
                ..
            } => {
                let duration = ts_ns.saturating_sub(start_ns);
                let short = duration < shared.min_duration_ns;
                if let Some(stats) = shared.stats.get_mut(span as usize) {
                    stats.add(duration);
                    stats.short += u64::from(short);
                }
                if short {
                    return Ok(());
                }
                shared.emit(SpanOut {
                    probe: span as usize,
                    pid,
                    tid,
                    start_ns,
                    kind: EventKind::span(duration, depth),
                    values: Some((args + site.as_deref().unwrap_or("")).into_boxed_str()),
                    name: name.map(String::into_boxed_str),
                    ..Default::default()
                })
            }
            Hit::Unpaired { .. } => {
                self.unpaired += 1;
                Ok(())
            }
            Hit::Range { probe, op, args } => match self.ranges.hit(probe, op, &args, (pid, tid, ts_ns)) {
                ranges::Output::Nothing => Ok(()),
                ranges::Output::Events(events) => {
                    for event in events {
                        shared.names.saw(event.pid, event.tid);
                        shared.emit(event)?;
                    }
                    Ok(())
                }
                ranges::Output::ThreadName { pid, tid, name } => {
                    shared.names.given(pid, tid, name);
                    Ok(())
                }
            },
            Hit::Opened { .. } | Hit::Unknown => Ok(()),
        }
    }
}
