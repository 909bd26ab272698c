//! Python frames at sample time: for a process user space recognised as CPython (`PY_PROCS`, its
//! layout keyed by process id), finds the sampled thread's `PyThreadState` and walks its frame
//! chain, sending each frame's code object, an identity word and its instruction as a
//! `PyStackEvent` just before the record it belongs to, with that record's time. One piece that
//! every program whose thread is the current one calls: the CPU sampler, `off_cpu_return` at
//! the end of a system call a thread waited in, and `call_stack` at a traced call's entry
//! (`--stacks`); each has its own scratch ([`Caller`]).
//!
//! The thread state is the one whose `thread_id` (its thread's `pthread_self()`, which on x86-64
//! is the thread's FS base) equals the task's `thread.fsbase` (offset from the kernel's BTF):
//! no libc TLS arithmetic, and 3.10 and 3.11 have no thread-local symbol for it. A match is kept
//! per thread in `PY_THREADS` and checked again at each use (the thread state of an exited
//! thread may be freed, and its memory reused).
//!
//! The walk is a bounded loop, which Linux 5.3 and later verify without `bpf_loop`: at most
//! `WALK_STEPS` frames are read (shim frames are read but not sent). Each frame and each code
//! object is read once, `frame_bytes` / `code_bytes` at a time, into per-CPU scratch, and its
//! fields taken from there at aligned offsets.
use aya_ebpf::{
    helpers::{bpf_get_current_task, bpf_probe_read_user, generated::bpf_probe_read_user as read_user_raw},
    macros::map,
    maps::{HashMap, LruHashMap, PerCpuArray},
};
use xtrace_common::{
    event::KIND_PY_STACK,
    probe::counter,
    python::{
        PyFrame, PyLayout, PyStackEvent, PY_FRAME_ENTRY, PY_KIND_FRAME_OBJECTS, PY_KIND_IS_ENTRY,
        PY_MAX_FRAMES, PY_NO_FIELD, PY_OWNED_BY_CSTACK, PY_STACK_HEAD, PY_STACK_READ_FAILED,
        PY_STACK_TRUNCATED, PY_WINDOW,
    },
};

use crate::{
    maps::{count, load_time, output_flags, read_kernel, EVENTS},
    uprobe::header,
};

/// Frames read per walk at most: the sent ones and the shims between them.
const WALK_STEPS: usize = PY_MAX_FRAMES + 32;
/// Thread states looked at per process when a thread's is not known yet.
const MAX_THREADS: usize = 64;

/// Layouts of the recognised CPython processes, by process id; filled by user space.
#[map]
static PY_PROCS: HashMap<u32, PyLayout> = HashMap::with_max_entries(1024, 0);

/// The thread state found for a thread, by (process id << 32 | thread id).
#[map]
static PY_THREADS: LruHashMap<u64, u64> = LruHashMap::with_max_entries(16384, 0);

/// Set to 1 at load time when Python frames are walked (not `--no-python`); when 0 the verifier
/// drops the walk.
#[unsafe(no_mangle)]
static PYTHON: u8 = 0;

/// Offset of `thread.fsbase` in `struct task_struct`, set at load time from the kernel's BTF.
#[unsafe(no_mangle)]
static TASK_FSBASE: u32 = 0;

/// Room an object is read into: a power of two, so that a read's length masked by it is
/// bounded for the verifier whatever the compiler knows of it.
const ROOM: usize = 256;
const _: () = assert!(PY_WINDOW <= ROOM);
type Window = [u64; ROOM / 8];

/// The record under construction and the windows objects are read into.
#[repr(C)]
pub struct PyScratch {
    event: PyStackEvent,
    frame: Window,
    code: Window,
}

/// Who walks, each with its own scratch value per CPU: a CPU sample can interrupt a system
/// call's exit program or a uprobe program mid-walk on the same CPU, and must not overwrite its
/// record.
#[derive(Clone, Copy)]
#[repr(u32)]
pub enum Caller {
    /// The CPU sampler (perf event).
    Sample = 0,
    /// `off_cpu_return` (raw tracepoint sys_exit).
    OffCpu = 1,
    /// `call_stack` (uprobe at a traced call's entry, `--stacks`).
    Entry = 2,
}

/// One per CPU and [`Caller`].
#[map]
static PY_SCRATCH: PerCpuArray<PyScratch> = PerCpuArray::with_max_entries(3, 0);

/// The u64 at `address` in the process.
#[inline(always)]
fn user_u64(address: u64) -> Option<u64> {
    // SAFETY: a checked read of user memory.
    unsafe { bpf_probe_read_user(address as *const u64) }.ok()
}

/// Reads `len` bytes (user space keeps it within `PY_WINDOW`) at `address` into `window`.
#[inline(always)]
fn read_window(window: &mut Window, address: u64, len: u32) -> bool {
    let len = len & (ROOM as u32 - 1);
    // SAFETY: `window` has room for ROOM bytes, and the masked `len` is below that.
    unsafe {
        read_user_raw(
            window.as_mut_ptr().cast(),
            len,
            address as *const core::ffi::c_void,
        ) == 0
    }
}

/// The u64 at byte `offset` (a multiple of 8) of `window`.
#[inline(always)]
fn word(window: &Window, offset: u32) -> u64 {
    // Masked, not compared: the verifier must see the index bounded in the register it uses.
    window[(offset / 8) as usize & (ROOM / 8 - 1)]
}

/// The u32 at byte `offset` (a multiple of 4) of `window`.
#[inline(always)]
fn half(window: &Window, offset: u32) -> u32 {
    let w = word(window, offset & !7);
    (w >> ((offset & 4) * 8)) as u32
}

/// The byte at `offset` of `window`.
#[inline(always)]
fn byte(window: &Window, offset: u32) -> u8 {
    let w = word(window, offset & !7);
    (w >> ((offset & 7) * 8)) as u8
}

/// Sends the Python frames of thread `pid_tgid`, the current one, at `now`, if its process is a
/// recognised CPython. Inlined into each caller: the verifier walks it once per program.
#[inline(always)]
pub fn walk(pid_tgid: u64, now: u64, caller: Caller) {
    if load_time(&PYTHON) == 0 {
        return;
    }
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: the value is copied before any other map update.
    let Some(layout) = (unsafe { PY_PROCS.get(tgid) }).copied() else {
        return;
    };
    let Some(tstate) = thread_state(&layout, pid_tgid) else {
        return;
    };
    let Some(scratch) = PY_SCRATCH.get_ptr_mut(caller as u32) else {
        return;
    };
    // SAFETY: this CPU's scratch value of this caller, used by nothing else while this program
    // runs (a program does not interrupt itself on one CPU).
    let scratch = unsafe { &mut *scratch };
    scratch.event.header = header(KIND_PY_STACK, pid_tgid, now);
    scratch.event.flags = frames(&layout, tstate, scratch);
    let len = scratch.event.len.min(PY_MAX_FRAMES as u32);
    let size = (PY_STACK_HEAD + len as usize * core::mem::size_of::<PyFrame>())
        .min(core::mem::size_of::<PyStackEvent>());
    // SAFETY: `size` is at most the record's size, at the start of the scratch value.
    let record = unsafe { core::slice::from_raw_parts((scratch as *const PyScratch).cast::<u8>(), size) };
    if EVENTS.output::<[u8]>(record, output_flags(size)).is_err() {
        count(counter::LOST_RING_FULL);
    }
}

/// The thread state of thread `pid_tgid`, whose `thread_id` is the task's FS base.
#[inline(always)]
fn thread_state(layout: &PyLayout, pid_tgid: u64) -> Option<u64> {
    // SAFETY: no preconditions; the task is read only through a checked read.
    let task = unsafe { bpf_get_current_task() };
    let fsbase: u64 = read_kernel(task, load_time(&TASK_FSBASE))?;
    if fsbase == 0 {
        return None;
    }
    let id = u64::from(layout.tstate_thread_id);
    // SAFETY: the value is copied.
    if let Some(&known) = unsafe { PY_THREADS.get(pid_tgid) } {
        if user_u64(known + id) == Some(fsbase) {
            return Some(known);
        }
    }
    let interp = user_u64(layout.runtime + u64::from(layout.interpreters_head))?;
    let mut tstate = user_u64(interp + u64::from(layout.threads_head))?;
    for _ in 0..MAX_THREADS {
        if tstate == 0 {
            return None;
        }
        if user_u64(tstate + id) == Some(fsbase) {
            let _ = PY_THREADS.insert(pid_tgid, tstate, 0);
            return Some(tstate);
        }
        tstate = user_u64(tstate + u64::from(layout.tstate_next))?;
    }
    None
}

/// Walks the frames of `tstate` into `scratch.event.frames`, innermost first, and their count
/// into `scratch.event.len`; returns the record's flags. The count lives in the map value, read
/// and written volatile, not in a register: the verifier then sees it as a bounded unknown, and
/// the walk's paths (a frame sent, a shim skipped) meet again at each step instead of each count
/// being verified apart.
#[inline(always)]
fn frames(layout: &PyLayout, tstate: u64, scratch: &mut PyScratch) -> u32 {
    let len = &raw mut scratch.event.len;
    // SAFETY: `len` points into this CPU's scratch value.
    unsafe { core::ptr::write_volatile(len, 0) };
    let Some(mut frame) = first_frame(layout, tstate) else {
        return PY_STACK_READ_FAILED;
    };
    for _ in 0..WALK_STEPS {
        if frame == 0 {
            return 0;
        }
        // SAFETY: as above.
        let n = unsafe { core::ptr::read_volatile(len) } as usize;
        if n >= PY_MAX_FRAMES {
            return PY_STACK_TRUNCATED;
        }
        if !read_window(&mut scratch.frame, frame, layout.frame_bytes) {
            return PY_STACK_READ_FAILED;
        }
        let code = word(&scratch.frame, layout.frame_code);
        let previous = word(&scratch.frame, layout.frame_previous);
        frame = previous;
        let owner = match layout.frame_owner {
            PY_NO_FIELD => 0,
            at => byte(&scratch.frame, at),
        };
        if owner == PY_OWNED_BY_CSTACK {
            // A shim: the frame above it is the outermost of its eval-loop call.
            if n > 0 {
                scratch.event.frames[(n - 1) & (PY_MAX_FRAMES - 1)].flags |= PY_FRAME_ENTRY;
            }
            continue;
        }
        let (instr, entry) = match layout.kind {
            PY_KIND_FRAME_OBJECTS => (half(&scratch.frame, layout.frame_instr), true),
            PY_KIND_IS_ENTRY => (
                word(&scratch.frame, layout.frame_instr).wrapping_sub(code) as u32,
                byte(&scratch.frame, layout.frame_is_entry) != 0,
            ),
            _ => (
                word(&scratch.frame, layout.frame_instr).wrapping_sub(code) as u32,
                false,
            ),
        };
        let identity = if read_window(&mut scratch.code, code, layout.code_bytes) {
            let line = half(&scratch.code, layout.code_firstlineno);
            let name = word(&scratch.code, layout.code_name);
            (u64::from(line) << 32) | ((name >> 3) & 0xffff_ffff)
        } else {
            0
        };
        // n < PY_MAX_FRAMES (checked above), a power of two: the mask changes nothing.
        scratch.event.frames[n & (PY_MAX_FRAMES - 1)] = PyFrame {
            code,
            identity,
            instr,
            flags: u32::from(entry) * PY_FRAME_ENTRY,
        };
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(len, n as u32 + 1) };
    }
    if frame == 0 {
        0
    } else {
        PY_STACK_TRUNCATED
    }
}

/// The thread's innermost frame (0 when it runs none).
#[inline(always)]
fn first_frame(layout: &PyLayout, tstate: u64) -> Option<u64> {
    let at = user_u64(tstate + u64::from(layout.tstate_frame))?;
    match layout.cframe_current {
        PY_NO_FIELD => Some(at),
        _ if at == 0 => Some(0),
        current => user_u64(at + u64::from(current)),
    }
}
