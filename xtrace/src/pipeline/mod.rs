//! From ring-buffer bytes to aggregates and trace events: `reader` drains the ring buffer, `decode`
//! turns records into events, `stats` aggregates per probe, `threads` names pids and tids; each
//! record then goes to the probe family that owns it (`family`: functions, USDT and ranges, CUDA,
//! off-CPU), whose state lives in `values`, `usdt`, `ranges`, `gpu`, `offcpu`, and which say at the
//! end what they add to the summary (`family::summary`); `writer` streams trace events to
//! trace.json in the Chrome Trace Event format (`chrome`) or to trace.perfetto-trace in Perfetto's
//! protobuf format (`perfetto`).
pub mod bpf_symbols;
pub mod call_sites;
pub mod chrome;
pub mod decode;
pub mod family;
pub mod flight;
pub mod flight_offcpu;
pub mod flight_stacks;
pub mod gpu;
pub mod gpu_names;
pub mod host_spans;
pub mod kept_names;
pub mod live;
pub use live::LiveParts;
pub mod locks;
pub mod offcpu;
pub mod offcpu_counters;
pub mod offcpu_timeline;
pub mod perfetto;
pub mod ranges;
pub mod reader;
pub mod samples;
pub mod stats;
pub mod strings;
pub mod symbolizer;
pub mod threads;
pub mod traps;
pub mod unwind;
pub mod usdt;
pub mod values;
pub mod warnings;
pub mod window;
pub mod writer;

#[cfg(test)]
mod offcpu_tests;
#[cfg(test)]
mod record_tests;
#[cfg(test)]
mod sampling_tests;

use std::io::Write;

use crate::pipeline::{
    decode::Event,
    family::{
        cuda::CudaFamily, functions::FunctionsFamily, mpi::MpiFamily, offcpu::OffCpuFamily,
        sampling::SamplingFamily, usdt::UsdtFamily, Families, Shared, Sink, Window,
    },
    stats::ProbeStats,
    threads::Names,
    usdt::Usdt,
    values::Values,
    writer::{SpanOut, TraceWriter},
};
use crate::{image::Images, model::text::c_str, probes::Capture};
use xtrace_common::event::SpanEvent;

pub use family::cuda::{CUDA_MEMORY_TRACK, CUDA_PINNED_TRACK};

/// What a pipeline is built from: one value the session fills in before recording starts.
pub struct Setup {
    /// Which values each probe captures, by probe id (one entry per probe).
    pub captures: Vec<Capture>,
    /// The USDT call sites and probes.
    pub usdt: Usdt,
    pub cuda: crate::cuda::calls::Calls,
    /// `--mpi`: the MPI calls.
    pub mpi: crate::mpi::calls::Calls,
    pub ranges: ranges::Ranges,
    /// What the traced processes had mapped, and when: names sampled stacks and CUDA kernels.
    pub images: Images,
    /// The CPU samples' state: their stacks, whether uprobes are placed.
    pub samples: samples::Samples,
    /// The Python processes' interpreters, and the Python frames walked for samples and waits.
    pub python: crate::python::Python,
    /// `--warn-over` rules (none by default).
    pub warnings: warnings::Warnings,
    /// The target processes, unless system-wide: the probes' records of any other process are
    /// left out. The kernel filters perf-event uprobes (and uprobe_multi links before Linux 6.12)
    /// by address space, so a child made with vfork or clone(CLONE_VM), which shares its parent's,
    /// fires its parent's probes.
    pub targets: Option<std::collections::HashSet<u32>>,
    /// `--min-duration` (0: none): a USDT begin/end span shorter is counted, not written, as the
    /// kernel does for a function's call.
    pub min_duration_ns: u64,
    /// The `dlopen` probes (`--cuda` watching for libraries loaded later).
    pub loaders: Vec<u32>,
    /// `--off-cpu`: the waits' state (None without it).
    pub off_cpu: Option<offcpu::OffCpu>,
    /// `--cuda` with the `gpu_records` probe planned: the GPU device timeline.
    pub gpu: Option<gpu::GpuDevice>,
    /// `--stacks`: the traced calls' call sites (None without it).
    pub call_sites: Option<call_sites::CallSites>,
    /// With the GPU device timeline: the host spans, for what the threads did in its idle gaps.
    pub host_spans: Option<host_spans::HostSpans>,
}

/// What a pipeline holds when its recording is over, besides its trace, for the outputs to be
/// written from.
pub struct Collected {
    /// Indexed by probe id.
    pub stats: Vec<ProbeStats>,
    pub names: Names,
    /// The probe families: they say what they add to the summary.
    pub families: Families,
    pub images: Images,
    pub python: crate::python::Python,
    pub call_sites: Option<call_sites::CallSites>,
    pub host_spans: Option<host_spans::HostSpans>,
    pub warnings: warnings::Warnings,
    /// Records that could not be decoded, or whose probe id is unknown; never expected.
    pub decode_errors: u64,
}

/// Everything the records of one recording feed into.
pub struct Pipeline<W: Write + Send + 'static> {
    /// Indexed by probe id.
    stats: Vec<ProbeStats>,
    trace: TraceWriter<W>,
    names: Names,
    families: Families,
    images: Images,
    python: crate::python::Python,
    call_sites: Option<call_sites::CallSites>,
    host_spans: Option<host_spans::HostSpans>,
    warnings: warnings::Warnings,
    /// Records that could not be decoded (wrong size or unknown kind); never expected.
    undecodable: u64,
    /// Spans whose probe id is not in the probe table; never expected.
    unknown_probe: u64,
    events: u64,
    loaders: Vec<u32>,
    /// Processes whose `dlopen` returned since the session last looked, in order, once each.
    loaded: Vec<u32>,
    /// Processes in which a thread other than the first ran exec since the session last looked,
    /// in order, once each.
    execs: Vec<u32>,
    /// See [`Setup::targets`].
    targets: Option<std::collections::HashSet<u32>>,
    min_duration_ns: u64,
    /// When the recording stopped (CLOCK_MONOTONIC ns), once it has: what the probes record
    /// after it, while they are detached, is left out (see [`Pipeline::stop_at`]).
    stopped_at: Option<u64>,
    /// See [`Pipeline::start_at`].
    started_at: Option<u64>,
    /// `--flight`: the trace events are kept here instead of being written.
    flight: Option<flight::Flight>,
    /// With `--off-cpu`: the reads of the kernel's added-up waits, for each thread's counters.
    short_waits: Option<offcpu_counters::ShortWaits>,
    /// With the live view: each probe's calls of the last minute.
    recent: Option<live::RecentCalls>,
}

impl<W: Write + Send + 'static> Pipeline<W> {
    /// A pipeline that writes its trace events to `trace`.
    pub fn new(setup: Setup, trace: TraceWriter<W>) -> Self {
        let Setup {
            captures,
            usdt,
            cuda,
            mpi,
            ranges,
            images,
            samples,
            python,
            warnings,
            targets,
            min_duration_ns,
            loaders,
            off_cpu,
            gpu,
            call_sites,
            host_spans,
        } = setup;
        let short_waits = off_cpu
            .is_some()
            .then(|| offcpu_counters::ShortWaits::starting(crate::clock::monotonic_ns()));
        let mut pipeline = Pipeline {
            stats: vec![ProbeStats::default(); captures.len()],
            trace,
            names: Names::default(),
            families: Families {
                cuda: CudaFamily::new(cuda, gpu),
                mpi: MpiFamily { calls: mpi },
                usdt: UsdtFamily::new(usdt, ranges),
                off_cpu: OffCpuFamily::new(off_cpu),
                sampling: SamplingFamily { samples },
                functions: FunctionsFamily {
                    values: Values::new(captures),
                },
            },
            images,
            python,
            call_sites,
            host_spans,
            warnings,
            undecodable: 0,
            unknown_probe: 0,
            events: 0,
            loaders,
            loaded: Vec::new(),
            execs: Vec::new(),
            targets,
            min_duration_ns,
            stopped_at: None,
            started_at: None,
            recent: None,
            flight: None,
            short_waits,
        };
        for pid in pipeline.targets.clone().into_iter().flatten() {
            pipeline.seen(pid);
            if pipeline.call_sites.is_some() {
                // A running Python's frames from its first traced call on.
                let image = pipeline.images.seen(pid, crate::clock::monotonic_ns());
                pipeline.python.seen(pid, pipeline.images.maps(image));
            }
        }
        pipeline
    }

    /// Tells every family that process `pid` has records that follow.
    fn seen(&mut self, pid: u32) {
        for family in self.families.each_mut() {
            family.seen(&mut self.images, pid);
        }
    }

    /// The spans over their `--warn-over` limits so far.
    pub fn warned(&self) -> u64 {
        self.warnings.over_total()
    }

    /// How many records it has been given.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Processes whose `dlopen` returned since the last call, in order, once each.
    pub fn take_loaded(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.loaded)
    }

    /// Processes in which a thread other than the first ran exec since the last call.
    pub fn take_execs(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.execs)
    }

    /// The `--warn-over` lines to show since the last call.
    pub fn take_warnings(&mut self) -> Vec<String> {
        let mut lines = self.warnings.take();
        lines.extend(
            self.families
                .cuda
                .device
                .iter_mut()
                .flat_map(gpu::GpuDevice::take_notices),
        );
        lines
    }

    /// Processes whose tool library is recording device records and has not handed over its last
    /// ones (see `session::drain`).
    pub fn gpu_undrained(&self) -> Vec<u32> {
        let device = self.families.cuda.device.as_ref();
        device.map_or_else(Vec::new, |d| d.undrained.iter().copied().collect())
    }

    /// Hands the events written so far to the trace's writer thread.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.trace.flush()
    }

    /// Reads what the kernel said of the traced processes' mappings since the last call.
    pub fn poll_images(&mut self) {
        self.images.poll();
    }

    /// Reads the kernel's BPF program symbols now, unless a sample already made it read them:
    /// before the programs are detached, while their names are still listed.
    pub fn keep_bpf_symbols(&mut self) {
        let samples = &mut self.families.sampling.samples;
        if samples.bpf.is_none() {
            samples.bpf = Some(bpf_symbols::BpfSymbols::read());
        }
    }

    /// Adds the calls shorter than `--min-duration` that the kernel counted, by probe id.
    pub fn add_short_calls(&mut self, short: &[xtrace_common::probe::ShortCalls]) {
        for (stats, short) in self.stats.iter_mut().zip(short) {
            stats.add_short(short);
        }
    }

    /// Its trace, to be ended, and what it holds, for the outputs.
    pub fn collected(self) -> (TraceWriter<W>, Collected) {
        let collected = Collected {
            stats: self.stats,
            names: self.names,
            families: self.families,
            images: self.images,
            python: self.python,
            call_sites: self.call_sites,
            host_spans: self.host_spans,
            warnings: self.warnings,
            decode_errors: self.undecodable + self.unknown_probe,
        };
        (self.trace, collected)
    }

    /// Adds the kernel's added-up off-CPU waits (with `--off-cpu`), named in the images the
    /// processes had at `end_ns`.
    pub fn off_cpu_totals(
        &mut self,
        totals: &[(
            xtrace_common::offcpu::OffCpuKey,
            xtrace_common::offcpu::OffCpuTotal,
            Vec<u64>,
        )],
        end_ns: u64,
        stack_of: &dyn Fn(i32) -> Vec<u64>,
    ) {
        if let Some(off_cpu) = &mut self.families.off_cpu.waits {
            off_cpu.totals(&mut self.images, totals, end_ns, stack_of);
        }
    }

    /// Ends the capture at `ns`: samples, USDT hits and range ends after it, and calls that
    /// began after it, are left out. They come from the moments the probes are being detached,
    /// when entry probes are already gone (a sample there has lost its callers: the return
    /// probes' trampoline addresses are no longer put back) and an end's begin may be missed. A
    /// call that began before it still ends its span, and so do a USDT span and a range begun
    /// before it whose end comes after it.
    pub fn stop_at(&mut self, ns: u64) {
        self.stopped_at = Some(ns);
    }

    /// Begins the capture at `ns` (`--start-at`): what began before it is left out (a USDT end
    /// whose begin was then counts as unpaired, as one begun before an attach does).
    pub fn start_at(&mut self, ns: u64) {
        self.started_at = Some(ns);
    }

    /// Handles one ring-buffer record.
    pub fn record(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.events += 1;
        let Ok(event) = decode::decode(bytes) else {
            self.undecodable += 1;
            return Ok(());
        };
        if self.left_out(&event) {
            return Ok(());
        }
        match event {
            Event::Thread(thread) => {
                self.seen(thread.header.pid);
                let name = c_str(&thread.comm);
                self.names.named(thread.header.pid, thread.header.tid, &name);
                Ok(())
            }
            Event::Exec(exec) => {
                // Sent for every process on the machine: the session keeps those it traces. The
                // thread's next traced call names it.
                if !self.execs.contains(&exec.header.pid) {
                    self.execs.push(exec.header.pid);
                }
                Ok(())
            }
            Event::PyStack(walk) => {
                self.python.walked(&walk);
                Ok(())
            }
            Event::CallStack(event) => {
                if let Some(sites) = &mut self.call_sites {
                    sites.stack(&mut self.images, &mut self.python, &event);
                }
                Ok(())
            }
            event => self.dispatch(event),
        }
    }

    /// Whether `event` is left out: of a process that is not a target, or outside the window.
    fn left_out(&self, event: &Event) -> bool {
        if let Some(targets) = &self.targets {
            if event.target_pid().is_some_and(|pid| !targets.contains(&pid)) {
                return true;
            }
        }
        let before = self.started_at.is_some_and(|start| event.before(start));
        before || self.stopped_at.is_some_and(|stop| event.after(stop))
    }

    /// Hands `event` to the first family that owns it, after counting a span for its probe.
    fn dispatch(&mut self, event: Event) -> std::io::Result<()> {
        let span = match &event {
            Event::Span(span) => Some(*span),
            Event::SpanStr(event) => Some(event.span),
            _ => None,
        };
        if let Some(span) = span {
            if !self.span_seen(&span) {
                return Ok(());
            }
        }
        let Pipeline {
            families,
            images,
            python,
            names,
            stats,
            call_sites,
            warnings,
            trace,
            flight,
            host_spans,
            unknown_probe,
            ..
        } = self;
        let Some(family) = families.each_mut().into_iter().find(|f| f.owns(&event)) else {
            return Ok(());
        };
        let mut shared = Shared {
            images,
            python,
            names,
            stats,
            call_sites: call_sites.as_mut(),
            window: Window {
                started_at: self.started_at,
                stopped_at: self.stopped_at,
            },
            min_duration_ns: self.min_duration_ns,
            unknown_probe,
            warnings,
            sink: &mut Out {
                trace,
                flight,
                host_spans,
            },
        };
        family.record(event, &mut shared)
    }

    /// What every span does before its family's: counted for its probe (false for a probe not
    /// in the table), its thread seen, a `dlopen` probe's process looked at again.
    fn span_seen(&mut self, span: &SpanEvent) -> bool {
        let id = span.probe_id as usize;
        let Some(stats) = self.stats.get_mut(id) else {
            self.unknown_probe += 1;
            return false;
        };
        let duration = span.header.ts_ns.saturating_sub(span.start_ns);
        stats.add(duration);
        if let Some(recent) = &mut self.recent {
            recent.span(id, span.header.ts_ns, duration);
            recent.threads.add(span.header.pid, span.header.tid, 1);
        }
        self.names.saw(span.header.pid, span.header.tid);
        if self.loaders.contains(&span.probe_id) {
            self.families
                .cuda
                .calls
                .names
                .loaded(&mut self.images, span.header.pid);
            if !self.loaded.contains(&span.header.pid) {
                self.loaded.push(span.header.pid);
            }
        }
        true
    }
}

/// The pipeline's one way to the trace: the trace writer, or the flight recorder's buffer.
struct Out<'a, W: Write + Send + 'static> {
    trace: &'a mut TraceWriter<W>,
    flight: &'a mut Option<flight::Flight>,
    host_spans: &'a mut Option<host_spans::HostSpans>,
}

impl<W: Write + Send + 'static> Sink for Out<'_, W> {
    fn keep(&mut self, span: SpanOut) -> std::io::Result<()> {
        if let Some(host) = self.host_spans {
            host.add(&span);
        }
        match self.flight {
            Some(flight) => {
                flight.add(span);
                Ok(())
            }
            None => self.trace.span(span),
        }
    }

    fn sample(&mut self, at: (u64, u32, u32), key: samples::StackKey, truncated: bool) {
        if let Some(flight) = self.flight {
            flight.add_sample(at, key, truncated);
        }
    }

    fn off_cpu_wait(&mut self, wait: flight_offcpu::FlightWait, stack: Option<samples::StackKey>) {
        if let Some(flight) = self.flight {
            flight.add_wait(wait, stack);
        }
    }
}
