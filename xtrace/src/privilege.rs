//! The capabilities xtrace needs: CAP_BPF and CAP_PERFMON (Linux 5.8+), or CAP_SYS_ADMIN.
use crate::error::{Error, Result};

const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYSLOG: u32 = 34;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The capabilities xtrace needs for something, by their number in the kernel's sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    SysPtrace,
    SysAdmin,
    Syslog,
    Perfmon,
    Bpf,
}

impl Capability {
    /// The capability's bit in a set as /proc/PID/status shows it.
    pub fn bit(self) -> u64 {
        let number = match self {
            Capability::SysPtrace => CAP_SYS_PTRACE,
            Capability::SysAdmin => CAP_SYS_ADMIN,
            Capability::Syslog => CAP_SYSLOG,
            Capability::Perfmon => CAP_PERFMON,
            Capability::Bpf => CAP_BPF,
        };
        1 << number
    }
}

/// Fails with the missing capabilities named, before anything touches the kernel.
pub fn check() -> Result<()> {
    missing(held()).map_or(Ok(()), |missing| Err(Error::MissingCapability { missing }))
}

/// Whether xtrace may read the /proc files of another user's process (CAP_SYS_PTRACE), as a
/// debugger must.
pub fn may_inspect_others() -> bool {
    held() & (1 << CAP_SYS_PTRACE) != 0
}

/// xtrace's effective capability set (none when /proc/self/status cannot tell).
pub fn held() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0)
}

/// The capabilities missing from an effective set, or None when it suffices.
pub fn missing(effective: u64) -> Option<String> {
    let has = |cap: u32| effective & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return None;
    }
    let names: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|(cap, _)| !has(*cap))
        .map(|(_, name)| name)
        .collect();
    Some(names.join(" and "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_sets() {
        assert_eq!(missing(0).as_deref(), Some("CAP_BPF and CAP_PERFMON"));
        assert_eq!(missing(1 << CAP_BPF).as_deref(), Some("CAP_PERFMON"));
        assert_eq!(missing(1 << CAP_PERFMON).as_deref(), Some("CAP_BPF"));
        assert_eq!(missing((1 << CAP_BPF) | (1 << CAP_PERFMON)), None);
        assert_eq!(missing(1 << CAP_SYS_ADMIN), None);
        assert_eq!(missing(u64::MAX >> 23), None);
    }
}
