//! The embedded kernel object (built from xtrace-ebpf by build.rs), loading it, and reading its
//! per-CPU loss counters. `uprobe_multi` loads programs for uprobe_multi links, which aya cannot;
//! `layout` has where the programs find fields of the kernel's structures.
mod attr;
pub mod batch;
pub mod btf;
pub mod features;
pub mod goroutines;
pub mod kallsyms;
pub mod layout;
pub mod loader;
pub mod overhead;
pub mod perf_uprobe;
pub mod uprobe_multi;
pub mod uprobe_program;
pub mod verify;

use aya::{
    include_bytes_aligned,
    maps::{Array, HashMap, MapData, PerCpuArray},
    Ebpf, EbpfLoader,
};
use xtrace_common::{
    gpu::{MAX_KEPT_NAME_PIECES, MAX_KEPT_NOTICE_PIECES},
    probe::{counter, sample_pid_hint, ShortCalls, LOG2_BUCKETS, MAX_GOROUTINES, SAMPLE_PID_HINTS},
    usdt::UsdtSite,
};

use crate::{
    error::{Error, Result},
    model::summary::Lost,
};

static OBJECT: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xtrace"));

/// Room in the sampled-process table for followed processes alive at once, beyond the targets.
pub const FOLLOW_MAX: u32 = 8192;

/// What the kernel programs are configured with at load time.
#[derive(Debug, Default)]
pub struct LoadOptions {
    /// Ring buffer size: a power of two, at least one page.
    pub ring_bytes: u32,
    /// (probe id, spec) of each probe that captures arguments; when empty the kernel programs
    /// leave their argument code out.
    pub arg_specs: Vec<(u32, u32)>,
    /// (probe id, lengths) of each probe that reads a long string (`str:N`, N of 64 and up).
    pub str_lens: Vec<(u32, xtrace_common::probe::StrLens)>,
    /// `--tid`: trace only these threads (empty: all).
    pub tids: Vec<u32>,
    /// `--min-duration` in ns (0: every call is sent as a span).
    pub min_duration_ns: u64,
    /// Number of probes (sizes the per-probe maps that are in use).
    pub probes: u32,
    /// USDT call sites, by attach cookie.
    pub usdt_sites: Vec<UsdtSite>,
    /// With CPU sampling, the processes to sample; empty: every process (`-a`).
    pub sample_pids: Vec<u32>,
    /// `--user-stack`: bytes of user stack copied per sample (0: frame pointers only).
    pub user_stack_bytes: u32,
    /// With sampling limited to `sample_pids`: follow the processes they start, with what those
    /// programs read on this kernel (None: `--no-inherit`, `-a`, or no sampling).
    pub follow: Option<layout::Offsets>,
    /// xtrace's PID namespace when it is not the initial one: the programs report pids there.
    pub pid_namespace: Option<crate::pidns::PidNamespace>,
    /// Whether span entries keep their return address, for samples to restore over return
    /// probes' trampolines in the user stacks they copy (only when sampling copies stacks).
    pub return_addresses: bool,
    /// Where a task's uprobe state lies, for samples taken while a probed instruction's copy is
    /// single-stepped (all 0: not read).
    pub uprobe_task: layout::UprobeTask,
    /// Whether functions of Go code are traced, whose open calls are kept per goroutine and
    /// program (`task_struct.self_exec_id`, whose offset is then read from the kernel's BTF).
    pub go_code: bool,
    /// `--off-cpu`'s MIN in ns: the off-CPU programs' tables are sized, and
    /// `task_struct.__state`'s offset read from the kernel's BTF (None: not measured).
    pub off_cpu_min_ns: Option<u64>,
    /// Whether samples walk the Python frames of recognised CPython processes (`PY_PROCS`); the
    /// offset of `task_struct.thread.fsbase` is then read from the kernel's BTF.
    pub python: bool,
    /// Whether the GPU device timeline's records are read (`GPU_NAME_PIECES` and
    /// `GPU_NOTICE_PIECES` are then sized).
    pub gpu_device: bool,
}

fn map_error(name: &'static str) -> impl Fn(aya::maps::MapError) -> Error {
    move |source| Error::Map { name, source }
}

/// A map missing from the object.
fn missing_map(name: &'static str) -> Error {
    Error::Map {
        name,
        source: aya::maps::MapError::InvalidName { name: name.into() },
    }
}

fn map_mut<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut aya::maps::Map> {
    ebpf.map_mut(name).ok_or_else(|| missing_map(name))
}

/// Fills `ARG_SPECS` and `STR_LENS` from `options`.
fn fill_arg_specs(ebpf: &mut Ebpf, options: &LoadOptions) -> Result<()> {
    if !options.arg_specs.is_empty() {
        let mut specs: Array<_, u32> =
            Array::try_from(map_mut(ebpf, "ARG_SPECS")?).map_err(map_error("ARG_SPECS"))?;
        for (id, spec) in &options.arg_specs {
            specs.set(*id, spec, 0).map_err(map_error("ARG_SPECS"))?;
        }
    }
    if !options.str_lens.is_empty() {
        let mut lens: Array<_, xtrace_common::probe::StrLens> =
            Array::try_from(map_mut(ebpf, "STR_LENS")?).map_err(map_error("STR_LENS"))?;
        for (id, len) in &options.str_lens {
            lens.set(*id, len, 0).map_err(map_error("STR_LENS"))?;
        }
    }
    Ok(())
}

/// Offsets in `task_struct` that the programs read, from the kernel's BTF (read once, and only
/// when a program needs one); 0 (None) when not needed or not found.
struct TaskOffsets {
    /// `self_exec_id`, for Go code.
    exec_id: u32,
    /// `__state` (`state` before 5.14), for `--off-cpu`.
    state: u32,
    /// `stack` (the kernel stack's base), for `--off-cpu` to tell a wake-up in a system call
    /// without walking its stack (0: not found, every wake-up's stack is walked).
    stack: u32,
    /// `thread.fsbase`, for Python frames.
    fsbase: Option<u32>,
}

impl TaskOffsets {
    fn read(options: &LoadOptions) -> Self {
        let needed = options.go_code || options.off_cpu_min_ns.is_some() || options.python;
        let btf = needed.then(|| btf::KernelBtf::shared().ok()).flatten();
        let member = |name: &str| {
            btf.as_ref()
                .and_then(|btf| btf.member_offset("task_struct", name))
        };
        TaskOffsets {
            exec_id: options
                .go_code
                .then(|| member("self_exec_id"))
                .flatten()
                .unwrap_or(0),
            state: match options.off_cpu_min_ns {
                Some(_) => member("__state").or_else(|| member("state")).unwrap_or(0),
                None => 0,
            },
            stack: match options.off_cpu_min_ns {
                Some(_) => member("stack").unwrap_or(0),
                None => 0,
            },
            fsbase: options
                .python
                .then(|| Some(member("thread")? + btf.as_ref()?.member_offset("thread_struct", "fsbase")?))
                .flatten(),
        }
    }
}

/// Loads the object configured by `options` with `loader` (see [`loader`]: one without the
/// kernel's BTF).
pub fn load(options: &LoadOptions, loader: EbpfLoader<'static>) -> Result<Ebpf> {
    let args_enabled = u8::from(!options.arg_specs.is_empty());
    // -u probes' long strings are in STR_LENS, USDT sites' in their arguments (`UsdtArg::long`).
    let str_lens = !options.str_lens.is_empty();
    let usdt_long = options
        .usdt_sites
        .iter()
        .any(|s| s.args.iter().any(|a| a.long != 0));
    let long_strings = u8::from(str_lens || usdt_long);
    let tid_filter = u8::from(!options.tids.is_empty());
    let sample_filter = u8::from(!options.sample_pids.is_empty());
    // A per-probe map in use has a slot per probe; an unused one keeps its single slot.
    let slots = |used: bool| if used { options.probes.max(1) } else { 1 };
    let gpu_sized = |entries: u32| if options.gpu_device { entries } else { 1 };
    let followed_room = options.follow.map_or(0, |_| FOLLOW_MAX);
    let sample_slots = (options.sample_pids.len() as u32).max(1) + followed_room;
    let hint_slots = match sample_filter {
        0 => 1,
        _ => SAMPLE_PID_HINTS,
    };
    let offsets = options.follow.unwrap_or_default();
    let TaskOffsets {
        exec_id: task_exec_id,
        state: task_state,
        stack: task_stack,
        fsbase: task_fsbase,
    } = TaskOffsets::read(options);
    // `--off-cpu` tells a wake-up from an interrupt by the interrupt entry code in its stack.
    let irq_entry = match options.off_cpu_min_ns {
        Some(_) => kallsyms::irq_entry_text(),
        None => 0..0,
    };
    let off_cpu_keys = match options.off_cpu_min_ns {
        Some(_) => xtrace_common::offcpu::OFF_CPU_KEYS,
        None => 1,
    };
    let pid_namespace = options
        .pid_namespace
        .unwrap_or(crate::pidns::PidNamespace { dev: 0, ino: 0 });
    // Borrowing the values below for as long as the load.
    let mut loader: EbpfLoader<'_> = loader;
    let mut ebpf = loader
        // STACKS is task storage, which aya creates but has no user-space type for (xtrace
        // never reads it from user space).
        .allow_unsupported_maps()
        .map_max_entries("EVENTS", options.ring_bytes)
        .map_max_entries("ARG_SPECS", slots(args_enabled != 0))
        .map_max_entries("TIDS", options.tids.len().max(1) as u32)
        .map_max_entries("USDT_SITES", options.usdt_sites.len().max(1) as u32)
        .map_max_entries("SAMPLE_PIDS", sample_slots)
        .map_max_entries("SAMPLE_PID_HINTS", hint_slots)
        .override_global("TASK_PID", &offsets.task_pid, true)
        .override_global("TASK_THREAD_PID", &offsets.task_thread_pid, true)
        .override_global("PID_LEVEL", &offsets.pid_level, true)
        .override_global("PID_NUMBERS", &offsets.pid_numbers, true)
        .override_global("UPID_SIZE", &offsets.upid_size, true)
        .override_global("PIDNS_DEV", &pid_namespace.dev, true)
        .override_global("PIDNS_INO", &pid_namespace.ino, true)
        .override_global("SELF_TGID", &std::process::id(), true)
        .override_global("RING_BYTES", &u64::from(options.ring_bytes), true)
        .override_global("SAMPLE_FILTER", &sample_filter, true)
        .override_global("ARGS_ENABLED", &args_enabled, true)
        .override_global("LONG_STRINGS", &long_strings, true)
        .map_max_entries("STR_LENS", slots(str_lens))
        .map_max_entries("SHORT_CALLS", slots(options.min_duration_ns > 0))
        .override_global("TID_FILTER", &tid_filter, true)
        .override_global("MIN_DURATION_NS", &options.min_duration_ns, true)
        .override_global("USER_STACK_BYTES", &options.user_stack_bytes, true)
        .override_global("RETURN_ADDRESSES", &u8::from(options.return_addresses), true)
        .override_global("TASK_EXEC_ID", &task_exec_id, true)
        .map_max_entries("GO_STACKS", if options.go_code { MAX_GOROUTINES } else { 1 })
        .map_max_entries("GPU_NAME_PIECES", gpu_sized(MAX_KEPT_NAME_PIECES))
        .map_max_entries("GPU_NOTICE_PIECES", gpu_sized(MAX_KEPT_NOTICE_PIECES))
        .map_max_entries("OFF_CPU_TOTALS", off_cpu_keys)
        .map_max_entries("OFF_CPU_STACKS", off_cpu_keys)
        .override_global("OFF_CPU_MIN_NS", &options.off_cpu_min_ns.unwrap_or(0), true)
        .override_global("TASK_STATE", &task_state, true)
        .override_global("TASK_STACK", &task_stack, true)
        .override_global("IRQ_ENTRY_START", &irq_entry.start, true)
        .override_global("IRQ_ENTRY_END", &irq_entry.end, true)
        .override_global("PYTHON", &u8::from(task_fsbase.is_some()), true)
        .override_global("TASK_FSBASE", &task_fsbase.unwrap_or(0), true)
        .override_global("TASK_UTASK", &options.uprobe_task.task_utask, true)
        .override_global("UTASK_STATE", &options.uprobe_task.state, true)
        .override_global("UTASK_VADDR", &options.uprobe_task.vaddr, true)
        .override_global("UTASK_XOL_VADDR", &options.uprobe_task.xol_vaddr, true)
        .load(OBJECT)?;
    fill_arg_specs(&mut ebpf, options)?;
    if !options.usdt_sites.is_empty() {
        let mut sites: Array<_, UsdtSite> =
            Array::try_from(map_mut(&mut ebpf, "USDT_SITES")?).map_err(map_error("USDT_SITES"))?;
        for (index, site) in options.usdt_sites.iter().enumerate() {
            sites
                .set(index as u32, site, 0)
                .map_err(map_error("USDT_SITES"))?;
        }
    }
    fill_filters(&mut ebpf, options)?;
    Ok(ebpf)
}

/// The processes sampled (`SAMPLE_PIDS` and their `SAMPLE_PID_HINTS` bytes) and the threads
/// traced (`TIDS`), when the recording names them.
fn fill_filters(ebpf: &mut Ebpf, options: &LoadOptions) -> Result<()> {
    if !options.sample_pids.is_empty() {
        let mut hints: Array<_, u8> =
            Array::try_from(map_mut(ebpf, "SAMPLE_PID_HINTS")?).map_err(map_error("SAMPLE_PID_HINTS"))?;
        for &pid in &options.sample_pids {
            hints
                .set(sample_pid_hint(pid), 1, 0)
                .map_err(map_error("SAMPLE_PID_HINTS"))?;
        }
        let mut pids: HashMap<_, u32, u8> =
            HashMap::try_from(map_mut(ebpf, "SAMPLE_PIDS")?).map_err(map_error("SAMPLE_PIDS"))?;
        for pid in &options.sample_pids {
            pids.insert(pid, 1, 0).map_err(map_error("SAMPLE_PIDS"))?;
        }
    }
    if !options.tids.is_empty() {
        let mut tids: HashMap<_, u32, u8> =
            HashMap::try_from(map_mut(ebpf, "TIDS")?).map_err(map_error("TIDS"))?;
        for tid in &options.tids {
            tids.insert(tid, 1, 0).map_err(map_error("TIDS"))?;
        }
    }
    Ok(())
}

/// Loads program `program` of the object and attaches it to raw tracepoint `tracepoint` (by name:
/// no tracefs); the link is an fd that goes with the object.
pub fn attach_raw_tracepoint(ebpf: &mut Ebpf, program: &str, tracepoint: &str) -> Result<()> {
    let hook: &mut aya::programs::RawTracePoint = program_mut(ebpf, program)?;
    // Verified beside another program already ([`verify`]) when it was wanted with one.
    if hook.fd().is_err() {
        hook.load().map_err(|source| Error::Attach {
            what: format!("loading {program}"),
            source,
        })?;
    }
    hook.attach(tracepoint).map_err(|source| Error::Attach {
        what: format!("{program} to raw tracepoint {tracepoint}"),
        source,
    })?;
    Ok(())
}

/// Program `name` of the loaded object as its kind (`UProbe`, `PerfEvent`, `RawTracePoint`).
pub fn program_mut<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let program = ebpf.program_mut(name).ok_or_else(|| {
        Error::io(
            format!("program {name}"),
            std::io::Error::other("missing from the object"),
        )
    })?;
    program.try_into().map_err(|source| Error::Attach {
        what: name.to_string(),
        source,
    })
}

/// Takes map `name` out of the object so it outlives the programs (read after detaching).
pub fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map> {
    ebpf.take_map(name).ok_or_else(|| missing_map(name))
}

/// Makes every uprobe program return at once from now on, counting the hit (`STOPPED`): the
/// stop of a recording on perf-event uprobes, whose removal comes later (`probes::teardown`).
pub fn stop_programs(ebpf: &mut Ebpf) -> Result<()> {
    let map = ebpf.map_mut("STOPPED").ok_or_else(|| missing_map("STOPPED"))?;
    let mut stopped = aya::maps::Array::<_, u32>::try_from(map).map_err(map_error("STOPPED"))?;
    stopped.set(0, 1, 0).map_err(map_error("STOPPED"))
}

/// One per-CPU counter summed over CPUs.
fn counter_sum(counters: &PerCpuArray<MapData, u64>, index: u32) -> Result<u64> {
    let values = counters.get(&index, 0).map_err(map_error("COUNTERS"))?;
    Ok(values.iter().sum())
}

/// The loss counters summed over CPUs.
pub fn read_lost(counters: &PerCpuArray<MapData, u64>) -> Result<Lost> {
    Ok(Lost {
        ring_full: counter_sum(counters, counter::LOST_RING_FULL)?,
        too_deep: counter_sum(counters, counter::LOST_TOO_DEEP)?,
        no_thread_slot: counter_sum(counters, counter::LOST_NO_THREAD_SLOT)?,
    })
}

/// Calls below `--min-duration` of each of `probes` probes, summed over CPUs.
pub fn read_short_calls(map: &PerCpuArray<MapData, ShortCalls>, probes: usize) -> Result<Vec<ShortCalls>> {
    (0..probes as u32)
        .map(|id| {
            let per_cpu = map.get(&id, 0).map_err(map_error("SHORT_CALLS"))?;
            let mut sum = ShortCalls {
                count: 0,
                total_ns: 0,
                min_ns_not: 0,
                max_ns: 0,
                log2: [0; LOG2_BUCKETS],
            };
            for cpu in per_cpu.iter().filter(|c| c.count > 0) {
                sum.min_ns_not = sum.min_ns_not.max(cpu.min_ns_not);
                sum.max_ns = sum.max_ns.max(cpu.max_ns);
                sum.count += cpu.count;
                sum.total_ns += cpu.total_ns;
                for (total, n) in sum.log2.iter_mut().zip(cpu.log2) {
                    *total += n;
                }
            }
            Ok(sum)
        })
        .collect()
}

/// Processes that sampled processes started: (sampled too, not sampled because the table was
/// full).
pub fn read_followed(counters: &PerCpuArray<MapData, u64>) -> Result<(u64, u64)> {
    Ok((
        counter_sum(counters, counter::FOLLOWED_PROCESSES)?,
        counter_sum(counters, counter::PROCESSES_NOT_FOLLOWED)?,
    ))
}

/// Off-CPU waits not counted (a full table, a full ring).
pub fn read_lost_off_cpu(counters: &PerCpuArray<MapData, u64>) -> Result<u64> {
    counter_sum(counters, counter::LOST_OFF_CPU)
}

/// GPU device activity records the kernel program could not send (a batch past its limit, a full
/// ring).
pub fn read_lost_device_records(counters: &PerCpuArray<MapData, u64>) -> Result<u64> {
    counter_sum(counters, counter::LOST_DEVICE_RECORDS)
}

/// The tool library's other records (launch records, names, marks) the kernel program could not
/// send (a full ring).
pub fn read_lost_tool_records(counters: &PerCpuArray<MapData, u64>) -> Result<u64> {
    counter_sum(counters, counter::LOST_TOOL_RECORDS)
}

/// Entries left without a return (longjmp, exceptions, threads ending inside a traced call).
pub fn read_unmatched(counters: &PerCpuArray<MapData, u64>) -> Result<u64> {
    counter_sum(counters, counter::UNMATCHED_ENTRIES)
}

#[cfg(test)]
mod tests {
    use aya_obj::generated::{bpf_map_type, BPF_F_NO_PREALLOC};

    /// Before Linux 6.1 the verifier warns (a kernel WARNING: a splat in dmesg, the kernel marked
    /// tainted, a panic under `panic_on_warn`) when a tracing program uses a hash map whose
    /// elements are allocated as they are inserted: every hash map of the object is preallocated.
    #[test]
    fn no_hash_map_is_allocated_at_run_time() {
        let object = aya_obj::Object::parse(super::OBJECT).expect("the kernel programs' object");
        // The kinds the verifier asks it of, and the LRU ones (always preallocated).
        let hashes = [
            bpf_map_type::BPF_MAP_TYPE_HASH as u32,
            bpf_map_type::BPF_MAP_TYPE_PERCPU_HASH as u32,
            bpf_map_type::BPF_MAP_TYPE_HASH_OF_MAPS as u32,
            bpf_map_type::BPF_MAP_TYPE_LRU_HASH as u32,
            bpf_map_type::BPF_MAP_TYPE_LRU_PERCPU_HASH as u32,
        ];
        let mut checked: Vec<&str> = object
            .maps
            .iter()
            .filter(|(_, map)| hashes.contains(&map.map_type()))
            .inspect(|(name, map)| assert_eq!(map.map_flags() & BPF_F_NO_PREALLOC, 0, "{name}"))
            .map(|(name, _)| name.as_str())
            .collect();
        checked.sort_unstable();
        // Those sized at load for what they hold are among them.
        for sized in ["GO_STACKS", "GPU_NAME_PIECES", "GPU_NOTICE_PIECES"] {
            assert!(checked.contains(&sized), "{sized} not in {checked:?}");
        }
    }
}
