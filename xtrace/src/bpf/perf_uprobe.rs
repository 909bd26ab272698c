//! Perf-event uprobes opened by hand (kernels without uprobe_multi links), for what aya 0.14's
//! `UProbe::attach` cannot express: a reference-counter (USDT semaphore) offset, which the kernel
//! (4.20+) takes in bits 32–63 of the uprobe PMU's `config`; and both file descriptors kept, the
//! event's and the BPF link's, which the stop needs apart (see [`PerfUprobe`]). The program is
//! attached with a BPF link carrying the probe's cookie.
use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
    sync::OnceLock,
};

use aya_obj::generated::{bpf_attach_type, bpf_cmd};

/// `struct perf_event_attr` up to `PERF_ATTR_SIZE_VER5` (112 bytes).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved: u16,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 112);

/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `PERF_UPROBE_REF_CTR_OFFSET_SHIFT`.
const REF_CTR_SHIFT: u32 = 32;

/// `bpf_attr` for `BPF_LINK_CREATE` with its `perf_event` member.
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    bpf_cookie: u64,
}

/// `PERF_EVENT_IOC_DISABLE`: `_IO('$', 1)`.
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;

/// The uprobe PMU, as sysfs describes it.
#[derive(Clone, Copy)]
struct Pmu {
    /// Its type number.
    kind: u32,
    /// The bit of `config` that makes a return probe.
    retprobe_bit: u32,
}

const PMU_DIR: &str = "/sys/bus/event_source/devices/uprobe";

/// The uprobe PMU, read once: a recording on an older kernel opens one event per offset.
fn uprobe_pmu() -> io::Result<Pmu> {
    static PMU: OnceLock<Result<Pmu, String>> = OnceLock::new();
    PMU.get_or_init(|| read_pmu().map_err(|e| e.to_string()))
        .clone()
        .map_err(io::Error::other)
}

fn read_pmu() -> io::Result<Pmu> {
    let read = |name: &str| {
        std::fs::read_to_string(format!("{PMU_DIR}/{name}"))
            .map_err(|e| io::Error::new(e.kind(), format!("reading {PMU_DIR}/{name}: {e}")))
    };
    let unreadable = |name: &str| io::Error::other(format!("unreadable {PMU_DIR}/{name}"));
    let kind = read("type")?.trim().parse().map_err(|_| unreadable("type"))?;
    let retprobe_bit =
        retprobe_bit(&read("format/retprobe")?).ok_or_else(|| unreadable("format/retprobe"))?;
    Ok(Pmu { kind, retprobe_bit })
}

/// The bit in `format/retprobe`'s `config:N`.
fn retprobe_bit(format: &str) -> Option<u32> {
    format
        .trim()
        .strip_prefix("config:")?
        .parse()
        .ok()
        .filter(|bit| *bit < 32)
}

/// One perf-event uprobe with its program attached: the event, and the BPF link that holds the
/// program on it. Closing the last of the two removes the uprobe from the process, which waits for
/// the kernel's grace periods one uprobe at a time (~80 ms each); closing the link also takes the
/// program off, which on Linux 6.1 costs about as long.
#[derive(Debug)]
pub struct PerfUprobe {
    pub event: OwnedFd,
    pub link: OwnedFd,
}

impl PerfUprobe {
    /// The event and the link apart; with `disable`, the event stops counting hits first (its
    /// program still runs on each).
    pub fn into_fds(self, disable: bool) -> (OwnedFd, OwnedFd) {
        if disable {
            // SAFETY: an ioctl without an argument on a perf event descriptor we own. A failure
            // leaves the event counting hits into no buffer: harmless.
            unsafe { libc::ioctl(self.event.as_raw_fd(), PERF_EVENT_IOC_DISABLE as _, 0) };
        }
        (self.event, self.link)
    }
}

/// A uprobe (a return probe when `ret`) at `offset` of `path` (a semaphore at `ref_ctr_offset`
/// when non-zero), for process `pid` or every process, running `program` with `cookie`. Dropping
/// it detaches the uprobe and lowers the semaphore.
pub fn attach(
    program: BorrowedFd<'_>,
    path: &Path,
    (offset, ret): (u64, bool),
    ref_ctr_offset: u64,
    pid: Option<u32>,
    cookie: u64,
) -> io::Result<PerfUprobe> {
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let pmu = uprobe_pmu()?;
    let attr = PerfEventAttr {
        kind: pmu.kind,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: (ref_ctr_offset << REF_CTR_SHIFT) | if ret { 1 << pmu.retprobe_bit } else { 0 },
        sample_period: 1,
        wakeup_events: 1,
        config1: path.as_ptr() as u64,
        config2: offset,
        ..Default::default()
    };
    let (pid, cpu) = match pid {
        Some(pid) => (pid as i32, -1),
        None => (-1, 0),
    };
    // SAFETY: `attr` is a valid perf_event_attr of the size it declares; `path` outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            pid,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    let event = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let link_attr = LinkCreateAttr {
        prog_fd: program.as_raw_fd() as u32,
        target_fd: event.as_raw_fd() as u32,
        attach_type: bpf_attach_type::BPF_PERF_EVENT as u32,
        flags: 0,
        bpf_cookie: cookie,
    };
    let link = super::attr::bpf_fd(bpf_cmd::BPF_LINK_CREATE, &link_attr)?;
    Ok(PerfUprobe { event, link })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retprobe_bit_is_read_from_the_format_file() {
        assert_eq!(retprobe_bit("config:0\n"), Some(0));
        assert_eq!(retprobe_bit("config:12"), Some(12));
        assert_eq!(retprobe_bit("config1:0"), None);
        assert_eq!(retprobe_bit("config:64"), None);
        assert_eq!(retprobe_bit(""), None);
    }
}
