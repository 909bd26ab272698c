//! Off-CPU time (`--off-cpu`): `off_cpu_switch` (BTF tracepoint sched_switch) notes when a traced
//! thread leaves its CPU, in which state and system call, with its user stack walked by frame
//! pointers; when the thread is switched back in it measures the interval. An interval of at
//! least `OFF_CPU_MIN_NS` asleep in a system call waits in the thread's storage until the thread
//! returns from that call (`off_cpu_return`, raw tracepoint sys_exit), which sends it with the
//! user stack copied there, unwound in user space as a CPU sample's, and its Python frames walked
//! there (`python::walk`) as for a CPU sample; every other interval is added up in
//! `OFF_CPU_TOTALS`. `off_cpu_waking` (sched_waking, run by the waker) notes who woke a traced
//! thread, and, when it waited on a lock (a futex wait: its address is kept with the wait), the
//! waker's user stack: where the holder released it.
use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{
        bpf_get_current_comm, bpf_get_current_task_btf, bpf_get_stack, bpf_ktime_get_ns, bpf_task_pt_regs,
    },
    macros::{btf_tracepoint, map, raw_tracepoint},
    maps::{HashMap, PerCpuArray, StackTrace},
    programs::tracing::StackIdContext,
    programs::{BtfTracePointContext, RawTracePointContext},
    EbpfContext,
};
use xtrace_common::{
    event::USER_STACK_MAX,
    offcpu::{
        futex_waits, runs_soft_interrupts, state, waker_context, OffCpuKey, OffCpuScratch, OffCpuThread,
        OffCpuTotal, KIND_OFF_CPU, NO_SYSCALL, OFF_CPU_KEYS, SYS_FUTEX,
    },
    probe::counter,
};

use crate::{
    maps::{
        add, count, current_maybe_sampled, current_pid_tgid, is_self, load_time, maybe_sampled, output_flags,
        read_kernel, sampled, thread_traced, EVENTS,
    },
    regs::{PT_REGS_CS, PT_REGS_DI, PT_REGS_ORIG_AX, PT_REGS_SI},
    task_storage::TaskStorage,
    uprobe::header,
};

/// `--off-cpu`'s MIN: shorter intervals are only added up. Set at load time.
#[unsafe(no_mangle)]
static OFF_CPU_MIN_NS: u64 = 1_000_000;

/// Where `task_struct.__state` lies (`state` before 5.14), from the kernel's BTF at load time.
#[unsafe(no_mangle)]
static TASK_STATE: u32 = 0;

/// The kernel's interrupt entry code (`__irqentry_text_start` to `__irqentry_text_end`, from
/// /proc/kallsyms at load time; 0 to 0 when it shows no addresses): a kernel stack with a return
/// address in it was taken in an interrupt, or in the soft interrupts run as one ends.
#[unsafe(no_mangle)]
static IRQ_ENTRY_START: u64 = 0;
#[unsafe(no_mangle)]
static IRQ_ENTRY_END: u64 = 0;

/// Where `task_struct.stack` lies (the base of a task's kernel stack), from the kernel's BTF at
/// load time; 0 when not found (it is never the first member): every wake-up's stack is walked.
#[unsafe(no_mangle)]
static TASK_STACK: u32 = 0;

/// Kernel frames looked at for an interrupt's entry: an I/O completion's wake-up is ~25 deep.
const WAKER_FRAMES: usize = 48;

/// Where `off_cpu_waking` walks the kernel stack (a per-CPU buffer: the program can be
/// interrupted by another program, never by itself).
#[map]
static WAKER_STACK: PerCpuArray<[u64; WAKER_FRAMES]> = PerCpuArray::with_max_entries(1, 0);

#[unsafe(link_section = ".maps")]
#[unsafe(no_mangle)]
static OFF_CPU: TaskStorage<OffCpuThread> = TaskStorage::new();

#[map]
static OFF_CPU_STACKS: StackTrace = StackTrace::with_max_entries(OFF_CPU_KEYS, 0);

#[map]
static OFF_CPU_TOTALS: HashMap<OffCpuKey, OffCpuTotal> = HashMap::with_max_entries(OFF_CPU_KEYS, 0);

#[map]
static OFF_CPU_SCRATCH: PerCpuArray<OffCpuScratch> = PerCpuArray::with_max_entries(1, 0);

/// sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next, ...): runs in
/// `prev`'s context.
#[btf_tracepoint(function = "sched_switch")]
pub fn off_cpu_switch(ctx: BtfTracePointContext) -> u32 {
    // The tracepoint's arguments, as its prototype has them.
    let (preempt, prev, next) = (
        ctx.arg::<u64>(0) & 0xff != 0,
        ctx.arg::<*mut core::ffi::c_void>(1),
        ctx.arg::<*mut core::ffi::c_void>(2),
    );
    // An untraced thread switched out and one switched in cost two look-ups and nothing else.
    let next_thread = OFF_CPU.of(next);
    let prev_thread = traced_current();
    if prev_thread.is_none() && next_thread.is_none() {
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some((thread, ids)) = prev_thread {
        // SAFETY: the current thread's own storage.
        left(&ctx, unsafe { &mut *thread }, ids, preempt, prev, now);
    }
    if let Some(thread) = next_thread {
        // SAFETY: `next`'s own storage; it is not running, so nothing else writes it.
        back(unsafe { &mut *thread }, now);
    }
    0
}

/// The current thread's storage and ids when it is traced, created at its first switch: a thread
/// that has storage is traced (it was created only for one), so only a thread without asks
/// whether its process is sampled.
#[inline(always)]
fn traced_current() -> Option<(*mut OffCpuThread, u64)> {
    let ids = current_pid_tgid()?;
    let (pid, tid) = ((ids >> 32) as u32, ids as u32);
    // A thread of a process that is certainly not sampled has no storage: one array read.
    if pid == 0 || !maybe_sampled(pid) {
        return None;
    }
    if let Some(thread) = OFF_CPU.current(false) {
        return Some((thread, ids));
    }
    if is_self(ids) || !sampled(pid) || !thread_traced(tid) {
        return None;
    }
    match OFF_CPU.current(true) {
        Some(thread) => Some((thread, ids)),
        None => {
            count(counter::LOST_OFF_CPU);
            None
        }
    }
}

/// `prev` (the current thread, traced) leaves its CPU: notes when, how and where.
#[inline(always)]
fn left(
    ctx: &BtfTracePointContext,
    thread: &mut OffCpuThread,
    ids: u64,
    preempt: bool,
    prev: *mut core::ffi::c_void,
    now: u64,
) {
    let (pid, tid) = ((ids >> 32) as u32, ids as u32);
    back_unseen(thread, now, false);
    let sleep = read_kernel::<u32>(prev as u64, load_time(&TASK_STATE)).unwrap_or(0) & 3;
    let key = &mut thread.key;
    key.state = if preempt { state::RUNNABLE } else { sleep };
    thread.woken_ns = 0;
    // SAFETY: the BTF pointer of the current task; its saved user registers are read with a
    // checked read.
    let regs = unsafe { bpf_task_pt_regs(prev.cast()) } as u64;
    // A thread waiting for a CPU waits for the same thing wherever it was.
    key.syscall = match (regs, key.state) {
        (0, _) | (_, state::RUNNABLE) => NO_SYSCALL,
        (regs, _) => syscall_number(regs),
    };
    // A futex wait waits on a lock (or a condition variable): its address, the call's first
    // argument, still in the saved registers.
    key.lock = match key.syscall {
        SYS_FUTEX if read_kernel::<u64>(regs, PT_REGS_SI as u32).is_some_and(futex_waits) => {
            read_kernel::<u64>(regs, PT_REGS_DI as u32).unwrap_or(0)
        }
        _ => 0,
    };
    key.user_stack = ctx
        .get_stackid(&OFF_CPU_STACKS, u64::from(BPF_F_USER_STACK))
        .map_or(-1, |id| id as i32);
    key.pid = pid;
    key.tid = tid;
    thread.left_ns = now;
    // A wait kept for another system call's return, which was not seen: added up, not merged.
    let (pending, key) = (&thread.pending, &thread.key);
    if pending.duration_ns != 0 && key.state != state::RUNNABLE && pending.syscall != key.syscall {
        set_aside(thread);
    }
}

/// Ends the interval of a thread that is running again although its switch back in was not
/// seen: a kernel may leave a context switch untraced (one guest kernel skips sched_switch when
/// the task switched from is its own agent's), and the wait would otherwise be lost with the
/// thread's next `left`. In its return from the system call it slept in (`at_return`) the wait
/// ends at `now`, so the wait for a CPU still counts; leaving its CPU again, it ends when the
/// thread was woken (or `now`, not woken that was seen), its time waiting for a CPU unknown.
#[inline(always)]
fn back_unseen(thread: &mut OffCpuThread, now: u64, at_return: bool) {
    if thread.left_ns == 0 {
        return;
    }
    let woken = thread.woken_ns;
    let end = match at_return || woken <= thread.left_ns || woken > now {
        true => now,
        false => woken,
    };
    back(thread, end);
}

/// The system call number in the saved user registers at `regs` (`orig_ax`), or [`NO_SYSCALL`]:
/// registers saved on an interrupt or a fault hold -1 there, and unreadable ones count as none.
#[inline(always)]
fn syscall_number(regs: u64) -> i32 {
    read_kernel::<i64>(regs, PT_REGS_ORIG_AX as u32).map_or(NO_SYSCALL, |nr| nr.max(-1) as i32)
}

/// A traced thread is switched back in: its interval is added up, or kept to send when it
/// returns from the system call it slept in.
#[inline(always)]
fn back(thread: &mut OffCpuThread, now: u64) {
    if thread.left_ns == 0 {
        return;
    }
    let start = thread.left_ns;
    thread.left_ns = 0;
    // Woken since it left: the wait ends there, and the rest is the wait for a CPU.
    let woken = thread.woken_ns;
    let seen = woken > start && woken <= now;
    let (duration, delay) = match seen {
        true => (woken - start, now - woken),
        false => (now.saturating_sub(start), 0),
    };
    let key = &thread.key;
    let asleep = key.state != state::RUNNABLE && key.syscall != NO_SYSCALL;
    if asleep && (thread.pending.duration_ns != 0 || duration >= load_time(&OFF_CPU_MIN_NS)) {
        let pending = &mut thread.pending;
        if pending.duration_ns == 0 {
            pending.runnable_ns = 0;
            pending.start_ns = start;
            pending.state = key.state;
            pending.syscall = key.syscall;
            pending.lock = key.lock;
            pending.sleeps = 0;
        }
        // Another sleep of the same system call: one wait, summed.
        pending.duration_ns += duration;
        pending.runnable_ns += delay;
        pending.sleeps += 1;
        if key.state == state::UNINTERRUPTIBLE {
            pending.state = state::UNINTERRUPTIBLE;
        }
        // The waker of this sleep when its wake-up was seen; else none, not an earlier sleep's.
        (pending.waker_pid, pending.waker_tid, pending.waker_comm) = match seen {
            true => (thread.waker_pid, thread.waker_tid, thread.waker_comm),
            false => (0, 0, [0; 16]),
        };
        (pending.waker_stack, pending.waker_context) = match seen {
            true => (thread.waker_stack, thread.waker_context),
            false => (-1, waker_context::THREAD),
        };
        return;
    }
    // The thread's own key: the map copies it.
    add_up(key, duration);
    if delay > 0 {
        let runnable = OffCpuKey {
            state: state::RUNNABLE,
            syscall: NO_SYSCALL,
            lock: 0,
            ..*key
        };
        add_up(&runnable, delay);
    }
}

/// Adds a kept wait whose system call's return was not seen (or was another call's) to the
/// totals, without a stack, and forgets it.
#[inline(always)]
fn set_aside(thread: &mut OffCpuThread) {
    let pending = &thread.pending;
    let key = OffCpuKey {
        user_stack: -1,
        state: pending.state,
        syscall: pending.syscall,
        lock: pending.lock,
        ..thread.key
    };
    add_up(&key, pending.duration_ns);
    thread.pending.duration_ns = 0;
}

/// Adds one wait of `duration` to `key`'s total.
#[inline(always)]
fn add_up(key: &OffCpuKey, duration: u64) {
    match OFF_CPU_TOTALS.get_ptr_mut(key) {
        // SAFETY: a map value; concurrent adds to one key are atomic.
        Some(total) => unsafe {
            add(&raw mut (*total).count, 1);
            add(&raw mut (*total).total_ns, duration);
        },
        None => {
            let first = OffCpuTotal {
                count: 1,
                total_ns: duration,
            };
            if OFF_CPU_TOTALS.insert(key, first, 0).is_err() {
                count(counter::LOST_OFF_CPU);
            }
        }
    }
}

/// sched_waking(struct task_struct *p): runs in the waker's context (or an interrupt's).
#[btf_tracepoint(function = "sched_waking")]
pub fn off_cpu_waking(ctx: BtfTracePointContext) -> u32 {
    // The tracepoint's argument, as its prototype has it.
    let task = ctx.arg::<*mut core::ffi::c_void>(0);
    let Some(thread) = OFF_CPU.of(task) else {
        return 0;
    };
    // SAFETY: the woken thread's storage; it is not running yet.
    let thread = unsafe { &mut *thread };
    // From an interrupt (a timer, an I/O completion) the current task is whichever was running,
    // no waker: the wake-up says so, with no ids.
    let waker = waker_of(&ctx);
    let ids = match waker {
        Waker::Interrupt => 0,
        Waker::Task { .. } => current_pid_tgid().unwrap_or(0),
    };
    // The idle task (ids 0) has a name, `swapper/N`, and so has a thread outside xtrace's PID
    // namespace (ids 0 too): that tells their wake-ups from unseen ones.
    let comm = match waker {
        Waker::Interrupt => [0; 16],
        Waker::Task { .. } => bpf_get_current_comm().unwrap_or_default(),
    };
    // A `ksoftirqd/N` kernel thread finishing an interrupt's work: the interrupt's wake-up.
    let softirq = matches!(waker, Waker::Task { maybe_kernel: true })
        && ids != 0
        && runs_soft_interrupts(&comm)
        && in_kernel_thread();
    let (ids, comm) = match softirq {
        true => (0, [0; 16]),
        false => (ids, comm),
    };
    thread.waker_context = match ids {
        0 if softirq || matches!(waker, Waker::Interrupt) => waker_context::INTERRUPT,
        _ => waker_context::THREAD,
    };
    thread.waker_pid = (ids >> 32) as u32;
    thread.waker_tid = ids as u32;
    thread.waker_comm = comm;
    // The waker of a thread waiting on a lock released it: where it was is the holder's stack.
    thread.waker_stack = match (ids, thread.key.lock) {
        (0, _) | (_, 0) => -1,
        _ => ctx
            .get_stackid(&OFF_CPU_STACKS, u64::from(BPF_F_USER_STACK))
            .map_or(-1, |id| id as i32),
    };
    thread.woken_ns = unsafe { bpf_ktime_get_ns() };
    0
}

/// What runs a wake-up.
#[derive(Clone, Copy)]
enum Waker {
    /// An interrupt, on whichever task it came in on.
    Interrupt,
    /// The current task; `maybe_kernel` when it may be a kernel thread (its saved registers say
    /// system call 0, as a kernel thread's all-0 ones do, or were not looked at): only then is its
    /// name compared with `ksoftirqd/`.
    Task { maybe_kernel: bool },
}

/// What runs this wake-up: an interrupt when the kernel stack passes through the interrupt entry
/// code (the current task is then whichever one the interrupt came in on), else the current task.
/// A wake-up that certainly runs in a system call or a kernel thread is told without walking the
/// stack.
#[inline(always)]
fn waker_of(ctx: &BtfTracePointContext) -> Waker {
    if let Some(syscall) = task_context_syscall(ctx) {
        return Waker::Task {
            maybe_kernel: syscall == 0,
        };
    }
    match in_interrupt_entry(ctx) {
        true => Waker::Interrupt,
        false => Waker::Task { maybe_kernel: true },
    }
}

/// Whether the current task is a kernel thread: its saved user code segment is 0 (a user task's
/// is the user one, in a system call as in an interrupt). Read only for a `ksoftirqd/` name.
#[inline(always)]
fn in_kernel_thread() -> bool {
    // SAFETY: the helpers take the current task's BTF pointer; the field is read with a checked
    // read.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) as u64 };
    read_kernel::<u64>(regs, PT_REGS_CS as u32) == Some(0)
}

/// Whether the kernel stack passes through the interrupt entry code (`IRQ_ENTRY_START`..).
#[inline(always)]
fn in_interrupt_entry(ctx: &BtfTracePointContext) -> bool {
    let (start, end) = (load_time(&IRQ_ENTRY_START), load_time(&IRQ_ENTRY_END));
    if start == 0 || end <= start {
        return false;
    }
    let Some(frames) = WAKER_STACK.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: this CPU's buffer, WAKER_FRAMES words. The helper zeroes what it does not fill
    // (all of it on failure), and no zero lies in the entry code.
    unsafe { bpf_get_stack(ctx.as_ptr(), frames.cast(), (WAKER_FRAMES * 8) as u32, 0) };
    // SAFETY: as above.
    let frames = unsafe { &*frames };
    // A constant bound: the 6.1 verifier cannot bound a loop that stops at the frames walked.
    for &ip in frames {
        if ip >= start && ip < end {
            return true;
        }
    }
    false
}

/// When this certainly runs in the current task's own context, the system call its saved user
/// registers are in: on its kernel stack, whose saved user registers are a system call's (or a
/// kernel thread's, all 0: system call 0). On x86-64 an interrupt of kernel code, and soft
/// interrupts, run on the CPU's interrupt stack; only an interrupt (or a fault) of user code runs
/// on the task's stack, and its entry sets the saved `orig_ax` to -1. The tracepoint's arguments
/// (`ctx`) lie on the stack it fired on. Anything else (an interrupt, a fault, `TASK_STACK`
/// unknown) is None, left to the stack walk, which says which it is.
#[inline(always)]
fn task_context_syscall(ctx: &BtfTracePointContext) -> Option<i64> {
    // An idle task (ids 0) takes some interrupts on its own stack: left to the walk.
    let offset = load_time(&TASK_STACK);
    if offset == 0 || aya_ebpf::helpers::bpf_get_current_pid_tgid() == 0 {
        return None;
    }
    let slot = WAKER_STACK.get_ptr_mut(0)?;
    // SAFETY: this CPU's buffer (see WAKER_STACK). The arguments' address is passed through it to
    // make it a number: only compared, never read. (The verifier lets a tracing program, which
    // needs CAP_PERFMON, store a pointer in a map.)
    let here = unsafe {
        let slot = slot.cast::<u64>();
        core::ptr::write_volatile(slot, ctx.as_ptr() as u64);
        core::ptr::read_volatile(slot)
    };
    // SAFETY: the helpers take the current task's BTF pointer; its fields are read with checked
    // reads.
    let (task, regs) = unsafe {
        let task = bpf_get_current_task_btf();
        (task as u64, bpf_task_pt_regs(task) as u64)
    };
    let stack = read_kernel::<u64>(task, offset)?;
    if here < stack || here >= regs {
        return None;
    }
    read_kernel::<i64>(regs, PT_REGS_ORIG_AX as u32).filter(|&nr| nr >= 0)
}

/// sys_exit: a traced thread returning from a system call it slept in for at least MIN sends that
/// interval, with the stack it returns to.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn off_cpu_return(ctx: RawTracePointContext) -> u32 {
    // Every return of every thread comes here: most are of processes certainly not traced.
    if !current_maybe_sampled() {
        return 0;
    }
    let Some(thread) = OFF_CPU.current(false) else {
        return 0;
    };
    // SAFETY: the current thread's own storage.
    let thread = unsafe { &mut *thread };
    // Most returns are from calls that did not sleep: nothing to end, nothing to send.
    if thread.left_ns == 0 && thread.pending.duration_ns == 0 {
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    back_unseen(thread, now, true);
    if thread.pending.duration_ns == 0 {
        return 0;
    }
    // The system call returning, from the saved registers (the tracepoint's first argument).
    let regs: u64 = ctx.arg(0);
    if syscall_number(regs) != thread.pending.syscall {
        set_aside(thread);
        return 0;
    }
    let Some(scratch) = OFF_CPU_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    let ids = (u64::from(thread.key.pid) << 32) | u64::from(thread.key.tid);
    // Before the wait, with its time, as before a CPU sample: the thread is the current one, so
    // its Python frames are read as the sampler reads them.
    crate::python::walk(ids, now, crate::python::Caller::OffCpu);
    // SAFETY: this CPU's scratch value, used by nothing else while this program runs.
    let stack_len = unsafe {
        (*scratch).header = header(KIND_OFF_CPU, ids, now);
        (*scratch).interval = thread.pending;
        let sample = &raw mut (*scratch).sample;
        let event = &raw mut (*sample).event;
        (*event).header = header(KIND_OFF_CPU, ids, now);
        (*event).comm = bpf_get_current_comm().unwrap_or_default();
        (*event).kernel_frames = 0;
        (*event).user_frames = 0;
        (*event).user_regs = [0; 3];
        let stack_len = crate::sample::copy_user_stack(sample);
        (*event).return_slots = crate::sample::list_return_slots(sample, stack_len);
        (*event).stack_len = stack_len;
        stack_len
    };
    thread.pending.duration_ns = 0;
    let fixed = core::mem::size_of::<xtrace_common::offcpu::OffCpuEvent>();
    let size = (fixed + stack_len as usize).min(fixed + USER_STACK_MAX);
    // SAFETY: `size` is at most the map value's size, so the record lies within it.
    let record = unsafe { core::slice::from_raw_parts(scratch.cast::<u8>(), size) };
    if EVENTS.output::<[u8]>(record, output_flags(size)).is_err() {
        count(counter::LOST_OFF_CPU);
    }
    0
}
