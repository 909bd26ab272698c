//! Following the processes that sampled processes start, as `perf record` does (its counters are
//! inherited): `process_fork` (raw tracepoint task_newtask, which runs in the parent before the
//! child first runs, so none of the child's time is missed) adds each new process a process in
//! `SAMPLE_PIDS` starts to it; `process_exit` (raw tracepoint sched_process_exit, on kernels that
//! pass `group_dead`) takes a process out when its last thread exits, so a later process that
//! reuses its pid is not sampled. User space attaches them only when sampling is limited to target
//! processes and `--no-inherit` is not given. Raw tracepoints pass the tracepoint's own arguments;
//! where `pid` lies in the new task's `task_struct` is read from the kernel's BTF and set at load
//! time. When xtrace runs in a PID namespace of its own, the new process's pid in it is read
//! through the task's `struct pid` (`thread_pid->numbers[level].nr`), whose layout is read from
//! BTF too.
use aya_ebpf::{
    bindings::BPF_NOEXIST, helpers::bpf_get_current_task, macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use xtrace_common::probe::counter;

use crate::maps::{
    count, current_pid_tgid, hint_sampled, in_pid_namespace, load_time, read_kernel, SAMPLE_PIDS,
};

/// `clone()` flag: a thread of the caller's process, not a new process.
const CLONE_THREAD: u64 = 0x0001_0000;
/// The map update's error when the key is present.
const EEXIST: i32 = 17;

/// Offset of `pid` in `struct task_struct`.
#[unsafe(no_mangle)]
static TASK_PID: u32 = 0;
/// Offset of `thread_pid` (a `struct pid *`) in `struct task_struct`.
#[unsafe(no_mangle)]
static TASK_THREAD_PID: u32 = 0;
/// Offset of `level` (the depth of the task's own PID namespace) in `struct pid`.
#[unsafe(no_mangle)]
static PID_LEVEL: u32 = 0;
/// Offset of `numbers` (one `struct upid` per namespace level, `nr` first) in `struct pid`.
#[unsafe(no_mangle)]
static PID_NUMBERS: u32 = 0;
/// Size of `struct upid`.
#[unsafe(no_mangle)]
static UPID_SIZE: u32 = 0;

/// task_newtask(struct task_struct *task, u64 clone_flags), in the parent.
#[raw_tracepoint(tracepoint = "task_newtask")]
pub fn process_fork(ctx: RawTracePointContext) -> u32 {
    let Some(parent) = current_pid_tgid().map(|ids| (ids >> 32) as u32) else {
        return 0;
    };
    // SAFETY: the value is not read.
    if unsafe { SAMPLE_PIDS.get(parent) }.is_none() {
        return 0;
    }
    let task: u64 = ctx.arg(0);
    let flags: u64 = ctx.arg(1);
    if flags & CLONE_THREAD != 0 {
        return 0; // a thread: its process is sampled already
    }
    let child = if in_pid_namespace() {
        // The parent is in xtrace's namespace (its ids were found there).
        // SAFETY: no preconditions; the task is read only through checked reads.
        let parent_task = unsafe { bpf_get_current_task() };
        let Some((parent_level, _)) = pid_in_own_namespace(parent_task) else {
            return 0;
        };
        match pid_in_own_namespace(task) {
            Some((level, child)) if level == parent_level => child,
            // In a namespace of its own (CLONE_NEWPID, or after the parent's unshare): outside
            // xtrace's namespace, so not sampled.
            _ => return 0,
        }
    } else {
        read_kernel::<i32>(task, load_time(&TASK_PID)).unwrap_or(0)
    };
    if child <= 0 {
        return 0;
    }
    hint_sampled(child as u32);
    match SAMPLE_PIDS.insert(child as u32, 1, u64::from(BPF_NOEXIST)) {
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
        if let Some(ids) = current_pid_tgid() {
            let _ = SAMPLE_PIDS.remove((ids >> 32) as u32);
        }
    }
    0
}

/// The level of task `task`'s own PID namespace and its pid there.
#[inline(always)]
fn pid_in_own_namespace(task: u64) -> Option<(u32, i32)> {
    let pid: u64 = read_kernel(task, load_time(&TASK_THREAD_PID))?;
    let level: u32 = read_kernel(pid, load_time(&PID_LEVEL))?;
    let upid = u64::from(load_time(&PID_NUMBERS)) + u64::from(level) * u64::from(load_time(&UPID_SIZE));
    let nr: i32 = read_kernel(pid, upid as u32)?;
    Some((level, nr))
}
