//! The release's Debian package, `xtrace_VERSION_amd64.deb`, laid out here and packed with
//! `dpkg-deb` (Debian's own tool; cargo-deb would build the binaries itself, for one target,
//! while the release's two come from two toolchains). The binary and the tool library live
//! together in /usr/lib/xtrace, where xtrace finds the library beside its own resolved path, and
//! /usr/bin/xtrace links to the binary. No dependencies: the binary is static and the library
//! needs only glibc 2.17.
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use super::copy;
use crate::util::{self, Workspace};

/// Where each part of the tarball's layout goes in the package: (from, to, gzip it).
const FILES: &[(&str, &str, bool)] = &[
    ("xtrace", "usr/lib/xtrace/xtrace", false),
    ("libxtrace_tool.so", "usr/lib/xtrace/libxtrace_tool.so", false),
    (
        "completions/xtrace.bash",
        "usr/share/bash-completion/completions/xtrace",
        false,
    ),
    (
        "completions/_xtrace",
        "usr/share/zsh/vendor-completions/_xtrace",
        false,
    ),
    (
        "completions/xtrace.fish",
        "usr/share/fish/vendor_completions.d/xtrace.fish",
        false,
    ),
    ("README.md", "usr/share/doc/xtrace/README.md", false),
    ("CHANGELOG.md", "usr/share/doc/xtrace/changelog.gz", true),
];

/// Lays out the package from the tarball's directory `top` in `root`, packs it into
/// `dist/xtrace_VERSION_amd64.deb`, returns its path.
pub fn write(ws: &Workspace, top: &Path, root: &Path, dist: &Path) -> Result<PathBuf> {
    for (from, to, gzip) in FILES {
        place(&top.join(from), &root.join(to), *gzip)?;
    }
    let man = top.join("man/man1");
    for entry in std::fs::read_dir(&man).with_context(|| format!("reading {}", man.display()))? {
        let path = entry?.path();
        let name = path.file_name().context("no file name")?.to_string_lossy();
        place(&path, &root.join(format!("usr/share/man/man1/{name}.gz")), true)?;
    }
    std::fs::create_dir_all(root.join("usr/bin"))?;
    std::os::unix::fs::symlink("../lib/xtrace/xtrace", root.join("usr/bin/xtrace"))
        .context("linking usr/bin/xtrace")?;
    std::fs::write(root.join("usr/share/doc/xtrace/copyright"), copyright(ws)?)?;
    std::fs::create_dir_all(root.join("DEBIAN"))?;
    std::fs::write(root.join("DEBIAN/control"), control(root)?)?;
    stamp(root, super::source_date(ws))?;
    let deb = dist.join(format!("xtrace_{}_amd64.deb", env!("CARGO_PKG_VERSION")));
    let mut cmd = Command::new("dpkg-deb");
    cmd.args(["--root-owner-group", "-Zgzip", "--build"])
        .arg(root)
        .arg(&deb)
        .env("SOURCE_DATE_EPOCH", super::source_date(ws).to_string());
    util::run("writing the .deb", &mut cmd)?;
    Ok(deb)
}

/// Copies `from` to `to`, creating its directory; gzip -9n when `gzip`.
fn place(from: &Path, to: &Path, gzip: bool) -> Result<()> {
    let dir = to.parent().context("no parent directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    if !gzip {
        return copy(from, to);
    }
    let file = std::fs::File::create(to).with_context(|| format!("creating {}", to.display()))?;
    let mut cmd = Command::new("gzip");
    cmd.args(["-9n", "--stdout"]).arg(from).stdout(file);
    util::run("gzip", &mut cmd)
}

/// Every file and directory of `root` dated `epoch`, modes as Debian wants them (0644 files,
/// 0755 directories and executables).
fn stamp(root: &Path, epoch: u64) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut cmd = Command::new("find");
    cmd.arg(root)
        .args(["-not", "-type", "l", "-exec", "touch", "--no-dereference", "-d"])
        .arg(format!("@{epoch}"))
        .args(["{}", "+"]);
    util::run("dating the package's files", &mut cmd)?;
    for dir in ["usr/lib/xtrace/xtrace", "usr/lib/xtrace/libxtrace_tool.so"] {
        std::fs::set_permissions(root.join(dir), std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// DEBIAN/control, with the installed size in KiB.
fn control(root: &Path) -> Result<String> {
    let mut cmd = Command::new("du");
    cmd.args(["-sk", "--apparent-size"]).arg(root.join("usr"));
    let du = util::stdout_of(&mut cmd).context("`du -sk` of the package failed")?;
    let kib = du.split_whitespace().next().unwrap_or("0");
    let mut text = String::new();
    writeln!(text, "Package: xtrace")?;
    writeln!(text, "Version: {}", env!("CARGO_PKG_VERSION"))?;
    writeln!(text, "Architecture: amd64")?;
    writeln!(text, "Maintainer: xtrace developers <xtrace@example.invalid>")?;
    writeln!(text, "Installed-Size: {kib}")?;
    writeln!(text, "Section: devel")?;
    writeln!(text, "Priority: optional")?;
    writeln!(text, "Homepage: https://example.invalid/xtrace")?;
    writeln!(
        text,
        "Description: eBPF tracer and profiler for running processes"
    )?;
    writeln!(
        text,
        " Traces functions, USDT probes, CUDA calls and NVTX/ITT ranges of running\n \
         processes with uprobes, and samples their CPU stacks, on Linux 5.15 or later\n \
         with BTF. Writes Perfetto and Chrome traces, flame graphs and pprof profiles."
    )?;
    Ok(text)
}

/// usr/share/doc/xtrace/copyright in Debian's machine-readable format, with both licences.
fn copyright(ws: &Workspace) -> Result<String> {
    let mit = std::fs::read_to_string(ws.root.join("LICENSE-MIT"))?;
    let indent = |text: &str| {
        text.lines()
            .map(|l| {
                if l.trim().is_empty() {
                    " .".to_string()
                } else {
                    format!(" {l}")
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: xtrace\n\n\
         Files: *\n\
         Copyright: the xtrace developers\n\
         License: MIT or Apache-2.0\n\n\
         License: MIT\n{}\n\n\
         License: Apache-2.0\n \
         On Debian systems the full text of the Apache License 2.0 is in\n \
         /usr/share/common-licenses/Apache-2.0.\n",
        indent(&mit)
    ))
}
