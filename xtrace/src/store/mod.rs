//! A store of many runs' statistics, for history and a regression gate across runs and hosts:
//! a SQLite file (`sqlite:PATH`, or the default file) or a ClickHouse database over its HTTP
//! interface (`clickhouse://HOST:PORT/DB`). `rows` reads what is kept of a capture; `schema` is
//! the tables, the same in both; `sqlite` and `clickhouse` (over `http`) write and read them;
//! `history` answers per-function questions across runs from merged histograms, so both stores
//! give identical answers, and `plot` draws them; `gate` judges a run against baseline runs.
//!
//! A run is never stored twice: its id is a hash of the capture, and its `runs` row, written after
//! all its other rows, is the mark that it is whole. Every push writes its rows under a fresh
//! attempt id, and readers only read the rows of the attempt a `runs` row names, so the rows of
//! a push cut short are never read, and pushing again stores the run once.
pub mod clickhouse;
pub mod gate;
pub mod history;
mod http;
pub mod plot;
pub mod rows;
pub mod schema;
pub mod sqlite;

use std::path::{Path, PathBuf};

pub use rows::{Function, Run, RunRows};

/// The migrations a store of schema version `found` needs before it is used, after a check that
/// it is not newer than this xtrace's (refused then, never written).
fn migrations(url: &str, found: u32) -> Result<impl Iterator<Item = &'static schema::Migration>> {
    if found > schema::VERSION {
        return Err(Error::NewerSchema {
            url: url.to_string(),
            found,
            supported: schema::VERSION,
        });
    }
    Ok(schema::migrations_from(found))
}

/// What can go wrong with a store. Exit status 2 for bad input, 1 for a store that fails.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("store `{url}`: unknown kind of store; give sqlite:PATH or clickhouse://HOST:PORT/DB")]
    UnknownScheme { url: String },
    #[error("store `{url}`: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("{path}: cannot be stored: {reason}")]
    Capture { path: PathBuf, reason: String },
    #[error("store `{url}` has schema version {found}, newer than version {supported}, which this xtrace writes; use a newer xtrace with it")]
    NewerSchema { url: String, found: u32, supported: u32 },
    #[error("store `{url}` cannot be reached: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("store `{url}` refused a request: {reason}")]
    Refused { url: String, reason: String },
    #[error("`{text}` is not a run selector; give LABEL=VALUE, e.g. commit=abc123")]
    BadSelector { text: String },
    #[error("the gate needs at least {needed} baseline runs labelled {selector} in the store; it holds {found}: push more baseline runs first")]
    TooFewBaseline {
        selector: String,
        found: usize,
        needed: usize,
    },
    #[error(
        "no run labelled {selector} in the store: push the candidate first, or give its capture directory"
    )]
    NoCandidate { selector: String },
    #[error(transparent)]
    Xtrace(#[from] crate::error::Error),
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Unreachable { .. } | Error::Refused { .. } => 1,
            Error::Xtrace(e) => e.exit_code(),
            _ => 2,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A run as stored, with the attempt whose rows are its.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRun {
    pub run: Run,
    pub attempt: String,
}

/// One function's statistics in one stored run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredFunction {
    pub attempt: String,
    pub function: Function,
}

/// What every store does.
pub trait Backend {
    /// Creates the tables if missing; refuses a store whose schema is newer than this xtrace's.
    fn prepare(&mut self) -> Result<()>;
    /// Whether the run `id` is stored whole.
    fn has_run(&mut self, id: &str) -> Result<bool>;
    /// Writes the tables' rows, table after table in the order given ([`schema::rows`] puts
    /// `runs` last); SQLite in one transaction.
    fn write(&mut self, tables: Vec<(&'static schema::Table, Vec<Vec<schema::Value>>)>) -> Result<()>;
    /// Every run stored whole, in no order.
    fn runs(&mut self) -> Result<Vec<StoredRun>>;
    /// The functions of the runs of `attempts`, with their histograms; only those named in
    /// `names` unless it is empty.
    fn functions(&mut self, attempts: &[String], names: &[String]) -> Result<Vec<StoredFunction>>;
}

/// Where runs are stored, as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Url {
    Sqlite(PathBuf),
    ClickHouse {
        /// host:port, as given.
        address: String,
        database: String,
    },
}

impl Url {
    /// Parses `sqlite:PATH` or `clickhouse://HOST:PORT/DB`.
    pub fn parse(text: &str) -> Result<Url> {
        let bad = |reason: &str| Error::BadUrl {
            url: text.to_string(),
            reason: reason.to_string(),
        };
        if let Some(path) = text.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err(bad("no file named; give sqlite:PATH"));
            }
            return Ok(Url::Sqlite(PathBuf::from(path)));
        }
        let Some(rest) = text.strip_prefix("clickhouse://") else {
            return Err(Error::UnknownScheme {
                url: text.to_string(),
            });
        };
        let (address, database) = rest.split_once('/').unwrap_or((rest, ""));
        if address.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(bad("a host name holds no spaces or control characters"));
        }
        if address.contains('@') {
            return Err(bad(
                "credentials do not go in the URL (it shows in process lists); set XTRACE_STORE_USER and XTRACE_STORE_PASSWORD or XTRACE_STORE_PASSWORD_FILE",
            ));
        }
        let port_ok = address
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(bad(
                "give the HTTP interface's host and port, e.g. clickhouse://127.0.0.1:8123/xtrace",
            ));
        }
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '_';
        if database.is_empty() || !database.chars().all(valid) {
            return Err(bad(
                "give a database name of letters, digits and _ after the port, e.g. /xtrace",
            ));
        }
        Ok(Url::ClickHouse {
            address: address.to_string(),
            database: database.to_string(),
        })
    }

    /// The default store of `--store` given no URL: `$XDG_DATA_HOME/xtrace/runs.db`, else
    /// `~/.local/share/xtrace/runs.db`, of the user who ran sudo when run under sudo.
    pub fn default_sqlite() -> Url {
        let home = invoking_home();
        let data = std::env::var_os("XDG_DATA_HOME")
            .filter(|_| std::env::var_os("SUDO_USER").is_none())
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".local/share"));
        Url::Sqlite(data.join("xtrace/runs.db"))
    }

    /// How the store is named to the user.
    pub fn shown(&self) -> String {
        match self {
            Url::Sqlite(path) => format!("sqlite:{}", path.display()),
            Url::ClickHouse { address, database } => format!("clickhouse://{address}/{database}"),
        }
    }

    /// Connects to the store and makes its tables if missing.
    pub fn open(&self) -> Result<Box<dyn Backend>> {
        let mut store: Box<dyn Backend> = match self {
            Url::Sqlite(path) => Box::new(sqlite::Sqlite::open(path, &self.shown())?),
            Url::ClickHouse { address, database } => {
                Box::new(clickhouse::ClickHouse::new(address, database, &self.shown())?)
            }
        };
        store.prepare()?;
        Ok(store)
    }
}

/// The home directory of the user who ran xtrace, or who ran sudo to run it.
fn invoking_home() -> PathBuf {
    let from_passwd = |user: &str| {
        let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
        let line = passwd.lines().find(|l| l.split(':').next() == Some(user))?;
        line.split(':').nth(5).map(PathBuf::from)
    };
    if let Some(home) = std::env::var("SUDO_USER").ok().and_then(|u| from_passwd(&u)) {
        return home;
    }
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"))
}

/// What a push did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pushed {
    Stored { id: String },
    AlreadyStored { id: String },
}

/// Stores the capture in `dir` in the store at `url`, once; every span of its trace too with
/// `spans` (`--store-spans`).
pub fn push(dir: &Path, url: &Url, spans: bool) -> Result<Pushed> {
    let rows = rows::read(dir, spans)?;
    let mut store = url.open()?;
    let id = rows.run.id.clone();
    let pushed = if store.has_run(&id)? {
        Pushed::AlreadyStored { id: id.clone() }
    } else {
        let attempt = attempt_id();
        let mut tables = schema::rows(&rows, &attempt);
        // A test hook in debug builds only: a push cut short before its runs row, as a crash or
        // a lost connection would leave it, for the tests that push again.
        if cfg!(debug_assertions) && std::env::var_os("XTRACE_TEST_PUSH_CUT").is_some() {
            tables.pop();
            store.write(tables)?;
            return Err(Error::Refused {
                url: url.shown(),
                reason: "cut short before the runs row (XTRACE_TEST_PUSH_CUT)".into(),
            });
        }
        store.write(tables)?;
        Pushed::Stored { id: id.clone() }
    };
    note_stored(dir, url, &id)?;
    Ok(pushed)
}

/// Adds `URL RUN-ID` to the capture's stored.txt, unless it is there: where the run went.
fn note_stored(dir: &Path, url: &Url, id: &str) -> Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let path = dir.join("stored.txt");
    let line = format!("{} {id}\n", url.shown());
    let failed = |e: std::io::Error| Error::Capture {
        path: path.clone(),
        reason: format!("the run was stored, but noting where failed: {e}"),
    };
    let known = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(failed(e)),
    };
    if known.lines().any(|l| format!("{l}\n") == line) {
        return Ok(());
    }
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(failed)
}

/// 128 random bits as hex: the rows of one push.
fn attempt_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        // Unique enough without the kernel's randomness: the time and the pid.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        bytes = (now ^ (u128::from(std::process::id()) << 64)).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A `LABEL=VALUE` run selector.
pub fn selector(text: &str) -> Result<(String, String)> {
    match text.split_once('=') {
        Some((label, value)) if !label.is_empty() && !value.is_empty() => {
            Ok((label.to_string(), value.to_string()))
        }
        _ => Err(Error::BadSelector {
            text: text.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            Url::parse("sqlite:/tmp/r.db").unwrap(),
            Url::Sqlite("/tmp/r.db".into())
        );
        assert_eq!(Url::parse("sqlite://r.db").unwrap(), Url::Sqlite("r.db".into()));
        assert_eq!(
            Url::parse("clickhouse://127.0.0.1:8123/xt").unwrap(),
            Url::ClickHouse {
                address: "127.0.0.1:8123".into(),
                database: "xt".into()
            }
        );
        for bad in [
            "sqlite:",
            "clickhouse://h/db",
            "clickhouse://h:8123",
            "clickhouse://u:p@h:8123/db",
            "clickhouse://h:8123/d-b",
        ] {
            assert!(matches!(Url::parse(bad), Err(Error::BadUrl { .. })), "{bad}");
        }
        assert!(matches!(
            Url::parse("postgres://h/db"),
            Err(Error::UnknownScheme { .. })
        ));
    }

    #[test]
    fn selectors() {
        assert_eq!(selector("commit=abc").unwrap(), ("commit".into(), "abc".into()));
        for bad in ["commit", "=abc", "commit="] {
            assert!(matches!(selector(bad), Err(Error::BadSelector { .. })), "{bad}");
        }
        assert_eq!(attempt_id().len(), 32);
        assert_ne!(attempt_id(), attempt_id());
    }
}
