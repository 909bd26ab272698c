//! Output formats written after a recording, one file each (trace.json is streamed while it runs:
//! `pipeline::chrome`): `summary` (summary.json and the table),
//! `profile` (stacks.folded, flamegraph.svg), `cuda` (the CUDA section of the summary),
//! `span_flamegraph` (span-flamegraph.svg), `pprof` (profile.pb.gz), `callgrind` (KCachegrind),
//! `derived` (the span flamegraph and profile a recording writes last); `plt` names PLT stubs in
//! the profile's frames, `fde` functions without symbols by their unwind entries; both read the
//! ELF file through [`read_elf`].
use std::fs::File;

use object::{
    read::{elf::ElfFile64, ReadCache},
    Endianness,
};

pub mod callgrind;
pub mod cuda;
pub mod derived;
pub mod fde;
pub mod plt;
pub mod pprof;
pub mod profile;
pub mod span_flamegraph;
pub mod summary;
pub mod table;

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
