//! Reading strings of the traced process. A program's plain read (`bpf_probe_read_user*`) cannot
//! fault a page in: a string on a page the process has not touched yet (a literal in `.rodata`
//! read for the first time, a private file mapping) is unreadable to it. A sleepable program
//! (`SLEEPABLE`, `span_enter_s`) can: `bpf_copy_from_user` takes the page fault, after which the
//! plain read finds the page. It does so only when the plain read failed, so a string already in
//! memory costs what it costs in the other programs.
use aya_ebpf::helpers::{
    bpf_probe_read_user_buf, bpf_probe_read_user_str_bytes,
    generated::{bpf_copy_from_user, bpf_probe_read_user_str},
};
use xtrace_common::event::ARG_STR_LEN;

/// The x86-64 page size.
const PAGE: u64 = 4096;

/// Faults in the pages of the `len` bytes at `ptr` (at most 3: the most 4097 bytes span), one
/// byte of each copied with `bpf_copy_from_user`, and stops at the first page it cannot read (past
/// the string's end it may be no mapping). Whether the first page could be read. Sleepable
/// programs only: the verifier refuses the helper elsewhere.
#[inline(always)]
fn fault_in(ptr: u64, len: u64) -> bool {
    let end = ptr.saturating_add(len);
    let mut at = ptr;
    for page in 0..3 {
        if at >= end {
            break;
        }
        let mut byte = 0u8;
        // SAFETY: the helper writes one byte into `byte` and checks the user address.
        let copied = unsafe { bpf_copy_from_user((&raw mut byte).cast(), 1, at as *const _) };
        if copied != 0 {
            return page > 0;
        }
        at = (at & !(PAGE - 1)) + PAGE;
    }
    true
}

/// `bpf_probe_read_user_str` of at most `room` bytes at `ptr` into `dst`: the bytes read with the
/// NUL, or a negative error. In a sleepable program a failed read is made again once the pages it
/// spans are faulted in ([`fault_in`]).
///
/// # Safety
/// `dst` has room for `room` bytes.
#[inline(always)]
pub unsafe fn read_user_str<const SLEEPABLE: bool>(dst: *mut u8, room: u32, ptr: u64) -> i64 {
    // SAFETY: as the caller promises; the helper checks the user address.
    let read = unsafe { bpf_probe_read_user_str(dst.cast(), room, ptr as *const _) };
    if read > 0 || !SLEEPABLE || ptr == 0 || !fault_in(ptr, u64::from(room)) {
        return read;
    }
    // SAFETY: as above.
    unsafe { bpf_probe_read_user_str(dst.cast(), room, ptr as *const _) }
}

/// Reads the NUL-terminated string at `ptr` into `dst`, cut to 63 bytes; returns the bytes kept
/// with the NUL, or 0 when unreadable.
#[inline(always)]
pub fn read_c_string<const SLEEPABLE: bool>(ptr: *const u8, dst: &mut [u8; ARG_STR_LEN]) -> u8 {
    if SLEEPABLE {
        // SAFETY: `dst` has `ARG_STR_LEN` bytes.
        let read = unsafe { read_user_str::<true>(dst.as_mut_ptr(), ARG_STR_LEN as u32, ptr as u64) };
        return if read > 0 {
            (read as usize).min(ARG_STR_LEN) as u8
        } else {
            0
        };
    }
    // SAFETY: the helper checks the user address and writes at most `dst.len()` bytes.
    match unsafe { bpf_probe_read_user_str_bytes(ptr, dst) } {
        // The helper's count includes the NUL; the slice it returns does not.
        Ok(read) => (read.len() + 1).min(ARG_STR_LEN) as u8,
        Err(_) => 0,
    }
}

/// Reads the string of `len` bytes at `ptr` (a Go string, which no NUL ends) into `dst`, cut to
/// 63 bytes, and ends it with a NUL; returns the bytes kept with the NUL, as the string reads of
/// C strings count them, or 0 when unreadable. A sleepable program copies it with
/// `bpf_copy_from_user`, which faults its pages in.
#[inline(always)]
pub fn read_counted<const SLEEPABLE: bool>(ptr: u64, len: u64, dst: &mut [u8; ARG_STR_LEN]) -> u8 {
    let n = (len as usize).min(ARG_STR_LEN - 1);
    let failed = n > 0
        && if SLEEPABLE {
            // SAFETY: the helper writes `n` bytes, fewer than `dst` has, and checks the address.
            unsafe { bpf_copy_from_user(dst.as_mut_ptr().cast(), n as u32, ptr as *const _) != 0 }
        } else {
            // SAFETY: a checked read of user memory into `dst`.
            unsafe { bpf_probe_read_user_buf(ptr as *const u8, &mut dst[..n]) }.is_err()
        };
    if failed {
        return 0;
    }
    dst[n] = 0;
    (n + 1) as u8
}
