//! The flight recorder (`--flight`): when to write the pipeline's buffer of recent events out, and
//! writing it. A trigger (SIGUSR1, a `--warn-over` rule with `--flight-trigger warn-over`, the
//! stop) takes the buffer's slots after `--flight-after`; a thread of its own writes them as
//! `DIR/flight-NNN/`, a capture directory that stands alone (its trace with the probes' names
//! and the processes' and threads' names, summary.json and summary.txt over its window, the
//! derived files; with sampling, the window's CPU samples on the timeline, stacks.folded and
//! flamegraph.svg, their stacks named here first: `export::flight_profile`; with `--off-cpu`, the
//! window's waits in its summary's `off_cpu`, offcpu.folded and offcpu.svg, and wallclock.folded
//! and wallclock.svg with sampling), while the reader goes on recording. With `--off-cpu`, the
//! kernel's table of added-up waits is read once a second and at each trigger, for the window to
//! hold what it gained (`pipeline::flight_offcpu`). What that thread still holds counts against `--flight-size`: the buffer's
//! cap shrinks by as much until it is written.
use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    thread::JoinHandle,
};

use super::{config, output_error};
use crate::{
    error::{Error, Result},
    export::{
        flight_profile::WindowProfile,
        offcpu,
        summary::{ClockSummary, FlightSummary, ProbeSummary, RunInfo, Summary, TargetSummary},
    },
    model::summary::{Lost, FORMAT_VERSION},
    output::{self, TraceFormat},
    pipeline::{
        family::{offcpu_summary, profile_summary::ProfileSummary},
        flight::{Flight, Taken},
        offcpu::OffCpu,
        stats::ProbeStats,
        symbolizer::Resolver,
        window::Slot,
        writer::{EventWriter, SpanOut},
        Pipeline,
    },
    probes::offcpu::Tables,
};

/// What every flight directory is written with, besides its events.
pub(super) struct Context {
    /// The capture directory, and who files made in it are handed to.
    pub out: PathBuf,
    pub owner: Option<(u32, u32)>,
    pub format: TraceFormat,
    pub gzip: bool,
    pub icicle: bool,
    /// By probe id: its summary with no calls yet, and whether it is placed.
    pub probes: Vec<(ProbeSummary, bool)>,
    /// The run's summary fields; `duration_ns` becomes the window's.
    pub run: RunInfo,
    pub targets: Vec<TargetSummary>,
    /// `--flight-size` (set by [`Recorder::new`]).
    pub size_bytes: u64,
    /// The sampling frequency, when the CPU is sampled.
    pub hz: Option<u64>,
}

/// A flight directory written: its path, the events in it, the stretch they cover.
struct Written {
    path: PathBuf,
    events: u64,
    kept_ns: u64,
}

/// A directory being written by its thread, by its name.
type Writing = (String, JoinHandle<Result<Written>>);

/// The trigger waiting for `--flight-after` to pass.
#[derive(Clone, Copy, Debug)]
struct Pending {
    due_ns: u64,
    trigger: &'static str,
}

pub(super) struct Recorder {
    asked: config::Flight,
    context: Arc<Context>,
    /// Directories begun, for the next one's number.
    begun: u32,
    /// Those written whole, in order.
    directories: Vec<String>,
    pending: Option<Pending>,
    /// When the kernel's table of added-up off-CPU waits was last read (`--off-cpu`).
    off_cpu_read_ns: u64,
    /// Bytes the writing threads still hold.
    held: Arc<AtomicUsize>,
    writing: Vec<Writing>,
    /// `--warn-over` spans counted at the last tick.
    warned: u64,
    /// Until when (CLOCK_MONOTONIC ns) a `--warn-over` span triggers nothing: one trigger a window.
    warn_quiet_until_ns: u64,
    /// Lines about directories whose thread could not start, not yet told.
    failed: Vec<String>,
    /// Names the windows' sampled stacks; made at the first window taken with sampling.
    resolver: Option<Resolver>,
}

impl Recorder {
    pub(super) fn new(asked: config::Flight, mut context: Context) -> Self {
        context.size_bytes = asked.size_bytes;
        Recorder {
            asked,
            context: Arc::new(context),
            begun: 0,
            directories: Vec::new(),
            pending: None,
            off_cpu_read_ns: 0,
            held: Arc::new(AtomicUsize::new(0)),
            writing: Vec::new(),
            warned: 0,
            warn_quiet_until_ns: 0,
            failed: Vec::new(),
            resolver: None,
        }
    }

    /// The buffer the pipeline keeps its events in.
    pub(super) fn buffer(&self) -> Flight {
        Flight::new(self.asked.window_ns, self.cap())
    }

    /// The bytes the buffer may hold now: `--flight-size` less what writing threads hold.
    fn cap(&self) -> usize {
        let size = usize::try_from(self.asked.size_bytes).unwrap_or(usize::MAX);
        size.saturating_sub(self.held.load(Ordering::Relaxed))
    }

    /// A trigger at `now_ns`: the window is written once `--flight-after` has passed. One that
    /// comes while another waits is part of it.
    pub(super) fn trigger(&mut self, now_ns: u64, trigger: &'static str) {
        if self.pending.is_none() {
            self.pending = Some(Pending {
                due_ns: now_ns.saturating_add(self.asked.after_ns),
                trigger,
            });
        }
    }

    /// Another pass of the recording loop at `now_ns`: a `--warn-over` trigger, a trigger whose
    /// time has come, the buffer aged; returns the lines for the user about directories written.
    pub(super) fn tick<W: std::io::Write + Send + 'static>(
        &mut self,
        pipeline: &mut Pipeline<W>,
        now_ns: u64,
        tables: Option<&Tables>,
    ) -> Vec<String> {
        if now_ns >= self.off_cpu_read_ns.saturating_add(OFF_CPU_READ_NS) {
            self.read_off_cpu(pipeline, now_ns, tables);
        }
        if self.asked.on_warn_over && pipeline.warned() > self.warned {
            self.warned = pipeline.warned();
            // Slow spans that go on are one event, not a directory every pass: at most one
            // trigger a window.
            if now_ns >= self.warn_quiet_until_ns {
                self.trigger(now_ns, "warn-over");
                self.warn_quiet_until_ns = now_ns
                    .saturating_add(self.asked.after_ns)
                    .saturating_add(self.asked.window_ns);
            }
        }
        if let Some(pending) = self.pending.filter(|p| p.due_ns <= now_ns) {
            self.pending = None;
            self.take(pipeline, now_ns, pending.trigger, tables);
        }
        let cap = self.cap();
        if let Some(flight) = pipeline.flight() {
            flight.advance(now_ns, cap);
        }
        self.collect(false)
    }

    /// The stop: writes the last window (for a trigger still waiting, as its own), waits for
    /// every directory, telling `observer` of each, and returns the capture's `flight` summary.
    pub(super) fn stop<W: std::io::Write + Send + 'static>(
        mut self,
        pipeline: &mut Pipeline<W>,
        observer: &mut dyn super::Observer,
        tables: Option<&Tables>,
    ) -> FlightSummary {
        let trigger = self.pending.take().map_or("stop", |p| p.trigger);
        self.take(pipeline, crate::clock::monotonic_ns(), trigger, tables);
        for line in self.collect(true) {
            observer.notice(&line);
        }
        // Their threads may have ended out of order: by number.
        self.directories.sort_by_key(|name| (name.len(), name.clone()));
        FlightSummary {
            window_ns: self.asked.window_ns,
            size_bytes: self.asked.size_bytes,
            kept_ns: None,
            aged_out_events: pipeline.flight().map_or(0, |f| f.aged_out().events),
            trigger: None,
            directories: self.directories,
        }
    }

    /// With `--off-cpu` (`tables`): keeps in the window what the kernel's added-up waits gained
    /// since the table was last read.
    fn read_off_cpu<W: std::io::Write + Send + 'static>(
        &mut self,
        pipeline: &mut Pipeline<W>,
        now_ns: u64,
        tables: Option<&Tables>,
    ) {
        if let Some(tables) = tables {
            self.off_cpu_read_ns = now_ns;
            pipeline.flight_off_cpu_read(now_ns, &tables.totals(), &|id| tables.stack(id));
        }
    }

    /// Takes the window at `now_ns` and writes it: with sampling, its stacks are named here,
    /// from the images the pipeline holds; with `--off-cpu`, its waits too, once what the
    /// kernel added up until now is in.
    fn take<W: std::io::Write + Send + 'static>(
        &mut self,
        pipeline: &mut Pipeline<W>,
        now_ns: u64,
        trigger: &'static str,
        tables: Option<&Tables>,
    ) {
        self.read_off_cpu(pipeline, now_ns, tables);
        let Some(mut taken) = pipeline.take_flight(now_ns) else {
            return;
        };
        let off_cpu = tables
            .and_then(|tables| pipeline.flight_off_cpu(&mut taken, &|id| tables.stack(id)))
            .map(|window| self.name_off_cpu(pipeline, &window, &taken));
        let profile = self.context.hz.map(|_| {
            let resolver = self.resolver.get_or_insert_with(Resolver::default);
            WindowProfile::name(resolver, &mut taken, pipeline.sample_naming())
        });
        // The samples, the waits and their stacks went into what was named.
        taken.bytes = taken.slots.iter().map(|(_, s)| s.bytes()).sum::<usize>()
            + profile.as_ref().map_or(0, WindowProfile::bytes)
            + off_cpu.as_ref().map_or(0, offcpu_summary::Named::bytes);
        self.write(taken, Named { profile, off_cpu }, trigger);
    }

    /// The window's off-CPU waits `window`, their stacks named from the images the pipeline
    /// holds, their threads by the names known when `taken` was.
    fn name_off_cpu<W: std::io::Write + Send + 'static>(
        &mut self,
        pipeline: &mut Pipeline<W>,
        window: &OffCpu,
        taken: &Taken,
    ) -> offcpu_summary::Named {
        let resolver = self.resolver.get_or_insert_with(Resolver::default);
        let naming = pipeline.sample_naming();
        let names = crate::pipeline::threads::thread_names(&taken.names, window.threads.keys().copied());
        // What the kernel could not count is the run's (summary.json of the capture directory).
        let lost = 0;
        let off = (window, naming.python);
        offcpu_summary::name(off, resolver, naming.images, &names, lost)
    }

    /// Hands `taken` to a thread that writes it as the next `flight-NNN`.
    fn write(&mut self, taken: Taken, named: Named, trigger: &'static str) {
        self.begun += 1;
        let name = format!("flight-{:03}", self.begun);
        let bytes = taken.bytes;
        self.held.fetch_add(bytes, Ordering::Relaxed);
        let (context, held) = (self.context.clone(), self.held.clone());
        let thread_name = name.clone();
        let spawned = std::thread::Builder::new()
            .name("xtrace-flight".into())
            .spawn(move || write_dir(&context, &thread_name, (taken, named), trigger, &held));
        match spawned {
            Ok(thread) => self.writing.push((name, thread)),
            Err(e) => {
                // The window went with the closure.
                self.held.fetch_sub(bytes, Ordering::Relaxed);
                self.failed.push(format!(
                    "flight recorder: {name} was not written: starting a thread: {e}"
                ));
            }
        }
    }

    /// The directories whose threads are done (all of them, waiting, when `wait`): their lines.
    fn collect(&mut self, wait: bool) -> Vec<String> {
        let mut lines = std::mem::take(&mut self.failed);
        let (done, running): (Vec<Writing>, Vec<Writing>) = std::mem::take(&mut self.writing)
            .into_iter()
            .partition(|(_, t)| wait || t.is_finished());
        self.writing = running;
        for (begun, thread) in done {
            match thread.join() {
                Ok(Ok(written)) => {
                    lines.push(format!(
                        "flight recorder: wrote {} ({} events over the last {:.3}s)",
                        written.path.display(),
                        written.events,
                        written.kept_ns as f64 / 1e9
                    ));
                    let name = written.path.file_name().map(|n| n.to_string_lossy().into_owned());
                    self.directories.push(name.unwrap_or(begun));
                }
                Ok(Err(e)) => lines.push(format!("flight recorder: {begun} was not written: {e}")),
                Err(_) => lines.push(format!(
                    "flight recorder: {begun} was not written: its thread panicked"
                )),
            }
        }
        lines
    }
}

/// What a window's thread writes besides its events, named on the recording thread: its CPU
/// profile (with sampling) and its off-CPU waits (with `--off-cpu`).
struct Named {
    profile: Option<WindowProfile>,
    off_cpu: Option<offcpu_summary::Named>,
}

/// How often the kernel's table of added-up off-CPU waits is read for the flight recorder's
/// window: a window holds the short waits of the reads made within it.
const OFF_CPU_READ_NS: u64 = 1_000_000_000;

/// Whether an event is a call's span, for the probe's statistics.
fn is_call(span: &SpanOut) -> bool {
    matches!(span.kind, crate::pipeline::writer::EventKind::Span { .. })
}

/// Writes `taken` as the directory `name` in the capture directory; `held` is lowered by each
/// slot's bytes once it is written (and by all of them if writing fails).
fn write_dir(
    context: &Context,
    name: &str,
    taken: (Taken, Named),
    trigger: &'static str,
    held: &AtomicUsize,
) -> Result<Written> {
    let mut left = taken.0.bytes;
    let result = write_taken(context, name, taken, trigger, &mut |bytes| {
        let bytes = bytes.min(left);
        left -= bytes;
        held.fetch_sub(bytes, Ordering::Relaxed);
    });
    held.fetch_sub(left, Ordering::Relaxed);
    result
}

fn write_taken(
    context: &Context,
    name: &str,
    (taken, Named { profile, off_cpu }): (Taken, Named),
    trigger: &'static str,
    release: &mut dyn FnMut(usize),
) -> Result<Written> {
    let dir =
        output::Dir::create_fresh(&context.out, name, context.owner).map_err(|source| Error::Output {
            path: context.out.join(name),
            source,
        })?;
    let (sink, trace_file) = output::create_trace(&dir, context.gzip, context.format)?;
    let err = output_error(&trace_file.path);
    let names: Vec<(&str, &str)> = context
        .probes
        .iter()
        .map(|(p, _)| (p.name.as_str(), p.kind))
        .collect();
    let mut trace = EventWriter::new(sink, &names, context.format).map_err(err)?;
    let mut stats = vec![ProbeStats::default(); context.probes.len()];
    let mut events = 0;
    let Taken {
        slots,
        window_ns,
        kept_ns,
        aged_out,
        names,
        ..
    } = taken;
    for (_, slot) in slots {
        for span in slot.spans() {
            if let Some(stats) = stats.get_mut(span.probe).filter(|_| is_call(span)) {
                stats.add(span.dur_ns());
            }
            trace.span(span).map_err(err)?;
            events += 1;
        }
        release(slot.bytes());
    }
    if let Some(profile) = &profile {
        profile.timeline(&mut trace).map_err(err)?;
        events += profile.samples();
    }
    for (pid, info) in &names.processes {
        let mut info = info.clone();
        info.comm = names.process_comm(*pid, info.comm.take());
        trace.process_name(*pid, &info.label()).map_err(err)?;
    }
    for (pid, tid) in names.threads.keys() {
        if let Some(label) = names.thread_label(*pid, *tid) {
            trace.thread_name(*pid, *tid, label).map_err(err)?;
        }
    }
    trace.end_clocks().map_err(err)?;
    let clock = ClockSummary::of(trace.clocks());
    let spans = trace.spans();
    trace.finish().map_err(err)?.close().map_err(err)?;
    output::complete(&dir, trace_file.name)?;
    let flight = FlightSummary {
        window_ns,
        size_bytes: context.size_bytes,
        kept_ns: Some(kept_ns),
        aged_out_events: aged_out.events,
        trigger: Some(trigger),
        directories: Vec::new(),
    };
    let profile = match (profile, context.hz) {
        (Some(profile), Some(hz)) => Some(profile.write(&dir, hz, context.icicle)?),
        _ => None,
    };
    let off_cpu = off_cpu
        .map(|named| offcpu::write_named(&dir, &named, context.icicle))
        .transpose()?;
    if let (Some(hz), Some(_), Some(_)) = (context.hz, &profile, &off_cpu) {
        crate::export::wallclock::write(&dir, hz, context.icicle)?;
    }
    let mut summary = summary(context, &stats, clock, (flight, profile));
    summary.off_cpu = off_cpu;
    output::write(&dir, output::SUMMARY_JSON, summary.to_json().as_bytes())?;
    output::write(&dir, output::SUMMARY_TXT, summary.table().as_bytes())?;
    // Read back from the directory: span-flamegraph.svg, profile.pb.gz.
    crate::export::derived::write(&dir, spans, context.icicle)?;
    Ok(Written {
        path: dir.path().to_path_buf(),
        events,
        kept_ns,
    })
}

/// The summary of one flight directory: its probes' calls and its CPU samples in the window.
fn summary(
    context: &Context,
    stats: &[ProbeStats],
    clock: ClockSummary,
    (flight, profile): (FlightSummary, Option<ProfileSummary>),
) -> Summary {
    let mut probes: Vec<ProbeSummary> = context
        .probes
        .iter()
        .zip(stats)
        .filter(|((_, placed), _)| *placed)
        .map(|((p, _), s)| ProbeSummary {
            stats: s.distribution(),
            histogram: s.histogram(),
            ..p.clone()
        })
        .collect();
    probes.sort_by(|a, b| b.stats.total_ns.cmp(&a.stats.total_ns).then(a.name.cmp(&b.name)));
    let kept_ns = flight.kept_ns.unwrap_or(0);
    Summary {
        format_version: FORMAT_VERSION,
        slice_depths: context.format == TraceFormat::Perfetto,
        run: RunInfo {
            duration_ns: kept_ns,
            ..context.run.clone()
        },
        stop_reason: "flight",
        lost_events: 0,
        lost: Lost::default(),
        unmatched_entries: 0,
        args_unpaired: 0,
        unreadable_strings: 0,
        usdt_unpaired: 0,
        decode_errors: 0,
        probes,
        command: None,
        targets: context.targets.clone(),
        profile,
        cuda: None,
        mpi: None,
        off_cpu: None,
        gpu_device: None,
        gpus: Vec::new(),
        ranges: None,
        ranges_unpaired: None,
        warn_over: Vec::new(),
        clock,
        flight: Some(flight),
    }
}

/// The recorder `config` asks for (`--flight`), with what its directories say of the run: the
/// probes of `plan`, how they were attached, the targets.
pub(super) fn recorder(
    config: &config::Config,
    plan: &crate::probes::uprobe::Plan,
    (attach_ns, mechanism, uprobes): (u64, &'static str, usize),
    hz: Option<u64>,
    infos: &[(u32, crate::target::ProcessInfo)],
    out: &output::Dir,
) -> Option<Recorder> {
    let asked = config.flight?;
    let probes = plan
        .probes
        .iter()
        .map(|p| {
            let summary = ProbeSummary {
                name: p.name.clone(),
                kind: p.kind.name(),
                target: p.target.clone(),
                offset: p.kind.at_function().then(|| format!("{:#x}", p.offset)),
                stats: Default::default(),
                below_min_duration: None,
                values: Vec::new(),
                pair: None,
                histogram: Vec::new(),
                call_sites: Vec::new(),
            };
            (summary, p.is_placed())
        })
        .collect();
    let context = Context {
        out: out.path().to_path_buf(),
        owner: out.owner(),
        format: config.trace_format,
        gzip: config.gzip,
        icicle: config.icicle,
        probes,
        run: RunInfo {
            host: output::placeholders::host_name(),
            labels: config.labels.iter().cloned().collect(),
            start_at_ns: None,
            duration_ns: 0,
            attach_ns,
            detach_ns: 0,
            attach_mechanism: mechanism,
            uprobes,
            min_duration_ns: config.min_duration_ns,
            overhead: None,
            symbolize: None,
        },
        targets: infos
            .iter()
            .map(|(pid, info)| TargetSummary {
                pid: *pid,
                ns_pid: info.ns_pid,
                comm: info.comm.clone().unwrap_or_default(),
                exited: false,
                rank: info.rank.clone(),
            })
            .collect(),
        size_bytes: 0,
        hz,
    };
    Some(Recorder::new(asked, context))
}
