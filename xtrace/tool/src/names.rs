//! Range names the tracer reads once per process (`xtrace_common::ranges::INTERNED`): each name a
//! traced range passes is copied, the first time, into memory that is never freed, and the probes
//! get the copy's address with a tag bit, so the kernel program skips the string read, which costs
//! about as much as the rest of the hit. The first probe to pass a kept name tags it
//! `INTERNED_FIRST` (a flag byte before the copy says it was passed), so the tracer reads it then.
//! Up to `INTERN_LIMIT` names; past it (names built per call, say) a name is passed as it is and
//! read on every hit, as without interning.
//!
//! The table is lock-free: a slot is claimed with one compare-exchange, so a thread never waits on
//! another inside a traced range. Only traced calls come here (behind the semaphore checks).
//! It is not `text::interned`, which keeps NVTX handles' and ITT structs' names whole and without
//! bound behind a lock, because callers hold those pointers; this table is bounded, keeps what
//! the tracer reads, and never blocks a traced thread.
use core::{
    ffi::{c_char, CStr},
    ptr,
    sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering},
};

use xtrace_common::{
    event::ARG_STR_LEN,
    ranges::{ADDRESS, INTERNED, INTERNED_FIRST, INTERN_LIMIT},
};

/// Slots of the process's table: a power of two a third above the limit, so probe runs stay short.
const SLOTS: usize = 4096;
const _: () = assert!(SLOTS.is_power_of_two() && SLOTS > INTERN_LIMIT + INTERN_LIMIT / 4);

static NAMES: Table<SLOTS> = Table::new(INTERN_LIMIT);

/// The probe argument for string `s` in a probe fired now: 0 for none, else as [`Table::arg`]
/// says.
pub(crate) fn arg(s: Option<&CStr>) -> u64 {
    announce(keep(s))
}

/// `s` kept for a probe fired later ([`Table::keep`]): 0 for none. Pass it through [`announce`]
/// when the probe fires.
pub(crate) fn keep(s: Option<&CStr>) -> u64 {
    s.map_or(0, |s| NAMES.keep(s))
}

/// A kept name's argument as a probe fired now passes it: tagged `INTERNED_FIRST` if no probe has
/// passed this name before (the tracer reads it this once), else as it is. Announcing at the
/// hit, not when the name was kept, matters when probes fire in another order than names were
/// kept: a pop's name was kept at its push, and an inner range's pop comes first.
pub(crate) fn announce(value: u64) -> u64 {
    if value & INTERNED == 0 {
        return value;
    }
    // SAFETY: a kept copy's address, with its flag byte just before it (`copy_of`), never freed.
    let flag = unsafe { AtomicU8::from_ptr(((value & ADDRESS) as *mut u8).sub(1)) };
    if flag.load(Ordering::Relaxed) == 0 && flag.swap(1, Ordering::Relaxed) == 0 {
        (value & ADDRESS) | INTERNED_FIRST
    } else {
        value
    }
}

/// An open-addressing set of names, each a NUL-terminated copy that lives as long as the process.
pub(crate) struct Table<const N: usize> {
    slots: [AtomicPtr<c_char>; N],
    used: AtomicUsize,
    limit: usize,
}

impl<const N: usize> Table<N> {
    pub(crate) const fn new(limit: usize) -> Self {
        Table {
            slots: [const { AtomicPtr::new(ptr::null_mut()) }; N],
            used: AtomicUsize::new(0),
            limit,
        }
    }

    /// The kept copy of `name` (its first `ARG_STR_LEN - 1` bytes, all the tracer would read) as a
    /// probe argument: tagged `INTERNED_FIRST` on the first probe that passes it, `INTERNED`
    /// after. When the table is full, `name`'s own address, untagged, for the tracer to read.
    #[cfg(test)]
    pub(crate) fn arg(&self, name: &CStr) -> u64 {
        announce(self.keep(name))
    }

    /// The kept copy of `name`, made now if it is new, tagged `INTERNED`; when the table is full,
    /// `name`'s own address, untagged.
    pub(crate) fn keep(&self, name: &CStr) -> u64 {
        let key = traced_bytes(name);
        let mut at = hash(key) as usize;
        for _ in 0..N {
            let slot = &self.slots[at & (N - 1)];
            let mut kept = slot.load(Ordering::Acquire);
            if kept.is_null() {
                if self.used.load(Ordering::Relaxed) >= self.limit {
                    break;
                }
                let copy = copy_of(key);
                match slot.compare_exchange(ptr::null_mut(), copy, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        self.used.fetch_add(1, Ordering::Relaxed);
                        return copy as u64 | INTERNED;
                    }
                    Err(winner) => {
                        free(copy, key.len());
                        kept = winner;
                    }
                }
            }
            // SAFETY: a non-null slot holds a NUL-terminated copy that is never freed.
            if unsafe { CStr::from_ptr(kept) }.to_bytes() == key {
                return kept as u64 | INTERNED;
            }
            at = at.wrapping_add(1);
        }
        passed_as_is(name)
    }
}

/// The bytes of `name` the tracer would read: up to its NUL, at most `ARG_STR_LEN - 1`. Bounded,
/// so a long name costs no more than a short one.
pub(crate) fn traced_bytes(name: &CStr) -> &[u8] {
    let p = name.as_ptr().cast::<u8>();
    let mut len = 0;
    // SAFETY: within the NUL-terminated string (the loop stops at its NUL).
    while len < ARG_STR_LEN - 1 && unsafe { *p.add(len) } != 0 {
        len += 1;
    }
    // SAFETY: the `len` bytes just read.
    unsafe { core::slice::from_raw_parts(p, len) }
}

/// A NUL-terminated heap copy of `key` (which has no NUL), leaked to the caller, after a flag
/// byte (0) that [`announce`] sets: the copy's address is one past the allocation's.
fn copy_of(key: &[u8]) -> *mut c_char {
    let mut bytes = Vec::with_capacity(key.len() + 2);
    bytes.push(0);
    bytes.extend_from_slice(key);
    bytes.push(0);
    let whole: *mut [u8] = Box::into_raw(bytes.into_boxed_slice());
    // SAFETY: one byte into an allocation of at least two.
    unsafe { whole.cast::<u8>().add(1).cast() }
}

/// Frees a copy of a `len`-byte key that [`copy_of`] made and nobody saw.
fn free(copy: *mut c_char, len: usize) {
    // SAFETY: `copy` is one past the start of a boxed slice of `len + 2` bytes, never shared.
    drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(copy.cast::<u8>().sub(1), len + 2)) });
}

/// FNV-1a: short names, few collisions, no state.
fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// `name`'s own address, untagged, with the bytes the tracer reads touched first: the kernel
/// program cannot fault a page in, and a string the program never touched itself (a literal
/// whose address alone was passed) may sit in a page not yet mapped in.
fn passed_as_is(name: &CStr) -> u64 {
    let p = name.as_ptr();
    for i in 0..ARG_STR_LEN {
        // SAFETY: within the NUL-terminated string (the loop stops at its NUL).
        if unsafe { ptr::read_volatile(p.add(i)) } == 0 {
            break;
        }
    }
    p as u64
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap, ffi::CString, sync::Arc, thread};

    use xtrace_common::ranges::{ADDRESS, INTERNED, INTERNED_FIRST};

    use super::Table;

    fn kept(arg: u64) -> String {
        // SAFETY: a tagged argument is the address of a kept copy.
        unsafe { std::ffi::CStr::from_ptr((arg & ADDRESS) as *const core::ffi::c_char) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_name_is_copied_once_then_passed_as_known() {
        let table = Table::<16>::new(8);
        let step = CString::new("step").unwrap();
        let first = table.arg(&step);
        assert_eq!(first & !ADDRESS, INTERNED_FIRST);
        assert_ne!(
            first & ADDRESS,
            step.as_ptr() as u64,
            "the copy, not the caller's string"
        );
        assert_eq!(kept(first), "step");
        let again = CString::new("step").unwrap();
        assert_eq!(table.arg(&again), (first & ADDRESS) | INTERNED);
        let other = table.arg(&CString::new("load").unwrap());
        assert_eq!(other & !ADDRESS, INTERNED_FIRST);
        assert_ne!(other & ADDRESS, first & ADDRESS);
        assert_eq!(kept(other), "load");
    }

    #[test]
    fn a_name_kept_for_later_is_first_at_the_first_probe_that_passes_it() {
        let table = Table::<16>::new(8);
        let kept_early = table.keep(&CString::new("outer").unwrap());
        assert_eq!(kept_early & !ADDRESS, INTERNED);
        let inner_use = table.keep(&CString::new("outer").unwrap());
        assert_eq!(inner_use, kept_early, "kept once");
        assert_eq!(super::announce(inner_use), (inner_use & ADDRESS) | INTERNED_FIRST);
        assert_eq!(super::announce(kept_early), kept_early, "already passed");
        assert_eq!(super::announce(0), 0);
        let as_is = 0x1234_5678;
        assert_eq!(super::announce(as_is), as_is);
    }

    #[test]
    fn a_long_name_is_kept_as_far_as_the_tracer_reads() {
        let table = Table::<16>::new(8);
        let long = CString::new("x".repeat(100)).unwrap();
        let arg = table.arg(&long);
        assert_eq!(kept(arg), "x".repeat(63));
        // Names that differ only past what is read are one name.
        let longer = CString::new("x".repeat(120)).unwrap();
        assert_eq!(table.arg(&longer), (arg & ADDRESS) | INTERNED);
    }

    #[test]
    fn past_the_limit_a_name_is_passed_as_it_is() {
        let table = Table::<16>::new(3);
        for name in ["a", "b", "c"] {
            assert_eq!(table.arg(&CString::new(name).unwrap()) & !ADDRESS, INTERNED_FIRST);
        }
        let d = CString::new("d").unwrap();
        assert_eq!(table.arg(&d), d.as_ptr() as u64);
        // Names kept before the limit stay known.
        assert_eq!(table.arg(&CString::new("b").unwrap()) & !ADDRESS, INTERNED);
    }

    #[test]
    fn threads_racing_on_the_same_names_share_one_copy_each() {
        let table = Arc::new(Table::<256>::new(192));
        let names: Vec<String> = (0..100).map(|i| format!("range {i}")).collect();
        let runs: Vec<Vec<u64>> = (0..4)
            .map(|_| {
                let (table, names) = (Arc::clone(&table), names.clone());
                thread::spawn(move || {
                    names
                        .iter()
                        .map(|n| table.arg(&CString::new(n.as_str()).unwrap()))
                        .collect()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        let mut firsts = HashMap::new();
        for (i, name) in names.iter().enumerate() {
            let address = runs[0][i] & ADDRESS;
            for run in &runs {
                assert_eq!(run[i] & ADDRESS, address, "{name}: one copy");
                assert!(run[i] & (INTERNED | INTERNED_FIRST) != 0);
                *firsts.entry(name).or_insert(0) += u32::from(run[i] & INTERNED_FIRST != 0);
            }
            assert_eq!(kept(runs[0][i]), *name);
        }
        assert!(
            firsts.values().all(|&n| n == 1),
            "one first use per name: {firsts:?}"
        );
    }
}
