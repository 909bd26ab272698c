//! The framing of trace.perfetto-trace: a `Trace` message is a run of `packet` fields (field 1,
//! length-delimited), each a `TracePacket`. Finds the next one whole in a reader's buffer, or
//! reads it out of the file, refusing a field that is not a packet, a length past
//! [`MAX_PACKET`], and a file that ends inside one. [`super::perfetto_file`] decodes them.
use std::io::{BufRead, ErrorKind, Read};

use crate::pipeline::perfetto::proto::TRACE_PACKET_FIELD;

/// The largest packet read (xtrace's are a few hundred bytes; Perfetto's own stay under 1 MiB).
pub(super) const MAX_PACKET: u64 = 64 << 20;

/// Where the next packet lies in `bytes` when they hold it whole: the length of its key and
/// length, and its own. None when they hold less, or something [`next_packet`] refuses.
pub(super) fn buffered_packet(bytes: &[u8]) -> Option<(usize, usize)> {
    let (key, key_len) = slice_varint(bytes)?;
    if key != u64::from(TRACE_PACKET_FIELD << 3 | 2) {
        return None;
    }
    let (len, len_len) = slice_varint(&bytes[key_len..])?;
    let head = key_len + len_len;
    (len <= MAX_PACKET && (bytes.len() - head) as u64 >= len).then_some((head, len as usize))
}

/// A base-128 varint at the start of `bytes`, and its length; None when they end inside it or it
/// is longer than 10 bytes.
fn slice_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().take(10).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Reads the next `Trace.packet` field into `buf`, advancing `offset` past it: false at the end
/// of the file, an error when the file ends inside a packet or holds something else.
pub(super) fn next_packet(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    offset: &mut u64,
) -> Result<bool, String> {
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
