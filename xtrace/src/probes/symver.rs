//! Symbol versions (`.gnu.version`, `.gnu.version_d`): a shared library can define a function in
//! several versions, different code at different addresses under one name (glibc's
//! `realpath@@GLIBC_2.3` and the older `realpath@GLIBC_2.2.5`). The default version is named
//! plainly; an older one keeps its version in its name, as `nm -D` shows it.
use std::borrow::Cow;

use object::{
    elf::FileHeader64,
    read::elf::{FileHeader, VersionTable},
    Endianness, SymbolIndex,
};

/// A `.symtab` name as the assembler stored a versioned definition: `f@@VERSION` (the default
/// version, what programs linking now get) is `f`; `f@VERSION` (an older one kept for programs
/// linked before) stays as it is, as `nm` shows it.
pub fn default_version(stored: &str) -> &str {
    stored.split_once("@@").map_or(stored, |(name, _)| name)
}

/// The symbol versions of `.dynsym` (`.gnu.version`, `.gnu.version_d`): a function defined in
/// several versions (glibc's `realpath`, `memcpy`, `pthread_cond_wait`) is several symbols of one
/// name at different addresses.
pub struct Versions<'data> {
    table: Option<VersionTable<'data, FileHeader64<Endianness>>>,
    endian: Endianness,
}

impl<'data> Versions<'data> {
    pub fn read(data: &'data [u8]) -> Self {
        let parsed = FileHeader64::<Endianness>::parse(data).ok().and_then(|header| {
            let endian = header.endian().ok()?;
            let sections = header.sections(endian, data).ok()?;
            Some((sections.versions(endian, data).ok()??, endian))
        });
        match parsed {
            Some((table, endian)) => Versions {
                table: Some(table),
                endian,
            },
            None => Versions {
                table: None,
                endian: Endianness::Little,
            },
        }
    }

    /// The name of `.dynsym` symbol `index`, stored as `name`: `name@VERSION` when its version is
    /// hidden (not the default: `realpath@GLIBC_2.2.5` beside `realpath`, which is
    /// `realpath@@GLIBC_2.3`), else `name`.
    pub fn name<'n>(&self, name: &'n str, index: SymbolIndex) -> Cow<'n, str> {
        let Some(table) = &self.table else {
            return name.into();
        };
        let version = table.version_index(self.endian, index);
        match table.version(version) {
            Ok(Some(v)) if version.is_hidden() => {
                format!("{name}@{}", String::from_utf8_lossy(v.name())).into()
            }
            _ => name.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn symtab_names_drop_only_the_default_version() {
        assert_eq!(super::default_version("f@@V_1"), "f");
        assert_eq!(super::default_version("f@V_1"), "f@V_1");
        assert_eq!(super::default_version("f"), "f");
    }
}
