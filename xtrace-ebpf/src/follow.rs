//! Following the processes that sampled processes start, as `perf record` does (its counters are
//! inherited): `process_fork` (tracepoint task/task_newtask, which runs in the parent before the
//! child first runs, so none of the child's time is missed) adds each new process a process in
//! `SAMPLE_PIDS` starts to it; `process_exit` (tracepoint sched/sched_process_exit, on kernels
//! whose record has `group_dead`) takes a process out when its last thread exits, so a later
//! process that reuses its pid is not sampled. User space attaches them only when sampling is
//! limited to target processes and `--no-inherit` is not given. Field offsets are the tracepoints'
//! formats', set at load time.
use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext};
use xtrace_common::probe::counter;

use crate::maps::{count, load_time, SAMPLE_PIDS};

/// `clone()` flag: a thread of the caller's process, not a new process.
const CLONE_THREAD: u64 = 0x0001_0000;
/// Map update flag: only if the key is absent.
const BPF_NOEXIST: u64 = 1;
/// The map update's error when the key is present.
const EEXIST: i32 = 17;

/// Offset of `pid` (the new task's id) in the task_newtask record.
#[unsafe(no_mangle)]
static NEWTASK_PID: u32 = 8;
/// Offset of `clone_flags` in the task_newtask record.
#[unsafe(no_mangle)]
static NEWTASK_CLONE_FLAGS: u32 = 32;
/// Offset of `group_dead` (the process's last thread is exiting) in the sched_process_exit record.
#[unsafe(no_mangle)]
static EXIT_GROUP_DEAD: u32 = 32;

#[tracepoint]
pub fn process_fork(ctx: TracePointContext) -> u32 {
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: the value is not read.
    if unsafe { SAMPLE_PIDS.get(&parent) }.is_none() {
        return 0;
    }
    // SAFETY: checked reads of the tracepoint's record, at the offsets of its format.
    let (flags, child) = unsafe {
        (
            ctx.read_at::<u64>(load_time(&NEWTASK_CLONE_FLAGS) as usize),
            ctx.read_at::<i32>(load_time(&NEWTASK_PID) as usize),
        )
    };
    let (Ok(flags), Ok(child)) = (flags, child) else {
        return 0;
    };
    if flags & CLONE_THREAD != 0 || child <= 0 {
        return 0; // a thread: its process is sampled already
    }
    match SAMPLE_PIDS.insert(&(child as u32), &1, BPF_NOEXIST) {
        Ok(()) => count(counter::FOLLOWED_PROCESSES),
        // Present: the pid of a process that exited on a kernel without `group_dead`.
        Err(e) if e == -EEXIST => count(counter::FOLLOWED_PROCESSES),
        Err(_) => count(counter::PROCESSES_NOT_FOLLOWED),
    }
    0
}

#[tracepoint]
pub fn process_exit(ctx: TracePointContext) -> u32 {
    // SAFETY: a checked read of the tracepoint's record, at the offset of its format.
    let group_dead = unsafe { ctx.read_at::<u8>(load_time(&EXIT_GROUP_DEAD) as usize) };
    if group_dead.is_ok_and(|dead| dead != 0) {
        // The exiting task is the current one.
        let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
        let _ = SAMPLE_PIDS.remove(&tgid);
    }
    0
}
