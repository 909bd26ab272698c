//! Ring-buffer records. Layout changes must keep `EventHeader` first and sizes multiples of 8.

/// `EventHeader::kind` of a [`SpanEvent`].
pub const KIND_SPAN: u32 = 1;
/// `EventHeader::kind` of a [`ThreadEvent`].
pub const KIND_THREAD: u32 = 2;
/// `EventHeader::kind` of an [`ArgsEvent`].
pub const KIND_ARGS: u32 = 3;
/// `EventHeader::kind` of a [`UsdtEvent`].
pub const KIND_USDT: u32 = 4;
/// `EventHeader::kind` of a [`UsdtStrEvent`].
pub const KIND_USDT_STR: u32 = 5;
/// `EventHeader::kind` of a [`SampleEvent`].
pub const KIND_SAMPLE: u32 = 6;
/// `EventHeader::kind` of an [`OutEvent`].
pub const KIND_OUT: u32 = 7;
/// `EventHeader::kind` of a [`SpanStrEvent`].
pub const KIND_SPAN_STR: u32 = 8;
/// `EventHeader::kind` of a [`ThreadEvent`] sent when a thread other than its process's first ran
/// exec: the kernel ties a process's uprobe links to that first thread, which the exec ended, so
/// user space attaches the process's probes again. The header has the ids after the exec (the
/// thread took the process id), `comm` the new name.
pub const KIND_EXEC: u32 = 9;
/// `EventHeader::kind` of a [`LongStrEvent`].
pub const KIND_LONG_STR: u32 = 10;
/// `EventHeader::kind` of a [`crate::python::PyStackEvent`].
pub const KIND_PY_STACK: u32 = 11;
/// `EventHeader::kind` of an off-CPU wait (`crate::offcpu::OffCpuEvent`).
pub const KIND_OFF_CPU: u32 = 12;
/// `EventHeader::kind` of a GPU device record (`crate::gpu::GpuEvent`).
pub const KIND_GPU: u32 = 13;
/// `EventHeader::kind` of a traced call's stack at its entry (`crate::stacks::CallStackEvent`).
pub const KIND_CALL_STACK: u32 = 14;

/// Frames kept per stack of a CPU sample (the kernel's `PERF_MAX_STACK_DEPTH`).
pub const MAX_FRAMES: usize = 127;

/// Integer arguments a function probe can capture (the x86-64 SysV argument registers).
pub const MAX_ARGS: usize = 6;
/// Bytes kept of a string argument, its terminating NUL included.
pub const ARG_STR_LEN: usize = 64;
/// Most bytes a string argument may ask for (`str:N`), its NUL not counted.
pub const STR_MAX: usize = 4096;
/// Bytes read of a struct argument (`crate::probe::args::block`).
pub const ARG_BLOCK_LEN: usize = 40;
/// Stack slots a function probe can capture (`crate::probe::args::stack`).
pub const MAX_STACK_ARGS: usize = 4;

/// Length of a task's command name (`TASK_COMM_LEN`).
pub const COMM_LEN: usize = 16;

/// First field of every ring-buffer record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    /// Which payload follows (`KIND_*`).
    pub kind: u32,
    /// CPU the record was written on.
    pub cpu: u32,
    /// Process id (tgid) of the thread that hit the probe.
    pub pid: u32,
    /// Thread id of the thread that hit the probe.
    pub tid: u32,
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) when the record was written.
    pub ts_ns: u64,
}

/// A completed call of a uprobe'd function: written by the return probe (or, for functions whose
/// exits are probed at their own instructions, the probe on the `ret` or tail-call jump that left
/// the function), `header.ts_ns` is the return.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpanEvent {
    pub header: EventHeader,
    /// When the matching entry probe fired.
    pub start_ns: u64,
    /// Index of the probe in user space's probe table (the BPF attach cookie).
    pub probe_id: u32,
    /// Nesting depth on this thread among traced functions (0 = outermost).
    pub depth: u16,
    /// How the function was left: [`EXIT_RETURN`] or [`EXIT_TAIL_CALL`].
    pub exit: u16,
    /// The return value register (rax), whether or not the function returns anything; for a tail
    /// call, not yet the return value.
    pub ret: u64,
}

/// The span of a call whose probe reads its return value as a string (`-> str`): the span (its
/// header's kind is [`KIND_SPAN_STR`]) and the string the return value points at.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanStrEvent {
    pub span: SpanEvent,
    /// Bytes of `string` read, its NUL included; 0 when unreadable (or a tail call: no return
    /// value yet).
    pub str_len: u32,
    pub _pad: u32,
    pub string: [u8; ARG_STR_LEN],
}

/// `SpanEvent::exit` of a function that returned (through its return probe or a `ret`).
pub const EXIT_RETURN: u16 = 0;
/// `SpanEvent::exit` of a function that left by a tail call (a `jmp` to another function, which
/// returns to this one's caller): the span ends at the jump, without the callee's time.
pub const EXIT_TAIL_CALL: u16 = 1;

/// Set in the attach cookie of `span_enter` (the probe id in the low 32 bits) for a function whose
/// exits are probed at their instructions (`OpenCall::exits_probed`).
pub const ENTRY_EXITS_PROBED: u64 = 1 << 32;

/// Set in the attach cookie of `span_enter` when the entry probe is on a Go function's stack-check
/// branch (`jbe` after `cmp 0x10(%r14),%rsp`): a hit whose flags take the branch (CF or ZF set) is
/// not a call yet. The function grows its stack, or yields to a preemption request, and restarts
/// from its first instruction, where the probe is hit again.
pub const ENTRY_GO_STACK_CHECK: u64 = 1 << 33;

/// Set in the attach cookie of `span_enter` for a function of Go code whose exits are probed at
/// their instructions: its open calls are kept per goroutine, not per thread (the eBPF crate's
/// `goroutine.rs`).
pub const ENTRY_GO: u64 = 1 << 34;

/// Set in the attach cookie of `span_ret` for a function of Go code (as [`ENTRY_GO`]), above the
/// exit kind ([`exit_cookie`]).
pub const EXIT_GO: u64 = 1 << 48;

/// The x86 flags a `jbe` branches on: CF (bit 0) or ZF (bit 6).
pub const JBE_TAKEN_FLAGS: u64 = 1 | 1 << 6;

/// The BPF attach cookie of a probe on one of a function's exit instructions: the probe id in the
/// low 32 bits, how it leaves (`EXIT_*`) above them.
pub const fn exit_cookie(probe_id: u32, exit: u16) -> u64 {
    probe_id as u64 | (exit as u64) << 32
}

/// A call's arguments, written at entry for probes whose spec asks for them; the span of the same
/// call (same tid, `start_ns`) follows later.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgsEvent {
    pub header: EventHeader,
    /// The entry time, as in the call's `SpanEvent::start_ns`.
    pub start_ns: u64,
    pub probe_id: u32,
    /// The probe's argument spec (`crate::probe::args`).
    pub spec: u32,
    /// The argument registers.
    pub args: [u64; MAX_ARGS],
    /// Bytes read into `strings[i]`, its NUL included (0: none or unreadable).
    pub str_len: [u8; MAX_ARGS],
    /// Nesting depth of the call on its thread (as in its span), or in its goroutine.
    pub depth: u8,
    pub _pad: u8,
    /// The call's goroutine (`runtime.g`) when Go code keeps it per goroutine, else 0.
    pub goroutine: u64,
    /// String arguments (where the spec says so), NUL-terminated; or the first `ARG_BLOCK_LEN`
    /// bytes of a struct argument.
    pub strings: [[u8; ARG_STR_LEN]; MAX_ARGS],
    /// Stack slots (where the spec says so).
    pub stack: [u64; MAX_STACK_ARGS],
    /// The call's return address (where the spec says so, `args::CALLER`), else 0.
    pub caller: u64,
}

/// A string argument whose spec asks for more than an [`ArgsEvent`] keeps (`str:N`, N of 64 and
/// up), written just before its call's `ArgsEvent` (same tid and `start_ns`). It is sent up to
/// the end of the bytes read (at least [`LONG_STR_AT`] bytes): short strings do not pay for the
/// cap. Its `ArgsEvent` still has the string's first 63 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongStrEvent {
    pub header: EventHeader,
    /// The call's entry time, as in its `ArgsEvent::start_ns`.
    pub start_ns: u64,
    pub probe_id: u32,
    /// Which argument it is.
    pub arg: u16,
    /// Bytes read into `bytes`, its NUL included (0: unreadable).
    pub len: u16,
    pub bytes: [u8; STR_MAX + 8],
}

/// Offset of [`LongStrEvent::bytes`]: the shortest such record.
pub const LONG_STR_AT: usize = 40;

/// The value an out-pointer argument points at when its call returns; written just before the
/// call's `SpanEvent` (same tid and `start_ns`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutEvent {
    pub header: EventHeader,
    pub start_ns: u64,
    pub probe_id: u32,
    /// Which argument pointed at it.
    pub arg: u32,
    /// 0 when it could not be read.
    pub value: u64,
}

/// One hit of a USDT call site with its arguments, read as the site's note describes them
/// (sign- or zero-extended to 64 bits). `header.ts_ns` is the hit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsdtEvent {
    pub header: EventHeader,
    /// The call site (the attach cookie, an index into user space's site table).
    pub site: u32,
    /// Arguments in `args`.
    pub nargs: u32,
    pub args: [u64; crate::usdt::MAX_USDT_ARGS],
}

/// A [`UsdtEvent`] of a site whose spec reads some arguments as strings. The kernel sends it up
/// to the end of the last string it read (at least [`USDT_STRINGS_AT`] bytes); user space reads
/// the rest as zeros.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsdtStrEvent {
    pub event: UsdtEvent,
    /// Bytes read into `strings[i]`, its NUL included (0: not a string, or unreadable).
    pub str_len: [u8; crate::usdt::MAX_USDT_ARGS],
    pub _pad: [u8; 4],
    pub strings: [[u8; ARG_STR_LEN]; crate::usdt::MAX_USDT_ARGS],
}

/// Offset of [`UsdtStrEvent::strings`]: the shortest such record.
pub const USDT_STRINGS_AT: usize = core::mem::size_of::<UsdtEvent>() + 16;

/// One on-CPU sample: the interrupted thread's kernel stack (return addresses, innermost first),
/// and either its user-mode registers with `stack_len` bytes copied from its user stack pointer up
/// (`--user-stack` above 0), which user space unwinds from the modules' CFI, or, when nothing was
/// copied, its user stack walked by the kernel's stack helper along frame pointers (the first
/// frame being the interrupted instruction). The copied bytes follow the record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleEvent {
    pub header: EventHeader,
    /// NUL-padded `comm` of the interrupted thread: its name is kept even if it exits before the
    /// capture ends.
    pub comm: [u8; COMM_LEN],
    /// Frames in `kernel` (0 when the sample hit user mode).
    pub kernel_frames: u32,
    /// Frames in `user` (0 for a kernel thread).
    pub user_frames: u32,
    pub kernel: [u64; MAX_FRAMES],
    pub user: [u64; MAX_FRAMES],
    /// User-mode instruction pointer, stack pointer and frame pointer (`USER_IP`, `USER_SP`,
    /// `USER_BP`); zero when no stack was copied.
    pub user_regs: [u64; 3],
    /// Bytes of user stack that follow this record, copied from `user_regs[USER_SP]` up.
    pub stack_len: u32,
    /// Entries used in `returns`.
    pub return_slots: u32,
    /// The thread's innermost open traced calls, innermost first, as (return-address slot, the
    /// address the call found there at entry): a return probe has since put the kernel's
    /// trampoline in the slot, where the unwinder would stop. User space puts each address back
    /// where its slot lies in the copied stack and holds the trampoline (the `[uprobes]` mapping).
    pub returns: [[u64; 2]; MAX_RETURN_SLOTS],
}

/// Most return-address slots a sample carries (see [`SampleEvent::returns`]); a power of two.
pub const MAX_RETURN_SLOTS: usize = 32;

/// Index of the instruction pointer in [`SampleEvent::user_regs`].
pub const USER_IP: usize = 0;
/// Index of the stack pointer in [`SampleEvent::user_regs`].
pub const USER_SP: usize = 1;
/// Index of the frame pointer in [`SampleEvent::user_regs`].
pub const USER_BP: usize = 2;

/// Most bytes of user stack a sample can carry (`--user-stack`): a BPF per-CPU map value, the
/// scratch space a record is built in, must stay under 32 KiB.
pub const USER_STACK_MAX: usize = 16384;
/// The stack is copied a page at a time, so a copy stops at the end of the mapping instead of
/// failing as a whole; the scratch space has a chunk of room past `USER_STACK_MAX`.
pub const STACK_CHUNK: usize = 4096;

/// Where the kernel program builds a sample before sending its used length.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SampleScratch {
    pub event: SampleEvent,
    pub stack: [u8; USER_STACK_MAX + STACK_CHUNK],
}

/// A thread's first traced call: its name at that moment (threads may be gone when the recording
/// ends, so user space cannot rely on /proc). Written once per thread, before its first span.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadEvent {
    pub header: EventHeader,
    /// NUL-padded `comm` of the thread.
    pub comm: [u8; COMM_LEN],
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data records: repr(C), integer fields only, no padding.
    unsafe impl aya::Pod for super::EventHeader {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SpanEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ThreadEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ArgsEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::UsdtEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::UsdtStrEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SampleEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OutEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SpanStrEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::LongStrEvent {}
}

// Both sides rely on these sizes; a change here is a format change.
const _: () = assert!(core::mem::size_of::<EventHeader>() == 24);
const _: () = assert!(core::mem::size_of::<SpanEvent>() == 48);
const _: () = assert!(core::mem::size_of::<SpanStrEvent>() == 120);
const _: () = assert!(core::mem::size_of::<ArgsEvent>() == 528);
const _: () = assert!(core::mem::size_of::<ThreadEvent>() == 40);
const _: () = assert!(core::mem::size_of::<OutEvent>() == 48);
const _: () = assert!(core::mem::size_of::<UsdtEvent>() == 128);
const _: () =
    assert!(core::mem::size_of::<SampleEvent>() == 48 + 2 * 8 * MAX_FRAMES + 32 + 16 * MAX_RETURN_SLOTS);
const _: () = assert!(core::mem::size_of::<UsdtStrEvent>() == 128 + 16 + 64 * 12);
const _: () = assert!(core::mem::offset_of!(UsdtStrEvent, strings) == USDT_STRINGS_AT);
const _: () = assert!(core::mem::offset_of!(LongStrEvent, bytes) == LONG_STR_AT);
const _: () = assert!(core::mem::size_of::<LongStrEvent>() == LONG_STR_AT + STR_MAX + 8);
