//! A capture's trace.perfetto-trace written again through the writer a recording uses, as
//! [`super::replay`] does with trace.json: `xtrace convert` to trace.json, `xtrace merge` of
//! Perfetto captures. Every event the reader decodes ([`Decoded`]) becomes the writer call that
//! wrote it: slices on a thread's tracks are spans, slices under a process async ranges (begin
//! and end; the range's track uuid is its id, and its thread, which Perfetto does not keep, its
//! process), instants (flow arrows kept), counters, CPU samples (their frames; trace.json's folded
//! stack is their 32 innermost names, kernel frames suffixed `_[k]`), process and thread names.
//!
//! A span's `depth` is the one its slice's `depth` annotation gives, in the traces that give
//! nested slices theirs (summary.json's `slice_depths`): the trace is read once, and memory does
//! not grow with it. An older trace holds no depths; there a span's depth is its nesting on its
//! track, the slices enclosing it there. Spans arrive in the order they ended (inner before
//! outer), so such a trace is read twice: first for each span's enclosing span (4 bytes a span,
//! and a stack per track of the spans not yet enclosed, which on a flat track holds them all),
//! then to write it.
use std::{collections::HashMap, path::Path};

use super::replay::Replay;
use crate::{
    analysis::{
        perfetto_file::{self, Counted, Decode, Decoded, Slice},
        trace_file, Result,
    },
    pipeline::{
        perfetto::KERNEL_MAPPING,
        writer::{AsyncEdge, EventKind, SpanOut, TimelineSample},
    },
};

/// Frames of a sample's folded stack in trace.json, innermost kept (as a recording writes it).
const TIMELINE_FRAMES: usize = 32;

/// Replays the Perfetto trace of capture `dir` (at `path`) into `replay`; `slice_depths`: the
/// trace gives its nested slices' depths (summary.json says so).
pub(crate) fn replay(dir: &Path, path: &Path, replay: &mut Replay, slice_depths: bool) -> Result<()> {
    let depths = match slice_depths {
        true => None,
        false => {
            let mut nesting = Nesting::default();
            let (_, reader, _) = trace_file::open(dir)?;
            perfetto_file::read(path, reader, &mut nesting)?;
            Some(nesting.depths())
        }
    };
    let (_, reader, _) = trace_file::open(dir)?;
    let mut writing = Writing {
        replay,
        depths,
        next: 0,
    };
    perfetto_file::read(path, reader, &mut writing)
}

/// The first pass: each thread slice's enclosing slice on its track, by the slices' order.
#[derive(Default)]
struct Nesting {
    /// Per slice: the index of the slice enclosing it most closely; `u32::MAX` for none.
    parents: Vec<u32>,
    /// Per track: the slices no slice read yet encloses (start, end, index), latest last.
    roots: HashMap<u64, Vec<(u64, u64, u32)>>,
}

impl Nesting {
    /// Each slice's depth: how many slices enclose it. A slice's parent is read after it, so
    /// parents' depths are known when walking back.
    fn depths(mut self) -> Vec<u32> {
        for i in (0..self.parents.len()).rev() {
            self.parents[i] = match self.parents[i] {
                u32::MAX => 0,
                parent => self.parents[parent as usize] + 1,
            };
        }
        self.parents
    }
}

impl Decode for Nesting {
    fn decoded(&mut self, event: Decoded<'_>) -> Result<(), String> {
        let Decoded::Slice(s @ Slice { tid: Some(_), .. }) = event else {
            return Ok(());
        };
        let index = u32::try_from(self.parents.len()).map_err(|_| "more than 2^32 slices")?;
        let end = s.start_ns.saturating_add(s.dur_ns);
        let roots = self.roots.entry(s.track).or_default();
        while let Some(&(start, inner_end, inner)) = roots.last() {
            if start < s.start_ns || inner_end > end {
                break;
            }
            self.parents[inner as usize] = index;
            roots.pop();
        }
        roots.push((s.start_ns, end, index));
        self.parents.push(u32::MAX);
        Ok(())
    }
}

/// The second pass: the events written.
struct Writing<'r, 'w> {
    replay: &'r mut Replay<'w>,
    /// Each thread slice's depth worked out by [`Nesting`], in order; None where the trace gives
    /// them.
    depths: Option<Vec<u32>>,
    /// The index of the next thread slice.
    next: usize,
}

/// A JSON object's members as the writer takes them: `,"k":v,...`; None for none.
fn members(object: Option<&str>) -> Option<Box<str>> {
    let inner = object?.strip_prefix('{')?.strip_suffix('}')?;
    (!inner.is_empty()).then(|| format!(",{inner}").into())
}

fn io(r: std::io::Result<()>) -> Result<(), String> {
    r.map_err(|e| format!("writing the trace: {e}"))
}

impl Writing<'_, '_> {
    fn id(&self, id: u32) -> Result<u32, String> {
        id.checked_add(self.replay.placement.id_offset)
            .ok_or_else(|| "a pid or tid placed past 32 bits".to_string())
    }

    fn time(&self, ns: u64) -> Result<u64, String> {
        ns.checked_add(self.replay.placement.shift_ns)
            .ok_or_else(|| "a time placed past 2^64 ns".to_string())
    }

    fn slice(&mut self, s: &Slice) -> Result<(), String> {
        let pid = self.id(s.pid)?;
        let named = SpanOut {
            probe: usize::MAX,
            pid,
            name: Some(s.name.name.as_str().into()),
            cat: Some(s.name.cat.as_str().into()),
            ..Default::default()
        };
        let Some(tid) = s.tid else {
            // An async range: its begin and its end.
            let end_ns = s.start_ns.saturating_add(s.dur_ns);
            for (begin, ts, args) in [(true, s.start_ns, s.args), (false, end_ns, s.end_args)] {
                io(self.replay.writer.span(&SpanOut {
                    tid: pid,
                    start_ns: self.time(ts)?,
                    kind: EventKind::Async(AsyncEdge { begin, id: s.track }),
                    values: members(args),
                    ..named.clone()
                }))?;
            }
            return Ok(());
        };
        let depth = match &self.depths {
            Some(depths) => depths.get(self.next).copied().unwrap_or(0),
            None => s.depth.unwrap_or(0),
        };
        self.next += 1;
        io(self.replay.writer.span(&SpanOut {
            tid: self.id(tid)?,
            start_ns: self.time(s.start_ns)?,
            kind: EventKind::Span {
                dur_ns: s.dur_ns,
                depth,
                flow: s.flow,
            },
            values: members(s.args),
            ..named
        }))
    }
}

/// A sample as trace.json shows it: named by its innermost frame, its 32 innermost folded.
fn timeline_sample(frames: Vec<crate::pipeline::perfetto::SampleFrame>) -> TimelineSample {
    let names: Vec<String> = frames
        .iter()
        .map(|f| match f.module == KERNEL_MAPPING {
            true => format!("{}_[k]", f.name),
            false => f.name.clone(),
        })
        .collect();
    let start = names.len().saturating_sub(TIMELINE_FRAMES);
    TimelineSample {
        leaf: names.last().map_or("?", String::as_str).to_string(),
        folded: names[start..].join(";"),
        frames,
    }
}

impl Decode for Writing<'_, '_> {
    fn samples(&self) -> bool {
        true
    }

    fn decoded(&mut self, event: Decoded<'_>) -> Result<(), String> {
        match event {
            Decoded::Process { pid, name } => {
                let name = match &self.replay.placement.process_prefix {
                    Some(prefix) => format!("{prefix}: {name}"),
                    None => name.to_string(),
                };
                io(self.replay.writer.process_name(self.id(pid)?, &name))
            }
            Decoded::Thread { pid, tid, name } => {
                io(self.replay.writer.thread_name(self.id(pid)?, self.id(tid)?, name))
            }
            Decoded::Slice(s) => self.slice(&s),
            Decoded::Instant {
                name,
                pid,
                tid,
                ts_ns,
                args,
                flow,
            } => {
                let pid = self.id(pid)?;
                io(self.replay.writer.span(&SpanOut {
                    probe: usize::MAX,
                    pid,
                    tid: tid.map_or(Ok(pid), |t| self.id(t))?,
                    start_ns: self.time(ts_ns)?,
                    name: Some(name.name.as_str().into()),
                    cat: Some(name.cat.as_str().into()),
                    values: members(args),
                    kind: EventKind::Instant { flow },
                }))
            }
            Decoded::Counter {
                pid,
                tid: Some(tid),
                track,
                ts_ns,
                value,
            } => io(self.replay.writer.span(&SpanOut {
                probe: usize::MAX,
                pid: self.id(pid)?,
                tid: self.id(tid)?,
                start_ns: self.time(ts_ns)?,
                name: Some(track.into()),
                cat: Some(crate::model::wait::TIMELINE_CATEGORY.into()),
                kind: EventKind::ThreadCounter(match value {
                    Counted::Int(v) => v as u64,
                    Counted::Double(v) => v as u64,
                }),
                ..Default::default()
            })),
            Decoded::Counter {
                pid,
                tid: None,
                track,
                ts_ns,
                value,
            } => self.counter(self.id(pid)?, track, self.time(ts_ns)?, value),
            Decoded::Sample {
                pid,
                tid,
                ts_ns,
                frames,
            } => {
                let sample = timeline_sample(frames);
                let (pid, tid, ts) = (self.id(pid)?, self.id(tid)?, self.time(ts_ns)?);
                io(self.replay.writer.sample(pid, tid, ts, &sample))
            }
        }
    }
}

impl Writing<'_, '_> {
    /// A counter's value: an integer one as the CUDA memory counters are written; a double one as
    /// one series of its track, named by the part of the track's name after its unit
    /// (`utilization (%) gpu`), or `value` when the name ends with the unit (Perfetto keeps no
    /// series name for a track of one series).
    fn counter(&mut self, pid: u32, track: &str, ts_ns: u64, value: Counted) -> Result<(), String> {
        match value {
            Counted::Int(v) => io(self.replay.writer.span(&SpanOut {
                probe: usize::MAX,
                pid,
                tid: pid,
                start_ns: ts_ns,
                name: Some(track.into()),
                kind: EventKind::Counter(v as u64),
                ..Default::default()
            })),
            Counted::Double(v) => {
                let (name, series) = match track.rsplit_once(") ") {
                    Some((name, series)) if !series.contains(')') => (format!("{name})"), series),
                    _ => (track.to_string(), "value"),
                };
                io(self
                    .replay
                    .writer
                    .counter(pid, &name, ts_ns, &[(series.into(), v)]))
            }
        }
    }
}

#[cfg(test)]
#[path = "replay_perfetto_tests.rs"]
mod tests;
