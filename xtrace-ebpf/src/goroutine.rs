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
//! top, which stays the same when the runtime moves the stack to grow it.
use aya_ebpf::{
    helpers::bpf_probe_read_user,
    macros::map,
    maps::{Array, HashMap},
};
use xtrace_common::probe::{EntryStack, MAX_GOROUTINES};

use crate::regs::user_r14;

/// Map flag: allocate elements when inserted, not all at load (most programs have no Go code).
const BPF_F_NO_PREALLOC: u32 = 1;
/// Map update flag: only if the key is absent.
const BPF_NOEXIST: u64 = 1;

/// Open calls per goroutine with any, keyed by (process id, `runtime.g` address); an element is
/// removed when its last open call ends.
#[map]
static GO_STACKS: HashMap<[u64; 2], EntryStack> =
    HashMap::with_max_entries(MAX_GOROUTINES, BPF_F_NO_PREALLOC);

/// One empty stack, never written: what a goroutine's stack starts as.
#[map]
static EMPTY_STACK: Array<EntryStack> = Array::with_max_entries(1, 0);

/// The goroutine a thread of process `tgid` runs with stack pointer `sp` (`regs`): its key in
/// [`GO_STACKS`], and the frame at `sp` as the goroutine keeps it (see the module's documentation).
/// None when `r14` holds no goroutine whose stack `sp` is on.
#[inline(always)]
pub fn running(tgid: u32, regs: *const aya_ebpf::bindings::pt_regs, sp: u64) -> Option<([u64; 2], u64)> {
    let g = user_r14(regs);
    // SAFETY: a checked read of user memory.
    let [lo, hi] = unsafe { bpf_probe_read_user(g as *const [u64; 2]) }.ok()?;
    // Below the top, so the offset wraps: deeper frames stay lower, as addresses are.
    (lo <= sp && sp < hi).then_some(([u64::from(tgid), g], sp.wrapping_sub(hi)))
}

/// The stack of open calls of the goroutine `key`, made empty when it has none and `create`.
#[inline(always)]
pub fn stack(key: &[u64; 2], create: bool) -> Option<&'static mut EntryStack> {
    let found = match GO_STACKS.get_ptr_mut(key) {
        Some(found) => found,
        None if create => {
            let empty = EMPTY_STACK.get(0)?;
            GO_STACKS.insert(key, empty, BPF_NOEXIST).ok()?;
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
pub fn done(key: &[u64; 2]) {
    let _ = GO_STACKS.remove(key);
}
