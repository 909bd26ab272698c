//! Build IDs of mapped files, read while they are mapped: they tell whether the file at a mapping's
//! path, once its process is gone, is the file it mapped. Device and inode tell that for a file
//! that stayed where it was; a bind mount, an overlay, a network or 9p filesystem, or a package
//! reinstalled shows the same file at another device or inode, and a copy keeps its build ID.
//! The first [`KEEP_OPEN`] files mapped are also held open, as they were mapped: a file deleted or
//! replaced since, or seen only inside a container that is gone, is read through its descriptor.
use std::{cell::RefCell, collections::HashMap, fs::File, os::fd::AsRawFd};

use crate::procfs::Mapping;

/// A file as a mapping had it: its device and inode.
type FileId = (u64, u64);

/// Mapped files held open at most: each is one descriptor of xtrace's.
const KEEP_OPEN: usize = 128;

#[derive(Debug, Default)]
pub struct BuildIds {
    /// The build ID of each mapped file, as read while a process mapped it (None: it has none, or
    /// it could not be read).
    mapped: HashMap<FileId, Option<Box<[u8]>>>,
    /// The build ID of the file now at a path, read once when a gone process's file is looked for.
    at_path: RefCell<HashMap<String, Option<Box<[u8]>>>>,
    /// Mapped files opened while they were mapped.
    kept: HashMap<FileId, File>,
}

impl BuildIds {
    /// Reads the build IDs of the files in `maps` of process `pid` not read before: through
    /// /proc/PID/map_files (the file mapped, wherever its path leads now) while the process lives,
    /// else where [`Mapping::open_path`] finds it.
    pub fn note(&mut self, pid: u32, maps: &[Mapping]) {
        for mapping in maps {
            let Some(file) = mapping.file else { continue };
            if !mapping.path.starts_with('/') || self.mapped.contains_key(&file) {
                continue;
            }
            let mapped = format!("/proc/{pid}/map_files/{:x}-{:x}", mapping.start, mapping.end);
            if self.kept.len() < KEEP_OPEN {
                if let Ok(open) = File::open(&mapped) {
                    self.kept.insert(file, open);
                }
            }
            let id = crate::elf::build_id(&mapped).or_else(|| {
                let open = mapping.open_path(pid)?;
                crate::elf::build_id(&open)
            });
            log::debug!(
                "{} of process {pid}: build ID {}",
                mapping.path,
                id.as_deref().map_or(String::from("unknown"), crate::elf::hex)
            );
            self.mapped.insert(file, id);
        }
    }

    /// The build ID the file of `mapping` had while it was mapped, if read.
    pub fn of(&self, mapping: &Mapping) -> Option<&[u8]> {
        self.mapped.get(&mapping.file?)?.as_deref()
    }

    /// Where the file of `mapping` of process `pid` is opened for its symbols: as
    /// [`Mapping::open_path`] finds it; else, where the file at its path (through the process's
    /// root, then on the host) is not surely the one mapped, that file when its build ID is the
    /// one the mapped file had; else the file itself, when it was held open.
    pub fn open_path(&self, pid: u32, mapping: &Mapping) -> Option<String> {
        if let Some(open) = mapping.open_path(pid) {
            return Some(open);
        }
        self.same_build(pid, mapping).or_else(|| {
            let kept = self.kept.get(&mapping.file?)?;
            Some(format!("/proc/self/fd/{}", kept.as_raw_fd()))
        })
    }

    /// The file at `mapping`'s path, through the process's root then on the host, that has the
    /// build ID the mapped file had.
    fn same_build(&self, pid: u32, mapping: &Mapping) -> Option<String> {
        let id = self.of(mapping)?;
        let inside = format!("/proc/{pid}/root{}", mapping.path);
        let mut at_path = self.at_path.borrow_mut();
        [inside, mapping.path.clone()].into_iter().find(|path| {
            let found = at_path
                .entry(path.clone())
                .or_insert_with(|| crate::elf::build_id(path));
            found.as_deref() == Some(id)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// A gone process's file at another device or inode than it mapped is taken when it has the
    /// build ID the mapped file had, and only then.
    #[test]
    fn a_copy_with_the_mapped_build_id_is_taken() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let id = crate::elf::build_id(exe.to_str().unwrap()).expect("the test binary has a build ID");
        let copy = std::env::temp_dir().join(format!("xtrace-build-id-{}", std::process::id()));
        std::fs::copy(&exe, &copy).unwrap();
        let mapped = std::fs::metadata(&exe).unwrap();
        let mapping = Mapping {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            path: copy.to_str().unwrap().into(),
            deleted: false,
            // The file that was mapped: not the one at the path now.
            file: Some((mapped.dev(), mapped.ino())),
        };
        // No such process (above the largest pid_max).
        let gone = 4_194_305;
        let mut ids = BuildIds::default();
        assert_eq!(mapping.open_path(gone), None, "another inode at the path");
        assert_eq!(ids.open_path(gone, &mapping), None, "no build ID known");
        ids.mapped.insert(mapping.file.unwrap(), Some(id.clone()));
        assert_eq!(ids.open_path(gone, &mapping).as_deref(), copy.to_str());
        let mut other = BuildIds::default();
        other
            .mapped
            .insert(mapping.file.unwrap(), Some(vec![1, 2, 3].into()));
        assert_eq!(other.open_path(gone, &mapping), None, "another build");
        std::fs::remove_file(&copy).unwrap();
    }
}
