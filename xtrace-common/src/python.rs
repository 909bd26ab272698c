//! Python frames: where a CPython interpreter keeps its thread states and frames, as user space
//! found them in one process and hands them to the kernel ([`PyLayout`], keyed by process id), and
//! the record of one thread's frame chain walked at sample time ([`PyStackEvent`]).

/// Most Python frames one walk sends; deeper chains are cut at the outermost end (the frames
/// nearest the sampled code are kept) and flagged [`PY_STACK_TRUNCATED`].
pub const PY_MAX_FRAMES: usize = 128;

/// Bytes read at once from a frame and from a code object: every field the walk reads lies in
/// the first `PY_WINDOW` bytes of its object on the layouts xtrace knows.
pub const PY_WINDOW: usize = 136;

/// [`PyLayout::kind`]: CPython 3.10, a chain of `PyFrameObject`s (`f_back`), each run by its own
/// call of the eval loop.
pub const PY_KIND_FRAME_OBJECTS: u32 = 10;
/// CPython 3.11: `_PyInterpreterFrame`s from `tstate->cframe->current_frame`; `is_entry` marks
/// the outermost frame of each eval-loop call.
pub const PY_KIND_IS_ENTRY: u32 = 11;
/// CPython 3.12 and 3.13: `_PyInterpreterFrame`s; a frame owned by the C stack (a shim) sits
/// below the frames of each eval-loop call. The thread's innermost frame is reached through
/// `cframe` (3.12, [`PyLayout::cframe_current`] set) or directly (3.13, it is [`PY_NO_FIELD`]).
pub const PY_KIND_SHIM: u32 = 12;

/// `_PyInterpreterFrame.owner` of a shim frame (`FRAME_OWNED_BY_CSTACK`, 3.12 and 3.13).
pub const PY_OWNED_BY_CSTACK: u8 = 3;

/// An offset the layout has no field for.
pub const PY_NO_FIELD: u32 = u32::MAX;

/// Where one process's interpreter keeps what the walk reads (byte offsets), found and checked by
/// user space; the kernel walks the threads of a process only when it has one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyLayout {
    /// Address of `_PyRuntime` in the process.
    pub runtime: u64,
    /// `PY_KIND_*`.
    pub kind: u32,
    /// `_PyRuntimeState.interpreters.head`.
    pub interpreters_head: u32,
    /// `PyInterpreterState.threads.head` (3.10: `tstate_head`).
    pub threads_head: u32,
    /// `PyThreadState.next`.
    pub tstate_next: u32,
    /// `PyThreadState.thread_id`: the thread's `pthread_self()`.
    pub tstate_thread_id: u32,
    /// `PyThreadState.frame` (3.10), `.cframe` (3.11, 3.12) or `.current_frame` (3.13).
    pub tstate_frame: u32,
    /// `_PyCFrame.current_frame` (3.11, 3.12), else [`PY_NO_FIELD`].
    pub cframe_current: u32,
    /// The frame's code object: `f_code` (3.10 to 3.12), `f_executable` (3.13).
    pub frame_code: u32,
    /// The calling frame: `f_back` (3.10), `previous`.
    pub frame_previous: u32,
    /// The instruction: `f_lasti` (3.10, an int counting code units), `prev_instr` (3.11,
    /// 3.12), `instr_ptr` (3.13), both pointers into the code object.
    pub frame_instr: u32,
    /// `_PyInterpreterFrame.owner` (a byte), else [`PY_NO_FIELD`].
    pub frame_owner: u32,
    /// `_PyInterpreterFrame.is_entry` (a byte, 3.11), else [`PY_NO_FIELD`].
    pub frame_is_entry: u32,
    /// `PyCodeObject.co_firstlineno` (an int).
    pub code_firstlineno: u32,
    /// `PyCodeObject.co_name`.
    pub code_name: u32,
    /// Bytes read of each frame (at most [`PY_WINDOW`]): its last field read ends there.
    pub frame_bytes: u32,
    /// Bytes read of each code object (at most [`PY_WINDOW`]).
    pub code_bytes: u32,
}

/// `PyFrame::flags`: the frame is the outermost of one call of the eval loop: the native
/// `_PyEval_EvalFrameDefault` frame that ran it runs no frame below it.
pub const PY_FRAME_ENTRY: u32 = 1;

/// One Python frame as the kernel found it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyFrame {
    /// Address of its code object.
    pub code: u64,
    /// `co_firstlineno` in the high half, bits 3..35 of the `co_name` pointer in the low half: a
    /// code object freed and another made at its address has another identity unless both are
    /// of one function's definition line and name.
    pub identity: u64,
    /// 3.10: `f_lasti`; later: the instruction pointer's offset from the code object's address.
    pub instr: u32,
    /// `PY_FRAME_*`.
    pub flags: u32,
}

/// `PyStackEvent::flags`: the chain went on past [`PY_MAX_FRAMES`].
pub const PY_STACK_TRUNCATED: u32 = 1;
/// `PyStackEvent::flags`: a read failed within the chain (memory freed under the walk): the
/// frames after it are missing.
pub const PY_STACK_READ_FAILED: u32 = 2;

/// The Python frames of a sampled thread, innermost first, sent just before its sample (same
/// header time and thread) without its unused tail.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyStackEvent {
    pub header: crate::event::EventHeader,
    /// Frames used in `frames`.
    pub len: u32,
    /// `PY_STACK_*`.
    pub flags: u32,
    pub frames: [PyFrame; PY_MAX_FRAMES],
}

/// Bytes of a [`PyStackEvent`] before its frames.
pub const PY_STACK_HEAD: usize = 32;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data records: repr(C), integer fields only, no padding.
    unsafe impl aya::Pod for super::PyLayout {}
}

const _: () = assert!(core::mem::size_of::<PyLayout>() == 72);
const _: () = assert!(core::mem::size_of::<PyFrame>() == 24);
const _: () = assert!(core::mem::size_of::<PyStackEvent>() == PY_STACK_HEAD + 24 * PY_MAX_FRAMES);
const _: () = assert!(PY_MAX_FRAMES.is_power_of_two());
