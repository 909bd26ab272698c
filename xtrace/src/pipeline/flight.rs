//! The flight recorder's buffer (`--flight`): the trace events the pipeline would hand the trace
//! writer go into a [`Window`] of [`Events`] slots instead, so that only the last stretch of a
//! capture is kept, in bounded memory, for as long as xtrace runs. A trigger takes the slots
//! ([`Flight::take`]); `session::flight` writes them out as a capture directory.
use super::{
    threads::Names,
    window::{AgedOut, Slot, Window},
    writer::SpanOut,
};

/// The slot length for a window of `window_ns`: a thousandth of it, from 1 ms to 1 s. The window
/// kept is then within a slot of the one asked for.
pub fn slot_ns(window_ns: u64) -> u64 {
    (window_ns / 1000).clamp(1_000_000, 1_000_000_000)
}

/// Parts of the byte cap a slot may hold before it is split: at a rate where one slot would
/// hold more than the cap, the cap still holds and the window shortens by small steps.
const SLOT_PARTS: usize = 64;

/// The heap a boxed string takes: its bytes rounded up to the allocator's 16, and the
/// allocator's own header; nothing when it is empty (no allocation).
fn boxed(text: &Option<Box<str>>) -> usize {
    match text {
        Some(text) if !text.is_empty() => text.len().div_ceil(16) * 16 + 16,
        _ => 0,
    }
}

/// One slot's trace events, in the order they came.
#[derive(Debug, Default)]
pub struct Events {
    spans: Vec<SpanOut>,
    /// The heap their strings take.
    heap: usize,
}

impl Events {
    pub fn push(&mut self, span: SpanOut) {
        self.heap += boxed(&span.values) + boxed(&span.name) + boxed(&span.cat);
        self.spans.push(span);
    }

    pub fn spans(&self) -> &[SpanOut] {
        &self.spans
    }
}

impl Slot for Events {
    fn bytes(&self) -> usize {
        // The vector's whole capacity: what it grew to is held, used or not.
        std::mem::size_of::<Self>() + self.spans.capacity() * std::mem::size_of::<SpanOut>() + self.heap
    }

    fn events(&self) -> u64 {
        self.spans.len() as u64
    }
}

/// What a trigger takes: the events kept, and what the directory says of its window.
#[derive(Debug)]
pub struct Taken {
    /// Oldest first, each slot with the time its stretch begins at.
    pub slots: Vec<(u64, Events)>,
    /// The bytes the slots hold.
    pub bytes: usize,
    /// The window asked for.
    pub window_ns: u64,
    /// The stretch the slots cover, up to the moment taken: the window, or less where the byte
    /// cap shortened it or the capture (or the stretch since the last trigger) is younger.
    pub kept_ns: u64,
    /// When they were taken (CLOCK_MONOTONIC ns).
    pub at_ns: u64,
    /// Events that fell out of the window since the last trigger.
    pub aged_out: AgedOut,
    /// The processes' and threads' names as known now.
    pub names: Names,
}

/// The buffer, and what it aged out before the last trigger.
#[derive(Debug)]
pub struct Flight {
    window: Window<Events>,
    /// What had aged out when the slots were last taken.
    aged_before: AgedOut,
}

impl Flight {
    /// The last `window_ns` of events, at most `cap_bytes`.
    pub fn new(window_ns: u64, cap_bytes: usize) -> Self {
        Flight {
            window: Window::new(slot_ns(window_ns), window_ns, cap_bytes)
                .split_at_bytes(cap_bytes / SLOT_PARTS),
            aged_before: AgedOut::default(),
        }
    }

    /// Keeps one event, in the slot of the time it ends (the order records come in).
    pub fn add(&mut self, span: SpanOut) {
        let end = span.start_ns.saturating_add(span.dur_ns());
        self.window.add(end, |slot| slot.push(span));
    }

    /// Ages out what the window no longer covers at `now_ns`, under a byte cap of `cap_bytes`
    /// (the whole cap less what snapshots still being written hold).
    pub fn advance(&mut self, now_ns: u64, cap_bytes: usize) {
        self.window.set_cap_bytes(cap_bytes);
        self.window.advance(now_ns);
    }

    /// The bytes the buffer holds.
    pub fn bytes(&self) -> usize {
        self.window.bytes()
    }

    /// Every event that fell out of the window since recording began.
    pub fn aged_out(&self) -> AgedOut {
        self.window.aged_out()
    }

    /// Takes every event kept at `now_ns`, leaving the buffer empty.
    pub fn take(&mut self, now_ns: u64, names: &Names) -> Taken {
        self.window.advance(now_ns);
        let kept_ns = self.window.kept_ns().min(self.window.span_ns());
        let bytes = self.window.bytes();
        let total = self.window.aged_out();
        let aged_out = AgedOut {
            events: total.events - self.aged_before.events,
            bytes: total.bytes - self.aged_before.bytes,
            slots: total.slots - self.aged_before.slots,
        };
        self.aged_before = total;
        Taken {
            slots: self.window.take(),
            bytes,
            window_ns: self.window.span_ns(),
            kept_ns,
            at_ns: now_ns,
            aged_out,
            names: names.clone(),
        }
    }
}

/// The flight recorder's side of a pipeline.
impl<W: std::io::Write + Send + 'static> super::Pipeline<W> {
    /// Keeps the trace events in `flight` from now on instead of writing them (`--flight`).
    pub fn keep_in_flight(&mut self, flight: Flight) {
        self.flight = Some(flight);
    }

    /// The flight recorder's buffer, with `--flight`.
    pub fn flight(&mut self) -> Option<&mut Flight> {
        self.flight.as_mut()
    }

    /// Takes what the flight recorder's buffer holds at `now_ns`, with the names known now.
    pub fn take_flight(&mut self, now_ns: u64) -> Option<Taken> {
        let names = &self.names;
        self.flight.as_mut().map(|f| f.take(now_ns, names))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::writer::EventKind;

    fn span(start_ns: u64, values: Option<&str>) -> SpanOut {
        SpanOut {
            start_ns,
            kind: EventKind::span(10, 0),
            values: values.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn slots_are_a_thousandth_of_the_window_within_bounds() {
        assert_eq!(slot_ns(10_000_000_000), 10_000_000);
        assert_eq!(slot_ns(100_000_000), 1_000_000);
        assert_eq!(slot_ns(1_000_000_000_000), 1_000_000_000);
    }

    #[test]
    fn bytes_count_the_capacity_and_the_strings() {
        let mut events = Events::default();
        events.push(span(0, Some("\"arg0\":1")));
        events.push(span(0, None));
        let inline = std::mem::size_of::<Events>() + events.spans.capacity() * std::mem::size_of::<SpanOut>();
        assert_eq!(events.bytes(), inline + 32);
        assert_eq!(events.events(), 2);
    }

    #[test]
    fn take_counts_what_aged_out_since_the_last_take() {
        // A window of 100 ms in slots of 1 ms.
        let mut flight = Flight::new(100_000_000, usize::MAX);
        flight.add(span(0, None));
        flight.add(span(1_000_000, None));
        flight.add(span(150_000_000, None));
        let first = flight.take(150_500_000, &Names::default());
        assert_eq!(first.aged_out.events, 2);
        assert_eq!(first.slots.iter().map(|(_, s)| s.spans().len()).sum::<usize>(), 1);
        assert_eq!(first.kept_ns, 1_000_000, "one slot, as the rest aged out");
        assert_eq!(flight.bytes(), 0);
        flight.add(span(160_000_000, None));
        let second = flight.take(200_000_000, &Names::default());
        assert_eq!(second.aged_out.events, 0);
        assert_eq!(
            second.slots.iter().map(|(_, s)| s.spans().len()).sum::<usize>(),
            1
        );
        assert_eq!(second.kept_ns, 41_000_000);
    }

    #[test]
    fn a_small_cap_shortens_the_window() {
        let mut flight = Flight::new(1_000_000_000, 1);
        for ms in 0..20 {
            flight.add(span(ms * 10_000_000, None));
        }
        let taken = flight.take(195_000_000, &Names::default());
        assert_eq!(taken.slots.len(), 1, "only the newest slot is kept past the cap");
        assert_eq!(
            taken.aged_out.events, 20,
            "the last span's slot went as the now's came"
        );
        assert_eq!(taken.kept_ns, 1_000_000);
    }

    #[test]
    fn a_rate_past_the_cap_keeps_the_newest_parts() {
        // 1 MB for a second of one-slot bursts of 10,000 spans: split into parts of 16 KB, the
        // newest within the cap are kept, and the slot of now is added without dropping them.
        let cap = 1 << 20;
        let mut flight = Flight::new(1_000_000_000, cap);
        for i in 0..10_000 {
            flight.add(span(100_000_000 + i, None));
        }
        flight.advance(100_500_000, cap);
        assert!(flight.bytes() <= cap, "{} bytes", flight.bytes());
        let taken = flight.take(100_600_000, &Names::default());
        let kept: usize = taken.slots.iter().map(|(_, s)| s.spans().len()).sum();
        assert!(kept > 1000, "{kept} kept");
        assert_eq!(kept as u64 + taken.aged_out.events, 10_000);
    }
}
