//! The output directory: its default name, creating it, and creating files in it without following
//! symbolic links. Under sudo, what xtrace creates belongs to the invoking user (SUDO_UID/SUDO_GID).
//! Every file is written as `NAME.partial` and renamed to NAME once whole, so a file cut short (a
//! full disk, SIGKILL, a panic) never looks whole. The trace file is written through a [`Sink`],
//! plain or gzip-compressed (`--gzip`).
use std::{
    fs::File,
    io::{BufWriter, Write},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

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

/// The user who ran `sudo xtrace`, when xtrace runs as root under sudo.
fn invoking_user() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let id = |name| std::env::var(name).ok()?.parse::<u32>().ok();
    Some((id("SUDO_UID")?, id("SUDO_GID")?))
}

/// Hands the directory at `path` to the invoking user under sudo.
fn give_to_invoking_user(path: &Path) -> std::io::Result<()> {
    match invoking_user() {
        Some((uid, gid)) => std::os::unix::fs::lchown(path, Some(uid), Some(gid)),
        None => Ok(()),
    }
}

/// Hands an open file to the invoking user under sudo (by its fd: no path is looked up again).
fn give_file_to_invoking_user(file: &File) -> std::io::Result<()> {
    match invoking_user() {
        Some((uid, gid)) => std::os::unix::fs::fchown(file, Some(uid), Some(gid)),
        None => Ok(()),
    }
}

/// Creates `dir` if needed (its parents too); every directory xtrace creates belongs to the
/// invoking user under sudo. Fails now, before anything is attached, if files cannot be created
/// there.
pub fn prepare(dir: Option<&Path>) -> Result<PathBuf> {
    let dir = dir.map(Path::to_path_buf).unwrap_or_else(default_dir);
    let err = |source| Error::Output {
        path: dir.clone(),
        source,
    };
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(err(std::io::Error::other("it is a file, not a directory"))),
        Err(_) => create_dirs(&dir).map_err(err)?,
    }
    let probe = dir.join(format!(".xtrace-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&probe)
        .map_err(err)?;
    let _ = std::fs::remove_file(&probe);
    // An output name taken by a directory, a symbolic link (never followed) or anything else
    // that is not a file would fail only at the end of the recording.
    for path in FILES
        .iter()
        .flat_map(|name| [dir.join(name), dir.join(partial(name))])
    {
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            let what = meta.file_type();
            let taken = if what.is_file() {
                continue;
            } else if what.is_dir() {
                "a directory"
            } else if what.is_symlink() {
                "a symbolic link, which xtrace does not follow"
            } else {
                "not a regular file"
            };
            return Err(Error::Output {
                path,
                source: std::io::Error::other(format!("it is {taken}")),
            });
        }
    }
    Ok(dir)
}

/// Creates `dir` and its missing parents, outermost first, each handed to the invoking user.
fn create_dirs(dir: &Path) -> std::io::Result<()> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_err())
        .collect();
    for path in missing.iter().rev() {
        match std::fs::create_dir(path) {
            Ok(()) => give_to_invoking_user(path)?,
            // Made meanwhile by someone else: theirs, left as it is.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The trace, plain and gzipped (`--gzip`).
pub const TRACE_FILE: &str = "trace.json";
pub const TRACE_FILE_GZ: &str = "trace.json.gz";
/// The summary, as JSON and as the table printed at the end.
pub const SUMMARY_JSON: &str = "summary.json";
pub const SUMMARY_TXT: &str = "summary.txt";
/// The CPU profile (`-F`): folded stacks and their flamegraph.
pub const STACKS_FOLDED: &str = "stacks.folded";
pub const FLAMEGRAPH_SVG: &str = "flamegraph.svg";
/// The spans as a flamegraph, and the pprof profile.
pub const SPAN_FLAMEGRAPH_SVG: &str = "span-flamegraph.svg";
pub const PROFILE_PB_GZ: &str = "profile.pb.gz";

/// Every file a recording may write into its output directory (each also as `NAME.partial` while
/// it is written: see [`create`]).
pub const FILES: &[&str] = &[
    TRACE_FILE,
    TRACE_FILE_GZ,
    SUMMARY_JSON,
    SUMMARY_TXT,
    STACKS_FOLDED,
    FLAMEGRAPH_SVG,
    SPAN_FLAMEGRAPH_SVG,
    PROFILE_PB_GZ,
];

/// The name of file `name` while it is written.
pub fn partial(name: &str) -> String {
    format!("{name}.partial")
}

/// Starts writing `dir/name`: creates (truncates) `dir/name.partial`, refusing a symbolic link
/// there, and removes an older `dir/name`, so that no whole-looking file of another run is left
/// beside it. [`complete`] gives the file its name once it is whole.
pub fn create(dir: &Path, name: &str) -> Result<File> {
    let whole = dir.join(name);
    match std::fs::remove_file(&whole) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::Output {
                path: whole,
                source: e,
            })
        }
        _ => {}
    }
    let path = dir.join(partial(name));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(&path)
        .and_then(|file| give_file_to_invoking_user(&file).map(|()| file))
        .map_err(|source| Error::Output { path, source })
}

/// Renames the whole `dir/name.partial` to `dir/name` (replacing, not following, what is there).
pub fn complete(dir: &Path, name: &str) -> Result<()> {
    let path = dir.join(name);
    std::fs::rename(dir.join(partial(name)), &path).map_err(|source| Error::Output { path, source })
}

/// Writes `dir/name` whole (through `name.partial`).
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let mut file = create(dir, name)?;
    file.write_all(bytes).map_err(|source| Error::Output {
        path: dir.join(partial(name)),
        source,
    })?;
    drop(file);
    complete(dir, name)
}

/// Writes the file at `path` whole (a file name, with or without a directory); a path without a
/// file name is refused.
pub fn write_path(path: &Path, bytes: &[u8]) -> Result<()> {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            // The advice of a recording's output directory does not fit a file named with -o.
            write(dir, &name.to_string_lossy(), bytes).map_err(|e| match e {
                Error::Output { path, source } => Error::OutputFile { path, source },
                e => e,
            })
        }
        _ => Err(Error::Usage(format!(
            "-o {}: give the path of a file to write",
            path.display()
        ))),
    }
}

/// The trace file of a recording while it is written.
pub struct TraceFile {
    /// `trace.json`, or `trace.json.gz` with `--gzip`.
    pub name: &'static str,
    /// Where it is written until it is whole: `DIR/NAME.partial`.
    pub path: PathBuf,
    /// Bytes handed to the file so far (compressed ones with `--gzip`), for the live status line.
    pub bytes: Arc<AtomicU64>,
}

/// Starts the trace file in `dir` (see [`create`]), compressed when `gzip`.
pub fn create_trace(dir: &Path, gzip: bool) -> Result<(Sink, TraceFile)> {
    let name = if gzip { TRACE_FILE_GZ } else { TRACE_FILE };
    let (sink, bytes) = Sink::new(create(dir, name)?, gzip);
    let path = dir.join(partial(name));
    Ok((sink, TraceFile { name, path, bytes }))
}

/// Counts bytes passing through to `W`.
pub struct Counted<W> {
    inner: W,
    bytes: Arc<AtomicU64>,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The buffer in front of an output file; trace.json's writer hands over pieces this large.
pub const FILE_BUFFER: usize = 1 << 20;

/// The trace file as it is streamed: plain, or compressed on the way (trace.json.gz). What goes
/// into the file's buffer is counted, after compression.
pub enum Sink {
    Plain(Counted<BufWriter<File>>),
    Gzip(Box<flate2::write::GzEncoder<Counted<BufWriter<File>>>>),
}

impl Sink {
    /// Buffers writes to `file`, compressing them when `gzip`; returns the count of bytes given
    /// to the file so far, which can be read while it is written.
    pub fn new(file: File, gzip: bool) -> (Sink, Arc<AtomicU64>) {
        let bytes = Arc::new(AtomicU64::new(0));
        let file = Counted {
            inner: BufWriter::with_capacity(FILE_BUFFER, file),
            bytes: bytes.clone(),
        };
        let sink = if gzip {
            // Fast compression: the writer thread must keep up with the ring buffer.
            let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
            Sink::Gzip(Box::new(gz))
        } else {
            Sink::Plain(file)
        };
        (sink, bytes)
    }

    /// Writes what is buffered and, compressed, the gzip trailer.
    pub fn close(self) -> std::io::Result<()> {
        match self {
            Sink::Plain(mut file) => file.flush(),
            Sink::Gzip(gz) => (*gz).finish()?.flush(),
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Gzip(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip(w) => w.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_name_shape() {
        let name = default_dir().display().to_string();
        assert_eq!(name.len(), "xtrace-20260101-120000".len(), "{name}");
        assert!(name.starts_with("xtrace-20"));
    }

    #[test]
    fn unwritable_directories_fail_early() {
        assert!(matches!(
            prepare(Some(Path::new("/proc/xtrace-cannot-exist"))),
            Err(Error::Output { .. })
        ));
        assert!(matches!(
            prepare(Some(Path::new("/proc/self"))),
            Err(Error::Output { .. })
        ));
    }

    #[test]
    fn taken_output_names_fail_early() {
        let dir = std::env::temp_dir().join(format!("xtrace-taken-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("summary.json")).unwrap();
        let message = prepare(Some(&dir)).unwrap_err().to_string();
        assert_eq!(
            message,
            format!(
                "cannot write {}: it is a directory; choose another output directory with -o DIR",
                dir.join("summary.json").display()
            )
        );
        std::fs::remove_dir(dir.join("summary.json")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("trace.json")).unwrap();
        let message = prepare(Some(&dir)).unwrap_err().to_string();
        assert!(message.contains("trace.json: it is a symbolic link"), "{message}");
        std::fs::remove_file(dir.join("trace.json")).unwrap();
        std::fs::create_dir(dir.join("stacks.folded.partial")).unwrap();
        let message = prepare(Some(&dir)).unwrap_err().to_string();
        assert!(
            message.contains("stacks.folded.partial: it is a directory"),
            "{message}"
        );
        std::fs::remove_dir(dir.join("stacks.folded.partial")).unwrap();
        std::fs::write(dir.join("summary.txt"), "old").unwrap();
        assert!(prepare(Some(&dir)).is_ok(), "an old file is overwritten");
        let file = dir.join("summary.txt");
        let message = prepare(Some(&file)).unwrap_err().to_string();
        assert!(message.contains("it is a file, not a directory"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_are_partial_until_complete() {
        let dir = prepare(Some(
            &std::env::temp_dir().join(format!("xtrace-partial-{}", std::process::id())),
        ))
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
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_trace_file_counts_what_it_is_given() {
        let dir = prepare(Some(
            &std::env::temp_dir().join(format!("xtrace-sink-{}", std::process::id())),
        ))
        .unwrap();
        let json = "{\"traceEvents\":[]}".repeat(10_000);
        for gzip in [false, true] {
            let (mut sink, trace) = create_trace(&dir, gzip).unwrap();
            sink.write_all(json.as_bytes()).unwrap();
            sink.close().unwrap();
            complete(&dir, trace.name).unwrap();
            let on_disk = std::fs::metadata(dir.join(trace.name)).unwrap().len();
            assert_eq!(trace.bytes.load(Ordering::Relaxed), on_disk, "{}", trace.name);
            assert_eq!(trace.path, dir.join(format!("{}.partial", trace.name)));
        }
        let gz = std::fs::metadata(dir.join(TRACE_FILE_GZ)).unwrap().len();
        assert!(gz * 10 < json.len() as u64, "{gz} compressed bytes counted");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refuses_symlinks() {
        let dir = std::env::temp_dir().join(format!("xtrace-out-test-{}", std::process::id()));
        let dir = prepare(Some(&dir)).unwrap();
        std::os::unix::fs::symlink("/tmp/xtrace-out-test-elsewhere", dir.join("trace.json.partial")).unwrap();
        assert!(matches!(create(&dir, "trace.json"), Err(Error::Output { .. })));
        assert!(create(&dir, "summary.json").is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
