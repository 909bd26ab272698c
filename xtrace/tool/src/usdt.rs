//! The USDT probes every range ends in (provider `xtrace`), in the `<sys/sdt.h>` note format with a
//! semaphore each and a 1-byte `nop` at the call site, as `<sys/sdt.h>` places. Not the 5-byte
//! `nopl 0x0(%rax,%rax,1)`: Linux 6.18 turns a uprobe on that into a call to an `[uprobes-trampoline]`
//! page that a forked child does not inherit, so a child that reached the site crashed. Untraced, a range costs the semaphore load in `enabled`; xtrace
//! raises the semaphore (the kernel's uprobe reference counter) while it is attached.
//!
//! Arguments are 8-byte registers: `source` says which API the range came from ([`Source`]),
//! strings are pointers to NUL-terminated UTF-8 (null when absent), mostly to the library's own
//! copies and tagged so that the tracer reads each name once (`names.rs`).
use xtrace_common::ranges;

use crate::names;

/// Which API a range came from: the first argument of every probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Source {
    Xtrace = ranges::SOURCE_XTRACE,
    Nvtx = ranges::SOURCE_NVTX,
    Itt = ranges::SOURCE_ITT,
}

/// One semaphore per probe, in `.probes` like `<sys/sdt.h>`'s; the names follow its
/// `provider_name_semaphore` convention.
macro_rules! semaphores {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        #[used]
        #[link_section = ".probes"]
        pub static mut $name: u16 = 0;
    )*};
}

semaphores!(
    xtrace_range_push_semaphore,
    xtrace_range_pop_semaphore,
    xtrace_range_start_semaphore,
    xtrace_range_end_semaphore,
    xtrace_mark_semaphore,
    xtrace_thread_name_semaphore,
    xtrace_gpu_records_semaphore,
    xtrace_gpu_drain_semaphore,
);

/// Whether a tracer is attached to the probe whose semaphore this is.
macro_rules! enabled {
    ($semaphore:ident) => {
        // SAFETY: a plain load of a u16 that only the kernel writes (while attaching/detaching).
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!($crate::usdt::$semaphore)) != 0 }
    };
}
pub(crate) use enabled;

/// Arguments sit in fixed registers (the SysV argument registers), so every build of the library
/// has the same notes.
///
/// Emits one call site (its name and argument string checked, when compiled, against
/// `xtrace_common::ranges::PROBES`, the table xtrace attaches by): the nop, and its note (`.note.stapsdt`, type 3: the site's address, the
/// `.stapsdt.base` address for prelink adjustment, the semaphore's address, provider, name, and
/// the argument string), plus the comdat `.stapsdt.base` section `<sys/sdt.h>` also emits.
macro_rules! site {
    ($semaphore:ident, $name:literal, $args:literal, $($reg:tt = $arg:expr),+) => {
        const _: () = assert!(
            xtrace_common::ranges::declared($name, $args),
            "a call site whose name and arguments are not in xtrace_common::ranges::PROBES"
        );
        // SAFETY: the template is a nop plus data in non-loaded sections; it reads no memory
        // itself (the tracer reads the arguments' pointees), touches no stack or flags.
        unsafe {
            core::arch::asm!(
                "990: nop",
                ".pushsection .note.stapsdt, \"\", \"note\"",
                ".balign 4",
                ".4byte 992f-991f, 994f-993f, 3",
                "991: .asciz \"stapsdt\"",
                "992: .balign 4",
                "993: .8byte 990b",
                ".8byte _.stapsdt.base",
                ".8byte {semaphore}",
                ".asciz \"xtrace\"",
                concat!(".asciz \"", $name, "\""),
                concat!(".asciz \"", $args, "\""),
                "994: .balign 4",
                ".popsection",
                ".ifndef _.stapsdt.base",
                ".pushsection .stapsdt.base, \"aG\", \"progbits\", .stapsdt.base, comdat",
                ".weak _.stapsdt.base",
                ".hidden _.stapsdt.base",
                "_.stapsdt.base: .space 1",
                ".size _.stapsdt.base, 1",
                ".popsection",
                ".endif",
                $(in($reg) $arg,)+
                semaphore = sym $crate::usdt::$semaphore,
                options(att_syntax, nostack, preserves_flags, readonly)
            )
        }
    };
}

/// `xtrace:range_push(source, domain, name)`: opens a range on this thread's stack of `domain`
/// (plain string addresses, never tagged). xtrace does not attach here; see `open.rs`.
#[inline(never)]
pub fn range_push(source: Source, domain: u64, name: u64) {
    let s = source as u64;
    site!(
        xtrace_range_push_semaphore,
        "range_push",
        "8@%rdi 8@%rsi 8@%rdx",
        "rdi" = s,
        "rsi" = domain,
        "rdx" = name
    );
}

/// `xtrace:range_pop(source, domain, name, start_ns, depth)`: closes the innermost range of this
/// thread's `domain` stack, which began at `start_ns` (CLOCK_MONOTONIC; 0 when not kept) and has
/// `depth` ranges of its stack open around it.
#[inline(never)]
pub fn range_pop(source: Source, domain: u64, name: u64, start_ns: u64, depth: u64) {
    let s = source as u64;
    site!(
        xtrace_range_pop_semaphore,
        "range_pop",
        "8@%rdi 8@%rsi 8@%rdx 8@%rcx 8@%r8",
        "rdi" = s,
        "rsi" = domain,
        "rdx" = name,
        "rcx" = start_ns,
        "r8" = depth
    );
}

/// `xtrace:range_start(source, domain, name, id)`: opens a range that any thread may end by `id`.
#[inline(never)]
pub fn range_start(
    source: Source,
    domain: Option<&core::ffi::CStr>,
    name: Option<&core::ffi::CStr>,
    id: u64,
) {
    let (s, d, n) = (source as u64, names::arg(domain), names::arg(name));
    site!(
        xtrace_range_start_semaphore,
        "range_start",
        "8@%rdi 8@%rsi 8@%rdx 8@%r8",
        "rdi" = s,
        "rsi" = d,
        "rdx" = n,
        "r8" = id
    );
}

/// `xtrace:range_end(source, id)`: closes the range `range_start` opened with `id`.
#[inline(never)]
pub fn range_end(source: Source, id: u64) {
    let s = source as u64;
    site!(
        xtrace_range_end_semaphore,
        "range_end",
        "8@%rdi 8@%rsi",
        "rdi" = s,
        "rsi" = id
    );
}

/// `xtrace:mark(source, domain, name)`: an instant.
#[inline(never)]
pub fn mark(source: Source, domain: Option<&core::ffi::CStr>, name: Option<&core::ffi::CStr>) {
    let (s, d, n) = (source as u64, names::arg(domain), names::arg(name));
    site!(
        xtrace_mark_semaphore,
        "mark",
        "8@%rdi 8@%rsi 8@%rdx",
        "rdi" = s,
        "rsi" = d,
        "rdx" = n
    );
}

/// `xtrace:thread_name(source, tid, name)`: names thread `tid` (0: the calling thread).
#[inline(never)]
pub fn thread_name(source: Source, tid: u64, name: Option<&core::ffi::CStr>) {
    let (s, n) = (source as u64, names::arg(name));
    site!(
        xtrace_thread_name_semaphore,
        "thread_name",
        "8@%rdi 8@%rsi 8@%rdx",
        "rdi" = s,
        "rsi" = tid,
        "rdx" = n
    );
}

/// `xtrace:gpu_records(records, count)`: hands `count` (at most
/// `xtrace_common::gpu::MAX_RECORDS_PER_HIT`) `DeviceRecord`s at `records` to the tracer, whose
/// kernel program copies them while the probe fires (`device.rs`).
#[inline(never)]
pub fn gpu_records(records: *const xtrace_common::gpu::DeviceRecord, count: usize) {
    let (r, n) = (records as u64, count as u64);
    site!(
        xtrace_gpu_records_semaphore,
        "gpu_records",
        "8@%rdi 8@%rsi",
        "rdi" = r,
        "rsi" = n
    );
}

/// `xtrace:gpu_drain(null, 0)`: only its semaphore matters (the tracer raises it when it stops,
/// asking for the last device records: `device.rs`). Fired once per watcher, so that the site is
/// code that runs; `gpu_records`, the program xtrace puts there, reads the arguments as an empty
/// batch.
#[inline(never)]
pub fn gpu_drain() {
    let (r, n) = (0u64, 0u64);
    site!(
        xtrace_gpu_drain_semaphore,
        "gpu_drain",
        "8@%rdi 8@%rsi",
        "rdi" = r,
        "rsi" = n
    );
}
