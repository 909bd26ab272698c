//! What the running kernel's BPF can do, asked of the kernel itself for `xtrace check`: each probe
//! loads a two-instruction program (or creates a map) of the kind xtrace relies on and closes it at
//! once, so the answer is the kernel's, not a guess from its version. A probe the caller lacks the
//! capabilities for says so instead of answering.
use std::{ffi::CString, io};

use aya_obj::generated::{bpf_attach_type, bpf_cmd, bpf_map_type, bpf_prog_type};

use super::{
    attr::{bpf_fd, LinkCreateAttr, MapCreateAttr, ProgLoadAttr},
    btf::KernelBtf,
};

/// `BPF_F_SLEEPABLE`: the program may sleep (fault pages in) while it runs.
pub const BPF_F_SLEEPABLE: u32 = 1 << 4;

/// What one probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Yes,
    /// The kernel refused it: why, in its words.
    No(String),
    /// It could not be asked: the caller may not load BPF programs.
    NotPermitted,
}

impl Answer {
    fn of(result: io::Result<()>) -> Answer {
        match result {
            Ok(()) => Answer::Yes,
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => Answer::NotPermitted,
            Err(e) => Answer::No(e.to_string()),
        }
    }
}

/// `r0 = 0; exit`: the smallest program the verifier accepts.
const RETURN_ZERO: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];

/// Loads `RETURN_ZERO` as a program of `prog_type`, with the attach type, flags and BTF id given.
fn load(prog_type: bpf_prog_type, attach: u32, flags: u32, btf_id: u32) -> io::Result<std::os::fd::OwnedFd> {
    let license = CString::from(c"GPL");
    let attr = ProgLoadAttr {
        prog_type: prog_type as u32,
        insn_cnt: RETURN_ZERO.len() as u32,
        insns: RETURN_ZERO.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_flags: flags,
        expected_attach_type: attach,
        attach_btf_id: btf_id,
        ..Default::default()
    };
    bpf_fd(bpf_cmd::BPF_PROG_LOAD, &attr)
}

/// Fails when the kernel has no bpf() system call at all: one built without CONFIG_BPF_SYSCALL,
/// a sandbox that implements no BPF (gVisor), or a seccomp filter that hides it. Asked with a
/// command no kernel has: one with BPF answers EINVAL (or EPERM to a caller it does not let in),
/// one without answers ENOSYS.
pub fn require_bpf_syscall() -> crate::error::Result<()> {
    // SAFETY: the kernel reads no attributes for an unknown command (size 0, null pointer).
    let rc = unsafe { libc::syscall(libc::SYS_bpf, -1, std::ptr::null::<u8>(), 0) };
    let error = io::Error::last_os_error();
    if rc < 0 && error.raw_os_error() == Some(libc::ENOSYS) {
        return Err(crate::error::Error::NoBpf {
            release: crate::procfs::kernel_setting("osrelease").unwrap_or_default(),
            why: "is not implemented (ENOSYS)".into(),
        });
    }
    Ok(())
}

/// Whether a uprobe program (a kprobe-type program, as uprobes take) loads at all: the base of
/// every xtrace probe.
pub fn uprobe_programs() -> Answer {
    Answer::of(load(bpf_prog_type::BPF_PROG_TYPE_KPROBE, 0, 0, 0).map(drop))
}

/// Whether a BPF ring buffer can be created (Linux 5.8+): xtrace's one channel from the kernel.
pub fn ring_buffer() -> Answer {
    let attr = MapCreateAttr {
        map_type: bpf_map_type::BPF_MAP_TYPE_RINGBUF as u32,
        max_entries: 4096,
        ..Default::default()
    };
    Answer::of(bpf_fd(bpf_cmd::BPF_MAP_CREATE, &attr).map(drop))
}

/// Whether uprobe_multi links exist (Linux 6.6+). A program of that attach type must load, and a
/// link on `/` (a directory, which no uprobe can be put in) must be refused for being no regular
/// file (EBADF), not for an unknown attach type (EINVAL).
pub fn uprobe_multi() -> Answer {
    let attach = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
    let program = match load(bpf_prog_type::BPF_PROG_TYPE_KPROBE, attach, 0, 0) {
        Ok(fd) => fd,
        Err(e) => return Answer::of(Err(e)),
    };
    let root = CString::from(c"/");
    let offset = 0u64;
    let attr = LinkCreateAttr {
        prog_fd: std::os::fd::AsRawFd::as_raw_fd(&program) as u32,
        attach_type: attach,
        path: root.as_ptr() as u64,
        offsets: &offset as *const u64 as u64,
        cnt: 1,
        ..Default::default()
    };
    match bpf_fd(bpf_cmd::BPF_LINK_CREATE, &attr) {
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => Answer::Yes,
        Err(e) => Answer::of(Err(e)),
        // A link on `/` should not exist; the kernel took the attach type all the same.
        Ok(_) => Answer::Yes,
    }
}

/// Whether BTF-typed tracepoint programs load, on `sched_switch` (Linux 5.5+).
pub fn btf_tracepoints(btf: Option<&KernelBtf>) -> Answer {
    let Some(id) = btf.and_then(|btf| btf.tracepoint_type_id("sched_switch")) else {
        return Answer::No("the kernel's BTF has no sched_switch tracepoint".into());
    };
    let attach = bpf_attach_type::BPF_TRACE_RAW_TP as u32;
    Answer::of(load(bpf_prog_type::BPF_PROG_TYPE_TRACING, attach, 0, id).map(drop))
}

/// Whether uprobe programs may be sleepable: they can then fault in pages the traced process has
/// not touched yet. The kernel's verifier answers at load time.
pub fn sleepable_uprobes() -> Answer {
    let loaded = load(bpf_prog_type::BPF_PROG_TYPE_KPROBE, 0, BPF_F_SLEEPABLE, 0);
    Answer::of(loaded.map(drop))
}

/// The environment variable that keeps string-reading probes on the non-sleepable entry program
/// when set to 0 (for kernels whose sleepable uprobes misbehave, and for measuring).
pub const SLEEPABLE_ENV: &str = "XTRACE_SLEEPABLE_STRINGS";

/// Why the string-reading probes' entry program is not the sleepable one (`span_enter_s`) in this
/// process, one line; None when it is. Asked once per process: `XTRACE_SLEEPABLE_STRINGS=0`, then
/// the kernel ([`sleepable_uprobes`]).
pub fn no_sleepable_entries() -> Option<&'static str> {
    static ANSWER: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *ANSWER.get_or_init(|| {
        if std::env::var(SLEEPABLE_ENV).is_ok_and(|v| v == "0") {
            Some("XTRACE_SLEEPABLE_STRINGS=0")
        } else if sleepable_uprobes() != Answer::Yes {
            Some("this kernel refuses sleepable uprobes (Linux 6.0+)")
        } else {
            None
        }
    })
}

/// Whether the string-reading probes' entry program is the sleepable one (see
/// [`no_sleepable_entries`]).
pub fn sleepable_entries() -> bool {
    no_sleepable_entries().is_none()
}
