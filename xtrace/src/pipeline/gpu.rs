//! The GPU device timeline's records (`--cuda`, with the tool library as CUDA's injection
//! library): what ran on each GPU and when, as the tool library read it from CUPTI and the kernel
//! program `gpu_records` copied it (`xtrace_common::gpu`). Each kernel, copy and memset becomes a
//! slice on a track of its own per process, GPU and stream; names arrive in pieces before the first
//! record that uses them (`gpu_names`); notices from the library become warnings. [`GpuDevice`] also adds up
//! what `export::gpu_device` writes: busy time per GPU, device time per kernel, copies, memsets
//! and records lost.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use xtrace_common::gpu::{record_kind, DeviceName, DeviceRecord, GpuEvent};

use super::{
    gpu_names::{DeviceNames, KeptPieces},
    writer::{EventKind, Flow, FlowKind, SpanOut},
};

/// What one device record becomes.
#[derive(Debug)]
pub struct Slice {
    pub span: SpanOut,
    /// The name of its track, the first time the track is used.
    pub track: Option<String>,
    /// The start of its flow arrow: an instant on the launching thread as the launch began.
    pub launch: Option<SpanOut>,
}

/// Flow ids of graph nodes have this bit set, and a count in the low bits: a graph launch has a
/// flow to each of its nodes, so the launch's correlation id alone does not tell them apart. (No
/// launch's id, a pid in the high 32 bits, has it; nor a wake-up's, `FlowKind::WAKE_BIT`.)
pub const GRAPH_FLOW_BIT: u64 = 1 << 62;

/// Launches remembered while their device records have not come; past it the oldest half is
/// forgotten (a graph launch stays until then: the records of all its nodes carry its id).
const MAX_LAUNCHES: usize = 1 << 16;

/// Device tracks are threads of their process in the trace, with ids no real thread has: this
/// bit, the GPU in bits 20 to 29 and the stream in the low 20.
pub const TRACK_BIT: u32 = 1 << 30;

/// The trace's thread id of a process's track for `stream` of GPU `device`.
pub fn track_tid(device: u32, stream: u32) -> u32 {
    TRACK_BIT | ((device & 0x3ff) << 20) | (stream & 0xf_ffff)
}

/// A copy's direction, by `CUpti_ActivityMemcpyKind`.
pub fn copy_kind_name(kind: u8) -> &'static str {
    match kind {
        1 => "HtoD",
        2 => "DtoH",
        3 => "HtoA",
        4 => "AtoH",
        5 => "AtoA",
        6 => "AtoD",
        7 => "DtoA",
        8 => "DtoD",
        9 => "HtoH",
        10 => "PtoP",
        _ => "unknown",
    }
}

/// Count, bytes and device time of copies or memsets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    pub count: u64,
    pub bytes: u64,
    pub ns: u64,
}

impl Transfers {
    fn add(&mut self, bytes: u64, ns: u64) {
        self.count += 1;
        self.bytes += bytes;
        self.ns += ns;
    }
}

/// What the device records of one recording add up to.
#[derive(Debug, Default)]
pub struct GpuDevice {
    /// The `gpu_records` probe, whose id the slices carry.
    probe: usize,
    /// Kernel names, and notices until whole.
    names: DeviceNames,
    /// The launch of each correlation id not yet matched: (pid, id) → (thread, when it began).
    launches: HashMap<(u32, u32), (u32, u64)>,
    /// Device time of each kernel execution, by name.
    pub kernels: BTreeMap<String, Vec<u64>>,
    /// Busy intervals per (pid, GPU).
    pub busy: BTreeMap<(u32, u32), Vec<(u64, u64)>>,
    /// Kernels per (pid, GPU).
    pub kernels_on: BTreeMap<(u32, u32), u64>,
    /// Copies by direction name.
    pub copies: BTreeMap<&'static str, Transfers>,
    pub memsets: Transfers,
    /// Records CUPTI dropped (no buffer for them), as the tool library counted them.
    pub dropped_by_cupti: u64,
    /// The tracks seen, (pid, GPU, stream).
    pub tracks: BTreeSet<(u32, u32, u32)>,
    /// Notices from the tool library, all of them, and those not yet shown.
    pub notices: Vec<String>,
    new_notices: Vec<String>,
    /// Device records that began after the capture stopped: left out.
    pub after_stop: u64,
    /// From each kernel's launch call to its start on the device (queueing), in constant memory.
    pub queue_delay: super::stats::ProbeStats,
    /// Device records the tool library moved from CUPTI's own clock to CLOCK_MONOTONIC.
    pub clock: MovedRecords,
    /// Kernels, copies and memsets that ran as nodes of a CUDA graph.
    pub graph_nodes: u64,
    /// The CUPTI functions the tool library subscribed with (`cuptiSubscribe`,
    /// `cuptiSubscribe_v2`, `cuptiSubscribe_v2 shared`).
    pub subscribed_with: BTreeSet<&'static str>,
    /// Flow arrows to graph nodes so far (their ids' count).
    graph_flows: u64,
    /// Processes whose tool library subscribed and has not handed over its last records yet
    /// (a `SUBSCRIBED` record came, and no `DRAINED` after it).
    pub undrained: BTreeSet<u32>,
    /// Processes whose tool library handed over its last records.
    pub drained: BTreeSet<u32>,
}

/// What the tool library's `CLOCK` records said: how many device records were on CUPTI's own
/// clock, by how much they were moved, and why the first batch was (a `clock_reason`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MovedRecords {
    pub records: u64,
    pub offset_ns: i64,
    pub reason: u32,
}

impl GpuDevice {
    pub fn new(probe: usize) -> Self {
        GpuDevice {
            probe,
            ..GpuDevice::default()
        }
    }

    /// Kernel names also looked up in `names`, and notices also taken from `notices`: the
    /// pieces the ring buffer had no room for.
    pub fn with_kept(self, names: Box<dyn KeptPieces>, notices: Box<dyn KeptPieces>) -> Self {
        GpuDevice {
            names: DeviceNames::with_kept(names, notices),
            ..self
        }
    }

    /// The tool library's notices since the last call, for the session to show, those whose
    /// pieces the ring had no room for among them.
    pub fn take_notices(&mut self) -> Vec<String> {
        for (pid, text) in self.names.kept_notices() {
            self.notice(pid, &text);
        }
        std::mem::take(&mut self.new_notices)
    }

    /// One record; the slice to write (and, for a new track, its name), if it makes one. A
    /// kernel, copy or memset that ran before the capture's `--start-at` window (`start`) is left
    /// out, as one after its stop is (counted).
    pub fn record(&mut self, event: &GpuEvent, (start, stop): (Option<u64>, Option<u64>)) -> Option<Slice> {
        let pid = event.header.pid;
        // SAFETY: both are 128-byte repr(C) structs of plain integers, valid for any bytes.
        let record: DeviceRecord = unsafe { std::ptr::read_unaligned(event.record.as_ptr().cast()) };
        match record.kind {
            record_kind::NAME | record_kind::NOTICE => {
                // SAFETY: as above.
                let piece: DeviceName = unsafe { std::ptr::read_unaligned(event.record.as_ptr().cast()) };
                self.piece(pid, &piece);
                None
            }
            record_kind::LAUNCH => {
                self.remember_launch(pid, &record);
                None
            }
            record_kind::SUBSCRIBED => {
                // A new tracing session, whose names are numbered anew.
                self.names.forget(pid);
                self.undrained.insert(pid);
                self.subscribed_with.insert(match record.value {
                    2 => "cuptiSubscribe_v2",
                    3 => "cuptiSubscribe_v2 shared",
                    _ => "cuptiSubscribe",
                });
                None
            }
            record_kind::DRAINED => {
                self.undrained.remove(&pid);
                self.drained.insert(pid);
                None
            }
            record_kind::DROPPED => {
                self.dropped_by_cupti += record.bytes;
                None
            }
            record_kind::CLOCK => {
                let clock = &mut self.clock;
                if clock.records == 0 {
                    clock.reason = record.value;
                }
                clock.records += record.bytes;
                clock.offset_ns = record.start_ns as i64;
                None
            }
            record_kind::KERNEL | record_kind::MEMCPY | record_kind::MEMSET => {
                if stop.is_some_and(|stop| record.start_ns > stop) {
                    self.after_stop += 1;
                    return None;
                }
                if start.is_some_and(|start| record.start_ns < start) {
                    return None;
                }
                Some(self.slice(pid, &record))
            }
            _ => None,
        }
    }

    /// A piece of a name or notice; a notice is kept and shown once whole.
    fn piece(&mut self, pid: u32, piece: &DeviceName) {
        if let Some(text) = self.names.piece(pid, piece) {
            self.notice(pid, &text);
        }
    }

    fn notice(&mut self, pid: u32, text: &str) {
        let line = format!("pid {pid}: {text}");
        self.notices.push(line.clone());
        self.new_notices.push(line);
    }

    /// A launch call's thread and start, until its device record comes.
    fn remember_launch(&mut self, pid: u32, record: &DeviceRecord) {
        if self.launches.len() >= MAX_LAUNCHES {
            let mut by_age: Vec<((u32, u32), u64)> =
                self.launches.iter().map(|(&k, &(_, at))| (k, at)).collect();
            by_age.sort_unstable_by_key(|&(_, at)| at);
            for (key, _) in &by_age[..by_age.len() / 2] {
                self.launches.remove(key);
            }
        }
        self.launches
            .insert((pid, record.correlation), (record.stream, record.start_ns));
    }

    fn slice(&mut self, pid: u32, r: &DeviceRecord) -> Slice {
        let dur_ns = r.end_ns.saturating_sub(r.start_ns);
        self.busy
            .entry((pid, r.device))
            .or_default()
            .push((r.start_ns, r.end_ns.max(r.start_ns)));
        let graph_node = r.graph_node_id != 0;
        // Every node of a graph launch carries the launch's correlation id: the launch stays.
        let launcher = if graph_node {
            self.graph_nodes += 1;
            self.launches.get(&(pid, r.correlation)).copied()
        } else {
            self.launches.remove(&(pid, r.correlation))
        };
        let mut launched = launcher.map_or(String::new(), |(tid, _)| format!(",\"launch_tid\":{tid}"));
        if graph_node {
            launched += &format!(
                ",\"graph_id\":{},\"graph_node_id\":{}",
                r.graph_id, r.graph_node_id
            );
        }
        // One flow per launch: its correlation id, unique within the process; one per node of a
        // graph launch.
        let flow_id = if graph_node && launcher.is_some() {
            self.graph_flows += 1;
            GRAPH_FLOW_BIT | self.graph_flows
        } else {
            (u64::from(pid) << 32) | u64::from(r.correlation)
        };
        // A graph's node waits for the nodes before it, not in a queue.
        let queued = launcher.filter(|_| !graph_node).map(|(_, at)| at);
        let (name, values) = self.what_ran(pid, r, queued, &launched);
        let track = self
            .tracks
            .insert((pid, r.device, r.stream))
            .then(|| format!("GPU {} stream {}", r.device, r.stream));
        let span = SpanOut {
            probe: self.probe,
            pid,
            tid: track_tid(r.device, r.stream),
            start_ns: r.start_ns,
            kind: EventKind::Span {
                dur_ns,
                depth: 0,
                flow: launcher.map(|_| Flow {
                    id: flow_id,
                    end: true,
                    kind: FlowKind::Launch,
                }),
            },
            name: Some(name.into()),
            cat: Some("gpu".into()),
            values: Some(values.into()),
        };
        // On the launching thread's CUDA track, where its launch call's span is.
        let launch = launcher.map(|(tid, start_ns)| SpanOut {
            probe: self.probe,
            pid,
            tid,
            start_ns,
            name: Some("launch".into()),
            cat: Some("cuda".into()),
            kind: EventKind::Instant {
                flow: Some(Flow {
                    id: flow_id,
                    end: false,
                    kind: FlowKind::Launch,
                }),
            },
            ..SpanOut::default()
        });
        Slice { span, track, launch }
    }

    /// The name and trace.json values of what record `r` ran (its launch's in `launched`), added
    /// to the totals; `queued`: when its launch call began, for the queueing delay.
    fn what_ran(
        &mut self,
        pid: u32,
        r: &DeviceRecord,
        queued: Option<u64>,
        launched: &str,
    ) -> (String, String) {
        let dur_ns = r.end_ns.saturating_sub(r.start_ns);
        match r.kind {
            record_kind::KERNEL => {
                let name = self.names.kernel(pid, r.name_id);
                self.kernels.entry(name.clone()).or_default().push(dur_ns);
                if let Some(launched_ns) = queued {
                    self.queue_delay.add(r.start_ns.saturating_sub(launched_ns));
                }
                *self.kernels_on.entry((pid, r.device)).or_default() += 1;
                let [gx, gy, gz] = r.grid;
                let [bx, by, bz] = r.block;
                let values = format!(
                    ",\"grid\":[{gx},{gy},{gz}],\"block\":[{bx},{by},{bz}],\"shared_memory\":{},\
                     \"registers\":{},\"stream\":{},\"correlation\":{}{launched}",
                    r.shared_bytes, r.registers, r.stream, r.correlation
                );
                (name, values)
            }
            record_kind::MEMCPY => {
                let kind = copy_kind_name(r.copy_kind);
                self.copies.entry(kind).or_default().add(r.bytes, dur_ns);
                let values = format!(
                    ",\"bytes\":{},\"kind\":\"{kind}\",\"bandwidth_bytes_per_s\":{},\"stream\":{},\
                     \"correlation\":{}{launched}",
                    r.bytes,
                    super::family::gpu_summary::bandwidth(r.bytes, dur_ns),
                    r.stream,
                    r.correlation
                );
                (format!("memcpy {kind}"), values)
            }
            _ => {
                self.memsets.add(r.bytes, dur_ns);
                let values = format!(
                    ",\"bytes\":{},\"value\":{},\"stream\":{},\"correlation\":{}{launched}",
                    r.bytes, r.value, r.stream, r.correlation
                );
                ("memset".to_owned(), values)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xtrace_common::{
        event::{EventHeader, KIND_GPU},
        gpu::NAME_CHUNK,
    };

    fn event(pid: u32, bytes: [u8; 128]) -> GpuEvent {
        GpuEvent {
            header: EventHeader {
                kind: KIND_GPU,
                pid,
                tid: pid,
                ..EventHeader::default()
            },
            record: bytes,
        }
    }

    fn of<T>(value: T) -> [u8; 128] {
        assert_eq!(std::mem::size_of::<T>(), 128);
        // SAFETY: a 128-byte plain record.
        unsafe { std::mem::transmute_copy(&value) }
    }

    fn name(id: u32, offset: u32, text: &[u8]) -> [u8; 128] {
        let mut piece = DeviceName {
            kind: record_kind::NAME,
            id,
            offset,
            len: text.len() as u32,
            text: [0; NAME_CHUNK],
        };
        piece.text[..text.len()].copy_from_slice(text);
        of(piece)
    }

    /// A kernel named in two pieces gets its whole name, its track and its launch's thread.
    #[test]
    fn kernel_slices_carry_their_name_track_and_launch() {
        let mut gpu = GpuDevice::new(3);
        let long = vec![b'k'; NAME_CHUNK + 5];
        assert!(gpu
            .record(&event(7, name(1, 0, &long[..NAME_CHUNK])), (None, None))
            .is_none());
        assert!(gpu
            .record(
                &event(7, name(1, NAME_CHUNK as u32, &long[NAME_CHUNK..])),
                (None, None)
            )
            .is_none());
        let launch = DeviceRecord {
            kind: record_kind::LAUNCH,
            correlation: 9,
            stream: 44,
            ..Default::default()
        };
        assert!(gpu.record(&event(7, of(launch)), (None, None)).is_none());
        let kernel = DeviceRecord {
            kind: record_kind::KERNEL,
            stream: 13,
            correlation: 9,
            start_ns: 1000,
            end_ns: 1500,
            name_id: 1,
            grid: [4, 1, 1],
            block: [64, 1, 1],
            shared_bytes: 128,
            registers: 32,
            ..Default::default()
        };
        let Slice { span, track, launch } = gpu.record(&event(7, of(kernel)), (None, None)).expect("a slice");
        let launch = launch.expect("the launch was seen");
        assert_eq!((launch.pid, launch.tid, launch.kind.is_instant()), (7, 44, true));
        assert_eq!(
            launch.flow(),
            Some(Flow {
                id: 7 << 32 | 9,
                end: false,
                kind: FlowKind::Launch,
            })
        );
        assert_eq!(
            span.flow(),
            Some(Flow {
                id: 7 << 32 | 9,
                end: true,
                kind: FlowKind::Launch,
            })
        );
        assert_eq!(
            span.name.as_deref(),
            Some(String::from_utf8(long).unwrap().as_str())
        );
        assert_eq!(
            (span.pid, span.tid, span.start_ns, span.dur_ns()),
            (7, track_tid(0, 13), 1000, 500)
        );
        assert_eq!(track.as_deref(), Some("GPU 0 stream 13"));
        assert_eq!(
            span.values.as_deref(),
            Some(
                ",\"grid\":[4,1,1],\"block\":[64,1,1],\"shared_memory\":128,\"registers\":32,\"stream\":13,\
                 \"correlation\":9,\"launch_tid\":44"
            )
        );
        // The same track again is not named again; a record after the stop is left out.
        let again = gpu.record(&event(7, of(kernel)), (None, None)).unwrap();
        assert!(again.track.is_none() && again.launch.is_none());
        assert!(gpu.record(&event(7, of(kernel)), (None, Some(999))).is_none());
        assert_eq!(gpu.after_stop, 1);
        // And one from before a --start-at window.
        assert!(gpu
            .record(&event(7, of(kernel)), (Some(u64::MAX), None))
            .is_none());
        assert_eq!(gpu.kernels.values().next().map(Vec::len), Some(2));
    }
    /// Every node of a graph launch shares the launch's correlation id: each links to the launch
    /// with a flow of its own and carries its graph and node ids; none counts as queueing.
    /// Each process's subscription is named by the function that made it, sharing CUPTI or not.
    #[test]
    fn subscriptions_are_named_by_how_they_were_made() {
        let mut gpu = GpuDevice::new(3);
        for (pid, value) in [(7, 1), (8, 2), (9, 3), (10, 3)] {
            let subscribed = DeviceRecord {
                kind: record_kind::SUBSCRIBED,
                value,
                ..Default::default()
            };
            assert!(gpu.record(&event(pid, of(subscribed)), (None, None)).is_none());
        }
        assert_eq!(
            gpu.subscribed_with.into_iter().collect::<Vec<_>>(),
            ["cuptiSubscribe", "cuptiSubscribe_v2", "cuptiSubscribe_v2 shared"]
        );
    }

    #[test]
    fn graph_nodes_each_link_to_their_one_launch() {
        let mut gpu = GpuDevice::new(3);
        let launch = DeviceRecord {
            kind: record_kind::LAUNCH,
            correlation: 4,
            stream: 44,
            start_ns: 900,
            ..Default::default()
        };
        assert!(gpu.record(&event(7, of(launch)), (None, None)).is_none());
        let node = |kind, node: u64, start_ns| DeviceRecord {
            kind,
            stream: 15,
            correlation: 4,
            start_ns,
            end_ns: start_ns + 100,
            bytes: 256,
            graph_id: 3,
            graph_node_id: 3 << 32 | node,
            ..Default::default()
        };
        let mut flows = Vec::new();
        for (i, kind) in [record_kind::KERNEL, record_kind::KERNEL, record_kind::MEMSET]
            .into_iter()
            .enumerate()
        {
            let n = i as u64 + 1;
            let slice = gpu
                .record(&event(7, of(node(kind, n, 1000 + 200 * n))), (None, None))
                .expect("a slice");
            let launch = slice.launch.expect("the launch, for every node");
            assert_eq!((launch.tid, launch.start_ns), (44, 900));
            let (start, end) = (launch.flow().unwrap(), slice.span.flow().unwrap());
            assert_eq!((start.id, start.end, end.end), (end.id, false, true));
            flows.push(end.id);
            let values = slice.span.values.as_deref().unwrap();
            assert!(
                values.ends_with(&format!(
                    ",\"launch_tid\":44,\"graph_id\":3,\"graph_node_id\":{}",
                    3u64 << 32 | n
                )),
                "{values}"
            );
        }
        assert_eq!(
            flows,
            [GRAPH_FLOW_BIT | 1, GRAPH_FLOW_BIT | 2, GRAPH_FLOW_BIT | 3]
        );
        assert_eq!(FlowKind::of_id(flows[0]), FlowKind::Launch);
        assert_eq!((gpu.graph_nodes, gpu.queue_delay.distribution().count), (3, 0));
        // A kernel launched on its own still takes its launch away.
        let launch = DeviceRecord {
            correlation: 5,
            ..launch
        };
        gpu.record(&event(7, of(launch)), (None, None));
        let alone = DeviceRecord {
            correlation: 5,
            graph_id: 0,
            graph_node_id: 0,
            ..node(record_kind::KERNEL, 0, 2000)
        };
        let slice = gpu.record(&event(7, of(alone)), (None, None)).unwrap();
        assert_eq!(slice.span.flow().unwrap().id, 7 << 32 | 5);
        assert!(gpu
            .record(&event(7, of(alone)), (None, None))
            .unwrap()
            .launch
            .is_none());
        assert_eq!(gpu.queue_delay.distribution().count, 1);
    }
}
