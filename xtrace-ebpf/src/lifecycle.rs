//! Thread lifecycle: `thread_exit` (raw tracepoint sched_process_exit, Linux 4.17+) counts the calls an
//! exiting thread leaves open (they never return) as unmatched entries; the kernel frees the
//! thread's stack with it.
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use xtrace_common::probe::{counter, MAX_DEPTH};

use crate::maps::{count_n, STACKS};

#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn thread_exit(_ctx: RawTracePointContext) -> u32 {
    // The exiting task is the current one; most exiting threads never had an entry. The kernel
    // frees its storage after this.
    if let Some(stack) = STACKS.current(false) {
        // SAFETY: the exiting thread's own storage.
        let open = (unsafe { (*stack).depth } as usize).min(MAX_DEPTH);
        if open > 0 {
            count_n(counter::UNMATCHED_ENTRIES, open as u64);
        }
    }
    0
}
