//! The kernel's side band, read as `perf record` reads it: a software dummy perf event on each
//! online CPU, which counts nothing, and into whose ring buffer the kernel writes a record of every
//! executable mapping made on that CPU (MMAP2), every exec (COMM, flagged as an exec) and every
//! fork and exit (FORK, EXIT), each stamped on CLOCK_MONOTONIC like the samples. A process that
//! lives a few milliseconds is gone before its /proc/PID/maps can be read; these records name its
//! code all the same. The events are fd-based: closing them (drop) leaves nothing in the kernel.
use std::{
    os::fd::{FromRawFd, OwnedFd},
    ptr::NonNull,
    sync::atomic::{AtomicU64, Ordering},
};

use aya_obj::generated::{
    perf_event_attr, perf_event_mmap_page, perf_event_sample_format, perf_event_type, perf_sw_ids,
    perf_type_id, PERF_FLAG_FD_CLOEXEC,
};

use crate::procfs::Mapping;

/// Data pages of each CPU's ring (128 KiB): under the kernel's per-user allowance for perf buffers
/// (`kernel.perf_event_mlock_kb`, 516 KiB per CPU), so that no memory-lock limit is charged.
const DATA_PAGES: usize = 32;

/// `misc` of a COMM record written by an exec.
const MISC_COMM_EXEC: u16 = 1 << 13;
/// `misc` of a PERF_RECORD_MMAP2 that holds a build id where the device and inode would be.
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;

/// What the side band says happened, at `ns` (CLOCK_MONOTONIC).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Process `pid` was forked by process `parent` (threads are not reported).
    Fork { pid: u32, parent: u32, ns: u64 },
    /// Process `pid` replaced its program.
    Exec { pid: u32, ns: u64 },
    /// Process `pid` mapped executable code.
    Map { pid: u32, ns: u64, mapping: Mapping },
    /// The last thread of process `pid` exited.
    Exit { pid: u32, ns: u64 },
}

impl Change {
    pub fn ns(&self) -> u64 {
        match self {
            Change::Fork { ns, .. }
            | Change::Exec { ns, .. }
            | Change::Map { ns, .. }
            | Change::Exit { ns, .. } => *ns,
        }
    }
}

/// The side band of every online CPU.
pub struct Sideband {
    rings: Vec<Ring>,
    /// Records the kernel dropped because a ring was full (its LOST records).
    pub lost: u64,
}

impl std::fmt::Debug for Sideband {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sideband")
            .field("cpus", &self.rings.len())
            .field("lost", &self.lost)
            .finish()
    }
}

impl Sideband {
    /// Opens and maps the event of every online CPU.
    pub fn open() -> std::io::Result<Self> {
        let cpus = aya::util::online_cpus()
            .map_err(|(what, e)| std::io::Error::new(e.kind(), format!("{what}: {e}")))?;
        let rings = cpus.into_iter().map(Ring::open).collect::<std::io::Result<_>>()?;
        Ok(Sideband { rings, lost: 0 })
    }

    /// Every record written since the last read: each CPU's in time order, one CPU after another
    /// (a child's records may be on another CPU than its fork). `Images` puts them in time order
    /// together with the records still pending.
    pub fn read(&mut self) -> Vec<Change> {
        let mut changes = Vec::new();
        for ring in &mut self.rings {
            ring.read(|record| match parse(record) {
                Some(Parsed::Change(change)) => changes.push(change),
                Some(Parsed::Lost(n)) => self.lost += n,
                None => {}
            });
        }
        changes
    }
}

/// One CPU's event and its mapped ring: a metadata page, then `DATA_PAGES` of records.
struct Ring {
    _fd: OwnedFd,
    base: NonNull<u8>,
    len: usize,
    /// The record being copied out (records may wrap around the end of the ring).
    record: Vec<u8>,
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

impl Ring {
    fn open(cpu: u32) -> std::io::Result<Self> {
        // SAFETY: an all-zero perf_event_attr is valid (every field is an integer or a bitfield).
        let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
        attr.type_ = perf_type_id::PERF_TYPE_SOFTWARE as u32;
        attr.size = std::mem::size_of::<perf_event_attr>() as u32;
        attr.config = perf_sw_ids::PERF_COUNT_SW_DUMMY as u64;
        attr.sample_type = perf_event_sample_format::PERF_SAMPLE_TID as u64
            | perf_event_sample_format::PERF_SAMPLE_TIME as u64;
        attr.set_mmap(1);
        attr.set_mmap2(1);
        attr.set_comm(1);
        attr.set_comm_exec(1);
        attr.set_task(1);
        attr.set_sample_id_all(1);
        attr.set_use_clockid(1);
        attr.clockid = libc::CLOCK_MONOTONIC;
        // SAFETY: a valid attr that outlives the call; the returned fd is owned below.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const perf_event_attr,
                -1i32,
                cpu as i32,
                -1i32,
                PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(std::io::Error::new(
                e.kind(),
                format!("opening the side-band event of CPU {cpu}: {e}"),
            ));
        }
        // SAFETY: a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = page * (1 + DATA_PAGES);
        // SAFETY: maps the event's ring read-write (the reader writes data_tail), shared with the
        // kernel; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(std::io::Error::new(
                e.kind(),
                format!("mapping the side-band ring of CPU {cpu}: {e}"),
            ));
        }
        Ok(Ring {
            _fd: fd,
            base: NonNull::new(base.cast()).expect("mmap succeeded"),
            len,
            record: Vec::new(),
        })
    }

    /// Hands each unread record (header included) to `each`, then frees their room.
    fn read(&mut self, mut each: impl FnMut(&[u8])) {
        let meta = self.base.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: the metadata page is mapped for the life of `self`; data_head and data_tail are
        // naturally aligned u64s that the kernel and this reader share, accessed atomically.
        let (head, tail, offset, size) = unsafe {
            let head = AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_head)).load(Ordering::Acquire);
            let tail = AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_tail)).load(Ordering::Relaxed);
            (
                head,
                tail,
                (*meta).data_offset as usize,
                (*meta).data_size as usize,
            )
        };
        if head == tail || size == 0 || offset + size > self.len {
            return;
        }
        // The data area lies inside the mapping (checked above). It is read through a raw pointer,
        // never as a slice: the kernel writes the part outside tail..head meanwhile.
        // SAFETY: in bounds of the mapping.
        let data = Data(unsafe { self.base.as_ptr().add(offset) }, size);
        let mut at = tail;
        while head.saturating_sub(at) >= 8 {
            copy_wrapping(data, at, 8, &mut self.record);
            let len = u16::from_le_bytes([self.record[6], self.record[7]]) as u64;
            if len < 8 || head - at < len {
                break; // never written so by the kernel; stop rather than misread
            }
            copy_wrapping(data, at, len as usize, &mut self.record);
            each(&self.record);
            at += len;
        }
        // SAFETY: as above; the release store hands the room read back to the kernel.
        unsafe {
            AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_tail)).store(head, Ordering::Release)
        };
    }
}

/// A ring's data area: its start and size.
#[derive(Clone, Copy)]
struct Data(*const u8, usize);

/// Copies `len` bytes (at most the ring's size) of the ring `data` from position `at` (which
/// wraps) into `out`.
fn copy_wrapping(Data(base, size): Data, at: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    let len = len.min(size);
    let start = (at % size as u64) as usize;
    let first = len.min(size - start);
    out.reserve(len);
    // SAFETY: both runs lie inside the data area (start + first <= size, len - first <= size),
    // which the kernel has finished writing between tail and head; `out` has room for `len`.
    unsafe {
        std::ptr::copy_nonoverlapping(base.add(start), out.as_mut_ptr(), first);
        std::ptr::copy_nonoverlapping(base, out.as_mut_ptr().add(first), len - first);
        out.set_len(len);
    }
}

enum Parsed {
    Change(Change),
    Lost(u64),
}

/// Reads one record: header (type u32, misc u16, size u16), body, and with `sample_id_all` the
/// trailing (pid u32, tid u32, time u64) of `PERF_SAMPLE_TID | PERF_SAMPLE_TIME`.
fn parse(record: &[u8]) -> Option<Parsed> {
    let u32_at = |at: usize| Some(u32::from_le_bytes(record.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(record.get(at..at + 8)?.try_into().ok()?));
    let kind = u32_at(0)?;
    let misc = u16::from_le_bytes(record.get(4..6)?.try_into().ok()?);
    let time = u64_at(record.len().checked_sub(8)?)?;
    let (pid, tid) = (u32_at(8)?, u32_at(12)?);
    Some(match kind {
        k if k == perf_event_type::PERF_RECORD_MMAP2 as u32 => {
            // pid, tid, addr, len, pgoff, (maj, min, ino, ino_generation | build id), prot, flags,
            // then the NUL-terminated name, padded to 8, before the 16-byte sample id.
            let (addr, len, pgoff) = (u64_at(16)?, u64_at(24)?, u64_at(32)?);
            // The file's device and inode, unless the record holds a build id there instead.
            let file = (misc & MISC_MMAP_BUILD_ID == 0)
                .then(|| Some((libc::makedev(u32_at(40)?, u32_at(44)?), u64_at(48)?)))
                .flatten()
                .filter(|&(_, inode)| inode != 0);
            let name = record.get(72..record.len().checked_sub(16)?)?;
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            let path = match String::from_utf8_lossy(name).into_owned() {
                // Anonymous executable memory, as /proc/PID/maps shows it: no name.
                anon if anon == "//anon" => String::new(),
                path => path,
            };
            Parsed::Change(Change::Map {
                pid,
                ns: time,
                mapping: Mapping {
                    start: addr,
                    end: addr.checked_add(len)?,
                    offset: pgoff,
                    path,
                    // Mapped now: the file at the path is this one.
                    deleted: false,
                    file,
                },
            })
        }
        k if k == perf_event_type::PERF_RECORD_COMM as u32 && misc & MISC_COMM_EXEC != 0 && pid == tid => {
            Parsed::Change(Change::Exec { pid, ns: time })
        }
        // pid, ppid, tid, ptid, time: a new process has tid == pid and another parent process.
        k if k == perf_event_type::PERF_RECORD_FORK as u32 => {
            let (parent, child_tid) = (u32_at(12)?, u32_at(16)?);
            if child_tid != pid || parent == pid {
                return None;
            }
            Parsed::Change(Change::Fork {
                pid,
                parent,
                ns: u64_at(24)?,
            })
        }
        k if k == perf_event_type::PERF_RECORD_EXIT as u32 => {
            if u32_at(16)? != pid {
                return None; // a thread
            }
            Parsed::Change(Change::Exit { pid, ns: u64_at(24)? })
        }
        k if k == perf_event_type::PERF_RECORD_LOST as u32 => Parsed::Lost(u64_at(16)?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: perf_event_type, misc: u16, body: &[u8], time: u64) -> Vec<u8> {
        let size = 8 + body.len() + 16;
        let mut r = Vec::new();
        r.extend_from_slice(&(kind as u32).to_le_bytes());
        r.extend_from_slice(&misc.to_le_bytes());
        r.extend_from_slice(&(size as u16).to_le_bytes());
        r.extend_from_slice(body);
        r.extend_from_slice(&[0; 8]); // sample id: pid, tid
        r.extend_from_slice(&time.to_le_bytes());
        r
    }

    fn words(values: &[u32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn change(record: &[u8]) -> Option<Change> {
        match parse(record)? {
            Parsed::Change(c) => Some(c),
            Parsed::Lost(_) => None,
        }
    }

    #[test]
    fn mappings_execs_forks_and_exits() {
        let mut body = words(&[42, 43]);
        // addr, len, pgoff, (maj, min), ino, ino_generation
        for v in [0x5555_0000_1000u64, 0x2000, 0x1000, 0, 0, 0] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend_from_slice(&[0; 8]); // prot, flags
        body.extend_from_slice(b"/usr/bin/app\0\0\0\0");
        let map = record(perf_event_type::PERF_RECORD_MMAP2, 0, &body, 77);
        assert_eq!(
            change(&map),
            Some(Change::Map {
                pid: 42,
                ns: 77,
                mapping: Mapping {
                    start: 0x5555_0000_1000,
                    end: 0x5555_0000_3000,
                    offset: 0x1000,
                    path: "/usr/bin/app".into(),
                    deleted: false,
                    file: None,
                }
            })
        );
        let mut anon = body.clone();
        anon.truncate(body.len() - 16);
        anon.extend_from_slice(b"//anon\0\0");
        let anon = record(perf_event_type::PERF_RECORD_MMAP2, 0, &anon, 78);
        assert!(matches!(change(&anon), Some(Change::Map { mapping, .. }) if mapping.path.is_empty()));

        let comm = |misc, tid| {
            record(
                perf_event_type::PERF_RECORD_COMM,
                misc,
                &[words(&[42, tid]), b"ls\0\0\0\0\0\0".to_vec()].concat(),
                90,
            )
        };
        assert_eq!(
            change(&comm(MISC_COMM_EXEC, 42)),
            Some(Change::Exec { pid: 42, ns: 90 })
        );
        assert_eq!(change(&comm(0, 42)), None, "a rename (prctl) is no exec");

        let task =
            |kind, ids: [u32; 4]| record(kind, 0, &[words(&ids), 55u64.to_le_bytes().to_vec()].concat(), 56);
        assert_eq!(
            change(&task(perf_event_type::PERF_RECORD_FORK, [50, 42, 50, 42])),
            Some(Change::Fork {
                pid: 50,
                parent: 42,
                ns: 55
            })
        );
        assert_eq!(
            change(&task(perf_event_type::PERF_RECORD_FORK, [42, 42, 51, 42])),
            None,
            "a thread"
        );
        assert_eq!(
            change(&task(perf_event_type::PERF_RECORD_EXIT, [50, 42, 50, 42])),
            Some(Change::Exit { pid: 50, ns: 55 })
        );
        assert_eq!(
            change(&task(perf_event_type::PERF_RECORD_EXIT, [42, 42, 51, 42])),
            None
        );

        let lost = record(
            perf_event_type::PERF_RECORD_LOST,
            0,
            &[7u64.to_le_bytes(), 9u64.to_le_bytes()].concat(),
            1,
        );
        assert!(matches!(parse(&lost), Some(Parsed::Lost(9))));
        assert!(parse(&lost[..6]).is_none(), "short");
    }

    #[test]
    fn records_are_copied_across_the_end_of_the_ring() {
        let data: Vec<u8> = (0..16).collect();
        let data = Data(data.as_ptr(), data.len());
        let mut out = Vec::new();
        copy_wrapping(data, 30, 5, &mut out);
        assert_eq!(out, [14, 15, 0, 1, 2]);
        copy_wrapping(data, 2, 3, &mut out);
        assert_eq!(out, [2, 3, 4]);
    }
}
