//! `cargo xtask demo`: builds xtrace (release) and the bundled fake training loop
//! (xtask/demo/workload.c), traces four of its functions for 3 seconds and says where the
//! trace and summaries are. Owns the workload's lifetime: it is killed on every exit path.
use std::{
    fs,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, ChildStdout, Command, Stdio},
};

use anyhow::{bail, Context, Result};

use crate::{
    build::build_xtrace,
    setup,
    util::{self, Workspace},
};

const SYMBOLS: &[&str] = &["load_batch", "forward", "backward", "optimizer_step"];
const OUTPUTS: &[&str] = &["trace.perfetto-trace", "summary.json", "summary.txt"];

pub fn run() -> Result<()> {
    setup::run(setup::Verbosity::ChangesOnly)?;
    let ws = Workspace::locate()?;
    let xtrace = build_xtrace(&ws, true)?;

    let demo_dir = ws.target.join("demo");
    fs::create_dir_all(&demo_dir).with_context(|| format!("could not create {}", demo_dir.display()))?;
    let workload = demo_dir.join("workload");
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("demo")
        .join("workload.c");
    let mut cc = Command::new("cc");
    cc.args([
        "-O1",
        "-g",
        "-fno-omit-frame-pointer",
        "-fno-inline",
        "-pthread",
        "-o",
    ]);
    cc.arg(&workload).arg(&source);
    util::run("compile of the demo workload", &mut cc)?;

    let out_dir = demo_dir.join("trace-out");
    if out_dir.exists() {
        fs::remove_dir_all(&out_dir).with_context(|| format!("could not clear {}", out_dir.display()))?;
    }
    let guard = Workload::start(&workload)?;
    let mut trace = Command::new(&xtrace);
    trace.arg("--pid").arg(guard.child.id().to_string());
    for symbol in SYMBOLS {
        trace.args(["-u", symbol]);
    }
    trace.args(["-d", "3", "-o"]).arg(&out_dir);
    // The default trace format, whatever the environment says.
    trace.env_remove("XTRACE_TRACE_FORMAT");
    println!("demo: {}", util::display(&trace));
    util::run("xtrace", &mut trace)?;
    drop(guard);

    println!("\ndemo: outputs in {}", out_dir.display());
    for name in OUTPUTS {
        let path = out_dir.join(name);
        let note = if path.is_file() { "" } else { "  (missing!)" };
        println!("  {}{note}", path.display());
    }
    println!("demo: open trace.perfetto-trace in https://ui.perfetto.dev");
    Ok(())
}

/// The running workload; dropping it kills the process and reaps it.
struct Workload {
    child: Child,
    /// Kept open so the workload never writes into a closed pipe.
    _stdout: BufReader<ChildStdout>,
}

impl Workload {
    /// Starts the workload and waits for its first line (its pid), so it is running `main`.
    fn start(path: &Path) -> Result<Self> {
        let mut child = Command::new(path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("could not start the demo workload {}", path.display()))?;
        let stdout = child.stdout.take().context("workload stdout was not captured")?;
        let mut guard = Self {
            child,
            _stdout: BufReader::new(stdout),
        };
        let mut line = String::new();
        if guard._stdout.read_line(&mut line).unwrap_or(0) == 0 {
            bail!(
                "the demo workload {} exited before printing its pid",
                path.display()
            );
        }
        println!("demo: {}", line.trim_end());
        Ok(guard)
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
