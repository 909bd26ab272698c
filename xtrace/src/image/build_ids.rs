//! Build IDs of mapped files, read while they are mapped: they tell whether the file at a mapping's
//! path, once its process is gone, is the file it mapped. Device and inode tell that for a file
//! that stayed where it was; a bind mount, an overlay, a network or 9p filesystem, or a package
//! reinstalled shows the same file at another device or inode, and a copy keeps its build ID.
use std::{cell::RefCell, collections::HashMap};

use crate::procfs::Mapping;

/// A file as a mapping had it: its device and inode.
type FileId = (u64, u64);

#[derive(Debug, Default)]
pub struct BuildIds {
    /// The build ID of each mapped file, as read while a process mapped it (None: it has none, or
    /// it could not be read).
    mapped: HashMap<FileId, Option<Box<[u8]>>>,
    /// The build ID of the file now at a path, read once when a gone process's file is looked for.
    at_path: RefCell<HashMap<String, Option<Box<[u8]>>>>,
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
    /// one the mapped file had.
    pub fn open_path(&self, pid: u32, mapping: &Mapping) -> Option<String> {
        if let Some(open) = mapping.open_path(pid) {
            return Some(open);
        }
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
