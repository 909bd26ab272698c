//! Where `--inject`'s stage 0 runs in the target: the zero padding after a library's code. An
//! executable `PT_LOAD` segment rarely ends on a page boundary, and the mapping of its last page
//! runs on to the page's end; with the layouts linkers give today (`-z separate-code`) the rest of
//! that page is zeros that nothing refers to. Stage 0 is written there (the write makes a private
//! copy of that page in this process only) because it has to run before the thread has any memory
//! of xtrace's: an `mmap` made in place of the thread's own call could not resume it if xtrace
//! died during it.
use std::{fs::File, path::PathBuf};

use object::{Object, ObjectSegment};

use super::trampoline::{stage_code_only, PAGE};
use crate::{
    procfs::MapsLine,
    target::{library_matches, Process},
};

/// Where stage 0 goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    pub address: u64,
    /// The library whose padding it is, for messages.
    pub library: String,
}

/// A `PT_LOAD` segment: where it lies in the file and at which address.
#[derive(Clone, Copy, Debug)]
struct Load {
    offset: u64,
    file_size: u64,
    address: u64,
    memory_size: u64,
    executable: bool,
}

/// A mapping of a file: its addresses and the file offset at its start.
#[derive(Clone, Copy, Debug)]
struct Mapped {
    start: u64,
    end: u64,
    offset: u64,
}

/// The first place, in libc, the loader, then the other libraries with code mapped by `process`
/// (`files`; its memory `mem`), where `len` bytes fit in the padding after the code and are zeros
/// (or a stage 0 an earlier `--inject` left when it was killed).
pub fn find(process: &Process, mem: &File, files: &[MapsLine], len: usize) -> Option<Site> {
    find_in(mem, files, len, |line| process.mapped(line).open)
}

fn find_in(mem: &File, files: &[MapsLine], len: usize, open: impl Fn(&MapsLine) -> PathBuf) -> Option<Site> {
    let rank = |m: &MapsLine| {
        if library_matches(m.path, "libc.so.6") {
            0
        } else if library_matches(m.path, "ld-linux-x86-64.so.2") {
            1
        } else {
            2
        }
    };
    let mut code: Vec<&MapsLine> = files.iter().filter(|m| m.perms == "r-xp").collect();
    code.sort_by_key(|m| rank(m));
    code.into_iter().find_map(|line| {
        let mapped = mapped(line)?;
        let padding = padding(&loads(&open(line))?, mapped)?;
        let address = padding.start.next_multiple_of(16);
        let fits = address
            .checked_add(len as u64)
            .is_some_and(|end| end <= padding.end);
        (fits && is_free(mem, address, len)).then(|| Site {
            address,
            library: line.path.to_owned(),
        })
    })
}

fn mapped(line: &MapsLine) -> Option<Mapped> {
    let addresses = line.addresses()?;
    Some(Mapped {
        start: addresses.start,
        end: addresses.end,
        offset: u64::from_str_radix(line.offset, 16).ok()?,
    })
}

/// The `PT_LOAD` segments of the ELF file at `path`.
fn loads(path: &PathBuf) -> Option<Vec<Load>> {
    let file = crate::elf::LazyElf::open(path).ok()?;
    let parsed = file.parse().ok()?;
    let loads = parsed.segments().filter_map(|segment| {
        let object::SegmentFlags::Elf { p_flags } = segment.flags() else {
            return None;
        };
        let (offset, file_size) = segment.file_range();
        Some(Load {
            offset,
            file_size,
            address: segment.address(),
            memory_size: segment.size(),
            executable: p_flags & object::elf::PF_X != 0,
        })
    });
    Some(loads.collect())
}

/// The addresses in `mapped` past the end of the executable segment mapped there, up to the
/// mapping's end: None unless the mapping ends with that segment's last page, the segment has
/// all its bytes in the file, and no other segment is loaded at those addresses.
fn padding(loads: &[Load], mapped: Mapped) -> Option<std::ops::Range<u64>> {
    let (index, code) = loads.iter().enumerate().find(|(_, l)| {
        l.executable && l.offset & !(PAGE - 1) <= mapped.offset && mapped.offset < l.offset + l.file_size
    })?;
    if code.memory_size != code.file_size {
        return None;
    }
    let code_end = code.address + code.file_size;
    let page_end = code_end.next_multiple_of(PAGE);
    let shared = loads
        .iter()
        .enumerate()
        .any(|(i, l)| i != index && l.address < page_end && code_end < l.address + l.memory_size);
    let end = mapped
        .start
        .checked_add(code.offset + code.file_size)?
        .checked_sub(mapped.offset)?;
    (!shared && end.next_multiple_of(PAGE) == mapped.end && end < mapped.end).then_some(end..mapped.end)
}

/// Whether `pid` still maps `site`'s library's code over it.
pub fn still_there(pid: u32, site: &Site) -> bool {
    crate::procfs::maps_text(pid).is_ok_and(|maps| {
        maps.lines().filter_map(MapsLine::file).any(|m| {
            m.perms == "r-xp"
                && m.path == site.library
                && m.addresses().is_some_and(|a| a.contains(&site.address))
        })
    })
}

/// Whether the `len` bytes at `address` are free for stage 0 ([`is_free_bytes`]).
fn is_free(mem: &File, address: u64, len: usize) -> bool {
    super::preflight::read_at(mem, address, len).is_some_and(|bytes| is_free_bytes(&bytes))
}

/// Whether `bytes` are zeros, or a stage 0 a killed `--inject` left there.
pub fn is_free_bytes(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0) || bytes.starts_with(stage_code_only())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(offset: u64, file_size: u64, address: u64, executable: bool) -> Load {
        Load {
            offset,
            file_size,
            address,
            memory_size: file_size,
            executable,
        }
    }

    /// Debian 12's libc.so.6: code at 0x26000, 0x1550fc bytes, the read-only data a page on.
    fn libc() -> Vec<Load> {
        vec![
            load(0, 0x25f10, 0, false),
            load(0x26000, 0x1550fc, 0x26000, true),
            load(0x17c000, 0x53e0e, 0x17c000, false),
        ]
    }

    #[test]
    fn the_padding_is_the_rest_of_the_codes_last_page() {
        let mapped = Mapped {
            start: 0x7f00_0002_6000,
            end: 0x7f00_0017_c000,
            offset: 0x26000,
        };
        assert_eq!(padding(&libc(), mapped), Some(0x7f00_0017_b0fc..0x7f00_0017_c000));
    }

    #[test]
    fn no_padding_where_another_segment_or_mapping_may_use_it() {
        let mapped = Mapped {
            start: 0x7f00_0002_6000,
            end: 0x7f00_0017_c000,
            offset: 0x26000,
        };
        // Data loaded into the same page (an old layout without separate code).
        let mut shared = libc();
        shared[2].address = 0x17b200;
        assert_eq!(padding(&shared, mapped), None);
        // A mapping that is not the segment's whole last page (split by mprotect).
        let split = Mapped {
            end: 0x7f00_0017_b000,
            ..mapped
        };
        assert_eq!(padding(&libc(), split), None);
        // Code whose segment is longer in memory than in the file.
        let mut bss = libc();
        bss[1].memory_size += 0x10;
        assert_eq!(padding(&bss, mapped), None);
        // Code ending on a page boundary leaves none.
        let mut whole = libc();
        whole[1].file_size = 0x156000;
        assert_eq!(padding(&whole, mapped), None);
    }

    #[test]
    fn a_site_is_found_in_this_processs_libc() {
        let maps = crate::procfs::maps_text(std::process::id()).unwrap();
        let files: Vec<MapsLine> = maps.lines().filter_map(MapsLine::file).collect();
        let len = super::super::trampoline::stage_len();
        let mem = File::open("/proc/self/mem").unwrap();
        let site =
            find_in(&mem, &files, len, |m| PathBuf::from(m.path)).expect("a site in a library of this test");
        assert!(library_matches(&site.library, "libc.so.6"), "{site:?}");
        assert_eq!(site.address % 16, 0);
        // It lies in libc's code mapping, past its code.
        let code = files
            .iter()
            .find(|m| m.perms == "r-xp" && m.path == site.library)
            .and_then(mapped)
            .unwrap();
        assert!(code.start < site.address && site.address + len as u64 <= code.end);
    }
}
