//! `noop`: an empty uprobe program. It is not used for tracing; `cargo xtask bench` attaches it to
//! measure the bare cost of a uprobe hit on this machine (the floor that span costs are compared to).
use aya_ebpf::{macros::uprobe, programs::ProbeContext};

#[uprobe]
pub fn noop(_ctx: ProbeContext) -> u32 {
    0
}
