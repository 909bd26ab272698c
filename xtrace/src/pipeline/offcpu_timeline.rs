//! Off-CPU waits on the timeline (`--off-cpu`): each wait sent on its own (at least MIN, in a
//! system call) becomes a slice on its thread named by what it waited in (`clock_nanosleep`,
//! `futex lock` for a lock the image model names), then its wait for a CPU once woken
//! (`runnable`); a wake-up by another thread becomes a `wake` instant on the waker's thread at the
//! moment it woke the wait, with a flow arrow from it to the `runnable` slice that begins then
//! (forward in time, as Perfetto draws an arrow from the earlier slice). All of category
//! [`TIMELINE_CATEGORY`]: on each thread's `off-CPU` track in a Perfetto trace, so they never cut
//! through the nesting of the thread's function spans; in trace.json on the thread itself, where
//! a wait lies inside the call that made it. Waits added up in the kernel have no time of their
//! own and are not shown.
use xtrace_common::offcpu::{waker_context, OffCpuInterval, NO_SYSCALL};

use super::writer::{EventKind, Flow, FlowKind, SpanOut};
use crate::model::{
    text::c_str,
    wait::{syscall_name, Wait, TIMELINE_CATEGORY},
};

/// The probe id of these events: none (they carry their own name and category, and no
/// `--warn-over` rule applies to them).
const NO_PROBE: usize = usize::MAX;

/// The x86-64 number of futex(2), whose waits on a named lock are named by it.
const FUTEX: i32 = 202;

/// What a wait is called on the timeline: its system call's name (`futex NAME` for a lock the
/// image model named), or its state's outside one.
pub fn wait_name(interval: &OffCpuInterval, lock: Option<&str>) -> String {
    match (interval.syscall, lock) {
        (NO_SYSCALL, _) => Wait {
            state: interval.state,
            syscall: NO_SYSCALL,
        }
        .name(),
        (FUTEX, Some(lock)) => format!("futex {lock}"),
        (nr, _) => syscall_name(nr).map_or_else(|| format!("syscall {nr}"), str::to_string),
    }
}

/// Whether the wait was a sleep for a time (nanosleep, clock_nanosleep): a timer's interrupt ends
/// it, whichever thread it interrupted, which the kernel program cannot tell from a waker.
fn is_timer_sleep(interval: &OffCpuInterval) -> bool {
    matches!(
        syscall_name(interval.syscall),
        Some("nanosleep" | "clock_nanosleep")
    )
}

/// A wait's `args`: its state, its wait for a CPU, who woke it, the lock, and its sleeps when
/// the system call slept more than once (then the slice is their sum, from the first).
fn wait_args(interval: &OffCpuInterval) -> String {
    let state = Wait {
        state: interval.state,
        syscall: interval.syscall,
    }
    .state_name();
    let mut args = format!(",\"state\":\"{state}\",\"runnable_ns\":{}", interval.runnable_ns);
    if is_timer_sleep(interval) {
        args.push_str(",\"woken_by\":\"timer\"");
    } else if interval.waker_context == waker_context::INTERRUPT {
        args.push_str(",\"woken_by\":\"interrupt\"");
    } else if !interval.waker_seen() {
        args.push_str(",\"woken_by\":\"unseen\"");
    } else if interval.woken_by_idle() {
        args.push_str(",\"woken_by\":\"idle\"");
    } else {
        let waker = format!(
            "{} {}/{}",
            c_str(&interval.waker_comm),
            interval.waker_pid,
            interval.waker_tid
        );
        args.push_str(",\"waker\":");
        args.push_str(&serde_json::to_string(&waker).unwrap_or_default());
    }
    if interval.lock != 0 {
        args.push_str(&format!(",\"lock\":\"{:#x}\"", interval.lock));
    }
    if interval.sleeps > 1 {
        args.push_str(&format!(",\"sleeps\":{}", interval.sleeps));
    }
    args
}

/// The timeline events of one wait of thread (pid, tid), in the order they are written: the
/// `wake` instant on the waker's thread where a thread woke it (flow `flow_id` begins there;
/// written first, so that a reader going in time order has seen it when the `runnable` slice at
/// the same time ends the flow), the wait from `start_ns` for `duration_ns`, then `runnable` for
/// `runnable_ns` (there even when 0 where the arrow ends on it).
pub fn timeline(
    interval: &OffCpuInterval,
    (pid, tid): (u32, u32),
    lock: Option<&str>,
    flow_id: u64,
) -> Vec<SpanOut> {
    let event = |pid, tid, start_ns, dur_ns, name: &str| SpanOut {
        probe: NO_PROBE,
        pid,
        tid,
        start_ns,
        kind: EventKind::span(dur_ns, 0),
        name: Some(name.into()),
        cat: Some(TIMELINE_CATEGORY.into()),
        ..SpanOut::default()
    };
    let woken_ns = interval.start_ns.saturating_add(interval.duration_ns);
    let mut events = Vec::with_capacity(3);
    let woken_by_thread = interval.waker_pid != 0 && !is_timer_sleep(interval);
    if woken_by_thread {
        events.push(SpanOut {
            kind: EventKind::Instant {
                flow: Some(Flow {
                    id: flow_id,
                    end: false,
                    kind: FlowKind::Wake,
                }),
            },
            ..event(interval.waker_pid, interval.waker_tid, woken_ns, 0, "wake")
        });
    }
    let name = wait_name(interval, lock);
    events.push(SpanOut {
        values: Some(wait_args(interval).into()),
        ..event(pid, tid, interval.start_ns, interval.duration_ns, &name)
    });
    if interval.runnable_ns > 0 || woken_by_thread {
        events.push(SpanOut {
            kind: EventKind::Span {
                dur_ns: interval.runnable_ns,
                depth: 0,
                flow: woken_by_thread.then_some(Flow {
                    id: flow_id,
                    end: true,
                    kind: FlowKind::Wake,
                }),
            },
            ..event(pid, tid, woken_ns, interval.runnable_ns, "runnable")
        });
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use xtrace_common::offcpu::state;

    fn interval(waker_pid: u32, lock: u64) -> OffCpuInterval {
        let mut comm = [0u8; 16];
        comm[..6].copy_from_slice(b"holder");
        OffCpuInterval {
            start_ns: 1_000,
            duration_ns: 200,
            runnable_ns: 30,
            sleeps: 1,
            state: state::SLEEPING,
            syscall: FUTEX,
            waker_pid,
            waker_tid: waker_pid + 1,
            waker_stack: -1,
            waker_comm: comm,
            lock,
            ..OffCpuInterval::default()
        }
    }

    /// A wait on a named lock woken by a thread: the wake-up's instant on the waker at the
    /// wait's end begins the flow that the wait for a CPU, beginning then, ends.
    #[test]
    fn a_wake_up_by_a_thread_is_an_arrow_to_the_wait() {
        let events = timeline(&interval(7, 0x1000), (7, 7), Some("lock"), 42);
        assert_eq!(events.len(), 3);
        let [wake, wait, runnable] = [&events[0], &events[1], &events[2]];
        assert_eq!(
            (wake.pid, wake.tid, wake.start_ns, wake.kind.is_instant()),
            (7, 8, 1_200, true)
        );
        assert_eq!(wake.name.as_deref(), Some("wake"));
        let flow = |end| {
            Some(Flow {
                id: 42,
                end,
                kind: FlowKind::Wake,
            })
        };
        assert_eq!(
            (wake.flow(), wait.flow(), runnable.flow()),
            (flow(false), None, flow(true))
        );
        assert_eq!((wait.tid, wait.start_ns, wait.dur_ns()), (7, 1_000, 200));
        assert_eq!(wait.name.as_deref(), Some("futex lock"));
        assert_eq!(wait.cat.as_deref(), Some(TIMELINE_CATEGORY));
        assert_eq!(
            wait.values.as_deref(),
            Some(",\"state\":\"sleeping\",\"runnable_ns\":30,\"waker\":\"holder 7/8\",\"lock\":\"0x1000\"")
        );
        assert_eq!(
            (runnable.name.as_deref(), runnable.start_ns, runnable.dur_ns()),
            (Some("runnable"), 1_200, 30)
        );
        assert!(events.iter().all(|e| e.probe == NO_PROBE));
        // Woken by a thread and at once on a CPU: the arrow still ends on a `runnable`, of 0.
        let mut at_once = interval(7, 0);
        at_once.runnable_ns = 0;
        let events = timeline(&at_once, (7, 7), None, 42);
        assert_eq!(events.len(), 3);
        assert_eq!(
            (events[2].start_ns, events[2].dur_ns(), events[2].flow()),
            (1_200, 0, flow(true))
        );
    }

    /// Woken from an interrupt, by the idle task or unseen: no arrow, and the args say which; no
    /// wait for a CPU, no `runnable` slice.
    #[test]
    fn a_wake_up_from_an_interrupt_has_no_arrow() {
        let mut read = interval(0, 0);
        read.syscall = 0;
        read.runnable_ns = 0;
        read.sleeps = 2;
        read.waker_context = waker_context::INTERRUPT;
        let events = timeline(&read, (7, 9), None, 1);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].name.as_deref(), Some("read"));
        assert_eq!(events[0].flow(), None);
        assert_eq!(
            events[0].values.as_deref(),
            Some(",\"state\":\"sleeping\",\"runnable_ns\":0,\"woken_by\":\"interrupt\",\"sleeps\":2")
        );
        (read.waker_context, read.waker_comm) = (waker_context::THREAD, [0; 16]);
        assert_eq!(
            timeline(&read, (7, 9), None, 1)[0].values.as_deref(),
            Some(",\"state\":\"sleeping\",\"runnable_ns\":0,\"woken_by\":\"unseen\",\"sleeps\":2")
        );
        read.waker_comm[..9].copy_from_slice(b"swapper/1");
        assert_eq!(
            timeline(&read, (7, 9), None, 1)[0].values.as_deref(),
            Some(",\"state\":\"sleeping\",\"runnable_ns\":0,\"woken_by\":\"idle\",\"sleeps\":2")
        );
        // A thread outside xtrace's PID namespace: its name, no ids to draw an arrow from.
        read.waker_comm = [0; 16];
        read.waker_comm[..6].copy_from_slice(b"outer1");
        let events = timeline(&read, (7, 9), None, 1);
        assert_eq!((events.len(), events[0].flow()), (1, None));
        assert_eq!(
            events[0].values.as_deref(),
            Some(",\"state\":\"sleeping\",\"runnable_ns\":0,\"waker\":\"outer1 0/1\",\"sleeps\":2")
        );
        // A sleep for a time ends at a timer, whichever thread its interrupt came in.
        let mut sleep = interval(7, 0);
        (sleep.syscall, sleep.runnable_ns) = (230, 0);
        let events = timeline(&sleep, (7, 9), None, 1);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].flow(), None);
        assert_eq!(
            events[0].values.as_deref(),
            Some(",\"state\":\"sleeping\",\"runnable_ns\":0,\"woken_by\":\"timer\"")
        );
        // An unnamed lock's futex wait is `futex`.
        assert_eq!(wait_name(&interval(0, 0x10), None), "futex");
    }
}
