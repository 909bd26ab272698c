//! Builds the kernel programs (xtrace-ebpf) with the nightly toolchain and bpf-linker; the object is
//! embedded in the binary by `xtrace::bpf_object`. Also names the commit the binary is built from,
//! for `xtrace --version` (XTRACE_COMMIT).
use std::{path::Path, process::Command};

use anyhow::{anyhow, Context as _};
use aya_build::{build_ebpf, Package, Toolchain};

fn main() -> anyhow::Result<()> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or_else(|| anyhow!("xtrace has no parent directory"))?;
    commit(workspace);
    let root = workspace.join("xtrace-ebpf");
    let root = root.to_str().context("non-UTF-8 path to xtrace-ebpf")?;
    build_ebpf(
        [Package {
            name: "xtrace-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        Toolchain::Nightly,
    )
    .context("building the kernel programs needs `cargo xtask setup` (nightly, rust-src, bpf-linker 0.10.0)")
}

/// Sets XTRACE_COMMIT to the short hash of the checked-out commit, or `unknown` outside a git
/// checkout (a source tarball). Set again when HEAD moves (a commit, a checkout).
fn commit(workspace: &Path) {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(workspace)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=XTRACE_COMMIT={commit}");
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        for file in ["HEAD", "packed-refs"] {
            println!("cargo:rerun-if-changed={dir}/{file}");
        }
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head}");
        }
    }
}
