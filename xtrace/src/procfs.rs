//! A process as /proc/PID shows it: its mappings (`maps`, the one reader and parser of that
//! file: [`MapsLine`] each line, [`Mapping`] each mapping), and strings read from its memory
//! (`mem`); and the kernel's settings under /proc/sys/kernel.
use std::{fs::File, os::unix::fs::FileExt};

use crate::model::text::c_text;

/// One file mapping of a process: executable ([`merge_maps`]), or read-only ([`read_only_maps`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// The file as the process sees it (`[vdso]` and such for special mappings).
    pub path: String,
    /// /proc/PID/maps said the file was deleted, or replaced by another renamed over its path (a
    /// package upgrade): the file at `path`, if any, is not this one.
    pub deleted: bool,
    /// The mapped file's device (as `stat`'s `st_dev`) and inode, when known.
    pub file: Option<(u64, u64)>,
}

impl Mapping {
    /// Where xtrace opens the mapped file of process `pid`: through the process's root (its mount
    /// namespace: containers), or by the path itself once the process is gone, when the file
    /// there is the one mapped (its device and inode; a process of another mount namespace saw
    /// another file at that path). A deleted or replaced file is opened as mapped, through
    /// /proc/PID/map_files/, while the process lives. Otherwise it is None: a frame in it is
    /// named by file and offset, never by the symbols of whatever file has its path now.
    pub fn open_path(&self, pid: u32) -> Option<String> {
        if self.deleted {
            let mapped = format!("/proc/{pid}/map_files/{:x}-{:x}", self.start, self.end);
            return std::fs::File::open(&mapped).is_ok().then_some(mapped);
        }
        let inside = format!("/proc/{pid}/root{}", self.path);
        if std::path::Path::new(&inside).exists() {
            return Some(inside);
        }
        let here = std::fs::metadata(&self.path).ok()?;
        let same = self.file.is_none_or(|file| {
            use std::os::unix::fs::MetadataExt;
            file == (here.dev(), here.ino())
        });
        same.then(|| self.path.clone())
    }
}

/// One line of `/proc/PID/maps`: `START-END PERMS OFFSET MAJ:MIN INODE [PATH]`.
#[derive(Debug, PartialEq, Eq)]
pub struct MapsLine<'a> {
    /// `START-END` in hex, each padded to 8 digits (`00400000-00452000`); see
    /// [`MapsLine::map_files_name`] for the name `/proc/PID/map_files/` gives the mapping.
    pub range: &'a str,
    pub perms: &'a str,
    pub offset: &'a str,
    /// The file's device, `MAJOR:MINOR` in hex.
    pub dev: &'a str,
    /// The file's inode number (0 for anonymous memory), in decimal.
    pub inode: &'a str,
    /// The path (which may hold spaces) without the kernel's ` (deleted)`; `[vdso]` and such for
    /// special mappings, empty for anonymous memory.
    pub path: &'a str,
    /// The file was deleted since it was mapped, or replaced by another renamed over its path
    /// (a package upgrade): the file at `path`, if any, is not the one mapped.
    pub deleted: bool,
}

impl<'a> MapsLine<'a> {
    pub fn parse(line: &'a str) -> Option<MapsLine<'a>> {
        let mut rest = line;
        let mut fields = [""; 5];
        for field in &mut fields {
            rest = rest.trim_start_matches(' ');
            let end = rest.find(' ').unwrap_or(rest.len());
            (*field, rest) = rest.split_at(end);
            if field.is_empty() {
                return None;
            }
        }
        let path = rest.trim_start_matches(' ');
        let (path, deleted) = match path.strip_suffix(" (deleted)") {
            Some(path) if path.starts_with('/') => (path, true),
            _ => (path, false),
        };
        Some(MapsLine {
            range: fields[0],
            perms: fields[1],
            offset: fields[2],
            dev: fields[3],
            inode: fields[4],
            path,
            deleted,
        })
    }

    /// The addresses the line maps, `START..END`; None for a malformed range.
    pub fn addresses(&self) -> Option<std::ops::Range<u64>> {
        let (start, end) = self.range.split_once('-')?;
        Some(u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?)
    }

    /// The mapping's entry in `/proc/PID/map_files/`: its range without the padding, as the kernel
    /// names it (`%lx-%lx`: `400000-452000` for a non-PIE program's `00400000-00452000`).
    pub fn map_files_name(&self) -> String {
        let unpadded = |hex: &str| match hex.trim_start_matches('0') {
            "" => "0".to_owned(),
            digits => digits.to_owned(),
        };
        match self.range.split_once('-') {
            Some((start, end)) => format!("{}-{}", unpadded(start), unpadded(end)),
            None => self.range.to_owned(),
        }
    }

    /// The mapped file's identity: its device (as `stat`'s `st_dev`) and inode; None when the
    /// line maps none.
    pub fn identity(&self) -> Option<(u64, u64)> {
        let (major, minor) = self.dev.split_once(':')?;
        let (major, minor) = (
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        );
        let inode: u64 = self.inode.parse().ok().filter(|&i| i != 0)?;
        Some((libc::makedev(major, minor), inode))
    }

    /// The line when it maps a file (its path is absolute).
    pub fn file(line: &'a str) -> Option<MapsLine<'a>> {
        Self::parse(line).filter(|m| m.path.starts_with('/'))
    }
}

/// The text of /proc/PID/maps: every mapping of `pid`, one a line ([`MapsLine`]).
pub fn maps_text(pid: u32) -> std::io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
}

/// /proc/PID/environ once two reads in a row agree (empty when they never do). The kernel copies
/// the environment a page at a time from the memory the process had when the file was opened; an
/// exec or an exit meanwhile ends the copy at a page boundary, leaving out the variables after it
/// (a rank without its world size, an NVTX tool variable). A launched command is read while it
/// may exec.
pub fn environ(pid: u32) -> Vec<u8> {
    let read = || std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let mut last = read();
    for _ in 0..3 {
        let next = read();
        if next == last {
            return next;
        }
        last = next;
    }
    Vec::new()
}

/// The innermost pid of an `NSpid:` line (`NSpid:\t4321\t7` → 7); None when the process lives in
/// the reader's own PID namespace (one number) or the line is missing (kernels before 4.1).
pub fn parse_ns_pid(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|line| line.strip_prefix("NSpid:"))?;
    let pids: Vec<&str> = line.split_whitespace().collect();
    match pids.as_slice() {
        [_, .., last] => last.parse().ok(),
        _ => None,
    }
}

/// Process `pid`'s pid inside its own PID namespace when that is not xtrace's (a container).
pub fn ns_pid(pid: u32) -> Option<u32> {
    parse_ns_pid(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// The value of the sysctl `kernel.NAME`, trimmed, if readable.
pub fn kernel_setting(name: &str) -> Option<String> {
    let value = std::fs::read_to_string(format!("/proc/sys/kernel/{name}")).ok()?;
    Some(value.trim().to_string())
}

/// The mapping holding `address`; the latest one where mappings overlap (code mapped over code
/// unmapped earlier, which an image keeps).
pub fn find(maps: &[Mapping], address: u64) -> Option<&Mapping> {
    maps.iter().rev().find(|m| address >= m.start && address < m.end)
}

/// The executable mappings of `pid`, or None when it is gone.
pub fn read_maps(pid: u32) -> Option<Vec<Mapping>> {
    Some(parse_maps_where(&maps_text(pid).ok()?, executable))
}

/// The executable mappings of xtrace's own process, as /proc/self/maps shows them (the vDSO,
/// the libraries xtrace itself loaded), or None when that cannot be read.
pub fn own_maps() -> Option<Vec<Mapping>> {
    read_where("/proc/self/maps", executable)
}

/// Every mapping of xtrace's own process, anonymous ones included (an empty path).
pub fn own_all_maps() -> Option<Vec<Mapping>> {
    read_where("/proc/self/maps", |_| true)
}

/// The mappings that `keep` keeps of the maps file at `path`, or None when it cannot be read.
fn read_where(path: &str, keep: impl Fn(&MapsLine) -> bool) -> Option<Vec<Mapping>> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(parse_maps_where(&text, keep))
}

/// Whether a line maps executable memory.
fn executable(line: &MapsLine) -> bool {
    line.perms.contains('x')
}

/// Whether `mapping` is already in `maps` and the latest there over its start: a library mapped
/// again where another was mapped since (a plugin loaded, unloaded, another in its place, the
/// first again) is added again, so that it names the samples taken from then on.
pub fn is_current(maps: &[Mapping], mapping: &Mapping) -> bool {
    find(maps, mapping.start) == Some(mapping)
}

/// Adds the executable mappings `pid` has now to `known`. Mappings are only added: code seen
/// earlier may have been unmapped since, and a process that is exiting has none left.
pub fn merge_maps(known: &mut Vec<Mapping>, pid: u32) {
    let Some(maps) = read_maps(pid) else {
        log::debug!("process {pid} is gone: its maps cannot be read");
        return;
    };
    log::debug!(
        "read the maps of process {pid}: {} executable mappings",
        maps.len()
    );
    for mapping in maps {
        if !is_current(known, &mapping) {
            known.push(mapping);
        }
    }
}

/// Executable mappings from /proc/PID/maps text.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    parse_maps_where(text, executable)
}

/// The mappings in /proc/PID/maps text whose line `keep` keeps.
fn parse_maps_where(text: &str, keep: impl Fn(&MapsLine) -> bool) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let line = MapsLine::parse(line)?;
            if !keep(&line) {
                return None;
            }
            let addresses = line.addresses()?;
            Some(Mapping {
                start: addresses.start,
                end: addresses.end,
                offset: u64::from_str_radix(line.offset, 16).ok()?,
                path: line.path.to_string(),
                deleted: line.deleted,
                file: line.identity(),
            })
        })
        .collect()
}

/// Every mapping of `pid`, anonymous ones included (an empty path), or None when it is gone.
pub fn all_maps(pid: u32) -> Option<Vec<Mapping>> {
    Some(parse_maps_where(&maps_text(pid).ok()?, |_| true))
}

/// The file-backed mappings of `pid` it cannot write (read-only data such as `.rodata`, and code),
/// or None when it is gone: their bytes in memory are their file's, so a string in one can be
/// read from the file ([`mapped_string`]). A writable mapping's bytes may differ from its file's.
pub fn read_only_maps(pid: u32) -> Option<Vec<Mapping>> {
    Some(parse_maps_where(&maps_text(pid).ok()?, read_only_file))
}

/// Whether a line maps a file readable, not writable.
fn read_only_file(line: &MapsLine) -> bool {
    line.perms.starts_with('r') && !line.perms.contains('w') && line.path.starts_with('/')
}

/// The NUL-terminated string at `address` of process `pid`, which `mapping` (a read-only file
/// mapping, as [`read_only_maps`] lists them) holds, read from the mapped file at
/// `address - start + offset` (through the process's root first, see [`Mapping::open_path`]): its
/// bytes up to the NUL or `max` bytes, then a NUL. None when the file cannot be read there. The
/// kernel programs' reads fail on a page the process has not touched yet; this one does not.
pub fn mapped_string(pid: u32, mapping: &Mapping, address: u64, max: usize) -> Option<Vec<u8>> {
    if address < mapping.start || address >= mapping.end {
        return None;
    }
    let file = File::open(mapping.open_path(pid)?).ok()?;
    let room = (mapping.end - address).min(max as u64) as usize;
    let mut bytes = vec![0; room];
    let n = file
        .read_at(&mut bytes, address - mapping.start + mapping.offset)
        .ok()?;
    if n == 0 {
        return None;
    }
    bytes.truncate(n);
    if let Some(nul) = bytes.iter().position(|&b| b == 0) {
        bytes.truncate(nul);
    }
    bytes.push(0);
    Some(bytes)
}

/// The NUL-terminated string at `address` in process `pid`, at most `max` bytes of it (fewer where
/// the mapping ends); None when the process or the address is gone. Unlike the kernel program's
/// read, this one faults in a page the process has not touched yet.
pub fn process_text(pid: u32, address: u64, max: usize) -> Option<String> {
    let mem = File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut bytes = vec![0; max];
    // A read that runs into an unmapped page stops there.
    let n = mem.read_at(&mut bytes, address).ok()?;
    (n > 0).then(|| c_text(&bytes[..n]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_environment_is_the_whole_file_and_a_gone_process_has_none() {
        let own = std::fs::read("/proc/self/environ").unwrap();
        assert_eq!(environ(std::process::id()), own);
        assert!(environ(u32::MAX).is_empty());
    }

    #[test]
    fn ns_pid_is_the_innermost_of_several() {
        assert_eq!(parse_ns_pid("Name:\tx\nNSpid:\t4321\t7\n"), Some(7));
        assert_eq!(parse_ns_pid("NSpid:\t4321\t900\t1\n"), Some(1));
        assert_eq!(parse_ns_pid("NSpid:\t4321\n"), None);
        assert_eq!(parse_ns_pid("Name:\tx\n"), None);
        assert_eq!(parse_ns_pid("NSpid:\t4321\tx\n"), None);
    }

    /// Once its process is gone, a mapping is named from the file at its path only when that is
    /// the file mapped (another mount namespace saw another file there).
    #[test]
    fn a_gone_process_is_named_from_its_own_file_only() {
        use std::os::unix::fs::MetadataExt;
        let path = "/proc/self/exe";
        let meta = std::fs::metadata(path).unwrap();
        let gone = u32::MAX;
        let mapping = |file| Mapping {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            path: path.into(),
            deleted: false,
            file,
        };
        let own = mapping(Some((meta.dev(), meta.ino())));
        assert_eq!(own.open_path(gone).as_deref(), Some(path));
        assert_eq!(mapping(None).open_path(gone).as_deref(), Some(path));
        let other = mapping(Some((meta.dev(), meta.ino() + 1)));
        assert_eq!(other.open_path(gone), None);
    }

    #[test]
    fn executable_mappings_only() {
        let text = "\
55d0a000-55d0b000 r--p 00000000 08:01 123 /usr/bin/app
55d0b000-55d0c000 r-xp 00001000 08:01 123 /usr/bin/app
7f00000-7f10000 r-xp 00028000 08:01 456 /lib/libc.so.6
7ffd000-7ffe000 r-xp 00000000 00:00 0 [vdso]
7fff000-8000000 rw-p 00000000 00:00 0 [stack]
";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 3);
        assert_eq!(
            maps[0],
            Mapping {
                start: 0x55d0b000,
                end: 0x55d0c000,
                offset: 0x1000,
                path: "/usr/bin/app".into(),
                deleted: false,
                file: Some((libc::makedev(8, 1), 123)),
            }
        );
        assert_eq!(maps[2].path, "[vdso]");
        assert_eq!(maps[2].file, None);
        assert_eq!(
            find(&maps, 0x7f00010).map(|m| m.path.as_str()),
            Some("/lib/libc.so.6")
        );
        assert!(find(&maps, 0x1).is_none());
    }

    /// Read-only file mappings only (a writable one's memory may differ from its file); a string
    /// in one is read from its file at the address's file offset, up to its NUL or `max` bytes.
    #[test]
    fn a_string_of_a_read_only_mapping_is_read_from_its_file() {
        let text = "\
1000-2000 r--p 00000000 08:01 1 /usr/bin/app
2000-3000 rw-p 00001000 08:01 1 /usr/bin/app
3000-4000 r--p 00000000 00:00 0
4000-5000 r-xp 00002000 08:01 1 /usr/bin/app
";
        let maps = parse_maps_where(text, read_only_file);
        let starts: Vec<u64> = maps.iter().map(|m| m.start).collect();
        assert_eq!(starts, [0x1000, 0x4000]);
        let dir = std::env::temp_dir().join(format!("xtrace-mapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data");
        let mut data = vec![b'-'; 0x1800];
        data[0x1100..0x1106].copy_from_slice(b"hello\0");
        std::fs::write(&path, &data).unwrap();
        let mapping = Mapping {
            start: 0x7000,
            end: 0x8000,
            offset: 0x1000,
            path: path.to_str().unwrap().into(),
            deleted: false,
            file: None,
        };
        let gone = u32::MAX;
        assert_eq!(
            mapped_string(gone, &mapping, 0x7100, 63).as_deref(),
            Some(&b"hello\0"[..])
        );
        assert_eq!(
            mapped_string(gone, &mapping, 0x7102, 2).as_deref(),
            Some(&b"ll\0"[..])
        );
        // No NUL before the file ends: what there is.
        assert_eq!(
            mapped_string(gone, &mapping, 0x77fe, 63).as_deref(),
            Some(&b"--\0"[..])
        );
        assert_eq!(
            mapped_string(gone, &mapping, 0x7800, 63),
            None,
            "past the file's end"
        );
        assert_eq!(
            mapped_string(gone, &mapping, 0x8000, 63),
            None,
            "outside the mapping"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A deleted (or replaced) file is opened as mapped while its process lives, never by its
    /// path, where another file or none is now.
    #[test]
    fn a_deleted_file_is_opened_as_mapped_or_not_at_all() {
        let maps = parse_maps("55d0b000-55d0c000 r-xp 00001000 08:01 123 /opt/my app/libx.so (deleted)\n");
        assert_eq!(
            (maps[0].path.as_str(), maps[0].deleted),
            ("/opt/my app/libx.so", true)
        );
        // This process maps its own executable: the same mapping, marked deleted.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mut mine = own_maps()
            .unwrap()
            .into_iter()
            .find(|m| std::path::Path::new(&m.path) == exe)
            .unwrap();
        let pid = std::process::id();
        assert_eq!(
            mine.open_path(pid),
            Some(format!("/proc/{pid}/root{}", mine.path))
        );
        mine.deleted = true;
        let mapped = format!("/proc/{pid}/map_files/{:x}-{:x}", mine.start, mine.end);
        assert_eq!(mine.open_path(pid), Some(mapped));
        assert_eq!(mine.open_path(u32::MAX), None, "its process is gone");
    }

    #[test]
    fn maps_lines() {
        let line = "7f1c2a400000-7f1c2a428000 r--p 00000000 fd:01 1835040                    /usr/lib/x86_64-linux-gnu/libc.so.6";
        assert_eq!(
            MapsLine::parse(line),
            Some(MapsLine {
                range: "7f1c2a400000-7f1c2a428000",
                perms: "r--p",
                offset: "00000000",
                dev: "fd:01",
                inode: "1835040",
                path: "/usr/lib/x86_64-linux-gnu/libc.so.6",
                deleted: false,
            })
        );
        let gone = "55d0c0e00000-55d0c0e01000 r-xp 00001000 103:02 99 /tmp/my app/libmy.so (deleted)";
        let gone = MapsLine::file(gone).unwrap();
        assert_eq!((gone.path, gone.deleted), ("/tmp/my app/libmy.so", true));
        assert_eq!(gone.map_files_name(), "55d0c0e00000-55d0c0e01000");
        // A non-PIE program below 0x10000000: maps pads to 8 digits, map_files does not.
        let low = MapsLine::file("00400000-00452000 r-xp 00000000 fd:01 12 /opt/app (deleted)").unwrap();
        assert_eq!(low.map_files_name(), "400000-452000");
        // Device 103:02 and inode 99, as `stat` gives them.
        assert_eq!(gone.identity(), Some((libc::makedev(0x103, 2), 99)));
        let stack = "7ffd5e1f0000-7ffd5e211000 rw-p 00000000 00:00 0                          [stack]";
        assert_eq!(MapsLine::parse(stack).map(|m| m.path), Some("[stack]"));
        assert_eq!(MapsLine::file(stack), None);
        assert_eq!(MapsLine::parse(stack).and_then(|m| m.identity()), None);
        let anonymous = "7f1c2a3fd000-7f1c2a400000 rw-p 00000000 00:00 0 ";
        assert_eq!(
            MapsLine::parse(anonymous).map(|m| (m.path, m.deleted)),
            Some(("", false))
        );
        assert_eq!(MapsLine::parse("7f1c2a3fd000-7f1c2a400000 rw-p"), None);
    }
}
