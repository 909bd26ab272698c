//! `noop` and `noop_ret`: empty uprobe and uretprobe programs. They are not used for tracing;
//! `cargo xtask bench` attaches them to measure the bare cost of the hooks a span needs on this
//! machine (the floor that span costs are compared to).
use aya_ebpf::{
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};

#[uprobe]
pub fn noop(_ctx: ProbeContext) -> u32 {
    0
}

#[uretprobe]
pub fn noop_ret(_ctx: RetProbeContext) -> u32 {
    0
}
