//! The last phase: what the ring buffer and the maps still hold once the probes are detached, the
//! launched command's exit, then the outputs: trace metadata (process and thread names, GPU
//! counters), the CPU profile (stacks.folded, flamegraph.svg), the summary files and what is
//! derived from them.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use super::{
    output_error, run::Stop, start::ExitReceiver, stop::Stopped, targets::Targets, Observer, Recording,
};
use crate::{
    bpf,
    cuda::nvml::{track_pid, DeviceSeries},
    error::Result,
    export::{
        profile,
        summary::{
            ClockSummary, CommandSummary, ProbeSummary, RunInfo, Summary, SymbolizeCost, TargetSummary,
        },
    },
    launch::Launch,
    model::summary::{Lost, FORMAT_VERSION},
    output::{self, Sink, TraceFile},
    pipeline::{
        family::{
            gpu_summary::DeviceLost,
            summary::{Ending, SamplingEnding, Sections},
            Naming,
        },
        samples::Samples,
        symbolizer::{self, Resolver},
        writer::TraceWriter,
        Collected, Pipeline,
    },
    probes::uprobe::Plan,
    target::ProcessInfo,
};

/// What naming the CPU samples' stacks took: `python`'s walks as they came, and the distinct
/// stacks of `samples`, named `frames` in `native_ns`.
fn symbolize_cost(
    samples: &Samples,
    frames: &symbolizer::Frames,
    native_ns: u64,
    python: crate::python::NamingCost,
) -> SymbolizeCost {
    SymbolizeCost {
        ns: native_ns + python.ns,
        samples: frames.keys().map(|key| samples.stacks[*key]).sum(),
        stacks: frames.len() as u64,
        native_ns,
        python_ns: python.ns,
        python_walks: python.walks,
        python_frames: python.frames,
        python_codes_read: python.codes_read,
        python_first_walk_ns: python.first_walk_ns,
    }
}

/// The launched command's exit; a command still running gets SIGTERM, then SIGKILL after 2 s. One
/// that has exited (its pidfd says so) is waited for, not signalled: its waiter may not have
/// reported yet.
pub async fn command(launch: &Launch, mut exit: ExitReceiver) -> CommandSummary {
    use std::os::unix::process::ExitStatusExt;
    let pid = launch.process.pid;
    let mut status = exit.try_recv().ok();
    let ended_by_xtrace = status.is_none() && !launch.process.has_exited();
    if ended_by_xtrace {
        let _ = launch.process.signal(libc::SIGTERM);
        status = match tokio::time::timeout(Duration::from_secs(2), &mut exit).await {
            Ok(result) => result.ok(),
            Err(_) => {
                let _ = launch.process.signal(libc::SIGKILL);
                exit.await.ok()
            }
        };
    } else if status.is_none() {
        status = exit.await.ok();
    }
    let status = status.and_then(|r| r.ok());
    CommandSummary {
        argv: launch.argv.clone(),
        pid,
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        ended_by_xtrace,
    }
}

/// Hands the live view its last snapshot, whose figures are the summary's, with the last
/// `--warn-over` lines, and closes it.
async fn close_live(
    (live, mut publisher): (crate::live::Live, crate::live::Publisher),
    pipeline: &mut Pipeline<Sink>,
    (lost, warnings): (u64, &[String]),
    stop: Stop,
) {
    for warning in warnings {
        publisher.alert(warning);
    }
    let tick = crate::live::Tick {
        now_ns: crate::clock::monotonic_ns(),
        events: pipeline.events(),
        lost,
        done: Some(stop.reason()),
    };
    if let Some(parts) = pipeline.live_parts() {
        publisher.publish(parts, tick);
    }
    live.close().await;
}

/// How the CPU was sampled, when it was.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    pub hz: u64,
    /// Whether processes the sampled ones start are sampled too, and when the capture is read:
    /// how many were (`FOLLOWED_PROCESSES`), how many were not for want of room.
    pub followed: Option<(u64, u64)>,
}

impl Stopped<'_> {
    /// Reads what is left, waits for a launched command, and writes the outputs.
    pub(super) async fn finish(self, observer: &mut dyn Observer) -> Result<Recording> {
        let Stopped {
            config,
            stop,
            targets,
            plan,
            out,
            sampling,
            counters,
            short_calls,
            mut goroutines,
            off_cpu,
            mut reader,
            exit,
            trace_file,
            mut pipeline,
            infos,
            gpus,
            run,
            teardown,
            live,
            flight,
        } = self;
        let stop = stop?;
        reader
            .drain_all(|bytes| pipeline.record(bytes))
            .map_err(output_error(&trace_file.path))?;
        let flight = flight.map(|flight| flight.stop(&mut pipeline, observer, off_cpu.as_ref()));
        let warnings = pipeline.take_warnings();
        for warning in &warnings {
            observer.warning(warning);
        }
        let lost = bpf::read_lost(&counters)?;
        let off_cpu_lost = match &off_cpu {
            Some(tables) => {
                let stack_of = |id| tables.stack(id);
                let (totals, now) = (tables.read(), crate::clock::monotonic_ns());
                // The threads' short-wait counters' last stretch, from the same read.
                let read: Vec<_> = totals.iter().map(|(key, total, _)| (*key, *total)).collect();
                pipeline
                    .off_cpu_read(now, &read, true)
                    .map_err(output_error(&trace_file.path))?;
                pipeline.off_cpu_totals(&totals, now, &stack_of);
                bpf::read_lost_off_cpu(&counters)?
            }
            None => 0,
        };
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
        if config.min_duration_ns.is_some() {
            pipeline.add_short_calls(&bpf::read_short_calls(&short_calls, plan.probes.len())?);
        }
        if let Some(live) = live {
            close_live(live, &mut pipeline, (lost.total(), &warnings), stop).await;
        }
        // Whether each target was gone before the capture ended: asked before a launched command
        // still running is ended below.
        let exited: Vec<(u32, bool)> = targets
            .processes()
            .iter()
            .map(|p| (p.pid, p.has_exited()))
            .collect();
        let command = match (&targets, exit) {
            (Targets::Launched(launch), Some(exit)) => Some(command(launch, exit).await),
            _ => None,
        };
        let outputs = Outputs {
            out: &out,
            trace_file: &trace_file,
            plan: &plan,
            infos,
            targets: &exited,
            stop,
            lost,
            unmatched_entries,
            command,
            run,
            sampling,
            icicle: config.icicle,
            gpus: &gpus,
            off_cpu_lost,
            device_lost: device_lost(&counters)?,
            flight,
        };
        let (summary, derived) = outputs.write(pipeline)?;
        let files = written(trace_file.name, &summary, derived);
        Ok(Recording {
            summary,
            output: out.path().to_path_buf(),
            files,
            teardown,
        })
    }
}

/// What the outputs are written from, besides the pipeline.
struct Outputs<'a> {
    out: &'a output::Dir,
    trace_file: &'a TraceFile,
    plan: &'a Plan,
    /// Each target's pid and what /proc said of it.
    infos: Vec<(u32, ProcessInfo)>,
    /// Each target's pid, and whether it had exited when the capture ended.
    targets: &'a [(u32, bool)],
    stop: Stop,
    lost: Lost,
    /// Calls whose entry was seen and whose return never was.
    unmatched_entries: u64,
    command: Option<CommandSummary>,
    run: RunInfo,
    sampling: Option<Sampling>,
    icicle: bool,
    gpus: &'a [DeviceSeries],
    /// Off-CPU waits the kernel could not count.
    off_cpu_lost: u64,
    /// The tool library's records the kernel program could not send.
    device_lost: DeviceLost,
    /// `--flight`: the whole run's window and directories.
    flight: Option<crate::export::summary::FlightSummary>,
}

impl Outputs<'_> {
    /// Closes the trace with its metadata and writes summary.json and summary.txt, then the
    /// outputs derived from them (span-flamegraph.svg, profile.pb.gz); returns the summary and the
    /// names of the derived files.
    fn write(mut self, pipeline: Pipeline<Sink>) -> Result<(Summary, Vec<&'static str>)> {
        let (trace, mut collected) = pipeline.collected();
        // One for the CPU samples and the off-CPU waits: kallsyms and the vDSO are read once.
        let resolver =
            (self.sampling.is_some() || collected.families.off_cpu.waits.is_some()).then(Resolver::default);
        if let Some(resolver) = &resolver {
            collected.families.name(&mut Naming {
                images: &mut collected.images,
                python: &collected.python,
                resolver,
                names: &collected.names,
            });
        }
        let named_at = Instant::now();
        let frames = match (self.sampling, &resolver) {
            (Some(_), Some(resolver)) => Some(resolver.frames(
                &collected.families.sampling.samples,
                &mut collected.images,
                &collected.python,
            )),
            _ => None,
        };
        if let (Some(_), Some(frames)) = (&self.run.overhead, &frames) {
            let native_ns = named_at.elapsed().as_nanos() as u64;
            let samples = &collected.families.sampling.samples;
            self.run.symbolize = Some(symbolize_cost(samples, frames, native_ns, collected.python.cost));
        }
        let (spans, clock) = self.close_trace(trace, &collected, frames.as_ref())?;
        output::complete(self.out, self.trace_file.name)?;
        let process_names: HashMap<u32, String> = self
            .infos
            .iter()
            .map(|(pid, info)| (*pid, info.comm.clone().unwrap_or_else(|| format!("pid {pid}"))))
            .collect();
        let mut sections = collected.families.summarize(&Ending {
            call_sites: collected.call_sites.as_ref(),
            host_spans: collected.host_spans.as_ref(),
            device_lost: self.device_lost,
            off_cpu_lost: self.off_cpu_lost,
            sampling: self.sampling.map(|sampling| SamplingEnding {
                frequency_hz: sampling.hz,
                followed: sampling.followed,
                images: &collected.images,
                python: &collected.python,
                // Its flight directories have the stacks; the whole run's counts only are here.
                frames: frames.as_ref().filter(|_| self.flight.is_none()),
                process_names: &process_names,
            }),
        });
        drop(frames);
        if let (Some(folded), Some(profile)) = (sections.folded.take(), &sections.profile) {
            let hz = profile.sample_frequency_hz;
            profile::write(self.out, &folded, profile.samples, hz, self.icicle)?;
        }
        if let (Some(folded), Some(off_cpu)) = (collected.families.off_cpu.folded(), &sections.off_cpu) {
            crate::export::offcpu::write(self.out, folded, off_cpu.off_cpu_ns, self.icicle)?;
        }
        let folded = sections.profile.is_some() && self.flight.is_none();
        if let (Some(sampling), true, Some(_)) = (self.sampling, folded, &sections.off_cpu) {
            crate::export::wallclock::write(self.out, sampling.hz, self.icicle)?;
        }
        let mut summary = self.summary(&collected, sections);
        summary.clock = clock;
        output::write(self.out, output::SUMMARY_JSON, summary.to_json().as_bytes())?;
        output::write(self.out, output::SUMMARY_TXT, summary.table().as_bytes())?;
        let derived = crate::export::derived::write(self.out, spans, self.icicle)?;
        Ok((summary, derived))
    }

    /// Ends the trace: process and thread names (the targets' and every other process seen),
    /// the CPU samples' timeline, the GPUs' counters, the clocks at the end; returns how many
    /// spans it holds and the clocks read as it began and ended.
    fn close_trace(
        &mut self,
        trace: TraceWriter<Sink>,
        collected: &Collected,
        frames: Option<&symbolizer::Frames>,
    ) -> Result<(u64, ClockSummary)> {
        let trace_err = output_error(&self.trace_file.path);
        let names = &collected.names;
        let mut trace = trace.finish().map_err(trace_err)?;
        for (pid, info) in &names.processes {
            if !self.infos.iter().any(|(p, _)| p == pid) {
                self.infos.push((*pid, info.clone()));
            }
        }
        for (pid, info) in self.infos.iter_mut() {
            info.comm = names.process_comm(*pid, info.comm.take());
        }
        for (pid, info) in &self.infos {
            trace.process_name(*pid, &info.label()).map_err(trace_err)?;
        }
        for (pid, tid) in names.threads.keys() {
            if let Some(name) = names.thread_label(*pid, *tid) {
                trace.thread_name(*pid, *tid, name).map_err(trace_err)?;
            }
        }
        if let Some(frames) = frames {
            symbolizer::timeline(
                &mut trace,
                &collected.families.sampling.samples,
                frames,
                &collected.images,
            )
            .map_err(trace_err)?;
        }
        for gpu in self.gpus {
            let pid = track_pid(gpu.index);
            trace
                .process_name(pid, &format!("GPU {}: {}", gpu.index, gpu.name))
                .map_err(trace_err)?;
            for r in &gpu.readings {
                trace
                    .counter(pid, r.track, r.ts_ns, &r.values)
                    .map_err(trace_err)?;
            }
        }
        trace.end_clocks().map_err(trace_err)?;
        let clock = ClockSummary::of(trace.clocks());
        let spans = trace.spans();
        trace.finish().map_err(trace_err)?.close().map_err(trace_err)?;
        Ok((spans, clock))
    }

    /// The summary of the recording.
    fn summary(&self, collected: &Collected, families: Sections) -> Summary {
        let (ranges, ranges_unpaired) = families.ranges.unzip();
        Summary {
            format_version: FORMAT_VERSION,
            slice_depths: self.trace_file.format == crate::output::TraceFormat::Perfetto,
            run: self.run.clone(),
            stop_reason: self.stop.reason(),
            lost_events: self.lost.total(),
            decode_errors: collected.decode_errors,
            lost: self.lost.clone(),
            unmatched_entries: self.unmatched_entries,
            args_unpaired: families.args_unpaired,
            unreadable_strings: families.unreadable_strings,
            usdt_unpaired: families.usdt_unpaired,
            probes: self.probe_summaries(collected),
            command: self.command.clone(),
            targets: self
                .infos
                .iter()
                .filter_map(|(pid, info)| {
                    let (_, exited) = self.targets.iter().find(|(p, _)| p == pid)?;
                    Some(TargetSummary {
                        pid: *pid,
                        ns_pid: info.ns_pid,
                        comm: info.comm.clone().unwrap_or_default(),
                        exited: *exited,
                        rank: info.rank.clone(),
                    })
                })
                .collect(),
            profile: families.profile,
            cuda: families.cuda,
            mpi: families.mpi,
            gpus: self.gpus.iter().map(DeviceSeries::summary).collect(),
            ranges,
            ranges_unpaired,
            warn_over: collected.warnings.summary(),
            clock: ClockSummary::default(),
            flight: self.flight.clone(),
            off_cpu: families.off_cpu,
            gpu_device: families.gpu_device,
        }
    }

    /// Each placed probe's statistics and values, the most total time first.
    fn probe_summaries(&self, collected: &Collected) -> Vec<ProbeSummary> {
        let mut probes: Vec<ProbeSummary> = self
            .plan
            .probes
            .iter()
            .zip(collected.stats.iter())
            .enumerate()
            // Probes kept for CUDA libraries that were never loaded.
            .filter(|(_, (p, _))| p.is_placed())
            .map(|(id, (p, s))| (id, p, s, collected.families.probe_row(id as u32, p.kind)))
            .map(|(id, p, s, row)| ProbeSummary {
                pair: row.pair,
                name: p.name.clone(),
                kind: p.kind.name(),
                target: p.target.clone(),
                offset: p.kind.at_function().then(|| format!("{:#x}", p.offset)),
                stats: s.distribution(),
                histogram: s.histogram(),
                below_min_duration: self.run.min_duration_ns.map(|_| s.short),
                values: row.values,
                call_sites: collected
                    .call_sites
                    .as_ref()
                    .map(|sites| sites.of_probe(id as u32))
                    .unwrap_or_default(),
            })
            .collect();
        probes.sort_by(|a, b| b.stats.total_ns.cmp(&a.stats.total_ns).then(a.name.cmp(&b.name)));
        probes
    }
}

/// The files a recording wrote, in the order they are named to the user: the trace, the
/// summaries, the profiles the summary has, then the `derived` ones.
fn written(
    trace: &'static str,
    summary: &crate::export::summary::Summary,
    derived: Vec<&'static str>,
) -> Vec<&'static str> {
    let mut files = vec![trace, output::SUMMARY_JSON, output::SUMMARY_TXT];
    // With --flight, the stacks are in the flight directories.
    let folded = summary.profile.is_some() && summary.flight.is_none();
    if folded {
        files.extend([output::STACKS_FOLDED, output::FLAMEGRAPH_SVG]);
    }
    if summary.off_cpu.is_some() {
        files.extend([output::OFFCPU_FOLDED, output::OFFCPU_SVG]);
        if folded {
            files.extend([output::WALLCLOCK_FOLDED, output::WALLCLOCK_SVG]);
        }
    }
    files.extend(derived);
    files
}

/// The tool library's records the kernel program could not send, by kind.
fn device_lost(counters: &aya::maps::PerCpuArray<aya::maps::MapData, u64>) -> Result<DeviceLost> {
    Ok(DeviceLost {
        activities: bpf::read_lost_device_records(counters)?,
        other_records: bpf::read_lost_tool_records(counters)?,
    })
}
