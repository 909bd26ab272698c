//! A kernel without BPF, made for one process: a seccomp filter under which the bpf() system
//! call fails with ENOSYS, as it does in gVisor or in a kernel built without CONFIG_BPF_SYSCALL.
//! Every other system call runs as usual.

use std::{os::unix::process::CommandExt, process::Command};

/// Offsets in `struct seccomp_data`: the system call number and the audit architecture.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// `AUDIT_ARCH_X86_64`.
const ARCH_X86_64: u32 = 0xc000_003e;
/// Classic BPF opcodes: load a word at an absolute offset, jump if equal to a constant, return.
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;

fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Makes bpf() fail with ENOSYS in the process `command` starts (set between fork and exec).
pub fn hide_bpf(command: &mut Command) {
    let filter = [
        op(LD_W_ABS, 0, 0, ARCH),
        op(JEQ_K, 1, 0, ARCH_X86_64),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        op(LD_W_ABS, 0, 0, NR),
        op(JEQ_K, 0, 1, libc::SYS_bpf as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    // SAFETY: the closure runs in the forked child before exec and only makes two prctl calls,
    // which are async-signal-safe; `program` points at `filter`, which the closure owns.
    unsafe {
        command.pre_exec(move || {
            let program = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &raw const program,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
