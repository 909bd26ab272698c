//! The shared libraries a program about to be launched will load: its `DT_NEEDED` entries, found
//! the way the dynamic linker looks (`DT_RPATH`/`DT_RUNPATH` with `$ORIGIN`, `LD_LIBRARY_PATH`,
//! the linker cache, the default directories), and theirs in turn. Libraries loaded with dlopen
//! later cannot be known before they are. Only each file's headers and dynamic section are read
//! (a CUDA or PyTorch library can be a gigabyte).
use std::{
    collections::{HashSet, VecDeque},
    path::{Path, PathBuf},
};

use object::{
    elf,
    read::elf::{Dyn, FileHeader},
    Endianness, ReadCache,
};

use crate::target::{library_from_cache, library_matches, TargetFile};

/// How many files the search of a dependency tree reads at most.
const MAX_FILES: usize = 512;

/// The `DT_NEEDED` names and the run path directories of the ELF file at `path`.
fn dynamic_entries(path: &Path) -> Option<(Vec<String>, Vec<String>)> {
    let file = std::fs::File::open(path).ok()?;
    let data = ReadCache::new(file);
    let header = elf::FileHeader64::<Endianness>::parse(&data).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, &data).ok()?;
    let (dynamic, index) = sections.dynamic(endian, &data).ok()??;
    let strings = sections.strings(endian, &data, index).ok()?;
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

/// The paths of the libraries the ELF file `object` names in `DT_NEEDED` that can be found;
/// unfound ones are skipped.
fn resolve_needed(object: &Path) -> Vec<PathBuf> {
    let Some((needed, paths)) = dynamic_entries(object) else {
        return Vec::new();
    };
    let origin = object.parent().unwrap_or(Path::new("/"));
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
        .collect()
}

fn target(path: PathBuf) -> TargetFile {
    TargetFile {
        open: path.clone(),
        shown: path,
    }
}

/// The libraries `program` names in `DT_NEEDED` that can be found; unfound ones are skipped.
pub fn needed_libraries(program: &Path) -> Vec<TargetFile> {
    resolve_needed(program).into_iter().map(target).collect()
}

/// The library `name` (`libfoo`, `libfoo.so.1`: see [`library_matches`]) that `program` will
/// load at its start: among its `DT_NEEDED` libraries and theirs, breadth first, each found
/// through the run paths of the file that needs it, so a library beside the program
/// (`RUNPATH=$ORIGIN/lib`) that the linker cache does not know is found.
pub fn find_library(program: &Path, name: &str) -> Option<TargetFile> {
    let mut found = None;
    walk_needed(program, &mut |library| {
        let hit = library_matches(&library.to_string_lossy(), name);
        if hit {
            found = Some(target(library.to_path_buf()));
        }
        hit
    });
    found
}

/// Every library `program` will load at its start: its `DT_NEEDED` libraries and theirs, breadth
/// first, each once (at most [`MAX_FILES`] read).
pub fn loaded_at_start(program: &Path) -> Vec<TargetFile> {
    let mut all = Vec::new();
    walk_needed(program, &mut |library| {
        all.push(target(library.to_path_buf()));
        false
    });
    all
}

/// Calls `visit` once with each library of `program`'s dependency tree, breadth first, until it
/// returns true; reads the `DT_NEEDED` entries of at most [`MAX_FILES`] files.
fn walk_needed(program: &Path, visit: &mut dyn FnMut(&Path) -> bool) {
    let mut queue = VecDeque::from([program.to_path_buf()]);
    let mut seen: HashSet<PathBuf> = HashSet::from([program.to_path_buf()]);
    while let Some(object) = queue.pop_front() {
        for library in resolve_needed(&object) {
            if !seen.insert(library.clone()) {
                continue;
            }
            if visit(&library) {
                return;
            }
            if seen.len() <= MAX_FILES {
                queue.push_back(library);
            }
        }
    }
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

    /// `libc` found for a program whose DT_NEEDED names it; a library no file in the tree needs
    /// is not.
    #[test]
    fn finds_a_library_in_the_dependency_tree() {
        let exe = std::env::current_exe().unwrap();
        let libc = super::find_library(&exe, "libc").expect("the test links libc");
        assert!(libc.shown.to_string_lossy().contains("/libc.so"), "{libc:?}");
        assert_eq!(super::find_library(&exe, "libxtrace-nonexistent"), None);
    }
}
