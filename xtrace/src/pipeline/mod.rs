//! From ring-buffer bytes to aggregates and trace events: `reader` drains the ring buffer, `decode`
//! turns records into events, `stats` aggregates per probe, `values` pairs captured arguments with
//! their spans, `usdt` turns USDT hits into instants and spans, `ranges` turns the tool library's
//! hits into annotation ranges, `threads` names pids and tids; `writer` streams trace events to
//! trace.json in the Chrome Trace Event format (`chrome`) or to trace.perfetto-trace in Perfetto's
//! protobuf format (`perfetto`).
pub mod bpf_symbols;
pub mod call_sites;
pub mod chrome;
pub mod decode;
pub mod flight;
pub mod gpu;
pub mod kept_names;
pub mod live;
pub use live::LiveParts;
pub mod locks;
pub mod offcpu;
pub mod offcpu_timeline;
pub mod perfetto;
pub mod ranges;
pub mod reader;
pub mod samples;
pub mod stats;
pub mod strings;
pub mod threads;
pub mod traps;
pub mod unwind;
pub mod usdt;
mod usdt_hits;
pub mod values;
pub mod warnings;
pub mod window;
pub mod writer;

#[cfg(test)]
mod record_tests;

use std::io::Write;

use crate::model::cuda_api::Space;
use crate::pipeline::{
    decode::Event,
    stats::ProbeStats,
    threads::Names,
    usdt::Usdt,
    values::Values,
    writer::{EventKind, SpanOut, TraceWriter},
};
use crate::{image::Images, model::text::c_str, probes::Capture};
use xtrace_common::event::{SpanEvent, EXIT_TAIL_CALL};

/// The trace.json counter track of a process's live CUDA device memory.
pub const CUDA_MEMORY_TRACK: &str = "CUDA device memory (bytes)";
/// The trace.json counter track of a process's live pinned host memory.
pub const CUDA_PINNED_TRACK: &str = "CUDA pinned host memory (bytes)";

/// What a pipeline is built from: one value the session fills in before recording starts.
pub struct Setup {
    /// Which values each probe captures, by probe id (one entry per probe).
    pub captures: Vec<Capture>,
    /// The USDT call sites and probes.
    pub usdt: Usdt,
    pub cuda: crate::cuda::calls::Calls,
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
}

/// What a pipeline holds when its recording is over, besides its trace, for the outputs to be
/// written from.
pub struct Collected {
    /// Indexed by probe id.
    pub stats: Vec<ProbeStats>,
    pub names: Names,
    pub values: Values,
    pub usdt: Usdt,
    pub images: Images,
    pub samples: samples::Samples,
    pub python: crate::python::Python,
    pub off_cpu: Option<offcpu::OffCpu>,
    pub gpu: Option<gpu::GpuDevice>,
    pub call_sites: Option<call_sites::CallSites>,
    pub cuda: crate::cuda::calls::Calls,
    pub ranges: ranges::Ranges,
    pub warnings: warnings::Warnings,
    /// USDT end probes that fired with no span of their pair open on their thread.
    pub usdt_unpaired: u64,
    /// Records that could not be decoded, or whose probe id is unknown; never expected.
    pub decode_errors: u64,
}

/// Everything the records of one recording feed into.
pub struct Pipeline<W: Write + Send + 'static> {
    /// Indexed by probe id.
    stats: Vec<ProbeStats>,
    trace: TraceWriter<W>,
    names: Names,
    values: Values,
    usdt: Usdt,
    images: Images,
    samples: samples::Samples,
    python: crate::python::Python,
    off_cpu: Option<offcpu::OffCpu>,
    gpu: Option<gpu::GpuDevice>,
    call_sites: Option<call_sites::CallSites>,
    cuda: crate::cuda::calls::Calls,
    ranges: ranges::Ranges,
    warnings: warnings::Warnings,
    /// USDT end probes that fired with no span of their pair open on their thread.
    usdt_unpaired: u64,
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
    /// The time of each process's last memory counter value, per memory space.
    counter_at: std::collections::HashMap<(u32, Space), u64>,
    /// `--flight`: the trace events are kept here instead of being written.
    flight: Option<flight::Flight>,
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
        } = setup;
        let probes = captures.len();
        let values = Values::new(captures);
        let (mut images, mut python) = (images, python);
        for &pid in targets.iter().flatten() {
            values.seen(&mut images, pid);
            if call_sites.is_some() {
                // A running Python's frames from its first traced call on.
                let image = images.seen(pid, crate::clock::monotonic_ns());
                python.seen(pid, images.maps(image));
            }
        }
        Pipeline {
            stats: vec![ProbeStats::default(); probes],
            trace,
            names: Names::default(),
            values,
            usdt,
            images,
            samples,
            python,
            off_cpu,
            gpu,
            call_sites,
            cuda,
            ranges,
            warnings,
            usdt_unpaired: 0,
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
            counter_at: std::collections::HashMap::new(),
            recent: None,
            flight: None,
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
        lines.extend(self.gpu.iter_mut().flat_map(gpu::GpuDevice::take_notices));
        lines
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
        if self.samples.bpf.is_none() {
            self.samples.bpf = Some(bpf_symbols::BpfSymbols::read());
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
            values: self.values,
            usdt: self.usdt,
            images: self.images,
            samples: self.samples,
            python: self.python,
            off_cpu: self.off_cpu,
            gpu: self.gpu,
            call_sites: self.call_sites,
            cuda: self.cuda,
            ranges: self.ranges,
            warnings: self.warnings,
            usdt_unpaired: self.usdt_unpaired,
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
        if let Some(off_cpu) = &mut self.off_cpu {
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
        let event = decode::decode(bytes);
        if let (Some(targets), Ok(event)) = (&self.targets, &event) {
            if event.target_pid().is_some_and(|pid| !targets.contains(&pid)) {
                return Ok(());
            }
        }
        if let Ok(event) = &event {
            let before = self.started_at.is_some_and(|start| event.before(start));
            if before || self.stopped_at.is_some_and(|stop| event.after(stop)) {
                return Ok(());
            }
        }
        match event {
            Ok(Event::Span(span)) => self.span(&span, &[]),
            Ok(Event::SpanStr(event)) => {
                let len = (event.str_len as usize).min(event.string.len());
                let span = &event.span;
                let read = &event.string[..len];
                let string = if span.exit == EXIT_TAIL_CALL {
                    std::borrow::Cow::Borrowed(read)
                } else {
                    let probe = span.probe_id as usize;
                    self.values
                        .returned_string(&mut self.images, (probe, span.header.pid, span.ret), read)
                };
                self.span(span, &string)
            }
            Ok(Event::Thread(thread)) => {
                self.values.seen(&mut self.images, thread.header.pid);
                let name = c_str(&thread.comm);
                self.names.named(thread.header.pid, thread.header.tid, &name);
                Ok(())
            }
            Ok(Event::Exec(exec)) => {
                // Sent for every process on the machine: the session keeps those it traces. The
                // thread's next traced call names it.
                if !self.execs.contains(&exec.header.pid) {
                    self.execs.push(exec.header.pid);
                }
                Ok(())
            }
            Ok(Event::Args(args)) if self.cuda.owns(args.probe_id) => {
                self.cuda.args(&mut self.images, &args);
                Ok(())
            }
            Ok(Event::Args(args)) => {
                self.values.args(&mut self.images, &args);
                Ok(())
            }
            Ok(Event::LongStr(event)) => {
                self.long_string(&event);
                Ok(())
            }
            Ok(Event::Out(out)) => {
                self.cuda.out(&out);
                Ok(())
            }
            Ok(Event::Usdt(event)) => self.usdt_hit(&event, &[]),
            Ok(Event::Sample(event, mut stack)) => {
                let comm = c_str(&event.comm);
                if comm == crate::launch::LAUNCHER_THREAD {
                    // A launched command's sample in its exec, before the kernel renames it.
                    self.names.saw(event.header.pid, event.header.tid);
                } else {
                    self.names.named(event.header.pid, event.header.tid, &comm);
                }
                self.samples
                    .add(&mut self.images, &mut self.python, &event, &comm, &mut stack);
                Ok(())
            }
            Ok(Event::OffCpu(event, mut stack)) => self.off_cpu_wait(&event, &mut stack),
            Ok(Event::UsdtStr(event)) => self.usdt_str(&event),
            Ok(Event::PyStack(walk)) => {
                self.python.walked(&walk);
                Ok(())
            }
            Ok(Event::Gpu(event)) => self.gpu_record(&event),
            Ok(Event::CallStack(event)) => {
                if let Some(sites) = &mut self.call_sites {
                    sites.stack(&mut self.images, &mut self.python, &event);
                }
                Ok(())
            }
            Err(_) => {
                self.undecodable += 1;
                Ok(())
            }
        }
    }

    /// One span; `ret_str`, the string its return value points at (`-> str`; else empty).
    fn span(&mut self, span: &SpanEvent, ret_str: &[u8]) -> std::io::Result<()> {
        let id = span.probe_id as usize;
        let Some(stats) = self.stats.get_mut(id) else {
            self.unknown_probe += 1;
            return Ok(());
        };
        let duration = span.header.ts_ns.saturating_sub(span.start_ns);
        stats.add(duration);
        if let Some(recent) = &mut self.recent {
            recent.span(id, span.header.ts_ns, duration);
        }
        self.names.saw(span.header.pid, span.header.tid);
        if self.loaders.contains(&span.probe_id) {
            self.cuda.names.loaded(&mut self.images, span.header.pid);
            if !self.loaded.contains(&span.header.pid) {
                self.loaded.push(span.header.pid);
            }
        }
        if self.cuda.owns(span.probe_id) {
            return self.cuda_span(span);
        }
        let site = self.call_site(span, duration, None);
        let tail_call = span.exit == EXIT_TAIL_CALL;
        let ret = (!tail_call).then_some((span.ret, ret_str));
        let mut values = self.values.span(id, span.header.tid, span.start_ns, ret);
        if tail_call {
            // The span ends at the jump: the callee's time is not in it.
            values
                .get_or_insert_with(String::new)
                .push_str(",\"exit\":\"tail call\"");
        }
        if let Some(site) = site {
            values.get_or_insert_with(String::new).push_str(&site);
        }
        let values = values.map(String::into_boxed_str);
        self.emit(SpanOut {
            probe: id,
            pid: span.header.pid,
            tid: span.header.tid,
            start_ns: span.start_ns,
            kind: EventKind::span(duration, span.depth.into()),
            values,
            ..Default::default()
        })
    }

    /// Writes one event to the trace (or keeps it in the flight recorder's buffer), checking
    /// spans against the `--warn-over` rules.
    fn emit(&mut self, span: SpanOut) -> std::io::Result<()> {
        self.warnings.span(&span);
        self.keep(span)
    }

    /// Writes one event to the trace, or keeps it in the flight recorder's buffer.
    fn keep(&mut self, span: SpanOut) -> std::io::Result<()> {
        match &mut self.flight {
            Some(flight) => {
                flight.add(span);
                Ok(())
            }
            None => self.trace.span(span),
        }
    }

    /// With `--stacks`: the call site of `span` (of CUDA kernel `kernel`, for a launch), as
    /// trace.json `args` members (`,"site":"main (x.py:12)"`); its time is added to the site's.
    fn call_site(&mut self, span: &SpanEvent, duration: u64, kernel: Option<&str>) -> Option<String> {
        let sites = self.call_sites.as_mut()?;
        let site = sites.span(span.header.tid, span.start_ns, duration, kernel)?;
        Some(format!(
            ",\"site\":{}",
            serde_json::to_string(site).unwrap_or_default()
        ))
    }

    /// The span of a CUDA call, and the process's device memory counter when the call changed it.
    fn cuda_span(&mut self, span: &xtrace_common::event::SpanEvent) -> std::io::Result<()> {
        let (pid, tid) = (span.header.pid, span.header.tid);
        let end_ns = span.header.ts_ns;
        let rendered = self.cuda.span(
            &mut self.images,
            span.probe_id,
            pid,
            tid,
            (span.start_ns, end_ns),
            span.ret,
        );
        let kernel = self.cuda.take_launched();
        let site = self.call_site(span, end_ns.saturating_sub(span.start_ns), kernel.as_deref());
        let values = rendered.values + site.as_deref().unwrap_or_default();
        // Every CUDA call is sent (the CUDA summary counts each); one shorter than
        // `--min-duration` is left out of trace.json here, as the kernel leaves out others.
        let duration = end_ns.saturating_sub(span.start_ns);
        if duration < self.min_duration_ns {
            if let Some(stats) = self.stats.get_mut(span.probe_id as usize) {
                stats.short += 1;
            }
        } else {
            self.emit(SpanOut {
                probe: span.probe_id as usize,
                pid,
                tid,
                start_ns: span.start_ns,
                kind: EventKind::span(duration, span.depth.into()),
                values: Some(values.into_boxed_str()),
                ..Default::default()
            })?;
        }
        match rendered.memory {
            // The counter follows the calls in the order their records came, which two CPUs can
            // swap by nanoseconds: its times never go back, so no viewer draws a change that
            // never happened.
            Some((space, bytes)) => {
                let at = self.counter_at.entry((pid, space)).or_default();
                *at = end_ns.max(*at);
                let at = *at;
                self.emit(SpanOut {
                    probe: span.probe_id as usize,
                    pid,
                    tid: pid,
                    start_ns: at,
                    name: Some(
                        match space {
                            Space::Device => CUDA_MEMORY_TRACK,
                            Space::PinnedHost => CUDA_PINNED_TRACK,
                        }
                        .into(),
                    ),
                    kind: EventKind::Counter(bytes),
                    ..Default::default()
                })
            }
            None => Ok(()),
        }
    }
}
