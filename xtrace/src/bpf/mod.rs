//! The embedded kernel object (built from xtrace-ebpf by build.rs), loading it, and reading its
//! per-CPU loss counters. `uprobe_multi` loads programs for uprobe_multi links, which aya cannot.
pub mod uprobe_multi;

use aya::{
    include_bytes_aligned,
    maps::{Array, MapData, PerCpuArray},
    Ebpf, EbpfLoader,
};
use xtrace_common::probe::counter;

use crate::{
    error::{Error, Result},
    export::summary::Lost,
};

static OBJECT: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xtrace"));

/// Loads the object with a ring buffer of `ring_bytes` (a power of two, at least one page) and
/// the argument spec of each probe that captures arguments ((probe id, spec) pairs; when there are
/// none the kernel programs leave their argument code out).
pub fn load(ring_bytes: u32, arg_specs: &[(u32, u32)]) -> Result<Ebpf> {
    let probes = arg_specs.iter().map(|(id, _)| id + 1).max().unwrap_or(1);
    let enabled = u8::from(!arg_specs.is_empty());
    let mut ebpf = EbpfLoader::new()
        .map_max_entries("EVENTS", ring_bytes)
        .map_max_entries("ARG_SPECS", probes)
        .override_global("ARGS_ENABLED", &enabled, true)
        .load(OBJECT)?;
    if !arg_specs.is_empty() {
        let map = ebpf.map_mut("ARG_SPECS").ok_or(Error::Map {
            name: "ARG_SPECS",
            source: aya::maps::MapError::InvalidName {
                name: "ARG_SPECS".into(),
            },
        })?;
        let mut specs: Array<_, u32> = Array::try_from(map).map_err(|source| Error::Map {
            name: "ARG_SPECS",
            source,
        })?;
        for (id, spec) in arg_specs {
            specs.set(*id, spec, 0).map_err(|source| Error::Map {
                name: "ARG_SPECS",
                source,
            })?;
        }
    }
    Ok(ebpf)
}

/// Takes map `name` out of the object so it outlives the programs (read after detaching).
pub fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map> {
    ebpf.take_map(name).ok_or(Error::Map {
        name,
        source: aya::maps::MapError::InvalidName { name: name.into() },
    })
}

/// One per-CPU counter summed over CPUs.
fn counter_sum(counters: &PerCpuArray<MapData, u64>, index: u32) -> Result<u64> {
    let values = counters.get(&index, 0).map_err(|source| Error::Map {
        name: "COUNTERS",
        source,
    })?;
    Ok(values.iter().sum())
}

/// The loss counters summed over CPUs.
pub fn read_lost(counters: &PerCpuArray<MapData, u64>) -> Result<Lost> {
    Ok(Lost {
        ring_full: counter_sum(counters, counter::LOST_RING_FULL)?,
        too_deep: counter_sum(counters, counter::LOST_TOO_DEEP)?,
        no_thread_slot: counter_sum(counters, counter::LOST_NO_THREAD_SLOT)?,
    })
}

/// Entries left without a return (longjmp, exceptions, threads ending inside a traced call).
pub fn read_unmatched(counters: &PerCpuArray<MapData, u64>) -> Result<u64> {
    counter_sum(counters, counter::UNMATCHED_ENTRIES)
}
