//! The bench workload process (`hits`, or the generated many-functions fixture): it waits for one
//! line on stdin, makes its calls, prints `ns_per_call`, `calls` and `elapsed_ns`, and exits. The
//! guard kills and reaps it when dropped, so no run leaves a process behind.
use std::{
    io::{Read, Write},
    path::Path,
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

const POLL: Duration = Duration::from_millis(2);

/// What the workload printed when it finished.
#[derive(Clone, Copy, Debug, Default)]
pub struct WorkloadOut {
    /// Mean wall time per call, per thread.
    pub ns_per_call: f64,
    pub calls: u64,
    pub elapsed_ns: u64,
}

pub struct Workload {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Workload {
    pub fn spawn(bin: &Path, args: &[String]) -> Result<Self> {
        Self::spawn_env(bin, args, &[])
    }

    /// [`Workload::spawn`] with `env` added to its environment.
    pub fn spawn_env(bin: &Path, args: &[String], env: &[(&str, &Path)]) -> Result<Self> {
        let mut child = Command::new(bin)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("could not start {}", bin.display()))?;
        let stdin = child.stdin.take();
        Ok(Self { child, stdin })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lets the workload start calling.
    pub fn go(&mut self) -> Result<()> {
        let mut stdin = self.stdin.take().context("the workload was already started")?;
        stdin
            .write_all(b"go\n")
            .context("could not start the workload (stdin)")?;
        Ok(())
    }

    /// Waits for the workload to exit (at most `timeout`) and parses what it printed.
    pub fn finish(mut self, timeout: Duration) -> Result<WorkloadOut> {
        self.stdin = None;
        let status = wait_until(&mut self.child, timeout)?
            .with_context(|| format!("the workload did not finish within {} s", timeout.as_secs()))?;
        let mut text = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            stdout
                .read_to_string(&mut text)
                .context("could not read the workload's output")?;
        }
        if !status.success() {
            bail!("the workload failed ({status}): {}", text.trim());
        }
        let field = |name: &str| -> Result<f64> {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
                .with_context(|| format!("the workload printed no `{name}`: {}", text.trim()))
        };
        Ok(WorkloadOut {
            ns_per_call: field("ns_per_call")?,
            calls: field("calls")? as u64,
            elapsed_ns: field("elapsed_ns")? as u64,
        })
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `child` until it exits or `timeout` passes (`None`).
pub fn wait_until(child: &mut Child, timeout: Duration) -> Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().context("could not wait for a child process")? {
            return Ok(Some(status));
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        thread::sleep(POLL);
    }
}
