//! `--inject`'s checks before any ptrace call, each a refusal that leaves the process untouched,
//! and what the trampoline needs from the process: the addresses of `dlopen`, `dlsym` and the
//! mutex functions in its libc (glibc 2.34 and later have them there, not in libdl and
//! libpthread), and where its stage 0 can go.
use object::{Object, ObjectSegment, ObjectSymbol};

use super::{site, trampoline, Error};
use crate::{
    procfs::MapsLine,
    target::{library_matches, Process},
};

/// What the checks found.
pub enum Found {
    /// The tool library's watcher runs, or the library is mapped from a memfd of an earlier
    /// injection.
    Loaded,
    Ready(Ready),
}

/// What the trampoline needs from the process.
pub struct Ready {
    pub libc: LibcFunctions,
    /// The size of the thread's extended state (`xsave`).
    pub xsave: u64,
    /// Where stage 0 goes.
    pub stage: site::Site,
    /// The dynamic loader's code: its system calls are made holding its lock.
    pub loader: Vec<std::ops::Range<u64>>,
    /// The dynamic loader's lock ([`super::loader_lock`]), when found.
    pub load_lock: Option<u64>,
}

/// Runs every check; the first that fails is the error.
pub fn check(process: &Process) -> Result<Found, Error> {
    let pid = process.pid;
    if crate::procfs::kernel_setting("yama/ptrace_scope").as_deref() == Some("3") {
        return Err(Error::PtraceScope { pid });
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    if is_stopped(&status) {
        return Err(Error::Unsupported {
            pid,
            why: format!(
                "pid {pid} is stopped (SIGSTOP, a shell's Ctrl-Z): a thread that cannot run cannot load a \
                 library, and ptrace would resume it; continue it first (kill -CONT {pid})"
            ),
        });
    }
    refuse_other_tracer(pid)?;
    if !crate::privilege::may_inspect_others() {
        return Err(Error::NoCapability { pid });
    }
    let maps = crate::procfs::maps_text(pid).map_err(|e| Error::Unsupported {
        pid,
        why: format!("cannot read /proc/{pid}/maps: {e}"),
    })?;
    let files: Vec<MapsLine> = maps.lines().filter_map(MapsLine::file).collect();
    if !files.iter().any(|m| library_matches(m.path, "libcuda")) {
        return Err(Error::NoCuda { pid });
    }
    if super::watcher_runs(pid) || files.iter().any(|m| m.path == "/memfd:libxtrace_tool.so") {
        return Ok(Found::Loaded);
    }
    if !cfg!(target_arch = "x86_64") {
        return Err(Error::Unsupported {
            pid,
            why: "loading a library with ptrace is implemented for x86_64 only".into(),
        });
    }
    let xsave = trampoline::xsave_size().ok_or_else(|| Error::Unsupported {
        pid,
        why: "this CPU or kernel has no XSAVE, which the trampoline saves the thread's state with".into(),
    })?;
    let libc = libc_functions(process, &files)?;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|e| Error::Unsupported {
        pid,
        why: format!("cannot read pid {pid}'s memory (/proc/{pid}/mem): {e}"),
    })?;
    let len = trampoline::stage_len();
    let stage = site::find(process, &mem, &files, len).ok_or_else(|| Error::Unsupported {
        pid,
        why: format!(
            "no library mapped by pid {pid} has {len} free bytes after its code, where xtrace's first \
             instructions in the process go"
        ),
    })?;
    let loader = files
        .iter()
        .filter(|m| m.perms.contains('x') && library_matches(m.path, "ld-linux-x86-64.so.2"))
        .filter_map(MapsLine::addresses)
        .collect();
    let read = |at, len| read_at(&mem, at, len);
    let load_lock = super::loader_lock::find(&files, |line| process.mapped(line).open, read);
    if load_lock.is_none() {
        log::debug!("--inject: pid {pid}'s dynamic loader's lock not found: not looked at");
    }
    Ok(Found::Ready(Ready {
        libc,
        xsave,
        stage,
        loader,
        load_lock,
    }))
}

/// The `len` bytes at `address` of the process whose memory (/proc/PID/mem) `mem` is; None
/// unless all can be read.
pub(super) fn read_at(mem: &std::fs::File, address: u64, len: usize) -> Option<Vec<u8>> {
    let mut bytes = vec![0; len];
    std::os::unix::fs::FileExt::read_exact_at(mem, &mut bytes, address).ok()?;
    Some(bytes)
}

/// Whether a /proc/PID/status says the process is stopped by a signal (not traced: `t`).
fn is_stopped(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .is_some_and(|state| state.trim_start().starts_with('T'))
}

/// The `TracerPid:` of a /proc/PID/status, when not 0.
fn tracer_pid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&t| t != 0)
}

/// Refuses `pid` when a tracer other than a thread of xtrace's holds one of its threads: a
/// debugger, or another `--inject` (which holds one thread, not always the main one).
pub fn refuse_other_tracer(pid: u32) -> Result<(), Error> {
    let ours = |tracer: u32| std::path::Path::new(&format!("/proc/self/task/{tracer}")).exists();
    let tracer = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("status")).ok())
        .find_map(|status| tracer_pid(&status).filter(|&tracer| !ours(tracer)));
    let Some(tracer) = tracer else {
        return Ok(());
    };
    let name = std::fs::read_to_string(format!("/proc/{tracer}/comm"))
        .map_or_else(|_| "gone".into(), |c| c.trim_end().to_owned());
    Err(Error::Traced { pid, tracer, name })
}

/// The run-time addresses of the functions of the process's libc.so.6 the trampoline calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LibcFunctions {
    pub dlopen: u64,
    pub dlsym: u64,
    pub mutex_trylock: u64,
    pub mutex_unlock: u64,
}

/// [`LibcFunctions`] of `process`.
fn libc_functions(process: &Process, files: &[MapsLine]) -> Result<LibcFunctions, Error> {
    libc_functions_in(process.pid, files, |line| process.mapped(line).open)
}

/// [`libc_functions`] of `pid`, whose mapped files `open` gives a path to.
fn libc_functions_in(
    pid: u32,
    files: &[MapsLine],
    open: impl Fn(&MapsLine) -> std::path::PathBuf,
) -> Result<LibcFunctions, Error> {
    let Some(first) = first_mapping(files, "libc.so.6") else {
        return Err(Error::Unsupported {
            pid,
            why: format!("pid {pid} maps no glibc (libc.so.6): only glibc processes can be injected"),
        });
    };
    let names = ["dlopen", "dlsym", "pthread_mutex_trylock", "pthread_mutex_unlock"];
    let found = dynamic_symbols(first, open(first), &names).map_err(|e| Error::Unsupported {
        pid,
        why: format!("cannot read pid {pid}'s {}: {e}", first.path),
    })?;
    match found[..] {
        [Some((dlopen, _)), Some((dlsym, _)), Some((mutex_trylock, _)), Some((mutex_unlock, _))] => {
            Ok(LibcFunctions {
                dlopen,
                dlsym,
                mutex_trylock,
                mutex_unlock,
            })
        }
        _ => Err(Error::OldGlibc {
            pid,
            libc: first.path.to_owned(),
        }),
    }
}

/// The mapping of `library`'s file offset 0 among `files`, where its addresses are counted from.
pub(super) fn first_mapping<'a, 'b>(files: &'b [MapsLine<'a>], library: &str) -> Option<&'b MapsLine<'a>> {
    files
        .iter()
        .find(|m| library_matches(m.path, library) && u64::from_str_radix(m.offset, 16) == Ok(0))
}

/// The run-time address and size of each of `names` among the dynamic symbols of the library
/// mapped at `first` (its file at `path`); None for one it does not define.
pub(super) fn dynamic_symbols(
    first: &MapsLine,
    path: std::path::PathBuf,
    names: &[&str],
) -> Result<Vec<Option<(u64, u64)>>, String> {
    let elf = crate::elf::Elf::read(path).map_err(|e| e.to_string())?;
    let parsed = elf.parse().map_err(|e| e.to_string())?;
    let start = first.addresses().ok_or("a malformed maps line")?.start;
    let lowest = parsed.segments().map(|s| s.address()).min().unwrap_or(0) & !(trampoline::PAGE - 1);
    let bias = start.wrapping_sub(lowest);
    let symbol = |name: &str| {
        parsed
            .dynamic_symbols()
            .find(|s| s.name() == Ok(name) && s.is_definition() && s.address() != 0)
            .map(|s| (s.address().wrapping_add(bias), s.size()))
    };
    Ok(names.iter().map(|name| symbol(name)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_process_is_told_from_a_traced_or_sleeping_one() {
        assert!(is_stopped("Name:\tx\nState:\tT (stopped)\n"));
        assert!(!is_stopped("State:\tt (tracing stop)\n"));
        assert!(!is_stopped("State:\tS (sleeping)\n"));
    }

    #[test]
    fn the_libc_functions_are_found_where_this_process_has_them() {
        let pid = std::process::id();
        let maps = crate::procfs::maps_text(pid).unwrap();
        let files: Vec<MapsLine> = maps.lines().filter_map(MapsLine::file).collect();
        let found = libc_functions_in(pid, &files, |m| m.path.into()).unwrap();
        let symbol = |name: &std::ffi::CStr| {
            // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks the name up.
            unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as u64 }
        };
        assert_eq!(
            found,
            LibcFunctions {
                dlopen: symbol(c"dlopen"),
                dlsym: symbol(c"dlsym"),
                mutex_trylock: symbol(c"pthread_mutex_trylock"),
                mutex_unlock: symbol(c"pthread_mutex_unlock"),
            }
        );
    }

    #[test]
    fn a_libc_without_dlopen_is_a_glibc_before_2_34() {
        // This process's libc mapping, read from a library that has no dlopen (libm), stands for
        // a glibc before 2.34, whose dlopen was in libdl.
        let pid = std::process::id();
        let maps = crate::procfs::maps_text(pid).unwrap();
        let files: Vec<MapsLine> = maps.lines().filter_map(MapsLine::file).collect();
        let libm = files
            .iter()
            .find(|m| library_matches(m.path, "libm.so.6"))
            .map_or("/lib/x86_64-linux-gnu/libm.so.6", |m| m.path);
        let got = libc_functions_in(pid, &files, |_| libm.into());
        assert!(
            matches!(&got, Err(Error::OldGlibc { pid: p, libc }) if *p == pid && libc.ends_with("libc.so.6")),
            "{got:?}"
        );
    }

    #[test]
    fn a_tracer_is_read_from_the_status() {
        assert_eq!(tracer_pid("Name:\tx\nTracerPid:\t4242\nUid:\t0\n"), Some(4242));
        assert_eq!(tracer_pid("TracerPid:\t0\n"), None);
        assert_eq!(tracer_pid("Name:\tx\n"), None);
    }
}
