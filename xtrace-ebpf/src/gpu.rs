//! The GPU device timeline's records: `gpu_records`, a uprobe on the tool library's
//! `xtrace:gpu_records` USDT site, copies each `DeviceRecord` of the batch the site passes (its
//! address in rdi, its length in rsi) into the ring buffer as a `GpuEvent`, at most
//! `MAX_RECORDS_PER_HIT` of them; the rest, and those the ring has no room for, are counted: the
//! device activities (kernels, copies, memsets; also any record past the limit or unreadable,
//! and the count a record of CUPTI's drops carried) as `LOST_DEVICE_RECORDS`, the others (launch
//! records, marks) as `LOST_TOOL_RECORDS`. A kernel name's piece the ring has no room for is kept
//! in `GPU_NAME_PIECES` instead (counted lost only when it cannot be read): the tool library
//! sends each name once per tracing session, and xtrace looks it up there when a record names it.
//! A notice's piece is kept in `GPU_NOTICE_PIECES`, which xtrace reads after each read of the
//! ring. The records are the tool library's fixed layout, never CUPTI's.
use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_user, bpf_probe_read_user_buf},
    macros::{map, uprobe},
    maps::LruHashMap,
    programs::ProbeContext,
};
use xtrace_common::{
    gpu::{
        record_kind, DeviceName, DeviceRecord, GpuEvent, NamePieceKey, KIND_GPU, MAX_RECORDS_PER_HIT,
        RECORD_BYTES,
    },
    probe::counter,
};

use crate::{
    maps::{count_n, current_pid_tgid, current_thread_traced, reserve, stopped, submit_flags},
    uprobe::header,
};

/// Kernel name pieces the ring had no room for, by (process id, name id, offset); xtrace takes
/// each out as it reads it. Sized at load: `MAX_KEPT_NAME_PIECES` with the GPU device timeline,
/// else 1. Least recently used out first when full, so that pieces nobody reads (a process gone,
/// all its kernels' records lost too) make room.
#[map]
static GPU_NAME_PIECES: LruHashMap<NamePieceKey, DeviceName> = LruHashMap::with_max_entries(1, 0);

/// Notice pieces the ring had no room for, by (process id, notice id, offset); xtrace takes them
/// all out each time it has read the ring. Sized at load: `MAX_KEPT_NOTICE_PIECES` with the GPU
/// device timeline, else 1; least recently used out first.
#[map]
static GPU_NOTICE_PIECES: LruHashMap<NamePieceKey, DeviceName> = LruHashMap::with_max_entries(1, 0);

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
        let at = records + i * RECORD_BYTES as u64;
        let Some(mut entry) = reserve::<GpuEvent>() else {
            // The next may fit again, once xtrace has read some.
            lost += unsent_activity(at, (pid_tgid >> 32) as u32);
            continue;
        };
        let event = entry.as_mut_ptr();
        // SAFETY: `event` is the reserved record; the copy of user memory is checked.
        let copied = unsafe {
            (*event).header = header(KIND_GPU, pid_tgid, now);
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

/// For the record at `at` of process `tgid`, which the ring had no room for, how many device
/// activities it stood for: 1 for a kernel, copy or memset (or an unreadable record), its count
/// for a `DROPPED` record (CUPTI's drops, otherwise unknown to xtrace), else 0: a name's or
/// notice's piece is kept, and what is not kept is counted as `LOST_TOOL_RECORDS`.
#[inline(always)]
fn unsent_activity(at: u64, tgid: u32) -> u64 {
    // SAFETY: checked copies of user memory: `kind` and `bytes` of a `DeviceRecord`.
    let kind = unsafe { bpf_probe_read_user((at + KIND_OFFSET) as *const u32) };
    match kind {
        Ok(record_kind::KERNEL | record_kind::MEMCPY | record_kind::MEMSET) | Err(_) => 1,
        Ok(record_kind::DROPPED) => {
            unsafe { bpf_probe_read_user((at + BYTES_OFFSET) as *const u64) }.unwrap_or(0)
        }
        Ok(kind @ (record_kind::NAME | record_kind::NOTICE)) if keep_text_piece(at, tgid, kind) => 0,
        Ok(_) => {
            count_n(counter::LOST_TOOL_RECORDS, 1);
            0
        }
    }
}

/// Keeps the piece at `at` of process `tgid`, a name's in `GPU_NAME_PIECES` or a notice's in
/// `GPU_NOTICE_PIECES` (`kind`); false when it cannot be read (or the kernel fails to keep it).
#[inline(always)]
fn keep_text_piece(at: u64, tgid: u32, kind: u32) -> bool {
    // SAFETY: a checked copy of user memory, a whole `DeviceName`.
    let Ok(piece) = (unsafe { bpf_probe_read_user(at as *const DeviceName) }) else {
        return false;
    };
    let key: NamePieceKey = [tgid, piece.id, piece.offset];
    let kept = match kind {
        record_kind::NAME => GPU_NAME_PIECES.insert(key, piece, 0),
        _ => GPU_NOTICE_PIECES.insert(key, piece, 0),
    };
    kept.is_ok()
}

const KIND_OFFSET: u64 = core::mem::offset_of!(DeviceRecord, kind) as u64;
const BYTES_OFFSET: u64 = core::mem::offset_of!(DeviceRecord, bytes) as u64;
