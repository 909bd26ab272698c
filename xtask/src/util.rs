//! Shared helpers for xtask: running child processes with one-line errors, and locating the
//! workspace (root and target directory, via `cargo metadata`) and cargo's own bin directory.
use std::{
    env,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

/// An error in what the user gave (a path, a name): `cargo xtask` exits 2 on it, 1 on others.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Sets the execute bits of `path` (rwxr-xr-x).
pub fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))
}

/// The cargo that runs us (`$CARGO`), so nested builds use the same toolchain.
pub fn cargo() -> Command {
    Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// `cargo` of another installed toolchain (`nightly`), through rustup: the cargo that runs us is
/// the toolchain's own binary, which takes no `+toolchain`.
pub fn cargo_of(toolchain: &str) -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", toolchain, "cargo"]);
    cmd
}

/// Shows a command the way a person would type it.
pub fn display(cmd: &Command) -> String {
    let program = cmd.get_program();
    let is_cargo = env::var_os("CARGO").is_some_and(|cargo| cargo == program);
    let mut text = if is_cargo {
        "cargo".into()
    } else {
        program.to_string_lossy().into_owned()
    };
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Runs `cmd` with inherited stdio; on failure names `step` and the command line.
pub fn run(step: &str, cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("{step}: could not start `{}`", display(cmd)))?;
    if !status.success() {
        bail!("{step} failed: `{}` ({status})", display(cmd));
    }
    Ok(())
}

/// Runs `cmd` quietly and returns its stdout when it starts and succeeds, `None` otherwise.
pub fn stdout_of(cmd: &mut Command) -> Option<String> {
    let out = cmd.stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether we run as root (effective uid 0).
pub fn is_root() -> bool {
    stdout_of(Command::new("id").arg("-u")).is_some_and(|uid| uid.trim() == "0")
}

/// `$CARGO_HOME/bin`, by default `~/.cargo/bin`: where `cargo install` puts binaries.
pub fn cargo_bin_dir() -> Option<PathBuf> {
    let home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")))?;
    Some(home.join("bin"))
}

/// Puts `dir` first on PATH for every child process started after this call.
pub fn prepend_to_path(dir: &Path) -> Result<()> {
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(env::split_paths(&env::var_os("PATH").unwrap_or_default()));
    let path = env::join_paths(dirs).context("a PATH entry contains ':'")?;
    env::set_var("PATH", path);
    Ok(())
}

/// The workspace root and its target directory, as cargo sees them.
pub struct Workspace {
    pub root: PathBuf,
    pub target: PathBuf,
}

impl Workspace {
    pub fn locate() -> Result<Self> {
        let mut cmd = cargo();
        cmd.args(["metadata", "--format-version", "1", "--no-deps"]);
        let out = cmd
            .stderr(Stdio::inherit())
            .output()
            .context("could not run `cargo metadata`")?;
        if !out.status.success() {
            bail!("`{}` failed ({})", display(&cmd), out.status);
        }
        let meta: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("`cargo metadata` printed invalid JSON")?;
        let field = |name: &str| -> Result<PathBuf> {
            meta[name]
                .as_str()
                .map(PathBuf::from)
                .with_context(|| format!("`cargo metadata` output lacks {name}"))
        };
        Ok(Self {
            root: field("workspace_root")?,
            target: field("target_directory")?,
        })
    }

    /// `cargo` with the workspace root as working directory.
    pub fn cargo(&self) -> Command {
        let mut cmd = cargo();
        cmd.current_dir(&self.root);
        cmd
    }

    /// Path of the xtrace binary for a profile directory name ("debug" or "release").
    pub fn xtrace_bin(&self, profile_dir: &str) -> PathBuf {
        self.target.join(profile_dir).join("xtrace")
    }
}
