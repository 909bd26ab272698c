//! The `bpf()` system call as xtrace issues it itself, where aya 0.14 cannot (uprobe_multi
//! programs and links, and `xtrace check`'s feature probes): the prefixes of `union bpf_attr`
//! that those commands read, and the call. The kernel zero-fills what a prefix leaves out.
use std::{
    io,
    os::fd::{FromRawFd, OwnedFd},
};

use aya_obj::generated::bpf_cmd;

/// `bpf_attr` for `BPF_PROG_LOAD`, up to `attach_btf_obj_fd`.
#[repr(C)]
#[derive(Default)]
pub(super) struct ProgLoadAttr {
    pub(super) prog_type: u32,
    pub(super) insn_cnt: u32,
    pub(super) insns: u64,
    pub(super) license: u64,
    pub(super) log_level: u32,
    pub(super) log_size: u32,
    pub(super) log_buf: u64,
    pub(super) kern_version: u32,
    pub(super) prog_flags: u32,
    pub(super) prog_name: [u8; 16],
    pub(super) prog_ifindex: u32,
    pub(super) expected_attach_type: u32,
    pub(super) prog_btf_fd: u32,
    pub(super) func_info_rec_size: u32,
    pub(super) func_info: u64,
    pub(super) func_info_cnt: u32,
    pub(super) line_info_rec_size: u32,
    pub(super) line_info: u64,
    pub(super) line_info_cnt: u32,
    /// The BTF type a tracing program attaches to (a `btf_trace_NAME` typedef for a BTF-typed
    /// tracepoint).
    pub(super) attach_btf_id: u32,
    pub(super) attach_btf_obj_fd: u32,
    pub(super) _pad: u32,
}

/// `bpf_attr` for `BPF_LINK_CREATE` with its `uprobe_multi` member.
#[repr(C)]
#[derive(Default)]
pub(super) struct LinkCreateAttr {
    pub(super) prog_fd: u32,
    pub(super) target_fd: u32,
    pub(super) attach_type: u32,
    pub(super) flags: u32,
    pub(super) path: u64,
    pub(super) offsets: u64,
    pub(super) ref_ctr_offsets: u64,
    pub(super) cookies: u64,
    pub(super) cnt: u32,
    pub(super) multi_flags: u32,
    pub(super) pid: u32,
    pub(super) _pad: u32,
}

/// `bpf_attr` for `BPF_MAP_CREATE`, up to `map_flags`.
#[repr(C)]
#[derive(Default)]
pub(super) struct MapCreateAttr {
    pub(super) map_type: u32,
    pub(super) key_size: u32,
    pub(super) value_size: u32,
    pub(super) max_entries: u32,
    pub(super) map_flags: u32,
}

/// Issues `bpf(cmd, attr)` and returns the new file descriptor.
pub(super) fn bpf_fd<T>(cmd: bpf_cmd, attr: &T) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a repr(C) prefix of `union bpf_attr`, valid for `size_of::<T>()` bytes;
    // every pointer inside it refers to memory that outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *const T,
            std::mem::size_of::<T>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
