//! `cargo xtask test [-- ARGS]`: checks the setup, builds xtrace (debug), runs the unit tests
//! (no root), then the root integration tests in xtrace-tests on one thread with XTRACE_BIN set.
//! Under CI (CI=true or CI=1) it also sets XTRACE_REQUIRE_BPF=1, so a missing capability fails.
use std::env;

use anyhow::Result;
use clap::Args;

use crate::{
    build::build_xtrace,
    setup,
    util::{self, Workspace},
};

#[derive(Debug, Args)]
pub struct TestArgs {
    /// Passed to the test binaries of both test runs, e.g. a test name filter.
    #[arg(last = true, value_name = "ARGS")]
    pub args: Vec<String>,
}

pub fn run(args: &TestArgs) -> Result<()> {
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
    root.env("XTRACE_BIN", &bin);
    if in_ci() {
        root.env("XTRACE_REQUIRE_BPF", "1");
    }
    util::run("integration tests (xtrace-tests)", &mut root)?;
    println!("xtask test: all steps passed");
    Ok(())
}

fn in_ci() -> bool {
    env::var("CI").is_ok_and(|ci| ci.eq_ignore_ascii_case("true") || ci == "1")
}
