//! A real ClickHouse server for the store tests: Debian's `clickhouse-server` (installed by
//! `cargo xtask setup`), started directly (no init system) on free loopback ports with its data in
//! a temporary directory, and stopped when dropped, on every path, panics included.
use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::{TempDir, SAFETY_TIMEOUT};

/// The server binary.
const SERVER: &str = "/usr/sbin/clickhouse-server";
/// Its packaged configuration, whose ports and paths the command line overrides.
const CONFIG: &str = "/etc/clickhouse-server/config.xml";

pub struct ClickHouse {
    child: Child,
    /// host:port of its HTTP interface.
    pub address: String,
    _dir: TempDir,
}

/// Three distinct ports no one listens on now: all bound at once, so the kernel cannot hand out
/// one twice, then released for the server (another program may still take one meanwhile: the
/// start is then tried again).
fn free_ports() -> [u16; 3] {
    let bind = || TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    let held = [bind(), bind(), bind()];
    held.map(|l| l.local_addr().expect("its address").port())
}

/// Starts tried before a test fails: each with new ports.
const TRIES: usize = 3;

impl ClickHouse {
    /// Starts a server and waits until it answers; None (after saying why) where ClickHouse is
    /// not installed, unless `XTRACE_REQUIRE_BPF=1` (CI), where that fails the test.
    pub fn start() -> Option<ClickHouse> {
        if !std::path::Path::new(SERVER).exists() {
            let why = format!("{SERVER} is not installed: run `cargo xtask setup`");
            assert!(std::env::var("XTRACE_REQUIRE_BPF").as_deref() != Ok("1"), "{why}");
            eprintln!("skipping: {why}");
            return None;
        }
        for attempt in 1..=TRIES {
            if let Some(server) = Self::try_start(attempt == TRIES) {
                return Some(server);
            }
        }
        unreachable!("the last try panics when it fails")
    }

    /// One start on fresh ports; None when the server exited at once (a port taken meanwhile),
    /// unless `last`, where that panics.
    fn try_start(last: bool) -> Option<ClickHouse> {
        let dir = TempDir::new("clickhouse");
        let path = |name: &str| -> PathBuf {
            let p = dir.join(name);
            std::fs::create_dir_all(&p).expect("a server directory");
            p
        };
        let [http, tcp, inter] = free_ports();
        let flag = |name: &str, value: String| format!("--{name}={value}");
        let child = Command::new(SERVER)
            .arg(format!("--config-file={CONFIG}"))
            .arg("--")
            .args([
                flag("http_port", http.to_string()),
                flag("tcp_port", tcp.to_string()),
                flag("interserver_http_port", inter.to_string()),
                flag("listen_host", "127.0.0.1".into()),
                flag("path", format!("{}/", path("data").display())),
                flag("tmp_path", format!("{}/", path("tmp").display())),
                flag("user_files_path", format!("{}/", path("user_files").display())),
                flag(
                    "format_schema_path",
                    format!("{}/", path("format_schemas").display()),
                ),
                flag("logger.log", dir.join("server.log").display().to_string()),
                flag(
                    "logger.errorlog",
                    dir.join("server.err.log").display().to_string(),
                ),
            ])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {SERVER}: {e}"));
        let mut server = ClickHouse {
            child,
            address: format!("127.0.0.1:{http}"),
            _dir: dir,
        };
        let started = Instant::now();
        while server.query("SELECT 1").as_deref() != Some("1\n") {
            if let Ok(Some(status)) = server.child.try_wait() {
                assert!(!last, "clickhouse-server exited at start ({status}); see its log");
                return None;
            }
            assert!(
                started.elapsed() < SAFETY_TIMEOUT,
                "clickhouse-server did not answer within {SAFETY_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(server)
    }

    /// The store URL of database `db` on it.
    pub fn url(&self, db: &str) -> String {
        format!("clickhouse://{}/{db}", self.address)
    }

    /// The answer's body to a statement sent over HTTP, or None when it failed.
    pub fn query(&self, statement: &str) -> Option<String> {
        let mut stream = TcpStream::connect(&self.address).ok()?;
        let request = format!(
            "POST / HTTP/1.0\r\nHost: {}\r\nContent-Length: {}\r\n\r\n{statement}",
            self.address,
            statement.len()
        );
        stream.write_all(request.as_bytes()).ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        let (head, body) = answer.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.0 200").then(|| body.to_string())
    }
}

impl Drop for ClickHouse {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is our own unreaped child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
