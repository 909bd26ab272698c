//! The second phase: the kernel programs loaded and every probe attached (kernel.rs), the maps
//! taken, a launched command released, the trace file and its writer thread started, and the
//! pipeline built. A [`Started`] owns all of it: dropping it on an error detaches everything (the
//! kernel's attachments are file descriptors).
use std::time::Instant;

use super::{
    config::{Config, GpuPeriod},
    finish::Sampling,
    kernel::{load_and_attach, take_maps, KeptTable, Kernel, Maps},
    output_error,
    prepare::Prepared,
    run::Signals,
    targets::{Resolved, Targets},
    Observer,
};
use crate::{
    cuda::{
        calls::Calls,
        nvml::{self, GpuMetrics},
    },
    elf::debug_file::DebugDirs,
    error::{Error, Result},
    image::{sideband::Sideband, Images, Watched},
    launch::LAUNCHER_THREAD,
    output::{self, Sink, TraceFile},
    pipeline::{
        gpu::GpuDevice,
        reader::RingReader,
        samples::Samples,
        usdt::{SiteView, Usdt},
        warnings::Warnings,
        writer::TraceWriter,
        Pipeline, Setup,
    },
    probes::{sampler, uprobe::Plan},
    target::ProcessInfo,
};

/// A launched command's exit, reported by the thread that waits for it.
pub(super) type ExitReceiver = tokio::sync::oneshot::Receiver<std::io::Result<std::process::ExitStatus>>;

/// A recording under way.
pub(super) struct Started<'a> {
    pub(super) config: &'a Config,
    pub(super) signals: Signals,
    pub(super) targets: Targets,
    pub(super) plan: Plan,
    pub(super) out: output::Dir,
    pub(super) sampling: Option<Sampling>,
    pub(super) kernel: Kernel,
    pub(super) maps: Maps,
    pub(super) reader: RingReader,
    /// A launched command's exit.
    pub(super) exit: Option<ExitReceiver>,
    pub(super) trace_file: TraceFile,
    pub(super) pipeline: Pipeline<Sink>,
    pub(super) gpu_metrics: Option<GpuMetrics>,
    /// Each target's pid and what /proc said of it while it ran.
    pub(super) infos: Vec<(u32, ProcessInfo)>,
    /// When recording began, or begins (`--start-at`): `-d` counts from here.
    pub(super) started: Instant,
    /// With `--start-at`, when the window began (its time, or the attach's end when that came
    /// later): CLOCK_REALTIME in ns.
    pub(super) start_at_ns: Option<u64>,
    /// `--live`: the server and what publishes to it.
    pub(super) live: Option<(crate::live::Live, crate::live::Publisher)>,
    /// `--flight`: when and how the buffer of recent events is written out.
    pub(super) flight: Option<super::flight::Recorder>,
}

impl<'a> Prepared<'a> {
    /// Attaches and starts recording; `observer` hears the attached notice.
    pub(super) async fn start(mut self, observer: &mut dyn Observer) -> Result<Started<'a>> {
        let since_ns = crate::clock::monotonic_ns();
        let (mut kernel, sideband, cuda) = load_and_attach(&mut self, observer)?;
        let Prepared {
            config,
            mut signals,
            resolved:
                Resolved {
                    mut targets,
                    plan,
                    out,
                },
            sampling,
            follow,
            start_at_ns,
            live,
            ..
        } = self;
        // A --pid process that exited while its probes were placed: refuse, as when the kernel
        // refuses an attachment to it (returning drops every attachment).
        if let (Targets::Pids(_), Some(pid)) = (&targets, targets.exited_pid()) {
            return Err(Error::ExitedDuringAttach { pid });
        }
        // The recording runs from here (or from --start-at): a launched command is released
        // below, and -d counts from this moment as duration_ns does.
        let (started, window) = window_begins(start_at_ns, observer);
        let (mut maps, reader) = take_maps(&mut kernel)?;
        let exit = release(&mut targets, &mut signals, observer).await?;
        let names: Vec<(&str, &str)> = plan
            .probes
            .iter()
            .map(|p| (p.name.as_str(), p.kind.name()))
            .collect();
        let (sink, trace_file) = output::create_trace(&out, config.gzip, config.trace_format)?;
        let writer =
            TraceWriter::spawn(sink, &names, config.trace_format).map_err(output_error(&trace_file.path))?;
        let gpu_feed = live.as_ref().map(|_| nvml::GpuFeed::default());
        let gpu_metrics = gpu_metrics(config, &plan, &targets, gpu_feed.clone(), observer);
        let infos = target_infos(&targets);
        // Before the notice too: the pipeline reads the targets' mappings (strings in them).
        let images = images(
            Images::new(DebugDirs::new(config.debug_dirs.clone())),
            sideband,
            (follow.is_some(), &targets),
        );
        let mut samples = Samples::default();
        samples.probed = sampling.is_some() && kernel.attached.uprobes > 0;
        samples.verified_insns = sampling.and_then(|_| sampler::verified_insns(&mut kernel.ebpf));
        let mut setup = setup(config, &plan, &targets, cuda, (images, samples), since_ns);
        setup.python = crate::python::Python::new(maps.python.take());
        setup.gpu = with_kept(setup.gpu.take(), maps.gpu_kept.take());
        setup.off_cpu = kernel.off_cpu_ns.map(crate::pipeline::offcpu::OffCpu::new);
        let mut pipeline = Pipeline::new(setup, writer);
        if let Some([monotonic_ns, _]) = window {
            pipeline.start_at(monotonic_ns);
        }
        let live = live.map(|live| {
            pipeline.watch_live();
            let begin_ns = window.map_or_else(crate::clock::monotonic_ns, |[monotonic_ns, _]| monotonic_ns);
            let hz = sampling.map_or(0, |s| s.hz);
            let gpus = gpu_metrics.as_ref().and(gpu_feed);
            publisher(live, &plan, (begin_ns, hz), gpus)
        });
        let attached = (
            kernel.attach_ns,
            kernel.attached.mechanism.name(),
            kernel.attached.uprobes,
        );
        let flight = super::flight::recorder(config, &plan, attached, sampling.map(|s| s.hz), &infos, &out);
        if let Some(flight) = &flight {
            pipeline.keep_in_flight(flight.buffer());
        }
        let waits = started.saturating_duration_since(Instant::now());
        let from = match waits.is_zero() {
            true => String::new(),
            false => format!(", capturing from --start-at in {:.1}s", waits.as_secs_f64()),
        };
        observer.attached(&format!(
            "{} to {}{from}; Ctrl-C to stop",
            attached_what(&plan, &kernel, sampling),
            targets.describe()
        ));
        Ok(Started {
            config,
            signals,
            targets,
            plan,
            out,
            sampling,
            kernel,
            maps,
            reader,
            exit,
            trace_file,
            pipeline,
            gpu_metrics,
            infos,
            started,
            start_at_ns: window.map(|[_, realtime_ns]| realtime_ns),
            live,
            flight,
        })
    }
}

/// When the capture's window begins (`--start-at`, whose CLOCK_REALTIME time is `start_at_ns`):
/// as a moment, and on CLOCK_MONOTONIC and CLOCK_REALTIME (None without it). A time attaching
/// went past is said, and the window begins now.
fn window_begins(start_at_ns: Option<u64>, observer: &mut dyn Observer) -> (Instant, Option<[u64; 2]>) {
    let now = Instant::now();
    let Some(at) = start_at_ns else {
        return (now, None);
    };
    let clocks = crate::clock::snapshot();
    match at.checked_sub(clocks.realtime_ns) {
        Some(wait) => (
            now + std::time::Duration::from_nanos(wait),
            Some([clocks.monotonic_ns + wait, at]),
        ),
        None => {
            observer.warning(&format!(
                "attaching ended {} after --start-at's time: the capture begins now",
                crate::model::duration::human(clocks.realtime_ns - at)
            ));
            (now, Some([clocks.monotonic_ns, clocks.realtime_ns]))
        }
    }
}

/// Lets a launched command run, now that every probe is attached; returns its exit's receiver.
/// A command whose exec fails ends the recording before its outputs replace the last ones in the
/// output directory; what it does meanwhile waits in the ring buffer.
async fn release(
    targets: &mut Targets,
    signals: &mut Signals,
    observer: &mut dyn Observer,
) -> Result<Option<ExitReceiver>> {
    let Targets::Launched(launch) = targets else {
        return Ok(None);
    };
    // Stopped while attaching: the command never runs (the launch, dropped, lets it go).
    if let Some((signal, number)) = signals.arrived().await {
        return Err(Error::StoppedBeforeStart {
            command: crate::shell::quote_words(&launch.argv),
            signal,
            number,
        });
    }
    launch.release()?;
    let exit = launch.take_exit();
    if launch.program.replaced_before(launch.process.pid) {
        observer.warning(&format!(
            "{} was replaced while xtrace read it: the command runs the new file, and its \
             probes are in the old one, so they see nothing; run xtrace again",
            launch.program.path.display()
        ));
    }
    Ok(exit)
}

/// The attached notice's first part: what was attached, with how many kernel uprobes.
fn attached_what(plan: &Plan, kernel: &Kernel, sampling: Option<Sampling>) -> String {
    let sampler = sampling.map(|s| format!("the sampler ({} CPUs at {} Hz)", kernel.cpus, s.hz));
    // Probes kept for libraries loaded later are not attached yet.
    let planned = plan.probes.iter().filter(|p| p.is_placed()).count();
    let what = match (planned, sampler) {
        (0, Some(sampler)) => format!("attached {sampler}"),
        (probes, sampler) => {
            let plural = if probes == 1 { "" } else { "s" };
            format!(
                "attached {probes} probe{plural} ({} uprobes, {}){}",
                kernel.attached.uprobes,
                kernel.attached.mechanism.name(),
                sampler.map_or(String::new(), |s| format!(" and {s}"))
            )
        }
    };
    // Said, as it may be on by itself (`--pid` without probes).
    match kernel.off_cpu_ns {
        Some(min_ns) => format!(
            "{what} and off-CPU time (MIN {})",
            crate::model::duration::human(min_ns)
        ),
        None => what,
    }
}

/// The live view's publisher for a capture of `plan` that began at `begin_ns`, sampling at `hz`
/// (0: not sampling), with the GPU metrics `gpus` hands over.
fn publisher(
    live: crate::live::Live,
    plan: &Plan,
    (begin_ns, hz): (u64, u64),
    gpus: Option<nvml::GpuFeed>,
) -> (crate::live::Live, crate::live::Publisher) {
    let probes = plan
        .probes
        .iter()
        .map(|p| crate::live::PlannedProbe {
            name: p.name.clone(),
            kind: p.kind.name(),
            target: p.target.clone(),
        })
        .collect();
    let mut publisher = crate::live::Publisher::new(live.shared(), probes, begin_ns, hz);
    if let Some(feed) = gpus {
        publisher.show_gpus(feed);
    }
    (live, publisher)
}

/// GPU metrics, read every `--gpu-metrics` period, or every 100 ms when CUDA calls are traced,
/// handed to the live view through `feed` too; without NVML a warning says so, and the recording
/// goes on.
fn gpu_metrics(
    config: &Config,
    plan: &Plan,
    targets: &Targets,
    feed: Option<nvml::GpuFeed>,
    observer: &mut dyn Observer,
) -> Option<GpuMetrics> {
    let period = match config.gpu_metrics {
        Some(GpuPeriod::Off) => None,
        Some(GpuPeriod::Every(period)) => Some(period),
        None if !plan.cuda.is_empty() => Some(nvml::DEFAULT_PERIOD),
        None => None,
    }?;
    GpuMetrics::start(period, targets.pids(), feed)
        .map_err(|why| observer.warning(&format!("GPU metrics off: {why}; tracing continues")))
        .ok()
}

/// What /proc says of each target. Read before the attached notice: a target may exit as soon as
/// it is told recording runs, and its namespace pid is readable only while it exists.
fn target_infos(targets: &Targets) -> Vec<(u32, ProcessInfo)> {
    let mut infos: Vec<(u32, ProcessInfo)> = targets.processes().iter().map(|p| (p.pid, p.info())).collect();
    if let Targets::Launched(launch) = targets {
        // Read before or after its exec, or after its exit: the name it has after its exec, and
        // the rank of the environment it was given (xtrace's own) when it has gone.
        for (_, info) in infos.iter_mut() {
            if info.comm.as_deref().is_none_or(|comm| comm == LAUNCHER_THREAD) {
                info.comm = Some(launch.comm());
            }
            if info.rank.is_none() {
                info.rank = output::placeholders::own_rank();
            }
        }
    }
    infos
}

/// The pipeline's setup from the plan and the configuration.
fn setup(
    config: &Config,
    plan: &Plan,
    targets: &Targets,
    cuda: Calls,
    (images, samples): (Images, Samples),
    since_ns: u64,
) -> Setup {
    let sites = plan
        .usdt_sites
        .iter()
        .map(|s| SiteView {
            probe_id: s.site.probe_id,
            signed: s.signed.clone(),
        })
        .collect();
    Setup {
        captures: plan.probes.iter().map(|p| p.capture.clone()).collect(),
        usdt: Usdt::new(sites, plan.usdt_probes.clone()),
        cuda,
        mpi: crate::mpi::calls::Calls::new(plan.mpi.clone()),
        ranges: match plan.ranges {
            Some(wanted) => crate::pipeline::ranges::Ranges::new(wanted, since_ns),
            None => crate::pipeline::ranges::Ranges::unasked(since_ns),
        },
        images,
        samples,
        python: Default::default(),
        warnings: Warnings::new(
            config.warn_over.clone(),
            plan.probes.iter().map(|p| p.name.clone()).collect(),
        ),
        targets: (!matches!(targets, Targets::SystemWide)).then(|| targets.pids().into_iter().collect()),
        min_duration_ns: config.min_duration_ns.unwrap_or(0),
        loaders: plan.watch.as_ref().map(|w| w.loaders.clone()).unwrap_or_default(),
        // Set by the caller, from what the kernel measures.
        off_cpu: None,
        gpu: gpu_probe(plan).map(GpuDevice::new),
        call_sites: config.stacks.then(Default::default),
        host_spans: gpu_probe(plan).map(|_| {
            crate::pipeline::host_spans::HostSpans::new(
                plan.probes.iter().map(|p| p.name.as_str().into()).collect(),
            )
        }),
    }
}

/// The probe id of the tool library's `gpu_records` probe, when the plan has it.
pub(super) fn gpu_probe(plan: &Plan) -> Option<usize> {
    use crate::probes::usdt::{plan::Role, spec::RangeOp};
    plan.usdt_probes
        .iter()
        .find(|(_, p)| p.role == Role::Range(RangeOp::GpuRecords))
        .map(|(&id, _)| id as usize)
}

/// The GPU device timeline's pipeline, looking up the texts the ring buffer had no room for in
/// the kernel's tables `kept` (names, notices).
fn with_kept(gpu: Option<GpuDevice>, kept: Option<[KeptTable; 2]>) -> Option<GpuDevice> {
    match (gpu, kept) {
        (Some(gpu), Some([names, notices])) => Some(gpu.with_kept(Box::new(names), Box::new(notices))),
        (gpu, _) => gpu,
    }
}

/// What the traced processes had mapped, watched through the side band when it was opened
/// (sampling, CUDA): a launched command from its exec, each --pid process from what it maps now.
fn images(mut images: Images, sideband: Option<Sideband>, (follow, targets): (bool, &Targets)) -> Images {
    if let Some(sideband) = sideband {
        images.watch(sideband, Watched::of(targets.pids(), follow));
        match targets {
            Targets::Launched(launch) => images.launched(launch.process.pid),
            Targets::Pids(processes) => {
                for process in processes {
                    images.begin_running(process.pid);
                }
            }
            Targets::SystemWide => {}
        }
    }
    images
}
