//! Function spans: `span_enter` (uprobe) pushes the entry time on the thread's stack of open calls,
//! `span_exit` (uretprobe) pops it and writes a `SpanEvent`. A thread's first traced call also
//! writes a `ThreadEvent` with its name. The attach cookie is the probe id.
//! Linux 5.15+ (attach cookies).
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_smp_processor_id,
        bpf_ktime_get_ns,
    },
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
    EbpfContext,
};
use xtrace_common::{
    event::{EventHeader, SpanEvent, ThreadEvent, KIND_SPAN, KIND_THREAD},
    probe::{counter, EntryStack, MAX_DEPTH},
};

use crate::maps::{count, submit_flags, EMPTY_STACK, EVENTS, STACKS};

#[uprobe]
pub fn span_enter(ctx: ProbeContext) -> u32 {
    match try_span_enter(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

#[uretprobe]
pub fn span_exit(ctx: RetProbeContext) -> u32 {
    match try_span_exit(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_span_enter(ctx: &ProbeContext) -> Result<u32, u32> {
    let now = unsafe { bpf_ktime_get_ns() };
    let key = bpf_get_current_pid_tgid();
    // SAFETY: the helper only reads the program context.
    let probe_id = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let stack = match STACKS.get_ptr_mut(key) {
        Some(stack) => stack,
        None => {
            let empty = EMPTY_STACK.get_ptr_mut(0).ok_or(0u32)?;
            // SAFETY: per-CPU scratch slot, used only within this program run.
            unsafe { (*empty).depth = 0 };
            // SAFETY: `empty` points at a valid EntryStack in map memory.
            if STACKS
                .insert(key, unsafe { &*empty }, BPF_NOEXIST as u64)
                .is_err()
            {
                count(counter::LOST_NO_THREAD_SLOT);
                return Err(0);
            }
            announce_thread(key, now);
            STACKS.get_ptr_mut(key).ok_or(0u32)?
        }
    };
    // SAFETY: map value of this thread; only this thread's probes touch it.
    let stack = unsafe { &mut *stack };
    let depth = stack.depth as usize;
    if depth < MAX_DEPTH {
        let slot = depth & (MAX_DEPTH - 1);
        stack.start_ns[slot] = now;
        stack.probe_id[slot] = probe_id;
    } else {
        count(counter::LOST_TOO_DEEP);
    }
    stack.depth = stack.depth.saturating_add(1);
    Ok(0)
}

/// Writes the `ThreadEvent` for a thread's first traced call.
#[inline(always)]
fn announce_thread(pid_tgid: u64, now: u64) {
    let Some(mut entry) = EVENTS.reserve::<ThreadEvent>(0) else {
        count(counter::LOST_RING_FULL);
        return;
    };
    entry.write(ThreadEvent {
        header: header(KIND_THREAD, pid_tgid, now),
        comm: bpf_get_current_comm().unwrap_or_default(),
    });
    entry.submit(submit_flags());
}

#[inline(always)]
fn header(kind: u32, pid_tgid: u64, ts_ns: u64) -> EventHeader {
    EventHeader {
        kind,
        // SAFETY: no preconditions.
        cpu: unsafe { bpf_get_smp_processor_id() },
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        ts_ns,
    }
}

/// Index of the innermost open call of `probe_id` below `depth`, if any. A call whose return was
/// missed (longjmp, attach order) is skipped over rather than mispaired. Indexes are loop counters,
/// which the verifier bounds exactly, never values read from the map.
#[inline(always)]
fn find_open(stack: &EntryStack, depth: usize, probe_id: u32) -> Option<usize> {
    let mut found = None;
    for slot in 0..MAX_DEPTH {
        if slot < depth && stack.probe_id[slot] == probe_id {
            found = Some(slot);
        }
    }
    found
}

fn try_span_exit(ctx: &RetProbeContext) -> Result<u32, u32> {
    let now = unsafe { bpf_ktime_get_ns() };
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: the helper only reads the program context.
    let probe_id = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let stack = STACKS.get_ptr_mut(pid_tgid).ok_or(0u32)?;
    // SAFETY: map value of this thread; only this thread's probes touch it.
    let stack = unsafe { &mut *stack };
    let depth = stack.depth as usize;
    if depth == 0 {
        return Ok(0); // a return whose entry was not seen
    }
    if depth > MAX_DEPTH {
        stack.depth -= 1; // its entry was counted as too deep
        return Ok(0);
    }
    let Some(slot) = find_open(stack, depth, probe_id) else {
        return Ok(0);
    };
    stack.depth = slot as u32;
    let start_ns = stack.start_ns[slot & (MAX_DEPTH - 1)];
    let Some(mut entry) = EVENTS.reserve::<SpanEvent>(0) else {
        count(counter::LOST_RING_FULL);
        return Ok(0);
    };
    entry.write(SpanEvent {
        header: header(KIND_SPAN, pid_tgid, now),
        start_ns,
        probe_id,
        depth: slot as u32,
    });
    entry.submit(submit_flags());
    Ok(0)
}
