//! Calls whose entry record waits for their span, per thread and entry time. A new entry at some
//! depth ends the waiting calls at that depth or deeper (they ended without a span: shorter than
//! `--min-duration`, or left without returning); taking a call's record drops the records of
//! calls that entered after it on its thread (left by longjmp or an exception).
//!
//! Calls of Go code kept per goroutine ([`Pending::enter_goroutine`]) share their thread with
//! other goroutines' and move between threads: the depth rule holds per goroutine instead (a new
//! entry at some depth of a goroutine ends its waiting calls at that depth or deeper), and the
//! oldest is dropped (and counted) once [`MAX_GOROUTINE_CALLS`] wait (a goroutine ended inside
//! traced calls leaves them waiting until its `runtime.g` is reused; under `--min-duration`, a
//! goroutine's short last call waits until the goroutine calls again).
use std::collections::BTreeMap;

/// Calls waiting at most; past it new records are dropped (counted).
const MAX_PENDING: usize = 1 << 18;

/// Calls of Go code waiting at most; past it the oldest is dropped (counted). Goroutines with
/// open calls number 16,384 at most in the kernel, each up to 64 deep: this covers 8 each.
const MAX_GOROUTINE_CALLS: usize = 1 << 17;

/// `depth` of a waiting call of Go code: no depth on its thread.
const GOROUTINE: u16 = u16::MAX;

/// A goroutine: its process and its `runtime.g` address.
type Goroutine = (u32, u64);

#[derive(Debug)]
pub struct Pending<T> {
    /// Per (thread, entry time): the call's depth on its thread ([`GOROUTINE`] for Go code) and
    /// its record.
    calls: BTreeMap<(u32, u64), (u16, T)>,
    /// The waiting calls of Go code by (entry time, thread), oldest first: their goroutine.
    goroutine_calls: BTreeMap<(u64, u32), Goroutine>,
    /// The same by (goroutine, entry time): their thread and their depth in the goroutine.
    by_goroutine: BTreeMap<(Goroutine, u64), (u32, u8)>,
    /// Records dropped because too many calls were waiting for their spans.
    pub dropped: u64,
}

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Pending {
            calls: BTreeMap::new(),
            goroutine_calls: BTreeMap::new(),
            by_goroutine: BTreeMap::new(),
            dropped: 0,
        }
    }
}

impl<T> Pending<T> {
    /// The entry record of the call on `tid` that entered at `start_ns`, `depth` deep.
    pub fn enter(&mut self, tid: u32, start_ns: u64, depth: u8, record: T) {
        let ended: Vec<(u32, u64)> = self
            .calls
            .range((tid, 0)..=(tid, u64::MAX))
            .filter(|(_, (d, _))| *d >= u16::from(depth) && *d != GOROUTINE)
            .map(|(key, _)| *key)
            .collect();
        for key in ended {
            self.calls.remove(&key);
        }
        if self.calls.len() >= MAX_PENDING {
            self.dropped += 1;
            return;
        }
        self.calls.insert((tid, start_ns), (u16::from(depth), record));
    }

    /// The entry record of a call of Go code that entered on `tid` at `start_ns`, `depth` deep in
    /// `goroutine`: it waits until its span takes it, a later call of its goroutine enters as deep
    /// or less, or it is the oldest of [`MAX_GOROUTINE_CALLS`] waiting.
    pub fn enter_goroutine(&mut self, goroutine: Goroutine, tid: u32, start_ns: u64, depth: u8, record: T) {
        let ended: Vec<u64> = self
            .by_goroutine
            .range((goroutine, 0)..=(goroutine, u64::MAX))
            .filter(|(_, (_, d))| *d >= depth)
            .map(|(key, _)| key.1)
            .collect();
        for start in ended {
            if let Some((tid, _)) = self.by_goroutine.remove(&(goroutine, start)) {
                self.forget_goroutine_call(tid, start);
            }
        }
        while self.goroutine_calls.len() >= MAX_GOROUTINE_CALLS {
            if let Some(((start, tid), _)) = self.goroutine_calls.first_key_value() {
                self.forget_goroutine_call(*tid, *start);
                self.dropped += 1;
            }
        }
        if self.calls.len() >= MAX_PENDING {
            self.dropped += 1;
            return;
        }
        self.calls.insert((tid, start_ns), (GOROUTINE, record));
        self.goroutine_calls.insert((start_ns, tid), goroutine);
        self.by_goroutine.insert((goroutine, start_ns), (tid, depth));
    }

    /// Removes the waiting call of Go code on `tid` that entered at `start_ns`; returns its record.
    fn forget_goroutine_call(&mut self, tid: u32, start_ns: u64) -> Option<T> {
        if let Some(goroutine) = self.goroutine_calls.remove(&(start_ns, tid)) {
            self.by_goroutine.remove(&(goroutine, start_ns));
        }
        self.calls.remove(&(tid, start_ns)).map(|(_, r)| r)
    }

    /// Takes the record of the call on `tid` that entered at `start_ns` (its span arrived). A
    /// call kept by its thread drops the records of calls that entered after it on that thread;
    /// one kept by its goroutine drops none: its thread has run other goroutines' calls since.
    pub fn take(&mut self, tid: u32, start_ns: u64) -> Option<T> {
        if matches!(self.calls.get(&(tid, start_ns)), Some((GOROUTINE, _))) {
            return self.forget_goroutine_call(tid, start_ns);
        }
        let stale: Vec<(u32, u64)> = self
            .calls
            .range((tid, start_ns)..=(tid, u64::MAX))
            .filter(|(key, (d, _))| key.1 == start_ns || *d != GOROUTINE)
            .map(|(key, _)| *key)
            .collect();
        let mut mine = None;
        for key in stale {
            let record = self.forget_goroutine_call(key.0, key.1);
            if key.1 == start_ns {
                mine = record;
            }
        }
        mine
    }

    pub fn get_mut(&mut self, tid: u32, start_ns: u64) -> Option<&mut T> {
        self.calls.get_mut(&(tid, start_ns)).map(|(_, r)| r)
    }

    /// Records of the calls still open on `tid` that entered before `start_ns` (its callers).
    pub fn callers(&self, tid: u32, start_ns: u64) -> impl Iterator<Item = &T> {
        self.calls.range((tid, 0)..(tid, start_ns)).map(|(_, (_, r))| r)
    }

    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}
