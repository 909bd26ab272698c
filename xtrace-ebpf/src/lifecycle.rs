//! Thread lifecycle: `thread_exit` (raw tracepoint sched_process_exit, Linux 4.17+) drops an exiting
//! thread's stack of open calls, so the per-thread map does not fill up in processes that create and
//! end many threads. Calls still open then never return: they are counted as unmatched entries.
use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::raw_tracepoint, programs::RawTracePointContext};

use xtrace_common::probe::{counter, MAX_DEPTH};

use crate::maps::{count_n, STACKS};

#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn thread_exit(_ctx: RawTracePointContext) -> u32 {
    // The exiting task is the current one; most exiting threads never had an entry.
    let key = bpf_get_current_pid_tgid();
    // SAFETY: a copy of the depth is read; the value is removed right after.
    if let Some(stack) = unsafe { STACKS.get(key) } {
        let open = (stack.depth as usize).min(MAX_DEPTH);
        if open > 0 {
            count_n(counter::UNMATCHED_ENTRIES, open as u64);
        }
        let _ = STACKS.remove(key);
    }
    0
}
