//! The code `--inject` runs in the target thread (x86_64): two position-independent blobs,
//! assembled here and never run by xtrace, each copied into the target followed by the values it
//! reads. Each needs nothing of xtrace once the thread runs it, and each ends by restoring every
//! general register and the flags from its values and jumping to the thread's own `syscall`
//! instruction, so that the thread makes the call it was stopped in anew.
//!
//! **Stage 0** ([`stage_code`]) lies in the zero padding after a library's code (see
//! [`super::site`]); the thread is sent there from its system-call entry, that call made a
//! `getpid` ([`REPLACED_CALL`]):
//!
//! 1. `mmap`s the memory for the trampoline and the library's bytes;
//! 2. makes a `getpid` with the mapping's address in `rdi`: the hand-over, where xtrace, stopped at
//!    that call's entry, writes the trampoline and the library and points the thread at it;
//! 3. when xtrace did not (it died, or failed), unmaps the memory and resumes the thread.
//!
//! **The trampoline** ([`code_page`]) lies in the page that `mmap` gave:
//!
//! 1. saves the thread's extended state (`xsave`, into an area on the thread's own stack);
//! 2. takes the dynamic loader's lock with `pthread_mutex_trylock` (see [`super::loader_lock`]),
//!    trying again every 5 ms for half a second while another thread holds it (inside a
//!    `dlopen`, whose constructor may wait for this very thread), and says at a `getpid` whether
//!    it did ([`report_address`]); when it did not, goes on at step 4 with nothing loaded;
//! 3. `memfd_create`s `libxtrace_tool.so`, writes the library's bytes into it, and `dlopen`s
//!    `/proc/self/fd/N` (a path that exists in every mount namespace; the lock taken again
//!    inside, as it is recursive), lets the lock go, then calls the library's
//!    `xtrace_inject_start`, and closes the fd;
//! 4. unmaps the library's bytes, restores the extended state and resumes the thread.
//!
//! So from the moment xtrace first changes the thread's registers (to enter stage 0) the thread
//! resumes correctly whether or not xtrace is still alive. The trampoline's page stays mapped
//! (one page).
use std::arch::global_asm;

/// The assembly that restores the registers in [`register_slots`]' order from the 18 slots at
/// `$slots` and jumps to the saved instruction pointer: the end of both blobs.
#[rustfmt::skip]
macro_rules! restore_registers {
    ($slots:literal) => {
        concat!(
            "push qword ptr [rip + ", $slots, " + 128]\n",
            "popfq\n",
            "mov r15, [rip + ", $slots, " + 0]\n",
            "mov r14, [rip + ", $slots, " + 8]\n",
            "mov r13, [rip + ", $slots, " + 16]\n",
            "mov r12, [rip + ", $slots, " + 24]\n",
            "mov rbp, [rip + ", $slots, " + 32]\n",
            "mov rbx, [rip + ", $slots, " + 40]\n",
            "mov r11, [rip + ", $slots, " + 48]\n",
            "mov r10, [rip + ", $slots, " + 56]\n",
            "mov r9, [rip + ", $slots, " + 64]\n",
            "mov r8, [rip + ", $slots, " + 72]\n",
            "mov rax, [rip + ", $slots, " + 80]\n",
            "mov rcx, [rip + ", $slots, " + 88]\n",
            "mov rdx, [rip + ", $slots, " + 96]\n",
            "mov rsi, [rip + ", $slots, " + 104]\n",
            "mov rdi, [rip + ", $slots, " + 112]\n",
            "mov rsp, [rip + ", $slots, " + 136]\n",
            "jmp qword ptr [rip + ", $slots, " + 120]",
        )
    };
}

// Stage 0, entered with rsp below the interrupted code's red zone, 16-byte aligned.
global_asm!(
    ".pushsection .rodata.xtrace_inject_stage0,\"a\"",
    ".p2align 4",
    ".globl xtrace_inject_stage0",
    ".hidden xtrace_inject_stage0",
    "xtrace_inject_stage0:",
    // mmap(NULL, size, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    "xor edi, edi",
    "mov rsi, [rip + .Lxs0_size]",
    "mov edx, 5",
    "mov r10d, 0x22",
    "mov r8, -1",
    "xor r9d, r9d",
    "mov eax, 9",
    "syscall",
    // The kernel keeps rbx across system calls.
    "mov rbx, rax",
    "mov rdi, rax",
    "mov eax, 39",
    "syscall",
    ".globl xtrace_inject_stage0_handover",
    ".hidden xtrace_inject_stage0_handover",
    "xtrace_inject_stage0_handover:",
    // Still here: nobody took the hand-over. Unmap what mmap gave (not an error: -4095..-1).
    "cmp rbx, -4095",
    "jae .Lxs0_resume",
    "mov rdi, rbx",
    "mov rsi, [rip + .Lxs0_size]",
    "mov eax, 11",
    "syscall",
    ".Lxs0_resume:",
    restore_registers!(".Lxs0_regs"),
    ".p2align 3",
    ".globl xtrace_inject_stage0_data",
    ".hidden xtrace_inject_stage0_data",
    "xtrace_inject_stage0_data:",
    ".Lxs0_size: .quad 0",
    ".Lxs0_regs: .fill 18, 8, 0",
    ".globl xtrace_inject_stage0_end",
    ".hidden xtrace_inject_stage0_end",
    "xtrace_inject_stage0_end:",
    ".popsection",
);

// The trampoline, entered with rbx a 64-byte aligned xsave area on the thread's stack and rsp
// below it, 16-byte aligned.
global_asm!(
    ".pushsection .rodata.xtrace_inject_trampoline,\"a\"",
    ".p2align 6",
    ".globl xtrace_inject_trampoline",
    ".hidden xtrace_inject_trampoline",
    "xtrace_inject_trampoline:",
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
    // The loader's lock, taken before anything is made (when known): held by another thread
    // (EBUSY), inside a `dlopen`, it is tried again every 5 ms, 100 times, then given up.
    "mov r12d, 100",
    ".Lxti_try:",
    "xor eax, eax",
    "mov rdi, [rip + .Lxti_lock]",
    "test rdi, rdi",
    "jz .Lxti_report",
    "call qword ptr [rip + .Lxti_trylock]",
    "test eax, eax",
    "jz .Lxti_report",
    "cmp eax, 16",
    "jne .Lxti_busy",
    "dec r12d",
    "jz .Lxti_busy",
    // clock_nanosleep(CLOCK_MONOTONIC, 0, &5 ms, NULL)
    "mov edi, 1",
    "xor esi, esi",
    "lea rdx, [rip + .Lxti_pause]",
    "xor r10d, r10d",
    "mov eax, 230",
    "syscall",
    "jmp .Lxti_try",
    ".Lxti_busy:",
    "mov rsi, [rip + .Lxti_lock]",
    "mov esi, [rsi + 8]",
    // The report, a getpid: rdi 0 with the lock taken (or none known), else trylock's error and
    // rsi the lock's owner.
    ".Lxti_report:",
    "mov r12d, eax",
    "mov edi, eax",
    "mov eax, 39",
    "syscall",
    ".globl xtrace_inject_trampoline_report",
    ".hidden xtrace_inject_trampoline_report",
    "xtrace_inject_trampoline_report:",
    "test r12d, r12d",
    "jnz .Lxti_unmap",
    // From here on the lock is held: every way goes through .Lxti_loaded, which lets it go. rbp
    // the library's handle, r13 the memfd (negative: none).
    "xor ebp, ebp",
    // memfd_create(name, MFD_CLOEXEC)
    "lea rdi, [rip + .Lxti_name]",
    "mov esi, 1",
    "mov eax, 319",
    "syscall",
    "mov r13, rax",
    "test rax, rax",
    "js .Lxti_loaded",
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
    "jle .Lxti_loaded",
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
    "mov rbp, rax",
    ".Lxti_loaded:",
    "mov rdi, [rip + .Lxti_lock]",
    "test rdi, rdi",
    "jz .Lxti_unlocked",
    "call qword ptr [rip + .Lxti_unlock]",
    ".Lxti_unlocked:",
    "test rbp, rbp",
    "jz .Lxti_close",
    "mov rdi, rbp",
    "lea rsi, [rip + .Lxti_start]",
    "call qword ptr [rip + .Lxti_dlsym]",
    "test rax, rax",
    "jz .Lxti_close",
    "call rax",
    ".Lxti_close:",
    "test r13, r13",
    "js .Lxti_unmap",
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
    restore_registers!(".Lxti_regs"),
    ".Lxti_prefix:",
    ".ascii \"/proc/self/fd/\"",
    ".Lxti_name:",
    ".asciz \"libxtrace_tool.so\"",
    ".Lxti_start:",
    ".asciz \"xtrace_inject_start\"",
    ".p2align 3",
    ".Lxti_pause: .quad 0, 5000000",
    ".globl xtrace_inject_trampoline_data",
    ".hidden xtrace_inject_trampoline_data",
    "xtrace_inject_trampoline_data:",
    ".Lxti_dlopen: .quad 0",
    ".Lxti_dlsym: .quad 0",
    ".Lxti_lib_addr: .quad 0",
    ".Lxti_lib_len: .quad 0",
    ".Lxti_unmap_addr: .quad 0",
    ".Lxti_unmap_len: .quad 0",
    ".Lxti_trylock: .quad 0",
    ".Lxti_unlock: .quad 0",
    ".Lxti_lock: .quad 0",
    ".Lxti_regs: .fill 18, 8, 0",
    ".globl xtrace_inject_trampoline_end",
    ".hidden xtrace_inject_trampoline_end",
    "xtrace_inject_trampoline_end:",
    ".popsection",
);

extern "C" {
    static xtrace_inject_stage0: u8;
    static xtrace_inject_stage0_handover: u8;
    static xtrace_inject_stage0_data: u8;
    static xtrace_inject_stage0_end: u8;
    static xtrace_inject_trampoline: u8;
    static xtrace_inject_trampoline_report: u8;
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
    /// `pthread_mutex_trylock` and `pthread_mutex_unlock`, and the loader's lock (0: not known,
    /// then not taken).
    pub trylock: u64,
    pub unlock: u64,
    pub load_lock: u64,
    /// The library's bytes (page-aligned, after the code page) and their length.
    pub library: u64,
    pub library_len: u64,
    /// The registers the thread resumes with.
    pub resume: libc::user_regs_struct,
}

/// A blob's bytes, from its first label to its end, and where its values start in them.
fn blob(start: *const u8, data: *const u8, end: *const u8) -> (&'static [u8], usize) {
    let len = end as usize - start as usize;
    // SAFETY: the labels delimit one blob of bytes in a read-only section of this binary.
    let bytes = unsafe { std::slice::from_raw_parts(start, len) };
    (bytes, data as usize - start as usize)
}

fn trampoline_blob() -> (&'static [u8], usize) {
    blob(
        &raw const xtrace_inject_trampoline,
        &raw const xtrace_inject_trampoline_data,
        &raw const xtrace_inject_trampoline_end,
    )
}

fn stage_blob() -> (&'static [u8], usize) {
    blob(
        &raw const xtrace_inject_stage0,
        &raw const xtrace_inject_stage0_data,
        &raw const xtrace_inject_stage0_end,
    )
}

/// The registers in the order the blobs restore them.
fn register_slots(r: &libc::user_regs_struct) -> [u64; 18] {
    [
        r.r15, r.r14, r.r13, r.r12, r.rbp, r.rbx, r.r11, r.r10, r.r9, r.r8, r.rax, r.rcx, r.rdx, r.rsi,
        r.rdi, r.rip, r.eflags, r.rsp,
    ]
}

/// `blob` with `slots` written over its values.
fn filled(blob: (&[u8], usize), slots: &[u64]) -> Vec<u8> {
    let (bytes, data) = blob;
    let mut filled = bytes.to_vec();
    for (i, slot) in slots.iter().enumerate() {
        filled[data + 8 * i..data + 8 * i + 8].copy_from_slice(&slot.to_le_bytes());
    }
    filled
}

/// The code page's bytes, with `values` filled in.
pub fn code_page(values: &Values) -> Vec<u8> {
    let mut slots = vec![
        values.dlopen,
        values.dlsym,
        values.library,
        values.library_len,
        values.library,
        values.library_len.div_ceil(PAGE) * PAGE,
        values.trylock,
        values.unlock,
        values.load_lock,
    ];
    slots.extend(register_slots(&values.resume));
    filled(trampoline_blob(), &slots)
}

/// Where a thread running the trampoline at `code` stands at its report's entry stop: just after
/// that `getpid`, `rdi` 0 when it holds the loader's lock (or none is known) and goes on to load
/// the library, else `pthread_mutex_trylock`'s error (`EBUSY`) and `rsi` the lock's owner, and
/// the thread goes back to its call with nothing loaded.
pub fn report_address(code: u64) -> u64 {
    let start = &raw const xtrace_inject_trampoline;
    let report = &raw const xtrace_inject_trampoline_report;
    code + (report as usize - start as usize) as u64
}

/// Stage 0's length in bytes, its values included.
pub fn stage_len() -> usize {
    stage_blob().0.len()
}

/// Stage 0's code, without its values: what a stage left by an earlier injection starts with.
pub fn stage_code_only() -> &'static [u8] {
    let (bytes, data) = stage_blob();
    &bytes[..data]
}

/// Stage 0's bytes, for a mapping of `size` bytes and a thread that resumes with `resume`.
pub fn stage_code(size: u64, resume: &libc::user_regs_struct) -> Vec<u8> {
    let mut slots = vec![size];
    slots.extend(register_slots(resume));
    filled(stage_blob(), &slots)
}

/// Where a thread running stage 0 at `site` stands at the hand-over's entry stop: its
/// instruction pointer, just after that `syscall`.
pub fn handover_address(site: u64) -> u64 {
    let start = &raw const xtrace_inject_stage0;
    let handover = &raw const xtrace_inject_stage0_handover;
    site + (handover as usize - start as usize) as u64
}

/// What the call of a thread stopped at a system-call entry becomes when xtrace sends the thread
/// elsewhere from there: a `getpid`, made and its result unused, which every seccomp filter
/// allows (stage 0 makes one anyway). Not a skipped call (`orig_rax` -1): seccomp judges the call
/// after the tracer has changed it, and -1 gets a filter's default, a kill or an errno in `rax`.
pub const REPLACED_CALL: u64 = libc::SYS_getpid as u64;

/// The registers that send a thread stopped at a system-call entry with `at_entry` into stage 0
/// at `site`, its call replaced by [`REPLACED_CALL`]: a stack below the red zone.
pub fn stage_registers(at_entry: &libc::user_regs_struct, site: u64) -> libc::user_regs_struct {
    let mut stage = *at_entry;
    stage.rip = site;
    stage.rsp = (at_entry.rsp - 128) & !15;
    stage.orig_rax = REPLACED_CALL;
    stage
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
/// (the two bytes before the instruction pointer) made again with its number. Set by xtrace only
/// at a system call's exit, with no restart for the kernel to make on top (`orig_rax` -1); the
/// blobs restore it without `orig_rax`.
pub fn resume_registers(at_entry: &libc::user_regs_struct) -> libc::user_regs_struct {
    let mut resume = *at_entry;
    resume.rip -= 2;
    resume.rax = at_entry.orig_rax;
    resume.orig_rax = u64::MAX;
    resume
}

/// The registers that start the trampoline at `code` from a thread that resumes with `resume`,
/// stopped at a system-call entry (the hand-over's): a stack below the red zone, with the xsave
/// area of `xsave` bytes at its top; the call made as [`REPLACED_CALL`].
pub fn start_registers(resume: &libc::user_regs_struct, code: u64, xsave: u64) -> libc::user_regs_struct {
    let mut start = *resume;
    // The 128-byte red zone below the interrupted code's stack pointer stays untouched.
    let area = (resume.rsp - 128 - xsave) & !63;
    start.rbx = area;
    start.rsp = (area - 128) & !15;
    start.rip = code;
    // The direction flag clear, as calls expect.
    start.orig_rax = REPLACED_CALL;
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
            trylock: 0xd3,
            unlock: 0xd4,
            load_lock: 0xd5,
            library: 0x10_000,
            library_len: 5000,
            resume,
        });
        let (bytes, data) = trampoline_blob();
        assert_eq!(page.len(), bytes.len());
        assert!(page.len() < PAGE as usize);
        let slot = |i: usize| u64::from_le_bytes(page[data + 8 * i..data + 8 * i + 8].try_into().unwrap());
        assert_eq!(
            (0..9).map(slot).collect::<Vec<_>>(),
            [0xd1, 0xd2, 0x10_000, 5000, 0x10_000, 8192, 0xd3, 0xd4, 0xd5]
        );
        // rip, rflags, rsp: the last three of the eighteen registers.
        assert_eq!(
            [slot(9 + 15), slot(9 + 16), slot(9 + 17)],
            [0x1111, 0x246, 0x2222]
        );
        // The code starts by zeroing the xsave header: `xor eax, eax`.
        assert_eq!(&page[..2], &[0x31, 0xc0]);
    }

    #[test]
    fn the_report_stop_is_just_after_the_trampolines_first_getpid() {
        let code = 0x7f00_0042_0000;
        let offset = (report_address(code) - code) as usize;
        let (bytes, data) = trampoline_blob();
        assert!(offset < data);
        // `mov eax, 39`, then `syscall`: the first getpid in the code.
        let getpid = [0xb8, 39, 0, 0, 0, 0x0f, 0x05];
        assert_eq!(&bytes[offset - 7..offset], &getpid);
        assert!(!bytes[..offset - 7].windows(7).any(|w| w == getpid));
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
        assert_eq!(start.orig_rax, 39);
        assert_eq!(start.eflags, 0x246);
    }

    #[test]
    fn stage_0_holds_the_size_then_the_registers_after_its_code() {
        // SAFETY: as above.
        let mut resume: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        resume.rip = 0x7f00_0000_1000;
        resume.rax = 0; // read, made again
        resume.rsp = 0x7fff_0000_1238;
        let stage = stage_code(0x5000, &resume);
        let (bytes, data) = stage_blob();
        assert_eq!(stage.len(), stage_len());
        assert_eq!(stage.len(), data + 8 * 19);
        assert_eq!(&stage[..data], stage_code_only());
        assert_eq!(&stage[..data], &bytes[..data]);
        let slot = |i: usize| u64::from_le_bytes(stage[data + 8 * i..data + 8 * i + 8].try_into().unwrap());
        assert_eq!(slot(0), 0x5000);
        assert_eq!(
            [slot(1 + 10), slot(1 + 15), slot(1 + 17)],
            [0, 0x7f00_0000_1000, 0x7fff_0000_1238]
        );
        // A few hundred bytes: it fits the padding of nearly every library.
        assert!(stage.len() < 512, "{}", stage.len());
    }

    #[test]
    fn the_hand_over_stop_is_just_after_stage_0s_getpid() {
        let site = 0x7f00_0017_b100;
        let offset = (handover_address(site) - site) as usize;
        let code = stage_code_only();
        assert!(offset < code.len());
        // `mov eax, 39`, then `syscall`.
        assert_eq!(&code[offset - 7..offset], &[0xb8, 39, 0, 0, 0, 0x0f, 0x05]);
    }

    #[test]
    fn a_thread_enters_stage_0_with_its_call_a_getpid_below_its_red_zone() {
        // SAFETY: as above.
        let mut entry: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        entry.rip = 0x7f00_0000_1002;
        entry.rsp = 0x7fff_0000_1238;
        entry.orig_rax = 7; // poll
        entry.rdi = 3;
        let stage = stage_registers(&entry, 0x7f00_0017_b100);
        assert_eq!((stage.rip, stage.orig_rax, stage.rdi), (0x7f00_0017_b100, 39, 3));
        assert_eq!(stage.rsp % 16, 0);
        assert!(stage.rsp + 8 <= entry.rsp - 128);
    }
}
