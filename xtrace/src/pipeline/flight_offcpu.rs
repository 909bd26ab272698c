//! The off-CPU waits of the flight recorder's window (`--flight` with `--off-cpu`). A wait of at
//! least MIN comes on its own with its stack: it is kept in the slot of the time its thread
//! returned from it, as a [`KeptWait`], its stack held once in the window's stacks beside the CPU
//! samples'. Shorter waits are added up in the kernel's table, which keeps no time: the session
//! reads the table once a second and whenever a window is taken, and what each key gained since
//! the last read is kept in the slot of the read ([`FlightAddedUp`]), so a window sums the reads
//! made within it. All of it counts in `--flight-size`: the entries in their slots, their stacks,
//! and the copy of the table the gains are reckoned against ([`AddedUpReads`]). When a trigger
//! takes the window, [`super::Pipeline::flight_off_cpu`] counts its waits into an [`OffCpu`] of
//! their own, as the end of a recording counts the whole run's.
use std::{collections::HashMap, sync::Arc};

use xtrace_common::offcpu::{OffCpuInterval, OffCpuKey, OffCpuTotal};

use super::{
    flight::Taken,
    offcpu::{frame_pointer_stack, OffCpu},
    samples::{Samples, StackKey},
};

/// A wait of at least MIN, sent with its stack: thread `tid` of `pid` returned from it at `ts_ns`.
#[derive(Clone, Copy, Debug)]
pub struct FlightWait {
    pub ts_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub interval: OffCpuInterval,
}

/// A wait in the window, with its stack as counted (None for xtrace's launcher code).
#[derive(Clone, Debug)]
pub struct KeptWait {
    pub wait: FlightWait,
    pub stack: Option<Arc<StackKey>>,
}

/// What the kernel's added-up waits of `key` gained between two reads of its table, the later at
/// `ts_ns`; `stack` is the frame-pointer user stack of the key, named when it was read.
#[derive(Clone, Debug)]
pub struct FlightAddedUp {
    pub ts_ns: u64,
    pub key: OffCpuKey,
    pub gained: OffCpuTotal,
    pub stack: Option<Arc<StackKey>>,
}

/// The kernel's table of added-up waits as last read, and what names the keys' stacks.
#[derive(Debug)]
pub struct AddedUpReads {
    last: HashMap<OffCpuKey, OffCpuTotal>,
    /// Makes the keys' stacks without counting them (it is `windowed`).
    stacks: Samples,
}

impl Default for AddedUpReads {
    fn default() -> Self {
        let mut stacks = Samples::default();
        stacks.windowed = true;
        AddedUpReads {
            last: HashMap::new(),
            stacks,
        }
    }
}

impl AddedUpReads {
    /// The bytes the copy of the table takes: a key, its totals and a control byte for each
    /// entry of its capacity.
    pub fn bytes(&self) -> usize {
        self.last.capacity() * (std::mem::size_of::<OffCpuKey>() + std::mem::size_of::<OffCpuTotal>() + 1)
    }

    /// What each key of `totals` gained since the last read (keys that gained nothing left out);
    /// `totals` becomes the last read. The kernel never takes a key out, and its counts only grow.
    fn gains(&mut self, totals: &[(OffCpuKey, OffCpuTotal)]) -> Vec<(OffCpuKey, OffCpuTotal)> {
        let mut gains = Vec::new();
        for (key, total) in totals {
            let last = self.last.insert(*key, *total).unwrap_or_default();
            let gained = OffCpuTotal {
                count: total.count.saturating_sub(last.count),
                total_ns: total.total_ns.saturating_sub(last.total_ns),
            };
            if gained.count > 0 {
                gains.push((*key, gained));
            }
        }
        gains
    }
}

/// The flight recorder's side of the off-CPU waits.
impl<W: std::io::Write + Send + 'static> super::Pipeline<W> {
    /// With `--flight` and `--off-cpu`: keeps what the kernel's table of added-up waits (`totals`,
    /// read at `now_ns`) gained since it was last read, each key's gain with its user stack
    /// (read by its id with `stack_of`), in the slot of `now_ns`.
    pub fn flight_off_cpu_read(
        &mut self,
        now_ns: u64,
        totals: &[(OffCpuKey, OffCpuTotal)],
        stack_of: &dyn Fn(i32) -> Vec<u64>,
    ) {
        self.live_off_cpu_read(totals);
        let Some(flight) = &mut self.flight else {
            return;
        };
        if self.families.off_cpu.waits.is_none() {
            return;
        }
        let gains = flight.reads.gains(totals);
        flight.recap();
        for (key, gained) in gains {
            let user = stack_of(key.user_stack);
            let at = (key.pid, key.tid, now_ns);
            let stack = frame_pointer_stack(&mut flight.reads.stacks, &mut self.images, at, &user, 0);
            let added = FlightAddedUp {
                ts_ns: now_ns,
                key,
                gained,
                stack: None,
            };
            flight.add_added_up(added, stack);
        }
    }

    /// With `--off-cpu`: counts the waits of the window `taken` into an [`OffCpu`] of the window
    /// (the locks' holders' stacks read by id with `stack_of`), and takes them out of its slots,
    /// and out of its stacks those only they referred to. None without `--off-cpu`.
    pub fn flight_off_cpu(
        &mut self,
        taken: &mut Taken,
        stack_of: &dyn Fn(i32) -> Vec<u64>,
    ) -> Option<OffCpu> {
        let min_ns = self.families.off_cpu.waits.as_ref()?.min_ns;
        let mut window = OffCpu::new(min_ns);
        let images = &mut self.images;
        for (_, slot) in &mut taken.slots {
            for kept in slot.waits() {
                let wait = &kept.wait;
                let at = (wait.pid, wait.tid, wait.ts_ns);
                window.sent_in_window(images, at, &wait.interval, kept.stack.as_deref());
            }
            for added in slot.added_up() {
                let gained = (&added.key, &added.gained);
                window.added_in_window(images, gained, added.stack.as_deref(), added.ts_ns);
            }
            slot.drop_waits();
        }
        window.holder_stacks(images, taken.at_ns, stack_of);
        taken.stacks.prune();
        Some(window)
    }
}

#[cfg(test)]
mod tests {
    use xtrace_common::offcpu::{state, NO_SYSCALL};

    use super::*;
    use crate::pipeline::{flight::Flight, threads::Names, window::Slot};

    fn key(tid: u32, state: u32) -> OffCpuKey {
        OffCpuKey {
            pid: 1,
            tid,
            user_stack: -1,
            state,
            syscall: NO_SYSCALL,
            ..Default::default()
        }
    }

    fn total(count: u64, total_ns: u64) -> OffCpuTotal {
        OffCpuTotal { count, total_ns }
    }

    #[test]
    fn each_read_keeps_what_each_key_gained() {
        let mut reads = AddedUpReads::default();
        let (a, b) = (key(1, state::SLEEPING), key(2, state::RUNNABLE));
        assert_eq!(reads.gains(&[(a, total(3, 300))]), [(a, total(3, 300))]);
        assert_eq!(
            reads.gains(&[(a, total(3, 300)), (b, total(1, 5))]),
            [(b, total(1, 5))],
            "a gained nothing"
        );
        assert_eq!(
            reads.gains(&[(a, total(10, 1000)), (b, total(1, 5))]),
            [(a, total(7, 700))]
        );
        assert!(reads.bytes() >= 2 * (32 + 16 + 1));
        // As the guide states them.
        assert_eq!(std::mem::size_of::<KeptWait>(), 104);
        assert_eq!(std::mem::size_of::<FlightAddedUp>(), 64);
    }

    #[test]
    fn kept_waits_weigh_in_their_slot_and_are_taken_out() {
        let mut flight = Flight::new(1_000_000_000, 64 << 20);
        let wait = FlightWait {
            ts_ns: 5_000_000,
            pid: 1,
            tid: 1,
            interval: OffCpuInterval::default(),
        };
        let stack = StackKey {
            pid: 1,
            image: 0,
            mapped: 0,
            kernel: Box::new([]),
            user: Box::new([1, 2, 3]),
            python: Box::new([]),
        };
        let empty = flight.bytes();
        flight.add_wait(wait, Some(stack.clone()));
        let added = FlightAddedUp {
            ts_ns: 6_000_000,
            key: key(1, state::SLEEPING),
            gained: total(4, 400),
            stack: None,
        };
        flight.add_added_up(added, Some(stack));
        assert!(
            flight.bytes() > empty + std::mem::size_of::<KeptWait>() + std::mem::size_of::<FlightAddedUp>()
        );
        let mut taken = flight.take(7_000_000, &Names::default());
        assert_eq!(taken.stacks.len(), 1, "one stack for both");
        let (waits, added): (usize, usize) = taken
            .slots
            .iter()
            .map(|(_, s)| (s.waits().len(), s.added_up().len()))
            .fold((0, 0), |(w, a), (sw, sa)| (w + sw, a + sa));
        assert_eq!((waits, added), (1, 1));
        assert_eq!(taken.slots.iter().map(|(_, s)| s.events()).sum::<u64>(), 0);
        for (_, slot) in &mut taken.slots {
            slot.drop_waits();
        }
        taken.stacks.prune();
        assert!(taken.stacks.is_empty());
    }

    /// The gains of the reads made within the window are its short waits: a read older than the
    /// window aged out with its slot.
    #[test]
    fn a_window_sums_the_reads_made_within_it() {
        use crate::pipeline::record_tests::{pipeline_with, Shared, TARGET};
        let a = OffCpuKey {
            pid: TARGET,
            tid: TARGET,
            ..key(0, state::SLEEPING)
        };
        let mut pipeline = pipeline_with(Shared::default(), None, |s| {
            s.off_cpu = Some(OffCpu::new(1_000_000))
        });
        // A window of 1 s in slots of 1 ms.
        pipeline.keep_in_flight(Flight::new(1_000_000_000, 1 << 20));
        let no_stack = |_| Vec::new();
        pipeline.flight_off_cpu_read(1_000_000_000, &[(a, total(3, 300_000))], &no_stack);
        pipeline.flight_off_cpu_read(2_000_000_000, &[(a, total(3, 300_000))], &no_stack);
        pipeline.flight_off_cpu_read(3_000_000_000, &[(a, total(5, 460_000))], &no_stack);
        let mut taken = pipeline.take_flight(3_500_000_000).expect("the flight recorder");
        let window = pipeline.flight_off_cpu(&mut taken, &no_stack).expect("--off-cpu");
        let thread = &window.threads[&(TARGET, TARGET)];
        assert_eq!(thread.total(), (2, 160_000), "the read at 3 s only");
        assert_eq!(window.sent, 0);
        // The run's count is the kernel's, read at the end: the window's reads add nothing to it.
        let (_, collected) = pipeline.collected();
        assert_eq!(collected.families.off_cpu.waits.expect("--off-cpu").total_ns(), 0);
    }
}
