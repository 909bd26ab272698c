//! CPU sampling: `sample` runs on every tick of a software cpu-clock perf event (one per CPU) and
//! writes the interrupted thread's kernel and user stacks as a `SampleEvent`. With `--pid` or a
//! launched command only the processes in `SAMPLE_PIDS` are sampled; with `-a` every thread but
//! the idle task.
use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_current_pid_tgid, bpf_get_stack, bpf_ktime_get_ns},
    macros::perf_event,
    programs::PerfEventContext,
    EbpfContext,
};
use xtrace_common::event::{SampleEvent, KIND_SAMPLE, MAX_FRAMES};

use crate::{
    maps::{reserve, sampled, submit_flags},
    uprobe::header,
};

const STACK_BYTES: u32 = (MAX_FRAMES * 8) as u32;

#[perf_event]
pub fn sample(ctx: PerfEventContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if tgid == 0 || !sampled(tgid) {
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(mut entry) = reserve::<SampleEvent>() else {
        return 0;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points at a reserved record of SampleEvent's size; the header and both frame
    // counts are written, and the helpers write at most STACK_BYTES into each array.
    unsafe {
        (*event).header = header(KIND_SAMPLE, pid_tgid, now);
        let kernel = bpf_get_stack(ctx.as_ptr(), (*event).kernel.as_mut_ptr().cast(), STACK_BYTES, 0);
        (*event).kernel_frames = if kernel > 0 { (kernel / 8) as u32 } else { 0 };
        let user = bpf_get_stack(
            ctx.as_ptr(),
            (*event).user.as_mut_ptr().cast(),
            STACK_BYTES,
            u64::from(BPF_F_USER_STACK),
        );
        (*event).user_frames = if user > 0 { (user / 8) as u32 } else { 0 };
    }
    entry.submit(submit_flags());
    0
}
