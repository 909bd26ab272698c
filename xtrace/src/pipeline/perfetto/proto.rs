//! The subset of Perfetto's trace protobuf that xtrace writes, as prost messages written by hand
//! from the published field numbers (no protoc at build time). Each message names the .proto
//! file of google/perfetto that defines it; the numbers were checked against the descriptors of
//! the PyPI `perfetto` package (`perfetto_trace_pb2`), which tests/tools/perfetto_decode.py uses
//! to read every trace the tests write.
//!
//! Perfetto's protos are proto2: repeated integers are not packed there, so they are not packed
//! here either (`packed = "false"`), and fields whose zero means something (a counter's value)
//! are `optional`, so that a zero is written.

/// protos/perfetto/trace/trace.proto `Trace`: a file is a sequence of `packet` fields (1), so
/// packets are appended one by one; this message is used to read a trace back.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Trace {
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

/// The field number of `Trace.packet`.
pub const TRACE_PACKET_FIELD: u32 = 1;

/// protos/perfetto/trace/trace_packet.proto `TracePacket`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    /// The clock of `timestamp`, when not the sequence's default.
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    #[prost(message, optional, tag = "59")]
    pub trace_packet_defaults: Option<TracePacketDefaults>,
    #[prost(bool, optional, tag = "87")]
    pub first_packet_on_sequence: Option<bool>,
    #[prost(oneof = "Data", tags = "6, 11, 60, 66")]
    pub data: Option<Data>,
}

/// `TracePacket.data`: the kinds of packet xtrace writes.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Data {
    #[prost(message, tag = "6")]
    ClockSnapshot(ClockSnapshot),
    #[prost(message, tag = "11")]
    TrackEvent(TrackEvent),
    #[prost(message, tag = "60")]
    TrackDescriptor(TrackDescriptor),
    #[prost(message, tag = "66")]
    PerfSample(PerfSample),
}

/// protos/perfetto/trace/profiling/profile_packet.proto `PerfSample`: one CPU sample of a thread,
/// its call stack interned.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PerfSample {
    #[prost(uint32, optional, tag = "2")]
    pub pid: Option<u32>,
    #[prost(uint32, optional, tag = "3")]
    pub tid: Option<u32>,
    #[prost(uint64, optional, tag = "4")]
    pub callstack_iid: Option<u64>,
}

/// `TracePacket.SequenceFlags`.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
pub const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

/// protos/perfetto/trace/trace_packet_defaults.proto `TracePacketDefaults`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacketDefaults {
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    pub track_event_defaults: Option<TrackEventDefaults>,
}

/// protos/perfetto/trace/track_event/track_event.proto `TrackEventDefaults`: the track of a
/// sequence's events that name none.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEventDefaults {
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
}

/// protos/perfetto/common/builtin_clock.proto `BuiltinClock`.
pub const CLOCK_REALTIME: u32 = 1;
pub const CLOCK_MONOTONIC: u32 = 3;
pub const CLOCK_BOOTTIME: u32 = 6;

/// protos/perfetto/trace/clock_snapshot.proto `ClockSnapshot`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClockSnapshot {
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    /// A `BuiltinClock`: the clock the trace's times are shown in.
    #[prost(int32, optional, tag = "2")]
    pub primary_trace_clock: Option<i32>,
}

/// protos/perfetto/trace/clock_snapshot.proto `ClockSnapshot.Clock`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Clock {
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
    /// A sequence-scoped clock (ids 64 to 127) whose packets' timestamps are deltas from the
    /// previous packet's.
    #[prost(bool, optional, tag = "3")]
    pub is_incremental: Option<bool>,
    #[prost(uint64, optional, tag = "4")]
    pub unit_multiplier_ns: Option<u64>,
}

/// protos/perfetto/trace/interned_data/interned_data.proto `InternedData`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedData {
    #[prost(message, repeated, tag = "1")]
    pub event_categories: Vec<InternedName>,
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<InternedName>,
    #[prost(message, repeated, tag = "3")]
    pub debug_annotation_names: Vec<InternedName>,
    #[prost(message, repeated, tag = "5")]
    pub function_names: Vec<InternedString>,
    #[prost(message, repeated, tag = "6")]
    pub frames: Vec<Frame>,
    #[prost(message, repeated, tag = "7")]
    pub callstacks: Vec<Callstack>,
    #[prost(message, repeated, tag = "17")]
    pub mapping_paths: Vec<InternedString>,
    #[prost(message, repeated, tag = "19")]
    pub mappings: Vec<Mapping>,
}

impl InternedData {
    pub fn is_empty(&self) -> bool {
        self.event_categories.is_empty()
            && self.event_names.is_empty()
            && self.debug_annotation_names.is_empty()
            && self.function_names.is_empty()
            && self.frames.is_empty()
            && self.callstacks.is_empty()
            && self.mapping_paths.is_empty()
            && self.mappings.is_empty()
    }
}

/// protos/perfetto/common/profile_common.proto `InternedString`: a
/// function name or a mapping's path.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedString {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub str: Option<Vec<u8>>,
}

/// protos/perfetto/common/profile_common.proto `Frame`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Frame {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    pub function_name_id: Option<u64>,
    #[prost(uint64, optional, tag = "3")]
    pub mapping_id: Option<u64>,
    #[prost(uint64, optional, tag = "4")]
    pub rel_pc: Option<u64>,
}

/// protos/perfetto/common/profile_common.proto `Mapping`: xtrace names it by its path alone.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(uint64, repeated, packed = "false", tag = "7")]
    pub path_string_ids: Vec<u64>,
}

/// protos/perfetto/common/profile_common.proto `Callstack`: frame iids, outermost first.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Callstack {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(uint64, repeated, packed = "false", tag = "2")]
    pub frame_ids: Vec<u64>,
}

/// protos/perfetto/trace/track_event/track_event.proto `EventCategory` and `EventName`, and
/// protos/perfetto/trace/track_event/debug_annotation.proto `DebugAnnotationName`: the three
/// share one layout (iid = 1, name = 2).
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedName {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

/// protos/perfetto/trace/track_event/track_descriptor.proto `TrackDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

/// protos/perfetto/trace/track_event/process_descriptor.proto `ProcessDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

/// protos/perfetto/trace/track_event/thread_descriptor.proto `ThreadDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    pub tid: Option<i32>,
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

/// protos/perfetto/trace/track_event/counter_descriptor.proto `CounterDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CounterDescriptor {
    /// A `CounterDescriptor.Unit`.
    #[prost(int32, optional, tag = "3")]
    pub unit: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub unit_name: Option<String>,
}

/// `CounterDescriptor.Unit`s.
pub const UNIT_TIME_NS: i32 = 1;
pub const UNIT_COUNT: i32 = 2;
pub const UNIT_SIZE_BYTES: i32 = 3;

/// protos/perfetto/trace/track_event/track_event.proto `TrackEvent`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    #[prost(uint64, repeated, packed = "false", tag = "3")]
    pub category_iids: Vec<u64>,
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    /// A `TrackEvent.Type`.
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    /// A name not interned (read, never written).
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
    #[prost(double, optional, tag = "44")]
    pub double_counter_value: Option<f64>,
    /// Flow arrows that start (or pass) at this event.
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
    /// Flow arrows that end at this event.
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
}

/// `TrackEvent.Type`.
pub const TYPE_SLICE_BEGIN: i32 = 1;
pub const TYPE_SLICE_END: i32 = 2;
pub const TYPE_INSTANT: i32 = 3;
pub const TYPE_COUNTER: i32 = 4;

/// protos/perfetto/trace/track_event/debug_annotation.proto `DebugAnnotation`. Top-level
/// annotations are named by an interned iid; the entries of a dictionary by their name.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    #[prost(uint64, optional, tag = "1")]
    pub name_iid: Option<u64>,
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
    #[prost(oneof = "Value", tags = "2, 3, 4, 5, 6")]
    pub value: Option<Value>,
    #[prost(message, repeated, tag = "11")]
    pub dict_entries: Vec<DebugAnnotation>,
    #[prost(message, repeated, tag = "12")]
    pub array_values: Vec<DebugAnnotation>,
}

/// `DebugAnnotation.value`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(uint64, tag = "3")]
    Uint(u64),
    #[prost(int64, tag = "4")]
    Int(i64),
    #[prost(double, tag = "5")]
    Double(f64),
    #[prost(string, tag = "6")]
    String(String),
}
