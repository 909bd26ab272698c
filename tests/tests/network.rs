//! xtrace connects only to the `--store` given, listens only with `--live`, only on the address it
//! printed, and closes it at the stop.
//! Without `--live`, while it records (uprobes, CPU sampling, GPU metrics asked for), none of its
//! fds is an inet socket (TCP, UDP or raw, v4 or v6, in its network namespace's /proc/PID/net
//! tables) and none is a listening Unix socket; its own Unix sockets (tokio's signal wake-up
//! pair) are unconnected to anything outside it. With `--live`, its one inet socket is a TCP
//! listener on the printed address, and nothing listens there once the capture has stopped.

use std::collections::BTreeSet;

use xtrace_tests::{
    args, clickhouse::ClickHouse, fixtures::fixtures, fixtures::Fixture, require_bpf, run::Xtrace,
    xtrace_bin, TempDir,
};

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

/// A /proc/net/tcp address (`0100007F:1F90`) as an IPv4 socket address.
fn tcp4_addr(hex: &str) -> std::net::SocketAddr {
    let (ip, port) = hex.split_once(':').expect("ADDR:PORT");
    let ip = u32::from_str_radix(ip, 16).expect("hex address");
    let port = u16::from_str_radix(port, 16).expect("hex port");
    // The kernel prints the address as the u32 it holds, in host order (little endian here).
    std::net::SocketAddr::from((ip.to_le_bytes(), port))
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_live_capture_listens_only_on_its_address_until_the_stop() {
    if !require_bpf() {
        return;
    }
    let fixture = Fixture::spin();
    let tmp = TempDir::new("network-live");
    let mut xtrace = Xtrace::record_work(fixture.pid(), args!["--live", "-d", "2"], tmp.join("out"));
    let line = xtrace.wait_stderr("xtrace: live view at ");
    let printed: std::net::SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    xtrace.wait_attached();
    let sockets = socket_inodes(xtrace.pid());
    let mut own = Vec::new();
    for name in ["tcp", "tcp6", "udp", "udp6", "raw", "raw6"] {
        for row in table(xtrace.pid(), name) {
            if row.get(9).is_some_and(|inode| sockets.contains(inode)) {
                own.push((name, row));
            }
        }
    }
    assert_eq!(own.len(), 1, "one inet socket, the listener: {own:?}");
    let (name, row) = &own[0];
    assert_eq!(*name, "tcp");
    assert_eq!(row[3], "0A", "in state LISTEN: {row:?}");
    assert_eq!(tcp4_addr(&row[1]), printed, "on the printed address: {row:?}");
    xtrace.wait().assert_success();
    let after = std::net::TcpStream::connect_timeout(&printed, std::time::Duration::from_secs(2));
    assert_eq!(
        after.map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::ConnectionRefused),
        "nothing listens on {printed} after the capture"
    );
}

/// The network system calls of `xtrace ARGS` and every thread and child it starts, as strace
/// writes them (`connect(3, {sa_family=AF_INET, sin_port=htons(8123), ...}) = 0`).
fn network_calls(args: &[std::ffi::OsString]) -> Vec<String> {
    let out = std::process::Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-e",
            "trace=connect,bind,listen,accept,accept4",
            "-o",
            "/dev/stderr",
        ])
        .arg(xtrace_bin())
        .args(args)
        .output()
        .expect("strace (Debian's strace package)");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
        .lines()
        .filter(|l| {
            ["connect(", "bind(", "listen(", "accept"]
                .iter()
                .any(|c| l.contains(c))
        })
        .map(String::from)
        .collect()
}

/// `record --store` and `push` connect to the store's address only, and listen on nothing.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_store_is_the_only_address_xtrace_connects_to() {
    if !require_bpf() {
        return;
    }
    let Some(server) = ClickHouse::start() else {
        return;
    };
    let tmp = TempDir::new("network-store");
    let url = server.url("xtrace_network");
    let port = url
        .rsplit_once(':')
        .and_then(|(_, p)| p.split('/').next())
        .expect("a port")
        .to_string();
    let out = tmp.join("out");
    let record = args![
        "-q",
        "-u",
        "busy",
        "--store",
        &url,
        "-o",
        &out,
        "--",
        &fixtures().spans,
        "busy",
        "1",
        "5"
    ];
    let push = args!["push", &out, "--store", server.url("xtrace_network_again")];
    for run in [record, push] {
        let calls = network_calls(&run);
        assert!(!calls.is_empty(), "no connection to the store at all");
        for call in &calls {
            assert!(
                call.contains("connect(")
                    && call.contains(&format!("sin_port=htons({port})"))
                    && call.contains("inet_addr(\"127.0.0.1\")"),
                "a network call other than to the store: {call}\n{calls:#?}"
            );
        }
    }
}
