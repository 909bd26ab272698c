//! Functions of a file that has no symbol for them, found by their unwind entries. A stripped
//! executable, or a library's local and assembly functions (libcrypto's SHA-256 blocks, most of
//! libcuda), leave sampled addresses without a name, and each address would be a frame of its
//! own: ten samples in one function, ten frames. The call frame information (`.eh_frame`) that
//! unwinding needs has one entry (an FDE) per function with its address range, so such an
//! address is named by the file offset of its function's start, `libcrypto.so.3+0x29c240`, in
//! the `module+0xOFFSET` form of addresses without a name. Only the ELF headers and `.eh_frame`
//! are read, not the whole file.
use std::ops::Range;

use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
use object::{read::elf::ElfFile64, Endianness, Object, ObjectSection, ObjectSegment};

/// The file-offset ranges of the functions `.eh_frame` describes in ELF file `elf`, sorted and not
/// overlapping (of two overlapping entries the first is kept); none when it has no `.eh_frame`.
pub fn functions<'d, R: object::ReadRef<'d>>(elf: &ElfFile64<'d, Endianness, R>) -> Vec<Range<u64>> {
    if elf.endian() != Endianness::Little {
        return Vec::new();
    }
    let Some(section) = elf.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    let Ok(data) = section.data() else {
        return Vec::new();
    };
    // Segments map addresses to file offsets: (addresses, file offset of their start).
    let segments: Vec<(Range<u64>, u64)> = elf
        .segments()
        .map(|s| {
            let (offset, size) = s.file_range();
            (s.address()..s.address().saturating_add(size), offset)
        })
        .collect();
    let to_offset = |address: u64| {
        segments
            .iter()
            .find(|(range, _)| range.contains(&address))
            .and_then(|(range, offset)| (address - range.start).checked_add(*offset))
    };
    let functions: Vec<Range<u64>> = addresses(data, section.address())
        .into_iter()
        .filter_map(|range| {
            let start = to_offset(range.start)?;
            Some(start..start.checked_add(range.end - range.start)?)
        })
        .collect();
    disjoint(functions)
}

/// `ranges` sorted by start, without those that overlap an earlier one.
fn disjoint(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.sort_by_key(|r| (r.start, r.end));
    let mut kept: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        if kept.last().is_none_or(|last| range.start >= last.end) {
            kept.push(range);
        }
    }
    kept
}

/// The address ranges of the non-empty FDEs of an `.eh_frame` section loaded at `address`,
/// up to the first entry that cannot be parsed.
fn addresses(data: &[u8], address: u64) -> Vec<Range<u64>> {
    let eh_frame = EhFrame::new(data, LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(address);
    let mut entries = eh_frame.entries(&bases);
    let mut ranges = Vec::new();
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(|section, bases, offset| section.cie_from_offset(bases, offset)) else {
            continue;
        };
        // A function the linker discarded can leave an entry at address 0; a damaged one can
        // end past the address space (gimli's end wraps).
        let end = fde.initial_address().checked_add(fde.len());
        if let (true, Some(end)) = (fde.len() > 0 && fde.initial_address() > 0, end) {
            ranges.push(fde.initial_address()..end);
        }
    }
    ranges
}

/// The function holding file offset `offset`, in ranges sorted by offset.
pub fn find(functions: &[Range<u64>], offset: u64) -> Option<&Range<u64>> {
    crate::model::address::covering(functions, offset, Range::clone)
}

/// How a sampled offset in function `function` of `module` is shown: `libcrypto.so.3+0x29c240`.
pub fn name(function: &Range<u64>, module: &str) -> String {
    format!("{module}+{:#x}", function.start)
}

#[cfg(test)]
mod tests {
    use object::{ObjectSection, ObjectSymbol};

    use super::*;

    // The closures stay: `functions` is generic over the file's lifetime, which read_elf chooses.
    #[allow(clippy::redundant_closure)]
    #[test]
    fn overlapping_entries_are_dropped_and_offsets_found() {
        let ranges = disjoint(vec![0x180..0x200, 0x120..0x140, 0x100..0x180, 0x100..0x110]);
        assert_eq!(ranges, [0x100..0x110, 0x120..0x140, 0x180..0x200]);
        assert_eq!(find(&ranges, 0x13f), Some(&(0x120..0x140)));
        assert_eq!(find(&ranges, 0x110), None);
        assert_eq!(find(&ranges, 0x200), None);
        assert_eq!(
            name(&(0x29c240..0x29c57e), "libcrypto.so.3"),
            "libcrypto.so.3+0x29c240"
        );
        let read = |path| crate::elf::read_elf(path, |elf| functions(elf));
        assert!(read("/nonexistent").is_empty());
        assert!(read("/proc/self/status").is_empty());
    }

    /// Every one of these exported functions of the C library this test runs with starts where
    /// the unwind entry holding it starts. Offsets come from the symbol's section here, from the
    /// segments in `functions`.
    #[allow(clippy::redundant_closure)]
    #[test]
    fn libc_functions_start_at_their_unwind_entries() {
        let path = &crate::test_libc();
        let functions = crate::elf::read_elf(path, |elf| functions(elf));
        assert!(functions.len() > 1000, "{} entries in {path}", functions.len());
        assert!(functions.windows(2).all(|w| w[0].end <= w[1].start));
        let data = std::fs::read(path).unwrap();
        let elf = object::File::parse(data.as_slice()).unwrap();
        for name in ["malloc", "qsort", "strtol", "fopen", "pthread_create"] {
            let symbol = elf
                .dynamic_symbols()
                .find(|s| s.name() == Ok(name))
                .unwrap_or_else(|| panic!("{name} in {path}"));
            let section = elf.section_by_index(symbol.section_index().unwrap()).unwrap();
            let offset = symbol.address() - section.address() + section.file_range().unwrap().0;
            let function = find(&functions, offset + 1).unwrap_or_else(|| panic!("no entry for {name}"));
            assert_eq!(function.start, offset, "{name}");
        }
    }
}
