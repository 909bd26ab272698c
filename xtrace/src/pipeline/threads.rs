//! Names of the processes and threads seen in records: the kernel's name of the thread in its
//! latest thread record (taken at its first traced call) or CPU sample, so a thread sampled after
//! it renamed itself has its new name and one that exits is still named; else read from /proc when first
//! seen (a thread may be gone by the time the recording ends). A process's name and namespace pid are read from /proc when its first record arrives, while it
//! most likely still runs (system-wide captures see processes that come and go).
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    hash::{BuildHasherDefault, Hasher},
};

use crate::target::{thread_comm, ProcessInfo};

/// Hashes a thread id with one multiplication: the set is asked once per record, where the
/// default SipHash took ~9% of the reader's time at a million spans a second. Thread ids come
/// from the kernel, not from input that could be chosen to collide.
#[derive(Clone, Debug, Default)]
pub struct TidHasher(u64);

impl Hasher for TidHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[derive(Clone, Debug, Default)]
pub struct Names {
    seen: HashSet<u32, BuildHasherDefault<TidHasher>>,
    /// Names the traced program gave its threads (NVTX, ITT); they replace the kernel's on the
    /// thread's track (the process keeps its kernel name).
    pub given: BTreeMap<(u32, u32), String>,
    /// (pid, tid) → thread name, in order; the name is None when the thread was already gone.
    pub threads: BTreeMap<(u32, u32), Option<String>>,
    /// pid → process name (its main thread's) and namespace pid, read when the pid was first seen.
    pub processes: BTreeMap<u32, ProcessInfo>,
}

impl Names {
    /// A thread's name as the kernel sent it, with a thread record or a CPU sample; the latest
    /// wins. A string is made only when the name changed.
    pub fn named(&mut self, pid: u32, tid: u32, name: &str) {
        if self.seen.insert(tid) {
            self.process(pid);
        }
        let kept = self.threads.entry((pid, tid)).or_default();
        if kept.as_deref() != Some(name) {
            *kept = Some(name.to_string());
        }
    }

    /// A name the program gave one of its threads (`nvtxNameOsThread`, `__itt_thread_set_name`).
    pub fn given(&mut self, pid: u32, tid: u32, name: String) {
        self.saw(pid, tid);
        self.given.insert((pid, tid), name);
    }

    /// The name of a thread's track: the one the program gave it, else the kernel's.
    pub fn thread_label(&self, pid: u32, tid: u32) -> Option<&str> {
        self.given
            .get(&(pid, tid))
            .map(String::as_str)
            .or_else(|| self.threads.get(&(pid, tid)).and_then(|n| n.as_deref()))
    }

    /// A thread seen in a record; its name is read from /proc unless already known.
    pub fn saw(&mut self, pid: u32, tid: u32) {
        if self.seen.insert(tid) {
            self.process(pid);
            self.threads.insert((pid, tid), thread_comm(pid, tid));
        }
    }

    fn process(&mut self, pid: u32) {
        self.processes
            .entry(pid)
            .or_insert_with(|| ProcessInfo::read(pid));
    }

    /// The name of process `pid`'s track. The kernel's name for its main thread (taken at its
    /// first traced call) beats `read`, the name read from /proc: a launched command was read
    /// before its exec, and a short-lived process may be gone by the time its first record is
    /// read. When neither is known (the process was gone and its main thread never traced), the
    /// name of its traced thread with the lowest id stands in: threads inherit the process's name
    /// unless they rename themselves.
    pub fn process_comm(&self, pid: u32, read: Option<String>) -> Option<String> {
        let threads = || self.threads.range((pid, 0)..=(pid, u32::MAX));
        let main = self.threads.get(&(pid, pid)).cloned().flatten();
        main.or(read)
            .or_else(|| threads().find_map(|(_, name)| name.clone()))
    }

    /// The pids seen, in order.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.threads.keys().map(|(pid, _)| *pid).collect();
        pids.dedup();
        pids
    }
}

/// The names of threads `(pid, tid)` and of their processes (by `(pid, pid)`): as the records
/// gave them, else as /proc has them now, else empty.
pub fn thread_names(names: &Names, threads: impl Iterator<Item = (u32, u32)>) -> HashMap<(u32, u32), String> {
    let mut named = HashMap::new();
    for (pid, tid) in threads {
        for (pid, tid) in [(pid, tid), (pid, pid)] {
            named.entry((pid, tid)).or_insert_with(|| {
                let known = match pid == tid {
                    true => names.process_comm(pid, None),
                    false => names.thread_label(pid, tid).map(str::to_string),
                };
                known
                    .or_else(|| crate::target::thread_comm(pid, tid))
                    .unwrap_or_default()
            });
        }
    }
    named
}

#[cfg(test)]
mod tests {
    use super::Names;

    #[test]
    fn the_latest_kernel_name_wins() {
        let mut names = Names::default();
        names.named(1, 2, "python3");
        names.named(1, 2, "worker");
        assert_eq!(names.thread_label(1, 2), Some("worker"));
        names.named(1, 2, "pt_data_0");
        assert_eq!(names.thread_label(1, 2), Some("pt_data_0"));
        // A name the program gave the thread (NVTX, ITT) still comes first.
        names.given(1, 2, "loader".into());
        names.named(1, 2, "pt_data_1");
        assert_eq!(names.thread_label(1, 2), Some("loader"));
        assert_eq!(names.threads.len(), 1);
    }

    #[test]
    fn a_process_is_named_by_its_main_thread_then_proc_then_its_first_thread() {
        let mut names = Names::default();
        names.named(10, 12, "worker");
        names.named(10, 11, "spans");
        names.named(20, 21, "other");
        assert_eq!(names.process_comm(10, Some("sh".into())).as_deref(), Some("sh"));
        assert_eq!(names.process_comm(10, None).as_deref(), Some("spans"));
        names.named(10, 10, "main");
        assert_eq!(names.process_comm(10, Some("sh".into())).as_deref(), Some("main"));
        assert_eq!(names.process_comm(30, None), None);
    }
}
