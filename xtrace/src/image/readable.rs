//! The read-only file mappings of each process, data as well as code: where a string argument the
//! kernel program could not read lies in a file whose bytes are the memory's (`.rodata`). The side
//! band reports executable mappings only, so these are read from /proc/PID/maps: when a process is
//! first seen (it may exit before its records are read) and again on a miss, at most every
//! [`REREAD`]; the maps of a process read before it exited still serve its last records.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::procfs::{find, read_only_maps, Mapping};

/// Least time between two reads of one process's /proc/PID/maps on a miss: an address in no
/// read-only file mapping (a heap string that could not be read) must not cost a read each.
const REREAD: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
pub struct Readable {
    maps: HashMap<u32, (Vec<Mapping>, Instant)>,
}

impl Readable {
    /// Reads the maps of `pid` now, while it runs: its records may be read after it exited.
    fn read(&mut self, pid: u32) {
        if let Some(maps) = read_only_maps(pid) {
            self.maps.insert(pid, (maps, Instant::now()));
        }
    }

    /// Process `pid` has records to come: its mappings are read if they never were.
    pub fn seen(&mut self, pid: u32) {
        if !self.maps.contains_key(&pid) {
            self.read(pid);
        }
    }

    /// The read-only file mapping of `pid` that holds `address`, if any.
    pub fn at(&mut self, pid: u32, address: u64) -> Option<Mapping> {
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

    /// Takes `maps` as what /proc/PID/maps shows of `pid` now.
    #[cfg(test)]
    pub fn insert(&mut self, pid: u32, maps: Vec<Mapping>) {
        self.maps.insert(pid, (maps, Instant::now()));
    }
}
