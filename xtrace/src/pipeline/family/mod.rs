//! Probe families behind one trait: each family (functions, CUDA, MPI, USDT and ranges, off-CPU
//! waits, CPU samples) owns the state its records build and decides what its records become; the pipeline
//! keeps what every family shares and lends it to the family for one record as [`Shared`]: the
//! processes' images and names, per-probe statistics, the capture's window, the call sites of
//! `--stacks`, and the one way to the trace (`emit`: the trace writer or the flight recorder's
//! buffer, with the `--warn-over` check). When the recording is over, each family says what it
//! adds to summary.json (`summary`): its sections, and its parts of each probe's row.
pub mod cuda;
pub mod cuda_summary;
pub mod functions;
pub mod gpu_gaps;
pub mod gpu_summary;
pub mod locks_summary;
pub mod mpi;
pub mod offcpu;
pub mod offcpu_summary;
pub mod profile_summary;
pub mod sampling;
pub mod summary;
pub mod usdt;

use std::io;

use xtrace_common::event::SpanEvent;

use super::{
    call_sites::CallSites, decode::Event, samples::StackKey, stats::ProbeStats, threads::Names,
    warnings::Warnings, writer::SpanOut,
};
use crate::{image::Images, probes::ProbeKind, python::Python};
use summary::{Ending, ProbeRow, Sections};

/// One probe family: the records it owns, and what it makes of them.
///
/// The pipeline hands a record to the first family that owns it, after what it does for every
/// record: the targets' and the window's filters, and for a span its probe's statistics and its
/// thread. Records no family owns (thread names, execs, Python walks, call stacks) are the
/// pipeline's own.
pub trait Family {
    /// Whether `event` is this family's to handle.
    fn owns(&self, event: &Event) -> bool;

    /// Handles one record it owns.
    fn record(&mut self, event: Event, shared: &mut Shared<'_>) -> io::Result<()>;

    /// Process `pid` has records that follow (a target at the start, a thread's first record):
    /// what the family needs to look up while it runs.
    fn seen(&mut self, _images: &mut Images, _pid: u32) {}

    /// The recording is over: names the stacks its summary shows, while the image model is lent
    /// (`summarize` only reads what it kept).
    fn name(&mut self, _naming: &mut Naming<'_>) {}

    /// Adds its summary.json sections to `sections`, and its counts to those families share.
    fn summarize(&self, _ending: &Ending<'_>, _sections: &mut Sections) {}

    /// Fills in the parts of the row of probe `id` (of kind `kind`) that it owns.
    fn probe_row(&self, _id: u32, _kind: ProbeKind, _row: &mut ProbeRow) {}
}

/// The probe families, in the order a record is offered to them: the functions family, which owns
/// every span no other does, comes last.
pub struct Families {
    pub cuda: cuda::CudaFamily,
    pub mpi: mpi::MpiFamily,
    pub usdt: usdt::UsdtFamily,
    pub off_cpu: offcpu::OffCpuFamily,
    pub sampling: sampling::SamplingFamily,
    pub functions: functions::FunctionsFamily,
}

impl Families {
    /// Each family, in order.
    pub fn each_mut(&mut self) -> [&mut dyn Family; 6] {
        [
            &mut self.cuda,
            &mut self.mpi,
            &mut self.usdt,
            &mut self.off_cpu,
            &mut self.sampling,
            &mut self.functions,
        ]
    }

    fn each(&self) -> [&dyn Family; 6] {
        [
            &self.cuda,
            &self.mpi,
            &self.usdt,
            &self.off_cpu,
            &self.sampling,
            &self.functions,
        ]
    }

    /// Lets each family name the stacks its summary shows.
    pub fn name(&mut self, naming: &mut Naming<'_>) {
        for family in self.each_mut() {
            family.name(naming);
        }
    }

    /// What the families add to summary.json.
    pub fn summarize(&self, ending: &Ending<'_>) -> Sections {
        let mut sections = Sections::default();
        for family in self.each() {
            family.summarize(ending, &mut sections);
        }
        // The GPU's idle gaps, with the CPU samples taken in them.
        let frames = ending.sampling.and_then(|s| s.frames);
        if let (Some(gpu), Some(frames)) = (&mut sections.gpu_device, frames) {
            gpu.add_samples(&self.sampling.samples, frames);
        }
        sections
    }

    /// The families' parts of the row of probe `id`, of kind `kind`.
    pub fn probe_row(&self, id: u32, kind: ProbeKind) -> ProbeRow {
        let mut row = ProbeRow::default();
        for family in self.each() {
            family.probe_row(id, kind, &mut row);
        }
        row
    }
}

/// What naming stacks needs once the recording is over: the image model (whose symbol cache
/// naming fills), the interpreters, the one in-capture symbolizer, and the threads' names.
pub struct Naming<'a> {
    pub images: &'a mut Images,
    pub python: &'a Python,
    pub resolver: &'a super::symbolizer::Resolver,
    pub names: &'a Names,
}

/// The capture's window (CLOCK_MONOTONIC ns): `--start-at`, and the stop once it came.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    pub started_at: Option<u64>,
    pub stopped_at: Option<u64>,
}

/// Where trace events go: the trace writer, or the flight recorder's buffer with `--flight`.
pub trait Sink {
    /// Writes one event to the trace, or keeps it in the flight recorder's buffer.
    fn keep(&mut self, span: SpanOut) -> io::Result<()>;

    /// With `--flight`: keeps a CPU sample of thread `at.2` of process `at.1`, taken at `at.0`
    /// (CLOCK_MONOTONIC ns), with its stack `key` in the flight recorder's window (`truncated`:
    /// its user stack was cut). Without, samples are counted by their family, not kept here.
    fn sample(&mut self, at: (u64, u32, u32), key: StackKey, truncated: bool);

    /// With `--flight`, keeps a wait sent on its own and its stack as counted (None for xtrace's
    /// launcher code) in the flight recorder's buffer, for its window's off-CPU summary; else
    /// nothing (the whole run's is counted already).
    fn off_cpu_wait(&mut self, _wait: super::flight_offcpu::FlightWait, _stack: Option<StackKey>) {}
}

/// What the pipeline lends a family for one record.
pub struct Shared<'a> {
    pub images: &'a mut Images,
    pub python: &'a mut Python,
    pub names: &'a mut Names,
    /// Indexed by probe id.
    pub stats: &'a mut [ProbeStats],
    /// `--stacks`: the traced calls' call sites.
    pub call_sites: Option<&'a mut CallSites>,
    pub window: Window,
    /// `--min-duration` (0: none).
    pub min_duration_ns: u64,
    /// Records whose probe is not in the probe table; never expected.
    pub unknown_probe: &'a mut u64,
    pub warnings: &'a mut Warnings,
    pub sink: &'a mut dyn Sink,
}

impl Shared<'_> {
    /// Writes one event to the trace (or keeps it in the flight recorder's buffer), checking
    /// spans against the `--warn-over` rules.
    pub fn emit(&mut self, span: SpanOut) -> io::Result<()> {
        self.warnings.span(&span);
        self.sink.keep(span)
    }

    /// Writes one event no `--warn-over` rule applies to.
    pub fn keep(&mut self, span: SpanOut) -> io::Result<()> {
        self.sink.keep(span)
    }

    /// With `--stacks`: the call site of `span` (of CUDA kernel `kernel`, for a launch), as
    /// trace.json `args` members (`,"site":"main (x.py:12)"`); its time is added to the site's.
    pub fn call_site(&mut self, span: &SpanEvent, duration: u64, kernel: Option<&str>) -> Option<String> {
        let sites = self.call_sites.as_deref_mut()?;
        let site = sites.span(span.header.tid, span.start_ns, duration, kernel)?;
        Some(format!(
            ",\"site\":{}",
            serde_json::to_string(site).unwrap_or_default()
        ))
    }
}
