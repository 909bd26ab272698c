//! `--stacks`: `call_stack`, a uprobe attached at the same entries as `span_enter` only when
//! `--stacks` is given (so without it the entry program's cost and verification are unchanged),
//! attached before it, so that the kernel, which runs a uprobe's newest consumer first, runs it
//! after `span_enter`. It reads the call `span_enter` just opened on the thread's stack of open
//! calls, walks the thread's Python frames (`python::walk`, its own scratch) and sends a
//! `CallStackEvent`: the call's entry time and depth (which pair it with its span), the return
//! address in the caller (read at the stack pointer: a frame-pointer walk from a function's first
//! instruction skips its caller) and a frame-pointer walk from the caller's frame
//! (`bpf_get_stack`, no copy of the stack). Not sleepable: the walk uses per-CPU scratch.
//!
//! `usdt_stack` does the same at USDT sites (of instant probes and of pairs' begin probes),
//! attached after `usdt_hit` so that it runs before it: the stack comes just before the hit it
//! belongs to, and user space gives it to the thread's next hit of the probe. It names the thread
//! itself when the hit is its first (as `usdt_hit` would), and sends the probe's own address and
//! a frame-pointer walk from the probe's frame ([`CALL_AT_USDT`]).
use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_attach_cookie, bpf_get_stack, bpf_ktime_get_ns, bpf_probe_read_user},
    macros::uprobe,
    programs::ProbeContext,
    EbpfContext,
};
use xtrace_common::{
    probe::MAX_DEPTH,
    stacks::{CallStackEvent, CALL_AT_USDT, CALL_NATIVE_MAX, CALL_NOT_OPEN, KIND_CALL_STACK},
};

use crate::{
    maps::{reserve, stopped, submit_flags, STACKS},
    python::{walk, Caller},
    regs::{user_ip, user_sp},
    uprobe::header,
};

/// Bytes the frame-pointer walk may write: every slot of `native` but the caller's.
const WALK_BYTES: u32 = ((CALL_NATIVE_MAX - 1) * 8) as u32;

#[uprobe]
pub fn call_stack(ctx: ProbeContext) -> u32 {
    if stopped() {
        return 0;
    }
    // A thread with no stack of open calls had no call kept by the entry program (`--tid`,
    // another PID namespace, xtrace's own): nothing to pair with.
    let Some(stack) = STACKS.current(false) else {
        return 0;
    };
    // SAFETY: this thread's storage, only read here; the entry program has run and returned.
    let stack = unsafe { &*stack };
    if stack.announced != crate::uprobe::ANNOUNCED {
        return 0;
    }
    let pid_tgid = stack.pid_tgid;
    // SAFETY: the helper only reads the program context.
    let probe_id = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let sp = user_sp(ctx.regs);
    // Read volatile and masked, not bounded with `min`: the compiler would then drop the mask,
    // and Linux 6.1's verifier loses the index's lower bound (depth - 1 with depth 0 ruled out
    // on a copy of the register).
    // SAFETY: a field of this thread's own stack.
    let depth = unsafe { core::ptr::read_volatile(&raw const stack.depth) };
    let top = &stack.calls[(depth.wrapping_sub(1) & (MAX_DEPTH as u32 - 1)) as usize];
    // The call just opened is the innermost one, at this stack pointer, of this probe.
    let open = depth != 0 && depth as usize <= MAX_DEPTH && top.frame == sp && top.probe_id == probe_id;
    let (start_ns, depth) = match open {
        true => (top.start_ns, depth - 1),
        false => (CALL_NOT_OPEN, u32::MAX),
    };
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: a checked read of user memory.
    let caller = unsafe { bpf_probe_read_user(sp as *const u64) }.unwrap_or(0);
    let call = Call {
        probe_id,
        start_ns,
        depth,
        flags: 0,
    };
    send(&ctx, pid_tgid, now, &call, caller);
    0
}

#[uprobe]
pub fn usdt_stack(ctx: ProbeContext) -> u32 {
    // The hit that follows may be its thread's first: named here, before its stack.
    let Some((now, pid_tgid, _, site)) = crate::usdt::at_site(&ctx) else {
        return 0;
    };
    let call = Call {
        probe_id: site.probe_id,
        start_ns: CALL_NOT_OPEN,
        depth: u32::MAX,
        flags: CALL_AT_USDT,
    };
    send(&ctx, pid_tgid, now, &call, user_ip(ctx.regs));
    0
}

/// What a stack record says of its call.
struct Call {
    probe_id: u32,
    start_ns: u64,
    depth: u32,
    flags: u32,
}

/// Sends thread `pid_tgid`'s Python frames, then a `CallStackEvent` of `call` at `now`:
/// `first`, then a frame-pointer walk from the current frame pointer.
#[inline(always)]
fn send(ctx: &ProbeContext, pid_tgid: u64, now: u64, call: &Call, first: u64) {
    // Before the record, with its time: user space pairs them by thread and time.
    walk(pid_tgid, now, Caller::Entry);
    let Some(mut entry) = reserve::<CallStackEvent>() else {
        return;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points at a reserved ring-buffer record of CallStackEvent's size; every
    // field user space reads is written before it is submitted, and the stack helper writes at
    // most WALK_BYTES from `native[1]`.
    unsafe {
        (*event).header = header(KIND_CALL_STACK, pid_tgid, now);
        (*event).start_ns = call.start_ns;
        (*event).probe_id = call.probe_id;
        (*event).depth = call.depth;
        (*event).flags = call.flags;
        (*event).native[0] = first;
        // Skips the walk's first frame, the probed address itself.
        let walked = bpf_get_stack(
            ctx.as_ptr(),
            (&raw mut (*event).native[1]).cast(),
            WALK_BYTES,
            u64::from(BPF_F_USER_STACK) | 1,
        );
        (*event).native_len = 1 + if walked > 0 { (walked / 8) as u32 } else { 0 };
    }
    entry.submit(submit_flags());
}
