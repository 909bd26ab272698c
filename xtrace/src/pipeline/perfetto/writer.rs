//! trace.perfetto-trace, streamed: every event is encoded as a `TracePacket` and appended as it
//! arrives (a Perfetto trace is a sequence of `Trace.packet` fields), so memory does not grow with
//! the trace. Packets are on sequences ([`super::sequence`], with delta-encoded timestamps): the
//! main one, whose first packet holds the start's clock snapshot, carries descriptors, counters,
//! async ranges and samples; each source track of a thread has its own, whose events name no
//! track (it is the sequence's default) and whose deltas are small. Names, categories and
//! annotation names are interned per sequence ([`super::intern`]).
//!
//! Tracks, each with a uuid from a counter (never derived from a pid or tid, which the kernel
//! reuses): a process track per process; a thread track per thread; under each thread, one
//! child track per source (the event's category: `uprobe`, `usdt`, `cuda`, a range's domain;
//! `off-CPU` for the off-CPU waits), so that slices of different sources that overlap without
//! nesting are all kept;
//! one track per async range (a start/end range, which may end on another thread) under its
//! process; counter tracks under their process, with the unit their name ends with. A span
//! arrives once it has ended: its begin and end are written together, and Perfetto orders
//! events by time. Names known only at the end are sent then: a later descriptor of the same
//! uuid renames its track. CPU samples are `PerfSample`s of their thread, their call stacks
//! interned ([`super::stacks`]).
use std::io::{self, Write};

use prost::Message;

use super::{
    fast_hash::FastMap,
    intern::{annotations, Interner},
    proto::*,
    sequence::{clock_snapshot, Sequence},
    stacks::{SampleFrame, Stacks},
};
use crate::{
    clock::Snapshot,
    model::wait::{TIMELINE_CATEGORY, TIMELINE_TRACK},
    pipeline::writer::{EventKind, SpanOut},
};

/// The main sequence: descriptors, counters, async ranges, samples. 1 is the tracing service's
/// own sequence in the traces Perfetto records, so a trace merged with one of those keeps the
/// two apart. Each thread's source track has a sequence of its own, numbered on from 3.
const SEQUENCE: u32 = 2;
/// The main sequence's index in `PerfettoWriter::seqs`.
const MAIN: usize = 0;

/// Buffered bytes handed to the output at once: as many as the output file's buffer holds.
const SPILL: usize = crate::output::FILE_BUFFER;

/// What picks a span's source track when it has no category of its own: pid, tid and probe id.
type SpanSource = (u32, u32, usize);
/// A source track's uuid and the index of its sequence in `PerfettoWriter::seqs`.
type SourceTrack = (u64, usize);

pub struct PerfettoWriter<W: Write> {
    out: W,
    /// Packets not yet handed to `out`.
    buf: Vec<u8>,
    /// Per probe id: its name and category.
    probes: Vec<(Box<str>, Box<str>)>,
    /// The sequences: the main one, then one per source track.
    seqs: Vec<Sequence>,
    /// Category names by an id of the writer's own (never sent), to key source tracks by.
    category_ids: Interner,
    /// The source track of the last span in its probe's own category: (pid, tid, probe) and its
    /// track and sequence. Spans come in runs of one thread and probe, so most skip the look-up.
    last_source: Option<(SpanSource, SourceTrack)>,
    /// Samples' call stacks, frames, mappings and function names (on the main sequence).
    stacks: Stacks,
    tracks: Tracks,
    /// Slices (spans) written.
    complete: u64,
}

/// Track uuids by what they stand for.
#[derive(Default)]
struct Tracks {
    last: u64,
    processes: FastMap<u32, u64>,
    threads: FastMap<(u32, u32), u64>,
    /// Track uuid and sequence, by pid, tid and category id.
    sources: FastMap<(u32, u32, u64), (u64, usize)>,
    /// By pid and name.
    counters: FastMap<(u32, Box<str>), u64>,
    /// A thread's, by pid, tid and name.
    thread_counters: FastMap<(u32, u32, Box<str>), u64>,
    /// Async ranges begun and not yet ended, by pid and id.
    open: FastMap<(u32, u64), u64>,
}

impl Tracks {
    fn next(&mut self) -> u64 {
        self.last += 1;
        self.last
    }
}

/// The counter unit a track's name ends with, `(bytes)` or `(W)`: bytes, nanoseconds (`ns`) and
/// counts (`count`) as Perfetto's own units, any other by its name.
fn counter_unit(track: &str) -> CounterDescriptor {
    let unit = track
        .strip_suffix(')')
        .and_then(|t| t.rsplit_once('('))
        .map(|(_, unit)| unit);
    let own = |unit| CounterDescriptor {
        unit: Some(unit),
        unit_name: None,
    };
    match unit {
        Some("bytes") => own(UNIT_SIZE_BYTES),
        Some("ns") => own(UNIT_TIME_NS),
        Some("count") => own(UNIT_COUNT),
        Some(unit) => CounterDescriptor {
            unit: None,
            unit_name: Some(unit.into()),
        },
        None => CounterDescriptor::default(),
    }
}

fn event(kind: i32, track: u64) -> TrackEvent {
    TrackEvent {
        r#type: Some(kind),
        track_uuid: Some(track),
        ..Default::default()
    }
}

fn pid_i32(id: u32) -> Option<i32> {
    Some(id as i32)
}

impl<W: Write> PerfettoWriter<W> {
    /// Starts the trace with its first packet: `probes` are (name, category) by probe id; `start`
    /// the clocks as recording starts.
    pub fn new(out: W, probes: &[(&str, &str)], start: &Snapshot) -> io::Result<Self> {
        let mut writer = PerfettoWriter {
            out,
            buf: Vec::with_capacity(SPILL + 4096),
            probes: probes.iter().map(|(n, c)| ((*n).into(), (*c).into())).collect(),
            seqs: vec![Sequence::new(SEQUENCE, probes.len(), None)],
            category_ids: Interner::default(),
            last_source: None,
            stacks: Stacks::default(),
            tracks: Tracks::default(),
            complete: 0,
        };
        let first = writer.seqs[MAIN].start(start.monotonic_ns, Some(start));
        writer.write(first);
        Ok(writer)
    }

    /// Appends one packet (the `Trace.packet` field: key, length, message), its size reckoned
    /// once.
    fn write(&mut self, packet: TracePacket) {
        use prost::encoding::{encode_key, WireType};
        encode_key(TRACE_PACKET_FIELD, WireType::LengthDelimited, &mut self.buf);
        // A Vec grows as needed: encoding into it cannot fail.
        let _ = packet.encode_length_delimited(&mut self.buf);
    }

    /// Appends a packet of sequence `seq` (started first, at this packet's time), with the names
    /// interned on it since its last one.
    fn packet(&mut self, seq: usize, timestamp: Option<u64>, data: Data) {
        if !self.seqs[seq].started() {
            let first = self.seqs[seq].start(timestamp.unwrap_or(0), None);
            self.write(first);
        }
        let packet = self.seqs[seq].packet(timestamp, data);
        self.write(packet);
    }

    fn descriptor(&mut self, track: TrackDescriptor) {
        self.packet(MAIN, None, Data::TrackDescriptor(track));
    }

    /// Hands the buffer to the output once it holds `SPILL` bytes.
    fn spill(&mut self) -> io::Result<()> {
        if self.buf.len() >= SPILL {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// The process's track, described (with its name, when given) the first time.
    fn process(&mut self, pid: u32, name: Option<&str>) -> u64 {
        if let (Some(&uuid), None) = (self.tracks.processes.get(&pid), name) {
            return uuid;
        }
        let uuid = match self.tracks.processes.get(&pid) {
            Some(&uuid) => uuid,
            None => self.tracks.next(),
        };
        self.tracks.processes.insert(pid, uuid);
        self.descriptor(TrackDescriptor {
            uuid: Some(uuid),
            process: Some(ProcessDescriptor {
                pid: pid_i32(pid),
                process_name: name.map(Into::into),
            }),
            ..Default::default()
        });
        uuid
    }

    /// The thread's track, described (with its name, when given) the first time.
    fn thread(&mut self, pid: u32, tid: u32, name: Option<&str>) -> u64 {
        if let (Some(&uuid), None) = (self.tracks.threads.get(&(pid, tid)), name) {
            return uuid;
        }
        let parent = self.process(pid, None);
        let uuid = match self.tracks.threads.get(&(pid, tid)) {
            Some(&uuid) => uuid,
            None => self.tracks.next(),
        };
        self.tracks.threads.insert((pid, tid), uuid);
        self.descriptor(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(parent),
            thread: Some(ThreadDescriptor {
                pid: pid_i32(pid),
                tid: pid_i32(tid),
                thread_name: name.map(Into::into),
            }),
            ..Default::default()
        });
        uuid
    }

    /// The track of one source (category `cat`) under a thread, and the index of its sequence,
    /// whose events are on that track unless they name another.
    /// The sequence of `span`'s source track: of its own category, else its probe's.
    fn source_of(&mut self, span: &SpanOut) -> usize {
        let key = (span.pid, span.tid, span.probe);
        match (&span.cat, self.last_source) {
            (None, Some((last, (_, seq)))) if last == key => seq,
            (Some(own), _) => self.source(span.pid, span.tid, own).1,
            (None, _) => {
                let category = self
                    .probes
                    .get(span.probe)
                    .map_or("?".into(), |(_, cat)| cat.clone());
                let found = self.source(span.pid, span.tid, &category);
                self.last_source = Some((key, found));
                found.1
            }
        }
    }

    fn source(&mut self, pid: u32, tid: u32, cat: &str) -> (u64, usize) {
        let id = self.category_ids.iid(cat, &mut Vec::new());
        if let Some(&found) = self.tracks.sources.get(&(pid, tid, id)) {
            return found;
        }
        let parent = self.thread(pid, tid, None);
        let name = match cat {
            TIMELINE_CATEGORY => TIMELINE_TRACK.to_string(),
            _ => cat.to_string(),
        };
        let uuid = self.child_track(parent, name);
        let seq_id = SEQUENCE + self.seqs.len() as u32;
        self.seqs
            .push(Sequence::new(seq_id, self.probes.len(), Some(uuid)));
        let found = (uuid, self.seqs.len() - 1);
        self.tracks.sources.insert((pid, tid, id), found);
        found
    }

    /// A new track `name` under track `parent`, described now.
    fn child_track(&mut self, parent: u64, name: String) -> u64 {
        let uuid = self.tracks.next();
        self.descriptor(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(parent),
            name: Some(name),
            ..Default::default()
        });
        uuid
    }

    /// The counter track `name` of a process.
    fn counter_track(&mut self, pid: u32, name: &str) -> u64 {
        if let Some(&uuid) = self.tracks.counters.get(&(pid, name.into())) {
            return uuid;
        }
        let parent = self.process(pid, None);
        let uuid = self.tracks.next();
        self.tracks.counters.insert((pid, name.into()), uuid);
        self.descriptor(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(parent),
            name: Some(name.into()),
            counter: Some(counter_unit(name)),
            ..Default::default()
        });
        uuid
    }

    /// The counter track `name` of a thread, under its thread's track.
    fn thread_counter_track(&mut self, pid: u32, tid: u32, name: &str) -> u64 {
        let key = (pid, tid, Box::from(name));
        if let Some(&uuid) = self.tracks.thread_counters.get(&key) {
            return uuid;
        }
        let parent = self.thread(pid, tid, None);
        let uuid = self.tracks.next();
        self.tracks.thread_counters.insert(key, uuid);
        self.descriptor(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(parent),
            name: Some(name.into()),
            counter: Some(counter_unit(name)),
            ..Default::default()
        });
        uuid
    }

    /// One event of the pipeline: a span (a slice), an instant, one end of an async range, or a
    /// counter's value (a process's CUDA memory, a thread's short waits).
    pub fn span(&mut self, span: &SpanOut) -> io::Result<()> {
        if let EventKind::ThreadCounter(value) = span.kind {
            let name = span.name.as_deref().unwrap_or("counter");
            let track = self.thread_counter_track(span.pid, span.tid, name);
            let event = TrackEvent {
                counter_value: Some(value as i64),
                ..event(TYPE_COUNTER, track)
            };
            self.packet(MAIN, Some(span.start_ns), Data::TrackEvent(event));
            return self.spill();
        }
        if let EventKind::Counter(value) = span.kind {
            let name = span.name.as_deref().unwrap_or("counter");
            let track = self.counter_track(span.pid, name);
            let event = TrackEvent {
                counter_value: Some(value as i64),
                ..event(TYPE_COUNTER, track)
            };
            self.packet(MAIN, Some(span.start_ns), Data::TrackEvent(event));
            return self.spill();
        }
        if let EventKind::Async(edge) = span.kind {
            let (name, cat) = name_and_category(&mut self.seqs[MAIN], &self.probes, span);
            let seq = &mut self.seqs[MAIN];
            let args = span_args(seq, span);
            let begin = TrackEvent {
                name_iid: Some(name),
                category_iids: vec![cat],
                ..event(TYPE_SLICE_BEGIN, 0)
            };
            self.async_edge(span, edge, begin, args);
            return self.spill();
        }
        let seq = self.source_of(span);
        let (name, cat) = name_and_category(&mut self.seqs[seq], &self.probes, span);
        let args = span_args(&mut self.seqs[seq], span);
        // On the sequence's own track: no track_uuid.
        let named = |kind| TrackEvent {
            r#type: Some(kind),
            name_iid: Some(name),
            category_iids: vec![cat],
            ..Default::default()
        };
        // Perfetto reads events in time order (those of one time in file order) and ends only a
        // flow it has seen begin, from the earlier-starting slice to the later (the first read
        // on a tie): a flow ends on its slice's begin, written after the event that starts it (a
        // wake-up's instant is at the time the woken thread's `runnable` slice begins).
        let (flow_ids, terminating_flow_ids) = match span.flow() {
            Some(flow) if flow.end => (Vec::new(), vec![flow.id]),
            Some(flow) => (vec![flow.id], Vec::new()),
            None => (Vec::new(), Vec::new()),
        };
        if let EventKind::Instant { .. } = span.kind {
            let event = TrackEvent {
                debug_annotations: args,
                flow_ids,
                ..named(TYPE_INSTANT)
            };
            self.packet(seq, Some(span.start_ns), Data::TrackEvent(event));
        } else {
            let category = span
                .cat
                .as_deref()
                .or_else(|| self.probes.get(span.probe).map(|(_, cat)| &**cat));
            if category != Some(TIMELINE_CATEGORY) {
                self.complete += 1;
            }
            let mut args = args;
            if let EventKind::Span {
                depth: depth @ 1.., ..
            } = span.kind
            {
                args.push(depth_annotation(&mut self.seqs[seq], depth));
            }
            let begin = TrackEvent {
                debug_annotations: args,
                terminating_flow_ids,
                ..named(TYPE_SLICE_BEGIN)
            };
            self.packet(seq, Some(span.start_ns), Data::TrackEvent(begin));
            let end_ns = span.start_ns.saturating_add(span.dur_ns());
            let end = TrackEvent {
                r#type: Some(TYPE_SLICE_END),
                ..Default::default()
            };
            self.packet(seq, Some(end_ns), Data::TrackEvent(end));
        }
        self.spill()
    }

    /// One end of an async range: its begin opens a track of its own under its process (ranges
    /// of a process may overlap in any way), its end closes the slice and forgets the track.
    fn async_edge(
        &mut self,
        span: &SpanOut,
        edge: crate::pipeline::writer::AsyncEdge,
        begin: TrackEvent,
        args: Vec<DebugAnnotation>,
    ) {
        let key = (span.pid, edge.id);
        let track = if edge.begin {
            let parent = self.process(span.pid, None);
            let name = self.seqs[MAIN]
                .names
                .name(begin.name_iid.unwrap_or(0))
                .to_string();
            let uuid = self.child_track(parent, name);
            self.tracks.open.insert(key, uuid);
            uuid
        } else {
            match self.tracks.open.remove(&key) {
                Some(uuid) => uuid,
                // An end without its begin: nothing to close.
                None => return,
            }
        };
        let event = if edge.begin {
            TrackEvent {
                track_uuid: Some(track),
                debug_annotations: args,
                ..begin
            }
        } else {
            TrackEvent {
                debug_annotations: args,
                ..event(TYPE_SLICE_END, track)
            }
        };
        self.packet(MAIN, Some(span.start_ns), Data::TrackEvent(event));
    }

    /// A reading of a counter: one counter track per process, name and series (`NAME SERIES`
    /// when it has several), with the unit the name ends with.
    pub fn counter(&mut self, pid: u32, name: &str, ts_ns: u64, values: &[(String, f64)]) -> io::Result<()> {
        for (series, value) in values {
            let track = match values.len() {
                1 => self.counter_track(pid, name),
                _ => self.counter_track(pid, &format!("{name} {series}")),
            };
            let event = TrackEvent {
                double_counter_value: Some(*value),
                ..event(TYPE_COUNTER, track)
            };
            self.packet(MAIN, Some(ts_ns), Data::TrackEvent(event));
        }
        self.spill()
    }

    /// One CPU sample: a `PerfSample` of its thread (described first, so that the UI shows the
    /// samples on its track) whose call stack, `frames` outermost first, is interned.
    pub fn sample(&mut self, pid: u32, tid: u32, ts_ns: u64, frames: &[SampleFrame]) -> io::Result<()> {
        self.thread(pid, tid, None);
        let callstack = self.stacks.callstack(frames, &mut self.seqs[MAIN].pending);
        let sample = PerfSample {
            pid: Some(pid),
            tid: Some(tid),
            callstack_iid: Some(callstack),
        };
        self.packet(MAIN, Some(ts_ns), Data::PerfSample(sample));
        self.spill()
    }

    pub fn process_name(&mut self, pid: u32, name: &str) -> io::Result<()> {
        self.process(pid, Some(name));
        self.spill()
    }

    pub fn thread_name(&mut self, pid: u32, tid: u32, name: &str) -> io::Result<()> {
        self.thread(pid, tid, Some(name));
        self.spill()
    }

    /// A clock snapshot (the end's: the start's is in the first packet).
    pub fn clock_snapshot(&mut self, clocks: &Snapshot) -> io::Result<()> {
        self.packet(MAIN, None, Data::ClockSnapshot(clock_snapshot(clocks)));
        self.spill()
    }

    /// The slices (spans) written so far.
    pub fn spans(&self) -> u64 {
        self.complete
    }

    /// Writes what is buffered and returns the writer, flushed.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&self.buf)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The iids on `seq` of a span's name and category: its probe's (of `probes`), unless it has its
/// own.
fn name_and_category(seq: &mut Sequence, probes: &[(Box<str>, Box<str>)], span: &SpanOut) -> (u64, u64) {
    let Some(probe) = probes.get(span.probe) else {
        let name = seq
            .names
            .iid(span.name.as_deref().unwrap_or("?"), &mut seq.pending.event_names);
        let cat = seq.categories.iid(
            span.cat.as_deref().unwrap_or("?"),
            &mut seq.pending.event_categories,
        );
        return (name, cat);
    };
    let (name, cat) = match seq.probe_iids[span.probe] {
        Some(iids) => iids,
        None => {
            let iids = (
                seq.names.iid(&probe.0, &mut seq.pending.event_names),
                seq.categories.iid(&probe.1, &mut seq.pending.event_categories),
            );
            seq.probe_iids[span.probe] = Some(iids);
            iids
        }
    };
    let name = match &span.name {
        Some(own) => seq.names.iid(own, &mut seq.pending.event_names),
        None => name,
    };
    let cat = match &span.cat {
        Some(own) => seq.categories.iid(own, &mut seq.pending.event_categories),
        None => cat,
    };
    (name, cat)
}

/// The name of the annotation that gives a nested slice its depth, as trace.json's `args.depth`
/// does: how many traced calls were open on its thread (absent for 0, as most slices are).
pub const DEPTH: &str = "depth";

/// A nested slice's depth as an annotation named on `seq`.
fn depth_annotation(seq: &mut Sequence, depth: u32) -> DebugAnnotation {
    DebugAnnotation {
        name_iid: Some(seq.arg_names.iid(DEPTH, &mut seq.pending.debug_annotation_names)),
        value: Some(Value::Uint(u64::from(depth))),
        ..Default::default()
    }
}

/// A span's captured values as annotations named on `seq`.
fn span_args(seq: &mut Sequence, span: &SpanOut) -> Vec<DebugAnnotation> {
    let values = span.values.as_deref().unwrap_or("");
    annotations(
        values,
        &mut seq.arg_names,
        &mut seq.pending.debug_annotation_names,
    )
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
