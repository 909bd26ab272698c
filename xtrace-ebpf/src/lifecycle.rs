//! Thread lifecycle: `thread_exit` (raw tracepoint sched_process_exit, Linux 4.17+) drops an exiting
//! thread's stack of open calls, so the per-thread map does not fill up in processes that create and
//! end many threads.
use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::raw_tracepoint, programs::RawTracePointContext};

use crate::maps::STACKS;

#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn thread_exit(_ctx: RawTracePointContext) -> u32 {
    // The exiting task is the current one; most exiting threads never had an entry.
    let _ = STACKS.remove(bpf_get_current_pid_tgid());
    0
}
