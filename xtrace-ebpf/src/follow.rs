//! Following the processes that sampled processes start, as `perf record` does (its counters are
//! inherited): `process_fork` (raw tracepoint task_newtask, which runs in the parent before the
//! child first runs, so none of the child's time is missed) adds each new process a process in
//! `SAMPLE_PIDS` starts to it; `process_exit` (raw tracepoint sched_process_exit, on kernels that
//! pass `group_dead`) takes a process out when its last thread exits, so a later process that
//! reuses its pid is not sampled. User space attaches them only when sampling is limited to target
//! processes and `--no-inherit` is not given. Raw tracepoints pass the tracepoint's own arguments;
//! where `pid` lies in the new task's `task_struct` is read from the kernel's BTF and set at load
//! time.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use xtrace_common::probe::counter;

use crate::maps::{count, load_time, SAMPLE_PIDS};

/// `clone()` flag: a thread of the caller's process, not a new process.
const CLONE_THREAD: u64 = 0x0001_0000;
/// Map update flag: only if the key is absent.
const BPF_NOEXIST: u64 = 1;
/// The map update's error when the key is present.
const EEXIST: i32 = 17;

/// Offset of `pid` in `struct task_struct`.
#[unsafe(no_mangle)]
static TASK_PID: u32 = 0;

/// task_newtask(struct task_struct *task, u64 clone_flags), in the parent.
#[raw_tracepoint(tracepoint = "task_newtask")]
pub fn process_fork(ctx: RawTracePointContext) -> u32 {
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: the value is not read.
    if unsafe { SAMPLE_PIDS.get(&parent) }.is_none() {
        return 0;
    }
    let task: u64 = ctx.arg(0);
    let flags: u64 = ctx.arg(1);
    if flags & CLONE_THREAD != 0 {
        return 0; // a thread: its process is sampled already
    }
    let field = task.wrapping_add(u64::from(load_time(&TASK_PID)));
    // SAFETY: a checked read of kernel memory.
    let Ok(child) = (unsafe { bpf_probe_read_kernel(field as *const i32) }) else {
        return 0;
    };
    if child <= 0 {
        return 0;
    }
    match SAMPLE_PIDS.insert(&(child as u32), &1, BPF_NOEXIST) {
        Ok(()) => count(counter::FOLLOWED_PROCESSES),
        // Present: the pid of a process that exited on a kernel without `group_dead`.
        Err(e) if e == -EEXIST => count(counter::FOLLOWED_PROCESSES),
        Err(_) => count(counter::PROCESSES_NOT_FOLLOWED),
    }
    0
}

/// sched_process_exit(struct task_struct *task, bool group_dead), in the exiting task.
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn process_exit(ctx: RawTracePointContext) -> u32 {
    let group_dead: u64 = ctx.arg(1);
    if group_dead & 0xff != 0 {
        // The exiting task is the current one.
        let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
        let _ = SAMPLE_PIDS.remove(&tgid);
    }
    0
}
