//! Testing the release `dist` wrote: tests/tests/dist.rs on the tarball and the .deb (ignored in
//! a plain test run, which has no release), the range tests with the release's xtrace and tool
//! library, and with `--kernel` the kernel matrix's smoke set with them, inside that kernel.
//! Each unpacks the tarball into a directory that holds nothing else.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use super::{release_name, Release, GLIBC_BASELINE};
use crate::{
    kernel,
    test::test_env,
    util::{self, Workspace},
};

/// The test files that load the tool library into real processes (NVTX3, ITT and xtrace's own
/// API), run again with the release's xtrace, so with the library built against glibc 2.17.
const TOOL_LIBRARY_TESTS: &[&str] = &["ranges", "nvtx_itt"];

/// tests/tests/dist.rs, then [`TOOL_LIBRARY_TESTS`], with the unpacked xtrace as the tests'
/// XTRACE_BIN (the fixtures that link the tool library link the release's).
pub fn test_release(ws: &Workspace, release: &Release) -> Result<()> {
    let xtrace = unpack(ws, release, "host")?;
    let mut dist = ws.cargo();
    dist.args(["test", "-p", "xtrace-tests", "--test", "dist", "--"])
        .args(["--ignored", "--test-threads=1"])
        .env("XTRACE_DIST", &release.tarball)
        .env("XTRACE_DEB", &release.deb)
        .env("XTRACE_DIST_GLIBC", GLIBC_BASELINE)
        .env("XTRACE_BIN", &xtrace)
        .envs(test_env());
    util::run("tests of the release (tests/tests/dist.rs)", &mut dist)?;
    let mut ranges = ws.cargo();
    ranges.args(["test", "-p", "xtrace-tests"]);
    for file in TOOL_LIBRARY_TESTS {
        ranges.args(["--test", file]);
    }
    ranges
        .args(["--", "--test-threads=1"])
        .env("XTRACE_BIN", &xtrace)
        .envs(test_env());
    util::run("range tests with the release's xtrace", &mut ranges)
}

/// The kernel matrix's smoke set with the unpacked release inside `guest`, but the tests that
/// need a debug build's hooks.
pub fn smoke_in_kernel(ws: &Workspace, release: &Release, guest: &kernel::GuestKernel) -> Result<()> {
    let xtrace = unpack(ws, release, "kernel")?;
    kernel::run_release(ws, &xtrace, guest, &test_env())
}

/// Unpacks the tarball into `target/dist/unpacked-WHAT`, emptied first (under the target
/// directory, which the kernel matrix's guest sees at the same path); returns its xtrace.
fn unpack(ws: &Workspace, release: &Release, what: &str) -> Result<PathBuf> {
    let dir = ws.target.join("dist").join(format!("unpacked-{what}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut tar = Command::new("tar");
    tar.arg("--extract")
        .arg("--file")
        .arg(&release.tarball)
        .arg("--directory")
        .arg(&dir);
    util::run("unpacking the tarball", &mut tar)?;
    Ok(xtrace_in(&dir))
}

/// The xtrace of a tarball unpacked into `dir`.
fn xtrace_in(dir: &Path) -> PathBuf {
    dir.join(release_name()).join("xtrace")
}
