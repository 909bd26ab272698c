//! `cargo xtask test [--kernel PATH] [-- ARGS]`: checks the setup, builds xtrace (debug), runs the
//! unit tests (no root), then the root integration tests in xtrace-tests on one thread with
//! XTRACE_BIN set. Under CI (CI=true or CI=1) it also sets XTRACE_REQUIRE_BPF=1, so a missing
//! capability fails, and then runs the kernel matrix's smoke set inside Debian 12's kernel.
//! With `--kernel PATH` it runs only that smoke set, inside the kernel at PATH (see kernel/).
use std::{
    collections::BTreeSet,
    env,
    ffi::OsString,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::{
    build::build_xtrace,
    kernel, setup,
    util::{self, Workspace},
};

#[derive(Debug, Args)]
pub struct TestArgs {
    /// Run the kernel matrix's smoke set inside this kernel (a bzImage such as
    /// /boot/vmlinuz-6.1.0-N-amd64, its modules installed) under qemu, instead of the host runs.
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,
    /// Passed to the test binaries of both test runs, e.g. a test name filter; with --kernel, a
    /// filter on the smoke set's `file::test` names.
    #[arg(last = true, value_name = "ARGS")]
    pub args: Vec<String>,
}

pub fn run(args: &TestArgs) -> Result<()> {
    if let Some(path) = &args.kernel {
        // Bad input is named before anything is installed or built.
        let guest = kernel::GuestKernel::open(path)?;
        kernel::require_qemu()?;
        setup::run(setup::Verbosity::ChangesOnly)?;
        let ws = Workspace::locate()?;
        let bin = build_xtrace(&ws, false)?;
        return kernel::run(&ws, &bin, &guest, &args.args, &test_env());
    }
    setup::run(setup::Verbosity::ChangesOnly)?;
    let ws = Workspace::locate()?;
    let bin = build_xtrace(&ws, false)?;

    let mut unit = ws.cargo();
    unit.args([
        "test",
        "--workspace",
        "--exclude",
        "xtrace-ebpf",
        "--exclude",
        "xtrace-tests",
    ]);
    if !args.args.is_empty() {
        unit.arg("--").args(&args.args);
    }
    util::run("unit tests", &mut unit)?;

    let mut root = ws.cargo();
    root.args(["test", "-p", "xtrace-tests", "--", "--test-threads=1"])
        .args(&args.args);
    root.env("XTRACE_BIN", &bin).envs(test_env());
    // `cargo test` runs them in the crate's directory, which is part of the source tree.
    let cwd = ws.root.join("tests");
    let before = entries(&cwd)?;
    util::run("integration tests (xtrace-tests)", &mut root)?;
    let left: Vec<String> = entries(&cwd)?
        .difference(&before)
        .map(|name| name.to_string_lossy().into_owned())
        .collect();
    if !left.is_empty() {
        bail!(
            "integration tests left {} in {}: a test wrote into its working directory (an xtrace \
             run without `-o`?); give it a TempDir",
            left.join(", "),
            cwd.display()
        );
    }
    if in_ci() {
        // The same build, in the kernel of Debian 12 hosts (5.15 to 6.8 are in production).
        let guest = kernel::debian_kernel()?;
        kernel::require_qemu()?;
        kernel::run(&ws, &bin, &guest, &[], &test_env())?;
    }
    println!("xtask test: all steps passed");
    Ok(())
}

/// The environment of the integration tests' build and run: under CI a missing capability fails.
pub fn test_env() -> Vec<(&'static str, &'static str)> {
    if in_ci() {
        vec![("XTRACE_REQUIRE_BPF", "1")]
    } else {
        Vec::new()
    }
}

fn in_ci() -> bool {
    env::var("CI").is_ok_and(|ci| ci.eq_ignore_ascii_case("true") || ci == "1")
}

/// The names in directory `dir`.
fn entries(dir: &Path) -> Result<BTreeSet<OsString>> {
    let read = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    read.map(|entry| Ok(entry?.file_name()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("reading {}", dir.display()))
}
