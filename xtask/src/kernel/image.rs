//! The guest kernel: a bzImage given by path (checked before anything is built) or Debian 12's
//! stock kernel found in /boot, its release, and the modules the guest loads from its initramfs
//! (virtio-pci and 9p over virtio, resolved with their dependencies from modules.dep).
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};

use crate::util::BadInput;

/// The modules the guest needs before it can mount the host's root: virtio over PCI and 9p.
const ROOT_MODULES: &[&str] = &["virtio_pci", "9pnet_virtio", "9p"];

/// Debian 12's kernel series, the one CI boots.
pub const DEBIAN_SERIES: &str = "6.1.";

#[derive(Debug)]
pub struct GuestKernel {
    pub path: PathBuf,
    /// `uname -r` of the kernel, from its bzImage header.
    pub release: String,
    /// `/lib/modules/<release>`.
    pub modules: PathBuf,
}

impl GuestKernel {
    /// Checks that `path` is an x86 bzImage whose modules are installed here; bad input otherwise.
    pub fn open(path: &Path) -> Result<GuestKernel> {
        let bytes = std::fs::read(path).map_err(|e| {
            BadInput(format!(
                "--kernel {}: {e}; give a kernel image such as /boot/vmlinuz-{}",
                path.display(),
                "6.1.0-N-amd64"
            ))
        })?;
        let release = release_of(&bytes).ok_or_else(|| {
            BadInput(format!(
                "--kernel {}: not a Linux kernel image (no bzImage header); give a file such as \
                 /boot/vmlinuz-6.1.0-N-amd64",
                path.display()
            ))
        })?;
        let modules = Path::new("/lib/modules").join(&release);
        if !modules.join("modules.dep").is_file() {
            return Err(BadInput(format!(
                "kernel {release} has no modules in {}: install its package (for Debian's, \
                 `apt-get install linux-image-{release}`)",
                modules.display()
            ))
            .into());
        }
        Ok(GuestKernel {
            path: path.to_path_buf(),
            release,
            modules,
        })
    }

    /// The paths of the modules the initramfs loads, dependencies first.
    pub fn root_modules(&self) -> Result<Vec<PathBuf>> {
        let dep_file = self.modules.join("modules.dep");
        let text =
            std::fs::read_to_string(&dep_file).with_context(|| format!("reading {}", dep_file.display()))?;
        let deps = parse_modules_dep(&text);
        let mut order = Vec::new();
        for name in ROOT_MODULES {
            let path = deps
                .keys()
                .find(|path| module_name(path) == *name)
                .with_context(|| format!("{} lists no module {name}", dep_file.display()))?;
            add_with_deps(path, &deps, &mut order);
        }
        Ok(order.into_iter().map(|path| self.modules.join(path)).collect())
    }
}

/// Debian 12's kernel in /boot (`vmlinuz-6.1.*`), the newest if there are several.
pub fn debian_kernel() -> Result<GuestKernel> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/boot")
        .map(|dir| dir.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    found.retain(|path| {
        path.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&format!("vmlinuz-{DEBIAN_SERIES}")))
    });
    // 6.1.0-9 before 6.1.0-10: compare the numbers, not the text.
    found.sort_by_key(|path| {
        let name = path.to_string_lossy();
        name.split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse::<u64>().ok())
            .collect::<Vec<_>>()
    });
    let Some(path) = found.pop() else {
        return Err(BadInput(
            "no Debian 12 kernel (/boot/vmlinuz-6.1.*) for the kernel matrix: `cargo xtask setup` \
             installs it (Debian package linux-image-amd64)"
                .into(),
        )
        .into());
    };
    GuestKernel::open(&path)
}

/// The release string of an x86 bzImage: the boot protocol's `HdrS` header at 0x202 points (at
/// 0x20e, relative to 0x200) to a NUL-terminated version string, `6.1.0-56-amd64 (...) #1 ...`.
fn release_of(image: &[u8]) -> Option<String> {
    if image.get(0x202..0x206)? != b"HdrS" || image.get(0x1fe..0x200)? != [0x55, 0xaa] {
        return None;
    }
    let offset = u16::from_le_bytes(image.get(0x20e..0x210)?.try_into().ok()?);
    let start = usize::from(offset) + 0x200;
    let text = image.get(start..)?;
    let end = text.iter().position(|&b| b == 0)?;
    let version = std::str::from_utf8(&text[..end]).ok()?;
    let release = version.split_whitespace().next()?;
    (!release.is_empty()).then(|| release.to_owned())
}

/// modules.dep: `kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko ...` per line.
fn parse_modules_dep(text: &str) -> BTreeMap<String, Vec<String>> {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(module, deps)| {
            let deps = deps.split_whitespace().map(str::to_owned).collect();
            (module.trim().to_owned(), deps)
        })
        .collect()
}

/// `9pnet_virtio` of `kernel/net/9p/9pnet_virtio.ko` (or `.ko.xz`).
fn module_name(path: &str) -> &str {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.split(".ko").next().unwrap_or(file)
}

fn add_with_deps(path: &str, deps: &BTreeMap<String, Vec<String>>, order: &mut Vec<String>) {
    if order.iter().any(|p| p == path) {
        return;
    }
    for dep in deps.get(path).into_iter().flatten() {
        add_with_deps(dep, deps, order);
    }
    order.push(path.to_owned());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bzimage_header_names_its_release() {
        let mut image = vec![0u8; 0x400];
        image[0x1fe..0x200].copy_from_slice(&[0x55, 0xaa]);
        image[0x202..0x206].copy_from_slice(b"HdrS");
        image[0x20e..0x210].copy_from_slice(&0x100u16.to_le_bytes());
        let version = b"6.1.0-56-amd64 (debian) #1\0";
        image[0x300..0x300 + version.len()].copy_from_slice(version);
        assert_eq!(release_of(&image).as_deref(), Some("6.1.0-56-amd64"));
        image[0x202] = b'X';
        assert_eq!(release_of(&image), None);
        assert_eq!(release_of(b"#!/bin/sh\n"), None);
    }

    #[test]
    fn modules_come_after_their_dependencies() {
        let deps = parse_modules_dep(
            "kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/netfs/netfs.ko\n\
             kernel/net/9p/9pnet.ko:\nkernel/fs/netfs/netfs.ko:\n",
        );
        let mut order = Vec::new();
        add_with_deps("kernel/fs/9p/9p.ko", &deps, &mut order);
        assert_eq!(
            order,
            [
                "kernel/net/9p/9pnet.ko",
                "kernel/fs/netfs/netfs.ko",
                "kernel/fs/9p/9p.ko"
            ]
        );
        assert_eq!(module_name("kernel/net/9p/9pnet_virtio.ko.xz"), "9pnet_virtio");
    }
}
