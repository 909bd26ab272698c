//! One packet sequence of trace.perfetto-trace: what Perfetto keeps per sequence (interned names,
//! iids counted per sequence, and the defaults) and its incremental clock. Every sequence's first
//! packet clears the state, sets the defaults (timestamps on the sequence's own clock 64, and
//! for a track's sequence that track) and defines clock 64 as incremental from CLOCK_MONOTONIC's
//! value then; each later timestamp is the time since the one before it on the sequence, a few
//! bytes instead of eight. A time earlier than that (a nesting span, written once it ended, after
//! its inner spans) is written whole, on CLOCK_MONOTONIC.
use super::{
    intern::Interner,
    proto::{
        Clock, ClockSnapshot, Data, InternedData, TracePacket, TracePacketDefaults, TrackEventDefaults,
        CLOCK_BOOTTIME, CLOCK_MONOTONIC, CLOCK_REALTIME, SEQ_INCREMENTAL_STATE_CLEARED,
        SEQ_NEEDS_INCREMENTAL_STATE,
    },
};
use crate::clock::Snapshot;

/// The sequence-scoped clock (Perfetto leaves ids 64 to 127 to sequences) whose timestamps are
/// deltas.
pub const INCREMENTAL_CLOCK: u32 = 64;

pub struct Sequence {
    id: u32,
    pub names: Interner,
    pub categories: Interner,
    pub arg_names: Interner,
    /// Per probe id: the iids of its name and category on this sequence, once interned.
    pub probe_iids: Vec<Option<(u64, u64)>>,
    /// Names interned since the last packet, sent with the next one.
    pub pending: InternedData,
    /// The incremental clock's value: the last time written on it; None before the first packet.
    clock_ns: Option<u64>,
    /// The track of events that name none.
    track: Option<u64>,
}

/// A clock's reading.
fn clock(id: u32, ns: u64) -> Clock {
    Clock {
        clock_id: Some(id),
        timestamp: Some(ns),
        ..Default::default()
    }
}

/// CLOCK_MONOTONIC paired with CLOCK_REALTIME and CLOCK_BOOTTIME; times are shown on
/// CLOCK_MONOTONIC, as in trace.json and summary.json.
pub fn clock_snapshot(s: &Snapshot) -> ClockSnapshot {
    ClockSnapshot {
        clocks: vec![
            clock(CLOCK_MONOTONIC, s.monotonic_ns),
            clock(CLOCK_REALTIME, s.realtime_ns),
            clock(CLOCK_BOOTTIME, s.boottime_ns),
        ],
        primary_trace_clock: Some(CLOCK_MONOTONIC as i32),
    }
}

impl Sequence {
    /// Sequence `id` for `probes` probes; `track` the default track of its events.
    pub fn new(id: u32, probes: usize, track: Option<u64>) -> Self {
        Sequence {
            id,
            names: Interner::default(),
            categories: Interner::default(),
            arg_names: Interner::default(),
            probe_iids: vec![None; probes],
            pending: InternedData::default(),
            clock_ns: None,
            track,
        }
    }

    pub fn started(&self) -> bool {
        self.clock_ns.is_some()
    }

    /// The first packet: clears the state, sets the defaults and starts the incremental clock at
    /// CLOCK_MONOTONIC `base_ns`; `wall` adds the wall and boot clocks (the trace's own snapshot).
    pub fn start(&mut self, base_ns: u64, wall: Option<&Snapshot>) -> TracePacket {
        self.clock_ns = Some(base_ns);
        let mut snapshot = match wall {
            Some(s) => clock_snapshot(&Snapshot {
                monotonic_ns: base_ns,
                ..*s
            }),
            None => ClockSnapshot {
                clocks: vec![clock(CLOCK_MONOTONIC, base_ns)],
                primary_trace_clock: None,
            },
        };
        snapshot.clocks.push(Clock {
            is_incremental: Some(true),
            ..clock(INCREMENTAL_CLOCK, base_ns)
        });
        TracePacket {
            trusted_packet_sequence_id: Some(self.id),
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            first_packet_on_sequence: Some(true),
            trace_packet_defaults: Some(TracePacketDefaults {
                timestamp_clock_id: Some(INCREMENTAL_CLOCK),
                track_event_defaults: self.track.map(|t| TrackEventDefaults { track_uuid: Some(t) }),
            }),
            data: Some(Data::ClockSnapshot(snapshot)),
            ..Default::default()
        }
    }

    /// A packet of this sequence at `ts_ns` (None: untimed) with what was interned since the last.
    pub fn packet(&mut self, ts_ns: Option<u64>, data: Data) -> TracePacket {
        let interned = (!self.pending.is_empty()).then(|| std::mem::take(&mut self.pending));
        let uses_state = matches!(data, Data::TrackEvent(_) | Data::PerfSample(_));
        let (timestamp, timestamp_clock_id) = match (ts_ns, self.clock_ns) {
            (Some(ts), Some(last)) if ts >= last => {
                self.clock_ns = Some(ts);
                (Some(ts - last), None)
            }
            (Some(ts), _) => (Some(ts), Some(CLOCK_MONOTONIC)),
            (None, _) => (None, None),
        };
        TracePacket {
            timestamp,
            timestamp_clock_id,
            trusted_packet_sequence_id: Some(self.id),
            sequence_flags: uses_state.then_some(SEQ_NEEDS_INCREMENTAL_STATE),
            interned_data: interned,
            data: Some(data),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_deltas_on_the_incremental_clock_and_steps_back_are_whole() {
        let mut seq = Sequence::new(3, 0, Some(9));
        let first = seq.start(1_000, None);
        let defaults = first.trace_packet_defaults.unwrap();
        assert_eq!(defaults.timestamp_clock_id, Some(INCREMENTAL_CLOCK));
        assert_eq!(defaults.track_event_defaults.unwrap().track_uuid, Some(9));
        let Some(Data::ClockSnapshot(s)) = first.data else {
            panic!("a snapshot")
        };
        let pairs: Vec<_> = s
            .clocks
            .iter()
            .map(|c| (c.clock_id, c.timestamp, c.is_incremental))
            .collect();
        assert_eq!(
            pairs,
            [(Some(3), Some(1_000), None), (Some(64), Some(1_000), Some(true))]
        );
        let at = |seq: &mut Sequence, ts| {
            let p = seq.packet(Some(ts), Data::ClockSnapshot(ClockSnapshot::default()));
            (p.timestamp, p.timestamp_clock_id)
        };
        assert_eq!(at(&mut seq, 1_250), (Some(250), None));
        assert_eq!(at(&mut seq, 1_250), (Some(0), None));
        assert_eq!(at(&mut seq, 1_100), (Some(1_100), Some(CLOCK_MONOTONIC)));
        // A step back leaves the clock where it was.
        assert_eq!(at(&mut seq, 1_300), (Some(50), None));
    }
}
