//! Thread lifecycle: `thread_exit` (raw tracepoint sched_process_exit, Linux 4.17+) counts the calls an
//! exiting thread leaves open (they never return) as unmatched entries; the kernel frees the
//! thread's stack with it. `thread_exec` (sched_process_exec) does the same for a thread that
//! replaces its program, whose stack outlives the exec, and marks it unannounced: its name changes,
//! and so does its thread id when it was not the process's first thread (it takes the process id).
//! Such an exec is also sent to user space (`KIND_EXEC`), which attaches the process's probes
//! again: the kernel ties them to the process's first thread, which the exec ended.
use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};

use xtrace_common::{
    event::{ThreadEvent, KIND_EXEC},
    probe::{counter, EntryStack, MAX_DEPTH},
};

use crate::maps::{count_n, current_pid_tgid, is_self, reserve, submit_flags, STACKS};
use crate::uprobe::header;

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

/// sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm).
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn thread_exec(ctx: RawTracePointContext) -> u32 {
    // The task that finished an exec is the current one.
    if let Some(stack) = STACKS.current(false) {
        // SAFETY: the thread's own storage.
        let stack = unsafe { &mut *stack };
        drop_open(stack);
        // Its next traced call sends a `ThreadEvent` with its new name and ids.
        stack.announced = 0;
    }
    crate::goroutine::exec_done();
    // The thread id before the exec, in the host's namespace, as the tgid read here.
    let old_pid: u64 = ctx.arg(1);
    if old_pid as u32 != (bpf_get_current_pid_tgid() >> 32) as u32 {
        leader_replaced();
    }
    0
}

/// Sends the `KIND_EXEC` record of a thread other than its process's first that ran exec (rare:
/// a few per capture at most, so every one on the machine is sent, and user space keeps those of
/// traced processes).
#[inline(always)]
fn leader_replaced() {
    let Some(ids) = current_pid_tgid().filter(|&ids| !is_self(ids)) else {
        return;
    };
    let Some(mut entry) = reserve::<ThreadEvent>() else {
        return;
    };
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    entry.write(ThreadEvent {
        header: header(KIND_EXEC, ids, now),
        comm: bpf_get_current_comm().unwrap_or_default(),
    });
    entry.submit(submit_flags());
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
