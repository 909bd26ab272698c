//! The pipeline's USDT hit records: a hit counted for its probe, then written as an instant, the
//! begin or end of a span, or a range's push or pop; hits while the probes are detached kept only
//! where they end what began before the stop; long string arguments (`str:N`) put in place.
use super::{
    ranges,
    usdt::{self, Hit},
    writer::{EventKind, SpanOut},
    Pipeline,
};

impl<W: std::io::Write + Send + 'static> Pipeline<W> {
    /// A USDT hit after the stop at `stop`, when it ends a span or a range begun before it (see
    /// [`Pipeline::stop_at`]); None for any other, which is left out.
    fn ends_after_stop(
        &mut self,
        event: &xtrace_common::event::UsdtEvent,
        strings: &[&[u8]],
        stop: u64,
    ) -> Option<Hit> {
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

    /// One USDT hit: counted for its probe, then written as an instant or a span.
    /// A long string argument (`str:N`), for the record of its call or hit that follows.
    pub(super) fn long_string(&mut self, event: &xtrace_common::event::LongStrEvent) {
        match self.usdt.owns(event.probe_id) {
            true => self.usdt.long_string(event),
            false => self.values.long_string(event),
        }
    }

    /// A USDT hit with strings, the long ones (`str:N`) sent before it in their place.
    pub(super) fn usdt_str(&mut self, event: &xtrace_common::event::UsdtStrEvent) -> std::io::Result<()> {
        let header = &event.event.header;
        let long = self.usdt.take_long(header.tid, header.ts_ns);
        let mut strings = usdt::strings(&event.str_len, &event.strings);
        for (arg, bytes) in &long {
            if let Some(string) = strings.get_mut(*arg) {
                *string = bytes;
            }
        }
        self.usdt_hit(&event.event, &strings)
    }

    pub(super) fn usdt_hit(
        &mut self,
        event: &xtrace_common::event::UsdtEvent,
        strings: &[&[u8]],
    ) -> std::io::Result<()> {
        let (pid, tid, ts_ns) = (event.header.pid, event.header.tid, event.header.ts_ns);
        let hit = match self.stopped_at.filter(|&stop| ts_ns > stop) {
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
                self.unknown_probe += 1;
                return Ok(());
            }
        };
        let Some(stats) = self.stats.get_mut(probe) else {
            self.unknown_probe += 1;
            return Ok(());
        };
        stats.add(0);
        self.names.saw(pid, tid);
        match hit {
            Hit::Instant { probe, args } => self.emit(SpanOut {
                probe: probe as usize,
                pid,
                tid,
                start_ns: ts_ns,
                values: Some(args.into_boxed_str()),
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
                let short = duration < self.min_duration_ns;
                if let Some(stats) = self.stats.get_mut(span as usize) {
                    stats.add(duration);
                    stats.short += u64::from(short);
                }
                if short {
                    return Ok(());
                }
                self.emit(SpanOut {
                    probe: span as usize,
                    pid,
                    tid,
                    start_ns,
                    kind: EventKind::span(duration, depth),
                    values: Some(args.into_boxed_str()),
                    name: name.map(String::into_boxed_str),
                    ..Default::default()
                })
            }
            Hit::Unpaired { .. } => {
                self.usdt_unpaired += 1;
                Ok(())
            }
            Hit::Range { probe, op, args } => match self.ranges.hit(probe, op, &args, (pid, tid, ts_ns)) {
                ranges::Output::Nothing => Ok(()),
                ranges::Output::Events(events) => {
                    for event in events {
                        self.names.saw(event.pid, event.tid);
                        self.emit(event)?;
                    }
                    Ok(())
                }
                ranges::Output::ThreadName { pid, tid, name } => {
                    self.names.given(pid, tid, name);
                    Ok(())
                }
            },
            Hit::Opened { .. } | Hit::Unknown => Ok(()),
        }
    }
}
