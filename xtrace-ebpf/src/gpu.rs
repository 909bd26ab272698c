//! The GPU device timeline's records: `gpu_records`, a uprobe on the tool library's
//! `xtrace:gpu_records` USDT site, copies each `DeviceRecord` of the batch the site passes (its
//! address in rdi, its length in rsi) into the ring buffer as a `GpuEvent`, at most
//! `MAX_RECORDS_PER_HIT` of them; the rest, and those the ring has no room for, are counted
//! (`LOST_DEVICE_RECORDS`). The records are the tool library's fixed layout, never CUPTI's.
use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_user_buf},
    macros::uprobe,
    programs::ProbeContext,
};
use xtrace_common::{
    gpu::{GpuEvent, KIND_GPU, MAX_RECORDS_PER_HIT, RECORD_BYTES},
    probe::counter,
};

use crate::{
    maps::{count_n, current_pid_tgid, current_thread_traced, reserve, stopped, submit_flags},
    uprobe::header,
};

#[uprobe]
pub fn gpu_records(ctx: ProbeContext) -> u32 {
    if stopped() || !current_thread_traced() {
        return 0;
    }
    let Some(pid_tgid) = current_pid_tgid() else {
        return 0;
    };
    let records: u64 = ctx.arg(0).unwrap_or(0);
    let n: u64 = ctx.arg(1).unwrap_or(0);
    if records == 0 || n == 0 {
        return 0;
    }
    let sent = if n > MAX_RECORDS_PER_HIT as u64 {
        MAX_RECORDS_PER_HIT as u64
    } else {
        n
    };
    let mut lost = n - sent;
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    for i in 0..MAX_RECORDS_PER_HIT as u64 {
        if i >= sent {
            break;
        }
        let Some(mut entry) = reserve::<GpuEvent>() else {
            lost += sent - i;
            break;
        };
        let event = entry.as_mut_ptr();
        // SAFETY: `event` is the reserved record; the copy of user memory is checked.
        let copied = unsafe {
            (*event).header = header(KIND_GPU, pid_tgid, now);
            let at = records + i * RECORD_BYTES as u64;
            bpf_probe_read_user_buf(at as *const u8, &mut (*event).record)
        };
        if copied.is_err() {
            entry.discard(0);
            lost += 1;
            continue;
        }
        entry.submit(submit_flags());
    }
    if lost > 0 {
        count_n(counter::LOST_DEVICE_RECORDS, lost);
    }
    0
}
