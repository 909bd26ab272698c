//! Off-CPU records: the intervals a traced thread spends off a CPU, measured by the scheduler's
//! `sched_switch` (and `sched_waking` for who woke it). An interval of at least `--off-cpu`'s MIN
//! spent asleep in a system call is sent when the thread returns from that call, with the user
//! stack it is about to return to (an [`OffCpuEvent`], unwound in user space as a CPU sample's);
//! any other interval is added up in the kernel per [`OffCpuKey`].
use crate::event::{EventHeader, SampleEvent, SampleScratch, COMM_LEN};

pub use crate::event::KIND_OFF_CPU;

/// The scheduler state a thread left its CPU in (`task_struct.__state & 3`, or preempted).
pub mod state {
    /// Preempted, or otherwise still runnable: waiting for a CPU.
    pub const RUNNABLE: u32 = 0;
    /// Interruptible sleep (`S`): waiting for an event, a signal may end the wait.
    pub const SLEEPING: u32 = 1;
    /// Uninterruptible sleep (`D`): usually disk or other I/O.
    pub const UNINTERRUPTIBLE: u32 = 2;
}

/// `OffCpuInterval::syscall` of a thread that was not in a system call.
pub const NO_SYSCALL: i32 = -1;

/// One interval off CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffCpuInterval {
    /// When the thread left its CPU (`bpf_ktime_get_ns`).
    pub start_ns: u64,
    /// How long it waited: from leaving its CPU to being woken (to running again where no wake-up
    /// was seen), summed over the sleeps of one system call.
    pub duration_ns: u64,
    /// How long it then waited for a CPU, from its wake-up to running (scheduling delay).
    pub runnable_ns: u64,
    /// Sleeps summed in `duration_ns` (more than one when a system call slept several times).
    pub sleeps: u32,
    /// A [`state`] value.
    pub state: u32,
    /// The system call it slept in (x86-64 numbers), or [`NO_SYSCALL`].
    pub syscall: i32,
    /// The process and thread that last woke it, as xtrace sees them; 0 and 0 when woken from an
    /// interrupt (a timer, an I/O completion: `waker_context`), by the idle task (`waker_comm`
    /// `swapper/N`), or not seen (`waker_comm` empty).
    pub waker_pid: u32,
    pub waker_tid: u32,
    /// The waker's user stack as it woke a thread waiting on a lock (`lock` not 0), walked by
    /// frame pointers, in `OFF_CPU_STACKS`; negative otherwise.
    pub waker_stack: i32,
    /// NUL-padded name of the waking thread.
    pub waker_comm: [u8; COMM_LEN],
    /// The lock it waited on: a futex's user address (FUTEX_WAIT and its kin: a mutex, a condition
    /// variable, a semaphore), else 0.
    pub lock: u64,
    /// A [`waker_context`] value: whether a thread or an interrupt woke it.
    pub waker_context: u32,
    pub _pad: u32,
}

impl OffCpuInterval {
    /// Whether the wake-up that ended it was seen: by a thread (the idle task too) or an
    /// interrupt. One not seen (the thread went to sleep before the wake-ups were watched) names
    /// no waker.
    pub fn waker_seen(&self) -> bool {
        self.waker_context == waker_context::INTERRUPT || self.waker_pid != 0 || self.waker_comm[0] != 0
    }

    /// Whether the idle task woke it: no ids, and the idle task's name. (A thread outside
    /// xtrace's PID namespace has no ids either, and its own name.)
    pub fn woken_by_idle(&self) -> bool {
        self.waker_context == waker_context::THREAD && self.waker_pid == 0 && is_idle_task(&self.waker_comm)
    }
}

/// The name of the idle tasks, `swapper/CPU`, up to the CPU.
pub const IDLE_TASK: &[u8; 8] = b"swapper/";

/// Whether `comm` is an idle task's name (`swapper/N`).
pub fn is_idle_task(comm: &[u8]) -> bool {
    comm.starts_with(IDLE_TASK)
}

/// The name the kernel threads that run soft interrupts have, `ksoftirqd/CPU`, up to the CPU.
pub const SOFTIRQ_THREAD: &[u8; 10] = b"ksoftirqd/";

/// Whether a kernel thread named `comm` runs soft interrupts (`ksoftirqd/N`): a wake-up it makes
/// finishes an interrupt's work (an I/O completion, a packet, a timer), so it is the interrupt's,
/// not that thread's. Byte by byte, for the kernel program (no `memcmp` there).
#[inline(always)]
pub fn runs_soft_interrupts(comm: &[u8; 16]) -> bool {
    let mut i = 0;
    while i < SOFTIRQ_THREAD.len() {
        if comm[i] != SOFTIRQ_THREAD[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Where the last wake-up of a thread came from (`OffCpuInterval::waker_context`).
pub mod waker_context {
    /// A thread, named by `waker_pid`/`waker_tid` (0: the idle task, or no wake-up seen, which
    /// has no `waker_comm` either).
    pub const THREAD: u32 = 0;
    /// An interrupt (a timer, an I/O completion, another CPU's request), whichever thread it
    /// came in on: the waker's ids are 0.
    pub const INTERRUPT: u32 = 1;
}

/// A sent interval: its header (`KIND_OFF_CPU`, the thread's ids), the interval, then a CPU
/// sample's record of the thread returning from the system call it slept in (no kernel frames;
/// user registers and stack as `--user-stack` asks), then its `stack_len` bytes of user stack.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffCpuEvent {
    pub header: EventHeader,
    pub interval: OffCpuInterval,
    pub sample: SampleEvent,
}

/// Where the kernel program builds an [`OffCpuEvent`] (as `SampleScratch`, with room for the
/// stack after it).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OffCpuScratch {
    pub header: EventHeader,
    pub interval: OffCpuInterval,
    pub sample: SampleScratch,
}

/// What intervals that are not sent are added up by.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OffCpuKey {
    pub pid: u32,
    pub tid: u32,
    /// The user stack when the thread left its CPU, walked by frame pointers, in `OFF_CPU_STACKS`
    /// (negative: not walked, a kernel thread or a failed walk).
    pub user_stack: i32,
    pub state: u32,
    pub syscall: i32,
    pub _pad: u32,
    /// The lock waited on (as [`OffCpuInterval::lock`]), else 0.
    pub lock: u64,
}

/// Added-up intervals of one [`OffCpuKey`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffCpuTotal {
    pub count: u64,
    pub total_ns: u64,
}

/// A traced thread's off-CPU state, in its task storage.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OffCpuThread {
    /// Set when it leaves its CPU; 0 while it runs.
    pub left_ns: u64,
    /// Who it is, its stack, state and system call as it left: what its interval is added up by.
    pub key: OffCpuKey,
    /// An interval to send when the thread returns from its system call (`duration_ns` 0: none).
    pub pending: OffCpuInterval,
    /// When it was last woken (`sched_waking`), 0 when not since it left.
    pub woken_ns: u64,
    /// The last waker seen (`sched_waking`), moved into the interval when the thread runs.
    pub waker_pid: u32,
    pub waker_tid: u32,
    pub waker_comm: [u8; COMM_LEN],
    /// The last waker's stack, when it woke the thread from a wait on a lock; negative otherwise.
    pub waker_stack: i32,
    /// The last wake-up's [`waker_context`].
    pub waker_context: u32,
}

/// The x86-64 system call number of futex(2).
pub const SYS_FUTEX: i32 = 202;

/// Whether a futex operation (its `op` argument) waits for the futex's holder or signaller:
/// FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI and FUTEX_LOCK_PI2, with
/// or without FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME.
pub const fn futex_waits(op: u64) -> bool {
    matches!(op & 0x7f, 0 | 6 | 9 | 11 | 13)
}

/// Entries of the kernel's table of added-up intervals (`OFF_CPU_TOTALS`) and of its stacks.
pub const OFF_CPU_KEYS: u32 = 16384;

const _: () = assert!(core::mem::size_of::<OffCpuInterval>() == 80);
const _: () = assert!(core::mem::size_of::<OffCpuKey>() == 32);
const _: () = assert!(core::mem::size_of::<OffCpuThread>() == 160);
const _: () = assert!(core::mem::size_of::<OffCpuEvent>() == 104 + core::mem::size_of::<SampleEvent>());
const _: () = assert!(core::mem::size_of::<OffCpuScratch>() < 32768);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain `repr(C)` integers without padding, valid for any bit pattern.
    unsafe impl aya::Pod for super::OffCpuKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OffCpuTotal {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OffCpuInterval {}
}

#[cfg(test)]
mod tests {
    use super::{runs_soft_interrupts, waker_context, OffCpuInterval};

    fn comm(name: &str) -> [u8; 16] {
        let mut comm = [0u8; 16];
        comm[..name.len()].copy_from_slice(name.as_bytes());
        comm
    }

    /// `ksoftirqd/N` of any CPU runs soft interrupts; other kernel threads and names that only
    /// begin alike do not.
    #[test]
    fn only_ksoftirqd_threads_run_soft_interrupts() {
        for name in ["ksoftirqd/0", "ksoftirqd/15", "ksoftirqd/1023"] {
            assert!(runs_soft_interrupts(&comm(name)), "{name}");
        }
        for name in [
            "",
            "ksoftirqd",
            "kworker/0:1",
            "rcu_preempt",
            "migration/0",
            "ksoftirq/0",
            "Ksoftirqd/0",
        ] {
            assert!(!runs_soft_interrupts(&comm(name)), "{name}");
        }
    }

    /// A wake-up is unseen only with no ids, no name and no interrupt: the idle task has its name.
    #[test]
    fn a_wake_up_is_unseen_only_without_ids_name_or_interrupt() {
        let seen = |pid, name: &str, context| {
            OffCpuInterval {
                waker_pid: pid,
                waker_tid: pid,
                waker_comm: comm(name),
                waker_context: context,
                ..OffCpuInterval::default()
            }
            .waker_seen()
        };
        assert!(!seen(0, "", waker_context::THREAD));
        assert!(seen(0, "", waker_context::INTERRUPT));
        assert!(seen(0, "swapper/1", waker_context::THREAD));
        assert!(seen(42, "holder", waker_context::THREAD));
    }

    /// The idle task is told by its name: a thread outside xtrace's PID namespace has no ids
    /// either.
    #[test]
    fn the_idle_task_is_told_by_its_name() {
        let idle = |pid, name: &str| {
            OffCpuInterval {
                waker_pid: pid,
                waker_comm: comm(name),
                ..OffCpuInterval::default()
            }
            .woken_by_idle()
        };
        assert!(idle(0, "swapper/0"));
        assert!(idle(0, "swapper/17"));
        assert!(!idle(0, "kworker/1:2"));
        assert!(!idle(0, ""));
        assert!(!idle(7, "swapper/0"));
    }
}
