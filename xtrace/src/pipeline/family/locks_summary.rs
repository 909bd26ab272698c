//! The summary's contended locks (`off_cpu.locks`): the locks the traced threads waited on
//! longest, each with its name where it has one, its waits, waiters and holders, and the heaviest
//! waiter and holder stacks, folded outermost first.
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
    /// The data symbol holding it (`queue_lock`, `state+0x28`); null for one on the heap.
    pub name: Option<String>,
    /// The file whose data holds it, or `[heap]`, `[stack]`; null for anonymous memory.
    pub place: Option<String>,
    pub waits: u64,
    pub wait_ns: u64,
    /// Threads that waited on it.
    pub waiters: usize,
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
    LockSummary {
        pid,
        address: format!("{address:#x}"),
        name: lock.name.clone(),
        place: lock.place.clone(),
        waits: lock.waits,
        wait_ns: lock.ns,
        waiters: lock.waiters.len(),
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
