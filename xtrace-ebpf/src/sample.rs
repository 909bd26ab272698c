//! CPU sampling: `sample` runs on every tick of a software cpu-clock perf event (one per CPU) and
//! writes the interrupted thread's kernel and user stacks as a `SampleEvent`. With `--pid` or a
//! launched command only the processes in `SAMPLE_PIDS` are sampled; with `-a` every thread but
//! the idle task. With `--user-stack` above 0 the record also carries the thread's user-mode
//! registers and the top of its user stack, for unwinding code without frame pointers; while the
//! kernel single-steps a probed instruction's copy out of line, the registers say the probed
//! instruction's address instead of the copy's ([`stepped_from`]).
use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{
        bpf_get_current_comm, bpf_get_current_task_btf, bpf_get_stack, bpf_ktime_get_ns, bpf_task_pt_regs,
        generated::{bpf_probe_read_kernel, bpf_probe_read_user},
    },
    macros::{map, perf_event},
    maps::PerCpuArray,
    programs::PerfEventContext,
    EbpfContext,
};
use xtrace_common::{
    event::{
        SampleEvent, SampleScratch, KIND_SAMPLE, MAX_FRAMES, MAX_RETURN_SLOTS, STACK_CHUNK, USER_BP, USER_IP,
        USER_SP, USER_STACK_MAX,
    },
    probe::{counter, MAX_DEPTH},
};

use crate::{
    maps::{
        count, current_pid_tgid, keep_return_addresses, load_time, output_flags, read_kernel, EVENTS, STACKS,
    },
    regs::{PT_REGS_BP, PT_REGS_IP, PT_REGS_SIZE, PT_REGS_SP},
    uprobe::header,
};

const STACK_BYTES: u32 = (MAX_FRAMES * 8) as u32;

/// One record under construction per CPU: too large for the 512-byte BPF stack, and sent with
/// `bpf_ringbuf_output` at its used length instead of reserving the largest size.
#[map]
static SAMPLE_SCRATCH: PerCpuArray<SampleScratch> = PerCpuArray::with_max_entries(1, 0);

/// `--user-stack`: bytes of user stack copied per sample (0: frame pointers only), set at load
/// time, at most `USER_STACK_MAX`.
#[unsafe(no_mangle)]
static USER_STACK_BYTES: u32 = 0;

/// Where a task's uprobe state lies (`task_struct.utask`; `state`, `vaddr`, `xol_vaddr` in
/// `struct uprobe_task`), set at load time from the kernel's BTF; 0 when unknown.
#[unsafe(no_mangle)]
static TASK_UTASK: u32 = 0;
#[unsafe(no_mangle)]
static UTASK_STATE: u32 = 0;
#[unsafe(no_mangle)]
static UTASK_VADDR: u32 = 0;
#[unsafe(no_mangle)]
static UTASK_XOL_VADDR: u32 = 0;

/// The longest instruction the kernel copies to an out-of-line slot (`MAX_UINSN_BYTES`).
const MAX_UINSN_BYTES: u64 = 16;

/// The user instruction pointer `ip` of the current task as its unwinder should see it: while the
/// kernel single-steps a probed instruction's copy in its out-of-line slot (`uprobe_task.state`
/// not `UTASK_RUNNING`), `ip` lies in the slot, before or after the copy, and stands for the same
/// place at the probed instruction (`vaddr`); elsewhere `ip` itself.
#[inline(always)]
fn stepped_from(ip: u64) -> u64 {
    let task_utask = load_time(&TASK_UTASK);
    if task_utask == 0 {
        return ip;
    }
    // SAFETY: no preconditions; the task is read only through checked reads.
    let task = unsafe { bpf_get_current_task_btf() } as u64;
    let Some(utask) = read_kernel::<u64>(task, task_utask).filter(|&utask| utask != 0) else {
        return ip;
    };
    // `state` is an enum (4 bytes); RUNNING is 0.
    if read_kernel::<u32>(utask, load_time(&UTASK_STATE)).unwrap_or(0) == 0 {
        return ip;
    }
    let xol = read_kernel::<u64>(utask, load_time(&UTASK_XOL_VADDR)).unwrap_or(0);
    let vaddr = read_kernel::<u64>(utask, load_time(&UTASK_VADDR)).unwrap_or(0);
    if xol != 0 && vaddr != 0 && ip >= xol && ip - xol <= MAX_UINSN_BYTES {
        vaddr + (ip - xol)
    } else {
        ip
    }
}

#[perf_event]
pub fn sample(ctx: PerfEventContext) -> u32 {
    // A thread outside xtrace's PID namespace is not sampled.
    let Some(pid_tgid) = current_pid_tgid() else {
        return 0;
    };
    let tgid = (pid_tgid >> 32) as u32;
    if tgid == 0 || !crate::maps::sampled(tgid) || !crate::maps::thread_traced(pid_tgid as u32) {
        return 0;
    }
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // Before the sample, with its time: user space pairs them by thread and time.
    crate::python::walk(pid_tgid, now, crate::python::Caller::Sample);
    let Some(scratch) = SAMPLE_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: `scratch` is this CPU's map value, used by nothing else while this program runs; the
    // stack helpers write at most STACK_BYTES into each frame array.
    let stack_len = unsafe {
        let event = &raw mut (*scratch).event;
        (*event).header = header(KIND_SAMPLE, pid_tgid, now);
        (*event).comm = bpf_get_current_comm().unwrap_or_default();
        let kernel = bpf_get_stack(ctx.as_ptr(), (*event).kernel.as_mut_ptr().cast(), STACK_BYTES, 0);
        (*event).kernel_frames = if kernel > 0 { (kernel / 8) as u32 } else { 0 };
        (*event).user_regs = [0; 3];
        let stack_len = copy_user_stack(scratch);
        (*event).return_slots = list_return_slots(scratch, stack_len);
        (*event).stack_len = stack_len;
        // The frame-pointer walk only when no stack was copied to unwind in user space.
        (*event).user_frames = 0;
        if stack_len == 0 {
            let user = bpf_get_stack(
                ctx.as_ptr(),
                (*event).user.as_mut_ptr().cast(),
                STACK_BYTES,
                u64::from(BPF_F_USER_STACK),
            );
            (*event).user_frames = if user > 0 { (user / 8) as u32 } else { 0 };
        }
        stack_len
    };
    let size = (core::mem::size_of::<SampleEvent>() + stack_len as usize)
        .min(core::mem::size_of::<SampleEvent>() + USER_STACK_MAX);
    // SAFETY: `size` is at most the map value's size, so the record lies within it.
    let record = unsafe { core::slice::from_raw_parts(scratch.cast::<u8>(), size) };
    if EVENTS.output::<[u8]>(record, output_flags(size)).is_err() {
        count(counter::LOST_RING_FULL);
    }
    0
}

/// Copies the current thread's user-mode registers into the scratch record, and up to
/// `USER_STACK_BYTES` of its user stack from the stack pointer up, a page at a time, so that a
/// stack whose mapping ends within the limit is copied up to that end. Returns the bytes copied.
///
/// # Safety
/// `scratch` must point at this CPU's scratch value.
#[inline(always)]
pub(crate) unsafe fn copy_user_stack(scratch: *mut SampleScratch) -> u32 {
    let limit = load_time(&USER_STACK_BYTES).min(USER_STACK_MAX as u32);
    if limit == 0 {
        return 0;
    }
    let mut regs = [0u64; PT_REGS_SIZE / 8];
    // SAFETY: the task pointer comes from the helper that types it; its saved user registers are
    // read with the fault-tolerant helper.
    unsafe {
        let user_regs = bpf_task_pt_regs(bpf_get_current_task_btf());
        if user_regs == 0
            || bpf_probe_read_kernel(
                regs.as_mut_ptr().cast(),
                PT_REGS_SIZE as u32,
                user_regs as *const core::ffi::c_void,
            ) != 0
        {
            return 0;
        }
    }
    let sp = regs[PT_REGS_SP / 8];
    // SAFETY: as the caller promises.
    unsafe {
        (*scratch).event.user_regs[USER_IP] = stepped_from(regs[PT_REGS_IP / 8]);
        (*scratch).event.user_regs[USER_SP] = sp;
        (*scratch).event.user_regs[USER_BP] = regs[PT_REGS_BP / 8];
    }
    let stack = unsafe { (&raw mut (*scratch).stack).cast::<u8>() };
    let mut copied: u32 = 0;
    // The first chunk ends at the next page boundary; the others are whole pages.
    let mut chunk = STACK_CHUNK as u32 - (sp as u32 & (STACK_CHUNK as u32 - 1));
    for _ in 0..USER_STACK_MAX / STACK_CHUNK + 1 {
        if copied >= limit {
            break;
        }
        let n = chunk.min(limit - copied);
        if n > STACK_CHUNK as u32 {
            break;
        }
        // copied < limit <= USER_STACK_MAX, a power of two: the mask changes nothing, and tells
        // the verifier that `stack + offset + n` stays within the chunk of room past the limit.
        let offset = copied & (USER_STACK_MAX as u32 - 1);
        // SAFETY: offset + n <= USER_STACK_MAX + STACK_CHUNK, the stack area's size.
        let failed = unsafe {
            bpf_probe_read_user(
                stack.add(offset as usize).cast(),
                n,
                (sp + u64::from(copied)) as *const core::ffi::c_void,
            )
        } != 0;
        if failed {
            break;
        }
        copied += n;
        chunk = STACK_CHUNK as u32;
    }
    copied
}

/// Lists the innermost `MAX_RETURN_SLOTS` open traced calls with the return address each found
/// at entry (`SampleEvent::returns`), innermost first, for user space to put back where a return
/// probe's trampoline is in the copied stack. (Only user space knows where the trampoline is
/// mapped, so only it can tell a live trampoline from a slot reused since by something else, such
/// as the slot of a call an exception or a longjmp left; it also skips slots outside the copy.)
/// The loop has no branch on the values it copies, so the verifier walks it once.
///
/// # Safety
/// `scratch` must point at this CPU's scratch value.
#[inline(always)]
pub(crate) unsafe fn list_return_slots(scratch: *mut SampleScratch, copied: u32) -> u32 {
    if !keep_return_addresses() || copied < 8 {
        return 0;
    }
    let Some(calls) = STACKS.current(false) else {
        return 0;
    };
    // SAFETY: as the caller promises; the thread's storage is only read here.
    unsafe {
        let depth = ((*calls).depth as usize).min(MAX_DEPTH);
        let listed = depth.min(MAX_RETURN_SLOTS);
        for i in 0..MAX_RETURN_SLOTS {
            if i >= listed {
                break;
            }
            let call = &(*calls).calls[(depth - 1 - i) & (MAX_DEPTH - 1)];
            (*scratch).event.returns[i] = [call.frame, call.return_address];
        }
        listed as u32
    }
}
