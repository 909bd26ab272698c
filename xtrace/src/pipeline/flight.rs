//! The flight recorder's buffer (`--flight`): the trace events the pipeline would hand the trace
//! writer, the CPU samples with their stacks (`flight_stacks`) and the off-CPU waits
//! (`flight_offcpu`), go into a [`Window`] of [`Events`] slots instead, so that only the last
//! stretch of a capture is kept, in bounded memory, for as long as xtrace runs. The samples' and
//! the waits' distinct stacks are held once, beside the slots, and counted in the same byte cap. A trigger takes the slots and the stacks they refer
//! to ([`Flight::take`]); `session::flight` writes them out as a capture directory.
use std::sync::Arc;

use super::{
    flight_offcpu::{AddedUpReads, FlightAddedUp, FlightWait, KeptWait},
    flight_stacks::{heap, FlightSample, Stacks},
    samples::StackKey,
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

/// The heap a boxed string takes ([`heap`]).
fn boxed(text: &Option<Box<str>>) -> usize {
    text.as_ref().map_or(0, |text| heap(text.len()))
}

/// One slot's trace events, CPU samples and off-CPU waits, each in the order they came.
#[derive(Debug, Default)]
pub struct Events {
    spans: Vec<SpanOut>,
    /// The heap their strings take.
    heap: usize,
    samples: Vec<FlightSample>,
    /// Samples whose user stack is missing its outermost frames.
    truncated: u64,
    /// Waits of at least MIN, sent one by one.
    waits: Vec<KeptWait>,
    /// What the kernel's added-up waits gained between two reads of its table.
    added_up: Vec<FlightAddedUp>,
}

impl Events {
    pub fn push(&mut self, span: SpanOut) {
        self.heap += boxed(&span.values) + boxed(&span.name) + boxed(&span.cat);
        self.spans.push(span);
    }

    /// Keeps a sample; `truncated`: its user stack is missing its outermost frames.
    pub fn push_sample(&mut self, sample: FlightSample, truncated: bool) {
        self.truncated += u64::from(truncated);
        self.samples.push(sample);
    }

    pub fn spans(&self) -> &[SpanOut] {
        &self.spans
    }

    pub fn samples(&self) -> &[FlightSample] {
        &self.samples
    }

    /// Of its samples, those whose user stack is missing its outermost frames.
    pub fn truncated(&self) -> u64 {
        self.truncated
    }

    /// Gives up its samples (once they are written elsewhere), freeing what they hold.
    pub fn drop_samples(&mut self) {
        self.samples = Vec::new();
    }

    pub fn waits(&self) -> &[KeptWait] {
        &self.waits
    }

    pub fn added_up(&self) -> &[FlightAddedUp] {
        &self.added_up
    }

    /// Gives up its off-CPU waits (once they are counted elsewhere), freeing what they hold.
    pub fn drop_waits(&mut self) {
        self.waits = Vec::new();
        self.added_up = Vec::new();
    }
}

impl Slot for Events {
    fn bytes(&self) -> usize {
        // The vectors' whole capacity: what they grew to is held, used or not.
        std::mem::size_of::<Self>()
            + self.spans.capacity() * std::mem::size_of::<SpanOut>()
            + self.heap
            + self.samples.capacity() * std::mem::size_of::<FlightSample>()
            + self.waits.capacity() * std::mem::size_of::<KeptWait>()
            + self.added_up.capacity() * std::mem::size_of::<FlightAddedUp>()
    }

    /// Its trace events and samples: a wait sent on its own is on the timeline as events
    /// already, and the added-up waits are counts.
    fn events(&self) -> u64 {
        (self.spans.len() + self.samples.len()) as u64
    }
}

/// What a trigger takes: the events kept, and what the directory says of its window.
#[derive(Debug)]
pub struct Taken {
    /// Oldest first, each slot with the time its stretch begins at.
    pub slots: Vec<(u64, Events)>,
    /// The stacks the slots' samples refer to.
    pub stacks: Stacks,
    /// The bytes the slots and the stacks hold.
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

/// The buffer, the stacks its samples refer to, and what it aged out before the last trigger.
#[derive(Debug)]
pub struct Flight {
    window: Window<Events>,
    stacks: Stacks,
    /// The bytes slots and stacks may hold together; the slots get what the stacks leave.
    cap_bytes: usize,
    /// The slots aged out when the stacks were last pruned.
    pruned_at: u64,
    /// The bytes of the stacks interned since the newest slot was last split: past a slot's
    /// part of the cap it is split, so that no slot brings in more stacks than a part.
    fresh: usize,
    /// What had aged out when the slots were last taken.
    aged_before: AgedOut,
    /// With `--off-cpu`: the kernel's table of added-up waits as last read.
    pub(super) reads: AddedUpReads,
}

impl Flight {
    /// The last `window_ns` of events, at most `cap_bytes`.
    pub fn new(window_ns: u64, cap_bytes: usize) -> Self {
        Flight {
            window: Window::new(slot_ns(window_ns), window_ns, cap_bytes)
                .split_at_bytes(cap_bytes / SLOT_PARTS),
            stacks: Stacks::default(),
            cap_bytes,
            pruned_at: 0,
            fresh: 0,
            aged_before: AgedOut::default(),
            reads: AddedUpReads::default(),
        }
    }

    /// Keeps one event, in the slot of the time it ends (the order records come in).
    pub fn add(&mut self, span: SpanOut) {
        let end = span.start_ns.saturating_add(span.dur_ns());
        self.window.add(end, |slot| slot.push(span));
    }

    /// Keeps one CPU sample of thread `tid` of `pid` at `ts_ns`, with its stack `key` (held once
    /// for all the samples of the window that share it); `truncated`: its user stack is missing
    /// its outermost frames.
    pub fn add_sample(&mut self, (ts_ns, pid, tid): (u64, u32, u32), key: StackKey, truncated: bool) {
        let stack = self.intern(key);
        let sample = FlightSample {
            ts_ns,
            pid,
            tid,
            stack,
        };
        self.window.add(ts_ns, |slot| slot.push_sample(sample, truncated));
        self.prune_if_heavy();
    }

    /// Keeps an off-CPU wait sent on its own, in the slot of the time its thread returned from
    /// it, with its stack as counted (held once for the whole window).
    pub fn add_wait(&mut self, wait: FlightWait, stack: Option<StackKey>) {
        let stack = stack.map(|key| self.intern(key));
        let ts_ns = wait.ts_ns;
        self.window
            .add(ts_ns, |slot| slot.waits.push(KeptWait { wait, stack }));
        self.prune_if_heavy();
    }

    /// Keeps what the kernel's added-up waits of one key gained since its table was last read,
    /// in the slot of the read, with their stack.
    pub fn add_added_up(&mut self, mut added: FlightAddedUp, stack: Option<StackKey>) {
        added.stack = stack.map(|key| self.intern(key));
        let ts_ns = added.ts_ns;
        self.window.add(ts_ns, |slot| slot.added_up.push(added));
        self.prune_if_heavy();
    }

    /// The stack `key` as the window holds it, once for all that refer to it. New stacks that
    /// weigh a slot's part of the cap split the newest slot, so that no slot brings in more.
    fn intern(&mut self, key: StackKey) -> Arc<StackKey> {
        let before = self.stacks.bytes();
        let stack = self.stacks.intern(key);
        if self.stacks.bytes() != before {
            self.fresh += self.stacks.bytes().saturating_sub(before);
            if self.fresh >= self.cap_bytes / SLOT_PARTS {
                self.fresh = 0;
                self.window.split();
            }
            self.window.set_cap_bytes(self.slots_cap());
        }
        stack
    }

    /// Stacks that aged out are dropped at the next pass (`advance`), unless they weigh on the
    /// cap: then now, so that they never push out the slots.
    fn prune_if_heavy(&mut self) {
        if self.stacks.bytes() > self.cap_bytes / 2 {
            self.prune();
        }
    }

    /// The bytes the slots may hold: the cap less the stacks' and the copy of the kernel's
    /// table of added-up waits.
    pub(super) fn slots_cap(&self) -> usize {
        self.cap_bytes
            .saturating_sub(self.stacks.bytes())
            .saturating_sub(self.reads.bytes())
    }

    /// Applies a change of what the slots may hold (the copy of the kernel's table grew).
    pub(super) fn recap(&mut self) {
        self.window.set_cap_bytes(self.slots_cap());
    }

    /// Drops the stacks no sample refers to since slots aged out.
    fn prune(&mut self) {
        let aged = self.window.aged_out().slots;
        if aged != self.pruned_at {
            self.pruned_at = aged;
            self.stacks.prune();
            self.window.set_cap_bytes(self.slots_cap());
        }
    }

    /// Ages out what the window no longer covers at `now_ns`, under a byte cap of `cap_bytes`
    /// (the whole cap less what snapshots still being written hold), and drops the stacks only
    /// the slots that aged out referred to.
    pub fn advance(&mut self, now_ns: u64, cap_bytes: usize) {
        self.cap_bytes = cap_bytes;
        self.window.set_cap_bytes(self.slots_cap());
        self.window.advance(now_ns);
        self.prune();
    }

    /// The bytes the buffer holds: its slots, the stacks their samples and waits refer to, and
    /// the copy of the kernel's table of added-up waits.
    pub fn bytes(&self) -> usize {
        self.window.bytes() + self.stacks.bytes() + self.reads.bytes()
    }

    /// Every event that fell out of the window since recording began.
    pub fn aged_out(&self) -> AgedOut {
        self.window.aged_out()
    }

    /// Takes every event kept at `now_ns`, and the stacks their samples refer to, leaving the
    /// buffer empty.
    pub fn take(&mut self, now_ns: u64, names: &Names) -> Taken {
        self.window.advance(now_ns);
        let kept_ns = self.window.kept_ns().min(self.window.span_ns());
        let slots_bytes = self.window.bytes();
        let total = self.window.aged_out();
        let aged_out = AgedOut {
            events: total.events - self.aged_before.events,
            bytes: total.bytes - self.aged_before.bytes,
            slots: total.slots - self.aged_before.slots,
        };
        self.aged_before = total;
        let slots = self.window.take();
        // Those that aged out before: the rest are the taken samples'.
        self.stacks.prune();
        self.pruned_at = total.slots;
        let stacks = std::mem::take(&mut self.stacks);
        self.window.set_cap_bytes(self.slots_cap());
        Taken {
            bytes: slots_bytes + stacks.bytes(),
            slots,
            stacks,
            window_ns: self.window.span_ns(),
            kept_ns,
            at_ns: now_ns,
            aged_out,
            names: names.clone(),
        }
    }
}

/// What naming the stacks of a flight window takes, lent by the pipeline at a trigger.
pub struct SampleNaming<'a> {
    /// The processes' images the stacks were taken in.
    pub images: &'a mut crate::image::Images,
    pub python: &'a crate::python::Python,
    pub bpf: Option<&'a super::bpf_symbols::BpfSymbols>,
    /// Instructions the verifier processed to load the sampling program.
    pub verified_insns: Option<u32>,
}

/// The flight recorder's side of a pipeline.
impl<W: std::io::Write + Send + 'static> super::Pipeline<W> {
    /// Keeps the trace events and the CPU samples in `flight` from now on instead of writing
    /// them or counting their stacks for the whole run (`--flight`).
    pub fn keep_in_flight(&mut self, flight: Flight) {
        self.families.sampling.samples.windowed = true;
        self.flight = Some(flight);
    }

    /// What naming the stacks of a window taken with [`Self::take_flight`] needs.
    pub fn sample_naming(&mut self) -> SampleNaming<'_> {
        SampleNaming {
            images: &mut self.images,
            python: &self.python,
            bpf: self.families.sampling.samples.bpf.as_ref(),
            verified_insns: self.families.sampling.samples.verified_insns,
        }
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
    use std::sync::Arc;

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

    /// A stack of `depth` user frames from `first` on.
    fn stack(first: u64, depth: u64) -> StackKey {
        StackKey {
            pid: 1,
            image: 0,
            mapped: 0,
            kernel: Box::new([]),
            user: (first..first + depth).collect(),
            python: Box::new([]),
        }
    }

    #[test]
    fn samples_are_kept_per_slot_and_their_stacks_once() {
        // Slots of 1 ms.
        let mut flight = Flight::new(1_000_000_000, 64 << 20);
        flight.add_sample((100_000_000, 1, 1), stack(1, 3), false);
        flight.add_sample((100_500_000, 1, 2), stack(1, 3), true);
        flight.add(span(101_000_000, None));
        flight.add_sample((102_000_000, 1, 1), stack(1, 5), false);
        // With the empty slot of now that taking it adds.
        let held = flight.bytes() + std::mem::size_of::<Events>();
        let taken = flight.take(103_000_000, &Names::default());
        let per_slot: Vec<(u64, usize, usize, u64)> = taken
            .slots
            .iter()
            .map(|(at, s)| (*at, s.spans().len(), s.samples().len(), s.truncated()))
            .collect();
        assert_eq!(
            per_slot,
            [
                (100_000_000, 0, 2, 1),
                (101_000_000, 1, 0, 0),
                (102_000_000, 0, 1, 0),
                (103_000_000, 0, 0, 0)
            ]
        );
        let first = taken.slots[0].1.samples();
        assert!(
            Arc::ptr_eq(&first[0].stack, &first[1].stack),
            "one stack, held once"
        );
        assert_eq!(taken.stacks.len(), 2);
        let slots: usize = taken.slots.iter().map(|(_, s)| s.bytes()).sum();
        assert_eq!(taken.bytes, slots + taken.stacks.bytes());
        assert_eq!(taken.bytes, held);
        assert_eq!(flight.bytes(), 0, "the stacks went with the slots");
    }

    #[test]
    fn stacks_go_with_the_last_slot_that_refers_to_them() {
        // A window of 100 ms in slots of 1 ms.
        let cap = 64 << 20;
        let mut flight = Flight::new(100_000_000, cap);
        flight.add_sample((0, 1, 1), stack(1, 10), false);
        flight.add_sample((50_000_000, 1, 1), stack(100, 20), false);
        flight.add_sample((120_000_000, 1, 1), stack(100, 20), false);
        assert_eq!(flight.stacks.len(), 2);
        let before = flight.bytes();
        flight.advance(120_000_000, cap);
        assert_eq!(flight.stacks.len(), 1, "the first slot aged out, and its stack");
        assert!(flight.bytes() < before);
        flight.advance(200_000_000, cap);
        assert_eq!(flight.stacks.len(), 1, "the last sample still refers to it");
        flight.advance(300_000_000, cap);
        assert!(flight.stacks.is_empty());
        assert_eq!(flight.aged_out().events, 3);
        assert_eq!(
            flight.bytes(),
            std::mem::size_of::<Events>(),
            "the empty slot of now"
        );
    }

    #[test]
    fn samples_and_their_stacks_stay_within_the_cap() {
        // 1 MB for a window of 1000 s (slots of 1 s): 100 samples a second, each with a stack of
        // its own of 64 frames (624 bytes with its Arc), for 500 s: the window shortens, every
        // sample kept or counted.
        let cap = 1 << 20;
        let mut flight = Flight::new(1_000_000_000_000, cap);
        let n = 50_000u64;
        for i in 0..n {
            let ts = 1_000_000_000 + i * 10_000_000;
            flight.add_sample((ts, 1, 1), stack(i, 64), false);
            assert!(
                flight.bytes() <= cap,
                "{} bytes after {i}: {} in {} slots, {} in {} stacks",
                flight.bytes(),
                flight.window.bytes(),
                flight.window.slots().count(),
                flight.stacks.bytes(),
                flight.stacks.len()
            );
            if i % 100 == 99 {
                flight.advance(ts, cap);
            }
        }
        let taken = flight.take(1_000_000_000 + n * 10_000_000, &Names::default());
        let kept: u64 = taken.slots.iter().map(|(_, s)| s.samples().len() as u64).sum();
        assert!(kept > 1000, "{kept} kept");
        assert_eq!(kept + taken.aged_out.events, n);
        assert_eq!(
            taken.stacks.len() as u64,
            kept,
            "only the kept samples' stacks are held"
        );
        assert!(taken.bytes <= cap);
        assert!(taken.kept_ns < 100_000_000_000, "{}", taken.kept_ns);
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
        let stack = Arc::new(stack(0, 1));
        events.push_sample(
            FlightSample {
                ts_ns: 0,
                pid: 1,
                tid: 1,
                stack,
            },
            false,
        );
        let samples = events.samples.capacity() * std::mem::size_of::<FlightSample>();
        assert_eq!(std::mem::size_of::<FlightSample>(), 24);
        assert_eq!(
            events.bytes(),
            inline + 32 + samples,
            "the stack is counted apart"
        );
        assert_eq!(events.events(), 3);
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
