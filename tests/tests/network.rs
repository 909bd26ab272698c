//! xtrace opens no network socket: while it records (uprobes, CPU sampling, GPU metrics asked
//! for), none of its fds is an inet socket (TCP, UDP or raw, v4 or v6, in its network namespace's
//! /proc/PID/net tables) and none is a listening Unix socket. Its own Unix sockets (tokio's
//! signal wake-up pair) are unconnected to anything outside it.

use std::collections::BTreeSet;

use xtrace_tests::{args, fixtures::Fixture, require_bpf, run::Xtrace, TempDir};

/// The inodes of the sockets process `pid` holds.
fn socket_inodes(pid: u32) -> BTreeSet<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("reading /proc/PID/fd")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(target.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect()
}

/// The rows of /proc/PID/net/TABLE, split into columns (header left out).
fn table(pid: u32, name: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/{name}")).unwrap_or_default();
    text.lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_recording_opens_no_network_socket() {
    if !require_bpf() {
        return;
    }
    let fixture = Fixture::spin();
    let tmp = TempDir::new("network");
    let mut xtrace = Xtrace::record_work(
        fixture.pid(),
        args!["-F", "99", "--gpu-metrics=100ms", "-d", "1"],
        tmp.join("out"),
    );
    xtrace.wait_attached();
    let pid = xtrace.pid();
    let sockets = socket_inodes(pid);
    // /proc/net/{tcp,udp,raw}{,6}: the inode is the 10th column.
    for name in ["tcp", "tcp6", "udp", "udp6", "raw", "raw6"] {
        for row in table(pid, name) {
            assert!(
                !row.get(9).is_some_and(|inode| sockets.contains(inode)),
                "xtrace holds a {name} socket: {row:?}"
            );
        }
    }
    // /proc/net/unix: Num RefCount Protocol Flags Type St Inode [Path]; flag 0x10000 = listening.
    let unix = table(pid, "unix");
    let own: Vec<&Vec<String>> = unix
        .iter()
        .filter(|row| row.get(6).is_some_and(|inode| sockets.contains(inode)))
        .collect();
    assert_eq!(
        own.len(),
        sockets.len(),
        "every socket of xtrace is a Unix socket: {own:?}"
    );
    for row in own {
        let flags = u32::from_str_radix(&row[3], 16).expect("hex flags");
        assert_eq!(flags & 0x10000, 0, "xtrace listens on a Unix socket: {row:?}");
        assert!(row.get(7).is_none(), "xtrace's Unix socket has a path: {row:?}");
    }
    xtrace.wait().assert_success();
}
