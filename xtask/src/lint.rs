//! `cargo xtask lint`: the checks `.ci/run` makes before the tests. rustfmt; clippy on every
//! target with warnings denied (the kernel crate too, with nightly for its BPF target), functions
//! over 100 lines included (clippy.toml); a check of xtrace for the release's musl target; and no
//! two top-level modules of xtrace/src that import each other (see [`cycles`]).
mod cycles;

use anyhow::{bail, Result};

use crate::{
    setup,
    util::{self, Workspace},
};

pub fn run() -> Result<()> {
    setup::run(setup::Verbosity::ChangesOnly)?;
    let ws = Workspace::locate()?;

    let mut fmt = ws.cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    util::run("rustfmt check (fix with `cargo fmt --all`)", &mut fmt)?;

    let mut clippy = ws.cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--exclude",
        "xtrace-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    util::run("clippy", &mut clippy)?;

    // The kernel crate builds only for the BPF target, with nightly and core built from source,
    // as aya-build builds it; in a target directory of its own, so it never waits on the host's.
    let mut kernel = util::cargo_of("nightly");
    kernel
        .current_dir(ws.root.join("xtrace-ebpf"))
        .env("CARGO_TARGET_DIR", ws.target.join("lint-ebpf"))
        .args([
            "clippy",
            "--release",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--",
            "-D",
            "warnings",
        ]);
    util::run("clippy of the kernel programs (xtrace-ebpf)", &mut kernel)?;

    // The release's static xtrace (`cargo xtask dist`) is built for musl, where the libc crate
    // lacks some glibc-only items and C sources compile with musl-gcc: checked here, so that a
    // change that breaks it fails CI rather than the next release.
    let mut musl = ws.cargo();
    musl.args([
        "check",
        "-p",
        "xtrace",
        "--release",
        "--target",
        setup::MUSL_TARGET,
    ])
    .env("CC_x86_64_unknown_linux_musl", crate::dist::MUSL_GCC);
    util::run("check of the release's static build (musl)", &mut musl)?;

    let pairs = cycles::mutual_imports(&ws.root.join("xtrace/src"))?;
    if !pairs.is_empty() {
        let lines: Vec<String> = pairs.iter().map(ToString::to_string).collect();
        bail!(
            "modules of xtrace/src import each other: {}; move what both need into the lower one \
             (docs/internals/architecture.md has the layers)",
            lines.join("; ")
        );
    }
    println!(
        "xtask lint: rustfmt, clippy (host and kernel crates), the musl build and the module graph pass"
    );
    Ok(())
}
