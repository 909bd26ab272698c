//! Programs that do not trace; `cargo xtask bench` attaches them (`uprobe_floor`) to measure what
//! hooks cost on this machine, the floors span costs are compared to:
//! - `noop` and `noop_ret`: empty uprobe and uretprobe programs, the bare hooks a span needs;
//! - `clock` and `clock_ret`: those hooks plus the least any span costs in the kernel: a clock read
//!   at entry, one at the return, and one span-sized ring-buffer record, submitted without a
//!   wake-up (`uprobe_floor --clock` drains the ring). They keep no per-thread state, so they pair
//!   nothing: a lower bound for a span, not a span.
use aya_ebpf::{
    bindings::BPF_RB_NO_WAKEUP,
    helpers::bpf_ktime_get_ns,
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use xtrace_common::event::{EventHeader, SpanEvent, KIND_SPAN};

use crate::maps::reserve;

#[uprobe]
pub fn noop(_ctx: ProbeContext) -> u32 {
    0
}

#[uretprobe]
pub fn noop_ret(_ctx: RetProbeContext) -> u32 {
    0
}

#[uprobe]
pub fn clock(_ctx: ProbeContext) -> u32 {
    // SAFETY: no preconditions. black_box keeps the read.
    core::hint::black_box(unsafe { bpf_ktime_get_ns() });
    0
}

#[uretprobe]
pub fn clock_ret(_ctx: RetProbeContext) -> u32 {
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(mut entry) = reserve::<SpanEvent>() {
        entry.write(SpanEvent {
            header: EventHeader {
                kind: KIND_SPAN,
                ts_ns: now,
                ..Default::default()
            },
            ..Default::default()
        });
        entry.submit(BPF_RB_NO_WAKEUP as u64);
    }
    0
}
