//! The shared libraries a program about to be launched will load: its `DT_NEEDED` entries, found
//! the way the dynamic linker looks (`DT_RPATH`/`DT_RUNPATH` with `$ORIGIN`, `LD_LIBRARY_PATH`,
//! the linker cache, the default directories). Direct dependencies only; libraries loaded with
//! dlopen later cannot be known before they are.
use std::path::{Path, PathBuf};

use object::{
    elf,
    read::elf::{Dyn, FileHeader},
    Endianness,
};

use crate::target::{library_from_cache, TargetFile};

/// The `DT_NEEDED` names and the run path directories of the ELF file `data`.
fn dynamic_entries(data: &[u8]) -> Option<(Vec<String>, Vec<String>)> {
    let header = elf::FileHeader64::<Endianness>::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, data).ok()?;
    let (dynamic, index) = sections.dynamic(endian, data).ok()??;
    let strings = sections.strings(endian, data, index).ok()?;
    let (mut needed, mut paths) = (Vec::new(), Vec::new());
    for entry in dynamic {
        let tag = entry.d_tag(endian) as u32;
        let Some(text) = u32::try_from(entry.d_val(endian))
            .ok()
            .and_then(|offset| strings.get(offset).ok())
        else {
            continue;
        };
        let text = String::from_utf8_lossy(text).into_owned();
        match tag {
            elf::DT_NEEDED => needed.push(text),
            elf::DT_RPATH | elf::DT_RUNPATH => paths.extend(text.split(':').map(str::to_string)),
            _ => {}
        }
    }
    Some((needed, paths))
}

/// The libraries `program` names in `DT_NEEDED` that can be found; unfound ones are skipped.
pub fn needed_libraries(program: &Path) -> Vec<TargetFile> {
    let Ok(data) = std::fs::read(program) else {
        return Vec::new();
    };
    let Some((needed, paths)) = dynamic_entries(&data) else {
        return Vec::new();
    };
    let origin = program.parent().unwrap_or(Path::new("/"));
    let mut dirs: Vec<PathBuf> = paths
        .iter()
        .map(|p| PathBuf::from(p.replace("$ORIGIN", &origin.to_string_lossy())))
        .collect();
    if let Ok(env) = std::env::var("LD_LIBRARY_PATH") {
        dirs.extend(env.split(':').filter(|d| !d.is_empty()).map(PathBuf::from));
    }
    let defaults = [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ];
    needed
        .iter()
        .filter_map(|name| {
            if name.contains('/') {
                return Some(PathBuf::from(name));
            }
            dirs.iter()
                .map(|d| d.join(name))
                .find(|p| p.is_file())
                .or_else(|| library_from_cache(name).ok().map(|f| f.open))
                .or_else(|| {
                    defaults
                        .iter()
                        .map(|d| Path::new(d).join(name))
                        .find(|p| p.is_file())
                })
        })
        .map(|path| TargetFile {
            open: path.clone(),
            shown: path,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_the_c_library_of_this_test() {
        let exe = std::env::current_exe().unwrap();
        let libs = super::needed_libraries(&exe);
        assert!(
            libs.iter().any(|l| l.shown.to_string_lossy().contains("libc.so")),
            "{libs:?}"
        );
    }
}
