//! The demangled names of [`ElfSymbols`] against c++filt's (binutils), over every function symbol
//! of libstdc++ and libLLVM 14: the names `crate::demangle` is to write as c++filt writes them.
//! Needs `binutils` and `libllvm14` (`cargo xtask setup` installs them); where they are missing
//! the test is skipped, except under CI (`CI=true`, or `XTRACE_REQUIRE_BPF=1`), where it fails.
use std::{
    collections::BTreeMap,
    io::Write,
    path::Path,
    process::{Command, Stdio},
};

use super::ElfSymbols;

/// Names whose difference from c++filt is known and accepted, with why: none at present. Add a
/// mangled name here only with the reason its difference is right or cannot be helped.
const EXPLAINED: &[(&str, &str)] = &[];

const LIBRARIES: [&str; 2] = [
    "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
    "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1",
];

fn in_ci() -> bool {
    let set = |var: &str, values: &[&str]| {
        std::env::var(var).is_ok_and(|v| values.iter().any(|x| v.eq_ignore_ascii_case(x)))
    };
    set("CI", &["true", "1"]) || set("XTRACE_REQUIRE_BPF", &["1"])
}

/// False, with a notice, where `what` is missing outside CI; a failure under CI.
fn present(found: bool, what: &str) -> bool {
    if !found {
        assert!(!in_ci(), "{what} is missing; run `cargo xtask setup`");
        eprintln!("skipping: {what} is missing; `cargo xtask setup` installs it");
    }
    found
}

/// c++filt's text of each of `names`, in one run.
fn cxxfilt(names: &[&str]) -> Option<Vec<String>> {
    let mut child = Command::new("c++filt")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let input = names.join("\n") + "\n";
    let mut stdin = child.stdin.take()?;
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().ok()?;
    writer.join().ok()?.ok()?;
    let shown: Vec<String> = String::from_utf8(output.stdout)
        .ok()?
        .lines()
        .map(String::from)
        .collect();
    (output.status.success() && shown.len() == names.len()).then_some(shown)
}

#[test]
fn demangled_names_are_cxxfilts() {
    let tool = Command::new("c++filt").arg("--version").output();
    if !present(tool.is_ok_and(|o| o.status.success()), "c++filt (binutils)") {
        return;
    }
    let mut differ = Vec::new();
    let mut checked = 0;
    for library in LIBRARIES {
        if !present(Path::new(library).exists(), library) {
            continue;
        }
        let symbols = ElfSymbols::read(Path::new(library), Path::new(library), &Default::default()).unwrap();
        let names: BTreeMap<&str, &str> = symbols
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.demangled.as_str()))
            .collect();
        let mangled: Vec<&str> = names.keys().copied().collect();
        let shown = cxxfilt(&mangled).expect("c++filt runs on the names");
        checked += mangled.len();
        for (name, want) in mangled.iter().zip(&shown) {
            let got = names[name];
            if got != want && !EXPLAINED.iter().any(|(known, _)| known == name) {
                differ.push(format!("{library}: {name}\n  xtrace:  {got}\n  c++filt: {want}"));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {checked} names differ from c++filt's:\n{}",
        differ.len(),
        differ.join("\n")
    );
}
