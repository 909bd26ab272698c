//! Property tests of the USDT parsers on hostile input: argument strings (the corpus in
//! `corpus/args.txt`, mutated, and arbitrary text) and note sections (arbitrary bytes, and real
//! notes cut and corrupted). Neither parser may panic; whatever parses must have the limits the
//! kernel program relies on. proptest keeps failing cases in `proptest-regressions/`.
use proptest::prelude::*;
use xtrace_common::usdt::{arg_kind, MAX_USDT_ARGS, NO_REG};

use super::{args::parse_args, notes::read_notes};

const CORPUS: &str = include_str!("corpus/args.txt");

/// What every parsed argument must satisfy for the kernel program.
fn check_args(text: &str) {
    let Ok(specs) = parse_args(text) else { return };
    assert!(specs.len() <= MAX_USDT_ARGS);
    for spec in specs {
        assert!(matches!(spec.size, 1 | 2 | 4 | 8), "{text:?}");
        if let Ok(arg) = spec.to_kernel(xtrace_common::usdt::string_kind::C) {
            assert!(matches!(
                arg.kind,
                arg_kind::CONST | arg_kind::REG | arg_kind::MEM
            ));
            // NO_REG: a memory operand without a base register (`sym(,%rdi,4)`).
            let base_ok =
                (arg.kind == arg_kind::MEM && arg.reg == NO_REG) || (arg.reg <= 160 && arg.reg % 8 == 0);
            assert!(base_ok, "{text:?}: {arg:?}");
            assert!(arg.index_reg == NO_REG || (arg.index_reg <= 160 && arg.index_reg % 8 == 0));
            assert!(matches!(arg.scale, 1 | 2 | 4 | 8));
            assert!(matches!(arg.size, 1 | 2 | 4 | 8));
        }
    }
}

#[test]
fn corpus_parses_or_fails_cleanly() {
    let outcomes: Vec<bool> = CORPUS
        .lines()
        .map(|line| {
            check_args(line);
            parse_args(line).is_ok()
        })
        .collect();
    // Valid up to the empty line (symbol-relative operands parse; reading them is refused later),
    // invalid after it.
    let blank = CORPUS
        .lines()
        .position(str::is_empty)
        .expect("corpus has a blank separator");
    let invalid: Vec<&str> = CORPUS
        .lines()
        .zip(&outcomes)
        .take(blank)
        .filter(|(_, ok)| !**ok)
        .map(|(l, _)| l)
        .collect();
    assert!(invalid.is_empty(), "lines that should parse: {invalid:?}");
    let valid: Vec<&str> = CORPUS
        .lines()
        .zip(&outcomes)
        .skip(blank + 1)
        .filter(|(_, ok)| **ok)
        .map(|(l, _)| l)
        .collect();
    assert!(valid.is_empty(), "lines that should not parse: {valid:?}");
}

fn corpus_line() -> impl Strategy<Value = String> {
    let lines: Vec<String> = CORPUS.lines().map(str::to_string).collect();
    proptest::sample::select(lines)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,80}") {
        check_args(&text);
    }

    #[test]
    fn mutated_corpus_never_panics(line in corpus_line(), at in 0usize..120, insert in "[-+$%@(),0-9a-z ]{0,4}", cut in 0usize..4) {
        let mut chars: Vec<char> = line.chars().collect();
        let at = at.min(chars.len());
        let end = (at + cut).min(chars.len());
        chars.splice(at..end, insert.chars());
        check_args(&chars.into_iter().collect::<String>());
    }

    #[test]
    fn arbitrary_bytes_as_an_elf_file_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let elf = crate::elf::Elf::from_bytes(bytes);
        let _ = elf.parse().map(|file| read_notes(&file));
    }

    #[test]
    fn corrupted_notes_never_panic(offset in 0usize..512, value in any::<u8>(), cut in 0usize..8192) {
        // A real ELF file with USDT notes, one byte of its notes changed, its end cut off.
        let Some((elf, notes)) = notes_elf() else { return Ok(()) };
        let mut elf = elf.clone();
        let target = (notes + offset).min(elf.len() - 1);
        elf[target] = value;
        let keep = elf.len().saturating_sub(cut);
        let elf = crate::elf::Elf::from_bytes(elf[..keep].to_vec());
        let _ = elf.parse().map(|file| read_notes(&file));
    }
}

/// libstdc++ (which carries `libstdcxx:*` notes) and the file offset of its first note, read once;
/// None where it is not installed.
fn notes_elf() -> Option<&'static (Vec<u8>, usize)> {
    static ELF: std::sync::OnceLock<Option<(Vec<u8>, usize)>> = std::sync::OnceLock::new();
    ELF.get_or_init(|| {
        let elf = std::fs::read("/usr/lib/x86_64-linux-gnu/libstdc++.so.6").ok()?;
        let notes = elf.windows(8).position(|w| w == b"stapsdt\0")?.saturating_sub(12);
        Some((elf, notes))
    })
    .as_ref()
}
