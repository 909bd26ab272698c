//! Traced processes: validating `--pid`, watching for exit through pidfds (Linux 5.3+), and
//! resolving probe TARGETs to files, as a process maps them (launching `-- COMMAND` is
//! the `launch` module's).
use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
};

use crate::{
    error::{Error, Result},
    model::rank::Rank,
    procfs::MapsLine,
};

/// A file to attach to: `open` is how xtrace reaches it (through /proc/PID/… where the process sees
/// it), `shown` is its path as the traced process sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TargetFile {
    pub open: PathBuf,
    pub shown: PathBuf,
}

/// An existing process, held by a pidfd so its pid cannot be reused under us.
#[derive(Debug)]
pub struct Process {
    pub pid: u32,
    pub pidfd: OwnedFd,
}

impl Process {
    pub fn open(pid: u32) -> Result<Self> {
        if pid == std::process::id() {
            return Err(Error::SelfTrace { pid });
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|_| Error::NoSuchProcess { pid })?;
        let tgid = status
            .lines()
            .find_map(|line| line.strip_prefix("Tgid:"))
            .and_then(|v| v.trim().parse::<u32>().ok())
            .ok_or(Error::NoSuchProcess { pid })?;
        if tgid != pid {
            return Err(Error::ThreadNotProcess { pid, tgid });
        }
        let zombie = status
            .lines()
            .any(|line| line.starts_with("State:") && line.contains("zombie"));
        if zombie {
            return Err(match other_threads(pid) {
                0 => Error::Exited { pid },
                threads => Error::LeaderExited { pid, threads },
            });
        }
        if is_kernel_thread(pid) {
            return Err(Error::KernelThread { pid });
        }
        let pidfd = pidfd_open(pid).map_err(|_| Error::NoSuchProcess { pid })?;
        Ok(Process { pid, pidfd })
    }

    /// The error for a failed read of the process's `/proc/PID/WHAT`: gone, or not permitted.
    fn proc_error(&self, what: &str, e: std::io::Error) -> Error {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        proc_error(
            self.pid,
            what,
            e.kind(),
            (root, crate::privilege::may_inspect_others()),
        )
    }

    /// The main executable of the process.
    pub fn executable(&self) -> Result<TargetFile> {
        let open = PathBuf::from(format!("/proc/{}/exe", self.pid));
        let shown = std::fs::read_link(&open).map_err(|e| self.proc_error("exe", e))?;
        Ok(TargetFile { open, shown })
    }

    /// A file of `TARGET` given as a path, reached through the process's root directory; the
    /// file the process maps at that path when it maps one (see [`Process::mapped`]).
    pub fn path(&self, path: &Path) -> TargetFile {
        let absolute = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .map(|d| d.join(path))
                .unwrap_or_else(|_| path.to_path_buf())
        };
        let maps = crate::procfs::maps_text(self.pid).unwrap_or_default();
        match maps
            .lines()
            .filter_map(MapsLine::file)
            .find(|m| Path::new(m.path) == absolute)
        {
            Some(mapping) => self.mapped(&mapping),
            None => self.at_path(absolute),
        }
    }

    /// The file at `absolute` in the process's root directory.
    fn at_path(&self, absolute: PathBuf) -> TargetFile {
        let open = PathBuf::from(format!("/proc/{}/root", self.pid))
            .join(absolute.strip_prefix("/").unwrap_or(&absolute));
        TargetFile {
            open,
            shown: absolute,
        }
    }

    /// The file of `mapping`, as the process has it: the file at its path, or when the mapping
    /// says the file was deleted (or replaced on disk, as by a package upgrade) the mapped file
    /// itself, through `/proc/PID/map_files/` (which needs CAP_SYS_ADMIN).
    pub(crate) fn mapped(&self, mapping: &MapsLine) -> TargetFile {
        let file = self.at_path(PathBuf::from(mapping.path));
        if !mapping.deleted {
            return file;
        }
        TargetFile {
            open: PathBuf::from(format!(
                "/proc/{}/map_files/{}",
                self.pid,
                mapping.map_files_name()
            )),
            shown: file.shown,
        }
    }

    /// The mapped library named `name` (`libc`, `libc.so.6`, ...).
    pub fn library(&self, name: &str) -> Result<TargetFile> {
        let maps = crate::procfs::maps_text(self.pid).map_err(|e| self.proc_error("maps", e))?;
        let mapping = maps
            .lines()
            .filter_map(MapsLine::file)
            .find(|m| library_matches(m.path, name))
            .ok_or_else(|| Error::LibraryNotMapped {
                name: name.to_string(),
                pid: self.pid,
            })?;
        Ok(self.mapped(&mapping))
    }

    /// The main executable, then every other file the process maps (from /proc/PID/maps), each
    /// once.
    pub fn mapped_files(&self) -> Result<Vec<TargetFile>> {
        let maps = crate::procfs::maps_text(self.pid).map_err(|e| self.proc_error("maps", e))?;
        let exe = self.executable()?;
        // A deleted executable's link reads `PATH (deleted)`; its mappings, PATH.
        let exe_path = exe.shown.to_str().and_then(|s| s.strip_suffix(" (deleted)"));
        let exe_path = exe_path.map_or(exe.shown.as_path(), Path::new);
        let mut files = vec![exe.clone()];
        for mapping in maps.lines().filter_map(MapsLine::file) {
            let path = Path::new(mapping.path);
            if path != exe_path && !files.iter().any(|f| f.shown == path) {
                files.push(self.mapped(&mapping));
            }
        }
        Ok(files)
    }

    /// Whether the process has exited (its pidfd is readable).
    pub fn has_exited(&self) -> bool {
        let mut poll = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        unsafe { libc::poll(&mut poll, 1, 0) == 1 }
    }

    /// Sends `signal` to the process through its pidfd: never to another process that took its
    /// pid after it was reaped. Fails once it has exited.
    pub fn signal(&self, signal: i32) -> std::io::Result<()> {
        // SAFETY: pidfd_send_signal takes the pidfd, a signal, a null siginfo and no flags.
        let sent = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if sent < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Whether `tid` is one of the process's threads.
    pub fn has_thread(&self, tid: u32) -> bool {
        Path::new(&format!("/proc/{}/task/{tid}", self.pid)).exists()
    }

    /// Name and namespace pid of the process, if it still exists.
    pub fn info(&self) -> ProcessInfo {
        ProcessInfo::read(self.pid)
    }
}

/// What the trace reports about a process besides its (host) pid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The command name (`comm`) of the main thread; None once the process is gone.
    pub comm: Option<String>,
    /// The pid inside the process's own PID namespace, when that is not xtrace's (a container).
    pub ns_pid: Option<u32>,
    /// Its rank in a distributed job, as its launcher's variables in its environment say.
    pub rank: Option<Rank>,
}

impl ProcessInfo {
    /// Reads /proc/PID/comm, the `NSpid:` line of /proc/PID/status and /proc/PID/environ.
    pub fn read(pid: u32) -> ProcessInfo {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let environ = crate::procfs::environ(pid);
        ProcessInfo {
            comm: read_comm(&format!("/proc/{pid}/comm")),
            ns_pid: crate::procfs::parse_ns_pid(&status),
            rank: Rank::from_environ_file(&environ),
        }
    }

    /// The name shown in the timeline: `comm`, with its rank and its namespace pid when it has
    /// them (`python3 (rank 3 of 8, pid 7 in its namespace)`).
    pub fn label(&self) -> String {
        let comm = self.comm.as_deref().unwrap_or("?");
        let rank = self.rank.as_ref().map(Rank::label);
        let ns_pid = self.ns_pid.map(|p| format!("pid {p} in its namespace"));
        let notes: Vec<String> = rank.into_iter().chain(ns_pid).collect();
        match notes.is_empty() {
            true => comm.to_string(),
            false => format!("{comm} ({})", notes.join(", ")),
        }
    }
}

/// Does the file at `path` provide library `name`? `libc` matches `libc.so.6` and `libc-2.36.so`;
/// a name with ".so" in it must match the file name exactly.
pub fn library_matches(path: &str, name: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    if name.contains(".so") {
        return file == name;
    }
    file.strip_prefix(name)
        .is_some_and(|rest| rest.starts_with(".so") || (rest.starts_with('-') && rest.contains(".so")))
}

/// Finds library `name` through the dynamic linker's cache, for a command that is not running yet.
pub fn library_from_cache(name: &str) -> Result<TargetFile> {
    let not_found = || Error::LibraryNotFound {
        name: name.to_string(),
    };
    // Read once: a dependency tree's search asks for many names.
    static LISTING: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let listing = LISTING
        .get_or_init(|| {
            ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
                .iter()
                .find_map(|ldconfig| std::process::Command::new(ldconfig).arg("-p").output().ok())
                .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
        })
        .as_deref()
        .ok_or_else(not_found)?;
    let path = parse_ldconfig(listing, name).ok_or_else(not_found)?;
    Ok(TargetFile {
        open: path.clone(),
        shown: path,
    })
}

/// The first path in `ldconfig -p` output whose library matches `name`, preferring this machine's
/// word size (entries tagged x86-64 / AArch64 / 64bit over 32-bit ones).
fn parse_ldconfig(listing: &str, name: &str) -> Option<PathBuf> {
    let entries: Vec<(&str, &str)> = listing
        .lines()
        .filter_map(|line| {
            let (left, path) = line.split_once(" => ")?;
            let tags = left.trim();
            library_matches(path.trim(), name).then_some((tags, path.trim()))
        })
        .collect();
    let wide = |tags: &&str| tags.contains("x86-64") || tags.contains("64bit") || tags.contains("AArch64");
    let chosen = entries
        .iter()
        .find(|(tags, _)| wide(tags))
        .or_else(|| entries.first());
    chosen.map(|(_, path)| PathBuf::from(path))
}

fn read_comm(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// How many threads other than its main one process `pid` has: a process whose main thread has
/// exited (`pthread_exit`, a zombie) lives on in them.
pub(crate) fn other_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |tasks| tasks.count().saturating_sub(1))
}

/// Thread name of `tid` in process `pid`, if the thread still exists.
pub fn thread_comm(pid: u32, tid: u32) -> Option<String> {
    read_comm(&format!("/proc/{pid}/task/{tid}/comm"))
}

pub(crate) fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether `pid` is a kernel thread (PF_KTHREAD in /proc/PID/stat's flags): it has no user code.
pub(crate) fn is_kernel_thread(pid: u32) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    stat_after_name(pid)
        .and_then(|rest| rest.split_whitespace().nth(6)?.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// The fields of /proc/PID/stat after the name (field 3, the state, onwards), None when the
/// process is gone. The name (field 2) may hold spaces and parentheses: the fields follow its
/// last ')'.
pub(crate) fn stat_after_name(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')').map(|(_, rest)| rest.to_string())
}

/// The error for a failed read of process `pid`'s `/proc/PID/WHAT`: gone, or not permitted. What
/// would mend a refusal depends on whether xtrace runs as root and may inspect other users'
/// processes (CAP_SYS_PTRACE): `(root, ptrace)`.
fn proc_error(pid: u32, what: &str, kind: std::io::ErrorKind, (root, ptrace): (bool, bool)) -> Error {
    let what = what.to_string();
    match kind {
        std::io::ErrorKind::PermissionDenied if ptrace => Error::ProcProtected { pid, what },
        std::io::ErrorKind::PermissionDenied if root => Error::ProcNeedsPtrace { pid, what },
        std::io::ErrorKind::PermissionDenied => Error::ProcNotPermitted { pid, what },
        _ => Error::NoSuchProcess { pid },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_advises_what_would_mend_it() {
        let denied = std::io::ErrorKind::PermissionDenied;
        assert_eq!(
            proc_error(1, "exe", denied, (false, false)).to_string(),
            "cannot read /proc/1/exe: permission denied; trace a process you own, or run xtrace as root"
        );
        assert_eq!(
            proc_error(1, "exe", denied, (true, false)).to_string(),
            "cannot read /proc/1/exe: permission denied to root without CAP_SYS_PTRACE (a container drops it): give xtrace that capability (docker run --cap-add SYS_PTRACE), or trace a process of its own user"
        );
        assert_eq!(
            proc_error(1, "maps", denied, (true, true)).to_string(),
            "cannot read /proc/1/maps: permission denied, even with CAP_SYS_PTRACE: the kernel or a security module keeps this process from being inspected, so xtrace cannot trace it"
        );
        let gone = proc_error(9, "exe", std::io::ErrorKind::NotFound, (true, true));
        assert!(matches!(gone, Error::NoSuchProcess { pid: 9 }));
    }

    #[test]
    fn library_names() {
        assert!(library_matches("/lib/x86_64-linux-gnu/libc.so.6", "libc"));
        assert!(library_matches("/lib/libc-2.36.so", "libc"));
        assert!(library_matches("/lib/x86_64-linux-gnu/libc.so.6", "libc.so.6"));
        assert!(!library_matches("/lib/x86_64-linux-gnu/libcap.so.2", "libc"));
        assert!(!library_matches("/lib/x86_64-linux-gnu/libc.so.6", "libc.so"));
        assert!(library_matches("/opt/libxtfix.so", "libxtfix"));
    }

    #[test]
    fn ldconfig_prefers_64_bit() {
        let listing = "2 libs found in cache `/etc/ld.so.cache'\n\
            \tlibc.so.6 (libc6) => /lib32/libc.so.6\n\
            \tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n\
            \tlibcap.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcap.so.2\n";
        assert_eq!(
            parse_ldconfig(listing, "libc"),
            Some("/lib/x86_64-linux-gnu/libc.so.6".into())
        );
        assert_eq!(
            parse_ldconfig(listing, "libcap"),
            Some("/lib/x86_64-linux-gnu/libcap.so.2".into())
        );
        assert_eq!(parse_ldconfig(listing, "libfoo"), None);
    }

    #[test]
    fn own_process_is_refused_and_missing_pid_reported() {
        assert!(matches!(
            Process::open(std::process::id()),
            Err(Error::SelfTrace { .. })
        ));
        assert!(matches!(
            Process::open(999_999_999),
            Err(Error::NoSuchProcess { pid: 999_999_999 })
        ));
    }

    #[test]
    fn threads_are_not_processes() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        let pid = std::process::id();
        assert!(matches!(Process::open(tid), Err(Error::ThreadNotProcess { tgid, .. }) if tgid == pid));
        done_tx.send(()).unwrap();
        handle.join().unwrap();
    }

    #[test]
    fn exit_is_seen_through_the_pidfd() {
        let mut child = std::process::Command::new("sleep").arg("10").spawn().unwrap();
        let process = Process::open(child.id()).unwrap();
        assert!(!process.has_exited());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(process.has_exited());
    }
}
