//! Addresses looked up in sorted ranges that do not overlap (symbols, functions, PLT stubs,
//! kernel programs).
use std::ops::Range;

/// The item of `sorted` (by the start of its `range`, none overlapping) whose range holds
/// `address`.
pub fn covering<T>(sorted: &[T], address: u64, range: impl Fn(&T) -> Range<u64>) -> Option<&T> {
    let after = sorted.partition_point(|item| range(item).start <= address);
    sorted[..after]
        .last()
        .filter(|item| range(item).contains(&address))
}
