//! Tracer processes of the bench (xtrace, uprobe_floor, bpftrace): reader threads collect their
//! output lines so the bench can wait for an "attached" line; stop them with SIGINT, by closing
//! stdin, or let them exit on their own. The guard kills and reaps the process when dropped.
use std::{
    fs::File,
    io::{BufRead, BufReader, Read},
    path::PathBuf,
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use super::workload::wait_until;

const POLL: Duration = Duration::from_millis(2);

/// Where a tracer's stdout goes: collected as lines, or into a file (bpftrace's printf stream).
pub enum Stdout {
    Lines,
    File(PathBuf),
}

pub struct Tracer {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<String>>>,
    file: Option<PathBuf>,
}

/// How a tracer ended: its status (`None`: killed after the timeout), its lines, the time waited.
pub struct Finished {
    pub status: Option<ExitStatus>,
    pub lines: Vec<String>,
    pub waited: Duration,
}

impl Tracer {
    pub fn spawn(name: &str, mut cmd: Command, stdout: Stdout) -> Result<Self> {
        let (out, file) = match stdout {
            Stdout::Lines => (Stdio::piped(), None),
            Stdout::File(path) => {
                let f =
                    File::create(&path).with_context(|| format!("could not create {}", path.display()))?;
                (Stdio::from(f), Some(path))
            }
        };
        cmd.stdin(Stdio::piped()).stdout(out).stderr(Stdio::piped());
        let mut child = cmd.spawn().with_context(|| format!("could not start {name}"))?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let readers: Vec<Box<dyn Read + Send>> = [
            child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
            child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        .collect();
        for reader in readers {
            let lines = Arc::clone(&lines);
            thread::spawn(move || {
                for line in BufReader::new(reader).lines().map_while(Result::ok) {
                    lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                }
            });
        }
        let stdin = child.stdin.take();
        Ok(Self {
            name: name.to_owned(),
            child,
            stdin,
            lines,
            file,
        })
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until a line of its output (or its stdout file) contains `needle`.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.lines().iter().any(|line| line.contains(needle)) {
                return Ok(());
            }
            if let Some(path) = &self.file {
                let mut head = String::new();
                if let Ok(f) = File::open(path) {
                    let _ = f.take(4096).read_to_string(&mut head);
                }
                if head.contains(needle) {
                    return Ok(());
                }
            }
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited ({status}) before `{needle}`: {}",
                    self.name,
                    tail(&self.lines())
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} printed no `{needle}` within {} s: {}",
                    self.name,
                    timeout.as_secs(),
                    tail(&self.lines())
                );
            }
            thread::sleep(POLL);
        }
    }

    /// Sends SIGINT (bpftrace prints its maps and exits; xtrace detaches and writes its outputs).
    pub fn interrupt(&self) -> Result<()> {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .context("could not run kill")?;
        if !status.success() {
            bail!("kill -INT {pid} ({}) failed", self.name);
        }
        Ok(())
    }

    /// Closes its stdin (uprobe_floor detaches and exits then).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for it to exit; after `timeout` it is killed and `status` is `None`.
    pub fn wait(mut self, timeout: Duration) -> Result<Finished> {
        let start = Instant::now();
        let status = wait_until(&mut self.child, timeout)?;
        let waited = start.elapsed();
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // The reader threads end at EOF, shortly after the exit.
        thread::sleep(Duration::from_millis(20));
        Ok(Finished {
            status,
            lines: self.lines(),
            waited,
        })
    }

    /// `wait`, then an error unless it exited successfully.
    pub fn wait_ok(self, timeout: Duration) -> Result<Finished> {
        let name = self.name.clone();
        let done = self.wait(timeout)?;
        match done.status {
            Some(status) if status.success() => Ok(done),
            Some(status) => bail!("{name} failed ({status}): {}", tail(&done.lines)),
            None => bail!("{name} did not exit within {} s", timeout.as_secs()),
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last few output lines, for error messages.
pub fn tail(lines: &[String]) -> String {
    let start = lines.len().saturating_sub(4);
    lines[start..].join(" | ")
}
