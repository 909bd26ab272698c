//! The Perfetto writer's encoding, read back with the same messages: packet framing and varints,
//! the sequence's first packet, interning, tracks and their uuids, counters, async ranges.
use std::collections::{HashMap, HashSet};

use prost::Message;

use super::{super::proto::*, super::sequence::INCREMENTAL_CLOCK, PerfettoWriter};
use crate::{
    clock::Snapshot,
    pipeline::writer::{AsyncEdge, SpanOut},
};

const START: Snapshot = Snapshot {
    monotonic_ns: 1_000,
    realtime_ns: 2_000,
    boottime_ns: 3_000,
    read_ns: 50,
    error_ns: None,
};

fn packets(bytes: &[u8]) -> Vec<TracePacket> {
    Trace::decode(bytes).expect("a Trace").packet
}

fn span(probe: usize, tid: u32, start_ns: u64, dur_ns: u64) -> SpanOut {
    SpanOut {
        probe,
        pid: 10,
        tid,
        start_ns,
        kind: crate::pipeline::writer::EventKind::span(dur_ns, 0),
        ..Default::default()
    }
}

fn track_event(p: &TracePacket) -> Option<&TrackEvent> {
    match &p.data {
        Some(Data::TrackEvent(e)) => Some(e),
        _ => None,
    }
}

fn descriptors(packets: &[TracePacket]) -> Vec<&TrackDescriptor> {
    packets
        .iter()
        .filter_map(|p| match &p.data {
            Some(Data::TrackDescriptor(d)) => Some(d),
            _ => None,
        })
        .collect()
}

#[test]
fn packets_are_trace_fields_with_varint_lengths() {
    let mut w = PerfettoWriter::new(Vec::new(), &[], &START).unwrap();
    w.buf.clear();
    w.write(TracePacket {
        timestamp: Some(300),
        ..Default::default()
    });
    // Field 1 length-delimited, length 3; field 8 varint, 300 = 0xac 0x02.
    assert_eq!(w.buf, [0x0a, 3, 0x40, 0xac, 0x02]);
    w.buf.clear();
    w.write(TracePacket {
        data: Some(Data::TrackDescriptor(TrackDescriptor {
            name: Some("x".repeat(200)),
            ..Default::default()
        })),
        ..Default::default()
    });
    // A 200-byte name: the descriptor is 203 bytes (key, 2-byte length, name), the packet 207
    // (field 60's key takes 2 bytes, the length 2): 0xcf 0x01 as a varint.
    assert_eq!(w.buf[..3], [0x0a, 0xcf, 0x01]);
    assert_eq!(w.buf.len(), 3 + 207);
}

#[test]
fn the_first_packet_clears_state_and_sets_the_clock() {
    let bytes = PerfettoWriter::new(Vec::new(), &[], &START)
        .unwrap()
        .finish()
        .unwrap();
    let first = &packets(&bytes)[0];
    assert_eq!(first.sequence_flags, Some(SEQ_INCREMENTAL_STATE_CLEARED));
    assert_eq!(first.first_packet_on_sequence, Some(true));
    assert_eq!(
        first
            .trace_packet_defaults
            .as_ref()
            .and_then(|d| d.timestamp_clock_id),
        Some(INCREMENTAL_CLOCK)
    );
    let Some(Data::ClockSnapshot(clocks)) = &first.data else {
        panic!("{first:?}")
    };
    let pairs: Vec<_> = clocks
        .clocks
        .iter()
        .map(|c| (c.clock_id, c.timestamp, c.is_incremental))
        .collect();
    assert_eq!(
        pairs,
        [
            (Some(CLOCK_MONOTONIC), Some(1_000), None),
            (Some(CLOCK_REALTIME), Some(2_000), None),
            (Some(CLOCK_BOOTTIME), Some(3_000), None),
            (Some(INCREMENTAL_CLOCK), Some(1_000), Some(true))
        ]
    );
}

#[test]
fn names_are_interned_once_and_every_iid_resolves() {
    let probes = [("work", "uprobe"), ("inner", "uprobe")];
    let mut w = PerfettoWriter::new(Vec::new(), &probes, &START).unwrap();
    for i in 0..3 {
        w.span(&span(0, 11, i * 100, 50)).unwrap();
        w.span(&SpanOut {
            values: Some(r#","arg0":1"#.into()),
            ..span(1, 11, i * 100 + 10, 5)
        })
        .unwrap();
    }
    let packets = packets(&w.finish().unwrap());
    let mut names = HashMap::new();
    let mut categories = HashMap::new();
    let mut args = HashMap::new();
    for p in &packets {
        if let Some(data) = &p.interned_data {
            for (table, entries) in [
                (&mut names, &data.event_names),
                (&mut categories, &data.event_categories),
                (&mut args, &data.debug_annotation_names),
            ] {
                for n in entries {
                    assert!(table.insert(n.iid, n.name.clone()).is_none(), "sent twice: {n:?}");
                }
            }
        }
        if let Some(e) = track_event(p) {
            assert_eq!(p.sequence_flags, Some(SEQ_NEEDS_INCREMENTAL_STATE));
            for iid in e.name_iid.iter() {
                assert!(names.contains_key(&Some(*iid)), "name iid {iid} sent before use");
            }
            for iid in &e.category_iids {
                assert!(categories.contains_key(&Some(*iid)));
            }
            for a in &e.debug_annotations {
                assert_eq!(args[&a.name_iid].as_deref(), Some("arg0"));
                assert_eq!(a.value, Some(Value::Int(1)));
            }
        }
    }
    assert_eq!(names.len(), 2);
    assert_eq!(categories.len(), 1);
    let kinds: Vec<_> = packets.iter().filter_map(track_event).map(|e| e.r#type).collect();
    assert_eq!(kinds.len(), 12, "a begin and an end per span");
    // The spans are on the sequence of their thread's uprobe track (3), the descriptors on the
    // main one (2).
    for p in &packets {
        let seq = if track_event(p).is_some() { 3 } else { 2 };
        if !matches!(p.data, Some(Data::ClockSnapshot(_))) {
            assert_eq!(p.trusted_packet_sequence_id, Some(seq), "{p:?}");
        }
    }
}

#[test]
fn tracks_per_process_thread_and_source_with_unique_uuids() {
    let probes = [("work", "uprobe"), ("mark", "usdt")];
    let mut w = PerfettoWriter::new(Vec::new(), &probes, &START).unwrap();
    w.span(&span(0, 11, 100, 50)).unwrap();
    w.span(&span(0, 12, 100, 50)).unwrap();
    w.span(&SpanOut {
        kind: crate::pipeline::writer::EventKind::INSTANT,
        ..span(1, 11, 120, 0)
    })
    .unwrap();
    // A range crossing the uprobe span without nesting, on the thread's range track.
    w.span(&SpanOut {
        cat: Some("range".into()),
        ..span(1, 11, 130, 100)
    })
    .unwrap();
    w.thread_name(10, 11, "worker").unwrap();
    w.process_name(10, "app").unwrap();
    let packets = packets(&w.finish().unwrap());
    let tracks = descriptors(&packets);
    let uuids: HashSet<_> = tracks.iter().map(|d| d.uuid).collect();
    // Process, 2 threads, uprobe under each, usdt and range under thread 11.
    assert_eq!(uuids.len(), 7, "{tracks:?}");
    let thread = |tid| {
        tracks
            .iter()
            .find(|d| d.thread.as_ref().is_some_and(|t| t.tid == Some(tid)))
            .unwrap()
            .uuid
    };
    let children: Vec<_> = tracks
        .iter()
        .filter(|d| d.parent_uuid == thread(11))
        .map(|d| d.name.as_deref().unwrap())
        .collect();
    assert_eq!(children, ["uprobe", "usdt", "range"]);
    let renamed: Vec<_> = tracks
        .iter()
        .filter(|d| d.uuid == thread(11))
        .map(|d| d.thread.as_ref().unwrap().thread_name.clone())
        .collect();
    assert_eq!(
        renamed,
        [None, Some("worker".into())],
        "named at the end, same uuid"
    );
    let process = tracks.iter().rfind(|d| d.process.is_some()).unwrap();
    assert_eq!(
        process.process.as_ref().unwrap().process_name.as_deref(),
        Some("app")
    );
    assert_eq!(process.uuid, tracks[0].uuid);
}

#[test]
fn counters_have_units_and_async_ranges_their_own_tracks() {
    let mut w =
        PerfettoWriter::new(Vec::new(), &[("cudaMalloc", "cuda"), ("fetch", "range")], &START).unwrap();
    w.span(&SpanOut {
        name: Some("CUDA device memory (bytes)".into()),
        kind: crate::pipeline::writer::EventKind::Counter(0),
        ..span(0, 10, 5, 0)
    })
    .unwrap();
    w.counter(10, "power (W)", 6, &[("power".into(), 41.5)]).unwrap();
    for (begin, id, ts) in [(true, 1, 10), (true, 2, 20), (false, 1, 30), (false, 2, 40)] {
        w.span(&SpanOut {
            kind: crate::pipeline::writer::EventKind::Async(AsyncEdge { begin, id }),
            ..span(1, 11, ts, 0)
        })
        .unwrap();
    }
    let packets = packets(&w.finish().unwrap());
    let tracks = descriptors(&packets);
    let units: Vec<_> = tracks
        .iter()
        .filter_map(|d| Some((d.name.as_deref()?, d.counter.clone()?)))
        .map(|(name, c)| (name, c.unit, c.unit_name))
        .collect();
    assert_eq!(
        units,
        [
            ("CUDA device memory (bytes)", Some(UNIT_SIZE_BYTES), None),
            ("power (W)", None, Some("W".into()))
        ]
    );
    let values: Vec<_> = packets
        .iter()
        .filter_map(track_event)
        .filter(|e| e.r#type == Some(TYPE_COUNTER))
        .map(|e| (e.counter_value, e.double_counter_value))
        .collect();
    assert_eq!(values, [(Some(0), None), (None, Some(41.5))], "a zero is written");
    let edges: Vec<_> = packets
        .iter()
        .filter_map(track_event)
        .filter(|e| e.r#type != Some(TYPE_COUNTER))
        .map(|e| (e.r#type.unwrap(), e.track_uuid.unwrap()))
        .collect();
    assert_eq!(edges.len(), 4);
    assert_ne!(edges[0].1, edges[1].1, "overlapping ranges, two tracks");
    assert_eq!((edges[2].1, edges[3].1), (edges[0].1, edges[1].1));
    assert_eq!(edges.iter().filter(|e| e.0 == TYPE_SLICE_END).count(), 2);
}
