//! The summary's contended locks (`off_cpu.locks`): the locks the traced threads waited on
//! longest, each with its name where it has one (`GIL` for CPython's), its waits, waiters and
//! holders, and the heaviest waiter and holder stacks, folded outermost first.
use serde::Serialize;

use crate::{
    image::Images,
    pipeline::{
        locks::{heaviest, Lock, Locks},
        samples::Samples,
        symbolizer::Resolver,
    },
    python::Python,
};

/// Locks listed in the summary.
const TOP_LOCKS: usize = 10;
/// Holders listed per lock.
const HOLDERS: usize = 5;
/// Waiting threads listed per lock.
const WAITERS: usize = 8;

/// A thread that waited on a lock.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WaiterSummary {
    pub tid: u32,
    pub waits: u64,
    pub wait_ns: u64,
}

/// A thread that released waiters of a lock.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HolderSummary {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// Waits of at least MIN it ended, and their nanoseconds.
    pub wakeups: u64,
    pub ns: u64,
}

/// One contended lock.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LockSummary {
    pub pid: u32,
    /// Its address in the process, in hex.
    pub address: String,
    /// `GIL` (or `GIL.mutex`, `GIL.switch_cond`, `GIL.switch_mutex`) for CPython's GIL, else
    /// the data symbol holding it; null for one on the heap.
    pub name: Option<String>,
    /// The data symbol holding it (`queue_lock`, `state+0x28`, `_PyRuntime+0x188`).
    pub symbol: Option<String>,
    /// The file whose data holds it, or `[heap]`, `[stack]`; null for anonymous memory.
    pub place: Option<String>,
    pub waits: u64,
    pub wait_ns: u64,
    /// Threads that waited on it.
    pub waiters: usize,
    /// The threads that waited on it longest, most time first.
    pub waiter_threads: Vec<WaiterSummary>,
    /// Who released its waits of at least MIN, most time first.
    pub holders: Vec<HolderSummary>,
    /// The stack that waited on it longest, and the one the holders released it from most.
    pub waiter_stack: Option<String>,
    pub holder_stack: Option<String>,
}

/// The heaviest stack of `stacks`, named by `resolver`, folded outermost first.
fn heaviest_named(
    stacks: &Samples,
    resolver: &Resolver,
    images: &mut Images,
    python: &Python,
) -> Option<String> {
    let key = heaviest(stacks)?;
    let named = resolver.frames(stacks, images, python);
    let frames = named.get(key)?;
    Some(frames.join(";"))
}

fn summary(
    pid: u32,
    address: u64,
    lock: &Lock,
    resolver: &Resolver,
    images: &mut Images,
    python: &Python,
) -> LockSummary {
    let mut holders: Vec<HolderSummary> = lock
        .holders
        .iter()
        .map(|((pid, tid, comm), &(wakeups, ns))| HolderSummary {
            pid: *pid,
            tid: *tid,
            comm: comm.clone(),
            wakeups,
            ns,
        })
        .collect();
    holders.sort_by(|a, b| b.ns.cmp(&a.ns).then((a.pid, a.tid).cmp(&(b.pid, b.tid))));
    holders.truncate(HOLDERS);
    let mut waiter_threads: Vec<WaiterSummary> = lock
        .waiters
        .iter()
        .map(|(&tid, &(waits, wait_ns))| WaiterSummary { tid, waits, wait_ns })
        .collect();
    waiter_threads.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.tid.cmp(&b.tid)));
    waiter_threads.truncate(WAITERS);
    LockSummary {
        pid,
        address: format!("{address:#x}"),
        name: lock.name.clone(),
        symbol: lock.symbol.clone(),
        place: lock.place.clone(),
        waits: lock.waits,
        wait_ns: lock.ns,
        waiters: lock.waiters.len(),
        waiter_threads,
        holders,
        waiter_stack: heaviest_named(&lock.waiter_stacks, resolver, images, python),
        holder_stack: heaviest_named(&lock.holder_stacks, resolver, images, python),
    }
}

/// The locks waited on longest, most time first.
pub fn top(locks: &Locks, resolver: &Resolver, images: &mut Images, python: &Python) -> Vec<LockSummary> {
    let mut by_time: Vec<(&(u32, u64), &Lock)> = locks.locks.iter().collect();
    by_time.sort_by(|a, b| b.1.ns.cmp(&a.1.ns).then(a.0.cmp(b.0)));
    by_time
        .into_iter()
        .take(TOP_LOCKS)
        .map(|(&(pid, address), lock)| summary(pid, address, lock, resolver, images, python))
        .collect()
}
