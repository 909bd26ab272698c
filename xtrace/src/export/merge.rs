//! `xtrace merge DIR... -o OUT`: one capture of many (the ranks of a distributed job, on one host
//! or many), on one clock. Each capture's CLOCK_MONOTONIC, the clock of its trace, is placed on
//! the wall clock by the clock pairs its summary.json holds (read as it started and as it ended):
//! the capture whose monotonic clock lies furthest behind the wall clock is the reference, and
//! every other is shifted forward by the difference, so no time goes negative. The pairs also
//! bound the alignment: how far each capture's wall clock moved against its monotonic clock
//! between start and end (NTP slewing) is reported beside its shift. Processes are numbered
//! apart per capture (pid + its capture's offset, a multiple of 2^22, Linux's largest pid) and
//! named after their host (their names hold their rank); stacks.folded gets each capture's host
//! and rank as the root frame. Each capture's trace, trace.json or trace.perfetto-trace, is
//! replayed into the merged one. Where the captures hold MPI calls (`--mpi`) or NCCL's NVTX
//! ranges, or with `--step`, the merged summary names the stragglers (`analysis::stragglers`).
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::{
    convert::replay_events,
    merge_align,
    replay::{Placement, Replay},
};
use crate::{
    analysis::{
        capture::{self, Capture, Load},
        stragglers::{RankSpans, Stragglers},
        trace_file::{self, Progress},
        Error, Result,
    },
    clock::Snapshot,
    model::{nccl_api, summary::FORMAT_VERSION},
    output::{self, Sink, TraceFormat},
    pipeline::writer::EventWriter,
};

/// What each capture's pids and tids are offset by, times its place in the list (from 1): past
/// `PID_MAX_LIMIT`, so no two captures' ids meet.
pub const ID_STRIDE: u32 = 1 << 22;

/// One merged capture, as the merged summary.json's `merged` lists it.
#[derive(Clone, Debug, Serialize)]
pub struct Part {
    pub dir: String,
    pub host: String,
    pub labels: Value,
    /// Its targets' ranks, as its summary.json gives them.
    pub ranks: Vec<u64>,
    /// Added to its times (ns) to place them on the merged trace's clock.
    pub shift_ns: u64,
    /// How far its wall clock moved against its monotonic clock between its start and its end
    /// (ns, either way): the alignment is no better than this.
    pub clock_drift_ns: u64,
    /// Whether it is the capture whose clock the merged one is on.
    pub reference: bool,
    /// How far its times may be off the reference capture's (0 for that one): its drift, half
    /// the slowest read of its clock pairs and of the reference's, and the kernels' estimates of
    /// both wall clocks' error where they keep one.
    pub uncertainty_ns: u64,
    /// Whether both kernels gave an estimate of their wall clock's error (synchronized by NTP or
    /// PTP); without, `uncertainty_ns` leaves the wall clocks' own error out.
    pub wall_clock_error_known: bool,
    /// Added to its pids and tids.
    pub id_offset: u32,
    /// With `--align collectives`: how the ends of its collectives moved it (already in
    /// `shift_ns`); absent for the reference capture and one with no collective to pair.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aligned: Option<merge_align::Aligned>,
}

/// The merged summary.json: what `report` reads of a capture, and the parts.
#[derive(Debug, Serialize)]
struct MergedSummary {
    format_version: u32,
    /// As a recording's: the merged Perfetto trace gives its nested slices' depths.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    slice_depths: bool,
    host: &'static str,
    duration_ns: u64,
    targets: Vec<Value>,
    clock: Value,
    merged: Vec<Part>,
    /// Per MPI collective and `--step` name: the ranks that arrived last.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stragglers: Vec<Stragglers>,
}

/// A capture to merge: its summary, and its wall-clock offset at start and end (realtime minus
/// monotonic, ns).
struct Input {
    capture: Capture,
    offsets: [i128; 2],
    start: Snapshot,
    end: Snapshot,
}

/// The clock pair `at` (`start` or `end`) of a capture's summary.json; None when it has none
/// (an older xtrace's capture).
fn clock(summary: &Value, at: &str) -> Option<Snapshot> {
    let pair = Snapshot::from_json(&summary["clock"][at]);
    (pair.monotonic_ns > 0 && pair.realtime_ns > 0).then_some(pair)
}

fn input(dir: &Path) -> Result<Input> {
    let capture = capture::load(
        dir,
        Load {
            trace: false,
            spans: false,
            counters: false,
            samples: false,
        },
    )?;
    let path = dir.join(output::SUMMARY_JSON);
    let pairs = clock(&capture.summary, "start").zip(clock(&capture.summary, "end"));
    let Some((start, end)) = pairs else {
        return Err(Error::NotMergeable {
            path,
            reason: "it holds no clock pairs (clock.start and clock.end), which place a capture on a common \
                     clock (an older xtrace wrote it); record it again"
                .into(),
        });
    };
    let offset = |s: &Snapshot| i128::from(s.realtime_ns) - i128::from(s.monotonic_ns);
    Ok(Input {
        capture,
        offsets: [offset(&start), offset(&end)],
        start,
        end,
    })
}

/// Whether a capture holds NCCL's NVTX ranges (summary.json's `ranges` has domain `NCCL`).
fn has_nccl(summary: &Value) -> bool {
    let ranges = summary["ranges"].as_array().into_iter().flatten();
    ranges.into_iter().any(|r| r["domain"] == nccl_api::NVTX_DOMAIN)
}

/// The name of a part: its host, and its targets' rank when they share one.
fn prefix(host: &str, ranks: &[u64]) -> String {
    match ranks {
        [rank, rest @ ..] if rest.iter().all(|r| r == rank) => format!("{host} rank {rank}"),
        _ => host.to_string(),
    }
}

/// How `merge` lines the captures up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Align {
    /// By each capture's clock pairs: as its host's wall clock agrees with the others'.
    #[default]
    Clocks,
    /// Then by the ends of the MPI collectives every rank leaves together. Not by NCCL's: an
    /// NCCL call returns once its work is queued on the GPU, before the others have arrived.
    Collectives,
}

/// What `merge` writes, beside the captures.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub format: TraceFormat,
    pub gzip: bool,
    /// `--step`: the span names whose stragglers are named.
    pub steps: Vec<String>,
    pub align: Align,
}

/// Merges the captures `dirs` into `out` (created, or empty of traces); returns the parts.
pub fn run(dirs: &[PathBuf], out: &Path, options: &Options) -> Result<Vec<Part>> {
    let inputs = dirs.iter().map(|d| input(d)).collect::<Result<Vec<_>>>()?;
    let mean = |i: &Input| (i.offsets[0] + i.offsets[1]) / 2;
    // The capture whose clock the merged trace is on: its shift is 0 (unless aligning moves it).
    let reference = (0..inputs.len()).min_by_key(|&i| mean(&inputs[i])).unwrap_or(0);
    let reference_offset = inputs.get(reference).map_or(0, mean);
    let mut parts = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let summary = &input.capture.summary;
        let ranks: Vec<u64> = summary["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["rank"]["rank"].as_u64())
            .collect();
        parts.push(Part {
            dir: output::shown(&dirs[i]),
            host: summary["host"].as_str().unwrap_or("?").to_string(),
            labels: summary.get("labels").cloned().unwrap_or(Value::Null),
            ranks,
            shift_ns: u64::try_from(mean(input) - reference_offset).unwrap_or(0),
            clock_drift_ns: u64::try_from((input.offsets[1] - input.offsets[0]).abs()).unwrap_or(u64::MAX),
            reference: i == reference,
            uncertainty_ns: 0,
            wall_clock_error_known: true,
            id_offset: ID_STRIDE * (i as u32 + 1),
            aligned: None,
        });
    }
    if let Some(r) = inputs.get(reference) {
        for (input, part) in inputs.iter().zip(parts.iter_mut()) {
            (part.uncertainty_ns, part.wall_clock_error_known) = uncertainty((input, part.clock_drift_ns), r);
        }
        if let Some(part) = parts.get_mut(reference) {
            part.uncertainty_ns = 0;
        }
    }
    let mpi = inputs.iter().any(|i| i.capture.summary.get("mpi").is_some());
    let wanted = mpi
        || inputs.iter().any(|i| has_nccl(&i.capture.summary))
        || !options.steps.is_empty()
        || options.align == Align::Collectives;
    let timelines = match wanted {
        true => inputs.iter().map(timeline_of).collect::<Result<Vec<_>>>()?,
        false => Vec::new(),
    };
    if options.align == Align::Collectives && !inputs.is_empty() {
        let shifts: Vec<u64> = parts.iter().map(|p| p.shift_ns).collect();
        let spans: Vec<&merge_align::Spans> = timelines.iter().map(|t| &t.spans).collect();
        let aligned = merge_align::collectives(&spans, &shifts, reference);
        for ((part, shift), aligned) in parts
            .iter_mut()
            .zip(merge_align::corrected(&shifts, &aligned))
            .zip(aligned)
        {
            part.shift_ns = shift;
            part.aligned = aligned;
        }
    }
    let out_dir = output::prepare(Some(out), true)?;
    let reference = inputs.get(reference).zip(parts.get(reference));
    write_trace(
        &inputs,
        &parts,
        reference,
        &out_dir,
        (options.format, options.gzip),
    )?;
    write_folded(&inputs, &parts, &out_dir)?;
    let stragglers = match wanted {
        true => stragglers(timelines, &parts, &options.steps),
        false => Vec::new(),
    };
    let depths = options.format == TraceFormat::Perfetto;
    write_summary(&inputs, (parts.clone(), stragglers, depths), reference, &out_dir)?;
    Ok(parts)
}

/// How far a capture's times may be off the reference capture's, given its drift (see
/// [`Part::uncertainty_ns`]); and whether both wall clocks' errors are known.
fn uncertainty((input, drift_ns): (&Input, u64), reference: &Input) -> (u64, bool) {
    let read = |i: &Input| i.start.read_ns.max(i.end.read_ns);
    let error = |i: &Input| i.start.error_ns.zip(i.end.error_ns).map(|(a, b)| a.max(b));
    let (mine, theirs) = (error(input), error(reference));
    let errors = mine.unwrap_or(0) + theirs.unwrap_or(0);
    let reads = (read(input) + read(reference)).div_ceil(2);
    (drift_ns + reads + errors, mine.is_some() && theirs.is_some())
}

/// A capture's clock pair `at`, placed on the merged clock with `part`'s shift.
fn placed(at: Snapshot, part: &Part) -> Snapshot {
    Snapshot {
        monotonic_ns: at.monotonic_ns + part.shift_ns,
        ..at
    }
}

/// The merged trace, on the clock of `reference` (whose clock pairs begin and end it).
fn write_trace(
    inputs: &[Input],
    parts: &[Part],
    reference: Option<(&Input, &Part)>,
    out: &output::Dir,
    (format, gzip): (TraceFormat, bool),
) -> Result<()> {
    let name = format.file_name(gzip);
    let written = |source| {
        Error::Xtrace(crate::error::Error::Output {
            path: out.join(&output::partial(name)),
            source,
        })
    };
    let (sink, _) = Sink::new(output::create(out, name)?, gzip);
    let start = reference.map(|(i, p)| placed(i.start, p)).unwrap_or_default();
    let mut writer = EventWriter::starting(sink, &[], format, start).map_err(written)?;
    for (input, part) in inputs.iter().zip(parts) {
        let (path, reader, from) = trace_file::open(&input.capture.dir)?;
        let mut replay = Replay {
            writer: &mut writer,
            placement: Placement {
                shift_ns: part.shift_ns,
                id_offset: part.id_offset,
                // Its processes' names hold their rank already.
                process_prefix: Some(part.host.clone()),
            },
            progress: Progress::default(),
            held: None,
        };
        match from {
            TraceFormat::Json => replay_events(&path, reader, &mut replay)?,
            TraceFormat::Perfetto => {
                drop(reader);
                let depths = input.capture.summary["slice_depths"] == true;
                super::replay_perfetto::replay(&input.capture.dir, &path, &mut replay, depths)?;
            }
        }
    }
    if let Some((input, part)) = reference {
        writer.ending(placed(input.end, part)).map_err(written)?;
    }
    writer.finish().and_then(Sink::close).map_err(written)?;
    output::complete(out, name)?;
    Ok(())
}

/// stacks.folded of every capture that has one, each stack under its part's root frame
/// (`[node7 rank 3]`).
fn write_folded(inputs: &[Input], parts: &[Part], out: &output::Dir) -> Result<()> {
    let mut text = String::new();
    for (input, part) in inputs.iter().zip(parts) {
        let root = prefix(&part.host, &part.ranks);
        for (stack, count) in &input.capture.folded {
            text += &format!("[{root}];{stack} {count}\n");
        }
    }
    if text.is_empty() {
        return Ok(());
    }
    output::write(out, output::STACKS_FOLDED, text.as_bytes()).map_err(Error::Xtrace)
}

/// A capture's timeline, read again, on its own clock: its spans (the GPU device's slices apart),
/// (name, start, end) by start; its GPU slices alike where it has the device timeline; its CPU
/// samples, (time, folded stack) by time, where it sampled.
struct Timeline {
    spans: merge_align::Spans,
    gpu: Option<merge_align::Spans>,
    samples: Option<Vec<(u64, String)>>,
}

fn timeline_of(input: &Input) -> Result<Timeline> {
    let summary = &input.capture.summary;
    let sampled = summary
        .get("sample_frequency_hz")
        .is_some_and(|hz| hz.as_u64() > Some(0));
    let load = Load {
        samples: sampled,
        ..Load::default()
    };
    let capture = capture::load(&input.capture.dir, load)?;
    let (mut spans, mut gpu) = (Vec::new(), Vec::new());
    for s in &capture.spans {
        let name = &capture.names[s.name as usize];
        // A span named as an NCCL collective but not NCCL's range (another domain, a function
        // traced with -u) is named apart, so that only NCCL's ranges count as its collectives.
        let nccl = nccl_api::COLLECTIVES.contains(&name.name.as_str());
        let span = match nccl && !nccl_api::is_collective(&name.cat, &name.name) {
            true => (format!("{} [{}]", name.name, name.cat), s.start_ns, s.end_ns()),
            false => (name.name.clone(), s.start_ns, s.end_ns()),
        };
        // The device tracks' slices (`pipeline::gpu`).
        match name.cat == "gpu" {
            true => gpu.push(span),
            false => spans.push(span),
        }
    }
    spans.sort_by_key(|s| s.1);
    gpu.sort_by_key(|s| s.1);
    let mut samples: Vec<(u64, String)> = capture
        .timed_samples
        .into_iter()
        .map(|s| (s.ts_ns, s.stack))
        .collect();
    samples.sort_by_key(|s| s.0);
    Ok(Timeline {
        spans,
        gpu: summary.get("gpu_device").is_some().then_some(gpu),
        samples: sampled.then_some(samples),
    })
}

/// The stragglers among the parts, their timelines placed on the merged clock.
fn stragglers(timelines: Vec<Timeline>, parts: &[Part], steps: &[String]) -> Vec<Stragglers> {
    let ranks: Vec<RankSpans> = timelines
        .into_iter()
        .zip(parts)
        .map(|(timeline, part)| {
            let shift = part.shift_ns;
            let moved = |spans: merge_align::Spans| -> merge_align::Spans {
                spans
                    .into_iter()
                    .map(|(n, s, e)| (n, s + shift, e + shift))
                    .collect()
            };
            RankSpans {
                rank: prefix(&part.host, &part.ranks),
                spans: moved(timeline.spans),
                gpu: timeline.gpu.map(moved),
                samples: timeline
                    .samples
                    .map(|samples| samples.into_iter().map(|(t, s)| (t + shift, s)).collect()),
            }
        })
        .collect();
    crate::analysis::stragglers::find(&ranks, steps)
}

fn write_summary(
    inputs: &[Input],
    (parts, stragglers, slice_depths): (Vec<Part>, Vec<Stragglers>, bool),
    reference: Option<(&Input, &Part)>,
    out: &output::Dir,
) -> Result<()> {
    // The merged window, on the merged clock: from the earliest start to the latest end.
    let begin = inputs
        .iter()
        .zip(&parts)
        .map(|(i, p)| placed(i.start, p).monotonic_ns)
        .min()
        .unwrap_or(0);
    let end = inputs
        .iter()
        .zip(&parts)
        .map(|(i, p)| placed(i.end, p).monotonic_ns)
        .max()
        .unwrap_or(0);
    let targets = inputs
        .iter()
        .zip(&parts)
        .flat_map(|(input, part)| {
            let targets = input.capture.summary["targets"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            targets.into_iter().map(move |mut t| {
                let pid = t["pid"].as_u64().unwrap_or(0);
                t["pid"] = (pid + u64::from(part.id_offset)).into();
                t["host"] = part.host.clone().into();
                t
            })
        })
        .collect();
    // The reference capture's clock pairs, moved with it when aligning moved it.
    let clock = reference.map_or(Value::Null, |(input, part)| {
        let mut clock = input.capture.summary["clock"].clone();
        for at in ["start", "end"] {
            if let Some(ns) = clock[at]["monotonic_ns"].as_u64() {
                clock[at]["monotonic_ns"] = (ns + part.shift_ns).into();
            }
        }
        clock
    });
    let summary = MergedSummary {
        format_version: FORMAT_VERSION,
        slice_depths,
        host: "merged",
        duration_ns: end.saturating_sub(begin),
        targets,
        clock,
        merged: parts,
        stragglers,
    };
    let json = serde_json::to_string_pretty(&summary).unwrap_or_default() + "\n";
    output::write(out, output::SUMMARY_JSON, json.as_bytes()).map_err(Error::Xtrace)?;
    output::write(out, output::SUMMARY_TXT, text(&summary).as_bytes()).map_err(Error::Xtrace)
}

/// summary.txt of a merged capture: a line per part.
fn text(summary: &MergedSummary) -> String {
    let human = crate::model::duration::human;
    let mut out = format!(
        "{} captures merged, {} in all\n",
        summary.merged.len(),
        human(summary.duration_ns)
    );
    for part in &summary.merged {
        let ranks: Vec<String> = part.ranks.iter().map(u64::to_string).collect();
        let ranks = match ranks.is_empty() {
            true => String::new(),
            false => format!(" rank {}", ranks.join(",")),
        };
        let within = match (part.reference, part.wall_clock_error_known) {
            (true, _) => "the reference".to_string(),
            (false, true) => format!("within ±{}", human(part.uncertainty_ns)),
            (false, false) => format!(
                "within ±{} and the wall clocks' own error (not synchronized)",
                human(part.uncertainty_ns)
            ),
        };
        out += &format!(
            "{}: {}{ranks}, shifted {}, clocks drifted {} apart, {within}, pids + {}\n",
            part.dir,
            part.host,
            human(part.shift_ns),
            human(part.clock_drift_ns),
            part.id_offset
        );
        if let Some(a) = part.aligned {
            let by = human(a.correction_ns.unsigned_abs());
            let way = if a.correction_ns < 0 { "earlier" } else { "later" };
            out += &format!(
                "  aligned by {} collectives: moved {by} {way}, their ends {} apart (median)\n",
                a.pairs,
                human(a.residual_ns)
            );
        }
    }
    // Lateness within the clocks' alignment bound, or under a microsecond, is not shown.
    let floor = summary
        .merged
        .iter()
        .map(|p| p.clock_drift_ns)
        .max()
        .unwrap_or(0)
        .max(1_000);
    out + &crate::analysis::stragglers::text(&summary.stragglers, floor)
}
