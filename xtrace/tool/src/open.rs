//! Push/pop ranges in one probe hit: while `range_pop` is traced, each thread keeps its open
//! ranges here with the CLOCK_MONOTONIC time each began, and a pop fires `range_pop` with the
//! range's name, start and depth (`xtrace_common::ranges`, *One probe per push/pop range*).
//! `range_push` fires too, but only while a tracer raised its own semaphore, with plain string
//! addresses (other tracers read it, not xtrace).
//!
//! Only traced calls come here (behind the semaphore checks), so an untraced range still costs a
//! semaphore check. A push from a traced session whose pop went untraced stays behind at the
//! bottom of the stack; the tracer tells it by its start (before it attached), and the oldest
//! entries make room when the stack is full, so it cannot crowd out later ranges. Until then it
//! counts in the depth of the ranges of its stack opened above it.
use core::{cell::RefCell, ffi::CStr};

use xtrace_common::{
    event::ARG_STR_LEN,
    ranges::{ADDRESS, INTERNED, OPEN_DEPTH},
};

use crate::{
    names,
    usdt::{self, enabled, Source},
};

/// Whether a push must be seen at all: a tracer follows pushes, or will want their starts at the
/// pop. Callers check it before converting a name.
pub(crate) fn push_wanted() -> bool {
    enabled!(xtrace_range_push_semaphore) || enabled!(xtrace_range_pop_semaphore)
}

/// Opens a range on this thread's stack of (`source`, `domain`). Call when [`push_wanted`].
pub(crate) fn push(source: Source, domain: Option<&CStr>, name: Option<&CStr>) {
    let (d, n) = (names::keep(domain), names::keep(name));
    if enabled!(xtrace_range_push_semaphore) {
        // For other tracers, which read the strings as they are: plain addresses (a kept copy
        // lives as long as the process), and no `announce`, whose one INTERNED_FIRST tag is for
        // the probe xtrace reads.
        usdt::range_push(source, d & ADDRESS, n & ADDRESS);
    }
    if enabled!(xtrace_range_pop_semaphore) {
        let entry = Entry {
            start_ns: monotonic_ns(),
            key: key(source, domain),
            domain: d,
            name: n,
        };
        // A push from inside a push on this thread (a signal handler) is not kept; its pop then
        // carries start 0.
        let _ = STACK.with(|s| s.try_borrow_mut().map(|mut s| s.push(entry, name)));
    }
}

/// Whether a pop must be seen: `range_pop` is traced.
pub(crate) fn pop_wanted() -> bool {
    enabled!(xtrace_range_pop_semaphore)
}

/// Closes this thread's innermost range of (`source`, `domain`) and fires `range_pop` with it
/// (start 0 when this thread kept no such range). Call when [`pop_wanted`].
pub(crate) fn pop(source: Source, domain: Option<&CStr>) {
    let mut copy = [0u8; ARG_STR_LEN];
    let popped = STACK.with(|s| {
        s.try_borrow_mut()
            .ok()
            .and_then(|mut s| s.pop(key(source, domain), &mut copy))
    });
    match popped {
        Some((entry, depth)) => {
            // A name passed as it is (past the intern limit) was copied at the push, since the
            // caller's string may be gone by now: the tracer reads the copy.
            let name = match entry.name {
                n if n == 0 || n & INTERNED != 0 => names::announce(n),
                _ => copy.as_ptr() as u64,
            };
            let domain = names::announce(entry.domain);
            usdt::range_pop(source, domain, name, entry.start_ns, depth);
        }
        None => usdt::range_pop(source, names::arg(domain), 0, 0, 0),
    }
}

/// Which stack a range is on: its source and its domain's address (0: the default domain).
type Key = (Source, usize);

fn key(source: Source, domain: Option<&CStr>) -> Key {
    (source, domain.map_or(0, |d| d.as_ptr() as usize))
}

/// One open range: when it began, and its domain and name as `names::keep` made them.
#[derive(Clone, Copy)]
struct Entry {
    start_ns: u64,
    key: Key,
    domain: u64,
    name: u64,
}

impl Entry {
    /// What a slot outside the open entries holds; never read.
    const EMPTY: Entry = Entry {
        start_ns: 0,
        key: (Source::Xtrace, 0),
        domain: 0,
        name: 0,
    };
}

/// A thread's open ranges, oldest first, in a ring: when it is full, a push forgets the oldest.
struct Stack {
    /// Slots `base..base + len` (mod `OPEN_DEPTH`) hold the open entries.
    entries: [Entry; OPEN_DEPTH],
    /// The copies of names passed as they are, by slot.
    copies: [[u8; ARG_STR_LEN]; OPEN_DEPTH],
    /// The slot of the oldest entry, and how many there are.
    base: usize,
    len: usize,
}

thread_local! {
    static STACK: RefCell<Stack> = const { RefCell::new(Stack::new()) };
}

impl Stack {
    const fn new() -> Self {
        Stack {
            entries: [Entry::EMPTY; OPEN_DEPTH],
            copies: [[0; ARG_STR_LEN]; OPEN_DEPTH],
            base: 0,
            len: 0,
        }
    }

    fn slot(&self, i: usize) -> usize {
        (self.base + i) % OPEN_DEPTH
    }

    fn push(&mut self, entry: Entry, name: Option<&CStr>) {
        if self.len == OPEN_DEPTH {
            self.base = self.slot(1);
            self.len -= 1;
        }
        let slot = self.slot(self.len);
        self.entries[slot] = entry;
        if entry.name != 0 && entry.name & INTERNED == 0 {
            // What the tracer reads of it: at most ARG_STR_LEN - 1 bytes, found with a bound.
            let bytes = name.map_or(&[][..], names::traced_bytes);
            self.copies[slot][..bytes.len()].copy_from_slice(bytes);
            self.copies[slot][bytes.len()] = 0;
        }
        self.len += 1;
    }

    /// Removes the innermost entry of `key`; returns it with the number of entries of `key` still
    /// open outside it (its depth), its name's copy in `copy`.
    fn pop(&mut self, key: Key, copy: &mut [u8; ARG_STR_LEN]) -> Option<(Entry, u64)> {
        let at = (0..self.len)
            .rev()
            .find(|&i| self.entries[self.slot(i)].key == key)?;
        let slot = self.slot(at);
        let entry = self.entries[slot];
        *copy = self.copies[slot];
        // Entries of other keys opened inside it move down (rare: domains interleaved).
        for i in at..self.len - 1 {
            let (to, from) = (self.slot(i), self.slot(i + 1));
            self.entries[to] = self.entries[from];
            self.copies[to] = self.copies[from];
        }
        self.len -= 1;
        let depth = (0..at).filter(|&i| self.entries[self.slot(i)].key == key).count();
        Some((entry, depth as u64))
    }
}

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

/// Linux's CLOCK_MONOTONIC, the clock `bpf_ktime_get_ns` reads.
const CLOCK_MONOTONIC: i32 = 1;

/// CLOCK_MONOTONIC in ns (a vDSO call, no system call).
fn monotonic_ns() -> u64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: clock_gettime writes one timespec; CLOCK_MONOTONIC always exists.
    unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) };
    ts.sec as u64 * 1_000_000_000 + ts.nsec as u64
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;

    use super::*;

    fn entry(start_ns: u64, key: Key, name: u64) -> Entry {
        Entry {
            start_ns,
            key,
            domain: 0,
            name,
        }
    }

    const XTRACE: Key = (Source::Xtrace, 0);
    const IO: Key = (Source::Nvtx, 0x1000);

    fn stack() -> Box<Stack> {
        Box::new(Stack::new())
    }

    fn pop(s: &mut Stack, key: Key) -> Option<(u64, u64)> {
        let mut copy = [0; ARG_STR_LEN];
        s.pop(key, &mut copy).map(|(e, depth)| (e.start_ns, depth))
    }

    #[test]
    fn pops_are_innermost_first_per_domain_with_depths() {
        let mut s = stack();
        s.push(entry(1, XTRACE, INTERNED), None);
        s.push(entry(2, XTRACE, INTERNED), None);
        s.push(entry(3, IO, INTERNED), None);
        s.push(entry(4, XTRACE, INTERNED), None);
        assert_eq!(pop(&mut s, IO), Some((3, 0)), "another domain's stack");
        assert_eq!(pop(&mut s, XTRACE), Some((4, 2)));
        assert_eq!(pop(&mut s, XTRACE), Some((2, 1)));
        assert_eq!(pop(&mut s, XTRACE), Some((1, 0)));
        assert_eq!(pop(&mut s, XTRACE), None);
        assert_eq!(s.len, 0);
    }

    #[test]
    fn a_full_stack_forgets_its_oldest_ranges() {
        let mut s = stack();
        let extra = 5;
        for i in 0..(OPEN_DEPTH + extra) as u64 {
            s.push(entry(i + 1, XTRACE, INTERNED), None);
        }
        for i in (extra as u64..(OPEN_DEPTH + extra) as u64).rev() {
            assert_eq!(pop(&mut s, XTRACE), Some((i + 1, i - extra as u64)));
        }
        assert_eq!(pop(&mut s, XTRACE), None, "the {extra} oldest were forgotten");
    }

    #[test]
    fn a_name_passed_as_it_is_is_copied_at_the_push() {
        let mut s = stack();
        let name = CString::new("built per call").unwrap();
        s.push(entry(1, XTRACE, name.as_ptr() as u64), Some(&name));
        drop(name);
        let mut copy = [0; ARG_STR_LEN];
        s.pop(XTRACE, &mut copy).unwrap();
        assert_eq!(
            CStr::from_bytes_until_nul(&copy).unwrap().to_str(),
            Ok("built per call")
        );
    }
}
