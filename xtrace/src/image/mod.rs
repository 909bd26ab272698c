//! The process-image model: which code each traced process had mapped, and when. Every address
//! xtrace turns into a file and offset goes through it: sampled stacks (`pipeline::samples`,
//! `export::profile`) and CUDA kernels' host stubs and handles (`cuda::kernels`).
//!
//! A process's image begins when it is first seen (filled from /proc/PID/maps), when it is forked
//! (a copy of its parent's image at that moment) and when it execs (empty: the new program's code
//! arrives as it maps it), and grows by each executable mapping the side band reports. An address
//! is resolved against the image its process had at the address's time, so a process that exits
//! within milliseconds is named from the code it inherited or mapped, and a program is never named
//! from the files of the program it replaced (two non-PIE executables share addresses).
//!
//! Each CPU's records are in time order, but not the CPUs' records together: a record written just
//! after its CPU's ring was read comes in the next read, after later ones of other CPUs. Records
//! wait in `pending` and are applied in time order up to the start of the previous read (by then
//! every earlier record has been written), or, before a sample is placed, up to the sample's time:
//! what its own process did before it (fork, exec, mappings) was written before the sample was.
use std::{
    collections::{HashMap, HashSet, VecDeque},
    time::{Duration, Instant},
};

pub mod build_ids;
pub mod code;
pub mod readable;
pub mod sideband;
pub mod symbols;

use crate::procfs::{find, merge_maps, Mapping};
use build_ids::BuildIds;
use sideband::{Change, Sideband};

/// Least time between two reads of one image's /proc/PID/maps: stacks walked without frame
/// pointers hold values that are in no mapping, and must not cost a read each.
const REREAD: Duration = Duration::from_millis(50);

/// How long the images of a process that exited unused are kept: its last samples and calls may
/// still be unread in the ring buffer when its exit is read from the side band.
const KEEP_EXITED: Duration = Duration::from_secs(2);

/// Whose changes are kept: the traced processes'.
#[derive(Clone, Debug, Default)]
pub enum Watched {
    /// Every process (`-a`).
    #[default]
    All,
    /// These processes and, when `follow`, the processes they start.
    Pids { pids: HashSet<u32>, follow: bool },
}

impl Watched {
    /// The processes traced: `pids` (every process when there are none) and, when `follow`,
    /// the processes they start.
    pub fn of(pids: Vec<u32>, follow: bool) -> Self {
        if pids.is_empty() {
            return Watched::All;
        }
        Watched::Pids {
            pids: pids.into_iter().collect(),
            follow,
        }
    }
}

#[derive(Debug)]
pub struct Image {
    pub pid: u32,
    /// When it began (CLOCK_MONOTONIC): 0 for a process as first seen, else its fork or exec.
    pub start_ns: u64,
    /// Executable mappings, only added to: code seen earlier may have been unmapped since.
    pub maps: Vec<Mapping>,
    /// When /proc/PID/maps was last read into it.
    read_at: Option<Instant>,
    /// A sample was taken in it, or a CUDA kernel named from it.
    used: bool,
    /// The image its exec replaced.
    replaced: Option<u32>,
    /// Its process's name: its main thread's, as sampled last in it in user mode.
    comm: Option<String>,
    /// Its main thread's name as sampled first in the kernel (a sample taken during the exec that
    /// ends it, after the kernel has set the new program's name, carries that name, and is its
    /// last).
    comm_in_kernel: Option<String>,
}

#[derive(Debug, Default)]
pub struct Images {
    /// By id; the images of exited processes that no sample used are removed.
    images: HashMap<u32, Image>,
    next_id: u32,
    /// Each process's images, in order of start.
    by_pid: HashMap<u32, Vec<u32>>,
    watched: Watched,
    sideband: Option<Sideband>,
    /// Processes whose main thread exited, for their unused images to be dropped after
    /// `KEEP_EXITED` if the process is gone by then.
    exited: VecDeque<(Instant, u32)>,
    /// Records read but not applied yet, and the time up to which they have been.
    pending: Vec<Change>,
    applied_ns: u64,
    /// When the last read of the side band began.
    read_ns: u64,
    /// The launched command's image before its exec.
    launcher: Option<u32>,
    /// The build IDs of the files mapped, read while they were.
    build_ids: BuildIds,
    /// The functions of the files mapped, named once.
    pub symbols: symbols::Symbols,
    /// Each process's read-only file mappings, data as well as code.
    pub readable: readable::Readable,
}

impl Images {
    /// No images yet; stripped files' debug files are looked for in `debug_dirs` too.
    pub fn new(debug_dirs: crate::elf::debug_file::DebugDirs) -> Self {
        Images {
            symbols: symbols::Symbols::new(debug_dirs),
            ..Images::default()
        }
    }

    /// Reads forks, execs and mappings of the processes `watched` from `sideband` from now on.
    pub fn watch(&mut self, sideband: Sideband, watched: Watched) {
        self.sideband = Some(sideband);
        self.watched = watched;
    }

    /// Begins the image of `pid`, a running process xtrace was given, from what /proc/PID/maps
    /// shows now, when sampling starts: it may exit before its first sample is read (a process
    /// that forks children and is gone within milliseconds), and then /proc has nothing left to
    /// read at first sight. Its children forked since are copies of this image.
    pub fn begin_running(&mut self, pid: u32) {
        let mut maps = Vec::new();
        merge_maps(&mut maps, pid);
        self.build_ids.note(pid, &maps);
        let id = self.begin(pid, 0, maps);
        if let Some(image) = self.images.get_mut(&id) {
            image.read_at = Some(Instant::now());
        }
    }

    /// Begins the image of `pid`, a command xtrace forked and has not exec'd yet, as xtrace's own
    /// (see [`Images::is_launcher`]).
    pub fn launched(&mut self, pid: u32) {
        let mut maps = Vec::new();
        merge_maps(&mut maps, std::process::id());
        self.launcher = Some(self.begin(pid, 0, maps));
    }

    /// Whether `image` is a launched command's before its exec: xtrace's launcher code, in user
    /// mode or in the kernel in the exec (whose user registers are still the launcher's), which
    /// is no part of the command's profile (`perf record -- CMD` counts from the exec, too).
    pub fn is_launcher(&self, image: u32) -> bool {
        self.launcher == Some(image)
    }

    /// Side-band records the kernel dropped because a ring was full.
    pub fn lost(&self) -> u64 {
        self.sideband.as_ref().map_or(0, |s| s.lost)
    }

    /// Where the file of `mapping` of process `pid` is opened for its symbols (see
    /// [`BuildIds::open_path`]).
    pub fn open_path(&self, pid: u32, mapping: &Mapping) -> Option<String> {
        self.build_ids.open_path(pid, mapping)
    }

    pub fn maps(&self, image: u32) -> &[Mapping] {
        self.images.get(&image).map_or(&[], |i| &i.maps)
    }

    /// Its process's name while it ran `image`, when a sample of its main thread said it: as
    /// its last sample in user mode said, else as its first in the kernel.
    pub fn comm(&self, image: u32) -> Option<&str> {
        let image = self.images.get(&image)?;
        image.comm.as_deref().or(image.comm_in_kernel.as_deref())
    }

    /// A sample of the main thread of the process running `image`, taken in the kernel or not,
    /// said its name is `comm`.
    pub fn named(&mut self, image: u32, comm: &str, in_kernel: bool) {
        if let Some(image) = self.images.get_mut(&image) {
            match in_kernel {
                true if image.comm_in_kernel.is_some() => {}
                true => image.comm_in_kernel = Some(comm.to_string()),
                false if image.comm.as_deref() == Some(comm) => {}
                false => image.comm = Some(comm.to_string()),
            }
        }
    }

    /// The image process `pid` had at `ns`; one begun as first seen if none had begun.
    pub fn at(&mut self, pid: u32, ns: u64) -> u32 {
        let images = &self.images;
        let ids = self.by_pid.entry(pid).or_default();
        let after = ids.partition_point(|id| images[id].start_ns <= ns);
        if after > 0 {
            return ids[after - 1];
        }
        let id = self.next_id;
        ids.insert(0, id);
        self.images.insert(id, Image::new(pid, 0, Vec::new()));
        self.next_id += 1;
        id
    }

    /// The image an exec replaced with `image`, if it began with one. Until the new program first
    /// runs, the process's user registers are still the old program's: a sample taken in the
    /// kernel during the exec is in the replaced image.
    pub fn replaced(&self, image: u32) -> Option<u32> {
        self.images.get(&image)?.replaced
    }

    /// Marks `image` as one a sample was taken in, or a kernel named from: it is kept after its
    /// process exits.
    pub fn use_image(&mut self, image: u32) {
        if let Some(image) = self.images.get_mut(&image) {
            image.used = true;
        }
    }

    /// The image process `pid` had at `ns`, where a call it made then is to be named from, read
    /// from /proc/PID/maps now if it began as first seen and was never read (the process is most
    /// likely still alive while its first calls are read); kept after its process exits.
    pub fn seen(&mut self, pid: u32, ns: u64) -> u32 {
        self.settle(ns);
        let id = self.at(pid, ns);
        if let Some(image) = self.images.get_mut(&id) {
            image.used = true;
            if image.read_at.is_none() && image.start_ns == 0 {
                self.read_proc(id);
            }
        }
        id
    }

    /// The mapping that held `address` in process `pid` at `ns` (see [`Images::seen`]), reading
    /// /proc/PID/maps again when none did (a library loaded that the side band did not report).
    pub fn mapping_at(&mut self, pid: u32, ns: u64, address: u64) -> Option<&Mapping> {
        let id = self.seen(pid, ns);
        if find(self.maps(id), address).is_none() {
            self.read_proc(id);
        }
        find(self.maps(id), address)
    }

    /// Process `pid` loaded a library: its latest image is read from /proc/PID/maps at the next
    /// miss, however recently it was read.
    pub fn loaded(&mut self, pid: u32) {
        let latest = self.by_pid.get(&pid).and_then(|ids| ids.last());
        if let Some(image) = latest.and_then(|id| self.images.get_mut(id)) {
            if image.read_at.is_some() {
                image.read_at = Instant::now().checked_sub(REREAD);
            }
        }
    }

    /// Adds what /proc/PID/maps shows now to `image`, if that is its process's latest image (an
    /// earlier one ended with an exec, and /proc shows the new program) and it was not read in the
    /// last `REREAD`.
    pub fn read_proc(&mut self, image: u32) {
        let Some(img) = self.images.get_mut(&image) else {
            return;
        };
        let latest = self.by_pid.get(&img.pid).and_then(|ids| ids.last()) == Some(&image);
        if latest && img.read_at.is_none_or(|at| at.elapsed() >= REREAD) {
            img.read_at = Some(Instant::now());
            merge_maps(&mut img.maps, img.pid);
            self.build_ids.note(img.pid, &img.maps);
        }
    }

    /// Reads the side band's new records and applies those written before the previous read
    /// began; drops the unused images of processes gone for `KEEP_EXITED`.
    pub fn poll(&mut self) {
        if self.sideband.is_none() {
            return;
        }
        let previous = self.read_ns;
        self.read_ns = crate::clock::monotonic_ns();
        self.read_pending();
        self.apply_up_to(previous);
        while let Some(&(at, pid)) = self.exited.front() {
            if at.elapsed() < KEEP_EXITED {
                break;
            }
            self.exited.pop_front();
            // An EXIT record of a main thread: the process may live on in its other threads (the
            // main thread called pthread_exit, or another thread exec'd and took its pid).
            if !process_alive(pid) {
                if let Watched::Pids { pids, follow: true } = &mut self.watched {
                    pids.remove(&pid); // its pid may be given to an unrelated process
                }
                self.forget_unused(pid);
            }
        }
    }

    /// Applies every record written up to `ns`, the time of a sample about to be placed: those
    /// of its own process are all in the side band by the time the sample is read.
    pub fn settle(&mut self, ns: u64) {
        if self.sideband.is_some() && ns > self.applied_ns {
            self.read_pending();
            self.apply_up_to(ns);
        }
    }

    /// Reads the side band's new records into `pending`. The files the watched processes mapped
    /// are looked at now, before the records are applied: a process may be gone by then.
    fn read_pending(&mut self) {
        let Some(sideband) = &mut self.sideband else {
            return;
        };
        let read = sideband.read();
        for change in &read {
            if let Change::Map { pid, mapping, .. } = change {
                if self.keeps(*pid) {
                    self.build_ids.note(*pid, std::slice::from_ref(mapping));
                }
            }
        }
        self.pending.extend(read);
    }

    /// Applies the pending records written up to `ns`, in time order.
    fn apply_up_to(&mut self, ns: u64) {
        self.pending.sort_by_key(Change::ns);
        let due = self.pending.partition_point(|c| c.ns() <= ns);
        let due: Vec<Change> = self.pending.drain(..due).collect();
        for change in due {
            self.apply(change);
        }
        self.applied_ns = self.applied_ns.max(ns);
    }

    fn keeps(&self, pid: u32) -> bool {
        // The kernel writes pid 0 for a task outside xtrace's PID namespace (when xtrace runs in a
        // container): such a record is of no process xtrace can sample.
        if pid == 0 {
            return false;
        }
        match &self.watched {
            Watched::All => true,
            Watched::Pids { pids, .. } => pids.contains(&pid),
        }
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::Fork { pid, parent, ns } => {
                if !self.keeps(parent) {
                    return;
                }
                if let Watched::Pids { pids, follow } = &mut self.watched {
                    if !*follow {
                        return; // not traced
                    }
                    pids.insert(pid);
                }
                let from = self.at(parent, ns);
                if self.images[&from].read_at.is_none() && self.images[&from].start_ns == 0 {
                    // A parent seen for the first time: what it has mapped is in /proc alone.
                    self.read_proc(from);
                }
                let maps = self.images[&from].maps.clone();
                let n = maps.len();
                let id = self.begin(pid, ns, maps);
                log::debug!("process {pid}, forked by {parent}: image {id}, {n} mappings inherited");
            }
            Change::Exec { pid, ns } if self.keeps(pid) => {
                let replaced = self.at(pid, ns);
                let id = self.begin(pid, ns, Vec::new());
                if let Some(image) = self.images.get_mut(&id) {
                    image.replaced = Some(replaced);
                }
                log::debug!("process {pid} replaced its program: image {id}");
            }
            Change::Map { pid, ns, mapping } if self.keeps(pid) => {
                let id = self.at(pid, ns);
                if let Some(image) = self.images.get_mut(&id) {
                    if !crate::procfs::is_current(&image.maps, &mapping) {
                        self.build_ids.note(pid, std::slice::from_ref(&mapping));
                        image.maps.push(mapping);
                    }
                }
            }
            Change::Exit { pid, .. } if self.keeps(pid) => {
                self.exited.push_back((Instant::now(), pid));
            }
            _ => {}
        }
    }

    /// Begins an image of `pid` at `ns` with `maps`.
    fn begin(&mut self, pid: u32, ns: u64, maps: Vec<Mapping>) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        self.images.insert(id, Image::new(pid, ns, maps));
        let images = &self.images;
        let ids = self.by_pid.entry(pid).or_default();
        let at = ids.partition_point(|i| images[i].start_ns <= ns);
        ids.insert(at, id);
        id
    }

    /// Removes the images of `pid` no sample was taken in.
    fn forget_unused(&mut self, pid: u32) {
        let Some(ids) = self.by_pid.get_mut(&pid) else {
            return;
        };
        let images = &mut self.images;
        ids.retain(|id| {
            let used = images.get(id).is_some_and(|i| i.used);
            if !used {
                images.remove(id);
            }
            used
        });
        if ids.is_empty() {
            self.by_pid.remove(&pid);
        }
    }
}

/// Whether process `pid` still runs: its /proc entry is there and is not a zombie's (a process
/// whose main thread has exited but whose other threads run lists them in its `task` directory).
fn process_alive(pid: u32) -> bool {
    let Some(stat) = crate::target::stat_after_name(pid) else {
        return false;
    };
    !matches!(stat.split_whitespace().next(), Some("Z" | "X")) || crate::target::other_threads(pid) > 0
}

impl Image {
    fn new(pid: u32, start_ns: u64, maps: Vec<Mapping>) -> Self {
        Image {
            pid,
            start_ns,
            maps,
            read_at: None,
            used: false,
            replaced: None,
            comm: None,
            comm_in_kernel: None,
        }
    }
}

#[cfg(test)]
mod tests;
