//! Unit tests of the entry-site search: what the kernel emulates, Go stack checks, and moving
//! past plain instructions.
use super::*;

const START: u64 = 0x1000;

/// [`find_candidate`] on `code` as a whole function at `START`: how many instructions in.
fn past(code: &[u8], kept: &[Register]) -> Option<usize> {
    let function = FunctionSymbol {
        name: "f".into(),
        demangled: "f".into(),
        file_offset: START,
        address: START,
        size: code.len() as u64,
        probe_offset: START,
        returns_twice: false,
        uncalled: false,
        ifunc: Default::default(),
        unit: None,
    };
    find_candidate(code, START, &function, kept).map(|(address, past)| {
        assert!(address > START && address < START + code.len() as u64);
        past
    })
}

const PUSH_RBX: u8 = 0x53;
const MOV_RDI_RAX: [u8; 3] = [0x48, 0x89, 0xf8];

fn then_push(prefix: &[&[u8]]) -> Vec<u8> {
    let mut code: Vec<u8> = prefix.concat();
    code.extend([PUSH_RBX, 0x5b, 0xc3]); // push %rbx; pop %rbx; ret
    code
}

#[test]
fn what_the_kernel_emulates() {
    for bytes in [
        &[0x90][..],
        &[0x0f, 0x1f, 0x44, 0, 0],
        &[0x55],
        &[0x41, 0x57],
        &[0xeb, 0x10],
        &[0xe9, 1, 0, 0, 0],
        &[0xe8, 1, 0, 0, 0],
        &[0x74, 0x05],
        &[0x0f, 0x85, 1, 0, 0, 0],
    ] {
        assert!(emulated(bytes), "{bytes:x?}");
    }
    for bytes in [
        &[0x66, 0xe8, 1, 0][..],                  // callw
        &[0xf2, 0xe9, 1, 0, 0, 0],                // bnd jmp
        &[0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0], // cs nopw
        &[0x48, 0x8d, 0x44, 0x7f, 0x01],          // lea
        &[0xc3],                                  // ret
        &[0x48, 0x50],                            // rex.w push
    ] {
        assert!(!emulated(bytes), "{bytes:x?}");
    }
}

/// Go's stack checks, as `go build` (1.19) writes them: `main.down` and `main.big` of the
/// gocalls fixture.
#[test]
fn go_stack_checks() {
    const SMALL: [u8; 8] = [0x49, 0x3b, 0x66, 0x10, 0x76, 0x51, 0x48, 0x83]; // cmp 0x10(%r14),%rsp; jbe +0x51
    const LARGE: [u8; 14] = [
        0x4c, 0x8d, 0xa4, 0x24, 0x80, 0xfc, 0xff, 0xff, // lea -0x380(%rsp),%r12
        0x4d, 0x3b, 0x66, 0x10, // cmp 0x10(%r14),%r12
        0x76, 0x7c, // jbe +0x7c
    ];
    let end = START + 0x100;
    assert_eq!(go_stack_check(&SMALL, START, end), Some(START + 4));
    assert_eq!(go_stack_check(&LARGE, START, end), Some(START + 12));
    // The morestack call past the function's end, or a branch back: no stack check.
    assert_eq!(go_stack_check(&SMALL, START, START + 0x50), None);
    let backward = [&SMALL[..4], &[0x76, 0xf0]].concat();
    assert_eq!(go_stack_check(&backward, START, end), None);
    // Another field of the goroutine (0x18), or another register than r14.
    assert_eq!(
        go_stack_check(&[0x49, 0x3b, 0x66, 0x18, 0x76, 0x51], START, end),
        None
    );
    assert_eq!(
        go_stack_check(&[0x49, 0x3b, 0x67, 0x10, 0x76, 0x51], START, end),
        None
    );
    // `jb`, not `jbe`; and the large form's compare of the stack pointer itself.
    assert_eq!(
        go_stack_check(&[0x49, 0x3b, 0x66, 0x10, 0x72, 0x51], START, end),
        None
    );
    let mixed = [&LARGE[..8], &SMALL[..6]].concat();
    assert_eq!(go_stack_check(&mixed, START, end), None);
    // A 16 KiB frame (the `jb` and the `jbe` go to the same morestack call).
    const HUGE: [u8; 26] = [
        0x49, 0x89, 0xe4, // mov %rsp,%r12
        0x49, 0x81, 0xec, 0x98, 0x3f, 0x00, 0x00, // sub $0x3f98,%r12
        0x0f, 0x82, 0xca, 0x00, 0x00, 0x00, // jb +0xca
        0x4d, 0x3b, 0x66, 0x10, // cmp 0x10(%r14),%r12
        0x0f, 0x86, 0xc0, 0x00, 0x00, 0x00, // jbe +0xc0
    ];
    assert_eq!(go_stack_check(&HUGE, START, end), Some(START + 20));
    let backward_jb = [&HUGE[..10], &[0x72, 0xf0], &HUGE[16..]].concat();
    assert_eq!(go_stack_check(&backward_jb, START, end), None);
}

#[test]
fn never_onto_a_5_byte_nop() {
    const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0, 0];
    // nop5; mov; push: past both, onto the push.
    assert_eq!(past(&then_push(&[&NOP5, &MOV_RDI_RAX]), &[]), Some(2));
    // mov; nop5; push: past the nop too.
    assert_eq!(past(&then_push(&[&MOV_RDI_RAX, &NOP5]), &[]), Some(2));
    // nop5; lea 1(%rdi),%rax; ret: nothing emulated follows, so the lea after the nop.
    let code = [&NOP5[..], &[0x48, 0x8d, 0x47, 0x01, 0xc3]].concat();
    assert_eq!(past(&code, &[]), Some(1));
    // nop5; syscall: the syscall, after the nop, all the same (the probe is on it, not past it).
    let code = [&NOP5[..], &[0x0f, 0x05, 0xc3]].concat();
    assert_eq!(past(&code, &[]), Some(1));
    // nop5; lock incl (%rdi): the kernel refuses a probe on a locked instruction.
    let code = [&NOP5[..], &[0xf0, 0xff, 0x07, 0xc3]].concat();
    assert_eq!(past(&code, &[]), None);
    // A function that is only a nop5 keeps its entry.
    assert_eq!(past(&NOP5, &[]), None);
}

#[test]
fn moves_past_plain_instructions_to_the_first_emulated_one() {
    assert_eq!(past(&then_push(&[&MOV_RDI_RAX]), &[]), Some(1));
    // mov %fs:0x28,%rax; test %rdi,%rdi; then a jcc instead of the push
    let code = [
        &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0][..],
        &[0x48, 0x85, 0xff],
        &[0x74, 0x01, 0xc3, 0xc3],
    ]
    .concat();
    assert_eq!(past(&code, &[]), Some(2));
    // mov %rdi,-0x8(%rsp): the red zone
    assert_eq!(past(&then_push(&[&[0x48, 0x89, 0x7c, 0x24, 0xf8]]), &[]), Some(1));
}

#[test]
fn stays_where_moving_could_change_a_span() {
    // Already emulated.
    assert_eq!(past(&then_push(&[]), &[]), None);
    // sub $0x8,%rsp writes the stack pointer.
    assert_eq!(past(&then_push(&[&[0x48, 0x83, 0xec, 0x08]]), &[]), None);
    // mov %rdi,(%rsp) and mov %rdi,0x8(%rsp): the return address and the caller's frame.
    assert_eq!(past(&then_push(&[&[0x48, 0x89, 0x3c, 0x24]]), &[]), None);
    assert_eq!(past(&then_push(&[&[0x48, 0x89, 0x7c, 0x24, 0x08]]), &[]), None);
    // add $2,%rdi with the first argument captured; not when it is not.
    let code = then_push(&[&[0x48, 0x83, 0xc7, 0x02]]);
    assert_eq!(past(&code, &[Register::RDI]), None);
    assert_eq!(past(&code, &[]), Some(1));
    // With an argument captured, a store through a pointer (movb $0,(%rdi)) could change the
    // string read at entry; a store into the red zone cannot.
    let code = then_push(&[&[0xc6, 0x07, 0x00]]);
    assert_eq!(past(&code, &[Register::RDI]), None);
    assert_eq!(past(&code, &[]), Some(1));
    let red = then_push(&[&[0x48, 0x89, 0x7c, 0x24, 0xf8]]);
    assert_eq!(past(&red, &[Register::RDI]), Some(1));
    // mov %rsp,%rax and lea 0x8(%rsp),%rax copy the stack pointer.
    assert_eq!(past(&then_push(&[&[0x48, 0x89, 0xe0]]), &[]), None);
    assert_eq!(past(&then_push(&[&[0x48, 0x8d, 0x44, 0x24, 0x08]]), &[]), None);
    // mov -0x8(%rsp),%rax loads through it: plain.
    assert_eq!(past(&then_push(&[&[0x48, 0x8b, 0x44, 0x24, 0xf8]]), &[]), Some(1));
    // Go's stack check, cmp 0x10(%r14),%rsp, and test %rsp,%rsp only read it.
    assert_eq!(past(&then_push(&[&[0x49, 0x3b, 0x66, 0x10]]), &[]), Some(1));
    assert_eq!(past(&then_push(&[&[0x48, 0x85, 0xe4]]), &[]), Some(1));
    // With Go's first argument (rax) captured, mov %rdi,%rax may not be moved past.
    assert_eq!(past(&then_push(&[&MOV_RDI_RAX]), &GO_ARGS[..1]), None);
    // mov %edi,%edi writes RDI too (its 32-bit half).
    assert_eq!(past(&then_push(&[&[0x89, 0xff]]), &[Register::RDI]), None);
    // lock incl (%rdi); syscall; rep stos; cpuid; mov %eax,%ss.
    for prefix in [
        &[0xf0, 0xff, 0x07][..],
        &[0x0f, 0x05],
        &[0xf3, 0x48, 0xab],
        &[0x0f, 0xa2],
        &[0x8e, 0xd0],
    ] {
        assert_eq!(past(&then_push(&[prefix]), &[]), None, "{prefix:x?}");
    }
    // A ret before anything emulated.
    assert_eq!(past(&[0x48, 0x89, 0xf8, 0xc3], &[]), None);
    // More than MAX_PREFIX instructions first.
    let many = vec![&MOV_RDI_RAX[..]; MAX_PREFIX + 1];
    assert_eq!(past(&then_push(&many), &[]), None);
    let most = vec![&MOV_RDI_RAX[..]; MAX_PREFIX];
    assert_eq!(past(&then_push(&most), &[]), Some(MAX_PREFIX));
    // The function ends first (its size cuts the push off).
    assert_eq!(past(&MOV_RDI_RAX, &[]), None);
}
