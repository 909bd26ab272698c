//! Naming Python frames from the process's memory while it lives: a code object's qualified name,
//! file and definition line, checked to be a code object (`ob_type` is `PyCode_Type`) of the
//! identity the kernel saw, and the line of an instruction from its line table.
use super::layout::CodeLayout;

/// Reads `len` bytes at `address` of process `pid` (`process_vm_readv`); None when any is not
/// readable.
pub fn read(pid: u32, address: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` describes `buf`, which lives across the call; the remote range is only read
    // by the kernel, which checks it.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    (n == len as isize).then_some(buf)
}

/// The u64 at `address` of process `pid`.
pub fn read_u64(pid: u32, address: u64) -> Option<u64> {
    read(pid, address, 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

fn u64_at(bytes: &[u8], at: u32) -> Option<u64> {
    Some(u64::from_le_bytes(
        bytes.get(at as usize..at as usize + 8)?.try_into().ok()?,
    ))
}

fn i32_at(bytes: &[u8], at: u32) -> Option<i32> {
    Some(i32::from_le_bytes(
        bytes.get(at as usize..at as usize + 4)?.try_into().ok()?,
    ))
}

/// What a code object says of its function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Code {
    /// `co_qualname` (3.11+) or `co_name`.
    pub qualname: String,
    /// `co_filename`.
    pub filename: String,
    pub firstlineno: u32,
    linetable: Vec<u8>,
    /// Where its instructions start, from the object's address (3.11+).
    code_adaptive: Option<u32>,
    /// Index of its first traceable instruction (3.11+).
    firsttraceable: u32,
}

/// Strings longer are not read: no name or path is that long.
const MAX_STR: u64 = 4096;
/// Line tables longer are not read.
const MAX_TABLE: u64 = 1 << 20;

/// The code object at `code` in process `pid`, if it is one (its type is `code_type`) and has the
/// `identity` the kernel read (see `xtrace_common::python::PyFrame::identity`).
pub fn code(pid: u32, layout: &CodeLayout, code_type: u64, code: u64, identity: u64) -> Option<Code> {
    let end = [layout.filename, layout.name, layout.linetable]
        .into_iter()
        .chain(layout.qualname)
        .map(|o| o + 8)
        .chain(layout.firsttraceable.map(|o| o + 4))
        .max()?;
    let bytes = read(pid, code, end as usize)?;
    if u64_at(&bytes, 8)? != code_type {
        return None;
    }
    let firstlineno = i32_at(&bytes, layout.firstlineno)? as u32;
    let name = u64_at(&bytes, layout.name)?;
    if identity != 0 && identity != ((u64::from(firstlineno) << 32) | ((name >> 3) & 0xffff_ffff)) {
        return None;
    }
    let qualname = string(
        pid,
        layout,
        u64_at(&bytes, layout.qualname.unwrap_or(layout.name))?,
    )?;
    let filename = string(pid, layout, u64_at(&bytes, layout.filename)?)?;
    let table = u64_at(&bytes, layout.linetable)?;
    let size = read_u64(pid, table + 16).filter(|&n| n <= MAX_TABLE)?;
    let linetable = if size == 0 {
        Vec::new()
    } else {
        read(pid, table + 32, size as usize)?
    };
    Some(Code {
        qualname,
        filename,
        firstlineno,
        linetable,
        code_adaptive: layout.code_adaptive,
        firsttraceable: layout.firsttraceable.and_then(|o| i32_at(&bytes, o)).unwrap_or(0) as u32,
    })
}

/// A `str` object's text: compact ASCII, or compact with 1, 2 or 4 bytes a character.
fn string(pid: u32, layout: &CodeLayout, address: u64) -> Option<String> {
    let head = read(pid, address, 40)?;
    let length = u64_at(&head, 16).filter(|&n| n <= MAX_STR)?;
    let state = u32::from_le_bytes(head.get(32..36)?.try_into().ok()?);
    let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1 == 1, (state >> 6) & 1 == 1);
    if !compact {
        return None;
    }
    if ascii {
        let data = read(pid, address + u64::from(layout.ascii_size), length as usize)?;
        return String::from_utf8(data).ok();
    }
    let width = match kind {
        1 | 2 | 4 => u64::from(kind),
        _ => return None,
    };
    let data = read(
        pid,
        address + u64::from(layout.compact_size),
        (length * width) as usize,
    )?;
    let chars = data.chunks_exact(width as usize).map(|c| {
        let mut v = [0u8; 4];
        v[..c.len()].copy_from_slice(c);
        char::from_u32(u32::from_le_bytes(v)).unwrap_or(char::REPLACEMENT_CHARACTER)
    });
    Some(chars.collect())
}

impl Code {
    /// The instruction index (in 2-byte code units) of `instr` as the kernel sent it, or None
    /// for a frame that has not begun its body (CPython leaves such incomplete frames out).
    pub fn unit(&self, instr: u32) -> Option<u32> {
        match self.code_adaptive {
            // 3.10: f_lasti counts code units; -1 before the frame's first instruction.
            None => (instr as i32 >= 0).then_some(instr),
            Some(start) => {
                let unit = instr.checked_sub(start)? / 2;
                (unit >= self.firsttraceable).then_some(unit)
            }
        }
    }

    /// The line of code unit `unit`, from the line table; the definition line where the table
    /// says nothing.
    pub fn line(&self, unit: u32) -> u32 {
        let line = match self.code_adaptive {
            None => lines_310(&self.linetable, self.firstlineno, unit.saturating_mul(2)),
            Some(_) => locations(&self.linetable, self.firstlineno, unit),
        };
        line.unwrap_or(self.firstlineno)
    }
}

/// 3.10's line table: (bytes delta, signed line delta) pairs, -128 for "no line".
fn lines_310(table: &[u8], first: u32, offset: u32) -> Option<u32> {
    let (mut start, mut line) = (0u32, i64::from(first));
    for pair in table.chunks_exact(2) {
        let end = start + u32::from(pair[0]);
        let delta = pair[1] as i8;
        if delta != -128 {
            line += i64::from(delta);
        }
        if start <= offset && offset < end {
            return (delta != -128).then_some(line as u32);
        }
        start = end;
    }
    None
}

/// 3.11+'s location table (`Objects/locations.md` in CPython): entries of a first byte
/// `1CCCCLLL` (code C, L+1 code units) and varints after it.
fn locations(table: &[u8], first: u32, unit: u32) -> Option<u32> {
    let mut at = 0usize;
    let (mut start, mut line) = (0u32, i64::from(first));
    let varint = |at: &mut usize| -> Option<u64> {
        let (mut value, mut shift) = (0u64, 0);
        loop {
            let b = *table.get(*at)?;
            *at += 1;
            value |= u64::from(b & 63) << shift;
            shift += 6;
            if b & 64 == 0 || shift > 60 {
                return Some(value);
            }
        }
    };
    let svarint = |at: &mut usize| -> Option<i64> {
        let v = varint(at)?;
        Some(if v & 1 == 1 {
            -((v >> 1) as i64)
        } else {
            (v >> 1) as i64
        })
    };
    while at < table.len() {
        let head = table[at];
        at += 1;
        let (code, len) = ((head >> 3) & 15, u32::from(head & 7) + 1);
        let this = match code {
            15 => None,
            14 => {
                line += svarint(&mut at)?;
                varint(&mut at)?;
                varint(&mut at)?;
                varint(&mut at)?;
                Some(line)
            }
            13 => {
                line += svarint(&mut at)?;
                Some(line)
            }
            10..=12 => {
                line += i64::from(code - 10);
                at += 2;
                Some(line)
            }
            _ => {
                at += 1;
                Some(line)
            }
        };
        if start <= unit && unit < start + len {
            return this.map(|l| l as u32);
        }
        start += len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_310_table_adds_line_deltas_up_to_the_offset() {
        // 6 bytes on the first line + 1, 4 bytes with no line, 8 bytes 2 lines further.
        let table = [6, 1, 4, 0x80, 8, 2];
        assert_eq!(lines_310(&table, 10, 0), Some(11));
        assert_eq!(lines_310(&table, 10, 7), None);
        assert_eq!(lines_310(&table, 10, 12), Some(13));
        assert_eq!(lines_310(&table, 10, 18), None);
    }

    #[test]
    fn the_location_table_reads_each_entry_form() {
        // No-column form (+1 line, 2 units), one-line form (+2, 1 unit), long form (-3, 1
        // unit), short form (same line, 3 units), no location (1 unit).
        let table = [
            0x80 | (13 << 3) | 1,
            2,
            0x80 | (12 << 3),
            0,
            0,
            0x80 | (14 << 3),
            7,
            0,
            0,
            0,
            0x80 | 2,
            0,
            0x80 | (15 << 3),
        ];
        let line = |unit| locations(&table, 100, unit);
        assert_eq!((line(0), line(1)), (Some(101), Some(101)));
        assert_eq!(line(2), Some(103));
        assert_eq!(line(3), Some(100));
        assert_eq!((line(4), line(6)), (Some(100), Some(100)));
        assert_eq!(line(7), None);
    }
}
