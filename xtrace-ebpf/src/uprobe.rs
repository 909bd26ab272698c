//! Function spans: `span_enter` (uprobe) pushes the entry time on the thread's stack of open calls,
//! `span_exit` (uretprobe) pops it and writes a `SpanEvent`; or, for functions whose exits are
//! probed at their own instructions (where an exception could unwind through them: the unwinder
//! cannot walk a return probe's trampoline), `span_ret` (uprobe on each `ret` and tail-call jump,
//! cookie `exit_cookie(probe id, how)`) does. A thread's first traced call also
//! writes a `ThreadEvent` with its name. The attach cookie is the probe id. Probes whose spec asks
//! for arguments also write an `ArgsEvent` at entry; every span carries the return register.
//! Linux 5.15+ (attach cookies).
use core::ptr;

use aya_ebpf::{
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_comm, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_probe_read_user, bpf_probe_read_user_buf,
    },
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
    EbpfContext,
};
use xtrace_common::{
    event::{
        ArgsEvent, EventHeader, OutEvent, SpanEvent, SpanStrEvent, ThreadEvent, ARG_BLOCK_LEN,
        ENTRY_EXITS_PROBED, ENTRY_GO, ENTRY_GO_STACK_CHECK, EXIT_GO, EXIT_RETURN, EXIT_TAIL_CALL,
        JBE_TAKEN_FLAGS, KIND_ARGS, KIND_OUT, KIND_SPAN, KIND_SPAN_STR, KIND_THREAD, MAX_ARGS,
        MAX_STACK_ARGS,
    },
    probe::{args, counter, EntryStack, OpenCall, LOG2_BUCKETS, MAX_DEPTH},
};

use crate::goroutine;
use crate::maps::{
    add, args_enabled, count, count_n, current_pid_tgid, current_thread_traced, is_self,
    keep_return_addresses, min_duration_ns, raise, reserve, stopped, submit_flags, ARG_SPECS, OUT_PTRS,
    SHORT_CALLS, STACKS,
};
use crate::regs::{user_ax, user_bx, user_cx, user_di, user_flags, user_r8, user_r9, user_si, user_sp};
use crate::strings::{read_c_string, read_counted};

#[uprobe]
pub fn span_enter(ctx: ProbeContext) -> u32 {
    match try_span_enter::<false>(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

/// `span_enter` as a sleepable program (Linux 6.0+), attached instead of it for probes whose spec
/// reads a string argument: its string reads can fault in pages the process has not touched yet
/// (see `crate::strings`). It may be preempted, so it keeps nothing per CPU between helper calls
/// (its long strings are read in task storage: `crate::long_str`).
#[uprobe(sleepable)]
pub fn span_enter_s(ctx: ProbeContext) -> u32 {
    match try_span_enter::<true>(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

/// The return probe needs no attach cookie: the kernel runs it for exactly the calls whose entry
/// probe installed it, innermost first, so the innermost open call at its frame is its own (see
/// [`find_open`]).
#[uretprobe]
pub fn span_exit(ctx: RetProbeContext) -> u32 {
    if stopped() {
        return 0;
    }
    // The return has popped the return address: its slot is one word below the stack pointer.
    let frame = user_sp(ctx.regs).wrapping_sub(8);
    match end_span(ctx.regs, frame, None, (EXIT_RETURN, false)) {
        Ok(r) | Err(r) => r,
    }
}

/// A function's exit seen at its own `ret` or tail-call `jmp`, before it runs: the stack pointer
/// is at the return address, as at entry.
#[uprobe]
pub fn span_ret(ctx: ProbeContext) -> u32 {
    if stopped() {
        return 0;
    }
    // SAFETY: the helper only reads the program context.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let frame = user_sp(ctx.regs);
    let go = cookie & EXIT_GO != 0;
    match end_span(ctx.regs, frame, Some(cookie as u32), ((cookie >> 32) as u16, go)) {
        Ok(r) | Err(r) => r,
    }
}

fn try_span_enter<const SLEEPABLE: bool>(ctx: &ProbeContext) -> Result<u32, u32> {
    if stopped() {
        return Ok(0);
    }
    let now = unsafe { bpf_ktime_get_ns() };
    if !current_thread_traced() {
        return Ok(0); // --tid: another thread; without an entry its return is ignored too
    }
    // SAFETY: the helper only reads the program context.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let probe_id = cookie as u32;
    if cookie & ENTRY_GO_STACK_CHECK != 0 && user_flags(ctx.regs) & JBE_TAKEN_FLAGS != 0 {
        return Ok(0); // on its way to grow its stack (or yield), then to start again
    }
    let exits_probed = u32::from(cookie & ENTRY_EXITS_PROBED != 0);
    let stack = match thread_stack(now) {
        Ok(stack) => stack,
        Err(NoStack::NoSlot) => {
            count(counter::LOST_NO_THREAD_SLOT);
            return Err(0);
        }
        Err(NoStack::OutsideNamespace) => return Ok(0),
    };
    let key = stack.pid_tgid;
    let sp = user_sp(ctx.regs);
    // Go code: the goroutine's stack of open calls, and the frame as it keeps it.
    let running = if cookie & ENTRY_GO != 0 {
        goroutine::running((key >> 32) as u32, ctx.regs, sp)
    } else {
        None
    };
    let (stack, frame) = match running {
        Some((goroutine, frame)) => match goroutine::stack(&goroutine, true) {
            Some(stack) => (stack, frame),
            None => {
                count(counter::LOST_NO_THREAD_SLOT);
                return Err(0);
            }
        },
        None => (stack, sp),
    };
    let depth = drop_dead(stack, frame, probe_id);
    if depth >= MAX_DEPTH {
        // The kernel installs no return probe this deep (its uretprobe nesting limit is 64 per
        // task), so this call is neither stacked nor expected back.
        count(counter::LOST_TOO_DEEP);
        return Ok(0);
    }
    let slot = depth & (MAX_DEPTH - 1);
    let return_address = if running.is_some() {
        key // whose span it is: the goroutine may return on another thread
    } else if keep_return_addresses() {
        // The kernel swaps the return address for its trampoline after every entry program has
        // run.
        // SAFETY: a checked read of user memory.
        unsafe { bpf_probe_read_user(sp as *const u64) }.unwrap_or(0)
    } else {
        0
    };
    stack.calls[slot] = OpenCall {
        start_ns: now,
        frame,
        return_address,
        probe_id,
        exits_probed,
    };
    // A CPU sample can interrupt this program and read the stack: the entry is whole before the
    // depth covers it. (An empty asm statement that may touch memory: a compiler barrier, which
    // the BPF backend cannot select as a fence.)
    // SAFETY: it emits no instruction.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
    stack.depth = (depth + 1) as u32;
    if args_enabled() {
        let g = running.map_or(0, |(goroutine, _)| goroutine[1]);
        write_args::<SLEEPABLE>(ctx, key, probe_id, now, (depth as u8, g), sp);
    }
    Ok(0)
}

/// Writes the `ArgsEvent` of a call whose probe captures arguments. `sp` is the user stack
/// pointer at entry, at the return address: the stack arguments follow it.
#[inline(always)]
fn write_args<const SLEEPABLE: bool>(
    ctx: &ProbeContext,
    pid_tgid: u64,
    probe_id: u32,
    now: u64,
    (depth, goroutine): (u8, u64),
    sp: u64,
) {
    let spec = match ARG_SPECS.get(probe_id) {
        // Only the return value read (`-> str`), or only sent whole: nothing to capture at entry.
        Some(&spec) if spec & !(args::RET_STRING | args::GO_ABI | args::ALWAYS_SENT) != 0 => spec,
        _ => return,
    };
    let go = spec & args::GO_ABI != 0;
    if !go && spec & STRING_MASK != 0 {
        let regs = c_args(ctx);
        // Before the ArgsEvent, which user space renders as soon as it reads it.
        crate::long_str::write_long_strings::<SLEEPABLE>(&regs, pid_tgid, probe_id, now, spec);
    }
    let Some(mut entry) = reserve::<ArgsEvent>() else {
        return;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points at a reserved ring-buffer record of ArgsEvent's size; every field is
    // written below before it is submitted.
    unsafe {
        (*event).header = header(KIND_ARGS, pid_tgid, now);
        (*event).start_ns = now;
        (*event).probe_id = probe_id;
        (*event).spec = spec;
        (*event).str_len = [0; MAX_ARGS];
        (*event).depth = depth;
        (*event)._pad = 0;
        (*event).goroutine = goroutine;
        // Go's seventh integer register: the length of a string in the sixth.
        let r9 = if go { user_r9(ctx.regs) } else { 0 };
        let regs: [u64; MAX_ARGS] = if go {
            let r = ctx.regs;
            [
                user_ax(r),
                user_bx(r),
                user_cx(r),
                user_di(r),
                user_si(r),
                user_r8(r),
            ]
        } else {
            c_args(ctx)
        };
        // A Go string's length is in the register after its pointer's.
        let lengths: [u64; MAX_ARGS] = [regs[1], regs[2], regs[3], regs[4], regs[5], r9];
        for i in 0..MAX_ARGS {
            let value = regs[i];
            (*event).args[i] = value;
            if spec & args::string(i) != 0 && go {
                (*event).str_len[i] = read_counted::<SLEEPABLE>(value, lengths[i], &mut (*event).strings[i]);
            } else if spec & args::string(i) != 0 {
                (*event).str_len[i] =
                    read_c_string::<SLEEPABLE>(value as *const u8, &mut (*event).strings[i]);
            } else if spec & args::block(i) != 0 {
                let dst = &mut (&mut (*event).strings[i])[..ARG_BLOCK_LEN];
                if bpf_probe_read_user_buf(value as *const u8, dst).is_ok() {
                    (*event).str_len[i] = ARG_BLOCK_LEN as u8;
                }
            }
            if spec & args::out(i) != 0 {
                let key = out_key(pid_tgid, depth);
                let _ = OUT_PTRS.insert(key, value, 0);
            }
        }
        for j in 0..MAX_STACK_ARGS {
            (*event).stack[j] = if spec & args::stack(j) != 0 {
                bpf_probe_read_user((sp + 8 * (j as u64 + 1)) as *const u64).unwrap_or(0)
            } else {
                0
            };
        }
        (*event).caller = if spec & args::CALLER != 0 {
            bpf_probe_read_user(sp as *const u64).unwrap_or(0)
        } else {
            0
        };
    }
    entry.submit(submit_flags());
}

/// Every `args::string` bit.
const STRING_MASK: u32 = 0b11_1111 << 8;

/// The `OUT_PTRS` key of the call at `depth` on thread `pid_tgid`.
#[inline(always)]
fn out_key(pid_tgid: u64, depth: u8) -> u64 {
    ((pid_tgid as u32 as u64) << 8) | u64::from(depth)
}

/// What of `probe_id`'s spec its return needs: its out-pointers and whether its return value is a
/// string (only when some probe captures arguments).
#[inline(always)]
fn return_spec(probe_id: u32) -> u32 {
    if !args_enabled() {
        return 0;
    }
    ARG_SPECS.get(probe_id).map_or(0, |spec| {
        spec & (args::OUT_MASK | args::RET_STRING | args::GO_ABI | args::ALWAYS_SENT)
    })
}

/// Sends `span` with the string its return value points at (`-> str`): NUL-terminated, or of
/// `go_len` bytes (a Go string, whose length is its function's second result, in `rbx`).
#[inline(always)]
fn write_span_str(span: SpanEvent, go_len: Option<u64>) {
    let Some(mut entry) = reserve::<SpanStrEvent>() else {
        return;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points at a reserved ring-buffer record of SpanStrEvent's size; every field
    // user space reads is written below before it is submitted (`string` past `str_len` is not).
    unsafe {
        (*event).span = span;
        (*event).str_len = 0;
        (*event)._pad = 0;
        if span.exit == EXIT_TAIL_CALL {
            // No return value yet.
        } else if let Some(len) = go_len {
            (*event).str_len = u32::from(read_counted::<false>(span.ret, len, &mut (*event).string));
        } else {
            (*event).str_len = u32::from(read_c_string::<false>(
                span.ret as *const u8,
                &mut (*event).string,
            ));
        }
    }
    entry.submit(submit_flags());
}

/// Writes the `OutEvent` of each out-pointer of the call at `slot` that entered at `start_ns`.
#[inline(always)]
fn write_outs(pid_tgid: u64, probe_id: u32, spec: u32, slot: usize, start_ns: u64, now: u64) {
    let key = out_key(pid_tgid, slot as u8);
    // SAFETY: the value is copied out at once.
    let Some(&ptr) = (unsafe { OUT_PTRS.get(key) }) else {
        return;
    };
    let _ = OUT_PTRS.remove(key);
    for i in 0..MAX_ARGS {
        if spec & args::out(i) == 0 {
            continue;
        }
        let Some(mut entry) = reserve::<OutEvent>() else {
            return;
        };
        entry.write(OutEvent {
            header: header(KIND_OUT, pid_tgid, now),
            start_ns,
            probe_id,
            arg: i as u32,
            // SAFETY: a checked read of user memory.
            value: unsafe { bpf_probe_read_user(ptr as *const u64) }.unwrap_or(0),
        });
        entry.submit(submit_flags());
        // One out-pointer per call is kept (one `OUT_PTRS` slot per call).
        return;
    }
}

/// Why a thread has no stack of open calls.
pub enum NoStack {
    /// The kernel could not allocate it.
    NoSlot,
    /// The thread is outside xtrace's PID namespace ([`crate::maps::current_pid_tgid`]), or it
    /// is one of xtrace's own ([`crate::maps::is_self`]): it is not traced.
    OutsideNamespace,
}

/// `EntryStack::announced`: the thread's `ThreadEvent` is sent.
pub const ANNOUNCED: u32 = 1;
/// `EntryStack::announced`: the thread is outside xtrace's PID namespace, or one of xtrace's own.
const OUTSIDE_NAMESPACE: u32 = 2;

/// The current thread's stack of open calls, made at its first traced call (a function's entry or
/// a USDT hit), which also sends the thread's `ThreadEvent`: its name then, and its ids.
#[inline(always)]
pub fn thread_stack(now: u64) -> Result<&'static mut EntryStack, NoStack> {
    let stack = STACKS.current(true).ok_or(NoStack::NoSlot)?;
    // SAFETY: this thread's storage; only this thread's programs touch it, one at a time.
    let stack = unsafe { &mut *stack };
    if stack.announced == ANNOUNCED {
        return Ok(stack);
    }
    if stack.announced == 0 {
        // Its ids are looked up once, here: a thread never changes PID namespace, and xtrace's
        // threads are xtrace's for good (it never execs).
        if let Some(pid_tgid) = current_pid_tgid().filter(|&ids| !is_self(ids)) {
            stack.announced = ANNOUNCED;
            stack.pid_tgid = pid_tgid;
            announce_thread(pid_tgid, now);
            return Ok(stack);
        }
        stack.announced = OUTSIDE_NAMESPACE;
    }
    Err(NoStack::OutsideNamespace)
}

/// Writes the `ThreadEvent` for a thread's first traced call.
#[inline(always)]
fn announce_thread(pid_tgid: u64, now: u64) {
    let Some(mut entry) = reserve::<ThreadEvent>() else {
        return;
    };
    entry.write(ThreadEvent {
        header: header(KIND_THREAD, pid_tgid, now),
        comm: bpf_get_current_comm().unwrap_or_default(),
    });
    entry.submit(submit_flags());
}

#[inline(always)]
pub fn header(kind: u32, pid_tgid: u64, ts_ns: u64) -> EventHeader {
    EventHeader {
        kind,
        // SAFETY: no preconditions.
        cpu: unsafe { bpf_get_smp_processor_id() },
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        ts_ns,
    }
}

/// Drops the entries a new call at `frame` proves dead, counting them unmatched, and returns the
/// depth left. A frame below `frame` has been unwound (its function was left by longjmp or an
/// exception); so has one at `frame` of the same probe (the caller called the function again), or
/// of a function whose exits are probed at their instructions (a tail jump of it would have ended
/// it). An entry at `frame` of another function with a return probe may be alive: a tail call
/// reuses its caller's slot, and the kernel returns from both. Each step tests one entry, so the
/// verifier walks the loop once.
#[inline(always)]
fn drop_dead(stack: &mut EntryStack, frame: u64, probe_id: u32) -> usize {
    let depth = (stack.depth as usize).min(MAX_DEPTH);
    let mut left = depth;
    for i in 0..MAX_DEPTH {
        if i >= depth {
            break;
        }
        let top = &stack.calls[(depth - 1 - i) & (MAX_DEPTH - 1)];
        if top.frame > frame || (top.frame == frame && top.probe_id != probe_id && top.exits_probed == 0) {
            break;
        }
        left = depth - 1 - i;
    }
    if left != depth {
        count_n(counter::UNMATCHED_ENTRIES, (depth - left) as u64);
        stack.depth = left as u32;
    }
    // Read back rather than returned: the verifier then sees one unknown depth whichever step
    // ended the loop, so what follows is verified once, not once per step (older verifiers, 6.1's,
    // otherwise walk the argument reads 64 times and give up).
    // SAFETY: a field of this thread's own stack, written above or before.
    unsafe { ptr::read_volatile(&raw const stack.depth) as usize }
}

/// Index of the open call whose return-address slot is `frame`, of `probe_id` when given, if any:
/// the call this return ends. Entries above it were left without returning (longjmp, exceptions).
/// A return probe passes no probe id: two open calls share a frame only after a tail call, and the
/// kernel returns from the callee (the innermost) first. The scan goes from the innermost entry
/// down and stops at the first match, so the verifier walks each step once; slots are masked loop
/// counters, never unchecked values read from the map.
#[inline(always)]
fn find_open(stack: &EntryStack, depth: usize, probe_id: Option<u32>, frame: u64) -> Option<usize> {
    for i in 0..MAX_DEPTH {
        if i >= depth {
            return None;
        }
        let slot = (depth - 1 - i) & (MAX_DEPTH - 1);
        let call = &stack.calls[slot];
        if call.frame == frame && probe_id.is_none_or(|id| call.probe_id == id) {
            return Some(slot);
        }
        if call.frame > frame {
            return None; // an outer frame: this call's entry was not recorded
        }
    }
    None
}

/// Adds a call shorter than `--min-duration` to its probe's per-CPU summary. The count, total and
/// histogram are atomic adds (see [`add`]), so no call goes uncounted; min (kept as `!min`) and max
/// are raised with compare-and-swap (see [`raise`]), so a program preempted on this CPU by another
/// run of it cannot undo the other's store.
#[inline(always)]
fn count_short(probe_id: u32, duration: u64) {
    let Some(short) = SHORT_CALLS.get_ptr_mut(probe_id) else {
        return;
    };
    // SAFETY: a live per-CPU map value of u64 fields; the bucket index is masked in range.
    unsafe {
        raise(ptr::addr_of_mut!((*short).min_ns_not), !duration);
        raise(ptr::addr_of_mut!((*short).max_ns), duration);
        add(ptr::addr_of_mut!((*short).count), 1);
        add(ptr::addr_of_mut!((*short).total_ns), duration);
        let bucket = log2_bucket(duration) & (LOG2_BUCKETS - 1);
        add(ptr::addr_of_mut!((*short).log2[bucket]), 1);
    }
}

/// 0 for 0, else 1 + floor(log2(value)): bucket i holds [2^(i-1), 2^i). Shifts only (no loop), so
/// it verifies in a handful of instructions; values of 2^63 and above share the last bucket.
#[inline(always)]
fn log2_bucket(value: u64) -> usize {
    let mut v = value;
    let mut bits = 0;
    for shift in [32u32, 16, 8, 4, 2, 1] {
        if v >> shift != 0 {
            v >>= shift;
            bits += shift as usize;
        }
    }
    if v == 0 {
        0
    } else {
        (bits + 1).min(LOG2_BUCKETS - 1)
    }
}

/// Ends the open call (of `probe_id` when given, see [`find_open`]) whose return-address slot is
/// at `sp`, left as `exit` says (`EXIT_*`), and writes its span; `go` when the probe is Go code's
/// (`EXIT_GO`); `regs` is the program's context.
#[inline(always)]
fn end_span(
    regs: *const aya_ebpf::bindings::pt_regs,
    sp: u64,
    probe_id: Option<u32>,
    (exit, go): (u16, bool),
) -> Result<u32, u32> {
    let now = unsafe { bpf_ktime_get_ns() };
    // Go code: the goroutine's stack, when the call entered on it (see `goroutine`). Its thread
    // may have had no traced call yet.
    let running = match go.then(current_pid_tgid).flatten() {
        Some(ids) => goroutine::running((ids >> 32) as u32, regs, sp),
        None => None,
    };
    let (stack, frame) = match running {
        Some((goroutine, frame)) => (goroutine::stack(&goroutine, false).ok_or(0u32)?, frame),
        None => {
            let stack = STACKS.current(false).ok_or(0u32)?;
            // SAFETY: this thread's storage; only this thread's probes touch it.
            (unsafe { &mut *stack }, sp)
        }
    };
    let depth = stack.depth as usize;
    if depth == 0 {
        return Ok(0); // a return whose entry was not seen
    }
    let depth = depth.min(MAX_DEPTH);
    let Some(slot) = find_open(stack, depth, probe_id, frame) else {
        return Ok(0);
    };
    // Entries above the matched one were left without returning (longjmp, exceptions).
    let abandoned = depth - 1 - slot;
    if abandoned > 0 {
        count_n(counter::UNMATCHED_ENTRIES, abandoned as u64);
    }
    stack.depth = slot as u32;
    // Read back rather than kept, as in `drop_dead`: what follows is verified once, not once per
    // step of the scan.
    // SAFETY: a field of this thread's (or goroutine's) own stack, written just above.
    let slot = unsafe { ptr::read_volatile(&raw const stack.depth) } as usize & (MAX_DEPTH - 1);
    let call = &stack.calls[slot];
    let (probe_id, start_ns) = (call.probe_id, call.start_ns);
    let pid_tgid = if running.is_some() {
        call.return_address
    } else {
        stack.pid_tgid
    };
    if let (Some((goroutine, _)), 0) = (running, slot) {
        goroutine::done(&goroutine);
    }
    let duration = now.saturating_sub(start_ns);
    let spec = return_spec(probe_id);
    let outs = spec & args::OUT_MASK;
    if outs != 0 {
        write_outs(pid_tgid, probe_id, outs, slot, start_ns, now);
    } else if spec & args::ALWAYS_SENT == 0 && duration < min_duration_ns() {
        count_short(probe_id, duration);
        return Ok(0);
    }
    if spec & args::RET_STRING != 0 {
        let go_len = (spec & args::GO_ABI != 0).then(|| user_bx(regs));
        write_span_str(
            SpanEvent {
                header: header(KIND_SPAN_STR, pid_tgid, now),
                start_ns,
                probe_id,
                depth: slot as u16,
                exit,
                ret: user_ax(regs),
            },
            go_len,
        );
        return Ok(0);
    }
    let Some(mut entry) = reserve::<SpanEvent>() else {
        return Ok(0);
    };
    entry.write(SpanEvent {
        header: header(KIND_SPAN, pid_tgid, now),
        start_ns,
        probe_id,
        depth: slot as u16,
        exit,
        ret: user_ax(regs),
    });
    entry.submit(submit_flags());
    Ok(0)
}

/// The six argument registers of the C calling convention, each read at a constant offset (the
/// verifier refuses context loads at computed ones).
#[inline(always)]
fn c_args(ctx: &ProbeContext) -> [u64; MAX_ARGS] {
    [
        ctx.arg(0).unwrap_or(0),
        ctx.arg(1).unwrap_or(0),
        ctx.arg(2).unwrap_or(0),
        ctx.arg(3).unwrap_or(0),
        ctx.arg(4).unwrap_or(0),
        ctx.arg(5).unwrap_or(0),
    ]
}
