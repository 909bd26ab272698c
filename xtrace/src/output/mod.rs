//! The output directory: its default name, creating it, and creating files in it through its
//! descriptor, without following symbolic links (see [`Dir`]). Under sudo, what xtrace creates
//! belongs to the invoking user (SUDO_UID/SUDO_GID). Every file is written as `NAME.partial` and
//! renamed to NAME once whole, so a file cut short (a full disk, SIGKILL, a panic) never looks
//! whole. The trace file is written through a [`Sink`],
//! plain or gzip-compressed (`--gzip`). `stdio` writes to standard output and error.
mod dir;
mod named;
pub mod placeholders;
mod sink;
pub mod stdio;

use std::{
    fs::File,
    io::Write,
    path::{Path, PathBuf},
    sync::{atomic::AtomicU64, Arc},
};

pub use dir::{Dir, Kind};
pub use named::{shown, write_path};
pub use sink::{Sink, FILE_BUFFER};

use crate::error::{Error, Result};

/// `xtrace-YYYYmmdd-HHMMSS` in local time.
pub fn default_dir() -> PathBuf {
    // SAFETY: time(NULL) and localtime_r with valid pointers.
    let tm = unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&now, &mut tm);
        tm
    };
    PathBuf::from(format!(
        "xtrace-{:04}{:02}{:02}-{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    ))
}

/// The user who ran `sudo xtrace`, when xtrace runs as root under sudo. A `SUDO_UID` or
/// `SUDO_GID` that is set but is no id (or one without the other) is said once on stderr unless
/// `quiet` (`-q`): the outputs then stay root's.
fn invoking_user(quiet: bool) -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let (uid, gid) = (std::env::var_os("SUDO_UID"), std::env::var_os("SUDO_GID"));
    match sudo_ids(uid.as_deref(), gid.as_deref()) {
        Ok(ids) => ids,
        Err(()) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                if quiet {
                    return;
                }
                let shown = |v: &Option<std::ffi::OsString>| {
                    v.as_ref()
                        .map_or("unset".into(), |v| format!("{:?}", v.to_string_lossy()))
                };
                stdio::print_err(&format!(
                    "xtrace: warning: SUDO_UID={} and SUDO_GID={} are not a user and group id, so \
                     the outputs stay root's; unset them, or run xtrace with sudo",
                    shown(&uid),
                    shown(&gid)
                ));
            });
            None
        }
    }
}

/// The ids in `SUDO_UID` and `SUDO_GID`: None when neither is set, an error when either is not
/// an id (digits only, as sudo writes them; not `(uid_t)-1`, which chown takes for "unchanged").
fn sudo_ids(
    uid: Option<&std::ffi::OsStr>,
    gid: Option<&std::ffi::OsStr>,
) -> std::result::Result<Option<(u32, u32)>, ()> {
    if uid.is_none() && gid.is_none() {
        return Ok(None);
    }
    let id = |value: Option<&std::ffi::OsStr>| {
        let value = value?.to_str()?;
        let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
        digits
            .then(|| value.parse::<u32>().ok())
            .flatten()
            .filter(|&id| id != u32::MAX)
    };
    match (id(uid), id(gid)) {
        (Some(uid), Some(gid)) => Ok(Some((uid, gid))),
        _ => Err(()),
    }
}

/// Opens `dir`, creating it and its parents if needed; without one, creates a new directory of the
/// default name in the working directory ([`Dir::create_fresh`]: never one that was there). Every
/// directory and file xtrace creates belongs to the invoking user under sudo. Fails now, before
/// anything is attached, if files cannot be created there. Every file of the recording is then
/// made through the returned descriptor (see [`Dir`]). `quiet` (`-q`) keeps warnings off stderr.
pub fn prepare(dir: Option<&Path>, quiet: bool) -> Result<Dir> {
    let Some(path) = dir else {
        // A name xtrace picks is made anew: one taken (a link planted for it) is passed over.
        let base = default_dir();
        let dir = Dir::create_fresh(Path::new("."), &base.to_string_lossy(), invoking_user(quiet))
            .map_err(|source| Error::Output { path: base, source })?;
        return writable(dir);
    };
    let path = path.to_path_buf();
    let err = |source| Error::Output {
        path: path.clone(),
        source,
    };
    if let Ok(meta) = std::fs::metadata(&path) {
        if meta.is_file() {
            return Err(err(std::io::Error::other("it is a file, not a directory")));
        }
        if !meta.is_dir() {
            return Err(err(std::io::Error::other("it is not a directory")));
        }
    } else if let Ok(target) = std::fs::read_link(&path) {
        return Err(err(std::io::Error::other(format!(
            "it is a symbolic link to {}, which does not exist",
            target.display()
        ))));
    }
    writable(Dir::open_or_create(&path, invoking_user(quiet)).map_err(err)?)
}

/// Checks that files can be made in `dir`, and that no output name there is taken by what xtrace
/// would not replace.
fn writable(dir: Dir) -> Result<Dir> {
    let err = |source| Error::Output {
        path: dir.path().to_path_buf(),
        source,
    };
    let probe = format!(".xtrace-{}", std::process::id());
    dir.create_file(&probe).map_err(err)?;
    let _ = dir.remove_file(&probe);
    // An output name taken by a directory, a symbolic link (never followed) or anything else
    // that is not a file would fail only at the end of the recording.
    for name in output_names() {
        let taken = match dir.kind(&name) {
            Ok(Some(Kind::Directory)) => "a directory",
            Ok(Some(Kind::Symlink)) => "a symbolic link, which xtrace does not follow",
            Ok(Some(Kind::Other)) => "not a regular file",
            Ok(Some(Kind::File) | None) | Err(_) => continue,
        };
        return Err(Error::Output {
            path: dir.join(&name),
            source: std::io::Error::other(format!("it is {taken}")),
        });
    }
    Ok(dir)
}

/// The trace, plain and gzipped (`--gzip`).
pub const TRACE_FILE: &str = "trace.json";
pub const TRACE_FILE_GZ: &str = "trace.json.gz";
/// The trace in Perfetto's protobuf format (`--trace-format perfetto`), plain and gzipped.
pub const PERFETTO_FILE: &str = "trace.perfetto-trace";
pub const PERFETTO_FILE_GZ: &str = "trace.perfetto-trace.gz";

/// The format of the trace file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    /// Chrome's Trace Event format (trace.json), which Perfetto reads as a legacy format.
    #[default]
    Json,
    /// Perfetto's own protobuf format (trace.perfetto-trace).
    Perfetto,
}

impl TraceFormat {
    /// The trace file's name in this format, compressed or not.
    pub fn file_name(self, gzip: bool) -> &'static str {
        match (self, gzip) {
            (TraceFormat::Json, false) => TRACE_FILE,
            (TraceFormat::Json, true) => TRACE_FILE_GZ,
            (TraceFormat::Perfetto, false) => PERFETTO_FILE,
            (TraceFormat::Perfetto, true) => PERFETTO_FILE_GZ,
        }
    }
}
/// The summary, as JSON and as the table printed at the end.
pub const SUMMARY_JSON: &str = "summary.json";
pub const SUMMARY_TXT: &str = "summary.txt";
/// The CPU profile (`-F`): folded stacks and their flamegraph.
pub const STACKS_FOLDED: &str = "stacks.folded";
pub const FLAMEGRAPH_SVG: &str = "flamegraph.svg";
/// Off-CPU time (`--off-cpu`): folded stacks weighted by nanoseconds, and their flamegraph.
pub const OFFCPU_FOLDED: &str = "offcpu.folded";
pub const OFFCPU_SVG: &str = "offcpu.svg";
/// On-CPU samples and off-CPU time on one flamegraph, in nanoseconds (`--off-cpu` with sampling).
pub const WALLCLOCK_FOLDED: &str = "wallclock.folded";
pub const WALLCLOCK_SVG: &str = "wallclock.svg";
/// The spans as a flamegraph, and the pprof profile.
pub const SPAN_FLAMEGRAPH_SVG: &str = "span-flamegraph.svg";
pub const PROFILE_PB_GZ: &str = "profile.pb.gz";

/// Every file a recording may write into its output directory (each also as `NAME.partial` while
/// it is written: see [`create`]).
pub const FILES: &[&str] = &[
    TRACE_FILE,
    TRACE_FILE_GZ,
    PERFETTO_FILE,
    PERFETTO_FILE_GZ,
    SUMMARY_JSON,
    SUMMARY_TXT,
    STACKS_FOLDED,
    FLAMEGRAPH_SVG,
    OFFCPU_FOLDED,
    OFFCPU_SVG,
    WALLCLOCK_FOLDED,
    WALLCLOCK_SVG,
    SPAN_FLAMEGRAPH_SVG,
    PROFILE_PB_GZ,
];

/// Every name a recording may leave in its output directory: each of [`FILES`], whole and
/// partial.
fn output_names() -> impl Iterator<Item = String> {
    FILES.iter().flat_map(|name| [name.to_string(), partial(name)])
}

/// The name of file `name` while it is written.
pub fn partial(name: &str) -> String {
    format!("{name}.partial")
}

/// Starts writing `dir/name`: creates `dir/name.partial` anew, and removes an older `dir/name`, so
/// that no whole-looking file of another run is left beside it. [`complete`] gives the file its
/// name once it is whole. An older `name.partial` is removed first and the new one is created
/// exclusively (`O_EXCL`, never through a symbolic link), so the file handed to the invoking user
/// under sudo is always one xtrace made: never another file a hard link planted there names.
pub fn create(dir: &Dir, name: &str) -> Result<File> {
    let partial = partial(name);
    for old in [name, partial.as_str()] {
        remove_if_there(dir, old)?;
    }
    dir.create_file(&partial).map_err(|source| Error::Output {
        path: dir.join(&partial),
        source,
    })
}

/// Removes file `dir/name` if there is one.
fn remove_if_there(dir: &Dir, name: &str) -> Result<()> {
    match dir.remove_file(name) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Output {
            path: dir.join(name),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// Renames the whole `dir/name.partial` to `dir/name` (replacing, not following, what is there).
pub fn complete(dir: &Dir, name: &str) -> Result<()> {
    dir.rename(&partial(name), name).map_err(|source| Error::Output {
        path: dir.join(name),
        source,
    })
}

/// Writes `dir/name` whole (through `name.partial`).
pub fn write(dir: &Dir, name: &str, bytes: &[u8]) -> Result<()> {
    let mut file = create(dir, name)?;
    file.write_all(bytes).map_err(|source| Error::Output {
        path: dir.join(&partial(name)),
        source,
    })?;
    drop(file);
    complete(dir, name)
}

/// The trace file of a recording while it is written.
pub struct TraceFile {
    /// `trace.json` or `trace.perfetto-trace`, `.gz` appended with `--gzip`.
    pub name: &'static str,
    pub format: TraceFormat,
    /// Where it is written until it is whole: `DIR/NAME.partial`.
    pub path: PathBuf,
    /// Bytes handed to the file so far (compressed ones with `--gzip`), for the live status line.
    pub bytes: Arc<AtomicU64>,
}

/// Starts the trace file in `dir` (see [`create`]), in `format`, compressed when `gzip`, as the recording
/// starts. First every output of an older recording in `dir` goes (each of [`FILES`], whole or
/// partial), so that the directory holds one recording's files: `xtrace report` would read an old
/// `stacks.folded` or `trace.json` left beside the new ones as part of the new recording.
pub fn create_trace(dir: &Dir, gzip: bool, format: TraceFormat) -> Result<(Sink, TraceFile)> {
    for name in output_names() {
        remove_if_there(dir, &name)?;
    }
    let name = format.file_name(gzip);
    let (sink, bytes) = Sink::new(create(dir, name)?, gzip);
    let path = dir.join(&partial(name));
    Ok((
        sink,
        TraceFile {
            name,
            format,
            path,
            bytes,
        },
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn sudo_ids_are_digits() {
        let ids = |uid: Option<&str>, gid: Option<&str>| {
            sudo_ids(uid.map(std::ffi::OsStr::new), gid.map(std::ffi::OsStr::new))
        };
        assert_eq!(ids(None, None), Ok(None));
        assert_eq!(ids(Some("1000"), Some("100")), Ok(Some((1000, 100))));
        for (uid, gid) in [
            (Some("abc"), Some("1")),
            (Some(""), Some("1")),
            (Some("+1000"), Some("1")),
            (Some(" 1000"), Some("1")),
            (Some("-1"), Some("1")),
            (Some("4294967295"), Some("1")),
            (Some("4294967296"), Some("1")),
            (Some("1000"), None),
            (None, Some("1000")),
        ] {
            assert_eq!(ids(uid, gid), Err(()), "{uid:?} {gid:?}");
        }
    }

    #[test]
    fn default_name_shape() {
        let name = default_dir().display().to_string();
        assert_eq!(name.len(), "xtrace-20260101-120000".len(), "{name}");
        assert!(name.starts_with("xtrace-20"));
    }

    #[test]
    fn unwritable_directories_fail_early() {
        assert!(matches!(
            prepare(Some(Path::new("/proc/xtrace-cannot-exist")), false),
            Err(Error::Output { .. })
        ));
        assert!(matches!(
            prepare(Some(Path::new("/proc/self")), false),
            Err(Error::Output { .. })
        ));
    }

    #[test]
    fn taken_output_names_fail_early() {
        let dir = std::env::temp_dir().join(format!("xtrace-taken-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("summary.json")).unwrap();
        let message = prepare(Some(&dir), false).unwrap_err().to_string();
        assert_eq!(
            message,
            format!(
                "cannot write {}: it is a directory; choose another output directory with -o DIR",
                dir.join("summary.json").display()
            )
        );
        std::fs::remove_dir(dir.join("summary.json")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("trace.json")).unwrap();
        let message = prepare(Some(&dir), false).unwrap_err().to_string();
        assert!(message.contains("trace.json: it is a symbolic link"), "{message}");
        std::fs::remove_file(dir.join("trace.json")).unwrap();
        std::fs::create_dir(dir.join("stacks.folded.partial")).unwrap();
        let message = prepare(Some(&dir), false).unwrap_err().to_string();
        assert!(
            message.contains("stacks.folded.partial: it is a directory"),
            "{message}"
        );
        std::fs::remove_dir(dir.join("stacks.folded.partial")).unwrap();
        std::fs::write(dir.join("summary.txt"), "old").unwrap();
        assert!(prepare(Some(&dir), false).is_ok(), "an old file is overwritten");
        let file = dir.join("summary.txt");
        let message = prepare(Some(&file), false).unwrap_err().to_string();
        assert!(message.contains("it is a file, not a directory"), "{message}");
        let dangling = dir.join("dangling");
        std::os::unix::fs::symlink("/xtrace-missing", &dangling).unwrap();
        let message = prepare(Some(&dangling), false).unwrap_err().to_string();
        assert!(
            message.contains("dangling: it is a symbolic link to /xtrace-missing, which does not exist"),
            "{message}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_planted_hard_link_is_replaced_not_written_through() {
        let base = std::env::temp_dir().join(format!("xtrace-hardlink-{}", std::process::id()));
        let dir = prepare(Some(&base.join("out")), false).unwrap();
        let victim = base.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::fs::hard_link(&victim, dir.join("summary.json.partial")).unwrap();
        write(&dir, "summary.json", b"{}").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(
            std::os::unix::fs::MetadataExt::nlink(&victim.metadata().unwrap()),
            1
        );
        assert_eq!(std::fs::read(dir.join("summary.json")).unwrap(), b"{}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_new_recording_removes_the_outputs_of_an_older_one() {
        let path = std::env::temp_dir().join(format!("xtrace-older-{}", std::process::id()));
        let dir = prepare(Some(&path), false).unwrap();
        for old in [
            "trace.json",
            "stacks.folded",
            "flamegraph.svg.partial",
            "notes.txt",
        ] {
            std::fs::write(dir.join(old), "older").unwrap();
        }
        let (sink, trace) = create_trace(&dir, true, TraceFormat::Json).unwrap();
        drop(sink);
        let mut left: Vec<String> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["notes.txt", "trace.json.gz.partial"],
            "only xtrace's names go"
        );
        assert_eq!(trace.name, "trace.json.gz");
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn files_are_partial_until_complete() {
        let dir = prepare(
            Some(&std::env::temp_dir().join(format!("xtrace-partial-{}", std::process::id()))),
            false,
        )
        .unwrap();
        std::fs::write(dir.join("trace.json"), "an older run's trace").unwrap();
        let mut file = create(&dir, "trace.json").unwrap();
        file.write_all(b"{\"traceEvents\":[").unwrap();
        assert!(!dir.join("trace.json").exists(), "the older trace is gone");
        assert_eq!(
            std::fs::read(dir.join("trace.json.partial")).unwrap(),
            b"{\"traceEvents\":["
        );
        complete(&dir, "trace.json").unwrap();
        assert!(!dir.join("trace.json.partial").exists());
        assert_eq!(
            std::fs::read(dir.join("trace.json")).unwrap(),
            b"{\"traceEvents\":["
        );
        write(&dir, "summary.txt", b"whole").unwrap();
        assert_eq!(std::fs::read(dir.join("summary.txt")).unwrap(), b"whole");
        assert!(!dir.join("summary.txt.partial").exists());
        // A name taken by a directory since `prepare` is reported.
        std::fs::create_dir(dir.join("summary.json")).unwrap();
        let message = write(&dir, "summary.json", b"{}").unwrap_err().to_string();
        assert!(message.contains("summary.json: Is a directory"), "{message}");
        std::fs::remove_dir_all(dir.path()).unwrap();
    }

    #[test]
    fn the_trace_file_counts_what_it_is_given() {
        let dir = prepare(
            Some(&std::env::temp_dir().join(format!("xtrace-sink-{}", std::process::id()))),
            false,
        )
        .unwrap();
        let json = "{\"traceEvents\":[]}".repeat(10_000);
        for gzip in [false, true] {
            let (mut sink, trace) = create_trace(&dir, gzip, TraceFormat::Json).unwrap();
            sink.write_all(json.as_bytes()).unwrap();
            sink.close().unwrap();
            complete(&dir, trace.name).unwrap();
            let on_disk = std::fs::metadata(dir.join(trace.name)).unwrap().len();
            assert_eq!(trace.bytes.load(Ordering::Relaxed), on_disk, "{}", trace.name);
            assert_eq!(trace.path, dir.join(&format!("{}.partial", trace.name)));
        }
        let gz = std::fs::metadata(dir.join(TRACE_FILE_GZ)).unwrap().len();
        assert!(gz * 10 < json.len() as u64, "{gz} compressed bytes counted");
        std::fs::remove_dir_all(dir.path()).unwrap();
    }

    #[test]
    fn refuses_symlinks() {
        let dir = std::env::temp_dir().join(format!("xtrace-out-test-{}", std::process::id()));
        let dir = prepare(Some(&dir), false).unwrap();
        let elsewhere = dir.join("elsewhere");
        std::os::unix::fs::symlink(&elsewhere, dir.join("trace.json.partial")).unwrap();
        // The link planted since `prepare` is removed, not followed: a new file takes its name.
        assert!(create(&dir, "trace.json").is_ok());
        assert!(!elsewhere.exists());
        let made = std::fs::symlink_metadata(dir.join("trace.json.partial")).unwrap();
        assert!(made.file_type().is_file());
        std::fs::remove_dir_all(dir.path()).unwrap();
    }
}
