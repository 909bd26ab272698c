//! Calls whose entry record waits for their span, per thread and entry time. A new entry at some
//! depth ends the waiting calls at that depth or deeper (they ended without a span: shorter than
//! `--min-duration`, or left without returning); taking a call's record drops the records of
//! calls that entered after it on its thread (left by longjmp or an exception).
use std::collections::BTreeMap;

/// Calls waiting at most; past it new records are dropped (counted).
const MAX_PENDING: usize = 1 << 16;

#[derive(Debug)]
pub struct Pending<T> {
    calls: BTreeMap<(u32, u64), (u8, T)>,
    /// Records dropped because too many calls were waiting for their spans.
    pub dropped: u64,
}

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Pending {
            calls: BTreeMap::new(),
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
            .filter(|(_, (d, _))| *d >= depth)
            .map(|(key, _)| *key)
            .collect();
        for key in ended {
            self.calls.remove(&key);
        }
        if self.calls.len() >= MAX_PENDING {
            self.dropped += 1;
            return;
        }
        self.calls.insert((tid, start_ns), (depth, record));
    }

    /// Takes the record of the call on `tid` that entered at `start_ns` (its span arrived).
    pub fn take(&mut self, tid: u32, start_ns: u64) -> Option<T> {
        let stale: Vec<(u32, u64)> = self
            .calls
            .range((tid, start_ns)..=(tid, u64::MAX))
            .map(|(key, _)| *key)
            .collect();
        let mut mine = None;
        for key in stale {
            let record = self.calls.remove(&key);
            if key.1 == start_ns {
                mine = record.map(|(_, r)| r);
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
