//! The dynamic loader's lock in the target process: glibc's `_dl_load_lock`, a recursive mutex in
//! ld.so's `_rtld_global`, which a thread holds from the start of a `dlopen` to its end, the
//! library's constructors included. A thread held by `--inject` while another thread holds it
//! would wait for it in the trampoline's `dlopen`, and for good if that thread's constructor
//! waits for something the held thread holds; so `--inject` takes a thread only while the lock is
//! free or is that thread's own (the lock is recursive: a `dlopen` from a constructor goes on).
//!
//! `_rtld_global`'s layout is glibc's own and changes between versions; what has stayed is the
//! order `_dl_ns[DL_NNS]`, `_dl_nns`, `_dl_load_lock`, `_dl_load_write_lock`. The lock is found
//! there by that shape: a count of namespaces (1 to 16) followed by two recursive mutexes. Where
//! the shape is not found exactly once, the lock is not looked at (as before).
use crate::procfs::MapsLine;

/// Bytes of a `pthread_mutex_t`, and where its owner's thread id and its kind are in it
/// (`struct __pthread_mutex_s` on x86_64).
const MUTEX_BYTES: usize = 40;
const OWNER_AT: usize = 8;
const KIND_AT: usize = 16;
/// `PTHREAD_MUTEX_RECURSIVE_NP`, in the kind's low bits (`PTHREAD_MUTEX_KIND_MASK_NP`).
const RECURSIVE: u32 = 1;
const KIND_MASK: u32 = 3;
/// glibc's `DL_NNS`: the most namespaces.
const MAX_NAMESPACES: u64 = 16;

/// The address of `_dl_load_lock` in process `pid` (whose mapped files `open` gives a path to,
/// and whose memory `read` reads), when its ld.so has the shape this module knows.
pub fn find(
    files: &[MapsLine],
    open: impl Fn(&MapsLine) -> std::path::PathBuf,
    read: impl Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<u64> {
    let first = super::preflight::first_mapping(files, "ld-linux-x86-64.so.2")?;
    let found = super::preflight::dynamic_symbols(first, open(first), &["_rtld_global"]).ok()?;
    let (global, size) = found[0]?;
    let bytes = read(global, usize::try_from(size).ok()?)?;
    Some(global + locate(&bytes)? as u64)
}

/// Where in `_rtld_global`'s bytes `_dl_load_lock` is: the one place, 8-byte aligned, where a
/// count of namespaces is followed by two recursive mutexes.
fn locate(global: &[u8]) -> Option<usize> {
    let u64_at = |at: usize| Some(u64::from_ne_bytes(global.get(at..at + 8)?.try_into().ok()?));
    let recursive = |at: usize| {
        let kind = u32::from_ne_bytes(global.get(at + KIND_AT..at + KIND_AT + 4)?.try_into().ok()?);
        Some(kind & KIND_MASK == RECURSIVE)
    };
    let mut found = (8..global.len().saturating_sub(2 * MUTEX_BYTES - 1))
        .step_by(8)
        .filter(|&at| {
            u64_at(at - 8).is_some_and(|n| (1..=MAX_NAMESPACES).contains(&n))
                && recursive(at) == Some(true)
                && recursive(at + MUTEX_BYTES) == Some(true)
        });
    let at = found.next()?;
    found.next().is_none().then_some(at)
}

/// The thread holding the lock whose owner word `read` reads (0: none).
pub fn owner(lock: u64, read: impl FnOnce(u64, usize) -> Option<Vec<u8>>) -> Option<u32> {
    let bytes = read(lock + OWNER_AT as u64, 4)?;
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `_rtld_global` of `namespaces` 160-byte namespaces (their unique-symbol tables' locks
    /// recursive mutexes too), the count, then the loader's three locks.
    fn global(namespaces: u64) -> Vec<u8> {
        let mut bytes = vec![0u8; 16 * 160];
        for ns in 0..16 {
            // `_ns_unique_sym_table.lock`, after a pointer that is not a count.
            let at = ns * 160 + 40;
            bytes[at - 8..at].copy_from_slice(&0x7f00_1234_5678u64.to_ne_bytes());
            bytes[at + KIND_AT] = 1;
        }
        bytes.extend(namespaces.to_ne_bytes());
        for _ in 0..3 {
            let mut mutex = [0u8; MUTEX_BYTES];
            mutex[KIND_AT] = 1;
            bytes.extend(mutex);
        }
        bytes.extend([0u8; 64]);
        bytes
    }

    #[test]
    fn the_lock_follows_the_count_of_namespaces() {
        assert_eq!(locate(&global(1)), Some(16 * 160 + 8));
        // No count there, or a second place of that shape: not known.
        assert_eq!(locate(&global(0)), None);
        let mut twice = global(2);
        twice.extend(global(1));
        assert_eq!(locate(&twice), None);
        assert_eq!(locate(&[]), None);
    }

    /// This process's own loader: the lock is found, and free, no `dlopen` being under way.
    #[test]
    fn this_process_loader_lock_is_found_and_free() {
        let pid = std::process::id();
        let maps = crate::procfs::maps_text(pid).unwrap();
        let files: Vec<MapsLine> = maps.lines().filter_map(MapsLine::file).collect();
        let mem = std::fs::File::open("/proc/self/mem").unwrap();
        let read = |at, len| super::super::preflight::read_at(&mem, at, len);
        let lock = find(&files, |m| m.path.into(), read).expect("glibc's _dl_load_lock");
        assert_eq!(owner(lock, read), Some(0));
        // The count before it is this process's namespaces: the base one at least.
        let count = u64::from_ne_bytes(read(lock - 8, 8).unwrap().try_into().unwrap());
        assert!((1..=MAX_NAMESPACES).contains(&count), "{count}");
        // The mutex after it is the loader's write lock, which dl_iterate_phdr holds while it
        // calls its callback: this thread is its owner there, and the load lock stays free.
        let mut seen = (None, None);
        extern "C" fn callback(
            _: *mut libc::dl_phdr_info,
            _: libc::size_t,
            data: *mut libc::c_void,
        ) -> libc::c_int {
            // SAFETY: `data` is the `Box<dyn FnMut()>` below, alive for the whole call.
            let look = unsafe { &mut *data.cast::<Box<dyn FnMut()>>() };
            look();
            1
        }
        let mut look: Box<dyn FnMut()> = Box::new(|| {
            seen = (owner(lock, read), owner(lock + MUTEX_BYTES as u64, read));
        });
        // SAFETY: the callback only reads this process's memory through /proc/self/mem.
        unsafe { libc::dl_iterate_phdr(Some(callback), (&raw mut look).cast()) };
        drop(look);
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        assert_eq!(seen, (Some(0), Some(me)));
    }
}
