//! Opening ELF files: the one place xtrace reads one's bytes and parses them. [`Elf`] holds a
//! file's bytes (read whole, mapped, or an image copied from memory) and parses them on request;
//! files read whole are shared through a small cache of the latest ones ([`Elf::read`]);
//! [`LazyElf`] reads only the parts of a file its reader looks at; [`own_vdso`] is the
//! kernel's vDSO image, copied from xtrace's own mapping of it.
use std::{
    fs::File,
    io::{Read, Seek, SeekFrom},
    os::unix::fs::MetadataExt,
    path::Path,
    sync::{Arc, Mutex},
};

use object::read::ReadCache;

/// The bytes of one ELF file.
#[derive(Debug)]
pub struct Elf {
    data: Data,
}

#[derive(Debug)]
enum Data {
    /// Read whole into memory, or copied from memory (the vDSO).
    Owned(Vec<u8>),
    /// Mapped, read only where looked at.
    Mapped(memmap2::Mmap),
}

/// An ELF file parsed, its bytes read only as far as its reader looks ([`LazyElf`]).
pub type LazyObject<'a> = object::File<'a, &'a ReadCache<File>>;

/// An ELF file opened to be read only as far as its reader looks (headers, a few sections), not
/// whole.
#[derive(Debug)]
pub struct LazyElf(ReadCache<File>);

/// A file's identity as `stat` gives it: device, inode, size and modification time. A file
/// replaced (by rename or a rebuild) or rewritten in place differs in one of them.
type Identity = (u64, u64, u64, i64, i64);

/// The most files [`Elf::read`] keeps after their readers are done with them, and the most bytes
/// they may hold together (a larger file is never kept).
const KEPT_FILES: usize = 4;
const KEPT_BYTES: usize = 64 << 20;

/// The files read whole latest, newest first. Planning reads one file several times in a row
/// (its symbols, its IFUNC slots) and the pipeline one interpreter or data file per process that
/// maps it: the latest few cover both. The cache is bounded, not kept for the whole recording,
/// so that xtrace's memory does not grow with every file it has read.
static KEPT: Mutex<Vec<(Identity, Arc<Elf>)>> = Mutex::new(Vec::new());

impl Elf {
    /// The file at `path`, read whole (a file that changes after this is not seen changing), or
    /// the same bytes read a moment ago, when the file there is still the one read.
    pub fn read(path: impl AsRef<Path>) -> std::io::Result<Arc<Elf>> {
        let path = path.as_ref();
        let meta = std::fs::metadata(path)?;
        let identity = (
            meta.dev(),
            meta.ino(),
            meta.len(),
            meta.mtime(),
            meta.mtime_nsec(),
        );
        let mut kept = KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(at) = kept.iter().position(|(id, _)| *id == identity) {
            let found = kept.remove(at);
            let elf = found.1.clone();
            kept.insert(0, found);
            return Ok(elf);
        }
        drop(kept);
        let elf = Arc::new(Elf {
            data: Data::Owned(std::fs::read(path)?),
        });
        keep(identity, &elf);
        Ok(elf)
    }

    /// The file at `path`, mapped: only the pages its reader looks at are read (a debug file of
    /// gigabytes whose symbol table is wanted, a large library whose few sections are).
    pub fn map(path: impl AsRef<Path>) -> std::io::Result<Elf> {
        let file = File::open(path)?;
        // SAFETY: the map is only read, never written, and lives as long as this value. A file
        // truncated while mapped would fault (SIGBUS) as under gdb or perf; a package update
        // replaces a file by rename, which leaves the mapped one whole.
        let map = unsafe { memmap2::Mmap::map(&file) }?;
        Ok(Elf {
            data: Data::Mapped(map),
        })
    }

    /// An ELF image already in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Elf {
        Elf {
            data: Data::Owned(bytes),
        }
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::Owned(bytes) => bytes,
            Data::Mapped(map) => map,
        }
    }

    /// The file parsed (its headers; sections and symbols are read as they are asked for).
    pub fn parse(&self) -> object::Result<object::File<'_>> {
        object::File::parse(self.bytes())
    }
}

/// Keeps `elf` as the newest file read, within the cache's bounds.
fn keep(identity: Identity, elf: &Arc<Elf>) {
    if elf.bytes().len() > KEPT_BYTES {
        return;
    }
    let mut kept = KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    kept.retain(|(id, _)| *id != identity);
    kept.insert(0, (identity, elf.clone()));
    let mut bytes = 0;
    let within = kept
        .iter()
        .take_while(|(_, elf)| {
            bytes += elf.bytes().len();
            bytes <= KEPT_BYTES
        })
        .count();
    kept.truncate(within.min(KEPT_FILES));
}

impl LazyElf {
    /// The file at `path`, opened.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<LazyElf> {
        Ok(LazyElf(ReadCache::new(File::open(path)?)))
    }

    /// The file parsed: its headers are read now, what else is asked for as it is.
    pub fn parse(&self) -> object::Result<LazyObject<'_>> {
        object::File::parse(&self.0)
    }
}

/// The vDSO's image, copied from xtrace's own mapping of it (the kernel maps the same image into
/// every process), through /proc/self/mem.
pub fn own_vdso() -> Option<Elf> {
    let mapping = crate::procfs::own_maps()?
        .into_iter()
        .find(|m| m.path == "[vdso]")?;
    let mut mem = File::open("/proc/self/mem").ok()?;
    mem.seek(SeekFrom::Start(mapping.start)).ok()?;
    let mut image = vec![0; usize::try_from(mapping.end - mapping.start).ok()?];
    mem.read_exact(&mut image).ok()?;
    Some(Elf::from_bytes(image))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file read again while unchanged is the same bytes, not read again; a file rewritten is
    /// read again.
    #[test]
    fn a_file_is_read_once_while_it_is_unchanged() {
        let dir = std::env::temp_dir().join(format!("xtrace-elf-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lib.so");
        std::fs::copy(crate::test_libc(), &path).unwrap();
        let first = Elf::read(&path).unwrap();
        let again = Elf::read(&path).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert!(first.parse().is_ok());
        std::fs::write(&path, b"not ELF").unwrap();
        let rewritten = Elf::read(&path).unwrap();
        assert_eq!(rewritten.bytes(), b"not ELF");
        assert!(rewritten.parse().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_vdso_is_an_elf_image() {
        use object::Object;
        let vdso = own_vdso().expect("this process maps a vDSO");
        let file = vdso.parse().unwrap();
        assert!(file.dynamic_symbols().count() > 0);
    }
}
