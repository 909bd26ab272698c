//! String arguments the kernel program could not read. Its read cannot fault in a page the process
//! has not touched yet: a string literal in `.rodata` that the function reads only after its entry
//! probe fired is unreadable at its first call. Where the address lies in a read-only file mapping
//! (the executable's or a library's data or code), its bytes are the file's, and they are read
//! from the file instead ([`crate::procfs::mapped_string`]); a null pointer stays `null`, and so
//! does a string no route could read, which is counted (summary.json's `unreadable_strings`).
use std::{
    borrow::Cow,
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::procfs::{find, mapped_string, read_only_maps, Mapping};

/// Where a process's address lies: its read-only file mapping there (one that cannot be written:
/// its bytes in memory are its file's), if any.
pub trait MappingOf {
    fn mapping_of(&mut self, pid: u32, address: u64) -> Option<Mapping>;

    /// Process `pid` has records to come: its mappings may be looked up while it still runs.
    fn seen(&mut self, _pid: u32) {}
}

/// Least time between two reads of one process's /proc/PID/maps on a miss: an address in no
/// read-only file mapping (a heap string that could not be read) must not cost a read each.
const REREAD: Duration = Duration::from_millis(50);

/// [`MappingOf`] from /proc/PID/maps, kept per process and read again on a miss (at most every
/// [`REREAD`]); the maps of a process read before it exited still serve its last records.
#[derive(Debug, Default)]
pub struct ProcMaps {
    maps: HashMap<u32, (Vec<Mapping>, Instant)>,
}

impl ProcMaps {
    /// Reads the maps of `pid` now, while it runs: its records may be read after it exited.
    pub fn read(&mut self, pid: u32) {
        if let Some(maps) = read_only_maps(pid) {
            self.maps.insert(pid, (maps, Instant::now()));
        }
    }
}

impl MappingOf for ProcMaps {
    fn seen(&mut self, pid: u32) {
        if !self.maps.contains_key(&pid) {
            self.read(pid);
        }
    }

    fn mapping_of(&mut self, pid: u32, address: u64) -> Option<Mapping> {
        if let Some((maps, read_at)) = self.maps.get(&pid) {
            if let Some(mapping) = find(maps, address) {
                return Some(mapping.clone());
            }
            if read_at.elapsed() < REREAD {
                return None;
            }
        }
        self.read(pid);
        find(&self.maps.get(&pid)?.0, address).cloned()
    }
}

/// The string arguments of records: as read by the kernel, or else from a mapped file.
pub struct Strings {
    lookup: Box<dyn MappingOf + Send>,
    /// Strings at a non-null address that no route could read.
    unreadable: u64,
}

impl std::fmt::Debug for Strings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Strings")
            .field("unreadable", &self.unreadable)
            .finish()
    }
}

impl Default for Strings {
    fn default() -> Self {
        Strings::new(Box::new(ProcMaps::default()))
    }
}

impl Strings {
    pub fn new(lookup: Box<dyn MappingOf + Send>) -> Self {
        Strings {
            lookup,
            unreadable: 0,
        }
    }

    /// The bytes of the string at `address` of process `pid`, at most `max` of them: `read` (what
    /// the kernel read, its NUL included) when it read any, else those of the read-only file
    /// mapping there; empty (`null`) for a null pointer or when unreadable.
    pub fn resolve<'a>(&mut self, pid: u32, address: u64, read: &'a [u8], max: usize) -> Cow<'a, [u8]> {
        if !read.is_empty() || address == 0 {
            return Cow::Borrowed(read);
        }
        let bytes = self
            .lookup
            .mapping_of(pid, address)
            .and_then(|mapping| mapped_string(pid, &mapping, address, max));
        match bytes {
            Some(bytes) => Cow::Owned(bytes),
            None => {
                self.unreadable += 1;
                Cow::Borrowed(read)
            }
        }
    }

    /// See [`MappingOf::seen`].
    pub fn seen(&mut self, pid: u32) {
        self.lookup.seen(pid);
    }

    /// Strings at a non-null address that no route could read.
    pub fn unreadable(&self) -> u64 {
        self.unreadable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One mapping of this test's own file.
    struct OneFile(Mapping);

    impl MappingOf for OneFile {
        fn mapping_of(&mut self, _pid: u32, address: u64) -> Option<Mapping> {
            find(std::slice::from_ref(&self.0), address).cloned()
        }
    }

    #[test]
    fn an_unread_string_is_read_from_its_mapped_file_else_counted() {
        let path = std::env::temp_dir().join(format!("xtrace-strings-{}", std::process::id()));
        std::fs::write(&path, b"\0\0\0\0cold literal\0").unwrap();
        let mut strings = Strings::new(Box::new(OneFile(Mapping {
            start: 0x10000,
            end: 0x11000,
            offset: 0,
            path: path.to_str().unwrap().into(),
            deleted: false,
            file: None,
        })));
        let pid = u32::MAX;
        assert_eq!(
            &*strings.resolve(pid, 0x10004, b"hot\0", 63),
            b"hot\0",
            "read by the kernel"
        );
        assert_eq!(&*strings.resolve(pid, 0x10004, b"", 63), b"cold literal\0");
        assert_eq!(&*strings.resolve(pid, 0x10004, b"", 4), b"cold\0");
        assert_eq!(&*strings.resolve(pid, 0, b"", 63), b"", "a null pointer");
        assert_eq!(strings.unreadable(), 0);
        assert_eq!(&*strings.resolve(pid, 0x20000, b"", 63), b"", "in no mapping");
        assert_eq!(strings.unreadable(), 1);
        std::fs::remove_file(&path).unwrap();
    }
}
