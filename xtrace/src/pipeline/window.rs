//! The one bounded buffer of recent events: a ring of time slots that keeps the last stretch of a
//! capture, bounded both in time (the window asked for) and in bytes (a hard cap on memory). The
//! flight recorder keeps its events in one; the live view keeps its per-second probe histograms
//! and folded-stack deltas in others. When the rate would need more bytes than the cap, the oldest
//! slots go first and the window that is really kept shortens (`kept_ns`); what fell out is
//! counted as aged out, never as lost.
use std::collections::VecDeque;

/// What one slot holds, and what it weighs.
pub trait Slot: Default {
    /// The bytes it holds (its heap and inline size, as near as it can say); read after every
    /// change, so it must be cheap.
    fn bytes(&self) -> usize;
    /// The events it holds, for the count of those that aged out.
    fn events(&self) -> u64;
}

/// What fell out of a window: by age or, when the rate outgrew the byte cap, by size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AgedOut {
    pub events: u64,
    pub bytes: u64,
    pub slots: u64,
}

/// The last `span_ns` of a capture in slots of `slot_ns`, at most `cap_bytes` in all.
#[derive(Debug)]
pub struct Window<T: Slot> {
    slot_ns: u64,
    span_ns: u64,
    cap_bytes: usize,
    /// The bytes past which the newest slot is split: a new slot for the same stretch begins.
    slot_cap_bytes: usize,
    /// Oldest first: each slot with the index of its stretch (`ts_ns / slot_ns`).
    slots: VecDeque<(u64, T)>,
    bytes: usize,
    aged_out: AgedOut,
    /// The newest slot is split before the next event of its stretch ([`Window::split`]).
    split: bool,
}

impl<T: Slot> Window<T> {
    /// A window of the last `span_ns` (at least one slot) in slots of `slot_ns` (at least 1 ns),
    /// holding at most `cap_bytes`, though never fewer than its newest slot.
    pub fn new(slot_ns: u64, span_ns: u64, cap_bytes: usize) -> Self {
        let slot_ns = slot_ns.max(1);
        Window {
            slot_ns,
            span_ns: span_ns.max(slot_ns),
            cap_bytes,
            slot_cap_bytes: usize::MAX,
            slots: VecDeque::new(),
            bytes: 0,
            aged_out: AgedOut::default(),
            split: false,
        }
    }

    /// Splits the newest slot once it holds `bytes`: the events that follow in the same stretch
    /// go to a new slot of that stretch. At a rate where one slot would weigh more than the whole
    /// cap, the cap still holds, and the window shortens by parts of a slot.
    pub fn split_at_bytes(mut self, bytes: usize) -> Self {
        self.slot_cap_bytes = bytes.max(1);
        self
    }

    /// Changes the slot of the stretch `ts_ns` falls in with `change`, making it if needed. A time
    /// older than the oldest slot kept goes to the oldest slot; one older than the newest slot,
    /// to its own slot where it is kept (records arrive a little out of order across CPUs). Older
    /// slots then age out as the window asks.
    pub fn add<R>(&mut self, ts_ns: u64, change: impl FnOnce(&mut T) -> R) -> R {
        let index = ts_ns / self.slot_ns;
        let newest = self
            .slots
            .back()
            .map(|(i, slot)| (*i, self.split || slot.bytes() >= self.slot_cap_bytes));
        let (at, fresh) = match newest {
            // The newest slot is full: its stretch goes on in a new one.
            Some((newest, true)) if index == newest => (self.push(index), true),
            Some((newest, _)) if index <= newest => {
                // Slots are consecutive indices with gaps where nothing came: search from the back.
                let found = self.slots.iter().rposition(|&(i, _)| i <= index).unwrap_or(0);
                // A full older slot (the newest far ahead: a record on another clock) is not
                // grown past its cap: the event goes to a new newest slot, so the byte cap holds.
                match self.slots[found].1.bytes() >= self.slot_cap_bytes {
                    true => (self.push(newest), true),
                    false => (found, false),
                }
            }
            _ => (self.push(index), true),
        };
        let slot = &mut self.slots[at].1;
        // A new slot's own bytes are counted too.
        let before = if fresh { 0 } else { slot.bytes() };
        let result = change(slot);
        let after = slot.bytes();
        self.bytes = (self.bytes + after).saturating_sub(before);
        self.age();
        result
    }

    /// Makes the next event of the newest slot's stretch begin a new slot, as if it were full:
    /// for what a slot holds outside its own bytes (the flight recorder's stacks).
    pub fn split(&mut self) {
        self.split = !self.slots.is_empty();
    }

    /// Adds an empty slot for stretch `index`, newest; returns its place.
    fn push(&mut self, index: u64) -> usize {
        self.split = false;
        self.slots.push_back((index, T::default()));
        self.slots.len() - 1
    }

    /// Drops the slots that fall outside the window's time or past its byte cap, oldest first;
    /// the newest slot always stays.
    fn age(&mut self) {
        let Some(&(newest, _)) = self.slots.back() else {
            return;
        };
        let first_kept = (newest + 1).saturating_sub(self.span_ns / self.slot_ns);
        while self.slots.len() > 1 {
            let (oldest, slot) = &self.slots[0];
            if *oldest >= first_kept && self.bytes <= self.cap_bytes {
                break;
            }
            let (bytes, events) = (slot.bytes(), slot.events());
            self.bytes -= bytes.min(self.bytes);
            self.aged_out.events += events;
            self.aged_out.bytes += bytes as u64;
            self.aged_out.slots += 1;
            self.slots.pop_front();
        }
    }

    /// Ages out what the window no longer covers at `now_ns`, when nothing was added since.
    pub fn advance(&mut self, now_ns: u64) {
        let index = now_ns / self.slot_ns;
        if self.slots.back().is_none_or(|&(newest, _)| newest < index) {
            let at = self.push(index);
            self.bytes += self.slots[at].1.bytes();
        }
        self.age();
    }

    /// The slots kept, oldest first, with the time each stretch begins at.
    pub fn slots(&self) -> impl DoubleEndedIterator<Item = (u64, &T)> + '_ {
        self.slots.iter().map(|(i, s)| (i * self.slot_ns, s))
    }

    /// The slots whose stretch ends after `ns`, oldest first.
    pub fn since(&self, ns: u64) -> impl DoubleEndedIterator<Item = (u64, &T)> + '_ {
        let slot_ns = self.slot_ns;
        self.slots().filter(move |&(start, _)| start + slot_ns > ns)
    }

    /// The stretch of time the slots kept cover, from the oldest's start to the newest's end: the
    /// window asked for, or less where the byte cap or the capture's age made it shorter.
    pub fn kept_ns(&self) -> u64 {
        match (self.slots.front(), self.slots.back()) {
            (Some(&(oldest, _)), Some(&(newest, _))) => (newest + 1 - oldest) * self.slot_ns,
            _ => 0,
        }
    }

    /// The window asked for.
    pub fn span_ns(&self) -> u64 {
        self.span_ns
    }

    /// Changes the byte cap (what else holds memory the cap covers came or went), ageing out
    /// at once what no longer fits.
    pub fn set_cap_bytes(&mut self, cap_bytes: usize) {
        self.cap_bytes = cap_bytes;
        self.age();
    }

    /// The bytes the slots kept hold.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// What fell out of the window since it was made.
    pub fn aged_out(&self) -> AgedOut {
        self.aged_out
    }

    /// Empties it, counting nothing as aged out (the slots were taken, not lost).
    pub fn take(&mut self) -> Vec<(u64, T)> {
        self.bytes = 0;
        let slot_ns = self.slot_ns;
        self.slots.drain(..).map(|(i, s)| (i * slot_ns, s)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot of events of 10 bytes each.
    #[derive(Debug, Default)]
    struct Tens(Vec<u64>);

    impl Slot for Tens {
        fn bytes(&self) -> usize {
            self.0.len() * 10
        }
        fn events(&self) -> u64 {
            self.0.len() as u64
        }
    }

    fn times(window: &Window<Tens>) -> Vec<u64> {
        window.slots().flat_map(|(_, s)| s.0.iter().copied()).collect()
    }

    #[test]
    fn keeps_the_last_span_of_time() {
        // Slots of 100 ns, a window of 300 ns: four slots' events in, the first slot's out.
        let mut window = Window::new(100, 300, usize::MAX);
        for ts in [10, 20, 150, 250, 320, 399] {
            window.add(ts, |s: &mut Tens| s.0.push(ts));
        }
        assert_eq!(times(&window), [150, 250, 320, 399]);
        assert_eq!(window.kept_ns(), 300);
        assert_eq!(
            window.aged_out(),
            AgedOut {
                events: 2,
                bytes: 20,
                slots: 1
            }
        );
        assert_eq!(window.bytes(), 40);
    }

    #[test]
    fn a_rate_past_the_cap_shortens_the_window() {
        // 50 bytes at most: five events. Slots of 10 ns, a window of 1000 ns.
        let mut window = Window::new(10, 1000, 50);
        for ts in 0..8u64 {
            window.add(ts * 10, |s: &mut Tens| s.0.push(ts));
        }
        assert_eq!(times(&window), [3, 4, 5, 6, 7]);
        assert_eq!(window.kept_ns(), 50);
        assert_eq!(window.aged_out().events, 3);
        assert!(window.bytes() <= 50);
    }

    #[test]
    fn the_newest_slot_stays_even_past_the_cap() {
        let mut window = Window::new(1000, 1000, 15);
        for ts in 0..4 {
            window.add(ts, |s: &mut Tens| s.0.push(ts));
        }
        assert_eq!(times(&window), [0, 1, 2, 3]);
        window.add(1000, |s: &mut Tens| s.0.push(1000));
        assert_eq!(times(&window), [1000]);
        assert_eq!(window.aged_out().events, 4);
    }

    #[test]
    fn late_records_go_to_their_own_slot_or_the_oldest() {
        let mut window = Window::new(100, 1000, usize::MAX);
        window.add(250, |s: &mut Tens| s.0.push(250));
        window.add(450, |s: &mut Tens| s.0.push(450));
        window.add(260, |s: &mut Tens| s.0.push(260));
        // 350's stretch has no slot: it joins the newest slot at or before it, 250's.
        window.add(350, |s: &mut Tens| s.0.push(350));
        window.add(10, |s: &mut Tens| s.0.push(10));
        let slots: Vec<(u64, Vec<u64>)> = window.slots().map(|(t, s)| (t, s.0.clone())).collect();
        assert_eq!(slots, [(200, vec![250, 260, 350, 10]), (400, vec![450])]);
    }

    #[test]
    fn advancing_ages_out_without_adding() {
        let mut window = Window::new(100, 200, usize::MAX);
        window.add(0, |s: &mut Tens| s.0.push(0));
        window.add(150, |s: &mut Tens| s.0.push(150));
        window.advance(1000);
        assert!(times(&window).is_empty());
        assert_eq!(window.aged_out().events, 2);
        assert_eq!(window.since(0).count(), 1, "the empty slot of now is kept");
    }

    #[test]
    fn a_full_slot_is_split_so_the_cap_holds() {
        // One stretch of 1000 ns, 30 bytes a slot at most, 50 in all.
        let mut window = Window::new(1000, 1000, 50).split_at_bytes(30);
        for ts in 0..8 {
            window.add(ts, |s: &mut Tens| s.0.push(ts));
        }
        let slots: Vec<(u64, Vec<u64>)> = window.slots().map(|(t, s)| (t, s.0.clone())).collect();
        assert_eq!(slots, [(0, vec![3, 4, 5]), (0, vec![6, 7])]);
        assert_eq!(window.aged_out().events, 3);
        assert_eq!(window.kept_ns(), 1000);
        // A late record of the stretch joins the newest part, and the oldest part goes.
        window.add(1, |s: &mut Tens| s.0.push(1));
        assert_eq!(times(&window), [6, 7, 1]);
        assert_eq!(window.aged_out().events, 6);
    }

    #[test]
    fn a_split_begins_a_new_slot_of_the_same_stretch() {
        let mut window = Window::new(1000, 1000, usize::MAX);
        window.add(1, |s: &mut Tens| s.0.push(1));
        window.split();
        window.add(2, |s: &mut Tens| s.0.push(2));
        window.add(3, |s: &mut Tens| s.0.push(3));
        let slots: Vec<(u64, Vec<u64>)> = window.slots().map(|(t, s)| (t, s.0.clone())).collect();
        assert_eq!(slots, [(0, vec![1]), (0, vec![2, 3])]);
    }

    #[test]
    fn a_lower_cap_ages_out_at_once() {
        let mut window = Window::new(10, 1000, usize::MAX);
        for ts in 0..5u64 {
            window.add(ts * 10, |s: &mut Tens| s.0.push(ts));
        }
        window.set_cap_bytes(20);
        assert_eq!(times(&window), [3, 4]);
        assert_eq!(window.aged_out().events, 3);
        assert_eq!(window.bytes(), 20);
    }

    #[test]
    fn a_newest_slot_far_ahead_does_not_let_the_cap_go() {
        // 50 bytes at most, slots split at 20: one event far in the future, then many old ones.
        let mut window = Window::new(10, 1000, 50).split_at_bytes(20);
        window.add(1_000_000, |s: &mut Tens| s.0.push(1_000_000));
        for ts in 0..100u64 {
            window.add(ts, |s: &mut Tens| s.0.push(ts));
            assert!(window.bytes() <= 50 + 20, "{} bytes after {ts}", window.bytes());
        }
        assert_eq!(window.aged_out().events + times(&window).len() as u64, 101);
    }

    #[test]
    fn since_and_take() {
        let mut window = Window::new(100, 1000, usize::MAX);
        for ts in [50, 150, 250] {
            window.add(ts, |s: &mut Tens| s.0.push(ts));
        }
        let recent: Vec<u64> = window.since(199).map(|(t, _)| t).collect();
        assert_eq!(recent, [100, 200]);
        let taken = window.take();
        assert_eq!(taken.len(), 3);
        assert_eq!(window.bytes(), 0);
        assert_eq!(window.aged_out(), AgedOut::default());
    }
}
