//! CUDA calls in the pipeline: each call's `ArgsEvent` (entry) and `OutEvent` (return) wait here
//! for its span; the span is then rendered with its meaning (kernel name and launch geometry,
//! bytes and direction, allocation addresses) and counted: launches per kernel, bytes copied per
//! direction, live device memory per process (a trace counter), time blocked in synchronization.
//! A call made inside another CUDA call of the same category on the same thread (cudaMalloc
//! calling cuMemAlloc) is the same operation and is counted once, by the outermost call.
use std::collections::BTreeMap;

use xtrace_common::event::{ArgsEvent, OutEvent, ARG_BLOCK_LEN, ARG_STR_LEN};

use super::kernels::{Call, KernelNames};
use crate::image::Images;
use crate::model::{
    cuda_api::{Direction, Function, Kind, Op, Space, Src},
    pending::Pending,
};

/// A call's entry record, waiting for its span.
#[derive(Clone, Debug)]
struct Entry {
    category: &'static str,
    regs: [u64; 6],
    stack: [u64; 4],
    /// The return address (launches), else 0.
    caller: u64,
    /// A struct argument's bytes, or a string argument (NUL-terminated).
    bytes: Vec<u8>,
    out: Option<u64>,
}

/// A live allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub bytes: u64,
    pub tid: u32,
    pub at_ns: u64,
    pub function: &'static str,
}

/// One process's device or pinned host memory.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    pub live: BTreeMap<u64, Allocation>,
    pub current: u64,
    pub peak: u64,
    pub allocations: u64,
    pub frees: u64,
    /// Frees of addresses no traced allocation returned (allocated before attach).
    pub unknown_frees: u64,
}

impl Memory {
    /// The live allocations by address, largest first (lower address first among equals).
    pub fn largest_first(&self) -> Vec<(u64, &Allocation)> {
        let mut live: Vec<(u64, &Allocation)> = self.live.iter().map(|(p, a)| (*p, a)).collect();
        live.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        live
    }

    /// Takes in `allocation`, handed out at `ptr`.
    fn allocated(&mut self, ptr: u64, allocation: Allocation) {
        let bytes = allocation.bytes;
        if let Some(old) = self.live.insert(ptr, allocation) {
            // An address handed out again without a traced free: replace it.
            self.current -= old.bytes;
        }
        self.current += bytes;
        self.peak = self.peak.max(self.current);
        self.allocations += 1;
    }

    /// Takes in a free of `ptr`; the bytes live after it, when it was of a traced allocation.
    fn freed(&mut self, ptr: u64) -> Option<u64> {
        self.frees += 1;
        match self.live.remove(&ptr) {
            Some(old) => {
                self.current -= old.bytes;
                Some(self.current)
            }
            None => {
                self.unknown_frees += 1;
                None
            }
        }
    }
}

/// Totals for summary.json.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    /// Launches per kernel name.
    pub launches: BTreeMap<String, u64>,
    /// (calls, bytes) per direction.
    pub copies: BTreeMap<Direction, (u64, u64)>,
    /// By memory and process.
    pub memory: BTreeMap<(Space, u32), Memory>,
    /// (calls, bytes) of memsets.
    pub memsets: (u64, u64),
    /// (calls, ns blocked) in synchronization calls.
    pub sync: (u64, u64),
    pub graph_launches: u64,
    /// Calls that returned an error code, per function.
    pub errors: BTreeMap<&'static str, u64>,
    /// Calls whose entry record was lost (ring full, too many pending): counted by span only.
    pub without_args: u64,
}

/// What a CUDA span adds to the trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rendered {
    /// trace.json `args` members (`,"bytes":4096`).
    pub values: String,
    /// The process's live memory of that kind after this call, when it changed.
    pub memory: Option<(Space, u64)>,
}

#[derive(Default)]
pub struct Calls {
    functions: BTreeMap<u32, Function>,
    pending: Pending<Entry>,
    pub names: KernelNames,
    pub totals: Totals,
    /// The kernel of the launch [`Calls::span`] last rendered, until [`Calls::take_launched`].
    launched: Option<String>,
}

fn u32_at(bytes: &[u8], at: usize) -> u64 {
    bytes.get(at..at + 4).map_or(0, |b| {
        u64::from(u32::from_le_bytes(b.try_into().unwrap_or_default()))
    })
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
}

impl Calls {
    pub fn new(functions: BTreeMap<u32, Function>) -> Self {
        Calls {
            functions,
            ..Default::default()
        }
    }

    /// Entry records dropped because too many calls were waiting for their spans.
    pub fn dropped(&self) -> u64 {
        self.pending.dropped
    }

    /// Whether any CUDA function is traced (`--cuda` found a library that has them).
    pub fn traced(&self) -> bool {
        !self.functions.is_empty()
    }

    /// Whether `probe` is a CUDA function.
    pub fn owns(&self, probe: u32) -> bool {
        self.functions.contains_key(&probe)
    }

    /// A call's entry record (see [`Pending`] for records of calls that ended without a span).
    pub fn args(&mut self, images: &mut Images, event: &ArgsEvent) {
        let Some(function) = self.functions.get(&event.probe_id) else {
            return;
        };
        let bytes = event
            .strings
            .iter()
            .zip(event.str_len)
            .find(|(_, len)| *len > 0)
            .map_or_else(Vec::new, |(s, len)| s[..usize::from(len).min(s.len())].to_vec());
        self.names.saw(images, event.header.pid, event.start_ns);
        let entry = Entry {
            category: function.op.category(),
            regs: event.args,
            stack: event.stack,
            caller: event.caller,
            bytes,
            out: None,
        };
        self.pending
            .enter(event.header.tid, event.start_ns, event.depth, entry);
    }

    /// The value an out-pointer held when its call returned.
    pub fn out(&mut self, event: &OutEvent) {
        if let Some(p) = self.pending.get_mut(event.header.tid, event.start_ns) {
            p.out = Some(event.value);
        }
    }

    /// The span of CUDA probe `probe`: rendered, and counted unless nested in a call of its kind.
    pub fn span(
        &mut self,
        images: &mut Images,
        probe: u32,
        pid: u32,
        tid: u32,
        span: (u64, u64),
        ret: u64,
    ) -> Rendered {
        let (start_ns, end_ns) = span;
        let Some(function) = self.functions.get(&probe).copied() else {
            return Rendered::default();
        };
        let mine = self.pending.take(tid, start_ns);
        let category = function.op.category();
        let nested = self
            .pending
            .callers(tid, start_ns)
            .any(|p| p.category == category);
        let code = ret as u32;
        let mut values = String::new();
        if code != 0 {
            values += &format!(",\"error\":{code}");
            *self.totals.errors.entry(function.name).or_default() += 1;
        }
        let Some(call) = mine else {
            self.totals.without_args += 1;
            return Rendered { values, memory: None };
        };
        let count = !nested && code == 0;
        let mut memory = None;
        let get = |s: Src| match s {
            Src::Reg(i) => call.regs[i],
            Src::Stack(j) => call.stack[j],
        };
        // A length, times a row count for the 2D forms.
        let rows_of = |n: Src, rows: Option<Src>| get(n).saturating_mul(rows.map_or(1, get));
        match function.op {
            Op::LaunchRuntime | Op::LaunchRuntimeEx | Op::LaunchDriver | Op::LaunchDriverEx => {
                let launch = self.launch(images, function.op, (pid, start_ns), &call);
                values = launch.json() + &values;
                if count {
                    *self.totals.launches.entry(launch.kernel).or_default() += 1;
                }
            }
            Op::Memcpy { bytes, rows, kind } => {
                let n = rows_of(bytes, rows);
                let direction = match kind {
                    Kind::Fixed(d) => Some(d),
                    Kind::Arg(s) => Direction::from_kind(get(s)),
                };
                let shown = direction.map_or("unknown", Direction::name);
                values = format!(",\"bytes\":{n},\"kind\":\"{shown}\"") + &values;
                if let (true, Some(direction)) = (count, direction) {
                    let entry = self.totals.copies.entry(direction).or_default();
                    entry.0 += 1;
                    entry.1 += n;
                }
            }
            Op::Memset {
                count: elements,
                rows,
                element,
            } => {
                let n = rows_of(elements, rows).saturating_mul(element);
                values = format!(",\"bytes\":{n}") + &values;
                if count {
                    self.totals.memsets.0 += 1;
                    self.totals.memsets.1 += n;
                }
            }
            Op::Alloc {
                size,
                rows,
                layers,
                space,
                ..
            } => {
                let allocation = Allocation {
                    bytes: rows_of(size, rows).saturating_mul(layers.map_or(1, get)),
                    tid,
                    at_ns: start_ns,
                    function: function.name,
                };
                let ptr = call.out.unwrap_or(0);
                let (shown, counted) = self.allocation((space, pid), allocation, ptr, (code, count));
                values = shown + &values;
                memory = counted;
            }
            Op::Free { ptr, space } => {
                let ptr = call.regs[ptr];
                values = format!(",\"ptr\":\"{ptr:#x}\"") + &values;
                if count && ptr != 0 {
                    let m = self.totals.memory.entry((space, pid)).or_default();
                    memory = m.freed(ptr).map(|current| (space, current));
                }
            }
            Op::Sync => {
                if !nested {
                    self.totals.sync.0 += 1;
                    self.totals.sync.1 += end_ns.saturating_sub(start_ns);
                }
            }
            Op::GraphLaunch => self.totals.graph_launches += u64::from(count),
            Op::GetFunction | Op::KernelGetFunction => {
                values = self.lookup(function.op, pid, code, &call) + &values;
            }
        }
        Rendered { values, memory }
    }

    /// The values of an allocation that handed out `ptr` (by a call that returned `code`), and,
    /// when it is counted (`count`), the memory of its space in process `pid` after it.
    fn allocation(
        &mut self,
        (space, pid): (Space, u32),
        allocation: Allocation,
        ptr: u64,
        (code, count): (u32, bool),
    ) -> (String, Option<(Space, u64)>) {
        let n = allocation.bytes;
        let values = if code == 0 {
            format!(",\"bytes\":{n},\"ptr\":\"{ptr:#x}\"")
        } else {
            // A failed call writes no pointer: what the out-pointer holds is not its.
            format!(",\"bytes\":{n},\"ptr\":null")
        };
        if !count || ptr == 0 {
            return (values, None);
        }
        let m = self.totals.memory.entry((space, pid)).or_default();
        m.allocated(ptr, allocation);
        (values, Some((space, m.current)))
    }

    /// The values of a lookup of a kernel's function handle (by name, or from a library's
    /// kernel handle), whose result code is `code`; names the handle it gave out.
    fn lookup(&mut self, op: Op, pid: u32, code: u32, call: &Entry) -> String {
        if op == Op::GetFunction {
            let name = lookup_name(pid, call.regs[2], &call.bytes);
            let handle = call.out.unwrap_or(0);
            let values = format!(
                ",\"name\":{},\"function\":\"{handle:#x}\"",
                serde_json::to_string(&name).unwrap_or_default()
            );
            if code == 0 {
                self.names.name_handle(pid, handle, name);
            }
            values
        } else {
            let (handle, kernel) = (call.out.unwrap_or(0), call.regs[1]);
            if let (0, Some(name)) = (code, self.names.handle_name(pid, kernel)) {
                self.names.name_handle(pid, handle, name);
            }
            format!(",\"function\":\"{handle:#x}\",\"kernel\":\"{kernel:#x}\"")
        }
    }

    /// The launch `call` made by process `pid` at `ns`.
    fn launch(&mut self, images: &mut Images, op: Op, (pid, ns): (u32, u64), call: &Entry) -> Launch {
        let (r, s, b) = (&call.regs, &call.stack, &call.bytes[..]);
        let at = Call {
            pid,
            ns,
            caller: call.caller,
        };
        let lo = |v: u64| v & 0xffff_ffff;
        let hi = |v: u64| v >> 32;
        let launch = match op {
            Op::LaunchRuntime => Launch {
                kernel: self.names.stub(images, at, r[0]),
                grid: [lo(r[1]), hi(r[1]), lo(r[2])],
                block: [lo(r[3]), hi(r[3]), lo(r[4])],
                shared_mem: s[0],
                stream: s[1],
            },
            Op::LaunchRuntimeEx => Launch {
                kernel: self.names.stub(images, at, r[1]),
                grid: [u32_at(b, 0), u32_at(b, 4), u32_at(b, 8)],
                block: [u32_at(b, 12), u32_at(b, 16), u32_at(b, 20)],
                shared_mem: u64_at(b, 24),
                stream: u64_at(b, 32),
            },
            Op::LaunchDriver => Launch {
                kernel: self.names.handle(images, at, r[0]),
                grid: [lo(r[1]), lo(r[2]), lo(r[3])],
                block: [lo(r[4]), lo(r[5]), lo(s[0])],
                shared_mem: lo(s[1]),
                stream: s[2],
            },
            _ => Launch {
                kernel: self.names.handle(images, at, r[1]),
                grid: [u32_at(b, 0), u32_at(b, 4), u32_at(b, 8)],
                block: [u32_at(b, 12), u32_at(b, 16), u32_at(b, 20)],
                shared_mem: u32_at(b, 24),
                stream: u64_at(b, 32),
            },
        };
        self.launched = Some(launch.kernel.clone());
        launch
    }

    /// The kernel of the span just rendered by [`Calls::span`], when it was a launch.
    pub fn take_launched(&mut self) -> Option<String> {
        self.launched.take()
    }
}

/// Longest kernel name read (PyTorch's mangled template kernels run to a few hundred bytes).
const KERNEL_NAME_MAX: usize = 16 << 10;

/// The kernel name a lookup (`cuModuleGetFunction`, `cuLibraryGetKernel`) of process `pid` asked
/// for at `address`, demangled. The kernel program reads the first 63 bytes at entry, and nothing
/// from a page the process has not touched yet (libcublasLt's names, the first time); a name so
/// cut or unread is read whole from the process, which has touched it by its return. By the time
/// xtrace reads it, a name the process built for the call may be gone and its memory reused, so
/// what it reads must begin with what the kernel program read, or, where that read nothing, look
/// like a name (printable ASCII).
fn lookup_name(pid: u32, address: u64, read: &[u8]) -> String {
    let kept = crate::model::text::c_text(read);
    let cut = read.len() >= ARG_STR_LEN;
    let whole = (read.is_empty() || cut)
        .then(|| crate::procfs::process_text(pid, address, KERNEL_NAME_MAX))
        .flatten()
        .filter(|text| match cut {
            true => text.starts_with(&kept),
            false => !text.is_empty() && text.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
        });
    crate::demangle::demangle(&whole.unwrap_or(kept))
}

const _: () = assert!(
    ARG_BLOCK_LEN >= 40,
    "launch configs are read up to their stream at 32..40"
);

struct Launch {
    kernel: String,
    grid: [u64; 3],
    block: [u64; 3],
    shared_mem: u64,
    stream: u64,
}

impl Launch {
    fn json(&self) -> String {
        let [gx, gy, gz] = self.grid;
        let [bx, by, bz] = self.block;
        format!(
            ",\"kernel\":{},\"grid\":[{gx},{gy},{gz}],\"block\":[{bx},{by},{bz}],\"shared_mem\":{},\"stream\":\"{:#x}\"",
            serde_json::to_string(&self.kernel).unwrap_or_default(),
            self.shared_mem,
            self.stream
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel program would have read of `text`: its first 63 bytes and a NUL.
    fn read_of(text: &str) -> Vec<u8> {
        let mut read: Vec<u8> = text.bytes().take(ARG_STR_LEN - 1).collect();
        read.push(0);
        read
    }

    #[test]
    fn lookup_names_are_read_whole_only_where_they_still_are() {
        let pid = std::process::id();
        let long =
            "_ZN2nn6detail29vectorized_elementwise_kernelILi4ENS0_10AddFunctorIfEESt5arrayIPcLm2EEEEviT0_T1_";
        let name = std::ffi::CString::new(long).unwrap();
        let at = name.as_ptr() as u64;
        let whole = crate::demangle::demangle(long);
        // Cut at 63 bytes: read whole from the process.
        assert_eq!(lookup_name(pid, at, &read_of(long)), whole);
        // Not read at entry: read from the process.
        assert_eq!(lookup_name(pid, at, &[]), whole);
        // The memory now holds something else: what the kernel program read stays.
        let other = std::ffi::CString::new(format!("_Z5other{}", "x".repeat(80))).unwrap();
        let cut = lookup_name(pid, other.as_ptr() as u64, &read_of(long));
        assert_eq!(cut, &long[..ARG_STR_LEN - 1]);
        let garbage = std::ffi::CString::new("\x01\x02binary").unwrap();
        assert_eq!(lookup_name(pid, garbage.as_ptr() as u64, &[]), "");
        // A whole short read is not read again (no process 0 is needed).
        assert_eq!(
            lookup_name(0, 0, b"_Z6vecAddPfS_S_i\0"),
            "vecAdd(float*, float*, float*, int)"
        );
    }
}
