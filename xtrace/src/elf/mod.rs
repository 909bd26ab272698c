//! ELF files read below the probes and the profile: [`read_elf`] reads one only as far as it is
//! looked at, `fde` finds functions by their unwind entries. (Symbol tables are `probes::elf`'s.)
use std::fs::File;

use object::{
    read::{elf::ElfFile64, ReadCache},
    Endianness,
};

pub mod fde;

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
