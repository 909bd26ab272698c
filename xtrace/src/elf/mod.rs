//! ELF files, the one layer that opens and parses them for the probes, the pipeline, CPython,
//! CUDA and the profile: [`Elf`] holds one file's bytes (read once and shared while unchanged,
//! mapped, or copied from memory), [`LazyElf`] and [`read_elf`] read one only as far as it
//! is looked at, [`ExecSegments`] places a file in a mapping of its code, `fde` finds functions
//! by their unwind entries, `debug_file` finds a stripped file's separate debug file,
//! `symbolize` names addresses through blazesym. (Symbol tables are `probes::elf`'s.)
use std::fs::File;

use object::{
    read::{elf::ElfFile64, ReadCache},
    Endianness, Object, ObjectSegment,
};

use crate::procfs::Mapping;

pub mod debug_file;
pub mod fde;
mod file;
pub mod plt;
pub mod symbolize;

pub use file::{own_vdso, Elf, LazyElf, LazyObject};

/// Runs `read` on the ELF64 file at `path`, which is read through a cache only as far as `read`
/// looks (headers, a few sections), not whole; `T::default()` when the file cannot be opened or is
/// not ELF64.
pub(crate) fn read_elf<T: Default>(
    path: &str,
    read: impl FnOnce(&ElfFile64<'_, Endianness, &ReadCache<File>>) -> T,
) -> T {
    let Ok(file) = File::open(path) else {
        return T::default();
    };
    let cache = ReadCache::new(file);
    match ElfFile64::<Endianness, _>::parse(&cache) {
        Ok(elf) => read(&elf),
        Err(_) => T::default(),
    }
}

/// Bytes as lowercase hex digits, as build IDs are written (`readelf -n`, `.build-id/` paths).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The build ID of the ELF file at `path` (its GNU build-ID note), if it has one.
pub(crate) fn build_id(path: &str) -> Option<Box<[u8]>> {
    read_elf(path, |elf| elf.build_id().ok().flatten().map(Box::from))
}

/// Where an ELF file's executable PT_LOAD segments lie in it: (file offset, file size, address)
/// each, which place the file in a mapping of its code.
#[derive(Clone, Debug, Default)]
pub struct ExecSegments(pub(crate) Vec<(u64, u64, u64)>);

impl ExecSegments {
    pub fn of<'d, R: object::ReadRef<'d>>(file: &object::File<'d, R>) -> ExecSegments {
        let segments = file.segments().filter_map(|segment| {
            let flags = match segment.flags() {
                object::SegmentFlags::Elf { p_flags } => p_flags,
                _ => return None,
            };
            let (offset, size) = segment.file_range();
            (flags & object::elf::PF_X != 0).then_some((offset, size, segment.address()))
        });
        ExecSegments(segments.collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Where address 0 of the file lies in `mapping` of its code (the load bias): the mapping's
    /// start corresponds to its file offset, which lies in one executable segment, whose address
    /// fixes the bias.
    pub fn bias(&self, mapping: &Mapping) -> Option<u64> {
        const PAGE: u64 = 4096;
        let (offset, _, address) = *self.0.iter().find(|(offset, size, _)| {
            (offset & !(PAGE - 1)) <= mapping.offset && mapping.offset < offset.saturating_add(*size)
        })?;
        let svma_at_start = address.checked_add(mapping.offset)?.checked_sub(offset)?;
        mapping.start.checked_sub(svma_at_start)
    }
}
