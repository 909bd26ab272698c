//! Unit tests of [`super`]: return-address restoring, stack trimming, /proc maps and perf maps.
use super::*;

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

/// Once its process is gone, a mapping is named from the file at its path only when that is
/// the file mapped (another mount namespace saw another file there).
#[test]
fn a_gone_process_is_named_from_its_own_file_only() {
    use std::os::unix::fs::MetadataExt;
    let path = "/proc/self/exe";
    let meta = std::fs::metadata(path).unwrap();
    let gone = u32::MAX;
    let mapping = |file| Mapping {
        start: 0x1000,
        end: 0x2000,
        offset: 0,
        path: path.into(),
        deleted: false,
        file,
    };
    let own = mapping(Some((meta.dev(), meta.ino())));
    assert_eq!(own.open_path(gone).as_deref(), Some(path));
    assert_eq!(mapping(None).open_path(gone).as_deref(), Some(path));
    let other = mapping(Some((meta.dev(), meta.ino() + 1)));
    assert_eq!(other.open_path(gone), None);
}

#[test]
fn executable_mappings_only() {
    let text = "\
55d0a000-55d0b000 r--p 00000000 08:01 123 /usr/bin/app
55d0b000-55d0c000 r-xp 00001000 08:01 123 /usr/bin/app
7f00000-7f10000 r-xp 00028000 08:01 456 /lib/libc.so.6
7ffd000-7ffe000 r-xp 00000000 00:00 0 [vdso]
7fff000-8000000 rw-p 00000000 00:00 0 [stack]
";
    let maps = parse_maps(text);
    assert_eq!(maps.len(), 3);
    assert_eq!(
        maps[0],
        Mapping {
            start: 0x55d0b000,
            end: 0x55d0c000,
            offset: 0x1000,
            path: "/usr/bin/app".into(),
            deleted: false,
            file: Some((libc::makedev(8, 1), 123)),
        }
    );
    assert_eq!(maps[2].path, "[vdso]");
    assert_eq!(maps[2].file, None);
    assert_eq!(
        find(&maps, 0x7f00010).map(|m| m.path.as_str()),
        Some("/lib/libc.so.6")
    );
    assert!(find(&maps, 0x1).is_none());
}

/// A deleted (or replaced) file is opened as mapped while its process lives, never by its
/// path, where another file or none is now.
#[test]
fn a_deleted_file_is_opened_as_mapped_or_not_at_all() {
    let maps = parse_maps("55d0b000-55d0c000 r-xp 00001000 08:01 123 /opt/my app/libx.so (deleted)\n");
    assert_eq!(
        (maps[0].path.as_str(), maps[0].deleted),
        ("/opt/my app/libx.so", true)
    );
    // This process maps its own executable: the same mapping, marked deleted.
    let own = std::fs::read_to_string("/proc/self/maps").unwrap();
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let mut mine = parse_maps(&own)
        .into_iter()
        .find(|m| std::path::Path::new(&m.path) == exe)
        .unwrap();
    let pid = std::process::id();
    assert_eq!(
        mine.open_path(pid),
        Some(format!("/proc/{pid}/root{}", mine.path))
    );
    mine.deleted = true;
    let mapped = format!("/proc/{pid}/map_files/{:x}-{:x}", mine.start, mine.end);
    assert_eq!(mine.open_path(pid), Some(mapped));
    assert_eq!(mine.open_path(u32::MAX), None, "its process is gone");
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
