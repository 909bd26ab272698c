//! Off-CPU time (`--off-cpu[=MIN]`): where the traced threads waited, how long, in what, and who
//! woke them. The kernel side (`xtrace-ebpf/src/offcpu.rs`) sends each wait of at least MIN in a
//! system call with the user stack it returned to, and adds up the others per thread, frame-pointer
//! stack and wait; [`OffCpu`] collects both as stacks weighted by nanoseconds, per [`Wait`], named
//! through the same image model and unwinder as CPU samples; `offcpu_timeline` puts the waits
//! sent on the timeline. `export::offcpu` writes
//! offcpu.folded, offcpu.svg and the summary; `probes::offcpu` loads the programs and reads the
//! kernel's totals.

use std::collections::BTreeMap;

use xtrace_common::{
    event::{SampleEvent, MAX_FRAMES},
    offcpu::{OffCpuInterval, OffCpuKey, OffCpuTotal},
};

use super::samples::{Samples, StackKey};
use crate::image::Images;
pub use crate::model::wait::Wait;
use crate::python::Python;

/// The waker's name in `woken_by` for a wake-up from an interrupt (its ids are 0).
pub const INTERRUPT_WAKER: &str = "[interrupt]";

/// The waker's name in `woken_by` for a wake-up that was not seen (its ids are 0).
pub const UNSEEN_WAKER: &str = "[unseen]";

/// Waiting for a CPU, wherever.
const RUNNABLE: Wait = Wait {
    state: xtrace_common::offcpu::state::RUNNABLE,
    syscall: xtrace_common::offcpu::NO_SYSCALL,
};

/// Time off CPU of one thread, by wait.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ThreadTime {
    /// Per wait: intervals and nanoseconds.
    pub waits: BTreeMap<Wait, (u64, u64)>,
    /// Who woke it from the waits of at least MIN, by (pid, tid, name): how many times. A pid of
    /// 0 is the idle task (`swapper/N`), interrupts ([`INTERRUPT_WAKER`]) or no wake-up seen
    /// ([`UNSEEN_WAKER`]).
    pub wakers: BTreeMap<(u32, u32, String), u64>,
}

impl ThreadTime {
    fn add(&mut self, wait: Wait, count: u64, ns: u64) {
        let entry = self.waits.entry(wait).or_default();
        entry.0 += count;
        entry.1 += ns;
    }

    /// Intervals and nanoseconds off CPU in all.
    pub fn total(&self) -> (u64, u64) {
        self.waits
            .values()
            .fold((0, 0), |(c, n), (count, ns)| (c + count, n + ns))
    }
}

/// What the off-CPU records of one recording add up to.
#[derive(Debug)]
pub struct OffCpu {
    /// `--off-cpu`'s MIN.
    pub min_ns: u64,
    /// Stacks weighted by nanoseconds off CPU, per wait.
    pub stacks: BTreeMap<Wait, Samples>,
    /// Per (pid, tid).
    pub threads: BTreeMap<(u32, u32), ThreadTime>,
    /// Waits sent one by one (at least MIN, in a system call).
    pub sent: u64,
    /// The waits on locks, by lock.
    pub locks: super::locks::Locks,
    /// Wake-up arrows on the timeline so far (each one's id is drawn from it).
    pub wake_flows: u64,
    /// With the live view: the time off CPU it has not taken yet.
    pub recent: Option<super::live::RecentOffCpu>,
}

impl OffCpu {
    pub fn new(min_ns: u64) -> Self {
        OffCpu {
            min_ns,
            stacks: BTreeMap::new(),
            threads: BTreeMap::new(),
            sent: 0,
            locks: super::locks::Locks::default(),
            wake_flows: 0,
            recent: None,
        }
    }

    /// One wait of at least MIN, with the thread's stack as it returned from its system call and
    /// the Python frames walked there; returns that stack as counted (None for xtrace's launcher
    /// code), for the flight recorder's window.
    pub fn wait(
        &mut self,
        images: &mut Images,
        python: &mut Python,
        interval: &OffCpuInterval,
        sample: &SampleEvent,
        comm: &str,
        stack: &mut [u8],
    ) -> Option<StackKey> {
        let wait = Wait {
            state: interval.state,
            syscall: interval.syscall,
        };
        let counted = self.stacks.entry(wait).or_default().add_weighted(
            images,
            python,
            sample,
            comm,
            stack,
            interval.duration_ns,
        );
        let at = (sample.header.pid, sample.header.tid, sample.header.ts_ns);
        self.sent_counted(images, at, interval, counted.as_ref());
        counted
    }

    /// One wait of at least MIN of thread `tid` of `pid`, ended at `ts_ns`, whose stack `key`
    /// (when there is one) is counted in the stacks of its wait already: counted in its wait for
    /// a CPU, its thread's time, its lock and its waker.
    fn sent_counted(
        &mut self,
        images: &mut Images,
        (pid, tid, ts_ns): (u32, u32, u64),
        interval: &OffCpuInterval,
        key: Option<&StackKey>,
    ) {
        let wait = Wait {
            state: interval.state,
            syscall: interval.syscall,
        };
        let ns = interval.duration_ns;
        self.sent += 1;
        if let Some(recent) = &mut self.recent {
            recent.add((pid, tid), interval.state, ns);
            recent.add((pid, tid), RUNNABLE.state, interval.runnable_ns);
        }
        let thread = self.threads.entry((pid, tid)).or_default();
        thread.add(wait, 1, ns);
        if interval.runnable_ns > 0 {
            // Woken, then waiting for a CPU, at the same place.
            thread.add(RUNNABLE, 1, interval.runnable_ns);
            if let Some(key) = key {
                add_key(
                    self.stacks.entry(RUNNABLE).or_default(),
                    key,
                    interval.runnable_ns,
                );
            }
        }
        let waker = match interval.waker_context {
            _ if !interval.waker_seen() => UNSEEN_WAKER.to_owned(),
            xtrace_common::offcpu::waker_context::INTERRUPT => INTERRUPT_WAKER.to_owned(),
            _ => crate::model::text::c_str(&interval.waker_comm).into_owned(),
        };
        if interval.lock != 0 {
            self.locks.waited(
                images,
                super::locks::Waited {
                    ns: ts_ns,
                    pid,
                    tid,
                    lock: interval.lock,
                    wait_ns: ns,
                    stack: key.cloned(),
                    waker: Some((
                        interval.waker_pid,
                        interval.waker_tid,
                        &waker,
                        interval.waker_stack,
                    )),
                },
            );
        }
        *thread
            .wakers
            .entry((interval.waker_pid, interval.waker_tid, waker))
            .or_default() += 1;
    }

    /// One wait of at least MIN kept by the flight recorder: ended at `ts_ns`, with the stack
    /// `key` counted for it when it came.
    pub fn sent_in_window(
        &mut self,
        images: &mut Images,
        at: (u32, u32, u64),
        interval: &OffCpuInterval,
        key: Option<&StackKey>,
    ) {
        if let Some(key) = key {
            let wait = Wait {
                state: interval.state,
                syscall: interval.syscall,
            };
            add_key(self.stacks.entry(wait).or_default(), key, interval.duration_ns);
        }
        self.sent_counted(images, at, interval, key);
    }

    /// The kernel's added-up waits, each with its user stack walked by frame pointers (innermost
    /// first; empty when not walked), named in the images the processes had at `end_ns`; and the
    /// stacks of the locks' holders, read by id with `stack_of`.
    pub fn totals(
        &mut self,
        images: &mut Images,
        totals: &[(OffCpuKey, OffCpuTotal, Vec<u64>)],
        end_ns: u64,
        stack_of: &dyn Fn(i32) -> Vec<u64>,
    ) {
        for (key, total, user) in totals {
            let wait = Wait {
                state: key.state,
                syscall: key.syscall,
            };
            let samples = self.stacks.entry(wait).or_default();
            let at = (key.pid, key.tid, end_ns);
            let counted = frame_pointer_stack(samples, images, at, user, total.total_ns);
            self.added_up(images, key, total, counted, end_ns);
        }
        self.locks.holder_stacks(images, end_ns, stack_of);
    }

    /// Waits the kernel added up by `key`, `total` of them, whose stack `counted` (when there is
    /// one) is counted in the stacks of its wait already, read at `ns`: counted in their
    /// thread's time and their lock.
    fn added_up(
        &mut self,
        images: &mut Images,
        key: &OffCpuKey,
        total: &OffCpuTotal,
        counted: Option<StackKey>,
        ns: u64,
    ) {
        let wait = Wait {
            state: key.state,
            syscall: key.syscall,
        };
        self.threads
            .entry((key.pid, key.tid))
            .or_default()
            .add(wait, total.count, total.total_ns);
        if key.lock != 0 {
            let added = (total.count, total.total_ns);
            let lock = (key.pid, key.tid, key.lock, ns);
            self.locks.added_up(images, lock, added, counted);
        }
    }

    /// Waits the kernel added up by `key` between two reads of its table (`total` of them), kept
    /// by the flight recorder with their stack `stack`, read at `ns`.
    pub fn added_in_window(
        &mut self,
        images: &mut Images,
        (key, total): (&OffCpuKey, &OffCpuTotal),
        stack: Option<&StackKey>,
        ns: u64,
    ) {
        if let Some(stack) = stack {
            let wait = Wait {
                state: key.state,
                syscall: key.syscall,
            };
            add_key(self.stacks.entry(wait).or_default(), stack, total.total_ns);
        }
        self.added_up(images, key, total, stack.cloned(), ns);
    }

    /// Reads the stacks of the locks' holders (see [`super::locks::Locks::holder_stacks`]).
    pub fn holder_stacks(&mut self, images: &mut Images, ns: u64, stack_of: &dyn Fn(i32) -> Vec<u64>) {
        self.locks.holder_stacks(images, ns, stack_of);
    }

    /// Nanoseconds off CPU of every traced thread together.
    pub fn total_ns(&self) -> u64 {
        self.threads.values().map(|t| t.total().1).sum()
    }
}

/// Counts stack `key` `weight` times in `samples`, as [`Samples::add_weighted`] counts one it
/// made.
fn add_key(samples: &mut Samples, key: &StackKey, weight: u64) {
    samples.total += weight;
    *samples.stacks.entry(key.clone()).or_default() += weight;
}

/// Counts in `samples`, `weight` times, the stack of waits the kernel added up for thread `tid`
/// of `pid`: its user stack `user` walked by frame pointers (innermost first; empty when not
/// walked), named in the image the process had at `ts_ns`. Returns the stack (None for xtrace's
/// launcher code); a `samples` that is [`Samples::windowed`] only makes it.
pub fn frame_pointer_stack(
    samples: &mut Samples,
    images: &mut Images,
    (pid, tid, ts_ns): (u32, u32, u64),
    user: &[u64],
    weight: u64,
) -> Option<StackKey> {
    // SAFETY: SampleEvent is plain integers, valid all zero.
    let mut event: SampleEvent = unsafe { std::mem::zeroed() };
    event.header.pid = pid;
    event.header.tid = tid;
    event.header.ts_ns = ts_ns;
    let frames = user.len().min(MAX_FRAMES);
    event.user[..frames].copy_from_slice(&user[..frames]);
    event.user_frames = frames as u32;
    // Added up in the kernel: no Python frames were walked for them.
    let mut no_python = Python::default();
    samples.add_weighted(images, &mut no_python, &event, "", &mut [], weight)
}
