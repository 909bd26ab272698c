//! Reading trace.perfetto-trace (or its .gz) packet by packet (the file is never held whole),
//! each event decoded ([`Decoded`]) for a [`Decode`]r: names resolved per packet sequence,
//! timestamps on CLOCK_MONOTONIC (or a sequence's incremental clock defined from it), slices
//! paired begin with end, tracks traced to their thread or process, samples' call stacks
//! resolved. A capture's [`Sink`] keeps what trace.json's reader keeps: slices on the tracks under
//! a thread become spans, instants there are counted, descriptors name processes and threads;
//! async slices, counters and samples are skipped. `export::replay_perfetto` writes all of it
//! again (`xtrace convert`, `xtrace merge`). A damaged or cut trace is refused with the byte
//! offset of the packet that could not be read.
use std::{
    io::{BufRead, BufReader, Read},
    path::Path,
    rc::Rc,
};

use prost::Message;

use super::{
    capture::{malformed, Name},
    perfetto_args::{args_and_depth, args_of, interned},
    perfetto_packets::{buffered_packet, next_packet},
    trace_file::Sink,
    Result,
};
use crate::pipeline::{
    perfetto::{fast_hash::FastMap, proto::*, SampleFrame},
    writer::{Flow, FlowKind},
};

/// Reads the trace at `path` from `reader` into `sink`.
pub(crate) fn read(path: &Path, reader: impl Read, sink: &mut impl Decode) -> Result<()> {
    let gz = path.extension().is_some_and(|e| e == "gz");
    let mut reader = BufReader::with_capacity(1 << 20, reader);
    let mut state = State::default();
    let mut buf = Vec::new();
    let mut offset = 0u64;
    loop {
        let at = offset;
        let place = || match gz {
            true => format!("at byte {at} of the decompressed trace"),
            false => format!("at byte {at}"),
        };
        let undecodable = |e| malformed(path, format!("the packet {} does not decode ({e})", place()));
        // A packet whole in the reader's buffer is decoded there; any other is copied out first.
        let buffered = reader.fill_buf().ok().and_then(buffered_packet);
        let mut packet = if let Some((head, len)) = buffered {
            let packet = TracePacket::decode(&reader.buffer()[head..head + len]).map_err(undecodable)?;
            reader.consume(head + len);
            offset += (head + len) as u64;
            packet
        } else {
            match next_packet(&mut reader, &mut buf, &mut offset) {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => return Err(malformed(path, format!("the packet {} {e}", place()))),
            }
            TracePacket::decode(buf.as_slice()).map_err(undecodable)?
        };
        state
            .packet(&mut packet, sink)
            .map_err(|e| malformed(path, format!("the packet {}: {e}", place())))?;
    }
    Ok(())
}

/// What a track stands for.
#[derive(Clone)]
enum Track {
    Process {
        pid: u32,
    },
    Thread {
        pid: u32,
        tid: u32,
    },
    /// A track under another one (a source's track, an async range's, a counter), and its name.
    Child {
        parent: u64,
        name: String,
    },
}

/// A slice begun on a track and not yet ended.
struct Open {
    name: Rc<Name>,
    start_ns: u64,
    args: Option<String>,
    depth: Option<u32>,
    flow: Option<Flow>,
}

/// The incremental state of one packet sequence.
#[derive(Default)]
struct Sequence {
    names: FastMap<u64, String>,
    categories: FastMap<u64, String>,
    arg_names: FastMap<u64, String>,
    /// Events' names and categories resolved, by name iid and first category iid, so
    /// that a slice's name is shared, not copied; forgotten when names are interned.
    resolved: FastMap<(u64, Option<u64>), Rc<Name>>,
    /// Samples' call stacks: frame iids by call stack iid, frames, mappings' path iids, strings.
    callstacks: FastMap<u64, Vec<u64>>,
    frames: FastMap<u64, Frame>,
    mappings: FastMap<u64, u64>,
    function_names: FastMap<u64, String>,
    mapping_paths: FastMap<u64, String>,
    /// The clock of timestamps without their own.
    default_clock: Option<u32>,
    /// The track of events without their own.
    default_track: Option<u64>,
    /// Incremental clocks: their last value on CLOCK_MONOTONIC.
    incremental: FastMap<u32, u64>,
}

#[derive(Default)]
struct State {
    sequences: FastMap<u32, Sequence>,
    tracks: FastMap<u64, Track>,
    /// [`State::owner`] of the tracks events were on, forgotten when a descriptor comes.
    owners: FastMap<u64, Option<(u32, Option<u32>)>>,
    open: FastMap<u64, Vec<Open>>,
}

/// The first clock id Perfetto leaves to a sequence's own clocks.
const FIRST_SEQUENCE_CLOCK: u32 = 64;

/// A slice read whole (its end read): on a thread's track, or on a process's (an async range).
pub(crate) struct Slice<'a> {
    pub name: &'a Name,
    pub pid: u32,
    /// The thread whose track (or a track under it) the slice is on; None under a process.
    pub tid: Option<u32>,
    /// Its track's uuid (an async range's own track).
    pub track: u64,
    pub start_ns: u64,
    pub dur_ns: u64,
    /// The annotations of its begin and of its end, as JSON objects; None when there are none.
    pub args: Option<&'a str>,
    pub end_args: Option<&'a str>,
    /// Its `depth` annotation (a nested slice of a trace that gives depths: see
    /// [`crate::pipeline::perfetto::writer::DEPTH`]), left out of `args`.
    pub depth: Option<u32>,
    /// A flow arrow its begin starts or ends.
    pub flow: Option<Flow>,
}

/// A counter's value: an integer (a CUDA memory counter) or a double (a GPU reading).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Counted {
    Int(i64),
    Double(f64),
}

/// One thing a Perfetto trace says, decoded: names resolved, times on CLOCK_MONOTONIC.
pub(crate) enum Decoded<'a> {
    Process {
        pid: u32,
        name: &'a str,
    },
    Thread {
        pid: u32,
        tid: u32,
        name: &'a str,
    },
    Slice(Slice<'a>),
    Instant {
        name: &'a Name,
        pid: u32,
        tid: Option<u32>,
        ts_ns: u64,
        args: Option<&'a str>,
        flow: Option<Flow>,
    },
    /// A counter's value; `tid` for a thread's counter track (off-CPU short waits).
    Counter {
        pid: u32,
        tid: Option<u32>,
        track: &'a str,
        ts_ns: u64,
        value: Counted,
    },
    /// A CPU sample and its call stack, outermost frame first.
    Sample {
        pid: u32,
        tid: u32,
        ts_ns: u64,
        frames: Vec<SampleFrame>,
    },
}

/// What takes a Perfetto trace's events: a capture's [`Sink`], or the replay of `xtrace convert`
/// and `xtrace merge`.
pub(crate) trait Decode {
    /// One event; an error refuses the trace.
    fn decoded(&mut self, event: Decoded<'_>) -> Result<(), String>;
    /// Whether samples are wanted (their call stacks are resolved only then).
    fn samples(&self) -> bool {
        false
    }
}

impl Decode for Sink<'_> {
    fn samples(&self) -> bool {
        self.keep_samples
    }

    fn decoded(&mut self, event: Decoded<'_>) -> Result<(), String> {
        match event {
            Decoded::Process { pid, name } => self.process(pid, name.into()),
            Decoded::Thread { pid, tid, name } => self.thread(pid, tid, name.into()),
            Decoded::Slice(s) => {
                if let Some(tid) = s.tid {
                    self.span(s.name, (s.pid, tid), s.start_ns, s.dur_ns, s.args)?;
                }
            }
            // An instant that starts a flow is in trace.json as the flow's start alone.
            Decoded::Instant {
                name,
                tid: Some(_),
                flow: None,
                ..
            } => self.instant(&name.name, &name.cat),
            Decoded::Counter {
                pid,
                tid: None,
                track,
                ts_ns,
                value,
            } if self.keep_counters => {
                let value = match value {
                    Counted::Int(v) => v as f64,
                    Counted::Double(v) => v,
                };
                // One Perfetto track per series: its name says both (see `live::view`).
                self.capture.counters.push(super::capture::Counter {
                    pid,
                    track: track.into(),
                    series: None,
                    ts_ns,
                    value,
                });
            }
            // Kept with their times when asked; their counts are read from stacks.folded, as
            // with trace.json.
            Decoded::Sample { ts_ns, frames, .. } => {
                let names: Vec<&str> = frames.iter().map(|f| f.name.as_str()).collect();
                let stack = names[names.len().saturating_sub(32)..].join(";");
                self.capture
                    .timed_samples
                    .push(super::capture::TimedSample { ts_ns, stack });
            }
            _ => {}
        }
        Ok(())
    }
}

impl State {
    /// One packet; what its interned data holds is taken from it.
    fn packet(&mut self, p: &mut TracePacket, sink: &mut impl Decode) -> Result<(), String> {
        let seq_id = p.trusted_packet_sequence_id.unwrap_or(0);
        let flags = p.sequence_flags.unwrap_or(0);
        let seq = self.sequences.entry(seq_id).or_default();
        if flags & SEQ_INCREMENTAL_STATE_CLEARED != 0 {
            *seq = Sequence::default();
        }
        if let Some(defaults) = &p.trace_packet_defaults {
            seq.default_clock = defaults.timestamp_clock_id;
            seq.default_track = defaults.track_event_defaults.as_ref().and_then(|d| d.track_uuid);
        }
        if let Some(d) = p.interned_data.take() {
            intern(seq, d);
        }
        let clock = p
            .timestamp_clock_id
            .or(seq.default_clock)
            .unwrap_or(CLOCK_MONOTONIC);
        let timestamp = match p.timestamp {
            Some(ts) => Some(time(seq, clock, ts)?),
            None => None,
        };
        match &p.data {
            Some(Data::ClockSnapshot(s)) => clock_snapshot(seq, s),
            Some(Data::TrackDescriptor(d)) => self.descriptor(d, sink),
            Some(Data::PerfSample(s)) if sink.samples() => {
                let ts_ns = timestamp.ok_or("a sample without a timestamp")?;
                let frames = call_stack(seq, s.callstack_iid.unwrap_or(0))?;
                let (pid, tid) = (s.pid.unwrap_or(0), s.tid.unwrap_or(0));
                sink.decoded(Decoded::Sample {
                    pid,
                    tid,
                    ts_ns,
                    frames,
                })
            }
            Some(Data::PerfSample(_)) | None => Ok(()),
            Some(Data::TrackEvent(e)) => {
                let ts = timestamp.ok_or("a track event without a timestamp")?;
                self.event(seq_id, ts, e, sink)
            }
        }
    }

    fn descriptor(&mut self, d: &TrackDescriptor, sink: &mut impl Decode) -> Result<(), String> {
        let uuid = d.uuid.ok_or("a track descriptor without a uuid")?;
        let id = |n: Option<i32>| n.unwrap_or(0) as u32;
        let track = if let Some(p) = &d.process {
            let pid = id(p.pid);
            if let Some(name) = &p.process_name {
                sink.decoded(Decoded::Process { pid, name })?;
            }
            Track::Process { pid }
        } else if let Some(t) = &d.thread {
            let (pid, tid) = (id(t.pid), id(t.tid));
            if let Some(name) = &t.thread_name {
                sink.decoded(Decoded::Thread { pid, tid, name })?;
            }
            Track::Thread { pid, tid }
        } else {
            Track::Child {
                parent: d.parent_uuid.unwrap_or(0),
                name: d.name.clone().unwrap_or_default(),
            }
        };
        self.tracks.insert(uuid, track);
        self.owners.clear();
        Ok(())
    }

    /// The process and thread a track belongs to: its own, or those of the track it is under;
    /// no thread for a process's tracks (async ranges, counters); None for a track under none.
    fn owner(&self, mut uuid: u64) -> Option<(u32, Option<u32>)> {
        // A chain of parents no longer than the tracks there are (a loop ends it).
        for _ in 0..=self.tracks.len() {
            match self.tracks.get(&uuid)? {
                Track::Thread { pid, tid } => return Some((*pid, Some(*tid))),
                Track::Process { pid } => return Some((*pid, None)),
                Track::Child { parent, .. } => uuid = *parent,
            }
        }
        None
    }

    fn event(&mut self, seq_id: u32, ts: u64, e: &TrackEvent, sink: &mut impl Decode) -> Result<(), String> {
        let default_track = self.sequences.get(&seq_id).and_then(|seq| seq.default_track);
        let uuid = e
            .track_uuid
            .or(default_track)
            .ok_or("a track event without a track")?;
        if !self.tracks.contains_key(&uuid) {
            return Err(format!(
                "an event on track {uuid}, which no descriptor before it describes"
            ));
        }
        let owner = match self.owners.get(&uuid) {
            Some(&owner) => owner,
            None => {
                let owner = self.owner(uuid);
                self.owners.insert(uuid, owner);
                owner
            }
        };
        let flow = flow_of(e);
        let seq = self.sequences.entry(seq_id).or_default();
        match e.r#type.unwrap_or(0) {
            TYPE_SLICE_BEGIN => {
                let (args, depth) = args_and_depth(&seq.arg_names, e)?;
                let open = Open {
                    name: shared_name_of(seq, e)?,
                    start_ns: ts,
                    args,
                    depth,
                    flow,
                };
                self.open.entry(uuid).or_default().push(open);
            }
            TYPE_SLICE_END => {
                let open = self
                    .open
                    .get_mut(&uuid)
                    .and_then(Vec::pop)
                    .ok_or_else(|| format!("a slice end on track {uuid}, where no slice is open"))?;
                let dur_ns = ts
                    .checked_sub(open.start_ns)
                    .ok_or_else(|| format!("a slice on track {uuid} ends before it begins"))?;
                if let Some((pid, tid)) = owner {
                    let end_args = args_of(&seq.arg_names, e)?;
                    sink.decoded(Decoded::Slice(Slice {
                        name: &open.name,
                        pid,
                        tid,
                        track: uuid,
                        start_ns: open.start_ns,
                        dur_ns,
                        args: open.args.as_deref(),
                        end_args: end_args.as_deref(),
                        depth: open.depth,
                        // A flow ends where its slice begins (one on the end, from an older
                        // trace, is read too).
                        flow: open.flow.or(flow),
                    }))?;
                }
            }
            TYPE_INSTANT => {
                if let Some((pid, tid)) = owner {
                    let name = name_of(seq, e)?;
                    let args = args_of(&seq.arg_names, e)?;
                    sink.decoded(Decoded::Instant {
                        name: &name,
                        pid,
                        tid,
                        ts_ns: ts,
                        args: args.as_deref(),
                        flow,
                    })?;
                }
            }
            TYPE_COUNTER => {
                let value = match (e.counter_value, e.double_counter_value) {
                    (Some(v), _) => Counted::Int(v),
                    (None, Some(v)) => Counted::Double(v),
                    (None, None) => return Err(format!("a counter event on track {uuid} without a value")),
                };
                if let (Some((pid, tid)), Some(Track::Child { name, .. })) = (owner, self.tracks.get(&uuid)) {
                    sink.decoded(Decoded::Counter {
                        pid,
                        tid,
                        track: name,
                        ts_ns: ts,
                        value,
                    })?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Adds a packet's interned data to its sequence's tables.
fn intern(seq: &mut Sequence, d: InternedData) {
    if !d.event_names.is_empty() || !d.event_categories.is_empty() {
        seq.resolved.clear();
    }
    for (table, entries) in [
        (&mut seq.names, d.event_names),
        (&mut seq.categories, d.event_categories),
        (&mut seq.arg_names, d.debug_annotation_names),
    ] {
        for e in entries {
            table.insert(e.iid.unwrap_or(0), e.name.unwrap_or_default());
        }
    }
    for (table, entries) in [
        (&mut seq.function_names, d.function_names),
        (&mut seq.mapping_paths, d.mapping_paths),
    ] {
        for e in entries {
            let text = String::from_utf8_lossy(e.str.as_deref().unwrap_or_default()).into_owned();
            table.insert(e.iid.unwrap_or(0), text);
        }
    }
    for m in d.mappings {
        let path = m.path_string_ids.first().copied().unwrap_or(0);
        seq.mappings.insert(m.iid.unwrap_or(0), path);
    }
    for f in d.frames {
        seq.frames.insert(f.iid.unwrap_or(0), f);
    }
    for c in d.callstacks {
        seq.callstacks.insert(c.iid.unwrap_or(0), c.frame_ids);
    }
}

/// The frames of call stack `iid` of `seq`, outermost first.
fn call_stack(seq: &Sequence, iid: u64) -> Result<Vec<SampleFrame>, String> {
    let ids = seq
        .callstacks
        .get(&iid)
        .ok_or_else(|| format!("call stack iid {iid} was never interned"))?;
    ids.iter()
        .map(|id| {
            let f = seq
                .frames
                .get(id)
                .ok_or_else(|| format!("frame iid {id} was never interned"))?;
            let name = interned(
                &seq.function_names,
                f.function_name_id.unwrap_or(0),
                "function name",
            )?;
            let mapping = f.mapping_id.unwrap_or(0);
            let path = seq
                .mappings
                .get(&mapping)
                .ok_or_else(|| format!("mapping iid {mapping} was never interned"))?;
            Ok(SampleFrame {
                name: name.to_owned(),
                module: interned(&seq.mapping_paths, *path, "mapping path")?.to_owned(),
                rel_pc: f.rel_pc.unwrap_or(0),
            })
        })
        .collect()
}

/// The flow arrow an event starts or ends (its first).
fn flow_of(e: &TrackEvent) -> Option<Flow> {
    match (e.flow_ids.first(), e.terminating_flow_ids.first()) {
        (Some(&id), _) => Some(Flow {
            id,
            end: false,
            kind: FlowKind::of_id(id),
        }),
        (None, Some(&id)) => Some(Flow {
            id,
            end: true,
            kind: FlowKind::of_id(id),
        }),
        (None, None) => None,
    }
}

/// A time on CLOCK_MONOTONIC from `ts` on `clock`: CLOCK_MONOTONIC itself, or an incremental
/// clock of the sequence (a delta from its last value).
fn time(seq: &mut Sequence, clock: u32, ts: u64) -> Result<u64, String> {
    if clock == CLOCK_MONOTONIC {
        return Ok(ts);
    }
    let last = seq
        .incremental
        .get_mut(&clock)
        .ok_or_else(|| format!("a timestamp on clock {clock}, which xtrace does not read"))?;
    *last = last.checked_add(ts).ok_or("a timestamp past 2^64 ns")?;
    Ok(*last)
}

/// A clock snapshot defines a sequence's incremental clocks: each starts at CLOCK_MONOTONIC's value.
fn clock_snapshot(seq: &mut Sequence, s: &ClockSnapshot) -> Result<(), String> {
    let Some(mono) = s
        .clocks
        .iter()
        .find(|c| c.clock_id == Some(CLOCK_MONOTONIC))
        .and_then(|c| c.timestamp)
    else {
        return Ok(());
    };
    for c in &s.clocks {
        let id = c.clock_id.unwrap_or(0);
        if id >= FIRST_SEQUENCE_CLOCK && c.is_incremental == Some(true) {
            if c.unit_multiplier_ns.is_some_and(|m| m != 1) {
                return Err(format!("clock {id} counts in units other than 1 ns"));
            }
            if c.timestamp != Some(mono) {
                return Err(format!("clock {id} does not start at CLOCK_MONOTONIC's value"));
            }
            seq.incremental.insert(id, mono);
        }
    }
    Ok(())
}

/// An event's name and category (its first), shared with the events of the same iids.
fn shared_name_of(seq: &mut Sequence, e: &TrackEvent) -> Result<Rc<Name>, String> {
    let Some(name_iid) = e.name_iid else {
        return name_of(seq, e).map(Rc::new);
    };
    let key = (name_iid, e.category_iids.first().copied());
    if let Some(name) = seq.resolved.get(&key) {
        return Ok(Rc::clone(name));
    }
    let name = Rc::new(name_of(seq, e)?);
    seq.resolved.insert(key, Rc::clone(&name));
    Ok(name)
}

/// An event's name and category (its first).
fn name_of(seq: &Sequence, e: &TrackEvent) -> Result<Name, String> {
    let name = match (e.name_iid, &e.name) {
        (Some(iid), _) => interned(&seq.names, iid, "event name")?.to_owned(),
        (None, Some(name)) => name.clone(),
        (None, None) => String::new(),
    };
    let cat = match e.category_iids.first() {
        Some(&iid) => interned(&seq.categories, iid, "category")?.to_owned(),
        None => String::new(),
    };
    Ok(Name { name, cat })
}

#[cfg(test)]
#[path = "perfetto_file_tests.rs"]
mod tests;
