//! Every user-facing error variant is documented in docs/reference/errors.md.
//!
//! The variant names of `pub enum Error` in xtrace/src/error.rs, xtrace/src/analysis/mod.rs,
//! xtrace/src/store/mod.rs and xtrace/src/inject/mod.rs are
//! read from the source text (no build of the library is needed for it), and each must appear in
//! the reference page as `` `Name` ``. The expected counts are exact: a new variant, or a change
//! in the source that this small parser misreads, fails here until the counts (and the page) are
//! brought up to date.
use std::path::{Path, PathBuf};

/// The enums whose messages reach the user, with the number of variants each has today.
const ENUMS: &[(&str, &str, usize)] = &[
    ("src/error.rs", "pub enum Error", 63),
    ("src/inject/mod.rs", "pub enum Error", 10),
    ("src/analysis/mod.rs", "pub enum Error", 12),
    ("src/store/mod.rs", "pub enum Error", 10),
];

/// The reference page, relative to the workspace root.
const ERRORS_DOC: &str = "docs/reference/errors.md";

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The variant names of the enum whose declaration starts with `declaration` in `source`.
///
/// Walks the enum's body character by character, skipping comments and string literals and
/// tracking bracket depth, so that attributes spanning several lines (`#[error(\n "...",\n)]`),
/// struct variants (`Name { field: T }`) and tuple variants (`Name(#[from] T)`) are all read
/// alike: a variant name is the first identifier at the body's own depth after the opening brace
/// or after a comma at that depth.
fn variants(source: &str, declaration: &str) -> Vec<String> {
    let start = source
        .find(&format!("{declaration} {{"))
        .unwrap_or_else(|| panic!("`{declaration} {{` not found"));
    let body = &source[start + declaration.len()..];
    let body = &body[body.find('{').expect("enum body") + 1..];
    let chars: Vec<char> = body.chars().collect();
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut expect_variant = true;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            // Line comments, doc comments included.
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            // Block comments.
            '/' if next == Some('*') => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
                continue;
            }
            // Raw strings: r"..." and r#"..."#.
            'r' if matches!(next, Some('"' | '#')) && !prev_is_ident(&chars, i) => {
                let mut j = i + 1;
                let mut hashes = 0;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) == Some(&'"') {
                    j += 1;
                    let closing: Vec<char> = std::iter::once('"')
                        .chain(std::iter::repeat_n('#', hashes))
                        .collect();
                    while j < chars.len() && !chars[j..].starts_with(&closing) {
                        j += 1;
                    }
                    i = j + closing.len();
                    continue;
                }
            }
            // Plain strings, with their escapes.
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                continue;
            }
            '(' | '[' | '{' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            '}' if depth == 0 => return names,
            '}' => depth -= 1,
            ',' if depth == 0 => expect_variant = true,
            c if depth == 0 && expect_variant && (c.is_alphabetic() || c == '_') => {
                let mut j = i;
                while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                    j += 1;
                }
                names.push(chars[i..j].iter().collect());
                expect_variant = false;
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    panic!("the body of `{declaration}` does not end");
}

fn prev_is_ident(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

#[test]
fn parser_reads_every_variant_form() {
    let source = r##"
pub enum Error {
    /// A doc comment, with a comma, and `Backticks`.
    #[error("unit: {a}, {b}")]
    Unit,
    #[error(
        "spanning lines, with } and ) and ] in it: {0}"
    )]
    Tuple(#[from] std::io::Error),
    #[error("struct {x}")]
    Struct {
        x: u32,
        y: &'static str,
    },
    // A comment, Fake, naming no variant.
    #[error(r#"raw, "quoted", with } and ) in it"#)]
    Last { z: Vec<(u8, u8)> }
}
pub enum Other { Ignored }
"##;
    assert_eq!(
        variants(source, "pub enum Error"),
        ["Unit", "Tuple", "Struct", "Last"]
    );
}

#[test]
fn every_error_is_documented() {
    let manifest = manifest_dir();
    let doc_path = manifest.join("..").join(ERRORS_DOC);
    let doc = read(&doc_path);
    let mut missing = Vec::new();
    for (file, declaration, expected) in ENUMS {
        let names = variants(&read(&manifest.join(file)), declaration);
        assert_eq!(
            names.len(),
            *expected,
            "xtrace/{file}: `{declaration}` has {} variants ({}), not the {expected} this test \
             expects: document any new variant in {ERRORS_DOC} and update the count in \
             xtrace/tests/errors_doc.rs (or fix the parser if it misread the enum)",
            names.len(),
            names.join(", ")
        );
        missing.extend(
            names
                .into_iter()
                .filter(|name| !doc.contains(&format!("`{name}`")))
                .map(|name| format!("{name} (xtrace/{file})")),
        );
    }
    assert!(
        missing.is_empty(),
        "error variants missing from {ERRORS_DOC}: {}; document them in {ERRORS_DOC} (their \
         message, cause and fix), naming each as `Name` in backticks",
        missing.join(", ")
    );
}
