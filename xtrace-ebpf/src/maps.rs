//! Maps shared by all probe families: the event ring buffer, per-CPU loss counters, and the
//! per-thread stacks of open calls. User space sizes `EVENTS` at load time (`--buffer-size`).
use aya_ebpf::{
    bindings::{bpf_pidns_info, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_current_pid_tgid, bpf_get_ns_current_pid_tgid},
    macros::{btf_map, map},
    maps::{ring_buf::RingBufEntry, Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use xtrace_common::{
    probe::{counter, sample_pid_hint, EntryStack, ShortCalls, StrLens, DEFAULT_RING_BYTES, MAX_THREADS},
    usdt::UsdtSite,
};

use crate::task_storage::TaskStorage;

/// The value user space gave the global `global` at load time (`EbpfLoader::override_global`).
/// The read is volatile: the compiler would otherwise fold in the value the object was built with.
#[inline(always)]
pub fn load_time<T: Copy>(global: &'static T) -> T {
    // SAFETY: a plain read of a static that nothing writes after the program is loaded.
    unsafe { core::ptr::read_volatile(global) }
}

/// xtrace's PID namespace when it is not the initial one (it runs in a container): the device and
/// inode of its /proc/self/ns/pid, set at load time; 0 in the initial namespace.
#[unsafe(no_mangle)]
static PIDNS_DEV: u64 = 0;
#[unsafe(no_mangle)]
static PIDNS_INO: u64 = 0;

/// xtrace's own process id (in its PID namespace), set at load time: its threads are never traced
/// (with `-a`, its own calls to a probed function would feed the ring it reads).
#[unsafe(no_mangle)]
static SELF_TGID: u32 = 0;

/// Whether `pid_tgid` (from [`current_pid_tgid`]) is a thread of xtrace itself.
#[inline(always)]
pub fn is_self(pid_tgid: u64) -> bool {
    (pid_tgid >> 32) as u32 == load_time(&SELF_TGID)
}

/// The value of type `T` at `offset` bytes into kernel object `at` (offsets from the kernel's
/// BTF, set at load time).
#[inline(always)]
pub fn read_kernel<T>(at: u64, offset: u32) -> Option<T> {
    let field = at.wrapping_add(u64::from(offset));
    // SAFETY: a checked read of kernel memory.
    unsafe { aya_ebpf::helpers::bpf_probe_read_kernel(field as *const T) }.ok()
}

/// Whether xtrace runs in a PID namespace of its own (see `PIDNS_INO`).
#[inline(always)]
pub fn in_pid_namespace() -> bool {
    load_time(&PIDNS_INO) != 0
}

/// The current thread's process and thread ids (tgid in the high half) as xtrace sees them: the
/// host's, or in xtrace's own PID namespace when it runs in one. None for a thread whose PID
/// namespace is not xtrace's (a process outside xtrace's container, or in one nested inside it),
/// which xtrace cannot name: it is not traced. The check is a load-time constant, so the
/// verifier drops the branch not taken.
#[inline(always)]
pub fn current_pid_tgid() -> Option<u64> {
    if !in_pid_namespace() {
        return Some(bpf_get_current_pid_tgid());
    }
    let mut ids = bpf_pidns_info { pid: 0, tgid: 0 };
    // SAFETY: the helper writes exactly `size_of::<bpf_pidns_info>()` bytes into `ids`.
    let found = unsafe {
        bpf_get_ns_current_pid_tgid(
            load_time(&PIDNS_DEV),
            load_time(&PIDNS_INO),
            &mut ids,
            core::mem::size_of::<bpf_pidns_info>() as u32,
        )
    };
    (found == 0).then_some((u64::from(ids.tgid) << 32) | u64::from(ids.pid))
}

/// Every record for user space.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

/// `EVENTS`' size in bytes, set at load time with it: a load instead of a helper call per record.
#[unsafe(no_mangle)]
static RING_BYTES: u64 = DEFAULT_RING_BYTES as u64;

/// 1 once a record above the ring's quarter mark has woken the reader; user space sets it back to
/// 0 before it waits for the ring again. A flag rather than "the record that crossed the mark": two
/// CPUs that reserve at once can both find the unread bytes already past the crossing record's
/// window, and the crossing would wake no one.
#[map]
pub static WOKEN: Array<u32> = Array::with_max_entries(1, 0);

/// 1 once the recording stopped: every uprobe program returns at once, counting the hit
/// (`counter::AFTER_STOP`). Set by user space on perf-event uprobes, whose removal takes long and
/// happens in the background after the outputs are written.
#[map]
pub static STOPPED: Array<u32> = Array::with_max_entries(1, 0);

/// Whether the recording stopped (see `STOPPED`); counts the hit when it has.
#[inline(always)]
pub fn stopped() -> bool {
    let stopped = STOPPED.get(0).is_some_and(|s| *s != 0);
    if stopped {
        count(counter::AFTER_STOP);
    }
    stopped
}

/// Per-CPU counters indexed by `xtrace_common::probe::counter`.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Argument spec per probe id (`xtrace_common::probe::args`); user space sizes and fills it
/// before attaching, only when some probe asks for arguments.
#[map]
pub static ARG_SPECS: Array<u32> = Array::with_max_entries(1, 0);

/// Long string lengths per probe id (`xtrace_common::probe::StrLens`); user space sizes and fills
/// it, only when some probe asks for a `str:N` of 64 bytes or more.
#[map]
pub static STR_LENS: Array<StrLens> = Array::with_max_entries(1, 0);

/// Set to 1 at load time when some probe asks for arguments; when 0 the verifier drops the
/// argument code, so spans without arguments pay nothing for it.
#[unsafe(no_mangle)]
static ARGS_ENABLED: u8 = 0;

/// Set to 1 at load time when some probe asks for a long string (`STR_LENS`).
#[unsafe(no_mangle)]
static LONG_STRINGS: u8 = 0;

/// Whether any probe asks for a long string (see `LONG_STRINGS`).
#[inline(always)]
pub fn long_strings() -> bool {
    load_time(&LONG_STRINGS) != 0
}

/// Whether any probe captures arguments (see `ARGS_ENABLED`).
#[inline(always)]
pub fn args_enabled() -> bool {
    load_time(&ARGS_ENABLED) != 0
}

/// `--min-duration` in ns (0: off), set at load time: shorter calls are summarised in
/// `SHORT_CALLS` instead of sent as spans.
#[unsafe(no_mangle)]
static MIN_DURATION_NS: u64 = 0;

/// The `--min-duration` threshold (0 when off).
#[inline(always)]
pub fn min_duration_ns() -> u64 {
    load_time(&MIN_DURATION_NS)
}

/// Calls below `--min-duration` per probe id (per CPU); sized by user space.
#[map]
pub static SHORT_CALLS: PerCpuArray<ShortCalls> = PerCpuArray::with_max_entries(1, 0);

/// Thread ids to trace when `--tid` is given (values unused); sized by user space.
#[map]
pub static TIDS: HashMap<u32, u8> = HashMap::with_max_entries(1, 0);

/// Set to 1 at load time with `--tid`: calls on threads not in `TIDS` are ignored at entry.
#[unsafe(no_mangle)]
static TID_FILTER: u8 = 0;

/// Whether the key `key()` gives passes a filter: always when its load-time `switch` is 0 (and
/// `key` is not called: the verifier drops its code, the switch being a load-time constant), else
/// when it is in `set`.
#[inline(always)]
fn allowed(switch: &'static u8, set: &HashMap<u32, u8>, key: impl FnOnce() -> u32) -> bool {
    if load_time(switch) == 0 {
        return true;
    }
    // SAFETY: the value is not read.
    unsafe { set.get(key()).is_some() }
}

/// Whether the calling thread is traced (always, unless `--tid` restricts it); its thread id is
/// read only with `--tid`.
#[inline(always)]
pub fn current_thread_traced() -> bool {
    // A thread outside xtrace's PID namespace gets tid 0, which no `--tid` names.
    allowed(&TID_FILTER, &TIDS, || current_pid_tgid().unwrap_or(0) as u32)
}

/// Whether thread `tid` is traced (always, unless `--tid` restricts it).
#[inline(always)]
pub fn thread_traced(tid: u32) -> bool {
    allowed(&TID_FILTER, &TIDS, || tid)
}

/// USDT call sites by attach cookie; sized and filled by user space before attaching.
#[map]
pub static USDT_SITES: Array<UsdtSite> = Array::with_max_entries(1, 0);

/// Processes (tgids) to sample when `SAMPLE_FILTER` is set (values unused); sized by user space.
#[map]
pub static SAMPLE_PIDS: HashMap<u32, u8> = HashMap::with_max_entries(1, 0);

/// Set to 1 at load time when sampling is limited to `SAMPLE_PIDS` (not with `-a`).
#[unsafe(no_mangle)]
static SAMPLE_FILTER: u8 = 0;

/// One byte per process-id slot (`xtrace_common::probe::sample_pid_hint`), 1 where a process in
/// `SAMPLE_PIDS` may have that slot; sized by user space (`SAMPLE_PID_HINTS` slots with a filter).
#[map]
pub static SAMPLE_PID_HINTS: Array<u8> = Array::with_max_entries(1, 0);

/// Notes that process `tgid` is, or is about to be, in `SAMPLE_PIDS` (before it is put there).
#[inline(always)]
pub fn hint_sampled(tgid: u32) {
    if let Some(slot) = SAMPLE_PID_HINTS.get_ptr_mut(sample_pid_hint(tgid)) {
        // SAFETY: an element of the array; every writer stores the same byte.
        unsafe { core::ptr::write_volatile(slot, 1) };
    }
}

/// Whether process `tgid` may be sampled: false only when it certainly is not (always true with
/// `-a`). One array read, no hash look-up.
#[inline(always)]
pub fn maybe_sampled(tgid: u32) -> bool {
    if load_time(&SAMPLE_FILTER) == 0 {
        return true;
    }
    SAMPLE_PID_HINTS
        .get(sample_pid_hint(tgid))
        .is_some_and(|&hint| hint != 0)
}

/// Whether process `tgid` is sampled (always with `-a`).
#[inline(always)]
pub fn sampled(tgid: u32) -> bool {
    maybe_sampled(tgid) && allowed(&SAMPLE_FILTER, &SAMPLE_PIDS, || tgid)
}

/// Whether the current thread's process may be sampled (`maybe_sampled`), asked before looking for
/// its task storage: in xtrace's own PID namespace, where its ids cost a helper of their own,
/// always true (the storage look-up decides).
#[inline(always)]
pub fn current_maybe_sampled() -> bool {
    if in_pid_namespace() {
        return true;
    }
    maybe_sampled((bpf_get_current_pid_tgid() >> 32) as u32)
}

/// Out-pointer arguments of open calls (`xtrace_common::probe::args::out`), keyed by thread id
/// and depth; an LRU map, so calls that never return cannot fill it.
#[map]
pub static OUT_PTRS: LruHashMap<u64, u64> = LruHashMap::with_max_entries(MAX_THREADS, 0);

/// Open traced calls per thread, in the thread's task-local storage (created zeroed at its first
/// traced call, freed by the kernel when it exits).
#[btf_map]
pub static STACKS: TaskStorage<EntryStack> = TaskStorage::new();

/// Set to 1 at load time when CPU samples copy user stacks: each call's entry then keeps its
/// return address (`OpenCall::return_address`), which a sample lists for user space to put back
/// over the return probe's trampoline in its copy of the stack.
#[unsafe(no_mangle)]
static RETURN_ADDRESSES: u8 = 0;

/// Whether entries keep their return address (see `RETURN_ADDRESSES`).
#[inline(always)]
pub fn keep_return_addresses() -> bool {
    load_time(&RETURN_ADDRESSES) != 0
}

/// Adds one to a per-CPU counter.
#[inline(always)]
pub fn count(index: u32) {
    count_n(index, 1);
}

/// Adds `n` to a per-CPU counter.
#[inline(always)]
pub fn count_n(index: u32, n: u64) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: `slot` is a live, aligned u64 map value.
        unsafe { add(slot, n) };
    }
}

/// Adds `n` to the per-CPU u64 at `slot` with one atomic add. A plain `+=` could lose counts: uprobe
/// programs run with migration, not preemption, disabled, so on a preemptible kernel another
/// thread's program on the same CPU can run between its load and store, and a sampling program
/// (NMI) can interrupt any of them.
///
/// # Safety
/// `slot` points at a live, 8-byte-aligned u64 map value.
#[inline(always)]
pub unsafe fn add(slot: *mut u64, n: u64) {
    // SAFETY: as the caller promises. Written in assembly: the BPF target has no atomic
    // read-modify-write in `core::sync::atomic`.
    unsafe {
        core::arch::asm!(
            "lock *(u64 *)({slot} + 0) += {n}",
            slot = in(reg) slot,
            n = in(reg) n,
            options(nostack, preserves_flags),
        );
    }
}

/// Raises the u64 at `slot` to `value` if it is lower, with compare-and-swap: a run of a program
/// that preempts this one between its load and its store cannot be undone by it. Bounded for the
/// verifier: it gives up after 8 lost races, each another run's store in between on this CPU.
///
/// # Safety
/// `slot` must point into a live map value.
#[inline(always)]
pub unsafe fn raise(slot: *mut u64, value: u64) {
    for _ in 0..8 {
        // SAFETY: as the caller promises.
        let seen = unsafe { core::ptr::read_volatile(slot) };
        if value <= seen {
            return;
        }
        let found: u64;
        // SAFETY: as the caller promises. BPF_CMPXCHG (Linux 5.12): stores `value` if the slot
        // still holds `seen` (in r0), and returns what it held in r0.
        unsafe {
            core::arch::asm!(
                "r0 = cmpxchg_64({slot} + 0, r0, {value})",
                slot = in(reg) slot,
                value = in(reg) value,
                inout("r0") seen => found,
                options(nostack, preserves_flags),
            );
        }
        if found == seen {
            return;
        }
    }
}

/// Reserves a record of type `T` in `EVENTS`; when the ring is full the loss is counted
/// (`LOST_RING_FULL`) and None returned.
#[inline(always)]
pub fn reserve<T: 'static>() -> Option<RingBufEntry<T>> {
    let entry = EVENTS.reserve::<T>(0);
    if entry.is_none() {
        count(counter::LOST_RING_FULL);
    }
    entry
}

/// Flags for submitting a reserved record: no wake-up (user space polls every
/// 10 ms) except for the first record above a quarter of the ring since the reader last waited
/// (`WOKEN`), so a burst is drained before the ring fills. One wake-up per wait, not one per
/// record above the mark: a wake-up is an interrupt (an IPI, a trap to the hypervisor in a VM)
/// that costs the traced thread microseconds, and once woken the reader drains anyway.
#[inline(always)]
pub fn submit_flags() -> u64 {
    // The reserved record is already counted as unread.
    wake_flags(EVENTS.query(BPF_RB_AVAIL_DATA as u64))
}

/// [`submit_flags`] for a record of `len` bytes written with `bpf_ringbuf_output` (not yet in the
/// ring when asked).
#[inline(always)]
pub fn output_flags(len: usize) -> u64 {
    wake_flags(EVENTS.query(BPF_RB_AVAIL_DATA as u64) + footprint(len))
}

/// Ring bytes a record of `len` bytes takes: rounded up to 8, plus its 8-byte header.
#[inline(always)]
fn footprint(len: usize) -> u64 {
    ((len as u64 + 7) & !7) + 8
}

/// Wake-up only when the unread data with this record, `unread_with_record`, is past the quarter
/// mark and no record has woken the reader since it last waited. Two CPUs may both see `WOKEN`
/// at 0 and both wake it: a spare wake-up, never a missed one.
#[inline(always)]
fn wake_flags(unread_with_record: u64) -> u64 {
    if unread_with_record < load_time(&RING_BYTES) / 4 {
        return BPF_RB_NO_WAKEUP as u64;
    }
    let Some(woken) = WOKEN.get_ptr_mut(0) else {
        return BPF_RB_FORCE_WAKEUP as u64;
    };
    // SAFETY: the map's one value, a u32; a racing write by another CPU is benign (see above).
    unsafe {
        if core::ptr::read_volatile(woken) != 0 {
            return BPF_RB_NO_WAKEUP as u64;
        }
        core::ptr::write_volatile(woken, 1);
    }
    BPF_RB_FORCE_WAKEUP as u64
}
