//! The CPU samples of the flight recorder's window (`--flight` with sampling): each sample is
//! kept in the slot of its time as a [`FlightSample`], its thread and time with a reference to its
//! stack, and each distinct stack is held once, in [`Stacks`], for as long as a sample of the
//! window refers to it. When the slots that refer to a stack age out, the stack goes too
//! ([`Stacks::prune`]), so the memory samples take is bounded by the window's, and counted in
//! the same byte cap (`--flight-size`).
use std::{collections::HashSet, sync::Arc};

use super::samples::StackKey;

/// One sample in the window: when, which thread, which stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlightSample {
    pub ts_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub stack: Arc<StackKey>,
}

/// The heap an allocation of `len` bytes takes, as the flight recorder counts it: rounded up to
/// the allocator's 16, and its own header; nothing for an empty one (no allocation).
pub fn heap(len: usize) -> usize {
    match len {
        0 => 0,
        len => len.div_ceil(16) * 16 + 16,
    }
}

/// The bytes one stack takes: its `Arc` (two counts and the key), and its frames.
pub fn stack_bytes(key: &StackKey) -> usize {
    heap(2 * std::mem::size_of::<usize>() + std::mem::size_of::<StackKey>())
        + heap(std::mem::size_of_val(&*key.kernel))
        + heap(std::mem::size_of_val(&*key.user))
        + heap(std::mem::size_of_val(&*key.python))
}

/// The distinct stacks the window's samples refer to, each held once.
#[derive(Debug, Default)]
pub struct Stacks {
    set: HashSet<Arc<StackKey>>,
    /// The bytes of the stacks in `set`, without the table's own.
    held: usize,
}

impl Stacks {
    /// The stack `key` as held here: the one already held when it is, else `key`, from now on.
    pub fn intern(&mut self, key: StackKey) -> Arc<StackKey> {
        if let Some(held) = self.set.get(&key) {
            return held.clone();
        }
        self.held += stack_bytes(&key);
        let key = Arc::new(key);
        self.set.insert(key.clone());
        key
    }

    /// Drops the stacks no sample refers to any more (their slots aged out).
    pub fn prune(&mut self) {
        let mut freed = 0;
        self.set.retain(|key| {
            let kept = Arc::strong_count(key) > 1;
            if !kept {
                freed += stack_bytes(key);
            }
            kept
        });
        self.held -= freed;
        // A table that emptied after a burst gives its room back.
        if self.set.len() * 4 < self.set.capacity() {
            self.set.shrink_to_fit();
        }
    }

    /// The bytes it holds: the stacks, and the table's slots (a pointer and a control byte each,
    /// over its whole capacity).
    pub fn bytes(&self) -> usize {
        self.held + self.set.capacity() * (std::mem::size_of::<Arc<StackKey>>() + 1)
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The stacks held, in no order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<StackKey>> {
        self.set.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn key(pid: u32, user: &[u64]) -> StackKey {
        StackKey {
            pid,
            image: 0,
            mapped: 0,
            kernel: Box::new([]),
            user: user.into(),
            python: Box::new([]),
        }
    }

    #[test]
    fn a_stack_weighs_its_arc_and_its_frames() {
        let arc = heap(16 + std::mem::size_of::<StackKey>());
        assert_eq!(stack_bytes(&key(1, &[])), arc, "no frames, no allocations");
        // Three user frames: 24 bytes, 32 with the allocator's rounding, 48 with its header.
        assert_eq!(stack_bytes(&key(1, &[1, 2, 3])), arc + 48);
        let mut both = key(1, &[1]);
        both.kernel = Box::new([7; 20]);
        assert_eq!(stack_bytes(&both), arc + 32 + (160 + 16));
    }

    #[test]
    fn each_stack_is_held_once_while_a_sample_refers_to_it() {
        let mut stacks = Stacks::default();
        let a = stacks.intern(key(1, &[1, 2]));
        let again = stacks.intern(key(1, &[1, 2]));
        assert!(Arc::ptr_eq(&a, &again));
        let b = stacks.intern(key(2, &[1, 2]));
        assert_eq!(stacks.len(), 2);
        let two = stacks.bytes();
        assert!(two >= 2 * stack_bytes(&key(1, &[1, 2])));
        // `a` is still referred to (twice); `b` no longer.
        drop(b);
        stacks.prune();
        assert_eq!(stacks.len(), 1);
        assert_eq!(stacks.held, stack_bytes(&key(1, &[1, 2])));
        drop((a, again));
        stacks.prune();
        assert!(stacks.is_empty());
        assert_eq!(stacks.held, 0);
    }
}
