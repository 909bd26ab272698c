//! Reading a whole BPF hash map with `bpf(BPF_MAP_LOOKUP_BATCH)` (Linux 5.6+): one system call
//! for up to `max_entries` entries, where aya 0.14's iterator makes two per entry (the next key,
//! then its value). The off-CPU totals map is read once a second; under `-a` it holds up to
//! 16,384 keys, which the iterator read with about 32,000 system calls a second.
use std::{
    io,
    mem::size_of,
    os::fd::{AsFd, AsRawFd},
};

use aya::{maps::MapData, Pod};
use aya_obj::generated::bpf_cmd;

/// `bpf_attr` for the `BPF_MAP_*_BATCH` commands.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Every entry of hash map `map` (keys `K`, values `V`, at most `max_entries` of them). An error
/// means the kernel refused the command (before 5.6, or not a hash map): read it another way.
pub fn hash_entries<K: Pod, V: Pod>(map: &MapData, max_entries: u32) -> io::Result<Vec<(K, V)>> {
    let max = max_entries.max(1) as usize;
    let mut keys = vec![0u8; max * size_of::<K>()];
    let mut values = vec![0u8; max * size_of::<V>()];
    let mut entries = Vec::new();
    // A hash map's batch token is the next bucket's index (a u32).
    let (mut token_in, mut token_out) = (0u32, 0u32);
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first { 0 } else { (&raw const token_in) as u64 },
            out_batch: (&raw mut token_out) as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: max as u32,
            map_fd: map.fd().as_fd().as_raw_fd() as u32,
            ..Default::default()
        };
        // SAFETY: `attr` is the batch member of `union bpf_attr`; its pointers refer to the
        // tokens and to buffers of `count` keys and values, all alive for the call; the kernel
        // writes the count it copied back into `attr`.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                bpf_cmd::BPF_MAP_LOOKUP_BATCH as libc::c_long,
                &raw mut attr,
                size_of::<BatchAttr>(),
            )
        };
        let done = match ret {
            0 => false,
            _ => match io::Error::last_os_error() {
                // The last batch: `count` entries were still copied.
                e if e.raw_os_error() == Some(libc::ENOENT) => true,
                e => return Err(e),
            },
        };
        let copied = (attr.count as usize).min(max);
        for i in 0..copied {
            // SAFETY: the kernel wrote `copied` keys and values of these sizes; Pod types may
            // be read from any bytes, unaligned.
            let (key, value) = unsafe {
                (
                    keys.as_ptr().cast::<K>().add(i).read_unaligned(),
                    values.as_ptr().cast::<V>().add(i).read_unaligned(),
                )
            };
            entries.push((key, value));
        }
        if done || copied == 0 {
            return Ok(entries);
        }
        token_in = token_out;
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;

    use aya::maps::{HashMap, IterableMap, Map};
    use aya_obj::generated::bpf_map_type;

    use super::*;
    use crate::bpf::attr::{bpf_fd, MapCreateAttr};

    /// A hash map of u64 → u32 with `max` entries, or None where this process may not make one
    /// (not root and XTRACE_REQUIRE_BPF unset).
    fn map(max: u32) -> Option<MapData> {
        let attr = MapCreateAttr {
            map_type: bpf_map_type::BPF_MAP_TYPE_HASH as u32,
            key_size: 8,
            value_size: 4,
            max_entries: max,
            ..Default::default()
        };
        let fd: OwnedFd = match bpf_fd(bpf_cmd::BPF_MAP_CREATE, &attr) {
            Ok(fd) => fd,
            Err(e) if std::env::var_os("XTRACE_REQUIRE_BPF").is_none() => {
                eprintln!("skipped: cannot create a BPF map ({e})");
                return None;
            }
            Err(e) => panic!("creating a BPF hash map: {e}"),
        };
        Some(MapData::from_fd(fd).expect("the new map"))
    }

    #[test]
    fn a_batch_read_gives_every_entry_once() {
        for (max, filled) in [(1000u32, 1000u64), (1000, 0), (1000, 7), (16384, 16384)] {
            let Some(data) = map(max) else { return };
            let mut data = Map::HashMap(data);
            let mut hash: HashMap<&mut MapData, u64, u32> = HashMap::try_from(&mut data).expect("a hash map");
            for key in 0..filled {
                hash.insert(key * 7919, (key % 97) as u32, 0).expect("insert");
            }
            let mut read = hash_entries::<u64, u32>(IterableMap::map(&hash), max).expect("a batch read");
            read.sort_unstable();
            let mut wanted: Vec<(u64, u32)> = (0..filled).map(|k| (k * 7919, (k % 97) as u32)).collect();
            wanted.sort_unstable();
            assert_eq!(read, wanted, "{filled} of {max}");
        }
    }
}
