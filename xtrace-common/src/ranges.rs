//! The contract between the tool library (`xtrace/tool`, which fires the `xtrace:*` USDT probes)
//! and xtrace (which reads them): every probe's first argument says which API the range came from.

/// `xtrace_range_*`, xtrace's own C API.
pub const SOURCE_XTRACE: u64 = 1;
/// NVTX (through the NVTX3 injection).
pub const SOURCE_NVTX: u64 = 2;
/// Intel ITT (through the collector).
pub const SOURCE_ITT: u64 = 3;

/// Set in a string argument that points at a name the tool library keeps for the life of the
/// process (see *Interned names* below): the tracer has read it before (or reads it from the
/// process's memory once), so the kernel program does not read it again.
pub const INTERNED: u64 = 1 << 63;
/// Set in a string argument by the first probe hit that passes a name the tool library keeps (the
/// name may have been kept earlier, at a push whose pop fires later): the kernel program
/// reads it (at the address without this bit) and user space remembers it for later [`INTERNED`]
/// uses.
pub const INTERNED_FIRST: u64 = 1 << 62;
/// The address bits of a string argument. (`range_push`, which only other tracers read, passes
/// bare addresses.)
pub const ADDRESS: u64 = !(INTERNED | INTERNED_FIRST);

// # Interned names
// Reading a string from user memory costs a kernel program about as much as everything else a
// range hit does (~150 ns on the VM the bench ran on), and range names repeat. So the tool library copies each name it sees into memory it never frees, at most
// `INTERN_LIMIT` names per process, and passes the copy's address: tagged INTERNED_FIRST the
// first time, INTERNED after. A name past the limit is passed untagged and read on every hit.

/// How many names the tool library keeps per process.
pub const INTERN_LIMIT: usize = 3072;

/// One USDT probe of the tool library (provider `xtrace`): its name, its `<sys/sdt.h>` argument
/// string (8-byte registers), which arguments are strings (pointers to NUL-terminated UTF-8;
/// argument 0 is always the source), and whether xtrace attaches to it.
pub struct Probe {
    pub name: &'static str,
    pub args: &'static str,
    pub strings: &'static [bool],
    pub attached: bool,
}

// # One probe per push/pop range
// A uprobe hit costs far more than anything the library can do in the process (~550 ns on the VM
// the bench ran on, against ~25 ns for a vDSO clock read). So while `range_pop` is traced (its
// semaphore raised), the library keeps each thread's open push/pop ranges itself, with the
// CLOCK_MONOTONIC time each began (the clock `bpf_ktime_get_ns` reads), and `range_pop` carries
// the range's name, start and nesting depth: one probe hit per range. `range_push` still fires
// while its own semaphore is raised, for other tracers; xtrace does not attach to it.
// `range_pop`'s start is 0 when the library saw no push for it (pushed while untraced, or beyond
// `OPEN_DEPTH` open ranges); a start before the tracer attached belongs to a push from an earlier
// session whose pop went untraced, so it is not this pop's either.

/// How many push/pop ranges the library keeps open per thread; beyond that the outermost are
/// forgotten (their pops carry start 0).
pub const OPEN_DEPTH: usize = 64;

/// Every probe the tool library fires. The tool checks each of its call sites against this table
/// when it is compiled ([`declared`]); xtrace attaches to those marked `attached`.
pub const PROBES: [Probe; 8] = [
    Probe {
        name: "range_push",
        args: "8@%rdi 8@%rsi 8@%rdx",
        strings: &[false, true, true],
        attached: false,
    },
    // (source, domain, name, start_ns, depth)
    Probe {
        name: "range_pop",
        args: "8@%rdi 8@%rsi 8@%rdx 8@%rcx 8@%r8",
        strings: &[false, true, true, false, false],
        attached: true,
    },
    Probe {
        name: "range_start",
        args: "8@%rdi 8@%rsi 8@%rdx 8@%r8",
        strings: &[false, true, true, false],
        attached: true,
    },
    Probe {
        name: "range_end",
        args: "8@%rdi 8@%rsi",
        strings: &[false, false],
        attached: true,
    },
    Probe {
        name: "mark",
        args: "8@%rdi 8@%rsi 8@%rdx",
        strings: &[false, true, true],
        attached: true,
    },
    Probe {
        name: "thread_name",
        args: "8@%rdi 8@%rsi 8@%rdx",
        strings: &[false, false, true],
        attached: true,
    },
    // (records, count): a batch of `crate::gpu::DeviceRecord`s. Not a range: `--cuda` attaches
    // the kernel program `gpu_records` here, not `usdt_hit`.
    Probe {
        name: "gpu_records",
        args: "8@%rdi 8@%rsi",
        strings: &[false, false],
        attached: false,
    },
    // (null, 0): a site whose semaphore alone matters. xtrace raises it when it stops, while
    // `gpu_records` is still attached: the tool library then hands over its last device records,
    // ending with a `crate::gpu::record_kind::DRAINED` record, and switches CUPTI off. The site
    // fires once, when the library's watcher starts, with arguments `gpu_records` reads as an
    // empty batch.
    Probe {
        name: "gpu_drain",
        args: "8@%rdi 8@%rsi",
        strings: &[false, false],
        attached: false,
    },
];

/// Byte-wise string equality, usable in constants.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Number of arguments in a `<sys/sdt.h>` argument string (one `@` each).
const fn arg_count(args: &str) -> usize {
    let bytes = args.as_bytes();
    let (mut i, mut n) = (0, 0);
    while i < bytes.len() {
        if bytes[i] == b'@' {
            n += 1;
        }
        i += 1;
    }
    n
}

/// Whether [`PROBES`] has a probe `name` with argument string `args`.
pub const fn declared(name: &str, args: &str) -> bool {
    let mut i = 0;
    while i < PROBES.len() {
        if same(PROBES[i].name, name) && same(PROBES[i].args, args) {
            return true;
        }
        i += 1;
    }
    false
}

// Every probe says, for each of its arguments, whether it is a string.
const _: () = {
    let mut i = 0;
    while i < PROBES.len() {
        assert!(arg_count(PROBES[i].args) == PROBES[i].strings.len());
        i += 1;
    }
};
