//! xtrace's own PID namespace. In a container xtrace may run in a PID namespace of its own: the
//! pids it is given, reads in /proc and gets in the kernel's perf records are then that
//! namespace's, so its kernel programs report pids there too (`bpf_get_ns_current_pid_tgid`), and
//! threads outside the namespace, which it cannot name, are not traced.
use std::os::unix::fs::MetadataExt;

use crate::error::{Error, Result};

/// The inode number of the initial PID namespace (`PROC_PID_INIT_INO`, fixed by the kernel).
const INITIAL: u64 = 0xEFFF_FFFC;

/// A PID namespace as `bpf_get_ns_current_pid_tgid` names it: the device and inode of its nsfs
/// file, the device in the kernel's own encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PidNamespace {
    pub dev: u64,
    pub ino: u64,
}

/// xtrace's PID namespace when it is not the initial one (None in the host's, or on a kernel
/// without PID namespaces). An error when /proc is not its namespace's (a container that kept the
/// host's /proc): the pids on the command line, in /proc and from the kernel would disagree.
pub fn own() -> Result<Option<PidNamespace>> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !proc_shows_own_namespace(&status, std::process::id()) {
        return Err(Error::ProcOfAnotherNamespace);
    }
    let file = match std::fs::metadata("/proc/self/ns/pid") {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reading /proc/self/ns/pid", e)),
    };
    Ok((file.ino() != INITIAL).then(|| PidNamespace {
        dev: kernel_dev(file.dev()),
        ino: file.ino(),
    }))
}

/// Whether /proc is the namespace of process `pid` (its pid as the kernel gave it), from the
/// `status` /proc shows it as `/proc/self`: its `NSpid:` line lists its pids from /proc's
/// namespace down to its own, so exactly `pid`. Without the line (a kernel without PID
/// namespaces) any /proc that shows the process is its own; one that does not show it (empty
/// `status`: /proc/self missing, /proc not mounted) is not.
fn proc_shows_own_namespace(status: &str, pid: u32) -> bool {
    if status.is_empty() {
        return false;
    }
    match status.lines().find_map(|line| line.strip_prefix("NSpid:")) {
        Some(pids) => pids.split_whitespace().eq([pid.to_string().as_str()]),
        None => true,
    }
}

/// The kernel's internal encoding of a device number `stat` gave (major in the bits above 20).
fn kernel_dev(dev: u64) -> u64 {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major << 20) | minor
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_is_the_namespace_that_shows_the_process_at_one_level() {
        assert!(proc_shows_own_namespace("Name:\txtrace\nNSpid:\t7\n", 7));
        // The host's /proc seen from a container: host pid, then the container's.
        assert!(!proc_shows_own_namespace("NSpid:\t4321\t7\n", 7));
        // Same number at one level, but not xtrace's.
        assert!(!proc_shows_own_namespace("NSpid:\t8\n", 7));
        // /proc/self missing: xtrace is not in /proc's namespace at all.
        assert!(!proc_shows_own_namespace("", 7));
        assert!(proc_shows_own_namespace("Name:\txtrace\nPid:\t7\n", 7));
    }

    #[test]
    fn device_numbers_in_the_kernels_encoding() {
        // nsfs is an anonymous device: major 0.
        assert_eq!(kernel_dev(4), 4);
        // 8:1 (sda1) is 0x801 from stat, (8 << 20) | 1 in the kernel.
        assert_eq!(kernel_dev(0x801), (8 << 20) | 1);
        // A minor above 255 spreads over both halves in stat's encoding.
        assert_eq!(kernel_dev(0x0010_0034), 0x134);
    }
}
