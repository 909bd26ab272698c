//! The processes and namespaces the tests run xtrace among: a process's one child (what
//! `unshare --fork` starts), its pids in the PID namespaces it is in, `nsenter` flags into
//! another process's namespaces, and a `setpriv` that runs a program as an unprivileged user with
//! chosen capabilities.
use std::process::Command;

/// The one child process of `pid` (of its main thread), such as the process `unshare --fork`
/// starts.
pub fn only_child(pid: u32) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_else(|e| panic!("reading the children of {pid}: {e}"));
    match children.split_whitespace().collect::<Vec<_>>().as_slice() {
        [child] => child.parse().expect("a pid"),
        other => panic!("process {pid} has children {other:?}, not one"),
    }
}

/// `nsenter` flags that enter the PID namespace of process `pid_of` (for the program nsenter
/// starts) and the mount namespace of process `mount_of`.
pub fn nsenter_flags(pid_of: u32, mount_of: u32) -> [String; 2] {
    [
        format!("--pid=/proc/{pid_of}/ns/pid"),
        format!("--mount=/proc/{mount_of}/ns/mnt"),
    ]
}

/// The pids of host process `pid` in each PID namespace it is in, the host's first (its
/// `NSpid:` line).
pub fn namespace_pids(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/status: {e}"));
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))
        .unwrap_or_else(|| panic!("no NSpid line in /proc/{pid}/status"));
    line.split_whitespace()
        .map(|n| n.parse().expect("a pid"))
        .collect()
}

/// The pid of host process `pid` in its own PID namespace.
pub fn namespace_pid(pid: u32) -> u32 {
    *namespace_pids(pid).last().expect("NSpid lists one pid at least")
}

/// A `setpriv` command that runs the program appended to it as uid/gid 65534 with no groups,
/// keeping capabilities `caps` (setpriv names: `bpf`, `perfmon`, `syslog`) as ambient ones, so
/// they stay effective as user 65534.
pub fn as_nobody(caps: &[&str]) -> Command {
    let mut setpriv = Command::new("setpriv");
    setpriv.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    if !caps.is_empty() {
        let caps: Vec<String> = caps.iter().map(|cap| format!("+{cap}")).collect();
        let caps = caps.join(",");
        setpriv.arg(format!("--inh-caps={caps}"));
        setpriv.arg(format!("--ambient-caps={caps}"));
    }
    setpriv.arg("--");
    setpriv
}
