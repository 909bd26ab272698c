//! The third and fourth phases: recording until a stop condition, answering what happens in the
//! traced processes meanwhile (a CUDA library loaded late, an exec by a thread other than the
//! first), then detaching. A [`Stopped`] holds nothing in the kernel any more: only what is left
//! to read from the ring buffer and the maps, and what the outputs are written from.
use std::time::Instant;

use aya::maps::{MapData, PerCpuArray};
use xtrace_common::probe::ShortCalls;

use super::{
    changes::{self, Execs},
    config::Config,
    finish::Sampling,
    kernel::Maps,
    run::{self, Change, Loop, Stop},
    start::{ExitReceiver, Started},
    targets::Targets,
    Observer, Said, SESSION_LOG,
};
use crate::{
    bpf,
    cuda::{self, nvml::DeviceSeries},
    error::Result,
    export::summary::RunInfo,
    output::{self, Sink, TraceFile},
    pipeline::{reader::RingReader, Pipeline},
    probes::{attach::Mechanism, teardown::Teardown, uprobe::Plan},
    target::ProcessInfo,
};

/// A recording whose probes are detached, or do nothing any more (see [`Teardown`]).
pub(super) struct Stopped<'a> {
    pub(super) config: &'a Config,
    /// Why it stopped, or what failed while it ran.
    pub(super) stop: Result<Stop>,
    pub(super) targets: Targets,
    pub(super) plan: Plan,
    pub(super) out: output::Dir,
    pub(super) sampling: Option<Sampling>,
    pub(super) counters: PerCpuArray<MapData, u64>,
    pub(super) short_calls: PerCpuArray<MapData, ShortCalls>,
    pub(super) goroutines: Option<bpf::goroutines::Goroutines>,
    pub(super) off_cpu: Option<crate::probes::offcpu::Tables>,
    pub(super) reader: RingReader,
    pub(super) exit: Option<ExitReceiver>,
    pub(super) trace_file: TraceFile,
    pub(super) pipeline: Pipeline<Sink>,
    pub(super) infos: Vec<(u32, ProcessInfo)>,
    pub(super) gpus: Vec<DeviceSeries>,
    pub(super) run: RunInfo,
    /// Perf-event uprobes whose programs are off, to remove once the outputs are written.
    pub(super) teardown: Teardown,
    /// `--live`: the server and what publishes to it, for the last snapshot.
    pub(super) live: Option<(crate::live::Live, crate::live::Publisher)>,
    /// `--flight`: its last window is written once what is left is read.
    pub(super) flight: Option<super::flight::Recorder>,
}

impl<'a> Started<'a> {
    /// Records until a stop condition, then detaches.
    pub(super) async fn run(mut self, observer: &mut dyn Observer) -> Stopped<'a> {
        let stop = self.read_until_stop(observer).await;
        let duration_ns = self.started.elapsed().as_nanos() as u64;
        self.pipeline.stop_at(crate::clock::monotonic_ns());
        self.drain_device_records(observer).await;
        let gpus = self
            .gpu_metrics
            .take()
            .map(cuda::nvml::GpuMetrics::stop)
            .unwrap_or_default();
        observer.stopped();
        // Detach first so nothing new arrives, then read what is left.
        let detach_started = Instant::now();
        let mut kernel = self.kernel;
        let (mechanism, uprobes) = (kernel.attached.mechanism, kernel.attached.uprobes);
        // Read before detaching: detaching unloads the uprobe_multi programs.
        let overhead = kernel
            .stats_on
            .take()
            .map(|_on| bpf::overhead::read(&kernel.ebpf, &kernel.attached.program_fds()));
        if kernel.cpus > 0 {
            // The first sample in the kernel may be read only after the programs are gone.
            self.pipeline.keep_bpf_symbols();
        }
        // uprobe_multi links are closed here; perf-event uprobes' programs stop doing anything
        // here, and the uprobes are removed once the outputs are written (`probes::teardown`).
        let programs_stopped = mechanism == Mechanism::PerfEvent
            && match bpf::stop_programs(&mut kernel.ebpf) {
                Ok(()) => true,
                Err(e) => {
                    log::warn!(target: SESSION_LOG, "{e}: the programs run until the uprobes are removed");
                    false
                }
            };
        let teardown = kernel.attached.stop(programs_stopped);
        drop(kernel.ebpf);
        let detach_ns = detach_started.elapsed().as_nanos() as u64;
        log::info!(
            target: SESSION_LOG,
            "detached in {:.1} ms ({} uprobes left to remove)",
            detach_ns as f64 / 1e6,
            teardown.uprobes()
        );
        let Maps {
            counters,
            short_calls,
            goroutines,
            off_cpu,
            python: _,
            gpu_kept: _,
        } = self.maps;
        Stopped {
            config: self.config,
            stop,
            targets: self.targets,
            plan: self.plan,
            out: self.out,
            sampling: self.sampling,
            counters,
            short_calls,
            goroutines,
            off_cpu,
            reader: self.reader,
            exit: self.exit,
            trace_file: self.trace_file,
            pipeline: self.pipeline,
            infos: self.infos,
            gpus,
            teardown,
            live: self.live,
            flight: self.flight,
            run: RunInfo {
                host: crate::output::placeholders::host_name(),
                labels: self.config.labels.iter().cloned().collect(),
                start_at_ns: self.start_at_ns,
                duration_ns,
                attach_ns: kernel.attach_ns,
                detach_ns,
                attach_mechanism: mechanism.name(),
                min_duration_ns: self.config.min_duration_ns,
                uprobes,
                overhead,
                symbolize: None,
            },
        }
    }

    /// The recording loop, with the session's answers to what happens in the traced processes.
    async fn read_until_stop(&mut self, observer: &mut dyn Observer) -> Result<Stop> {
        let Started {
            config,
            signals,
            targets,
            plan,
            kernel,
            maps,
            reader,
            trace_file,
            pipeline,
            started,
            live,
            flight,
            ..
        } = self;
        let mut late = cuda::late::Late::new(plan);
        let mut execs = Execs::default();
        let scope_pids = targets.scope_pids();
        let ebpf = &mut kernel.ebpf;
        let attached = &mut kernel.attached;
        let goroutines = &mut maps.goroutines;
        let mut on_change = |change: Change| -> Vec<Said> {
            match change {
                Change::Loaded(pid) => match late.as_mut() {
                    Some(late) => changes::late_attach(late, pid, targets, &scope_pids, plan, ebpf, attached),
                    None => Vec::new(),
                },
                Change::Exec(pid) => execs.exec(pid, &scope_pids, attached),
                Change::Tick => {
                    if let Some(goroutines) = goroutines.as_mut() {
                        goroutines.sweep(false);
                    }
                    execs.attach_closed(plan, attached)
                }
            }
        };
        let processes = targets.processes();
        let state = Loop {
            signals,
            reader,
            pipeline,
            counters: &maps.counters,
            processes: &processes,
            deadline: config.duration.map(|d| *started + d),
            trace_file,
            live: live.as_mut().map(|(_, publisher)| publisher),
            flight: flight.as_mut(),
            off_cpu: maps.off_cpu.as_ref(),
        };
        run::run(state, observer, &mut on_change).await
    }
}
