//! One recording from start to stop: validate input, attach, read until a stop condition (`run`),
//! detach, and write the outputs (`finish`). Every stop path ends with complete outputs; every error
//! path drops the kernel attachments (they are fd-based), and a file cut short keeps the name it is
//! written under, `NAME.partial` (see `output::create`).
mod changes;
mod finish;
use finish::Sampling;
mod run;
use run::Change;
mod specs;
use specs::Specs;

use std::time::Instant;

use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use xtrace_common::probe::ShortCalls;

use crate::{
    bpf,
    cli::{record::GpuPeriod, RecordArgs},
    cuda::{
        self,
        nvml::{self, GpuMetrics},
    },
    error::{Error, Result},
    export::summary::{RunInfo, Summary},
    launch::{resolve_command, Launch, Program, LAUNCHER_THREAD},
    output,
    pipeline::{
        images::Sampled,
        reader::RingReader,
        sideband::Sideband,
        usdt::{SiteView, Usdt},
        writer::TraceWriter,
        Pipeline,
    },
    privilege,
    probes::{
        attach, follow, sampler,
        uprobe::{self, Plan, Scope},
    },
    target::{Process, ProcessInfo},
};

pub use run::Progress;

/// Wraps an I/O error on output file `path`.
fn output_error(path: &std::path::Path) -> impl Fn(std::io::Error) -> Error + Copy + '_ {
    move |source| Error::Output {
        path: path.to_path_buf(),
        source,
    }
}

/// What a finished recording hands back to the CLI.
pub struct Recording {
    pub summary: Summary,
    pub output: std::path::PathBuf,
    /// The files written into `output`, trace first.
    pub files: Vec<&'static str>,
}

/// What the CLI shows while recording; the library itself prints nothing.
pub trait Observer {
    /// Something the user should know that does not stop the recording (one line).
    fn warning(&mut self, text: &str);
    /// Every probe is attached and recording has started.
    fn attached(&mut self, notice: &str);
    /// Something that happened while recording (probes attached to a library loaded late).
    fn notice(&mut self, text: &str);
    /// A few times a second while recording.
    fn progress(&mut self, progress: &Progress);
    /// Recording stopped; outputs are being written.
    fn stopped(&mut self) {}
}

/// The processes being traced: given by pid, one launched command, or every process (-a).
enum Targets {
    Pids(Vec<Process>),
    Launched(Launch),
    SystemWide,
}

impl Targets {
    fn processes(&self) -> Vec<&Process> {
        match self {
            Targets::Pids(processes) => processes.iter().collect(),
            Targets::Launched(launch) => vec![&launch.process],
            Targets::SystemWide => Vec::new(),
        }
    }

    /// The process of each probe scope; None for every process.
    fn scope_pids(&self) -> Vec<Option<u32>> {
        match self {
            Targets::SystemWide => vec![None],
            _ => self.pids().into_iter().map(Some).collect(),
        }
    }

    /// A target process that has exited, if any: during the attach, the cause of a failure.
    fn exited_pid(&self) -> Option<u32> {
        self.processes().iter().find(|p| p.has_exited()).map(|p| p.pid)
    }

    fn pids(&self) -> Vec<u32> {
        self.processes().iter().map(|p| p.pid).collect()
    }

    fn describe(&self) -> String {
        match self {
            Targets::Launched(l) => {
                format!("`{}` (pid {})", crate::shell::quote_words(&l.argv), l.process.pid)
            }
            Targets::SystemWide => "every process".into(),
            Targets::Pids(_) => {
                let pids: Vec<String> = self.pids().iter().map(u32::to_string).collect();
                format!("pid {}", pids.join(", "))
            }
        }
    }
}

/// Resolves targets and probes; a command is launched (held at its gate) only once everything
/// else has been validated, the output directory included.
/// `sampling`: whether CPU samples are taken (of which a kernel thread has some).
fn resolve(args: &RecordArgs, specs: &Specs, sampling: bool) -> Result<(Targets, Plan, output::Dir)> {
    if args.system_wide {
        for &tid in &args.tid {
            if !std::path::Path::new(&format!("/proc/{tid}")).exists() {
                return Err(Error::NoSuchThread { tid });
            }
            if !sampling && crate::target::is_kernel_thread(tid) {
                return Err(Error::KernelThreadTid { tid });
            }
        }
        let plan = specs.plan(&[Scope::SystemWide], args.max_probes)?;
        let out = output::prepare(args.output.as_deref())?;
        Ok((Targets::SystemWide, plan, out))
    } else if args.command.is_empty() {
        let mut pids = args.pid.clone();
        pids.sort_unstable();
        pids.dedup();
        let processes = pids.into_iter().map(Process::open).collect::<Result<Vec<_>>>()?;
        for tid in &args.tid {
            if !processes.iter().any(|p| p.has_thread(*tid)) {
                return Err(Error::NotATargetThread { tid: *tid });
            }
        }
        let scopes: Vec<Scope> = processes.iter().map(Scope::Process).collect();
        let plan = specs.plan(&scopes, args.max_probes)?;
        let out = output::prepare(args.output.as_deref())?;
        Ok((Targets::Pids(processes), plan, out))
    } else {
        let program = Program::open(&resolve_command(&args.command[0])?)?;
        let mut plan = specs.plan(&[Scope::Command(&program)], args.max_probes)?;
        let env = specs.launch_env(&mut plan.notices);
        let out = output::prepare(args.output.as_deref())?;
        Ok((
            Targets::Launched(Launch::start(program, &args.command, &env)?),
            plan,
            out,
        ))
    }
}

/// Records until a stop condition, telling `observer` what happens.
pub async fn record(args: &RecordArgs, observer: &mut dyn Observer) -> Result<Recording> {
    // First: privilege::check reads /proc/self, which a /proc of another namespace may not have.
    let pid_namespace = crate::pidns::own()?;
    privilege::check()?;
    crate::probes::attach::forced_mechanism()?;
    let mut signals = run::Signals::install()?;
    let specs = Specs::parse(args)?;
    // Without any probe, xtrace profiles the CPU.
    let hz = match args.freq {
        Some(hz) => Some(hz),
        None if args.uprobe.is_empty()
            && args.usdt.is_empty()
            && !args.cuda
            && Specs::wanted(args).is_none() =>
        {
            Some(sampler::DEFAULT_HZ)
        }
        None => None,
    };
    if let Some(hz) = hz {
        sampler::check_rate(hz)?;
        sampler::check_ring(args.buffer_size, args.user_stack)?;
    }
    let (mut targets, mut plan, out) = resolve(args, &specs, hz.is_some())?;
    if pid_namespace.is_some() {
        // The kernel programs find ids in xtrace's namespace only (`bpf_get_ns_current_pid_tgid`
        // matches a thread's own namespace): a process in a nested one would record nothing.
        for process in targets.processes() {
            if let Some(ns_pid) = process.info().ns_pid {
                return Err(Error::NestedNamespaceTarget {
                    pid: process.pid,
                    ns_pid,
                });
            }
        }
    }
    for notice in &plan.notices {
        observer.warning(notice);
    }
    // Sampling limited to target processes follows the processes they start, unless told not to.
    let follow = match hz {
        Some(_) if !args.no_inherit && !targets.pids().is_empty() => {
            Some(follow::offsets(pid_namespace.is_some())?)
        }
        _ => None,
    };
    if follow.is_some_and(|f| !f.exit_group_dead) {
        observer.warning(
            "this kernel's sched_process_exit tracepoint passes no group_dead: a followed child \
             process's pid stays sampled after it exits (a new process given that pid is sampled \
             too); --no-inherit samples the targets only",
        );
    }
    let sampling = hz.map(|hz| Sampling {
        hz,
        followed: follow.map(|_| (0, 0)),
    });
    if let Some(why) = sampling.and_then(|_| sampler::kernel_names_hidden()) {
        observer.warning(&why);
    }

    let stats_on = args.overhead.then(bpf::overhead::enable).transpose()?;
    let attach_started = Instant::now();
    let since_ns = crate::clock::monotonic_ns();
    // Samples carry user stacks to unwind; functions of Go code are traced.
    let copies_stacks = sampling.is_some() && args.user_stack > 0;
    let go_code = plan.attachments.iter().any(|a| a.go);
    let mut ebpf = bpf::load(&bpf::LoadOptions {
        ring_bytes: args.buffer_size,
        arg_specs: uprobe::arg_specs(&plan),
        tids: args.tid.clone(),
        min_duration_ns: args.min_duration.unwrap_or(0),
        probes: plan.probes.len() as u32,
        usdt_sites: plan.usdt_sites.iter().map(|s| s.site).collect(),
        sample_pids: targets.pids(),
        user_stack_bytes: args.user_stack,
        return_addresses: copies_stacks,
        uprobe_task: match copies_stacks {
            true => crate::probes::sampler::UprobeTask::read(),
            false => Default::default(),
        },
        go_code,
        follow,
        pid_namespace,
    })?;
    let mut cuda = crate::cuda::calls::Calls::new(plan.cuda.clone());
    if let (Targets::Pids(_), false) = (&targets, plan.cuda.is_empty()) {
        for pid in targets.pids() {
            cuda.names.prepare(pid);
        }
    }
    let mut attached = attach::attach(&mut ebpf, &plan, &targets.scope_pids()).map_err(|e| {
        // A process that exits while we attach makes the kernel refuse; say so plainly.
        match targets.exited_pid() {
            Some(pid) => Error::ExitedDuringAttach { pid },
            None => e,
        }
    })?;
    log::info!(
        "attached {} uprobes ({}) in {:.1} ms",
        attached.uprobes,
        attached.mechanism.name(),
        attach_started.elapsed().as_secs_f64() * 1e3
    );
    // Opened before children are followed and a launched command runs: every fork, exec and
    // mapping of theirs is reported.
    let sideband = sampling.and_then(|_| {
        Sideband::open()
            .map_err(|e| {
                observer.warning(&format!(
                    "{e}: a process that exits soon after its first sample may show bare addresses"
                ))
            })
            .ok()
    });
    if let Some(offsets) = &follow {
        // Before the sampler and before a launched command runs, so no child is missed.
        follow::attach(&mut ebpf, offsets)?;
        log::debug!("following child processes of the sampled ones: {offsets:?}");
    }
    let cpus = match sampling {
        Some(sampling) => sampler::attach(&mut ebpf, sampling.hz)?,
        None => 0,
    };
    // A --pid process that exited while its probes were placed: refuse, as when the kernel
    // refuses an attachment to it (returning drops every attachment).
    if let (Targets::Pids(_), Some(pid)) = (&targets, targets.exited_pid()) {
        return Err(Error::ExitedDuringAttach { pid });
    }
    let attach_ns = attach_started.elapsed().as_nanos() as u64;
    // The recording runs from here: a launched command is released below, and -d counts from
    // this moment as duration_ns does.
    let started = Instant::now();
    let map_err = |name| move |source| Error::Map { name, source };
    let ring = RingBuf::try_from(bpf::take_map(&mut ebpf, "EVENTS")?).map_err(map_err("EVENTS"))?;
    let counters: PerCpuArray<MapData, u64> =
        PerCpuArray::try_from(bpf::take_map(&mut ebpf, "COUNTERS")?).map_err(map_err("COUNTERS"))?;
    let short_calls: PerCpuArray<MapData, ShortCalls> =
        PerCpuArray::try_from(bpf::take_map(&mut ebpf, "SHORT_CALLS")?).map_err(map_err("SHORT_CALLS"))?;
    let woken = Array::try_from(bpf::take_map(&mut ebpf, "WOKEN")?).map_err(map_err("WOKEN"))?;
    let mut goroutines = match go_code {
        true => Some(bpf::goroutines::Goroutines::take(&mut ebpf)?),
        false => None,
    };
    let mut reader = RingReader::new(ring, woken)?;

    // A command whose exec fails ends the recording before its outputs replace the last ones in
    // the output directory; what it does meanwhile waits in the ring buffer.
    let mut exit = None;
    if let Targets::Launched(launch) = &mut targets {
        // Stopped while attaching: the command never runs (the launch, dropped, lets it go).
        if let Some((signal, number)) = signals.arrived().await {
            return Err(Error::StoppedBeforeStart {
                command: crate::shell::quote_words(&launch.argv),
                signal,
                number,
            });
        }
        launch.release()?;
        exit = launch.take_exit();
        if launch.program.replaced_before(launch.process.pid) {
            observer.warning(&format!(
                "{} was replaced while xtrace read it: the command runs the new file, and its \
                 probes are in the old one, so they see nothing; run xtrace again",
                launch.program.path.display()
            ));
        }
    }
    let names: Vec<(&str, &str)> = plan.probes.iter().map(|p| (p.name.as_str(), p.kind)).collect();
    let (sink, trace_file) = output::create_trace(&out, args.gzip)?;
    let writer = TraceWriter::spawn(sink, &names).map_err(output_error(&trace_file.path))?;
    let sampler = sampling.map(|s| format!("the sampler ({cpus} CPUs at {} Hz)", s.hz));
    // Probes kept for libraries loaded later are not attached yet.
    let planned = plan.probes.iter().filter(|p| p.is_placed()).count();
    let what = match (planned, sampler) {
        (0, Some(sampler)) => format!("attached {sampler}"),
        (probes, sampler) => {
            let plural = if probes == 1 { "" } else { "s" };
            format!(
                "attached {probes} probe{plural} ({} uprobes, {}){}",
                attached.uprobes,
                attached.mechanism.name(),
                sampler.map_or(String::new(), |s| format!(" and {s}"))
            )
        }
    };
    let gpu_period = match args.gpu_metrics {
        Some(GpuPeriod::Off) => None,
        Some(GpuPeriod::Every(period)) => Some(period),
        None if !plan.cuda.is_empty() => Some(nvml::DEFAULT_PERIOD),
        None => None,
    };
    let gpu_metrics = gpu_period.and_then(|period| {
        GpuMetrics::start(period, targets.pids())
            .map_err(|why| observer.warning(&format!("GPU metrics off: {why}; tracing continues")))
            .ok()
    });
    // Read before the attached notice: a target may exit as soon as it is told recording runs, and
    // its namespace pid is readable only while it exists.
    let mut infos: Vec<(u32, ProcessInfo)> = targets.processes().iter().map(|p| (p.pid, p.info())).collect();
    if let Targets::Launched(launch) = &targets {
        // Read before or after its exec, or after its exit: the name it has after its exec.
        for (_, info) in infos.iter_mut() {
            if info.comm.as_deref().is_none_or(|comm| comm == LAUNCHER_THREAD) {
                info.comm = Some(launch.comm());
            }
        }
    }
    observer.attached(&format!("{what} to {}; Ctrl-C to stop", targets.describe()));

    let captures = plan.probes.iter().map(|p| p.capture.clone()).collect();
    let sites = plan
        .usdt_sites
        .iter()
        .map(|s| SiteView {
            probe_id: s.site.probe_id,
            signed: s.signed.clone(),
        })
        .collect();
    let usdt = Usdt::new(sites, plan.usdt_probes.clone());
    let ranges = crate::pipeline::ranges::Ranges::new(plan.ranges.unwrap_or_default(), since_ns);
    let mut pipeline = Pipeline::new(captures, usdt, cuda, ranges, writer);
    if !matches!(targets, Targets::SystemWide) {
        pipeline.targets = Some(targets.pids().into_iter().collect());
    }
    pipeline.min_duration_ns = args.min_duration.unwrap_or(0);
    if let Some(sideband) = sideband {
        let sampled = Sampled::of(targets.pids(), follow.is_some());
        pipeline.samples.images.watch(sideband, sampled);
        if let Targets::Launched(launch) = &targets {
            pipeline.samples.images.launched(launch.process.pid);
        }
        pipeline.samples.probed = attached.uprobes > 0;
    }
    pipeline.loaders = plan.watch.as_ref().map(|w| w.loaders.clone()).unwrap_or_default();
    pipeline.warnings = crate::pipeline::warnings::Warnings::new(
        args.warn_over.clone(),
        plan.probes.iter().map(|p| p.name.clone()).collect(),
    );
    let mut late = cuda::late::Late::new(&plan);
    let mut execs = changes::Execs::default();
    let scope_pids = targets.scope_pids();
    let mut on_change = |change: Change| -> Vec<std::result::Result<String, String>> {
        match change {
            Change::Loaded(pid) => match late.as_mut() {
                Some(late) => changes::late_attach(
                    late,
                    pid,
                    &targets,
                    &scope_pids,
                    &mut plan,
                    &mut ebpf,
                    &mut attached,
                ),
                None => Vec::new(),
            },
            Change::Exec(pid) => execs.exec(pid, &scope_pids, &mut attached),
            Change::Tick => {
                if let Some(goroutines) = goroutines.as_mut() {
                    goroutines.sweep(false);
                }
                execs.attach_closed(&plan, &mut attached)
            }
        }
    };
    let stopped = run::run(
        &mut signals,
        &mut reader,
        &mut pipeline,
        &counters,
        &targets.processes(),
        args.duration.map(|d| started + d),
        &trace_file,
        observer,
        &mut on_change,
    )
    .await;
    let duration_ns = started.elapsed().as_nanos() as u64;
    pipeline.stop_at(crate::clock::monotonic_ns());
    let gpus = gpu_metrics.map(GpuMetrics::stop).unwrap_or_default();
    observer.stopped();
    // Detach first so nothing new arrives, then read what is left.
    let detach_started = Instant::now();
    let (mechanism, uprobes) = (attached.mechanism, attached.uprobes);
    // Read before detaching: detaching unloads the uprobe_multi programs.
    let overhead = stats_on.map(|_on| bpf::overhead::read(&ebpf, &attached.program_fds()));
    if cpus > 0 && pipeline.samples.bpf.is_none() {
        // The first sample in the kernel may be read only after the programs are gone.
        pipeline.samples.bpf = Some(crate::pipeline::bpf_symbols::BpfSymbols::read());
    }
    attached.detach(&mut ebpf);
    drop(ebpf);
    let detach_ns = detach_started.elapsed().as_nanos() as u64;
    log::info!("detached in {:.1} ms", detach_ns as f64 / 1e6);
    let result = async {
        let stop = stopped?;
        reader
            .drain_all(|bytes| pipeline.record(bytes))
            .map_err(output_error(&trace_file.path))?;
        for warning in pipeline.warnings.take() {
            observer.warning(&warning);
        }
        let lost = bpf::read_lost(&counters)?;
        // Go calls left open by processes that exited.
        let gone = goroutines.as_mut().map_or(0, |g| {
            g.sweep(true);
            g.unmatched
        });
        let unmatched_entries = bpf::read_unmatched(&counters)? + gone;
        let sampling = match sampling {
            Some(s) if s.followed.is_some() => Some(Sampling {
                followed: Some(bpf::read_followed(&counters)?),
                ..s
            }),
            other => other,
        };
        if args.min_duration.is_some() {
            let short = bpf::read_short_calls(&short_calls, plan.probes.len())?;
            for (stats, short) in pipeline.stats.iter_mut().zip(&short) {
                stats.add_short(short);
            }
        }
        // Whether each target was gone before the capture ended: asked before a launched command
        // still running is ended below.
        let exited: Vec<(u32, bool)> = targets
            .processes()
            .iter()
            .map(|p| (p.pid, p.has_exited()))
            .collect();
        let command = match (&targets, exit) {
            (Targets::Launched(launch), Some(exit)) => Some(finish::command(launch, exit).await),
            _ => None,
        };
        let run = RunInfo {
            duration_ns,
            attach_ns,
            detach_ns,
            attach_mechanism: mechanism.name(),
            min_duration_ns: args.min_duration,
            uprobes,
            overhead,
        };
        finish::write(
            &out,
            &trace_file,
            &plan,
            pipeline,
            infos,
            &exited,
            stop,
            (lost, unmatched_entries),
            command,
            run,
            sampling,
            args.icicle,
            &gpus,
        )
    }
    .await;
    let (summary, derived) = result?;
    let mut files = vec![trace_file.name, output::SUMMARY_JSON, output::SUMMARY_TXT];
    if summary.profile.is_some() {
        files.extend([output::STACKS_FOLDED, output::FLAMEGRAPH_SVG]);
    }
    files.extend(derived);
    Ok(Recording {
        summary,
        output: out.path().to_path_buf(),
        files,
    })
}
