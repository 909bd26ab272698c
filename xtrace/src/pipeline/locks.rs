//! Lock contention (`--off-cpu`): the waits in futex(2) that wait for a holder or a signaller
//! (pthread mutexes, condition variables, semaphores, std::mutex), by the lock's address in its
//! process. Per lock: the waits and their time, the threads that waited, and the threads whose
//! wake-up released them (the holders), with both sides' stacks. A lock in a file's data or bss
//! (a global or static mutex) is named by the data symbol that holds it, in the files its process
//! had mapped (the image model keeps them after it exits); others by where they lie (`[heap]`,
//! while the process lives). CPython's GIL is named `GIL` (and its mutex and forced-switch
//! fields `GIL.mutex`, `GIL.switch_cond`, `GIL.switch_mutex`) where the process's interpreter
//! has its offset (`python::gil`); the two futex words of its condition variable are one lock.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{
    offcpu::frame_pointer_stack,
    samples::{Samples, StackKey},
};
use crate::{image::Images, procfs::Mapping, python::gil::Gil};

/// One lock's waits.
#[derive(Debug, Default)]
pub struct Lock {
    /// Its name: `GIL` (or a part of it) for CPython's GIL, else the data symbol that holds it.
    pub name: Option<String>,
    /// The data symbol that holds it (`queue_lock`, `state+0x28`), where it has one.
    pub symbol: Option<String>,
    /// The file whose data holds it, or `[heap]`, `[stack]`; None for anonymous memory.
    pub place: Option<String>,
    pub waits: u64,
    pub ns: u64,
    /// The threads that waited on it: (waits, nanoseconds) by tid.
    pub waiters: BTreeMap<u32, (u64, u64)>,
    /// Who released a wait of at least MIN, by (pid, tid, name): (wake-ups, nanoseconds).
    pub holders: BTreeMap<(u32, u32, String), (u64, u64)>,
    /// The waiters' stacks, weighted by nanoseconds.
    pub waiter_stacks: Samples,
    /// The holders' stacks as they released it, weighted by nanoseconds (named at the end).
    pub holder_stacks: Samples,
    /// The holders' frame-pointer stacks by their id in the kernel's stack table, weighted by
    /// nanoseconds, until [`Locks::holder_stacks`] reads them.
    holder_ids: BTreeMap<(u32, u32, i32), u64>,
}

impl Lock {
    fn counted(&mut self, tid: u32, waits: u64, ns: u64) {
        self.waits += waits;
        self.ns += ns;
        let waiter = self.waiters.entry(tid).or_default();
        waiter.0 += waits;
        waiter.1 += ns;
    }
}

/// Every lock waited on, by (process, address).
#[derive(Debug, Default)]
pub struct Locks {
    pub locks: BTreeMap<(u32, u64), Lock>,
    names: Names,
}

/// What a wait on a lock tells of it.
pub struct Waited<'a> {
    /// When it ended.
    pub ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub lock: u64,
    pub wait_ns: u64,
    /// The waiter's stack, as counted among the off-CPU stacks.
    pub stack: Option<StackKey>,
    /// Who woke it, and where, when known: (pid, tid, name, stack id).
    pub waker: Option<(u32, u32, &'a str, i32)>,
}

impl Locks {
    /// One wait of at least MIN, sent with its stack.
    pub fn waited(&mut self, images: &mut Images, waited: Waited) {
        let ns = waited.wait_ns;
        let lock = self.lock(images, waited.pid, waited.ns, waited.lock);
        lock.counted(waited.tid, 1, ns);
        if let Some(key) = waited.stack {
            lock.waiter_stacks.total += ns;
            *lock.waiter_stacks.stacks.entry(key).or_default() += ns;
        }
        if let Some((pid, tid, comm, stack)) = waited.waker.filter(|w| w.0 != 0) {
            let holder = lock.holders.entry((pid, tid, comm.to_string())).or_default();
            holder.0 += 1;
            holder.1 += ns;
            if stack >= 0 {
                *lock.holder_ids.entry((pid, tid, stack)).or_default() += ns;
            }
        }
    }

    /// Waits added up in the kernel (shorter than MIN) as read at `end_ns`, with their
    /// frame-pointer stack's key.
    pub fn added_up(
        &mut self,
        images: &mut Images,
        (pid, tid, lock, end_ns): (u32, u32, u64, u64),
        (waits, ns): (u64, u64),
        stack: Option<StackKey>,
    ) {
        let lock = self.lock(images, pid, end_ns, lock);
        lock.counted(tid, waits, ns);
        if let Some(key) = stack {
            lock.waiter_stacks.total += ns;
            *lock.waiter_stacks.stacks.entry(key).or_default() += ns;
        }
    }

    /// Reads the holders' stacks by their ids (`stack_of`, innermost first) and counts them,
    /// named in the images the processes had at `end_ns`.
    pub fn holder_stacks(&mut self, images: &mut Images, end_ns: u64, stack_of: &dyn Fn(i32) -> Vec<u64>) {
        for lock in self.locks.values_mut() {
            for ((pid, tid, id), ns) in std::mem::take(&mut lock.holder_ids) {
                let at = (pid, tid, end_ns);
                frame_pointer_stack(&mut lock.holder_stacks, images, at, &stack_of(id), ns);
            }
        }
    }

    /// The name of the lock that futex word `address` of `pid` belongs to, once it was waited on.
    pub fn name(&self, pid: u32, address: u64) -> Option<String> {
        let address = self.names.gil_part(pid, address).map_or(address, |part| part.1);
        self.locks.get(&(pid, address))?.name.clone()
    }

    /// The lock at `address` of `pid` (the start of the GIL's part holding it, for the GIL),
    /// named the first time it is seen, at `ns`.
    fn lock(&mut self, images: &mut Images, pid: u32, ns: u64, address: u64) -> &mut Lock {
        let names = &mut self.names;
        let gil = names.gil(images, pid, ns).and_then(|gil| gil.part(address));
        let address = gil.map_or(address, |part| part.1);
        self.locks.entry((pid, address)).or_insert_with(|| {
            let (symbol, place) = names.name(images, pid, ns, address);
            Lock {
                name: gil.map(|part| part.0.to_string()).or_else(|| symbol.clone()),
                symbol,
                place,
                ..Lock::default()
            }
        })
    }
}

/// A file's data: its loaded segments' address ranges and its data symbols.
#[derive(Debug, Default)]
struct FileData {
    exec: crate::elf::ExecSegments,
    /// (start, end) of each PT_LOAD segment in memory.
    segments: Vec<(u64, u64)>,
    /// (address, size, demangled name), by address.
    symbols: Vec<(u64, u64, String)>,
}

impl FileData {
    fn read(path: &str) -> Option<FileData> {
        use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
        let elf = crate::elf::Elf::read(path).ok()?;
        let file = elf.parse().ok()?;
        let segments = file
            .segments()
            .map(|s| (s.address(), s.address() + s.size()))
            .collect();
        let mut symbols: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Data)
            .filter_map(|s| Some((s.address(), s.size(), crate::demangle::demangle(s.name().ok()?))))
            .collect();
        // Of the symbols at one address the largest holds it (`_PyRuntime`, not the empty
        // `__TMC_END__` beside it).
        symbols.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        symbols.dedup_by_key(|s| s.0);
        Some(FileData {
            exec: crate::elf::ExecSegments::of(&file),
            segments,
            symbols,
        })
    }

    /// The data symbol holding `vaddr` (`name` or `name+0x8`).
    fn symbol(&self, vaddr: u64) -> Option<String> {
        let at = self.symbols.partition_point(|s| s.0 <= vaddr).checked_sub(1)?;
        let (address, size, name) = &self.symbols[at];
        (vaddr < address + (*size).max(1)).then(|| match vaddr - address {
            0 => name.clone(),
            within => format!("{name}+{within:#x}"),
        })
    }
}

/// The data files read to name locks, by path (None: not an ELF file), and each process's GIL.
#[derive(Debug, Default)]
pub struct Names {
    files: HashMap<String, Option<FileData>>,
    /// Each process's GIL, or None with the number of mappings it had when none was found (looked
    /// for again once it maps more: a python executable loads its libpython).
    gils: HashMap<u32, Result<Gil, usize>>,
}

impl Names {
    /// The GIL of `pid` at `ns`, looked for in the files it maps the first time (and again while
    /// none is found and it maps more).
    fn gil(&mut self, images: &mut Images, pid: u32, ns: u64) -> Option<Gil> {
        if let Some(Ok(gil)) = self.gils.get(&pid) {
            return Some(*gil);
        }
        let image = images.at(pid, ns);
        let maps = images.maps(image);
        if matches!(self.gils.get(&pid), Some(Err(mapped)) if *mapped >= maps.len()) {
            return None;
        }
        let found = Gil::of(pid, maps).ok_or(maps.len());
        self.gils.insert(pid, found);
        found.ok()
    }

    /// The GIL's part holding `address` of `pid`, as last looked for.
    fn gil_part(&self, pid: u32, address: u64) -> Option<(&'static str, u64)> {
        self.gils.get(&pid)?.as_ref().ok()?.part(address)
    }

    /// The data symbol holding `address` in `pid` at `ns`, and the file whose segment holds it:
    /// through the files the process had mapped then (the image model keeps them once it exited),
    /// each placed by its code's load bias. Else where /proc says it lies (`[heap]`), while the
    /// process lives.
    fn name(
        &mut self,
        images: &mut Images,
        pid: u32,
        ns: u64,
        address: u64,
    ) -> (Option<String>, Option<String>) {
        let image = images.at(pid, ns);
        let maps: Vec<Mapping> = images.maps(image).to_vec();
        let mut seen = BTreeSet::new();
        for mapping in maps.iter().filter(|m| m.path.starts_with('/')) {
            if !seen.insert(mapping.path.clone()) {
                continue;
            }
            let Some(open) = mapping.open_path(pid) else {
                continue;
            };
            let data = self
                .files
                .entry(open.clone())
                .or_insert_with(|| FileData::read(&open));
            let Some(data) = data else {
                continue;
            };
            let Some(bias) = data.exec.bias(mapping) else {
                continue;
            };
            let vaddr = address.wrapping_sub(bias);
            if data
                .segments
                .iter()
                .any(|&(start, end)| vaddr >= start && vaddr < end)
            {
                return (data.symbol(vaddr), Some(mapping.path.clone()));
            }
        }
        let special = crate::procfs::all_maps(pid).and_then(|all| {
            let m = all.into_iter().find(|m| address >= m.start && address < m.end)?;
            m.path.starts_with('[').then_some(m.path)
        });
        (None, special)
    }
}

/// A lock's stacks as the off-CPU export names them: the heaviest, for the summary.
pub fn heaviest(stacks: &Samples) -> Option<&StackKey> {
    let mut keys: Vec<(&StackKey, &u64)> = stacks.stacks.iter().collect();
    keys.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.user.cmp(&b.0.user)));
    keys.first().map(|(key, _)| *key)
}
