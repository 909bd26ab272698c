//! CUPTI's activity buffers and the records made of them: buffers handed to CUPTI (bounded in
//! number: past [`MAX_BUFFERS`] outstanding, CUPTI drops records and counts them), each completed
//! buffer read with `cuptiActivityGetNextRecord` into fixed-layout `DeviceRecord`s, kernel names
//! sent once per tracing session as `DeviceName` pieces, and the hand-over to the tracer through
//! the `xtrace:gpu_records` probe in batches of at most `MAX_RECORDS_PER_HIT`.
use core::ffi::{c_char, c_void, CStr};
use std::{
    alloc::Layout,
    collections::HashMap,
    sync::{
        atomic::{AtomicU32, AtomicUsize, Ordering},
        Mutex, MutexGuard, PoisonError,
    },
};

use xtrace_common::gpu::{name_pieces, record_kind, DeviceName, DeviceRecord, MAX_RECORDS_PER_HIT};

use crate::{
    cupti::{kind, layout, Cupti, MAX_LIMIT_REACHED, SUCCESS},
    usdt::{self, enabled},
};

/// Bytes of one activity buffer.
pub const BUFFER_BYTES: usize = 256 << 10;
/// Most buffers handed to CUPTI and not yet completed.
pub const MAX_BUFFERS: usize = 16;

static OUTSTANDING: AtomicUsize = AtomicUsize::new(0);

struct Pending {
    records: Vec<DeviceRecord>,
    /// Kernel names sent in this tracing session, by text.
    names: HashMap<Vec<u8>, u32>,
}

static PENDING: Mutex<Option<Pending>> = Mutex::new(None);

fn pending() -> MutexGuard<'static, Option<Pending>> {
    PENDING.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with_pending<R>(f: impl FnOnce(&mut Pending) -> R) -> R {
    let mut guard = pending();
    let p = guard.get_or_insert_with(|| Pending {
        records: Vec::new(),
        names: HashMap::new(),
    });
    f(p)
}

/// A new tracing session: its tracer has seen no names.
pub fn start_session() {
    crate::clock::start_session();
    with_pending(|p| {
        p.records.clear();
        p.names.clear();
    });
}

/// In a forked child: drops the parent's records. False when their lock was held at the fork
/// (see [`crate::try_lock`]).
pub fn forget_after_fork() -> bool {
    crate::try_lock(&PENDING)
        .map(|mut pending| *pending = None)
        .is_some()
}

pub fn push(record: DeviceRecord) {
    with_pending(|p| p.records.push(record));
}

/// A launch call's correlation id on the calling thread.
pub fn launch(correlation: u32, start_ns: u64) {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    crate::clock::launched(correlation, start_ns);
    push(DeviceRecord {
        kind: record_kind::LAUNCH,
        correlation,
        start_ns,
        stream: tid,
        ..DeviceRecord::default()
    });
}

/// A line for the tracer to show.
pub fn notice(text: &str) {
    // Numbered, so that the tracer can put together those the ring had no room for, which it
    // reads in no order.
    static NOTICES: AtomicU32 = AtomicU32::new(0);
    let id = NOTICES.fetch_add(1, Ordering::Relaxed) + 1;
    with_pending(|p| text_records(&mut p.records, record_kind::NOTICE, id, text.as_bytes()));
}

/// `text` as `DeviceName` pieces of `kind` ([`name_pieces`]).
fn text_records(out: &mut Vec<DeviceRecord>, kind: u32, id: u32, text: &[u8]) {
    out.extend(name_pieces(kind, id, text).map(|piece| {
        // SAFETY: both are 128-byte repr(C) structs of plain integers (checked in xtrace-common).
        unsafe { core::mem::transmute::<DeviceName, DeviceRecord>(piece) }
    }));
}

/// Hands the records over while the tracer listens, in batches; drops them otherwise.
pub fn deliver() {
    let records = with_pending(|p| std::mem::take(&mut p.records));
    if !enabled!(xtrace_gpu_records_semaphore) {
        return;
    }
    for batch in records.chunks(MAX_RECORDS_PER_HIT) {
        usdt::gpu_records(batch.as_ptr(), batch.len());
    }
}

fn buffer_layout() -> Layout {
    // A power of two and a multiple of 8 bytes, as CUPTI asks.
    Layout::from_size_align(BUFFER_BYTES, 8).expect("a valid layout")
}

/// CUPTI asks for a buffer: a new one, or none (CUPTI drops and counts) past `MAX_BUFFERS`.
pub unsafe extern "C" fn request_buffer(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let _ = std::panic::catch_unwind(|| {
        let mut given: *mut u8 = core::ptr::null_mut();
        if OUTSTANDING.fetch_add(1, Ordering::AcqRel) < MAX_BUFFERS {
            // SAFETY: a non-zero size.
            given = unsafe { std::alloc::alloc(buffer_layout()) };
        }
        if given.is_null() {
            OUTSTANDING.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: CUPTI passes valid out-pointers.
        unsafe {
            *buffer = given;
            *size = if given.is_null() { 0 } else { BUFFER_BYTES };
            *max_records = 0;
        }
    });
}

/// CUPTI hands a buffer back: its records are read, then it is freed.
pub unsafe extern "C" fn buffer_complete(
    _ctx: *mut c_void,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        if buffer.is_null() {
            return;
        }
        if let Ok(cupti) = crate::device::bound() {
            // SAFETY: CUPTI filled `valid` bytes of the buffer with records.
            unsafe { read_buffer(cupti, buffer, valid) };
        }
        // SAFETY: the buffer came from `request_buffer` with this layout.
        unsafe { std::alloc::dealloc(buffer, buffer_layout()) };
        OUTSTANDING.fetch_sub(1, Ordering::AcqRel);
    });
}

/// `cuptiActivityRegisterCallbacks_v2`'s request callback: as [`request_buffer`].
pub unsafe extern "C" fn request_buffer_v2(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
    _info: *mut c_void,
) {
    // SAFETY: as CUPTI promises for the first three arguments.
    unsafe { request_buffer(buffer, size, max_records) }
}

/// `cuptiActivityRegisterCallbacks_v2`'s complete callback: as [`buffer_complete`].
pub unsafe extern "C" fn buffer_complete_v2(buffer: *mut u8, size: usize, valid: usize, _info: *mut c_void) {
    // SAFETY: as CUPTI promises for the buffer.
    unsafe { buffer_complete(core::ptr::null_mut(), 0, buffer, size, valid) }
}

/// # Safety
/// `buffer` holds `valid` bytes of CUPTI activity records.
unsafe fn read_buffer(cupti: &Cupti, buffer: *mut u8, valid: usize) {
    let mut record: *mut u8 = core::ptr::null_mut();
    let mut batch = Vec::new();
    with_pending(|p| {
        loop {
            // SAFETY: as the caller promised; CUPTI walks its own buffer (with the subscriber's
            // record layout when sharing CUPTI).
            let result = unsafe {
                match crate::device::shared() {
                    Some((handle, per)) => (per.next_record)(handle, buffer, valid, &mut record),
                    None => (cupti.next_record)(buffer, valid, &mut record),
                }
            };
            if result == MAX_LIMIT_REACHED || result != SUCCESS || record.is_null() {
                break;
            }
            // SAFETY: CUPTI returned a record inside the buffer.
            if let Some(r) = unsafe { convert(record, &mut p.names, &mut batch) } {
                batch.push(r);
            }
        }
        // The buffer's records on CLOCK_MONOTONIC, said before them when they were moved there.
        if let Some(moved) = crate::clock::check(&mut batch, crate::device::monotonic_ns()) {
            p.records.push(moved);
        }
        p.records.append(&mut batch);
    });
}

/// # Safety
/// `at` points to `n` readable bytes.
unsafe fn field<T: Copy>(at: *const u8, offset: usize) -> T {
    // SAFETY: within the record, as the caller checked by its kind.
    unsafe { at.add(offset).cast::<T>().read_unaligned() }
}

/// The `DeviceRecord` of one CUPTI record (None for a kind not read), after the `DeviceName`
/// pieces of a kernel name not sent before.
///
/// # Safety
/// `at` points to a whole activity record.
unsafe fn convert(
    at: *const u8,
    names: &mut HashMap<Vec<u8>, u32>,
    out: &mut Vec<DeviceRecord>,
) -> Option<DeviceRecord> {
    // SAFETY (all reads): at offsets inside a record of the kind read first (`cupti::layout`).
    unsafe {
        let k: u32 = field(at, layout::KIND);
        match k {
            kind::KERNEL | kind::CONCURRENT_KERNEL => {
                use layout::kernel as f;
                let name: *const c_char = field(at, f::NAME);
                let name_id = if name.is_null() {
                    0
                } else {
                    name_id(CStr::from_ptr(name).to_bytes(), names, out)
                };
                let shared: i32 = field::<i32>(at, f::STATIC_SHARED) + field::<i32>(at, f::DYNAMIC_SHARED);
                Some(DeviceRecord {
                    kind: record_kind::KERNEL,
                    device: field(at, f::DEVICE),
                    stream: field(at, f::STREAM),
                    correlation: field(at, f::CORRELATION),
                    start_ns: field(at, f::START),
                    end_ns: field(at, f::END),
                    name_id,
                    grid: field(at, f::GRID),
                    block: field(at, f::BLOCK),
                    shared_bytes: shared.max(0) as u32,
                    registers: field(at, f::REGISTERS),
                    graph_node_id: field(at, f::GRAPH_NODE),
                    graph_id: field(at, f::GRAPH),
                    ..DeviceRecord::default()
                })
            }
            kind::MEMCPY => {
                use layout::memcpy as f;
                Some(DeviceRecord {
                    kind: record_kind::MEMCPY,
                    device: field(at, f::DEVICE),
                    stream: field(at, f::STREAM),
                    correlation: field(at, f::CORRELATION),
                    start_ns: field(at, f::START),
                    end_ns: field(at, f::END),
                    bytes: field(at, f::BYTES),
                    copy_kind: field(at, f::COPY_KIND),
                    graph_node_id: field(at, f::GRAPH_NODE),
                    graph_id: field(at, f::GRAPH),
                    ..DeviceRecord::default()
                })
            }
            kind::MEMSET => {
                use layout::memset as f;
                Some(DeviceRecord {
                    kind: record_kind::MEMSET,
                    device: field(at, f::DEVICE),
                    stream: field(at, f::STREAM),
                    correlation: field(at, f::CORRELATION),
                    start_ns: field(at, f::START),
                    end_ns: field(at, f::END),
                    bytes: field(at, f::BYTES),
                    value: field(at, f::VALUE),
                    graph_node_id: field(at, f::GRAPH_NODE),
                    graph_id: field(at, f::GRAPH),
                    ..DeviceRecord::default()
                })
            }
            _ => None,
        }
    }
}

/// The id of kernel name `text` in this session, sending its pieces the first time.
fn name_id(text: &[u8], names: &mut HashMap<Vec<u8>, u32>, out: &mut Vec<DeviceRecord>) -> u32 {
    if let Some(&id) = names.get(text) {
        return id;
    }
    let id = names.len() as u32 + 1;
    names.insert(text.to_vec(), id);
    text_records(out, record_kind::NAME, id, text);
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use xtrace_common::gpu::{NAME_CHUNK, NAME_MAX};

    /// The (offset, length) of each piece `text` is sent as.
    fn pieces(text: &[u8]) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        text_records(&mut out, record_kind::NAME, 7, text);
        out.iter()
            .map(|r| {
                // SAFETY: both are 128-byte repr(C) structs of plain integers.
                let piece: DeviceName = unsafe { core::mem::transmute(*r) };
                assert_eq!((piece.kind, piece.id), (record_kind::NAME, 7));
                (piece.offset, piece.len)
            })
            .collect()
    }

    /// The last piece is shorter than a chunk, so the tracer knows the text is whole.
    #[test]
    fn a_text_ends_with_a_piece_shorter_than_a_chunk() {
        let chunk = NAME_CHUNK as u32;
        assert_eq!(pieces(b"vector_add"), [(0, 10)]);
        assert_eq!(pieces(b""), [(0, 0)]);
        assert_eq!(pieces(&[b'k'; NAME_CHUNK]), [(0, chunk), (chunk, 0)]);
        assert_eq!(pieces(&[b'k'; NAME_CHUNK + 1]), [(0, chunk), (chunk, 1)]);
        assert_eq!(
            pieces(&[b'k'; 2 * NAME_CHUNK]),
            [(0, chunk), (chunk, chunk), (2 * chunk, 0)]
        );
        // Cut at NAME_MAX bytes.
        let long = pieces(&[b'k'; 5000]);
        let sent: u32 = long.iter().map(|&(_, len)| len).sum();
        assert_eq!(sent as usize, NAME_MAX);
        assert!(long.last().unwrap().1 < chunk);
    }
}
