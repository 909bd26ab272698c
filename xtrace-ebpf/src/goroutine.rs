//! Open calls of Go code, kept per goroutine. The Go runtime runs goroutines on threads as it
//! sees fit: one parked inside a traced call (a channel receive, a sleep, a lock) lets its thread
//! run others, which make traced calls of their own, and resumes later, often on another thread.
//! Kept per thread, its open call was dropped or nested under another goroutine's, and paired with
//! a later call's return at the same stack address. So a function of Go code whose exits are
//! probed at their instructions keeps its calls in the stack of its goroutine: Go's register ABI
//! keeps the running goroutine (`runtime.g`) in `r14`, and its first two words are the bounds of
//! the goroutine's stack (`stack.lo`, `stack.hi`). A call is the goroutine's when its stack pointer
//! lies within them (C code of a cgo program, or an assembly function that uses `r14` otherwise,
//! fails the test and keeps its calls per thread). Its frame is kept as an offset from the stack's
//! top, which stays the same when the runtime moves the stack to grow it. The key holds the
//! program's exec count (`task_struct.self_exec_id`, which each exec raises and each new thread
//! copies from its creator) too: after an exec the new program's first goroutine lies at the
//! address the old one's did, and must not find its open calls. (Not the address space, `mm`: a
//! second exec may get the first one's freed `mm` at the same address.)
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_task, bpf_probe_read_user},
    macros::map,
    maps::{Array, HashMap, LruHashMap},
};
use xtrace_common::probe::EntryStack;

use crate::{
    maps::{current_pid_tgid, load_time, read_kernel},
    regs::user_r14,
};

/// Open calls per goroutine with any, keyed by (process id, `runtime.g` address, exec count);
/// an element is removed when its last open call ends. Sized at load: `MAX_GOROUTINES` when Go
/// code is traced, else 1 (most traced programs have none). Preallocated, as every hash map the
/// programs use: before Linux 6.1 the verifier warns (a kernel WARNING, a panic under
/// `panic_on_warn`) when a tracing program uses one allocated as elements are inserted.
#[map]
static GO_STACKS: HashMap<[u64; 3], EntryStack> = HashMap::with_max_entries(1, 0);

/// Offset of `self_exec_id` (a u64 since Linux 5.8) in `struct task_struct`, set at load time
/// from the kernel's BTF (0: unknown, and the key's exec count is 0).
#[unsafe(no_mangle)]
static TASK_EXEC_ID: u32 = 0;

/// The exec count of each process that ran exec since the capture began (the latest 1024): the
/// goroutines its old program left with open calls are keyed by an older one, and user space
/// removes them (xtrace/src/bpf/goroutines.rs).
#[map]
static GO_EXECS: LruHashMap<u32, u64> = LruHashMap::with_max_entries(1024, 0);

/// Notes that the current task's process ran exec (the task just finished it), when Go code is
/// traced.
#[inline(always)]
pub fn exec_done() {
    if load_time(&TASK_EXEC_ID) == 0 {
        return;
    }
    if let Some(ids) = current_pid_tgid() {
        let _ = GO_EXECS.insert((ids >> 32) as u32, exec_count(), 0);
    }
}

/// One empty stack, never written: what a goroutine's stack starts as.
#[map]
static EMPTY_STACK: Array<EntryStack> = Array::with_max_entries(1, 0);

/// The goroutine a thread of process `tgid` runs with stack pointer `sp` (`regs`): its key in
/// [`GO_STACKS`], and the frame at `sp` as the goroutine keeps it (see the module's documentation).
/// None when `r14` holds no goroutine whose stack `sp` is on.
#[inline(always)]
pub fn running(tgid: u32, regs: *const aya_ebpf::bindings::pt_regs, sp: u64) -> Option<([u64; 3], u64)> {
    let g = user_r14(regs);
    // SAFETY: a checked read of user memory.
    let [lo, hi] = unsafe { bpf_probe_read_user(g as *const [u64; 2]) }.ok()?;
    if !(lo <= sp && sp < hi) {
        return None;
    }
    // Below the top, so the offset wraps: deeper frames stay lower, as addresses are.
    Some(([u64::from(tgid), g, exec_count()], sp.wrapping_sub(hi)))
}

/// The current task's exec count, or 0.
#[inline(always)]
fn exec_count() -> u64 {
    let offset = load_time(&TASK_EXEC_ID);
    if offset == 0 {
        return 0;
    }
    // SAFETY: no preconditions; the task is read only through a checked read.
    read_kernel(unsafe { bpf_get_current_task() }, offset).unwrap_or(0)
}

/// The stack of open calls of the goroutine `key`, made empty when it has none and `create`.
#[inline(always)]
pub fn stack(key: &[u64; 3], create: bool) -> Option<&'static mut EntryStack> {
    let found = match GO_STACKS.get_ptr_mut(key) {
        Some(found) => found,
        None if create => {
            let empty = EMPTY_STACK.get(0)?;
            GO_STACKS.insert(key, empty, u64::from(BPF_NOEXIST)).ok()?;
            GO_STACKS.get_ptr_mut(key)?
        }
        None => return None,
    };
    // SAFETY: a map value; only the goroutine's own calls touch it, and a goroutine runs on one
    // thread at a time.
    Some(unsafe { &mut *found })
}

/// Forgets goroutine `key`, whose last open call has ended.
#[inline(always)]
pub fn done(key: &[u64; 3]) {
    let _ = GO_STACKS.remove(key);
}
