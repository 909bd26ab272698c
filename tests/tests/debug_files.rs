//! Separate debug files of stripped files: `-u` and `list symbols` name a stripped executable's
//! local functions from the debug file its build ID or its `.gnu_debuglink` finds, as gdb, perf
//! and bpftrace do, and CPU samples are named from it. Each test strips a copy of a fixture
//! (`strip --strip-all`: no `.symtab`, its functions exported by none) after
//! `objcopy --only-keep-debug` kept its symbols and DWARF apart. Fixtures: `calls durations`
//! (quick() x 100, slow() x 5) and `profile split 1000` (hot_a 75%, hot_b 25% of a second).
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{listed_symbols, run_error, trace_fixture_with, Xtrace},
    TempDir,
};

fn run(program: &str, args: &[&std::ffi::OsStr], dir: &Path) {
    let status = Command::new(program)
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(status.success(), "{program} {args:?}: {status}");
}

/// The build ID of `file` in hex, from `readelf -n`.
fn build_id(file: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(file)
        .output()
        .expect("running readelf");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_owned))
        .unwrap_or_else(|| panic!("{} has no build ID", file.display()))
}

/// How the stripped copy finds its debug file.
#[derive(Clone, Copy, PartialEq)]
enum Debug {
    /// `DIR/.build-id/NN/NNNN….debug` under `TMP/debug`, which `--debug-dir` must name; the copy has
    /// no `.gnu_debuglink`.
    BuildId,
    /// `NAME.debug` next to the copy, which a `.gnu_debuglink` names.
    Link,
}

/// A stripped copy of `program` in `tmp` (named as `program`), and the directory to give
/// `--debug-dir` (for [`Debug::BuildId`]).
fn stripped(program: &Path, tmp: &TempDir, how: Debug) -> (PathBuf, PathBuf) {
    stripped_with(program, tmp, how, "--only-keep-debug")
}

/// [`stripped`], the debug file written by `objcopy` with `keep_debug` (`--only-keep-debug` and
/// any further flag, such as `--compress-debug-sections=zstd`).
fn stripped_with(program: &Path, tmp: &TempDir, how: Debug, keep_debug: &str) -> (PathBuf, PathBuf) {
    let name = program.file_name().expect("a file name");
    let copy = tmp.join(name.to_str().expect("UTF-8"));
    std::fs::copy(program, &copy).expect("copying the fixture");
    let debug_name = format!("{}.debug", name.to_str().expect("UTF-8"));
    let dir = tmp.path();
    let mut objcopy: Vec<&std::ffi::OsStr> = keep_debug.split(' ').map(|a| a.as_ref()).collect();
    objcopy.extend([name, debug_name.as_ref()]);
    run("objcopy", &objcopy, dir);
    run("strip", &["--strip-all".as_ref(), name], dir);
    let debug_dir = tmp.join("debug");
    match how {
        Debug::Link => {
            let link = format!("--add-gnu-debuglink={debug_name}");
            run("objcopy", &[link.as_ref(), name], dir);
        }
        Debug::BuildId => {
            let id = build_id(&copy);
            let sub = debug_dir.join(".build-id").join(&id[..2]);
            std::fs::create_dir_all(&sub).expect("making the build-id directory");
            std::fs::rename(tmp.join(&debug_name), sub.join(format!("{}.debug", &id[2..])))
                .expect("moving the debug file");
        }
    }
    (copy, debug_dir)
}

/// `-u quick -u slow` on a stripped `calls durations` (plus `flags`): the probes' counts.
fn trace_durations(program: &Path, flags: Vec<std::ffi::OsString>, tmp: &TempDir) -> (u64, u64, Vec<String>) {
    let mut fixture = Fixture::spawn(program, &["durations"]);
    fixture.wait_ready();
    let out = tmp.join("out");
    let mut all = args!["-u", "quick", "-u", "slow"];
    all.extend(flags);
    let finished = trace_fixture_with(&mut fixture, all, &[], &out);
    let out = Outputs::read(&out);
    assert_eq!(out.lost_events(), 0);
    (out.probe_count("quick"), out.probe_count("slow"), finished.stderr)
}

/// The one error line of `-p PID -u quick -o OUT` on a running stripped `calls durations` that
/// cannot name `quick`.
fn quick_refused(calls: &Path, out: &Path) -> String {
    let mut fixture = Fixture::spawn(calls, &["durations"]);
    fixture.wait_ready();
    run_error(args!["-p", fixture.pid().to_string(), "-u", "quick", "-o", out])
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn functions_of_a_stripped_file_from_its_debug_file_by_build_id() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("debug-build-id");
    let (calls, debug_dir) = stripped(&fixtures().calls, &tmp, Debug::BuildId);
    let (quick, slow, stderr) = trace_durations(&calls, args!["--debug-dir", &debug_dir], &tmp);
    assert_eq!((quick, slow), (100, 5));
    assert!(!stderr.iter().any(|l| l.contains("stripped")), "{stderr:?}");

    // Without the directory, no debug file: only .dynsym, which names neither, and one line says
    // where debug files are looked for.
    let line = quick_refused(&calls, &tmp.join("none"));
    assert!(line.contains("symbol `quick` not found in"), "{line}");
    assert!(
        line.contains("stripped and no debug file of it was found"),
        "{line}"
    );

    // `list symbols` reads it the same way, and says which debug file named the functions.
    let listed = Xtrace::spawn(args![
        "list",
        "symbols",
        "--debug-dir",
        &debug_dir,
        &calls,
        "quick"
    ])
    .wait();
    listed.assert_success();
    let rows: Vec<&str> = listed.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].ends_with(" quick"), "{rows:?}");
    let debug_file = debug_dir
        .join(".build-id")
        .join(&build_id(&calls)[..2])
        .join(format!("{}.debug", &build_id(&calls)[2..]));
    assert_eq!(
        listed.stderr,
        [format!(
            "xtrace: 1 function in {} (stripped; named from its debug file {})",
            calls.display(),
            debug_file.display()
        )]
    );
    // Its offsets are the unstripped file's.
    let unstripped = listed_symbols(args![&fixtures().calls, "quick"]);
    let stripped = listed_symbols(args!["--debug-dir", &debug_dir, &calls, "quick"]);
    assert_eq!(stripped, unstripped);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn functions_of_a_stripped_file_from_its_debug_link() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("debug-link");
    let (calls, _) = stripped(&fixtures().calls, &tmp, Debug::Link);
    let (quick, slow, stderr) = trace_durations(&calls, args![], &tmp);
    assert_eq!((quick, slow), (100, 5));
    assert!(!stderr.iter().any(|l| l.contains("stripped")), "{stderr:?}");
}

/// A debug link whose file is another build's is not followed: the functions it would name stay
/// unknown, and the notice names the file and why it was refused.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_debug_file_of_another_build_is_refused() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("debug-other-build");
    let (calls, _) = stripped(&fixtures().calls, &tmp, Debug::Link);
    let other = tmp.join("other");
    std::fs::create_dir(&other).expect("mkdir");
    let other_calls = other.join("calls");
    std::fs::copy(&fixtures().calls_cet, &other_calls).expect("copying");
    run(
        "objcopy",
        &[
            "--only-keep-debug".as_ref(),
            "calls".as_ref(),
            "calls.debug".as_ref(),
        ],
        &other,
    );
    std::fs::rename(other.join("calls.debug"), tmp.join("calls.debug")).expect("replacing");
    assert_ne!(build_id(&fixtures().calls_cet), build_id(&calls));
    let line = quick_refused(&calls, &tmp.join("out"));
    let refused = format!(
        "symbol `quick` not found in {} (the file is stripped, and {} (another build ID) is not its \
         debug file: only its exported .dynsym functions are known)",
        calls.display(),
        tmp.join("calls.debug").display()
    );
    assert!(line.contains(&refused), "{line}");
}

/// `-F 999 FLAGS... -- PROFILE split 1000` into `tmp/out`: its outputs, once the split is checked
/// to come out 75/25 ± 5 between hot_a and hot_b (named, so named from a debug file).
fn sampled_split(profile: &Path, flags: Vec<std::ffi::OsString>, tmp: &TempDir) -> Outputs {
    let out = tmp.join("out");
    let mut all = args!["-F", "999"];
    all.extend(flags);
    all.extend(args!["-o", &out, "--", profile, "split", "1000"]);
    Xtrace::spawn(all).wait().assert_success();
    let out = Outputs::read_profiled(&out);
    let (a, b) = out.split_shares(["hot_a", "hot_b"]);
    assert!(
        (a - 75.0).abs() <= 5.0,
        "hot_a {a:.1}%, hot_b {b:.1}%, expected 75/25 ± 5"
    );
    out
}

/// CPU samples of a stripped program are named from the debug file its build ID finds (blazesym
/// alone follows only debug links): the split comes out as from the unstripped build.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn samples_of_a_stripped_program_named_from_its_debug_file() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("debug-samples");
    let (profile, debug_dir) = stripped(&fixtures().profile, &tmp, Debug::BuildId);
    let out = sampled_split(&profile, args!["--debug-dir", &debug_dir], &tmp);
    let named = out.self_share("hot_a") + out.self_share("hot_b");
    assert!(
        named >= 80.0,
        "hot_a and hot_b are the innermost frame of {named:.1}% of samples"
    );
}

/// A debug link is followed from a command launched by a relative path, and from a symlink in
/// another directory (beside where it leads), as gdb follows them.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn debug_link_of_a_relative_or_symlinked_path() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("debug-relative");
    let (calls, _) = stripped(&fixtures().calls, &tmp, Debug::Link);
    let mut xtrace = Command::new(xtrace_tests::xtrace_bin())
        .current_dir(tmp.path())
        .args([
            "-q",
            "-o",
            "out",
            "-u",
            "quick",
            "-u",
            "slow",
            "--",
            "./calls",
            "durations",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting xtrace");
    use std::io::Write;
    xtrace
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("writing go");
    let done = xtrace.wait_with_output().expect("waiting for xtrace");
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let out = Outputs::read(&tmp.join("out"));
    assert_eq!((out.probe_count("quick"), out.probe_count("slow")), (100, 5));

    let elsewhere = tmp.join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let link = elsewhere.join("link");
    std::os::unix::fs::symlink(&calls, &link).expect("symlink");
    let rows = listed_symbols(args![&link, "quick"]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][4], "quick");
}

/// A debug file whose DWARF is zstd-compressed (which blazesym does not read) still names the
/// samples, from its own `.symtab`.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn samples_named_from_a_zstd_debug_file() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("debug-zstd");
    let keep = "--only-keep-debug --compress-debug-sections=zstd";
    let (profile, _) = stripped_with(&fixtures().profile, &tmp, Debug::Link, keep);
    sampled_split(&profile, args![], &tmp);
}

/// A process of another mount namespace (a container) whose debug file is installed in that
/// namespace's /usr/lib/debug, which the host's does not have: found through /proc/PID/root.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn debug_file_of_a_container() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("debug-container");
    let (calls, debug_dir) = stripped(&fixtures().calls, &tmp, Debug::BuildId);
    let id = build_id(&calls);
    let debug = debug_dir
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    let root = tmp.join("root");
    std::fs::create_dir(&root).expect("mkdir");
    let script = r#"mount -t tmpfs xtrace-test "$0" && cp "$1" "$0"/ &&
        mount -t tmpfs xtrace-debug /usr/lib/debug && mkdir -p "/usr/lib/debug/.build-id/$3" &&
        cp "$2" "/usr/lib/debug/.build-id/$3/$4.debug" && exec "$0"/calls durations"#;
    let mut fixture = Fixture::spawn(
        Path::new("unshare"),
        &[
            "--mount",
            "sh",
            "-c",
            script,
            root.to_str().expect("UTF-8"),
            calls.to_str().expect("UTF-8"),
            debug.to_str().expect("UTF-8"),
            &id[..2],
            &id[2..],
        ],
    );
    fixture.wait_ready();
    assert!(
        !root.join("calls").exists(),
        "the program exists only inside the namespace"
    );
    let out = tmp.join("out");
    trace_fixture_with(&mut fixture, args!["-u", "quick", "-u", "slow"], &[], &out);
    let out = Outputs::read(&out);
    assert_eq!((out.probe_count("quick"), out.probe_count("slow")), (100, 5));
}
