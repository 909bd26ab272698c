//! `cargo xtask build [--release]`: checks the setup, builds the xtrace binary, prints its path.
use anyhow::Result;
use clap::Args;

use crate::{
    setup,
    util::{self, Workspace},
};

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Build with the release profile.
    #[arg(long)]
    pub release: bool,
}

pub fn run(args: &BuildArgs) -> Result<()> {
    setup::run(setup::Verbosity::ChangesOnly)?;
    let ws = Workspace::locate()?;
    let bin = build_xtrace(&ws, args.release)?;
    println!("{}", bin.display());
    Ok(())
}

/// `cargo build -p xtrace -p xtrace-tool [--release]` (the tool library ships next to the binary);
/// returns the path of the binary.
pub fn build_xtrace(ws: &Workspace, release: bool) -> Result<std::path::PathBuf> {
    let mut cmd = ws.cargo();
    cmd.args(["build", "-p", "xtrace", "-p", "xtrace-tool"]);
    if release {
        cmd.arg("--release");
    }
    util::run("build of xtrace", &mut cmd)?;
    Ok(ws.xtrace_bin(if release { "release" } else { "debug" }))
}
