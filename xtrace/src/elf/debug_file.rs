//! Separate debug files, found as gdb, perf and bpftrace find them, for a stripped file's local
//! functions (Debian's `-dbgsym` and `libc6-dbg` packages, `objcopy --only-keep-debug`):
//! 1. by build ID: `DIR/.build-id/NN/NNNN….debug`, where the file's build-ID note names it;
//! 2. by the name and CRC in its `.gnu_debuglink`: next to the file, in `.debug/` beside it, then
//!    as `DIR/<the file's directory>/NAME`;
//!
//! for each DIR of `--debug-dir`, then `/usr/lib/debug` and `/lib/debug` ([`DebugDirs`]). A candidate is taken
//! only if it matches: the same build ID, or for a debug link without build IDs on both sides the
//! link's CRC; and it must have a symbol table. `-u` and `list symbols` read its `.symtab`
//! (`probes::elf`); CPU samples are named from it (`symbolize`: blazesym
//! follows a debug link itself, and [`DebugFiles`] finds a debug file known only by build ID).
use std::{
    collections::HashMap,
    ffi::OsStr,
    os::unix::{ffi::OsStrExt, fs::MetadataExt},
    path::{Path, PathBuf},
};

use object::{Object, ObjectSegment};

/// Where debug files are installed unless `--debug-dir` names more (searched first).
const DEFAULT_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

/// The directories debug files are looked for in: those of `--debug-dir`, searched first, then
/// the default ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DebugDirs {
    extra: Vec<PathBuf>,
}

impl DebugDirs {
    /// The default directories after `extra` (`--debug-dir`).
    pub fn new(extra: Vec<PathBuf>) -> Self {
        DebugDirs { extra }
    }

    /// Every directory searched, in order.
    pub fn all(&self) -> Vec<PathBuf> {
        self.extra
            .iter()
            .cloned()
            .chain(DEFAULT_DIRS.iter().map(PathBuf::from))
            .collect()
    }
}

/// `--debug-dir`'s check: a directory that can be read.
pub fn parse_dir(value: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(value);
    match std::fs::metadata(&path) {
        Ok(meta) if meta.is_dir() => Ok(path),
        Ok(_) => Err("not a directory; give the directory that holds the debug files".into()),
        Err(e) => Err(format!("{e}; give the directory that holds the debug files")),
    }
}

/// A debug file that matches its file.
pub struct Found {
    /// Where this process opens it.
    pub path: PathBuf,
    /// Its path as the traced process sees it, for messages.
    pub shown: PathBuf,
}

/// What a search found: the debug file, or why the first candidate that exists was not taken.
#[derive(Default)]
pub struct Search {
    pub found: Option<Found>,
    /// `PATH (why)` of the first candidate refused.
    pub refused: Option<String>,
}

/// How a candidate was named: by build ID, or by the debug link's name (and its CRC).
#[derive(Clone, Copy)]
enum Named {
    BuildId,
    Link(u32),
}

/// The debug file of the ELF file `file`, opened at `open` and known as `shown` (its path in its
/// own mount namespace, which the debug directories mirror; a relative one is taken from the
/// current directory, as a launched command's is).
pub fn find<'data>(open: &Path, shown: &Path, file: &impl Object<'data>, dirs: &DebugDirs) -> Search {
    let own_id = file.build_id().ok().flatten().filter(|id| id.len() >= 2);
    let link = file.gnu_debuglink().ok().flatten();
    let own_inode = std::fs::metadata(open).ok().map(|m| (m.dev(), m.ino()));
    let mut search = Search::default();
    let places = Places::of(open, shown);
    for Candidate { path, shown, named } in candidates(dirs, &places, own_id, link) {
        match check(&path, named, own_id, own_inode) {
            Check::Missing => {}
            Check::Match => {
                search.found = Some(Found { path, shown });
                return search;
            }
            Check::Refused(why) => {
                search
                    .refused
                    .get_or_insert_with(|| format!("{} ({why})", shown.display()));
            }
        }
    }
    search
}

/// A place the debug file may be.
struct Candidate {
    /// Where this process opens it.
    path: PathBuf,
    /// Its path as the traced process sees it, for messages.
    shown: PathBuf,
    named: Named,
}

/// A path into a process's view, `/proc/PID/PART/REST`, split.
fn proc_path(path: &Path) -> Option<(u32, &OsStr, &Path)> {
    let mut parts = path.strip_prefix("/proc").ok()?.components();
    let pid = parts.next()?.as_os_str().to_str()?.parse().ok()?;
    let part = parts.next()?.as_os_str();
    Some((pid, part, parts.as_path()))
}

/// Where the debug file of a file may be: the file's own directory (as opened, and as its
/// process sees it), each as named and with its symlinks resolved (`/lib` is `/usr/lib` on
/// Debian, a command may be launched through a symlink); and, for a file of another mount
/// namespace (a container), that namespace's debug directories too.
#[derive(Debug, Default, PartialEq)]
struct Places {
    /// (where this process opens the file's directory, that directory as shown).
    beside: Vec<(PathBuf, PathBuf)>,
    /// The file's directory as its process sees it, absolute: mirrored under each debug directory.
    mirrored: Vec<PathBuf>,
    /// `/proc/PID/root` of the file's process, where its mount namespace is not this process's.
    root: Option<PathBuf>,
}

impl Places {
    /// `open` is a path of this process's view, or of another process's (`/proc/PID/root/...`,
    /// `/proc/PID/exe`, `/proc/PID/map_files/...`); `shown` the file's path as its process sees
    /// it (`/proc/PID/root/REST` is taken for `/REST`; a `/proc/PID/...` link names no directory).
    fn of(open: &Path, shown: &Path) -> Places {
        let open = &std::path::absolute(open).unwrap_or_else(|_| open.to_path_buf());
        let shown = std::path::absolute(shown).unwrap_or_else(|_| shown.to_path_buf());
        let shown = match proc_path(&shown) {
            Some((_, part, rest)) if part == "root" => Some(Path::new("/").join(rest)),
            Some(_) => None,
            None => Some(shown),
        };
        let process = proc_path(open).map(|(pid, _, _)| pid);
        let mut places = Places::default();
        let mut add = |open_dir: PathBuf, shown_dir: PathBuf| {
            if !places.beside.iter().any(|(o, _)| *o == open_dir) {
                places.beside.push((open_dir, shown_dir.clone()));
            }
            if !places.mirrored.contains(&shown_dir) {
                places.mirrored.push(shown_dir);
            }
        };
        if let Some(shown_dir) = shown.as_deref().and_then(Path::parent) {
            // `open` may be a link (`/proc/PID/exe`, `/proc/self/fd/N`) whose directory is not the
            // file's: the shown directory, under the process's root.
            let dir = match process {
                Some(pid) => proc_root(pid).join(shown_dir.strip_prefix("/").unwrap_or(shown_dir)),
                None if open.starts_with("/proc") => shown_dir.to_path_buf(),
                None => open
                    .parent()
                    .map_or_else(|| shown_dir.to_path_buf(), Path::to_path_buf),
            };
            add(dir, shown_dir.to_path_buf());
        }
        match process {
            Some(pid) => {
                // Another mount namespace may mount other debug files, over the same root.
                let namespace = |of: &str| std::fs::read_link(format!("/proc/{of}/ns/mnt")).ok();
                let ours = namespace("self");
                if ours.is_none() || namespace(&pid.to_string()) != ours {
                    places.root = Some(proc_root(pid));
                }
            }
            // Through the links: a file this process opens by its own path (or through its own
            // descriptor: a launched command) resolves to where it lies here.
            None => {
                if let Some(dir) = std::fs::canonicalize(open)
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_path_buf))
                {
                    add(dir.clone(), dir);
                }
            }
        }
        places
    }
}

fn proc_root(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root"))
}

/// Where the debug file may be, in the order looked at.
fn candidates(
    dirs: &DebugDirs,
    places: &Places,
    build_id: Option<&[u8]>,
    link: Option<(&[u8], u32)>,
) -> Vec<Candidate> {
    // (where this process opens a debug directory, how it is shown): xtrace's, then the
    // container's defaults.
    let mut dirs: Vec<(PathBuf, PathBuf)> = dirs.all().into_iter().map(|d| (d.clone(), d)).collect();
    if let Some(root) = &places.root {
        for dir in DEFAULT_DIRS {
            dirs.push((root.join(&dir[1..]), PathBuf::from(dir)));
        }
    }
    let in_dirs = |relative: &Path, named: Named| {
        dirs.iter()
            .map(|(open, shown)| Candidate {
                path: open.join(relative),
                shown: shown.join(relative),
                named,
            })
            .collect::<Vec<_>>()
    };
    let mut out = Vec::new();
    if let Some(id) = build_id {
        let relative = format!(
            ".build-id/{}/{}.debug",
            super::hex(&id[..1]),
            super::hex(&id[1..])
        );
        out.extend(in_dirs(Path::new(&relative), Named::BuildId));
    }
    // A link names a file, not a path.
    if let Some((name, crc)) = link.filter(|(name, _)| !name.is_empty() && !name.contains(&b'/')) {
        let name = OsStr::from_bytes(name);
        let named = Named::Link(crc);
        for (dir, shown_dir) in &places.beside {
            for sub in [Path::new(""), Path::new(".debug")] {
                out.push(Candidate {
                    path: dir.join(sub).join(name),
                    shown: shown_dir.join(sub).join(name),
                    named,
                });
            }
        }
        for dir in &places.mirrored {
            let inner = dir.strip_prefix("/").unwrap_or(dir);
            out.extend(in_dirs(&inner.join(name), named));
        }
    }
    out
}

enum Check {
    Missing,
    Match,
    Refused(&'static str),
}

fn check(candidate: &Path, named: Named, own_id: Option<&[u8]>, own_inode: Option<(u64, u64)>) -> Check {
    let Ok(meta) = std::fs::metadata(candidate) else {
        return Check::Missing;
    };
    // A link that names the file itself (a debug file found as its own).
    if !meta.is_file() || own_inode == Some((meta.dev(), meta.ino())) {
        return Check::Missing;
    }
    // Only what is looked at is read: a debug file may be of gigabytes.
    let Some(path) = candidate.to_str() else {
        return Check::Missing;
    };
    super::read_elf(path, |debug| Some(judge(candidate, debug, named, own_id)))
        .unwrap_or(Check::Refused("not an ELF file"))
}

/// Whether the ELF file `debug` at `candidate` is the debug file sought.
fn judge<'data>(candidate: &Path, debug: &impl Object<'data>, named: Named, own_id: Option<&[u8]>) -> Check {
    let their_id = debug.build_id().ok().flatten();
    let matches = match (named, own_id, their_id) {
        (_, Some(own), Some(theirs)) => own == theirs,
        (Named::Link(crc), _, _) => crc_of(candidate) == Some(crc),
        (Named::BuildId, _, _) => false,
    };
    if !matches {
        return Check::Refused(match named {
            Named::BuildId if their_id.is_none() => "no build ID",
            Named::BuildId => "another build ID",
            Named::Link(_) if own_id.is_some() && their_id.is_some() => "another build ID",
            Named::Link(_) => "its CRC is not the one the .gnu_debuglink names",
        });
    }
    if debug.symbols().next().is_none() {
        return Check::Refused("no symbol table");
    }
    Check::Match
}

/// The CRC-32 of the file at `path` (the one `.gnu_debuglink` records), read in pieces.
fn crc_of(path: &Path) -> Option<u32> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0; 1 << 16];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return Some(hasher.finalize()),
            Ok(n) => hasher.update(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// The debug file that sampled addresses of a stripped file are named from. blazesym follows a
/// debug link itself, but not to a debug file known only by build ID; and where it cannot read
/// the debug file's DWARF (zstd-compressed sections) it falls back to the stripped file's own
/// tables, not the debug file's `.symtab`. Its addresses are the file's: the file's segments turn
/// file offsets into them.
#[derive(Clone, Debug)]
pub struct ForSymbolizing {
    pub path: PathBuf,
    /// The file's loaded segments: (file offset, size in the file, address).
    segments: Vec<(u64, u64, u64)>,
}

impl ForSymbolizing {
    /// The address of file offset `offset`, when a loaded segment holds it.
    pub fn address(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|(start, size, _)| offset >= *start && offset - start < *size)
            .and_then(|(start, _, address)| address.checked_add(offset - start))
    }
}

/// The debug files samples are named from ([`ForSymbolizing`]), looked for in `dirs`; each file
/// looked at once, by device and inode, however many times it is asked for.
#[derive(Debug, Default)]
pub struct DebugFiles {
    dirs: DebugDirs,
    looked: HashMap<(u64, u64), Option<ForSymbolizing>>,
}

impl DebugFiles {
    pub fn new(dirs: DebugDirs) -> Self {
        DebugFiles {
            dirs,
            looked: HashMap::new(),
        }
    }

    pub fn dirs(&self) -> &DebugDirs {
        &self.dirs
    }

    /// The debug file to name `path`'s addresses from when it is stripped and a debug file
    /// matches it; None otherwise. `path` is a file of this process's view, or one of another
    /// process's (`/proc/PID/root/...`).
    pub fn for_symbolizing(&mut self, path: &Path) -> Option<ForSymbolizing> {
        let meta = std::fs::metadata(path).ok()?;
        let dirs = &self.dirs;
        self.looked
            .entry((meta.dev(), meta.ino()))
            .or_insert_with(|| look_for_symbolizing(path, dirs))
            .clone()
    }
}

fn look_for_symbolizing(path: &Path, dirs: &DebugDirs) -> Option<ForSymbolizing> {
    // Only the headers, notes and .dynsym are read: such a file may be a library of a gigabyte.
    super::read_elf(path.to_str()?, |file| {
        if file.symbols().next().is_some() {
            return None;
        }
        // `find` takes `/proc/PID/root/REST` for the process's `/REST`.
        let found = find(path, path, file, dirs).found?;
        Some(ForSymbolizing {
            path: found.path,
            segments: file
                .segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (offset, size, s.address())
                })
                .collect(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid no process can have (above the kernel's largest `pid_max`): its root is not ours.
    const GONE: &str = "/proc/4194305";

    /// Build-ID paths come first, each directory in turn, the container's last; a debug link is
    /// looked for next to the file, in `.debug/` beside it, then under each directory as the
    /// file's own path.
    #[test]
    fn candidates_in_gdb_order() {
        let id = [0xab, 0xcd, 0xef, 0x01];
        let places = Places::of(
            Path::new(&format!("{GONE}/root/usr/bin/app")),
            Path::new("/usr/bin/app"),
        );
        // Another process's file: its links are not resolved here.
        assert_eq!(
            places,
            Places {
                beside: vec![(format!("{GONE}/root/usr/bin").into(), "/usr/bin".into())],
                mirrored: vec!["/usr/bin".into()],
                root: Some(format!("{GONE}/root").into()),
            }
        );
        let found = candidates(&DebugDirs::default(), &places, Some(&id), Some((b"app.debug", 5)));
        let paths: Vec<String> = found.iter().map(|c| c.path.display().to_string()).collect();
        let root = format!("{GONE}/root");
        assert_eq!(
            paths,
            [
                "/usr/lib/debug/.build-id/ab/cdef01.debug".to_owned(),
                "/lib/debug/.build-id/ab/cdef01.debug".to_owned(),
                format!("{root}/usr/lib/debug/.build-id/ab/cdef01.debug"),
                format!("{root}/lib/debug/.build-id/ab/cdef01.debug"),
                format!("{root}/usr/bin/app.debug"),
                format!("{root}/usr/bin/.debug/app.debug"),
                "/usr/lib/debug/usr/bin/app.debug".to_owned(),
                "/lib/debug/usr/bin/app.debug".to_owned(),
                format!("{root}/usr/lib/debug/usr/bin/app.debug"),
                format!("{root}/lib/debug/usr/bin/app.debug"),
            ]
        );
        // Shown as the process sees them.
        assert_eq!(
            found[2].shown,
            Path::new("/usr/lib/debug/.build-id/ab/cdef01.debug")
        );
        assert_eq!(found[4].shown, Path::new("/usr/bin/app.debug"));
        // A link that names a path, or nothing, is not followed.
        assert!(candidates(&DebugDirs::default(), &places, None, Some((b"../x", 1))).is_empty());
        assert!(candidates(&DebugDirs::default(), &places, None, Some((b"", 1))).is_empty());
    }

    /// A file opened through a process's link is looked for in its directory as the process sees
    /// it, under the process's root; a `/proc/PID/root/...` path shown is the process's own path.
    #[test]
    fn a_files_directory_in_its_own_mount_namespace() {
        let beside = |open: &str, shown: &str| Places::of(Path::new(open), Path::new(shown)).beside;
        let pair = |a: &str, b: &str| (PathBuf::from(a), PathBuf::from(b));
        assert_eq!(
            beside(&format!("{GONE}/exe"), "/opt/app"),
            [pair(&format!("{GONE}/root/opt"), "/opt")]
        );
        assert_eq!(
            beside(&format!("{GONE}/map_files/1-2"), "/lib/libc.so.6"),
            [pair(&format!("{GONE}/root/lib"), "/lib")]
        );
        let inside = format!("{GONE}/root/lib/x.so");
        assert_eq!(
            beside(&inside, &inside),
            [pair(&format!("{GONE}/root/lib"), "/lib")]
        );
        // A deleted file's mapping names no directory.
        let mapped = format!("{GONE}/map_files/1-2");
        assert_eq!(
            Places::of(Path::new(&mapped), Path::new(&mapped)).mirrored,
            Vec::<PathBuf>::new()
        );
        assert_eq!(
            beside("/proc/self/fd/5", "/tmp/t/app")[0],
            pair("/tmp/t", "/tmp/t")
        );
        assert_eq!(
            beside("/usr/bin/app", "/usr/bin/app")[0],
            pair("/usr/bin", "/usr/bin")
        );
    }

    /// A file of this process's view is looked for beside it as named and beside where its
    /// symlinks lead; a relative name is taken from the current directory.
    #[test]
    fn places_through_symlinks_and_relative_names() {
        let tmp = std::env::temp_dir().join(format!("xtrace-debug-places-{}", std::process::id()));
        let real = tmp.join("real");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::write(real.join("app"), b"").unwrap();
        let link = tmp.join("app");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(real.join("app"), &link).unwrap();
        let places = Places::of(&link, &link);
        let real = std::fs::canonicalize(&real).unwrap();
        assert_eq!(
            places.beside,
            [(tmp.clone(), tmp.clone()), (real.clone(), real.clone())]
        );
        assert_eq!(places.mirrored, [tmp.clone(), real]);
        let relative = Places::of(Path::new("x/app"), Path::new("x/app"));
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(relative.beside[0], (cwd.join("x"), cwd.join("x")));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn file_offsets_become_addresses_by_segment() {
        let debug = ForSymbolizing {
            path: PathBuf::new(),
            segments: vec![(0, 0x500, 0), (0x1000, 0x200, 0x401000)],
        };
        assert_eq!(debug.address(0x10), Some(0x10));
        assert_eq!(debug.address(0x1010), Some(0x401010));
        assert_eq!(debug.address(0x1200), None);
        assert_eq!(debug.address(0x800), None);
    }

    #[test]
    fn debug_dir_must_be_a_directory() {
        assert!(parse_dir("/").is_ok());
        assert!(parse_dir("/proc/self/exe")
            .unwrap_err()
            .starts_with("not a directory"));
        assert!(parse_dir("/nonexistent-xtrace")
            .unwrap_err()
            .contains("No such file"));
    }
}
