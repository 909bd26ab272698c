//! `cargo xtask man`: regenerates docs/reference/{cli.md,man/,completions/} from the clap
//! definitions, through `xtrace generate` (the test `checked_in_reference_matches_the_code` fails
//! until this has been run after a change to a flag, a subcommand or their doc comments).
use anyhow::{Context as _, Result};

use crate::{
    build::build_xtrace,
    setup,
    util::{self, Workspace},
};

pub fn run() -> Result<()> {
    setup::run(setup::Verbosity::ChangesOnly)?;
    let ws = Workspace::locate()?;
    let bin = build_xtrace(&ws, false)?;
    let reference = ws.root.join("docs/reference");
    // Pages of commands that are gone must not linger: the generated folders are written anew.
    for generated in ["man", "completions"] {
        let dir = reference.join(generated);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
    }
    let mut generate = std::process::Command::new(&bin);
    generate.arg("generate").arg("-o").arg(&reference);
    util::run("xtrace generate", &mut generate)?;
    Ok(())
}
