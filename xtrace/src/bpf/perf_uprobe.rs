//! Perf-event uprobes opened by hand, for what aya 0.14's `UProbe::attach` cannot express: a
//! reference-counter (USDT semaphore) offset, which the kernel (4.20+) takes in bits 32–63 of the
//! uprobe PMU's `config`. The program is attached with a BPF link carrying the site's cookie.
use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
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

/// The uprobe PMU's type number.
fn uprobe_pmu() -> io::Result<u32> {
    let text = std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type")?;
    text.trim()
        .parse()
        .map_err(|_| io::Error::other("unreadable /sys/bus/event_source/devices/uprobe/type"))
}

/// An entry uprobe at `offset` of `path` (a semaphore at `ref_ctr_offset` when non-zero), for
/// process `pid` or every process, running `program` with `cookie`. Returns the link; dropping it
/// detaches the uprobe and (with the event fd closed) lowers the semaphore.
pub fn attach(
    program: BorrowedFd<'_>,
    path: &Path,
    offset: u64,
    ref_ctr_offset: u64,
    pid: Option<u32>,
    cookie: u64,
) -> io::Result<(OwnedFd, OwnedFd)> {
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let attr = PerfEventAttr {
        kind: uprobe_pmu()?,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: ref_ctr_offset << REF_CTR_SHIFT,
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
    Ok((event, link))
}
