//! Symbol globs: one `-u` pattern attaches hundreds of functions through one kernel program (told
//! apart by the attach cookie), aliases attach once, demangled C++ names match, and
//! `xtrace list symbols` prints exactly what `-u` attaches. Bad input: a glob matching nothing,
//! more matches than --max-probes, a stripped file. Fixtures: `many` (glob_fn_K called K % 5 + 1
//! times, other_fn 4 times, glob_fn_alias = glob_fn_000) and `matrix` (C++).

use std::{ffi::OsString, path::Path, process::Command};

use xtrace_tests::{
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{run_error, trace_new_fixture, Xtrace},
    TempDir,
};

fn trace(program: &Path, probes: &[&str], label: &str) -> Outputs {
    trace_new_fixture(program, &[], probes, label).0
}

/// `xtrace list symbols ARGS...`: (exit code, stdout rows without the header, stderr).
fn list(args: &[&str]) -> (Option<i32>, Vec<String>, String) {
    let mut argv = xtrace_tests::args!["list", "symbols"];
    argv.extend(args.iter().map(OsString::from));
    let finished = Xtrace::spawn(argv).wait();
    let rows = finished.stdout.lines().skip(1).map(str::to_owned).collect();
    (finished.status.code(), rows, finished.stderr.join("\n"))
}

fn probe_names(out: &Outputs) -> Vec<String> {
    let mut names: Vec<String> = out.summary["probes"]
        .as_array()
        .expect("probes array")
        .iter()
        .map(|p| p["name"].as_str().expect("probe name").to_owned())
        .collect();
    names.sort();
    names
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn one_glob_attaches_every_function_with_exact_counts() {
    if !require_bpf() {
        return;
    }
    let out = trace(&fixtures().many, &["glob_fn_*"], "glob-many");
    let expected: Vec<String> = (0..300).map(|k| format!("glob_fn_{k:03}")).collect();
    assert_eq!(
        probe_names(&out),
        expected,
        "one probe per function, the alias attached once"
    );
    for k in 0..300u64 {
        assert_eq!(
            out.probe_count(&format!("glob_fn_{k:03}")),
            k % 5 + 1,
            "glob_fn_{k:03}"
        );
    }
    let total: u64 = (0..300u64).map(|k| k % 5 + 1).sum();
    assert_eq!(out.spans().len() as u64, total);
    assert_eq!(u64_field(&out.summary, "uprobes"), 600);
    assert_eq!(out.summary["attach_mechanism"], "uprobe_multi");
    assert_eq!(out.lost_events(), 0);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn demangled_cpp_glob() {
    if !require_bpf() {
        return;
    }
    let out = trace(&fixtures().matrix, &["ns::Matrix::*"], "glob-cpp");
    assert_eq!(
        probe_names(&out),
        [
            "ns::Matrix::add(ns::Matrix const&)",
            "ns::Matrix::scale(long)",
            "ns::Matrix::trace() const"
        ]
    );
    assert_eq!(out.probe_count("ns::Matrix::add(ns::Matrix const&)"), 3);
    assert_eq!(out.probe_count("ns::Matrix::scale(long)"), 5);
    assert_eq!(out.probe_count("ns::Matrix::trace() const"), 2);
    assert_eq!(out.spans().len(), 10);
}

/// GCC moves a function's unlikely paths (here the exception paths) into a `.cold` part that the
/// function jumps to. It is no function: probing it would put a return probe on a word that is
/// no return address. Neither `-u` nor `list symbols` offers it, and tracing the function whose
/// cold part holds its catch block counts every call.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cold_parts_of_split_functions_are_not_functions() {
    if !require_bpf() {
        return;
    }
    let matrix = fixtures().matrix_o2.to_str().expect("UTF-8 path").to_owned();
    let (code, rows, stderr) = list(&[&matrix, "*er(int)*"]);
    assert_eq!(code, Some(0), "{stderr}");
    let mut names: Vec<&str> = rows.iter().filter_map(|r| r.split_whitespace().nth(4)).collect();
    names.sort_unstable();
    assert_eq!(names, ["catcher(int)", "thrower(int)"], "{rows:?}");
    let out = trace(&fixtures().matrix_o2, &["catcher"], "glob-cold");
    assert_eq!(probe_names(&out), ["catcher(int)"]);
    assert_eq!(out.probe_count("catcher(int)"), 4);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn list_symbols_shows_what_uprobe_attaches() {
    if !require_bpf() {
        return;
    }
    let many = fixtures().many.to_str().expect("UTF-8 path").to_owned();
    let (code, rows, stderr) = list(&[&many, "glob_fn_*"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(rows.len(), 300, "{rows:?}");
    assert_eq!(stderr.trim(), format!("xtrace: 300 functions in {many}"));
    for (k, row) in rows.iter().enumerate() {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells.len(), 5, "OFFSET ADDRESS SIZE PROBE NAME: {row}");
        assert_eq!(cells[4], format!("glob_fn_{k:03}"), "sorted by offset: {row}");
        assert!(cells[0].starts_with("0x") && cells[1].starts_with("0x"), "{row}");
        assert_eq!(
            cells[3], cells[0],
            "glob_fn_* start with push %rbp: probed there: {row}"
        );
        assert!(cells[2].parse::<u64>().is_ok_and(|size| size > 0), "{row}");
    }
    // The same spec through a process: `-u` syntax, resolved in the process's mappings.
    let mut fixture = Fixture::spawn(&fixtures().uselib, &[]);
    fixture.wait_ready();
    let pid = fixture.pid().to_string();
    let (code, rows, stderr) = list(&["--pid", &pid, "libxtfix:lib_*"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].ends_with(" lib_work"), "{rows:?}");
}

/// A listing into a pipe whose reader has gone (`xtrace list symbols ... | head`) ends quietly,
/// with 0, as perf and grep do, instead of a panic on the broken pipe.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn list_into_a_closed_pipe_ends_quietly() {
    if !require_bpf() {
        return;
    }
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let output = Command::new(xtrace_tests::xtrace_bin())
        .args(["list", "symbols"])
        .arg(&fixtures().many)
        .arg("glob_fn_*")
        .stdout(writer)
        .output()
        .expect("running xtrace");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!("xtrace: 300 functions in {}", fixtures().many.display())
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn stripped_library_falls_back_to_dynsym() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("glob-stripped");
    let lib = tmp.join("libxtfix-stripped.so");
    std::fs::copy(&fixtures().libxtfix, &lib).expect("copying libxtfix.so");
    let status = Command::new("strip").arg(&lib).status().expect("running strip");
    assert!(status.success());
    let lib = lib.to_str().expect("UTF-8 path");
    let (code, rows, stderr) = list(&[lib, "lib_*"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].ends_with(" lib_work"), "{rows:?}");
    assert!(stderr.contains("(stripped: .dynsym only)"), "{stderr}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn glob_matching_nothing_suggests_names() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().many, &[]);
    fixture.wait_ready();
    let tmp = TempDir::new("glob-none");
    let line = run_error(xtrace_tests::args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "glob_fn_9*",
        "-o",
        tmp.join("out")
    ]);
    assert!(line.contains("`glob_fn_9*` not found"), "{line}");
    assert!(line.contains("did you mean: glob_fn_"), "{line}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn more_matches_than_max_probes_is_refused() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().many, &[]);
    fixture.wait_ready();
    let tmp = TempDir::new("glob-max");
    let line = run_error(xtrace_tests::args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "glob_fn_*",
        "--max-probes",
        "100",
        "-o",
        tmp.join("out")
    ]);
    assert!(
        line.contains("`glob_fn_*`") && line.contains("--max-probes 100"),
        "{line}"
    );
    assert!(fixture.is_running());
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn stripped_executable_says_so() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("glob-stripped-exe");
    let exe = tmp.join("many-stripped");
    std::fs::copy(&fixtures().many, &exe).expect("copying many");
    assert!(Command::new("strip").arg(&exe).status().expect("strip").success());
    let mut fixture = Fixture::spawn(&exe, &[]);
    fixture.wait_ready();
    let line = run_error(xtrace_tests::args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "glob_fn_*",
        "-o",
        tmp.join("out")
    ]);
    assert!(line.contains("stripped"), "{line}");
}

/// A function that several specs match (a name, a glob, the name with its file) is attached
/// once: each call is one span, and none is left unmatched by a second entry probe.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_function_several_specs_match_is_attached_once() {
    if !require_bpf() {
        return;
    }
    let many = fixtures().many.clone();
    let with_file = format!("{}:other_fn", many.display());
    let out = trace(
        &many,
        &["other_fn", "other_*", &with_file, "glob_fn_001"],
        "glob-overlap",
    );
    assert_eq!(probe_names(&out), ["glob_fn_001", "other_fn"]);
    assert_eq!(out.probe_count("other_fn"), 4);
    assert_eq!(out.spans_named("other_fn").len(), 4);
    assert_eq!(out.probe_count("glob_fn_001"), 2);
    assert_eq!(u64_field(&out.summary, "uprobes"), 4);
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);
}

/// C++ names as they are written in source: a function template without the return type its
/// demangled name starts with (`int tpl::twice<int>(int)`), a function returning std::string
/// without or with its ABI tag (`tpl::label[abi:cxx11](int)`), and a namespace glob that takes
/// both in.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn cpp_templates_and_abi_tagged_names_are_found_as_written() {
    if !require_bpf() {
        return;
    }
    for specs in [
        &["tpl::twice<int>", "tpl::label"][..],
        &["tpl::label[abi:cxx11]"][..],
        &["tpl::*"][..],
    ] {
        let out = trace(&fixtures().matrix, specs, "glob-cpp-names");
        let label = "tpl::label[abi:cxx11](int)";
        assert_eq!(out.probe_count(label), 3, "{specs:?}");
        if specs.len() != 1 || specs[0] == "tpl::*" {
            assert_eq!(out.probe_count("int tpl::twice<int>(int)"), 2, "{specs:?}");
        }
    }
}

/// An empty GLOB is said to be one, not taken for a `-u` spec without a symbol.
#[test]
fn list_symbols_with_an_empty_glob_is_one_line() {
    let (code, rows, stderr) = list(&[fixtures().many.to_str().expect("UTF-8 path"), ""]);
    assert_eq!((code, rows.len()), (Some(2), 0));
    assert_eq!(
        stderr,
        "xtrace: error: `xtrace list symbols TARGET GLOB` was given an empty GLOB; give a name or a \
         glob such as `*`; see `xtrace --help`"
    );
}
