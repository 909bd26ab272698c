//! The code `--inject` runs in the target thread (x86_64): a position-independent blob, assembled
//! here and never run by xtrace, copied into a page the target mapped, followed by the values it
//! reads (the addresses of `dlopen` and `dlsym`, where the library's bytes lie, and the thread's
//! registers to resume with). It needs nothing of xtrace once it starts:
//!
//! 1. saves the thread's extended state (`xsave`, into an area on the thread's own stack);
//! 2. `memfd_create`s `libxtrace_tool.so`, writes the library's bytes into it, and `dlopen`s
//!    `/proc/self/fd/N` (a path that exists in every mount namespace), then calls the library's
//!    `xtrace_inject_start`, closes the fd and unmaps the library's bytes;
//! 3. restores the extended state, every general register and the flags from the values after the
//!    code, and jumps to the saved instruction pointer.
//!
//! So once xtrace has written the thread's registers to point here, the thread resumes correctly
//! whether or not xtrace is still alive. The code page itself stays mapped (one page).
use std::arch::global_asm;

// The blob lives in a read-only data section of xtrace: copied, never executed here.
global_asm!(
    ".pushsection .rodata.xtrace_inject_trampoline,\"a\"",
    ".p2align 6",
    ".globl xtrace_inject_trampoline",
    ".hidden xtrace_inject_trampoline",
    "xtrace_inject_trampoline:",
    // rbx: a 64-byte aligned xsave area on the thread's stack; rsp: below it, 16-byte aligned.
    // XRSTOR faults on a header with stray bytes: zero it first.
    "xor eax, eax",
    "mov [rbx + 512], rax",
    "mov [rbx + 520], rax",
    "mov [rbx + 528], rax",
    "mov [rbx + 536], rax",
    "mov [rbx + 544], rax",
    "mov [rbx + 552], rax",
    "mov [rbx + 560], rax",
    "mov [rbx + 568], rax",
    "mov eax, -1",
    "mov edx, -1",
    "xsave64 [rbx]",
    // memfd_create(name, MFD_CLOEXEC)
    "lea rdi, [rip + .Lxti_name]",
    "mov esi, 1",
    "mov eax, 319",
    "syscall",
    "test rax, rax",
    "js .Lxti_unmap",
    "mov r13, rax",
    "mov r14, [rip + .Lxti_lib_addr]",
    "mov r15, [rip + .Lxti_lib_len]",
    ".Lxti_write:",
    "test r15, r15",
    "jz .Lxti_open",
    "mov edi, r13d",
    "mov rsi, r14",
    "mov rdx, r15",
    "mov eax, 1",
    "syscall",
    "cmp rax, -4",
    "je .Lxti_write",
    "test rax, rax",
    "jle .Lxti_close",
    "add r14, rax",
    "sub r15, rax",
    "jmp .Lxti_write",
    // "/proc/self/fd/N" in the 64 bytes below the xsave area.
    ".Lxti_open:",
    "lea rsi, [rbx - 8]",
    "mov byte ptr [rsi], 0",
    "mov rax, r13",
    "mov ecx, 10",
    ".Lxti_digit:",
    "xor edx, edx",
    "div rcx",
    "add dl, 48",
    "dec rsi",
    "mov [rsi], dl",
    "test rax, rax",
    "jnz .Lxti_digit",
    "sub rsi, 14",
    "mov rax, [rip + .Lxti_prefix]",
    "mov [rsi], rax",
    "mov rax, [rip + .Lxti_prefix + 6]",
    "mov [rsi + 6], rax",
    "mov rdi, rsi",
    "mov esi, 2",
    "call qword ptr [rip + .Lxti_dlopen]",
    "test rax, rax",
    "jz .Lxti_close",
    "mov rdi, rax",
    "lea rsi, [rip + .Lxti_start]",
    "call qword ptr [rip + .Lxti_dlsym]",
    "test rax, rax",
    "jz .Lxti_close",
    "call rax",
    ".Lxti_close:",
    "mov edi, r13d",
    "mov eax, 3",
    "syscall",
    ".Lxti_unmap:",
    "mov rdi, [rip + .Lxti_unmap_addr]",
    "mov rsi, [rip + .Lxti_unmap_len]",
    "mov eax, 11",
    "syscall",
    "mov eax, -1",
    "mov edx, -1",
    "xrstor64 [rbx]",
    "push qword ptr [rip + .Lxti_regs + 128]",
    "popfq",
    "mov r15, [rip + .Lxti_regs + 0]",
    "mov r14, [rip + .Lxti_regs + 8]",
    "mov r13, [rip + .Lxti_regs + 16]",
    "mov r12, [rip + .Lxti_regs + 24]",
    "mov rbp, [rip + .Lxti_regs + 32]",
    "mov rbx, [rip + .Lxti_regs + 40]",
    "mov r11, [rip + .Lxti_regs + 48]",
    "mov r10, [rip + .Lxti_regs + 56]",
    "mov r9, [rip + .Lxti_regs + 64]",
    "mov r8, [rip + .Lxti_regs + 72]",
    "mov rax, [rip + .Lxti_regs + 80]",
    "mov rcx, [rip + .Lxti_regs + 88]",
    "mov rdx, [rip + .Lxti_regs + 96]",
    "mov rsi, [rip + .Lxti_regs + 104]",
    "mov rdi, [rip + .Lxti_regs + 112]",
    "mov rsp, [rip + .Lxti_regs + 136]",
    "jmp qword ptr [rip + .Lxti_regs + 120]",
    ".Lxti_prefix:",
    ".ascii \"/proc/self/fd/\"",
    ".Lxti_name:",
    ".asciz \"libxtrace_tool.so\"",
    ".Lxti_start:",
    ".asciz \"xtrace_inject_start\"",
    ".p2align 3",
    ".globl xtrace_inject_trampoline_data",
    ".hidden xtrace_inject_trampoline_data",
    "xtrace_inject_trampoline_data:",
    ".Lxti_dlopen: .quad 0",
    ".Lxti_dlsym: .quad 0",
    ".Lxti_lib_addr: .quad 0",
    ".Lxti_lib_len: .quad 0",
    ".Lxti_unmap_addr: .quad 0",
    ".Lxti_unmap_len: .quad 0",
    ".Lxti_regs: .fill 18, 8, 0",
    ".globl xtrace_inject_trampoline_end",
    ".hidden xtrace_inject_trampoline_end",
    "xtrace_inject_trampoline_end:",
    ".popsection",
);

extern "C" {
    static xtrace_inject_trampoline: u8;
    static xtrace_inject_trampoline_data: u8;
    static xtrace_inject_trampoline_end: u8;
}

/// The page size the target's mapping is laid out in.
pub const PAGE: u64 = 4096;

/// What the trampoline needs to know, all addresses in the target.
#[derive(Clone, Debug)]
pub struct Values {
    pub dlopen: u64,
    pub dlsym: u64,
    /// The library's bytes (page-aligned, after the code page) and their length.
    pub library: u64,
    pub library_len: u64,
    /// The registers the thread resumes with.
    pub resume: libc::user_regs_struct,
}

/// The blob: code, then the values it reads.
fn blob() -> (&'static [u8], usize) {
    let start = &raw const xtrace_inject_trampoline;
    let data = &raw const xtrace_inject_trampoline_data;
    let end = &raw const xtrace_inject_trampoline_end;
    let len = end as usize - start as usize;
    // SAFETY: the three labels delimit one blob of bytes in a read-only section of this binary.
    let bytes = unsafe { std::slice::from_raw_parts(start, len) };
    (bytes, data as usize - start as usize)
}

/// The registers in the order the blob restores them.
fn register_slots(r: &libc::user_regs_struct) -> [u64; 18] {
    [
        r.r15, r.r14, r.r13, r.r12, r.rbp, r.rbx, r.r11, r.r10, r.r9, r.r8, r.rax, r.rcx, r.rdx, r.rsi,
        r.rdi, r.rip, r.eflags, r.rsp,
    ]
}

/// The code page's bytes, with `values` filled in.
pub fn code_page(values: &Values) -> Vec<u8> {
    let (bytes, data) = blob();
    let mut page = bytes.to_vec();
    let mut slots = vec![
        values.dlopen,
        values.dlsym,
        values.library,
        values.library_len,
        values.library,
        values.library_len.div_ceil(PAGE) * PAGE,
    ];
    slots.extend(register_slots(&values.resume));
    for (i, slot) in slots.iter().enumerate() {
        page[data + 8 * i..data + 8 * i + 8].copy_from_slice(&slot.to_le_bytes());
    }
    page
}

/// The extended-state area the blob's `xsave` fills, in bytes (CPUID leaf 0xD: the size the
/// features enabled in XCR0 need); None without XSAVE enabled by the kernel.
pub fn xsave_size() -> Option<u64> {
    let basic = std::arch::x86_64::__cpuid(1);
    let osxsave = basic.ecx & (1 << 27) != 0;
    if !osxsave {
        return None;
    }
    // Leaf 0xD exists where OSXSAVE is set.
    let leaf = std::arch::x86_64::__cpuid_count(0xd, 0);
    Some(u64::from(leaf.ebx))
}

/// How a thread stopped at a system-call entry with `at_entry` goes on: its `syscall` instruction
/// (the two bytes before the instruction pointer) made again with its number, and no restart for
/// the kernel to make on top (`orig_rax` -1).
pub fn resume_registers(at_entry: &libc::user_regs_struct) -> libc::user_regs_struct {
    let mut resume = *at_entry;
    resume.rip -= 2;
    resume.rax = at_entry.orig_rax;
    resume.orig_rax = u64::MAX;
    resume
}

/// The registers that start the trampoline at `code` from a thread stopped with `resume`: a stack
/// below the red zone, with the xsave area of `xsave` bytes at its top.
pub fn start_registers(resume: &libc::user_regs_struct, code: u64, xsave: u64) -> libc::user_regs_struct {
    let mut start = *resume;
    // The 128-byte red zone below the interrupted code's stack pointer stays untouched.
    let area = (resume.rsp - 128 - xsave) & !63;
    start.rbx = area;
    start.rsp = (area - 128) & !15;
    start.rip = code;
    // No system call to restart, and the direction flag clear, as calls expect.
    start.orig_rax = u64::MAX;
    start.eflags &= !0x400;
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_written_after_the_code_in_the_blobs_order() {
        // SAFETY: an all-zero user_regs_struct is a valid value of this plain struct.
        let mut resume: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        resume.rip = 0x1111;
        resume.rsp = 0x2222;
        resume.eflags = 0x246;
        let page = code_page(&Values {
            dlopen: 0xd1,
            dlsym: 0xd2,
            library: 0x10_000,
            library_len: 5000,
            resume,
        });
        let (bytes, data) = blob();
        assert_eq!(page.len(), bytes.len());
        assert!(page.len() < PAGE as usize);
        let slot = |i: usize| u64::from_le_bytes(page[data + 8 * i..data + 8 * i + 8].try_into().unwrap());
        assert_eq!(
            [slot(0), slot(1), slot(2), slot(3), slot(4), slot(5)],
            [0xd1, 0xd2, 0x10_000, 5000, 0x10_000, 8192]
        );
        // rip, rflags, rsp: the last three of the eighteen registers.
        assert_eq!(
            [slot(6 + 15), slot(6 + 16), slot(6 + 17)],
            [0x1111, 0x246, 0x2222]
        );
        // The code starts by zeroing the xsave header: `xor eax, eax`.
        assert_eq!(&page[..2], &[0x31, 0xc0]);
    }

    #[test]
    fn a_thread_resumes_by_making_its_call_again() {
        // SAFETY: as above.
        let mut entry: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        entry.rip = 0x7f00_0000_1002;
        entry.orig_rax = 0; // read
        entry.rax = (-38i64) as u64; // -ENOSYS, as at every entry
        entry.rdi = 7;
        let resume = resume_registers(&entry);
        assert_eq!(
            (resume.rip, resume.rax, resume.orig_rax, resume.rdi),
            (0x7f00_0000_1000, 0, u64::MAX, 7)
        );
    }

    #[test]
    fn the_trampolines_stack_keeps_the_red_zone_and_aligns() {
        // SAFETY: as above.
        let mut resume: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        resume.rsp = 0x7fff_0000_1238;
        resume.orig_rax = 0;
        resume.eflags = 0x646;
        let start = start_registers(&resume, 0x5000, 2696);
        assert_eq!(start.rbx % 64, 0);
        assert!(start.rbx + 2696 <= resume.rsp - 128);
        assert_eq!(start.rsp % 16, 0);
        assert!(start.rsp + 64 <= start.rbx);
        assert_eq!(start.rip, 0x5000);
        assert_eq!(start.orig_rax, u64::MAX);
        assert_eq!(start.eflags, 0x246);
    }
}
