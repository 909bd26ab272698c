//! Unit tests of [`super`]: return-address restoring, stack trimming and perf maps.
use super::*;
use crate::procfs::parse_maps;

#[test]
fn return_addresses_go_back_only_over_the_trampoline() {
    let maps = parse_maps("7fffffffe000-7ffffffff000 r-xp 00000000 00:00 0 [uprobes]\n");
    let sp = 0x7ffd_0000_1000u64;
    let word = |stack: &[u8], at: usize| u64::from_le_bytes(stack[at..at + 8].try_into().unwrap());
    let mut stack = vec![0u8; 64];
    stack[8..16].copy_from_slice(&0x7fff_ffff_e000u64.to_le_bytes()); // the trampoline
    stack[24..32].copy_from_slice(&0x1234u64.to_le_bytes()); // reused since: left alone
    stack[40..48].copy_from_slice(&0x7fff_ffff_e000u64.to_le_bytes()); // shared by a tail call
    let returns = [
        [sp + 8, 0x5555_0000_1111],
        [sp + 24, 0x5555_0000_2222],
        [sp + 40, 0x7fff_ffff_e000], // the callee found the trampoline already there
        [sp + 40, 0x5555_0000_3333], // the caller, written last
        [sp + 60, 0x5555_0000_4444], // past the copy
        [sp - 8, 0x5555_0000_5555],  // below the stack pointer
    ];
    restore_returns(&maps, sp, &returns, &mut stack);
    assert_eq!(word(&stack, 8), 0x5555_0000_1111);
    assert_eq!(word(&stack, 24), 0x1234);
    assert_eq!(word(&stack, 40), 0x5555_0000_3333);
    // Without the trampoline's mapping nothing is touched.
    let mut untouched = vec![0u8; 16];
    untouched[8..16].copy_from_slice(&0x7fff_ffff_e000u64.to_le_bytes());
    restore_returns(&[], sp, &returns, &mut untouched);
    assert_eq!(word(&untouched, 8), 0x7fff_ffff_e000);
}

#[test]
fn user_stacks_end_at_the_first_frame_that_cannot_be_code() {
    assert_eq!(
        code_frames(&[0x5555_0000_1000, 0x7f00_0000_2000, 0x2]),
        [0x5555_0000_1000, 0x7f00_0000_2000]
    );
    assert_eq!(
        code_frames(&[0x40_1000, 0x6572_2d70_6970_006a, 0x40_2000]),
        [0x40_1000]
    );
    assert_eq!(code_frames(&[0x1_0000, HIGHEST_USER]), [0x1_0000, HIGHEST_USER]);
    assert!(code_frames(&[0xffff]).is_empty());
}

#[test]
fn a_frame_pointer_walk_ends_at_its_first_caller_outside_the_code() {
    let maps = [Mapping {
        start: 0x7f00_0000_1000,
        end: 0x7f00_0002_6000,
        offset: 0x1000,
        path: "/lib/ld.so".into(),
        deleted: false,
        file: None,
    }];
    // The interrupted instruction is kept wherever it is; the walk stops at ld.so's data.
    let frames = [
        0x7f00_0000_2000,
        0x7f00_0000_3000,
        0x7f00_0003_18a7,
        0x7f00_0000_4000,
    ];
    assert_eq!(mapped_callers(&maps, &frames), &frames[..2]);
    assert_eq!(mapped_callers(&maps, &[0x1234_5000]), [0x1234_5000]);
    assert_eq!(mapped_callers(&maps, &frames[..2]), &frames[..2]);
    assert!(mapped_callers(&maps, &[]).is_empty());
}

/// An unwound stack whose walk by frame pointer read data (`0x10097cdd`, in no mapping) ends
/// before it and is cut short; a whole one is kept whole.
#[test]
fn an_unwound_stack_ends_at_a_caller_outside_the_code() {
    let maps = [Mapping {
        start: 0x5555_0000_0000,
        end: 0x5555_0001_0000,
        offset: 0,
        path: "/usr/bin/app".into(),
        deleted: false,
        file: None,
    }];
    let whole = [0x5555_0000_1000, 0x5555_0000_2000, 0x5555_0000_3000];
    assert_eq!(unwound_callers(&maps, &whole, false), (&whole[..], false));
    assert_eq!(unwound_callers(&maps, &whole, true), (&whole[..], true));
    let junk = [0x5555_0000_1000, 0x5555_0000_2000, 0x1009_7cdd, 0x5555_0000_3000];
    assert_eq!(unwound_callers(&maps, &junk, false), (&junk[..2], true));
    // Past the outermost frame, a value that cannot be code ends it too, not cut short.
    let argc = [0x5555_0000_1000, 0x5555_0000_2000, 3];
    assert_eq!(unwound_callers(&maps, &argc, false), (&argc[..2], false));
}

#[test]
fn perf_maps() {
    let symbols =
        parse_perf_map("7f0000001000 40 jit_add\n0x7f0000002000 0x10 LazyCompile:*foo bar.js:1\nbad\n");
    assert_eq!(symbols.len(), 2);
    assert_eq!(symbols[1].name, "LazyCompile:*foo bar.js:1");
    assert_eq!(
        find_jit(&symbols, 0x7f000000103f).map(|s| s.name.as_str()),
        Some("jit_add")
    );
    assert!(find_jit(&symbols, 0x7f0000001040).is_none());
    assert!(find_jit(&symbols, 0x7f0000000fff).is_none());
    assert_eq!(find_jit(&symbols, 0x7f000000200f).map(|s| s.size), Some(0x10));
}
