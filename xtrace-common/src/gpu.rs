//! The GPU device timeline's records: the contract between the tool library (`xtrace/tool`, which
//! reads CUPTI's activity records inside the traced process and fires the `xtrace:gpu_records`
//! USDT probe with a batch of them), the kernel program `gpu_records` (which copies each record
//! into the ring buffer as it is) and user space. CUPTI's own structs change between CUDA versions;
//! these do not, and nothing in BPF parses CUPTI's.
use crate::event::EventHeader;

/// `EventHeader::kind` of a [`GpuEvent`].
pub use crate::event::KIND_GPU;

/// Most records one hit of `gpu_records` copies; the tool library never passes more. Records past
/// it are counted (`probe::counter::LOST_DEVICE_RECORDS`), not sent.
pub const MAX_RECORDS_PER_HIT: usize = 64;

/// Bytes of one record.
pub const RECORD_BYTES: usize = 128;

/// What a record is (`DeviceRecord::kind`).
pub mod record_kind {
    /// A kernel's execution on the device.
    pub const KERNEL: u32 = 1;
    /// A memory copy.
    pub const MEMCPY: u32 = 2;
    /// A memset.
    pub const MEMSET: u32 = 3;
    /// A piece of a kernel's name ([`super::DeviceName`]), sent before the first record that uses
    /// the name's id.
    pub const NAME: u32 = 4;
    /// Records CUPTI dropped (no buffer to put them in): `DeviceRecord::bytes` holds how many.
    pub const DROPPED: u32 = 5;
    /// A line for the user from the tool library ([`super::DeviceName`], numbered from 1 in
    /// each process by its id): CUPTI refused the subscription, a libcupti outside the supported
    /// range, no libcupti found.
    pub const NOTICE: u32 = 6;
    /// A launch call's correlation id, from CUPTI's API-enter callback on the launching thread:
    /// `start_ns` is when the call began (CLOCK_MONOTONIC), `stream` holds the thread id.
    pub const LAUNCH: u32 = 7;
    /// The device records that follow, from one CUPTI buffer, were on CUPTI's own clock and were
    /// moved to CLOCK_MONOTONIC: `bytes` holds how many, `start_ns` the offset added (an `i64`
    /// as two's complement), `value` why ([`super::clock_reason`]).
    pub const CLOCK: u32 = 8;
    /// The tool library subscribed to CUPTI: `value` says with which function (1
    /// `cuptiSubscribe`, 2 `cuptiSubscribe_v2`, 3 `cuptiSubscribe_v2` sharing CUPTI with other
    /// subscribers). Sent at each activation.
    pub const SUBSCRIBED: u32 = 9;
    /// The last record of a tracing session, after the last device records: the tool library
    /// switched CUPTI's records off and handed over what its buffers held, because the
    /// `xtrace:gpu_drain` semaphore rose (the tracer is stopping) or `xtrace:gpu_records`' fell.
    pub const DRAINED: u32 = 10;
}

/// Why the tool library moved a buffer's records to CLOCK_MONOTONIC (`DeviceRecord::value` of a
/// [`record_kind::CLOCK`] record): what the records' own times could not be.
pub mod clock_reason {
    /// A record ended after the buffer holding it was read.
    pub const ENDS_IN_THE_FUTURE: u32 = 1;
    /// A kernel began before the launch call that made it.
    pub const BEFORE_ITS_LAUNCH: u32 = 2;
    /// Possible on either clock, but only moved did the newest record end near the time the
    /// buffer was read, as the records of a buffer flushed every period do (told only when the
    /// clocks are more than a second apart).
    pub const RECENT: u32 = 3;
}

/// One device activity, as the tool library hands it over (128 bytes). Times are CLOCK_MONOTONIC
/// nanoseconds (the clock the tool library gives CUPTI), the clock of `bpf_ktime_get_ns`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceRecord {
    /// [`record_kind`].
    pub kind: u32,
    pub device: u32,
    pub stream: u32,
    /// CUPTI's correlation id: the same as its launch call's.
    pub correlation: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// A copy's or memset's bytes; the count of a `DROPPED` record.
    pub bytes: u64,
    /// A kernel's name ([`DeviceName`] records carry the text); 0: none.
    pub name_id: u32,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Static plus dynamic shared memory of a kernel, in bytes.
    pub shared_bytes: u32,
    pub registers: u16,
    /// A copy's `CUpti_ActivityMemcpyKind` (1 host to device, 2 device to host, 8 device to
    /// device, 10 peer to peer, ...).
    pub copy_kind: u8,
    pub _pad: u8,
    pub value: u32,
    /// The CUDA graph node whose execution this kernel, copy or memset was (CUPTI's
    /// `graphNodeId`, unique in the process); 0: not launched through a graph. Its correlation id
    /// is the graph launch call's, shared by every node of one launch.
    pub graph_node_id: u64,
    /// The graph of that node (CUPTI's `graphId`); 0 as above.
    pub graph_id: u32,
    pub _pad2: u32,
    pub _reserved: [u64; 4],
}

/// Bytes of name text one [`DeviceName`] carries.
pub const NAME_CHUNK: usize = 112;

/// A piece of a name: `text[..len]` is the name's bytes from `offset` on. A name longer than
/// [`NAME_CHUNK`] comes in several records, in order; the tool library cuts names at
/// [`NAME_MAX`] bytes. The last piece is shorter than a chunk (empty for a name of a multiple
/// of [`NAME_CHUNK`] bytes), so a reader knows when a name is whole.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceName {
    /// `record_kind::NAME` or `record_kind::NOTICE`.
    pub kind: u32,
    pub id: u32,
    pub offset: u32,
    pub len: u32,
    pub text: [u8; NAME_CHUNK],
}

/// Longest name the tool library sends, in bytes.
pub const NAME_MAX: usize = 1024;

/// The pieces of `kind` and `id` that `text` (cut at [`NAME_MAX`] bytes) is sent as, in order,
/// the last shorter than a chunk: an empty one follows a text of whole chunks.
pub fn name_pieces(kind: u32, id: u32, text: &[u8]) -> impl Iterator<Item = DeviceName> + '_ {
    let text = &text[..text.len().min(NAME_MAX)];
    let last = text.len().is_multiple_of(NAME_CHUNK).then_some(&[][..]);
    text.chunks(NAME_CHUNK)
        .chain(last)
        .enumerate()
        .map(move |(i, chunk)| {
            let mut piece = DeviceName {
                kind,
                id,
                offset: (i * NAME_CHUNK) as u32,
                len: chunk.len() as u32,
                text: [0; NAME_CHUNK],
            };
            piece.text[..chunk.len()].copy_from_slice(chunk);
            piece
        })
}

/// Most kernel name pieces the kernel program keeps in `GPU_NAME_PIECES` when the ring buffer
/// has no room for them, for xtrace to look up when a record names them (each piece is taken
/// out as it is read).
pub const MAX_KEPT_NAME_PIECES: u32 = 4096;

/// Most notice pieces the kernel program keeps in `GPU_NOTICE_PIECES` when the ring buffer has no
/// room for them, for xtrace to show when it next looks (each piece is taken out as it is read).
/// A notice is at most [`NAME_MAX`] bytes, ten pieces; a process sends a few at each activation.
pub const MAX_KEPT_NOTICE_PIECES: u32 = 64;

/// A kept piece's key in `GPU_NAME_PIECES` or `GPU_NOTICE_PIECES`: process id, name's or
/// notice's id, offset in its text.
pub type NamePieceKey = [u32; 3];

/// A record as the ring buffer holds it: who fired the probe, when, and the record's bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuEvent {
    pub header: EventHeader,
    pub record: [u8; RECORD_BYTES],
}

const _: () = assert!(core::mem::size_of::<DeviceRecord>() == RECORD_BYTES);
const _: () = assert!(core::mem::size_of::<DeviceName>() == RECORD_BYTES);
const _: () = assert!(core::mem::size_of::<GpuEvent>() == 24 + RECORD_BYTES);
const _: () = assert!(core::mem::offset_of!(DeviceRecord, graph_node_id) == 80);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: a plain-old-data record: repr(C), integer fields only, no padding.
    unsafe impl aya::Pod for super::DeviceName {}
}
