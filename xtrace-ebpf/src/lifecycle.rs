//! Thread lifecycle: `thread_exit` (raw tracepoint sched_process_exit, Linux 4.17+) counts the calls an
//! exiting thread leaves open (they never return) as unmatched entries; the kernel frees the
//! thread's stack with it. `thread_exec` (sched_process_exec) does the same for a thread that
//! replaces its program, whose stack outlives the exec, and marks it unannounced: its name changes,
//! and so does its thread id when it was not the process's first thread (it takes the process id).
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use xtrace_common::probe::{counter, EntryStack, MAX_DEPTH};

use crate::maps::{count_n, STACKS};

#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn thread_exit(_ctx: RawTracePointContext) -> u32 {
    // The exiting task is the current one; most exiting threads never had an entry. The kernel
    // frees its storage after this.
    if let Some(stack) = STACKS.current(false) {
        // SAFETY: the exiting thread's own storage.
        drop_open(unsafe { &mut *stack });
    }
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn thread_exec(_ctx: RawTracePointContext) -> u32 {
    // The task that finished an exec is the current one.
    if let Some(stack) = STACKS.current(false) {
        // SAFETY: the thread's own storage.
        let stack = unsafe { &mut *stack };
        drop_open(stack);
        // Its next traced call sends a `ThreadEvent` with its new name and ids.
        stack.announced = 0;
    }
    0
}

/// Counts a thread's open calls as unmatched entries and empties its stack.
#[inline(always)]
fn drop_open(stack: &mut EntryStack) {
    let open = (stack.depth as usize).min(MAX_DEPTH);
    if open > 0 {
        count_n(counter::UNMATCHED_ENTRIES, open as u64);
    }
    stack.depth = 0;
}
