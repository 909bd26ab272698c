//! String arguments longer than an `ArgsEvent` keeps (`str:N`, N of 64 and up): each is read
//! into a scratch record and sent with `bpf_ringbuf_output` at the length read, before its call's
//! `ArgsEvent`, so a short string costs its own bytes, not the cap's. The scratch record is per
//! CPU, except in the sleepable entry program (`span_enter_s`), which may be preempted while a
//! page fault sleeps: another thread's program could then overwrite a per-CPU record. It reads
//! into the thread's own, in task storage (created at the thread's first such string).
use aya_ebpf::{macros::btf_map, macros::map, maps::PerCpuArray};
use xtrace_common::{
    event::{LongStrEvent, KIND_LONG_STR, LONG_STR_AT, MAX_ARGS, STR_MAX},
    probe::{args, counter},
};

use crate::maps::{count, long_strings, output_flags, EVENTS, STR_LENS};
use crate::strings::read_user_str;
use crate::task_storage::TaskStorage;
use crate::uprobe::header;

/// Where a long string is read before it is sent.
#[map]
static LONG_STR_SCRATCH: PerCpuArray<LongStrEvent> = PerCpuArray::with_max_entries(1, 0);

/// The sleepable program's scratch record, per thread.
#[btf_map]
static LONG_STR_TASK: TaskStorage<LongStrEvent> = TaskStorage::new();

/// The scratch record a program reads a long string into (see the module's documentation).
#[inline(always)]
fn scratch<const SLEEPABLE: bool>() -> Option<*mut LongStrEvent> {
    if SLEEPABLE {
        LONG_STR_TASK.current(true)
    } else {
        LONG_STR_SCRATCH.get_ptr_mut(0)
    }
}

/// Sends a `LongStrEvent` for each argument of `regs` that probe `probe_id`'s spec reads as a
/// long string; a sleepable program's reads may fault pages in.
#[inline(always)]
pub fn write_long_strings<const SLEEPABLE: bool>(
    regs: &[u64; MAX_ARGS],
    pid_tgid: u64,
    probe_id: u32,
    now: u64,
    spec: u32,
) {
    if !long_strings() || spec & args::GO_ABI != 0 {
        return;
    }
    let Some(lens) = STR_LENS.get(probe_id) else {
        return;
    };
    for i in 0..MAX_ARGS {
        let want = usize::from(lens[i]);
        if spec & args::string(i) == 0 || want == 0 {
            continue;
        }
        if !write_long_string::<SLEEPABLE>(regs[i], want, (pid_tgid, probe_id, now), i as u16) {
            return;
        }
    }
}

/// Sends a `LongStrEvent` of up to `want` bytes of the string at `pointer`, argument `arg` of a hit
/// of probe `probe_id` by thread `pid_tgid` at `now`; false when no scratch record could be had.
#[inline(always)]
pub fn write_long_string<const SLEEPABLE: bool>(
    pointer: u64,
    want: usize,
    (pid_tgid, probe_id, now): (u64, u32, u64),
    arg: u16,
) -> bool {
    let Some(scratch) = scratch::<SLEEPABLE>() else {
        return false;
    };
    // Room for the string and its NUL; the verifier needs the bound.
    let room = if want >= STR_MAX { STR_MAX + 1 } else { want + 1 };
    // SAFETY: `scratch` is this CPU's map value, used by nothing else while this program
    // runs (a sleepable program's is its thread's); the read writes at most `room` bytes into
    // `bytes`, which has more.
    let read = unsafe {
        (*scratch).header = header(KIND_LONG_STR, pid_tgid, now);
        (*scratch).start_ns = now;
        (*scratch).probe_id = probe_id;
        (*scratch).arg = arg;
        let dst = (*scratch).bytes.as_mut_ptr();
        read_user_str::<SLEEPABLE>(dst, room as u32, pointer)
    };
    let len = if read > 0 {
        (read as usize).min(STR_MAX + 1)
    } else {
        0
    };
    // SAFETY: as above.
    unsafe { (*scratch).len = len as u16 };
    let size = LONG_STR_AT + len;
    // SAFETY: `size` is at most the map value's size, so the record lies within it.
    let record = unsafe { core::slice::from_raw_parts(scratch.cast::<u8>(), size) };
    if EVENTS.output::<[u8]>(record, output_flags(size)).is_err() {
        count(counter::LOST_RING_FULL);
    }
    true
}
