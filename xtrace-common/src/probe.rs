//! Limits and map layouts shared by the kernel programs and user space.

/// Deepest nesting of traced calls tracked per thread; deeper calls are counted as dropped. It is
/// also the kernel's own limit of nested return probes per task (`MAX_URETPROBE_DEPTH`): deeper
/// calls get no return probe.
pub const MAX_DEPTH: usize = 64;

/// Open calls with an out-pointer argument kept at once (`OUT_PTRS`, least recently used first
/// out); the per-thread stacks of open calls have no such limit.
pub const MAX_THREADS: u32 = 16_384;

/// Slots of `SAMPLE_PID_HINTS`: one byte per process id modulo this, set for every process put in
/// `SAMPLE_PIDS` and never cleared, so that a process whose slot is 0 is certainly not sampled and
/// an untraced thread is told so by one array read instead of a hash look-up.
pub const SAMPLE_PID_HINTS: u32 = 1 << 16;

/// The `SAMPLE_PID_HINTS` slot of process `tgid`.
#[inline(always)]
pub const fn sample_pid_hint(tgid: u32) -> u32 {
    tgid & (SAMPLE_PID_HINTS - 1)
}

/// Goroutines with open traced calls of Go code at once (the eBPF crate's `goroutine.rs`); a call
/// of another is not recorded (counted in `LOST_NO_THREAD_SLOT`).
pub const MAX_GOROUTINES: u32 = 16_384;

/// Default ring buffer size in bytes (a power of two, at least a page).
pub const DEFAULT_RING_BYTES: u32 = 16 << 20;

/// Buckets of the kernel's log2 histogram of short calls: bucket `i` holds durations in
/// [2^(i-1), 2^i) ns (bucket 0: 0 ns).
pub const LOG2_BUCKETS: usize = 64;

/// Calls of one probe shorter than `--min-duration`, summarised in the kernel instead of sent as
/// spans (one per probe and CPU). The minimum is kept as its bitwise complement, so that both ends
/// are maxima the kernel raises with compare-and-swap, starting from the map's zeroes;
/// [`ShortCalls::min_ns`] is meaningful only when `count > 0`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ShortCalls {
    pub count: u64,
    pub total_ns: u64,
    /// `!min_ns`.
    pub min_ns_not: u64,
    pub max_ns: u64,
    pub log2: [u64; LOG2_BUCKETS],
}

impl ShortCalls {
    /// The shortest call.
    pub fn min_ns(&self) -> u64 {
        !self.min_ns_not
    }
}

#[cfg(feature = "user")]
// SAFETY: repr(C), u64 fields only, no padding.
unsafe impl aya::Pod for ShortCalls {}

/// The per-probe argument spec in the `ARG_SPECS` map (indexed by probe id): which argument
/// registers an entry captures, which of them point at strings or small structs, which stack
/// slots it reads, and which pointer arguments it dereferences when the call returns.
pub mod args {
    /// Capture argument register `i` (0..6).
    pub const fn int(i: usize) -> u32 {
        1 << i
    }
    /// The function is Go code: argument `i` is the `i`th integer register of Go's register ABI
    /// (`rax rbx rcx rdi rsi r8`), not of System V's (`rdi rsi rdx rcx r8 r9`), and a string (an
    /// argument, or the return value) is a Go string: its bytes at the pointer, as many as the next
    /// register says (`rbx` for the return value), not up to a NUL.
    pub const GO_ABI: u32 = 1 << 6;
    /// The return value points at a NUL-terminated string, read when the call returns (the span
    /// is then a `SpanStrEvent`).
    pub const RET_STRING: u32 = 1 << 7;
    /// Argument `i` is also read as a NUL-terminated string.
    pub const fn string(i: usize) -> u32 {
        1 << (8 + i)
    }
    /// Every call is sent, whatever `--min-duration` (a CUDA call: the CUDA summary counts each;
    /// user space leaves the short ones out of trace.json).
    pub const ALWAYS_SENT: u32 = 1 << 14;
    /// The return address at entry (the eightbyte at `rsp`) is read: where the call was made from
    /// (a CUDA launch's module, for a kernel no lookup named).
    pub const CALLER: u32 = 1 << 15;
    /// Stack slot `j` (0..4) at entry: the eightbyte at `rsp + 8 * (j + 1)`, where arguments that
    /// do not fit in registers are passed (the 7th integer argument is slot 0).
    pub const fn stack(j: usize) -> u32 {
        1 << (16 + j)
    }
    /// Argument `i` points at a struct: its first `ARG_BLOCK_LEN` bytes are read at entry.
    pub const fn block(i: usize) -> u32 {
        1 << (20 + i)
    }
    /// Argument `i` (0..6) is an out-pointer: the u64 it points at is read when the call returns
    /// (an allocation's address, a handle); such calls are always sent, whatever their duration.
    pub const fn out(i: usize) -> u32 {
        1 << (26 + i)
    }
    /// Every `out` bit.
    pub const OUT_MASK: u32 = 0b11_1111 << 26;
}

/// Per probe id, the bytes each argument asks for as a long string (`str:N` with N of 64 and up;
/// 0: none), in the `STR_LENS` map: those are also sent whole in a `LongStrEvent`.
pub type StrLens = [u16; 8];

/// Index into the per-CPU `COUNTERS` array.
pub mod counter {
    /// Records that did not fit in the ring buffer.
    pub const LOST_RING_FULL: u32 = 0;
    /// Entries beyond `MAX_DEPTH` on one thread (their spans are not recorded).
    pub const LOST_TOO_DEEP: u32 = 1;
    /// Calls on threads whose stack of open calls could not be allocated (no span recorded).
    pub const LOST_NO_THREAD_SLOT: u32 = 2;
    /// Entries left without a return (longjmp, C++ exceptions, a thread or process ending inside
    /// a traced call): skipped over when an outer call returns, or dropped when the thread exits.
    pub const UNMATCHED_ENTRIES: u32 = 3;
    /// Processes started by a sampled process (fork, vfork, clone without CLONE_THREAD) that are
    /// sampled from then on.
    pub const FOLLOWED_PROCESSES: u32 = 4;
    /// Processes started by a sampled process while the sampled-process table was full: not
    /// sampled.
    pub const PROCESSES_NOT_FOLLOWED: u32 = 5;
    /// Off-CPU intervals not counted: the table that adds them up was full, or one to send did
    /// not fit in the ring buffer.
    pub const LOST_OFF_CPU: u32 = 6;
    /// GPU device activity records (kernels, copies, memsets) not sent: past
    /// `gpu::MAX_RECORDS_PER_HIT` in one batch, unreadable, or no room in the ring buffer; and
    /// the count a record of CUPTI's drops carried when it found no room.
    pub const LOST_DEVICE_RECORDS: u32 = 7;
    /// Hits of uprobe programs after the stop (`STOPPED`), which returned at once: perf-event
    /// uprobes stay in the processes until a background helper has removed them.
    pub const AFTER_STOP: u32 = 8;
    /// The tool library's other records not sent for want of room in the ring buffer: launch
    /// records, names, notices, clock and session marks.
    pub const LOST_TOOL_RECORDS: u32 = 9;
    /// Number of counters.
    pub const COUNT: u32 = 10;
}

/// One open call on a thread's `EntryStack` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OpenCall {
    pub start_ns: u64,
    /// The stack pointer at entry: the address of the call's return-address slot. Its return
    /// finds the stack pointer 8 bytes above it, so a return is paired with exactly its own call,
    /// even in recursion after a longjmp or an exception.
    pub frame: u64,
    /// The return address the call found in that slot, before a return probe swapped it for the
    /// kernel's trampoline; read only when CPU samples copy user stacks (0 otherwise), which list
    /// it (`SampleEvent::returns`) for user space to put back in their copy for the unwinder. In
    /// a goroutine's stack (Go code, whose returns are not probed by return probes): the ids
    /// (`pid_tgid`) of the thread the call entered on, whose span it is.
    pub return_address: u64,
    pub probe_id: u32,
    /// 1 when the call's exits are probed at their instructions (`span_ret`): its tail jumps end
    /// it, so a new call at its frame proves it gone (left by longjmp or an exception). 0 for a
    /// call with a return probe, which a tail call at its frame leaves open.
    pub exits_probed: u32,
}

/// Per-thread stack of open calls, innermost last.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EntryStack {
    /// Number of valid entries.
    pub depth: u32,
    /// 1 once the thread's `ThreadEvent` is sent, 2 when the thread is outside xtrace's PID
    /// namespace (it is not traced); cleared when the thread execs.
    pub announced: u32,
    /// The thread's ids as xtrace sees them (the host's, or in xtrace's PID namespace), kept when
    /// it is announced, so a return reads them from here instead of calling a helper again.
    pub pid_tgid: u64,
    pub calls: [OpenCall; MAX_DEPTH],
}

#[cfg(feature = "user")]
// SAFETY: repr(C), integer fields only, no padding (16 + 64 x 32 bytes).
unsafe impl aya::Pod for EntryStack {}
