//! What is in the kernel for a recording, as the start phase puts it there: the object loaded
//! with its load-time globals, every probe attached (the child-following tracepoints, the
//! sampler and the off-CPU programs too), the side band opened, and the maps the session reads
//! taken out of it. A [`Kernel`] owns the programs and their attachments (file descriptors):
//! dropping it detaches them.
use std::time::Instant;

use aya::{
    maps::{Array, MapData, PerCpuArray, RingBuf},
    Ebpf,
};
use xtrace_common::{
    gpu::{DeviceName, NamePieceKey},
    probe::ShortCalls,
};

use super::{
    config::Config,
    prepare::Prepared,
    targets::{Resolved, Targets},
    Observer, SESSION_LOG,
};
use crate::{
    bpf::{self, goroutines::Goroutines, overhead::StatsOn},
    cuda::calls::Calls,
    error::{Error, Result},
    image::sideband::Sideband,
    pipeline::reader::RingReader,
    probes::{
        attach::{self, Attached},
        follow, sampler, uprobe,
    },
};

/// What is in the kernel for a recording.
pub(super) struct Kernel {
    pub(super) ebpf: Ebpf,
    pub(super) attached: Attached,
    /// The kernel's BPF run-time statistics, on for `--overhead`.
    pub(super) stats_on: Option<StatsOn>,
    /// CPUs the sampler runs on (0: no sampling).
    pub(super) cpus: usize,
    /// How long loading and attaching took.
    pub(super) attach_ns: u64,
    /// Whether functions of Go code are traced, whose open calls are kept per goroutine.
    pub(super) go_code: bool,
    /// Whether samples walk Python frames (`PY_PROCS` is then read).
    pub(super) python: bool,
    /// Off-CPU time's MIN in ns, when it is measured (its tables are then read).
    pub(super) off_cpu_ns: Option<u64>,
}

/// The maps read while recording and after it.
pub(super) struct Maps {
    pub(super) counters: PerCpuArray<MapData, u64>,
    pub(super) short_calls: PerCpuArray<MapData, ShortCalls>,
    pub(super) goroutines: Option<Goroutines>,
    /// `--off-cpu`: the kernel's added-up waits.
    pub(super) off_cpu: Option<crate::probes::offcpu::Tables>,
    /// The kernel's table of Python processes' layouts, until the pipeline takes it.
    pub(super) python: Option<aya::maps::HashMap<MapData, u32, xtrace_common::python::PyLayout>>,
    /// The kernel's tables of GPU kernel name pieces and of notice pieces the ring had no room
    /// for, until the pipeline takes them.
    pub(super) gpu_kept: Option<[KeptTable; 2]>,
}

/// A kernel table of text pieces the ring had no room for (`GPU_NAME_PIECES`, `GPU_NOTICE_PIECES`).
pub(super) type KeptTable = aya::maps::HashMap<MapData, NamePieceKey, DeviceName>;

/// Loads the kernel programs and attaches the probes, the child-following tracepoints and the
/// sampler; opens the side band that reports mappings, before anything it must see can happen.
pub(super) fn load_and_attach(
    prepared: &mut Prepared,
    observer: &mut dyn Observer,
) -> Result<(Kernel, Option<Sideband>, Calls)> {
    let parsing = prepared.take_parsing();
    let prepared = &*prepared;
    let Prepared {
        config,
        resolved: Resolved { targets, plan, .. },
        sampling,
        follow,
        off_cpu_ns,
        ..
    } = prepared;
    let stats_on = config.overhead.then(bpf::overhead::enable).transpose()?;
    let attach_started = Instant::now();
    // Samples carry user stacks to unwind; functions of Go code are traced.
    let copies_stacks = sampling.is_some() && config.user_stack > 0;
    let go_code = plan.attachments.iter().any(|a| a.go);
    let parsed = parsing.join();
    let mut ebpf = load_object(prepared, parsed.loader, copies_stacks, go_code)?;
    let mut cuda = Calls::new(plan.cuda.clone());
    if let (Targets::Pids(_), false) = (targets, plan.cuda.is_empty()) {
        for pid in targets.pids() {
            cuda.names.prepare(pid);
        }
    }
    if let (true, Some(why)) = (
        plan.attachments.iter().any(|a| plan.reads_strings(a.probe_id)),
        bpf::features::no_sleepable_entries(),
    ) {
        observer.warning(&format!(
            "{why}: a string argument on a page the process has not touched yet is read from its \
             file where that is a read-only file mapping, and is null otherwise"
        ));
    }
    let attached = attach::attach(&mut ebpf, plan, &targets.scope_pids()).map_err(|e| {
        // A process that exits while we attach makes the kernel refuse; say so plainly.
        match targets.exited_pid() {
            Some(pid) => Error::ExitedDuringAttach { pid },
            None => e,
        }
    })?;
    log::info!(
        target: SESSION_LOG,
        "attached {} uprobes ({}) in {:.1} ms",
        attached.uprobes,
        attached.mechanism.name(),
        attach_started.elapsed().as_secs_f64() * 1e3
    );
    // Opened before children are followed and a launched command runs: every fork, exec and
    // mapping of theirs is reported, for sampled stacks, CUDA kernels and call sites to be named
    // from.
    let watched = sampling.is_some() || !plan.cuda.is_empty() || off_cpu_ns.is_some() || config.stacks;
    let sideband = watched.then(|| {
        Sideband::open()
            .map_err(|e| {
                observer.warning(&format!(
                    "{e}: the code of a process that exits within milliseconds may be shown by address"
                ))
            })
            .ok()
    });
    let sideband = sideband.flatten();
    if let Some(offsets) = follow {
        // Before the sampler and before a launched command runs, so no child is missed.
        follow::attach(&mut ebpf, offsets)?;
        log::debug!(target: SESSION_LOG, "following child processes of the sampled ones: {offsets:?}");
    }
    let cpus = match sampling {
        Some(sampling) => sampler::attach(&mut ebpf, sampling.hz)?,
        None => 0,
    };
    let off_cpu_ns = off_cpu(&mut ebpf, (config, *off_cpu_ns, parsed.btf), observer)?;
    // Every question to the kernel's BTF is answered.
    bpf::btf::KernelBtf::release();
    let kernel = Kernel {
        ebpf,
        attached,
        stats_on,
        cpus,
        attach_ns: attach_started.elapsed().as_nanos() as u64,
        go_code,
        python: walks_python(config, sampling.is_some(), off_cpu_ns.is_some()),
        off_cpu_ns,
    };
    Ok((kernel, sideband, cuda))
}

/// Loads the object with the capture's options and, for a capture that samples and measures
/// off-CPU time, has the kernel verify the two longest programs side by side.
fn load_object(
    prepared: &Prepared,
    loader: aya::EbpfLoader<'static>,
    copies_stacks: bool,
    go_code: bool,
) -> Result<Ebpf> {
    let Prepared {
        config,
        resolved: Resolved { targets, plan, .. },
        sampling,
        follow,
        pid_namespace,
        off_cpu_ns,
        ..
    } = prepared;
    let options = bpf::LoadOptions {
        ring_bytes: config.buffer_size,
        arg_specs: uprobe::arg_specs(plan),
        str_lens: uprobe::str_lens(plan),
        tids: config.tids.clone(),
        min_duration_ns: config.min_duration_ns.unwrap_or(0),
        probes: plan.probes.len() as u32,
        usdt_sites: plan.usdt_sites.iter().map(|s| s.site).collect(),
        sample_pids: targets.pids(),
        user_stack_bytes: config.user_stack,
        return_addresses: copies_stacks,
        uprobe_task: match copies_stacks {
            true => bpf::layout::UprobeTask::read(),
            false => Default::default(),
        },
        go_code,
        python: walks_python(config, sampling.is_some(), off_cpu_ns.is_some()),
        follow: *follow,
        pid_namespace: *pid_namespace,
        off_cpu_min_ns: *off_cpu_ns,
        gpu_device: super::start::gpu_probe(plan).is_some(),
    };
    let mut ebpf = bpf::load(&options, loader)?;
    if sampling.is_some() && off_cpu_ns.is_some() {
        // The two longest verifications, side by side; each is attached below, in its turn.
        bpf::verify::load_together(&mut ebpf, &["sample", "off_cpu_return"]);
    }
    Ok(ebpf)
}

/// Attaches the off-CPU programs when off-CPU time is measured (MIN `min_ns`); returns the MIN
/// when they are attached. Where it is on by itself, a refusal costs a notice, not the capture.
fn off_cpu(
    ebpf: &mut Ebpf,
    (config, min_ns, btf): (&Config, Option<u64>, Option<bpf::loader::TypesBtf>),
    observer: &mut dyn Observer,
) -> Result<Option<u64>> {
    let Some(min_ns) = min_ns else {
        return Ok(None);
    };
    match crate::probes::offcpu::attach(ebpf, btf) {
        Ok(()) => Ok(Some(min_ns)),
        Err(e) if config.off_cpu_by_default() => {
            crate::probes::offcpu::detach(ebpf);
            observer.warning(&format!("off-CPU time is not measured: {e}"));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Whether the kernel walks Python frames: for CPU samples, off-CPU waits and traced calls'
/// stacks (`--stacks`), unless `--no-python`.
fn walks_python(config: &Config, sampling: bool, off_cpu: bool) -> bool {
    config.python && (sampling || off_cpu || config.stacks)
}

/// Takes the maps the session reads out of the loaded object, and the ring buffer's reader.
pub(super) fn take_maps(kernel: &mut Kernel) -> Result<(Maps, RingReader)> {
    let ebpf = &mut kernel.ebpf;
    let map_err = |name| move |source| Error::Map { name, source };
    let ring = RingBuf::try_from(bpf::take_map(ebpf, "EVENTS")?).map_err(map_err("EVENTS"))?;
    let counters = PerCpuArray::try_from(bpf::take_map(ebpf, "COUNTERS")?).map_err(map_err("COUNTERS"))?;
    let short_calls =
        PerCpuArray::try_from(bpf::take_map(ebpf, "SHORT_CALLS")?).map_err(map_err("SHORT_CALLS"))?;
    let woken = Array::try_from(bpf::take_map(ebpf, "WOKEN")?).map_err(map_err("WOKEN"))?;
    let goroutines = match kernel.go_code {
        true => Some(Goroutines::take(ebpf)?),
        false => None,
    };
    let python = match kernel.python {
        true => Some(
            aya::maps::HashMap::try_from(bpf::take_map(ebpf, "PY_PROCS")?).map_err(map_err("PY_PROCS"))?,
        ),
        false => None,
    };
    let mut kept = |name| -> Result<KeptTable> {
        aya::maps::HashMap::try_from(bpf::take_map(ebpf, name)?).map_err(map_err(name))
    };
    let gpu_kept = [kept("GPU_NAME_PIECES")?, kept("GPU_NOTICE_PIECES")?];
    let reader = RingReader::new(ring, woken)?;
    let off_cpu = match kernel.off_cpu_ns.is_some() {
        true => Some(crate::probes::offcpu::Tables::take(ebpf)?),
        false => None,
    };
    let maps = Maps {
        python,
        counters,
        short_calls,
        goroutines,
        off_cpu,
        gpu_kept: Some(gpu_kept),
    };
    Ok((maps, reader))
}
