//! Shared helpers for xtrace's root-only integration tests.
//!
//! The tests run the real `xtrace` binary (env `XTRACE_BIN`, else `<target>/debug/xtrace`) against
//! real fixture processes built from the C programs in `tests/fixtures/`, then read the files it
//! writes. This crate owns: the root/BPF gate ([`require_bpf`]), locating the binary and the target
//! directory, building and driving fixtures ([`fixtures`]), running xtrace with safety timeouts
//! ([`run`]), parsing its outputs ([`output`]) and checking that no xtrace BPF program stays loaded
//! ([`bpf`]). Needs a kernel with uprobes and BPF ring buffers (5.8+); every test calls
//! [`require_bpf`] first.

pub mod bpf;
pub mod captures;
pub mod clickhouse;
pub mod fixtures;
pub mod gpu;
pub mod kernel;
pub mod live;
pub mod mpi;
pub mod namespaces;
pub mod output;
pub mod perfetto;
pub mod profile;
pub mod python;
pub mod ranges;
pub mod run;
pub mod seccomp;

use std::{
    env,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

/// Upper bound for every wait on a process or a line, so a broken xtrace fails a test instead of
/// hanging CI.
pub const SAFETY_TIMEOUT: Duration = Duration::from_secs(60);

/// Returns true when the test may use BPF (effective uid 0). Otherwise prints a skip notice and
/// returns false, or panics when `XTRACE_REQUIRE_BPF=1` (CI), where a skip would hide a failure.
/// A test built without root is already ignored (`cfg(xtrace_no_root)`, see build.rs), so this
/// skip is reached only by a build that is stale: made as root, run as another user.
pub fn require_bpf() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        return true;
    }
    if env::var("XTRACE_REQUIRE_BPF").as_deref() == Ok("1") {
        panic!(
            "XTRACE_REQUIRE_BPF=1 but the tests run as uid {euid}: these tests load BPF programs and \
             need root; run them through `sudo cargo xtask test`"
        );
    }
    eprintln!("skipping: xtrace's integration tests need root (euid is {euid})");
    false
}

/// The cargo target directory: `CARGO_TARGET_DIR` if set, else `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir),
        Some(dir) => workspace_dir().join(dir),
        None => workspace_dir().join("target"),
    }
}

fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent directory")
        .to_path_buf()
}

/// The environment variable that sets `record --trace-format`'s default.
pub const TRACE_FORMAT_ENV: &str = "XTRACE_TRACE_FORMAT";

/// Makes every xtrace the tests start write trace.json unless told otherwise: most tests read
/// the trace through [`output::Outputs::read`], which parses trace.json. Tests of the default
/// format remove the variable from their command ([`run::Xtrace::spawn_default_format`]). Set
/// once, before the first xtrace is started (every start names [`xtrace_bin`] first).
fn json_traces_by_default() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if env::var_os(TRACE_FORMAT_ENV).is_none() {
            env::set_var(TRACE_FORMAT_ENV, "json");
        }
    });
}

/// The xtrace binary under test: `XTRACE_BIN`, else `<target>/debug/xtrace`.
pub fn xtrace_bin() -> PathBuf {
    json_traces_by_default();
    let path = match env::var_os("XTRACE_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => target_dir().join("debug").join("xtrace"),
    };
    assert!(
        path.is_file(),
        "xtrace binary not found at {} (build it with `cargo build -p xtrace` or set XTRACE_BIN)",
        path.display()
    );
    path
}

/// A directory under the system temp dir, removed on drop unless the test is panicking (then it is
/// kept and its path printed, to look at what xtrace wrote).
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = env::temp_dir().join(format!("xtrace-tests-{}-{n}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside this directory (not created), e.g. an xtrace `-o` directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("keeping {} for inspection", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Builds a `Vec<OsString>` of command-line arguments from `&str`, `String`, `&Path`, ... values.
#[macro_export]
macro_rules! args {
    ($($arg:expr),* $(,)?) => {
        vec![$(::std::ffi::OsString::from($arg)),*]
    };
}
