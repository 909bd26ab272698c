//! A fast hasher for the maps that trace.perfetto-trace's writer and reader consult once or more
//! per event (track uuids, iids, pids and tids, names): one rotate, xor and multiply per word,
//! where the default SipHash took about an eighth of reading a trace back. Keys come from xtrace
//! itself or from a trace file the user chose to read, not from a peer that could pick them to
//! collide.
use std::{
    collections::HashMap,
    hash::{BuildHasherDefault, Hasher},
};

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// FxHash's mixing (rustc's): fast on the small integer keys, fine on short strings.
#[derive(Clone, Copy, Debug, Default)]
pub struct FastHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word) ^ (rest.len() as u64) << 56);
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, BuildHasherDefault};

    use super::{FastHasher, FastMap};

    #[test]
    fn keys_hash_apart_and_maps_find_them() {
        let build = BuildHasherDefault::<FastHasher>::default();
        assert_ne!(build.hash_one(1u64), build.hash_one(2u64));
        assert_ne!(build.hash_one("ab"), build.hash_one("ab\0"));
        assert_ne!(build.hash_one((1u32, 2u32)), build.hash_one((2u32, 1u32)));
        let mut map = FastMap::default();
        for i in 0..1000u64 {
            map.insert(i, i * 2);
        }
        assert_eq!((0..1000u64).map(|i| map[&i]).sum::<u64>(), 999_000);
    }
}
