//! The embedded kernel object (built from xtrace-ebpf by build.rs), loading it, and reading its
//! per-CPU loss counters. `uprobe_multi` loads programs for uprobe_multi links, which aya cannot.
pub mod uprobe_multi;

use aya::{
    include_bytes_aligned,
    maps::{MapData, PerCpuArray},
    Ebpf, EbpfLoader,
};
use xtrace_common::probe::counter;

use crate::{
    error::{Error, Result},
    export::summary::Lost,
};

static OBJECT: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xtrace"));

/// Loads the object with a ring buffer of `ring_bytes` (a power of two, at least one page).
pub fn load(ring_bytes: u32) -> Result<Ebpf> {
    Ok(EbpfLoader::new()
        .map_max_entries("EVENTS", ring_bytes)
        .load(OBJECT)?)
}

/// Takes map `name` out of the object so it outlives the programs (read after detaching).
pub fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map> {
    ebpf.take_map(name).ok_or(Error::Map {
        name,
        source: aya::maps::MapError::InvalidName { name: name.into() },
    })
}

/// The loss counters summed over CPUs.
pub fn read_lost(counters: &PerCpuArray<MapData, u64>) -> Result<Lost> {
    let sum = |index: u32| -> Result<u64> {
        let values = counters.get(&index, 0).map_err(|source| Error::Map {
            name: "COUNTERS",
            source,
        })?;
        Ok(values.iter().sum())
    };
    Ok(Lost {
        ring_full: sum(counter::LOST_RING_FULL)?,
        too_deep: sum(counter::LOST_TOO_DEEP)?,
        no_thread_slot: sum(counter::LOST_NO_THREAD_SLOT)?,
    })
}
