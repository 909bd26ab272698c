//! Analysis of finished captures (no BPF, no root): loading a capture directory (`capture`),
//! nesting spans into self times (`spans`), per-probe and per-thread statistics (`stats`),
//! bottlenecks — outliers, self-time shares, waits (`outliers`), time off CPU (`offcpu`), and the
//! Mann–Whitney U test
//! behind `xtrace diff` (`mannwhitney`). `xtrace report`, `xtrace diff` and the derived outputs
//! of a recording (span-flamegraph.svg, profile.pb.gz) are built on it.
pub mod capture;
pub mod mannwhitney;
pub mod offcpu;
pub mod outliers;
mod perfetto_args;
pub(crate) mod perfetto_file;
mod perfetto_packets;
pub mod spans;
pub mod stats;
pub mod stragglers;
pub(crate) mod trace_file;

use std::path::PathBuf;

/// What can be wrong with a capture given to `xtrace report` or `xtrace diff`. Every variant is
/// one line (what, which input, what to do) and exits 2, except an I/O failure while writing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: not an xtrace capture ({reason}); give a directory written by `xtrace -o DIR`")]
    NotACapture { path: PathBuf, reason: String },
    #[error("{path}: capture format version {found} is newer than version {supported}, which this xtrace reads; analyse it with the xtrace that recorded it")]
    NewerVersion {
        path: PathBuf,
        found: u64,
        supported: u32,
    },
    #[error("the captures have different format versions ({base} is version {base_version}, {new} is version {new_version}); compare captures recorded by the same xtrace version")]
    VersionMismatch {
        base: PathBuf,
        new: PathBuf,
        base_version: u64,
        new_version: u64,
    },
    #[error("the captures were recorded with different --min-duration ({base}: {base_min}, {new}: {new_min}), so their trace.json files hold different shares of the calls and their durations cannot be compared; record both with the same --min-duration, or without")]
    MinDurationMismatch {
        base: PathBuf,
        new: PathBuf,
        base_min: String,
        new_min: String,
    },
    #[error("{path}: a recording cut short ({partial} was never completed: xtrace was killed, panicked or could not write it); record it again")]
    CutShort { path: PathBuf, partial: String },
    #[error("{path}: the capture is empty (no spans and no samples); record again with probes (-u, -U, --cuda) or CPU sampling (-F) while the program does work")]
    Empty { path: PathBuf },
    #[error("{path}: a --flight capture keeps its events in its flight directories, not here; give one of them, e.g. {first}")]
    FlightOnly { path: PathBuf, first: PathBuf },
    #[error("{path}: {reason}; the capture is damaged: record it again")]
    Malformed { path: PathBuf, reason: String },
    #[error("{path}: cannot be converted: {reason}")]
    NotConvertible { path: PathBuf, reason: String },
    #[error("{path}: cannot be merged: {reason}")]
    NotMergeable { path: PathBuf, reason: String },
    #[error("{path}: cannot be read: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error(transparent)]
    Xtrace(#[from] crate::error::Error),
}

impl Error {
    /// 2 for a bad capture or argument; an output failure keeps the library's own code.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Xtrace(e) => e.exit_code(),
            _ => 2,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Opens the file `path` of a capture for reading, refusing what is not a regular file: a FIFO is
/// opened without waiting for a writer (`O_NONBLOCK`), so that it cannot hang the reader.
pub fn open_regular(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    Ok(file)
}

/// The whole file `path` of a capture (see [`open_regular`]).
pub fn read_regular(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_regular(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}
