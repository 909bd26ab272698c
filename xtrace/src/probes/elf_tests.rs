//! Unit tests of [`super::ElfSymbols`]: offsets, versions, source files, close names and refused files.
/// A damaged header (a segment or symbol size of 2^64 - 1) gives no offset past the address
/// space and no size past its segment.
#[test]
fn damaged_sizes_are_no_sizes() {
    use super::{fitting, segment_offset};
    let segments = [(0x1000, 0x2000, 0x1000), (0x4000, u64::MAX, u64::MAX)];
    assert_eq!(segment_offset(&segments, 0x1800), Some((0x1800, 0x1800)));
    assert_eq!(segment_offset(&segments, 0x3000), None);
    assert_eq!(segment_offset(&segments, 0x4001), None, "its offset is past 2^64");
    assert_eq!(segment_offset(&segments, 0x4000), Some((u64::MAX, u64::MAX)));
    assert_eq!(fitting(0x1800, 0x1800, 0x1800), 0x1800);
    assert_eq!(fitting(0x1800, 0x1801, 0x1800), 0, "past its segment");
    assert_eq!(fitting(u64::MAX - 4, 8, u64::MAX), 0, "past the address space");
}

/// glibc defines `realpath` twice: `realpath@@GLIBC_2.3` (the default) and the older
/// `realpath@GLIBC_2.2.5`. The plain name is the default one; the older one keeps its version.
#[test]
fn versioned_functions_are_named_apart() {
    let libc = std::path::PathBuf::from(crate::test_libc());
    let symbols = super::ElfSymbols::read(&libc, &libc, &Default::default()).unwrap();
    let plain = symbols.find("realpath").unwrap();
    assert_eq!(plain.len(), 1, "{plain:?}");
    assert_eq!(plain[0].name, "realpath");
    let old = symbols.find("realpath@GLIBC_2.2.5").unwrap();
    assert_eq!(old.len(), 1, "{old:?}");
    assert_ne!(old[0].file_offset, plain[0].file_offset);
    assert_eq!(symbols.find("realpath*").unwrap().len(), 2);
}

/// A local function is known by the source file its `STT_FILE` entry names: libc's static
/// `free_mem`s (from its debug file, libc6-dbg) each by their own; a global one by none.
#[test]
fn local_functions_know_their_source_file() {
    let libc = std::path::PathBuf::from(crate::test_libc());
    let symbols = super::ElfSymbols::read(&libc, &libc, &Default::default()).unwrap();
    let found = symbols.find("free_mem").unwrap();
    let units: std::collections::BTreeSet<&str> = found.iter().filter_map(|f| f.unit.as_deref()).collect();
    assert!(found.len() > 1 && units.len() == found.len(), "{found:?}");
    assert!(units.contains("setenv.c"), "{units:?}");
    assert_eq!(symbols.find("malloc").unwrap()[0].unit, None);
}

/// The index by name finds, for names of every kind (mangled, demangled, without parameters or
/// clone suffixes, bare), the functions a comparison with every function's names finds.
#[test]
fn the_index_by_name_finds_what_comparing_every_name_finds() {
    // C++ names where libstdc++ is installed; C ones in libc, which this test maps.
    let files = [
        String::from("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),
        crate::test_libc(),
    ];
    for path in files.map(std::path::PathBuf::from).iter().filter(|p| p.exists()) {
        let symbols = ElfSymbols::read(path, path, &Default::default()).unwrap();
        let mut looked_up = 0;
        for function in symbols.functions.iter().step_by(97) {
            for name in names(function) {
                let scanned: Vec<_> = symbols
                    .functions
                    .iter()
                    .filter(|f| names(f).any(|n| n == name))
                    .collect();
                let indexed = symbols.named(&name);
                assert!(!indexed.is_empty(), "{name}");
                assert_eq!(indexed.len(), scanned.len(), "{name}");
                assert!(
                    indexed.iter().zip(&scanned).all(|(a, b)| std::ptr::eq(*a, *b)),
                    "{name}"
                );
                looked_up += 1;
            }
        }
        assert!(
            looked_up >= 4 * (symbols.functions.len() / 97),
            "{}",
            path.display()
        );
    }
}

#[test]
fn code_entered_without_a_return_address_is_known() {
    // This test binary's entry point, by name and by the ELF header; main is called.
    let symbols = own();
    let named = |name: &str| symbols.functions.iter().find(|f| f.name == name).unwrap();
    assert!(named("_start").uncalled);
    assert!(!named("main").uncalled);
    assert!(!named("xtrace_elf_test_function").uncalled);
}

use super::*;

#[no_mangle]
#[inline(never)]
pub extern "C" fn xtrace_elf_test_function(x: u64) -> u64 {
    std::hint::black_box(x + 1)
}

fn own() -> ElfSymbols {
    let exe = std::env::current_exe().unwrap();
    ElfSymbols::read(&exe, &exe, &Default::default()).unwrap()
}

#[test]
fn finds_own_function_at_its_file_offset() {
    std::hint::black_box(xtrace_elf_test_function(1));
    let symbols = own();
    let found = symbols.find("xtrace_elf_test_function").unwrap();
    assert_eq!(found.len(), 1);
    let (name, offset) = (&found[0].demangled, &found[0].probe_offset);
    assert_eq!(name, "xtrace_elf_test_function");
    // The bytes at the offset are the function's machine code as loaded in memory.
    let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let code = xtrace_elf_test_function as *const u8;
    // SAFETY: reading 8 bytes of our own function's code.
    let in_memory = unsafe { std::slice::from_raw_parts(code, 8) };
    assert_eq!(&data[*offset as usize..*offset as usize + 8], in_memory);
}

#[test]
fn suggests_close_names() {
    let err = own().find("xtrace_elf_test_functoin").unwrap_err().to_string();
    assert!(err.contains("did you mean: xtrace_elf_test_function"), "{err}");
    assert!(!err.contains('\n'));
}

#[test]
fn rejects_non_elf_and_directories() {
    let dir = std::env::temp_dir().join(format!("xtrace-elf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = dir.join("text");
    std::fs::write(&text, "hello").unwrap();
    assert!(matches!(
        ElfSymbols::read(&text, &text, &Default::default()),
        Err(Error::NotElf { .. })
    ));
    let truncated = dir.join("truncated");
    let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    std::fs::write(&truncated, &exe[..100]).unwrap();
    assert!(matches!(
        ElfSymbols::read(&truncated, &truncated, &Default::default()),
        Err(Error::NotElf { .. })
    ));
    assert!(matches!(
        ElfSymbols::read(&dir, &dir, &Default::default()),
        Err(Error::NotAFile {
            what: "directory",
            ..
        })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tells_code_that_throws_from_c_with_exception_tables() {
    // This test binary is Rust with panic=unwind; libc has .gcc_except_table for thread
    // cancellation, with C's personality routine.
    assert!(own().cxx_exceptions);
    let libc = PathBuf::from(crate::test_libc());
    let symbols = ElfSymbols::read(&libc, &libc, &Default::default()).unwrap();
    assert!(!symbols.cxx_exceptions, "{}", libc.display());
}
