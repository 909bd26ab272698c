//! `cargo xtask test --kernel PATH` and `bench --kernel PATH` with a kernel that cannot be booted,
//! or no qemu: one line on stderr that names the path (or the package) and what to do, exit code
//! 2, and nothing built or installed first (the checks come before `setup`, so these run in well
//! under a second).
use std::{path::Path, process::Command};

/// Runs `xtask test --kernel PATH` and returns its exit code and stderr.
fn test_with_kernel(path: &Path) -> (Option<i32>, String) {
    xtask_with_kernel(&["test"], path)
}

/// Runs `xtask ARGS --kernel PATH` and returns its exit code and stderr (its stdout is empty).
fn xtask_with_kernel(args: &[&str], path: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .arg("--kernel")
        .arg(path)
        .output()
        .expect("running xtask");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A bzImage's first 1 KiB: the boot sector's signature, the `HdrS` setup header and a version
/// string naming `release`.
fn bzimage_header(release: &str) -> Vec<u8> {
    let mut image = vec![0u8; 0x400];
    image[0x1fe..0x200].copy_from_slice(&[0x55, 0xaa]);
    image[0x202..0x206].copy_from_slice(b"HdrS");
    image[0x20e..0x210].copy_from_slice(&0x100u16.to_le_bytes());
    let version = format!("{release} (xtask test) #1\0");
    image[0x300..0x300 + version.len()].copy_from_slice(version.as_bytes());
    image
}

/// A directory of this test's own, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("xtask-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_missing_kernel_is_named_with_an_example() {
    let dir = Scratch::new("no-such-vmlinuz");
    let path = dir.0.join("no-such-vmlinuz");
    let (code, stderr) = test_with_kernel(&path);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "xtask: error: --kernel {}: No such file or directory (os error 2); give a kernel \
             image such as /boot/vmlinuz-6.1.0-N-amd64\n",
            path.display()
        )
    );
}

#[test]
fn a_file_that_is_not_a_kernel_is_refused() {
    let dir = Scratch::new("not-a-kernel");
    let path = dir.0.join("not-a-kernel");
    std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
    let (code, stderr) = test_with_kernel(&path);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "xtask: error: --kernel {}: not a Linux kernel image (no bzImage header); give a \
             file such as /boot/vmlinuz-6.1.0-N-amd64\n",
            path.display()
        )
    );
}

#[test]
fn a_kernel_without_its_modules_names_the_package() {
    let release = "0.0.1-xtask-none";
    assert!(!Path::new("/lib/modules").join(release).exists());
    let dir = Scratch::new("vmlinuz-no-modules");
    let path = dir.0.join("vmlinuz-no-modules");
    std::fs::write(&path, bzimage_header(release)).unwrap();
    let (code, stderr) = test_with_kernel(&path);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "xtask: error: kernel {release} has no modules in /lib/modules/{release}: install \
             its package (for Debian's, `apt-get install linux-image-{release}`)\n"
        )
    );
}

#[test]
fn a_missing_qemu_names_the_package_to_install() {
    // Debian 12's kernel, which `cargo xtask setup` installs, with a PATH that has no qemu.
    let mut kernels: Vec<_> = std::fs::read_dir("/boot")
        .expect("reading /boot")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().starts_with("/boot/vmlinuz-6.1."))
        .collect();
    kernels.sort();
    let kernel = kernels
        .pop()
        .expect("no /boot/vmlinuz-6.1.*: run `cargo xtask setup`");
    let empty = Scratch::new("empty-path");
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["test", "--kernel"])
        .arg(&kernel)
        .env("PATH", &empty.0)
        .output()
        .expect("running xtask");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr,
        "xtask: error: qemu-system-x86_64 not found: install Debian's qemu-system-x86 \
         (`cargo xtask setup` does, as root)\n"
    );
}

#[test]
fn bench_in_a_kernel_checks_the_kernel_and_its_parts_first() {
    let dir = Scratch::new("bench-no-such-vmlinuz");
    let path = dir.0.join("vmlinuz");
    let (code, stderr) = xtask_with_kernel(&["bench"], &path);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "xtask: error: --kernel {}: No such file or directory (os error 2); give a kernel \
             image such as /boot/vmlinuz-6.1.0-N-amd64\n",
            path.display()
        )
    );
    let (code, stderr) = xtask_with_kernel(&["bench", "--only", "per-hit"], &path);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        "xtask: error: --kernel measures the attach rows only: leave out --only, or give --only \
         attach\n"
    );
}
