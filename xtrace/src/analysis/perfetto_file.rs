//! Reading trace.perfetto-trace (or its .gz) of a capture into a [`Capture`], packet by packet
//! (the file is never held whole): slices on the tracks under a thread become spans, as trace.json's
//! complete events do; instants there are counted; process and thread descriptors name processes
//! and threads. Async slices (tracks under a process), counters and CPU samples are skipped, as the
//! trace.json reader skips their events. Interned names are resolved per packet sequence, and
//! timestamps are read on CLOCK_MONOTONIC or on a sequence's incremental clock defined from it.
//! A damaged or cut trace is refused with the byte offset of the packet that could not be read.
use std::{
    collections::HashMap,
    io::{BufRead, BufReader, ErrorKind, Read},
    path::Path,
};

use prost::Message;

use super::{
    capture::{malformed, Name},
    trace_file::Sink,
    Result,
};
use crate::pipeline::perfetto::{intern::json_value, proto::*};

/// The largest packet read (xtrace's are a few hundred bytes; Perfetto's own stay under 1 MiB).
const MAX_PACKET: u64 = 64 << 20;

/// Reads the trace at `path` from `reader` into `sink`.
pub(super) fn read(path: &Path, reader: impl Read, sink: &mut Sink) -> Result<()> {
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
        match next_packet(&mut reader, &mut buf, &mut offset) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(malformed(path, format!("the packet {} {e}", place()))),
        }
        let packet = TracePacket::decode(buf.as_slice())
            .map_err(|e| malformed(path, format!("the packet {} does not decode ({e})", place())))?;
        state
            .packet(packet, sink)
            .map_err(|e| malformed(path, format!("the packet {}: {e}", place())))?;
    }
    Ok(())
}

/// Reads the next `Trace.packet` field into `buf`, advancing `offset` past it: false at the end
/// of the file, an error when the file ends inside a packet or holds something else.
fn next_packet(reader: &mut impl BufRead, buf: &mut Vec<u8>, offset: &mut u64) -> Result<bool, String> {
    let key = match varint(reader, offset)? {
        None => return Ok(false),
        Some(key) => key,
    };
    // Field 1, length-delimited.
    if key != u64::from(TRACE_PACKET_FIELD << 3 | 2) {
        return Err(format!(
            "is not a Perfetto trace packet (field key {key:#x}, where a packet's is 0xa)"
        ));
    }
    let len = varint(reader, offset)?.ok_or("is cut short: the file ends inside its length")?;
    if len > MAX_PACKET {
        return Err(format!("claims {len} bytes, more than a trace packet can hold"));
    }
    buf.clear();
    let got = reader
        .take(len)
        .read_to_end(buf)
        .map_err(|e| format!("cannot be read: {e}"))?;
    *offset += got as u64;
    if (got as u64) < len {
        return Err(format!("is cut short: the file ends {got} bytes into its {len}"));
    }
    Ok(true)
}

/// A base-128 varint; None at the end of the file before its first byte.
fn varint(reader: &mut impl BufRead, offset: &mut u64) -> Result<Option<u64>, String> {
    let mut value = 0u64;
    for i in 0..10 {
        let byte = match reader.fill_buf() {
            Ok([]) if i == 0 => return Ok(None),
            Ok([]) => return Err("is cut short: the file ends inside a varint".into()),
            Ok(bytes) => bytes[0],
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("cannot be read: {e}")),
        };
        reader.consume(1);
        *offset += 1;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some(value));
        }
    }
    Err("holds a varint longer than 10 bytes".into())
}

/// What a track stands for.
#[derive(Clone, Copy)]
enum Track {
    Process,
    Thread {
        pid: u32,
        tid: u32,
    },
    /// A track under another one (a source's track, an async range's, a counter).
    Child {
        parent: u64,
    },
}

/// A slice begun on a track and not yet ended.
struct Open {
    name: Name,
    start_ns: u64,
    args: Option<String>,
}

/// The incremental state of one packet sequence.
#[derive(Default)]
struct Sequence {
    names: HashMap<u64, String>,
    categories: HashMap<u64, String>,
    arg_names: HashMap<u64, String>,
    /// The clock of timestamps without their own.
    default_clock: Option<u32>,
    /// The track of events without their own.
    default_track: Option<u64>,
    /// Incremental clocks: their last value on CLOCK_MONOTONIC.
    incremental: HashMap<u32, u64>,
}

#[derive(Default)]
struct State {
    sequences: HashMap<u32, Sequence>,
    tracks: HashMap<u64, Track>,
    open: HashMap<u64, Vec<Open>>,
}

/// The first clock id Perfetto leaves to a sequence's own clocks.
const FIRST_SEQUENCE_CLOCK: u32 = 64;

impl State {
    fn packet(&mut self, p: TracePacket, sink: &mut Sink) -> Result<(), String> {
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
        if let Some(d) = &p.interned_data {
            for (table, entries) in [
                (&mut seq.names, &d.event_names),
                (&mut seq.categories, &d.event_categories),
                (&mut seq.arg_names, &d.debug_annotation_names),
            ] {
                for e in entries {
                    table.insert(e.iid.unwrap_or(0), e.name.clone().unwrap_or_default());
                }
            }
        }
        let clock = p
            .timestamp_clock_id
            .or(seq.default_clock)
            .unwrap_or(CLOCK_MONOTONIC);
        let timestamp = match p.timestamp {
            Some(ts) => Some(time(seq, clock, ts)?),
            None => None,
        };
        match p.data {
            Some(Data::ClockSnapshot(s)) => clock_snapshot(seq, &s),
            Some(Data::TrackDescriptor(d)) => self.descriptor(d, sink),
            // CPU samples are read from stacks.folded, as with trace.json.
            Some(Data::PerfSample(_)) => Ok(()),
            Some(Data::TrackEvent(e)) => {
                let ts = timestamp.ok_or("a track event without a timestamp")?;
                self.event(seq_id, ts, e, sink)
            }
            None => Ok(()),
        }
    }

    fn descriptor(&mut self, d: TrackDescriptor, sink: &mut Sink) -> Result<(), String> {
        let uuid = d.uuid.ok_or("a track descriptor without a uuid")?;
        let id = |n: Option<i32>| n.unwrap_or(0) as u32;
        let track = if let Some(p) = d.process {
            if let Some(name) = p.process_name {
                sink.process(id(p.pid), name);
            }
            Track::Process
        } else if let Some(t) = d.thread {
            let (pid, tid) = (id(t.pid), id(t.tid));
            if let Some(name) = t.thread_name {
                sink.thread(pid, tid, name);
            }
            Track::Thread { pid, tid }
        } else {
            Track::Child {
                parent: d.parent_uuid.unwrap_or(0),
            }
        };
        self.tracks.insert(uuid, track);
        Ok(())
    }

    /// The thread a track belongs to: its own, or that of the track it is under; None for a
    /// process's tracks (async ranges, counters).
    fn thread_of(&self, mut uuid: u64) -> Option<(u32, u32)> {
        // A chain of parents no longer than the tracks there are (a loop ends it).
        for _ in 0..=self.tracks.len() {
            match self.tracks.get(&uuid)? {
                Track::Thread { pid, tid } => return Some((*pid, *tid)),
                Track::Process => return None,
                Track::Child { parent } => uuid = *parent,
            }
        }
        None
    }

    fn event(&mut self, seq_id: u32, ts: u64, e: TrackEvent, sink: &mut Sink) -> Result<(), String> {
        let seq = &self.sequences[&seq_id];
        let uuid = e
            .track_uuid
            .or(seq.default_track)
            .ok_or("a track event without a track")?;
        if !self.tracks.contains_key(&uuid) {
            return Err(format!(
                "an event on track {uuid}, which no descriptor before it describes"
            ));
        }
        let thread = self.thread_of(uuid);
        match e.r#type.unwrap_or(0) {
            TYPE_SLICE_BEGIN => {
                let open = Open {
                    name: name_of(seq, &e)?,
                    start_ns: ts,
                    args: args_of(seq, &e)?,
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
                if let Some(thread) = thread {
                    sink.span(&open.name, thread, open.start_ns, dur_ns, open.args.as_deref())?;
                }
            }
            TYPE_INSTANT if thread.is_some() => {
                let name = name_of(seq, &e)?;
                sink.instant(&name.name, &name.cat);
            }
            _ => {}
        }
        Ok(())
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

fn interned<'s>(table: &'s HashMap<u64, String>, iid: u64, what: &str) -> Result<&'s str, String> {
    table
        .get(&iid)
        .map(String::as_str)
        .ok_or_else(|| format!("{what} iid {iid} was never interned"))
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

/// An event's annotations as the JSON object trace.json's `args` holds (without `depth`); None
/// when it has none.
fn args_of(seq: &Sequence, e: &TrackEvent) -> Result<Option<String>, String> {
    if e.debug_annotations.is_empty() {
        return Ok(None);
    }
    let mut object = serde_json::Map::new();
    for a in &e.debug_annotations {
        let name = match (a.name_iid, &a.name) {
            (Some(iid), _) => interned(&seq.arg_names, iid, "annotation name")?.to_owned(),
            (None, name) => name.clone().unwrap_or_default(),
        };
        object.insert(name, json_value(a));
    }
    Ok(Some(serde_json::Value::Object(object).to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analysis::capture::Capture,
        pipeline::{
            chrome::ChromeWriter,
            perfetto::PerfettoWriter,
            writer::{AsyncEdge, SpanOut},
        },
    };

    const PROBES: [(&str, &str); 2] = [("work", "uprobe"), ("app:tick", "usdt")];

    /// The same events, as the record pipeline hands them to either writer.
    fn events() -> Vec<SpanOut> {
        let span = |tid, start_ns, dur_ns, depth| SpanOut {
            pid: 7,
            tid,
            start_ns,
            dur_ns,
            depth,
            ..Default::default()
        };
        vec![
            SpanOut {
                values: Some(r#","arg0":3,"ret":"0x10""#.into()),
                ..span(8, 1_000_500, 2_250, 1)
            },
            span(8, 1_000_000, 9_000, 0),
            span(9, 1_020_000, 4_000, 0),
            SpanOut {
                probe: 1,
                instant: true,
                values: Some(r#","arg0":1"#.into()),
                ..span(8, 1_011_000, 0, 0)
            },
            SpanOut {
                name: Some("CUDA device memory (bytes)".into()),
                counter: Some(5),
                ..span(8, 1_013_000, 0, 0)
            },
            SpanOut {
                name: Some("fetch".into()),
                cat: Some("itt".into()),
                edge: Some(AsyncEdge { begin: true, id: 1 }),
                ..span(8, 1_014_000, 0, 0)
            },
            SpanOut {
                name: Some("fetch".into()),
                cat: Some("itt".into()),
                edge: Some(AsyncEdge { begin: false, id: 1 }),
                ..span(9, 1_015_000, 0, 0)
            },
        ]
    }

    fn perfetto() -> Vec<u8> {
        let start = crate::clock::snapshot();
        let mut w = PerfettoWriter::new(Vec::new(), &PROBES, &start).unwrap();
        for e in events() {
            w.span(&e).unwrap();
        }
        let frame = |name: &str| crate::pipeline::perfetto::SampleFrame {
            name: name.into(),
            module: "/bin/app".into(),
            rel_pc: 0x10,
        };
        w.sample(7, 8, 1_016_000, &[frame("a"), frame("hot")]).unwrap();
        w.process_name(7, "app").unwrap();
        w.thread_name(7, 8, "worker").unwrap();
        w.finish().unwrap()
    }

    fn chrome() -> Vec<u8> {
        let mut w = ChromeWriter::new(Vec::new(), &PROBES).unwrap();
        for e in events() {
            w.span(&e).unwrap();
        }
        w.sample(7, 8, 1_016_000, "hot", "a;hot").unwrap();
        w.process_name(7, "app").unwrap();
        w.thread_name(7, 8, "worker").unwrap();
        w.finish().unwrap()
    }

    /// The capture read from `trace` in `format`, or the error's text.
    fn load(name: &str, trace: &[u8]) -> Result<Capture, String> {
        // A directory of its own: the tests run in parallel.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("xtrace-pf-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), trace).unwrap();
        let mut capture = Capture::default();
        let read = super::super::trace_file::read(&dir, &mut capture, true);
        std::fs::remove_dir_all(&dir).unwrap();
        read.map(|()| capture).map_err(|e| e.to_string())
    }

    fn args(c: &Capture) -> Vec<Option<serde_json::Value>> {
        let parsed = |a: &str| {
            let mut v: serde_json::Value = serde_json::from_str(a).unwrap();
            v.as_object_mut().unwrap().remove("depth");
            v
        };
        c.spans.iter().map(|s| s.args.as_deref().map(parsed)).collect()
    }

    #[test]
    fn a_perfetto_trace_reads_as_its_json_twin() {
        let json = load("trace.json", &chrome()).unwrap();
        let pf = load("trace.perfetto-trace", &perfetto()).unwrap();
        assert_eq!(pf.names, json.names);
        let no_args = |c: &Capture| -> Vec<_> {
            c.spans
                .iter()
                .map(|s| (s.name, s.pid, s.tid, s.start_ns, s.dur_ns))
                .collect()
        };
        assert_eq!(no_args(&pf), no_args(&json));
        assert_eq!(args(&pf), args(&json));
        assert_eq!(pf.spans.len(), 3);
        assert_eq!(pf.instants, json.instants);
        assert_eq!(
            pf.instants.values().sum::<u64>(),
            1,
            "the USDT instant, not the sample"
        );
        assert_eq!(pf.processes, json.processes);
        assert_eq!(pf.threads, json.threads);
    }

    #[test]
    fn a_cut_or_damaged_trace_is_refused_at_its_packets_offset() {
        let bytes = perfetto();
        // Find the offset of the third packet by walking the first two.
        let mut offsets = vec![0u64];
        let mut reader = bytes.as_slice();
        let mut at = 0;
        let mut buf = Vec::new();
        while next_packet(&mut reader, &mut buf, &mut at).unwrap() {
            offsets.push(at);
        }
        let third = offsets[2] as usize;
        let e = load("trace.perfetto-trace", &bytes[..third + 3]).unwrap_err();
        assert!(
            e.contains(&format!(
                "trace.perfetto-trace: the packet at byte {third} is cut short"
            )),
            "{e}"
        );
        assert!(e.ends_with("; the capture is damaged: record it again"), "{e}");
        let mut damaged = bytes.clone();
        damaged[third] = 0x12;
        let e = load("trace.perfetto-trace", &damaged).unwrap_err();
        assert!(
            e.contains(&format!(
                "the packet at byte {third} is not a Perfetto trace packet"
            )),
            "{e}"
        );
        let e = load("trace.perfetto-trace", b"{\"traceEvents\":[]}").unwrap_err();
        assert!(
            e.contains("the packet at byte 0 is not a Perfetto trace packet (field key 0x7b"),
            "{e}"
        );
    }

    #[test]
    fn a_gzipped_perfetto_trace_is_read_too() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&perfetto()).unwrap();
        let c = load("trace.perfetto-trace.gz", &gz.finish().unwrap()).unwrap();
        assert_eq!(c.spans.len(), 3);
    }
}
