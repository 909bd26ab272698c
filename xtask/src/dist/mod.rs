//! `cargo xtask dist [--kernel PATH]`: the release a production host installs without a toolchain.
//! Builds a static xtrace (musl, the kernel programs embedded by build.rs) and the tool library
//! linked against glibc 2.17's symbol versions (zig through cargo-zigbuild), lays them out with
//! the man pages, the shell completions, the README and the licences, and writes
//! `target/dist/xtrace-VERSION-x86_64-linux.tar.gz` and `target/dist/xtrace_VERSION_amd64.deb`
//! (`deb.rs`). Then it tests them (`check.rs`): tests/tests/dist.rs on the tarball and the .deb,
//! and with `--kernel PATH` the kernel matrix's smoke set with the unpacked xtrace in that kernel.
mod check;
mod deb;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};
use clap::Args;

use crate::{
    kernel, setup,
    util::{self, Workspace},
};

/// The glibc whose symbol versions the tool library may need at most: the oldest that Rust's
/// standard library supports on x86-64 Linux, so the library loads into processes on RHEL 7 and
/// 8, Ubuntu 18.04 and 20.04, Amazon Linux 2, and every newer distribution.
pub const GLIBC_BASELINE: &str = "2.17";

/// The C compiler for the musl target: Debian's wrapper around gcc with musl's headers and libc.
pub const MUSL_GCC: &str = "musl-gcc";

#[derive(Debug, Args)]
pub struct DistArgs {
    /// Also run the kernel matrix's smoke set with the release's xtrace, unpacked into a
    /// directory holding nothing else, inside this kernel under qemu (see `test --kernel`).
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,
}

/// What `dist` wrote.
pub struct Release {
    pub tarball: PathBuf,
    pub deb: PathBuf,
}

pub fn run(args: &DistArgs) -> Result<()> {
    // Bad input is named before anything is installed or built.
    let guest = match &args.kernel {
        Some(path) => {
            let guest = kernel::GuestKernel::open(path)?;
            kernel::require_qemu()?;
            Some(guest)
        }
        None => None,
    };
    setup::run(setup::Verbosity::ChangesOnly)?;
    let ws = Workspace::locate()?;
    let release = build(&ws)?;
    check::test_release(&ws, &release)?;
    if let Some(guest) = guest {
        check::smoke_in_kernel(&ws, &release, &guest)?;
    }
    for path in [&release.tarball, &release.deb] {
        let size = std::fs::metadata(path)?.len();
        println!("{} ({:.1} MiB)", path.display(), size as f64 / 1048576.0);
    }
    Ok(())
}

/// The release's name: `xtrace-VERSION-x86_64-linux`, the tarball's top directory.
pub fn release_name() -> String {
    format!("xtrace-{}-x86_64-linux", env!("CARGO_PKG_VERSION"))
}

/// Builds both binaries, lays out the release and writes the tarball and the .deb.
fn build(ws: &Workspace) -> Result<Release> {
    let xtrace = build_static_xtrace(ws)?;
    let tool = build_tool_library(ws)?;
    let dist = ws.target.join("dist");
    let stage = dist.join("stage");
    if stage.exists() {
        std::fs::remove_dir_all(&stage).with_context(|| format!("removing {}", stage.display()))?;
    }
    let top = stage.join(release_name());
    lay_out(ws, &top, &xtrace, &tool)?;
    let tarball = dist.join(format!("{}.tar.gz", release_name()));
    write_tarball(ws, &stage, &tarball)?;
    let deb = deb::write(ws, &top, &stage.join("deb"), &dist)?;
    Ok(Release { tarball, deb })
}

/// `cargo build --release --target x86_64-unknown-linux-musl -p xtrace`: static, with the kernel
/// programs embedded (build.rs builds them with nightly whatever the target), and the store's
/// SQLite (bundled, C) compiled by Debian's musl-gcc (musl-tools, installed by `setup`).
fn build_static_xtrace(ws: &Workspace) -> Result<PathBuf> {
    if util::stdout_of(Command::new(MUSL_GCC).arg("--version")).is_none() {
        bail!("{MUSL_GCC} not found: install Debian's musl-tools (`cargo xtask setup` does, as root)");
    }
    let mut cmd = ws.cargo();
    cmd.args([
        "build",
        "--release",
        "--target",
        setup::MUSL_TARGET,
        "-p",
        "xtrace",
    ])
    .env("CC_x86_64_unknown_linux_musl", MUSL_GCC);
    util::run("build of the static xtrace", &mut cmd)?;
    Ok(ws.target.join(setup::MUSL_TARGET).join("release/xtrace"))
}

/// `cargo zigbuild --release --target x86_64-unknown-linux-gnu.2.17 -p xtrace-tool`, in a target
/// directory of its own: the tool library's build script links differently under zig (see
/// xtrace/tool/build.rs), and its output must not be taken for a plain build's.
fn build_tool_library(ws: &Workspace) -> Result<PathBuf> {
    let bin = setup::dist_venv(ws).join("bin");
    let target_dir = ws.target.join("zig");
    let mut cmd = Command::new(bin.join("cargo-zigbuild"));
    cmd.current_dir(&ws.root)
        .args(["zigbuild", "--release", "-p", "xtrace-tool", "--target"])
        .arg(format!("x86_64-unknown-linux-gnu.{GLIBC_BASELINE}"))
        .arg("--target-dir")
        .arg(&target_dir)
        // cargo-zigbuild finds zig as `python3 -m ziglang`, with the venv's python3 first.
        .env("PATH", path_with(&bin)?);
    util::run("build of the tool library with zig", &mut cmd)?;
    Ok(target_dir.join("x86_64-unknown-linux-gnu/release/libxtrace_tool.so"))
}

/// PATH with `dir` in front.
fn path_with(dir: &Path) -> Result<std::ffi::OsString> {
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).context("a PATH entry contains ':'")
}

/// The tarball's directory: the binary with the tool library beside it (where xtrace looks for
/// it), man pages, completions, README, changelog and licences.
fn lay_out(ws: &Workspace, top: &Path, xtrace: &Path, tool: &Path) -> Result<()> {
    let reference = ws.root.join("docs/reference");
    std::fs::create_dir_all(top.join("man/man1"))?;
    std::fs::create_dir_all(top.join("completions"))?;
    copy(xtrace, &top.join("xtrace"))?;
    copy(tool, &top.join("libxtrace_tool.so"))?;
    for (from, to) in [("man", "man/man1"), ("completions", "completions")] {
        let dir = reference.join(from);
        let entries = std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        for entry in entries {
            let path = entry?.path();
            copy(
                &path,
                &top.join(to).join(path.file_name().context("no file name")?),
            )?;
        }
    }
    for doc in ["README.md", "CHANGELOG.md", "LICENSE-MIT", "LICENSE-APACHE"] {
        copy(&ws.root.join(doc), &top.join(doc))?;
    }
    Ok(())
}

/// Copies `from` to `to` (permissions included).
fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to)
        .map(drop)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))
}

/// `tar` of `stage/NAME` into `out`, owned by root, in name order, dated by the commit.
fn write_tarball(ws: &Workspace, stage: &Path, out: &Path) -> Result<()> {
    let mut cmd = Command::new("tar");
    cmd.arg("--create")
        .arg("--file")
        .arg(out)
        .args(["--use-compress-program", "gzip -9n", "--sort=name"])
        .args(["--owner=0", "--group=0", "--numeric-owner"])
        .arg(format!("--mtime=@{}", source_date(ws)))
        .arg("--directory")
        .arg(stage)
        .arg(release_name());
    util::run("writing the tarball", &mut cmd)
}

/// The files' date: `$SOURCE_DATE_EPOCH`, else the commit's, else 0; the same tree packs the same.
pub fn source_date(ws: &Workspace) -> u64 {
    let commit = || {
        let mut git = Command::new("git");
        git.current_dir(&ws.root).args(["log", "-1", "--format=%ct"]);
        util::stdout_of(&mut git)?.trim().parse().ok()
    };
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .or_else(commit)
        .unwrap_or(0)
}
