//! Builds the kernel programs (xtrace-ebpf) with the nightly toolchain and bpf-linker; the object is
//! embedded in the binary by `xtrace::bpf_object`.
use anyhow::{anyhow, Context as _};
use aya_build::{build_ebpf, Package, Toolchain};

fn main() -> anyhow::Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or_else(|| anyhow!("xtrace has no parent directory"))?
        .join("xtrace-ebpf");
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
