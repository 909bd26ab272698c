//! The kernel matrix: `cargo xtask test --kernel PATH` (and, under CI, `cargo xtask test` with
//! Debian 12's kernel) runs a smoke set of the root integration tests inside another kernel.
//! The tests and fixtures are built here, on the host; the guest boots under qemu with the host's
//! root file system, read-only, and runs them there (`guest.rs`, `guest-init.sh`). Owns the smoke
//! set, the plan the guest follows, and the report of which tests passed.
mod guest;
mod image;

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

pub use guest::{require_qemu, Boot};
pub use image::{debian_kernel, GuestKernel};

use crate::util::{self, BadInput, Workspace};

/// The smoke set: (file in tests/tests/, test) for each capability the matrix covers: function
/// spans, arguments, both uprobe attach paths, USDT with semaphores, CPU sampling with unwinding,
/// off-CPU time, the CUDA stand-in and its GPU device timeline (`--inject` too), call sites (`--stacks`, of functions and USDT probes), range
/// probes, the lifecycle
/// (SIGINT, SIGTERM, SIGKILL: nothing left attached; SIGTERM, SIGHUP, SIGKILL and a panic in the
/// USDT semaphore test; perf-event uprobes removed in the background after a prompt exit), bad
/// input and
/// `xtrace check`; one or two tests each, so that the set runs in under 15 minutes under TCG on
/// 2 cores. Sampling tests that count samples per second of the
/// wall clock (`split_shares_with_and_without_frame_pointers`) are left out: under TCG the guest's
/// CPUs get a share of the host's time, and they see about half the samples.
pub const SMOKE: &[(&str, &str)] = &[
    ("uprobe_spans", "threads_exact_spans_per_thread"),
    ("uprobe_spans", "summary_statistics_match_trace"),
    ("args", "integer_string_and_return_values_exactly"),
    (
        "attach_mechanism",
        "uprobe_multi_by_default_where_the_kernel_has_it",
    ),
    ("attach_mechanism", "perf_event_when_asked"),
    (
        "attach_mechanism",
        "uprobe_multi_when_asked_or_refused_naming_the_kernel",
    ),
    ("usdt", "every_probe_form_and_pair_exactly"),
    ("usdt", "semaphores_are_back_to_zero_after_every_exit_path"),
    ("usdt", "semaphore_probe_through_perf_event_uprobes"),
    ("sampling", "kernel_frames_of_a_syscall_heavy_process"),
    (
        "sampling",
        "samples_in_a_signal_handler_keep_the_interrupted_code_below_it",
    ),
    ("cuda", "cuda_calls_by_pid_exactly"),
    (
        "gpu_device",
        "attach_then_detach_finalizes_cupti_and_attaching_again_works",
    ),
    ("gpu_device_shared", "a_notice_the_ring_has_no_room_for_is_shown"),
    (
        "gpu_inject",
        "inject_gives_a_process_started_without_the_variable_its_device_timeline",
    ),
    ("offcpu", "sleeps_in_a_function_are_its_off_cpu_time"),
    (
        "stacks",
        "cuda_launches_and_synchronizations_are_named_by_their_python_lines",
    ),
    ("stacks", "c_callers_are_named_by_function_and_offset"),
    ("stacks", "usdt_hits_and_spans_are_named_by_their_callers"),
    ("ranges", "xtrace_range_api_by_pid"),
    ("stop", "sigint_stops"),
    (
        "teardown",
        "perf_event_uprobes_are_removed_in_the_background_after_complete_outputs",
    ),
    ("lifecycle", "sigkill_leaves_nothing_attached"),
    ("bad_input", "nonexistent_pid"),
    ("bad_input", "target_not_elf"),
    ("bad_input", "unknown_symbol_suggests_close_names"),
    ("bad_input", "function_the_kernel_cannot_probe"),
    ("check", "as_root_every_item_is_ok"),
    ("gpu_inject", "inject_refuses_under_yama_ptrace_scope_3"),
];

/// Smoke tests that change the guest for good (Yama's `ptrace_scope` 3 cannot be lowered again
/// before a reboot): `#[ignore]`d on the host, run in the guest after all the others, with
/// `--include-ignored`.
pub const RUN_LAST: &[(&str, &str)] = &[("gpu_inject", "inject_refuses_under_yama_ptrace_scope_3")];

/// Smoke tests that fail in a kernel series for a defect of xtrace's, written down: (release
/// prefix, file, test, the defect). They still run; the step fails if one passes, so a fix
/// removes its entry.
pub const KNOWN_DEFECTS: &[(&str, &str, &str, &str)] = &[];

/// Smoke tests that drive a hook only a debug build of xtrace has (`XTRACE_TEST_PANIC`): left
/// out when the xtrace under test is the release's (`cargo xtask dist --kernel`).
pub const DEBUG_BUILD_ONLY: &[(&str, &str)] =
    &[("usdt", "semaphores_are_back_to_zero_after_every_exit_path")];

/// What the test binaries are built with, so this step reuses the host run's build.
pub type TestEnv<'a> = &'a [(&'a str, &'a str)];

/// Runs the smoke tests whose `file::name` contains one of `filters` (all when none) inside
/// `kernel`; fails naming the tests that did not pass.
pub fn run(
    ws: &Workspace,
    xtrace: &Path,
    kernel: &GuestKernel,
    filters: &[String],
    env: TestEnv,
) -> Result<()> {
    let chosen: Vec<(&str, &str)> = SMOKE
        .iter()
        .filter(|(file, name)| {
            let id = format!("{file}::{name}");
            filters.is_empty() || filters.iter().any(|f| id.contains(f.as_str()))
        })
        .copied()
        .collect();
    if chosen.is_empty() {
        return Err(BadInput(format!("no smoke test matches {filters:?}")).into());
    }
    run_chosen(ws, xtrace, kernel, &chosen, env)
}

/// Runs the smoke set but [`DEBUG_BUILD_ONLY`] with a release build of xtrace inside `kernel`.
pub fn run_release(ws: &Workspace, xtrace: &Path, kernel: &GuestKernel, env: TestEnv) -> Result<()> {
    let chosen: Vec<(&str, &str)> = SMOKE
        .iter()
        .filter(|test| !DEBUG_BUILD_ONLY.contains(test))
        .copied()
        .collect();
    run_chosen(ws, xtrace, kernel, &chosen, env)
}

/// Builds what the `chosen` smoke tests need, boots `kernel` and reports their outcomes.
fn run_chosen(
    ws: &Workspace,
    xtrace: &Path,
    kernel: &GuestKernel,
    chosen: &[(&str, &str)],
    env: TestEnv,
) -> Result<()> {
    let started = Instant::now();
    build_fixtures(ws, xtrace, env)?;
    let binaries = build_test_binaries(ws, chosen, env)?;
    let dir = ws.target.join("kernel-matrix");
    let plan = plan(ws, xtrace, chosen, &binaries)?;
    let boot = boot_with_plan(kernel, &dir, &plan, guest::GUEST_TIMEOUT)?;
    let outcomes = outcomes(chosen, &boot.lines);
    report(kernel, &boot, &outcomes, started.elapsed().as_secs())
}

/// Boots `kernel` to run `plan` (sourced by guest-init.sh, which offers `onto_tmpfs PATH` and
/// `run FILE BINARY TEST...`), both written to `dir`, for at most `timeout`.
pub fn boot_with_plan(kernel: &GuestKernel, dir: &Path, plan: &str, timeout: Duration) -> Result<Boot> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("plan.sh"), plan)?;
    std::fs::write(dir.join("guest-init.sh"), include_str!("guest-init.sh"))?;
    util::make_executable(&dir.join("guest-init.sh"))?;
    guest::boot(kernel, dir, timeout)
}

/// `cargo run -p xtrace-tests --bin build-fixtures`: the guest cannot write the target directory.
fn build_fixtures(ws: &Workspace, xtrace: &Path, env: TestEnv) -> Result<()> {
    let mut cmd = ws.cargo();
    cmd.args(["run", "--quiet", "-p", "xtrace-tests", "--bin", "build-fixtures"])
        .env("XTRACE_BIN", xtrace)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null());
    util::run("build of the test fixtures", &mut cmd)
}

/// Builds the test binaries of the chosen files; returns each file's executable.
fn build_test_binaries(
    ws: &Workspace,
    chosen: &[(&str, &str)],
    env: TestEnv,
) -> Result<BTreeMap<String, PathBuf>> {
    let mut cmd = ws.cargo();
    cmd.args([
        "test",
        "-p",
        "xtrace-tests",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ])
    .envs(env.iter().copied());
    for file in chosen
        .iter()
        .map(|(file, _)| file)
        .collect::<std::collections::BTreeSet<_>>()
    {
        cmd.args(["--test", file]);
    }
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("could not start `{}`", util::display(&cmd)))?;
    if !out.status.success() {
        bail!(
            "build of the integration tests failed: `{}` ({})",
            util::display(&cmd),
            out.status
        );
    }
    let mut binaries = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_test = msg["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "test"));
        if let (true, Some(name), Some(exe)) = (
            is_test,
            msg["target"]["name"].as_str(),
            msg["executable"].as_str(),
        ) {
            binaries.insert(name.to_owned(), PathBuf::from(exe));
        }
    }
    Ok(binaries)
}

/// A word for the guest's shell, in single quotes.
pub fn quoted(path: &Path) -> Result<String> {
    let text = path
        .to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))?;
    if text.contains('\'') {
        bail!("{text} holds a single quote, which the guest's plan cannot carry");
    }
    Ok(format!("'{text}'"))
}

/// plan.sh, which guest-init.sh sources: what to move onto the tmpfs, then one `run` per file,
/// then one for each of [`RUN_LAST`] chosen.
fn plan(
    ws: &Workspace,
    xtrace: &Path,
    chosen: &[(&str, &str)],
    binaries: &BTreeMap<String, PathBuf>,
) -> Result<String> {
    let tool = xtrace.with_file_name("libxtrace_tool.so");
    let mut text = String::from("# Written by `cargo xtask test --kernel`; sourced by guest-init.sh.\n");
    for path in [&ws.target.join("xtrace-fixtures"), xtrace, &tool] {
        writeln!(text, "onto_tmpfs {}", quoted(path)?)?;
    }
    writeln!(text, "XTRACE_BIN={}\nexport XTRACE_BIN", quoted(xtrace)?)?;
    let binary = |file: &str| {
        let binary = binaries
            .get(file)
            .with_context(|| format!("cargo built no test binary for tests/tests/{file}.rs"))?;
        quoted(binary)
    };
    let (last, first): (Vec<_>, Vec<_>) = chosen.iter().partition(|test| RUN_LAST.contains(test));
    let mut files: Vec<&str> = first.iter().map(|(file, _)| *file).collect();
    files.dedup();
    for file in files {
        write!(text, "run {file} {}", binary(file)?)?;
        for (_, name) in first.iter().filter(|(f, _)| *f == file) {
            write!(text, " {name}")?;
        }
        text.push('\n');
    }
    for (file, name) in last {
        writeln!(text, "run {file} {} --include-ignored {name}", binary(file)?)?;
    }
    Ok(text)
}

/// How one smoke test ended in the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Passed,
    Failed,
    Ignored,
    /// It printed no result line: its binary crashed, or the guest stopped first.
    NoResult,
}

/// Each chosen test's outcome, from libtest's `test NAME ... ok|FAILED|ignored` lines, each taken
/// within its file's `kmatrix: begin FILE` section.
fn outcomes(chosen: &[(&str, &str)], lines: &[String]) -> Vec<((String, String), Outcome)> {
    let mut found = BTreeMap::new();
    let mut file = String::new();
    for line in lines {
        let line = line.trim_end_matches('\r');
        if let Some(rest) = line.strip_prefix("kmatrix: begin ") {
            file = rest.trim().to_owned();
        }
        let Some((name, result)) = line.strip_prefix("test ").and_then(|l| l.split_once(" ... ")) else {
            continue;
        };
        let outcome = match result.split([',', ' ']).next() {
            Some("ok") => Outcome::Passed,
            Some("FAILED") => Outcome::Failed,
            Some("ignored") => Outcome::Ignored,
            _ => continue,
        };
        found.insert((file.clone(), name.to_owned()), outcome);
    }
    chosen
        .iter()
        .map(|(file, name)| {
            let key = ((*file).to_owned(), (*name).to_owned());
            let outcome = found.get(&key).cloned().unwrap_or(Outcome::NoResult);
            (key, outcome)
        })
        .collect()
}

/// The written-down defect of `file::name` in `release`, if any.
fn known_defect(release: &str, file: &str, name: &str) -> Option<&'static str> {
    KNOWN_DEFECTS
        .iter()
        .find(|(prefix, f, n, _)| release.starts_with(prefix) && *f == file && *n == name)
        .map(|(.., why)| *why)
}

/// Prints one line per test and the totals; fails unless every test passed but the known defects,
/// which must fail.
fn report(
    kernel: &GuestKernel,
    boot: &guest::Boot,
    outcomes: &[((String, String), Outcome)],
    seconds: u64,
) -> Result<()> {
    println!("kernel matrix: {} ({}):", kernel.release, boot.accel);
    let (mut bad, mut known) = (Vec::new(), 0);
    for ((file, name), outcome) in outcomes {
        let defect = known_defect(&kernel.release, file, name);
        let word = match (outcome, defect) {
            (Outcome::Passed, None) => "ok".to_string(),
            (Outcome::Passed, Some(_)) => "ok, but listed in KNOWN_DEFECTS: remove it there".to_string(),
            (Outcome::Failed, Some(why)) => format!("FAILED, known defect: {why}"),
            (Outcome::Failed, None) => "FAILED".to_string(),
            (Outcome::Ignored, _) => "IGNORED".to_string(),
            (Outcome::NoResult, _) => "NO RESULT".to_string(),
        };
        println!("  {file}::{name} ... {word}");
        match (outcome, defect) {
            (Outcome::Passed, None) => {}
            (Outcome::Failed, Some(_)) => known += 1,
            _ => bad.push(format!("{file}::{name}")),
        }
    }
    let passed = outcomes.len() - bad.len() - known;
    println!(
        "kernel matrix: {passed} passed, {} failed, {known} known defects on {} under {} in {seconds} s",
        bad.len(),
        kernel.release,
        boot.accel
    );
    if let Some(error) = &boot.error {
        bail!("kernel {}: {error}", kernel.release);
    }
    if !bad.is_empty() {
        bail!(
            "kernel {}: {} did not pass: {}",
            kernel.release,
            bad.len(),
            bad.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every smoke test exists as a `#[test]` function of its file.
    #[test]
    fn every_smoke_test_exists() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/tests");
        for (file, name) in SMOKE {
            let source = std::fs::read_to_string(dir.join(format!("{file}.rs"))).unwrap();
            let at = source
                .find(&format!("\nfn {name}()"))
                .unwrap_or_else(|| panic!("tests/tests/{file}.rs has no fn {name}()"));
            let before = &source[..at];
            let attrs = &before[before.rfind("\n\n").unwrap_or(0)..];
            assert!(attrs.contains("#[test]"), "{file}::{name} is no #[test]");
        }
    }

    /// What a release run leaves out is in the smoke set, and its file drives the debug hook.
    #[test]
    fn debug_build_only_tests_are_smoke_tests_of_files_that_use_the_hook() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/tests");
        for test @ (file, _) in DEBUG_BUILD_ONLY {
            assert!(SMOKE.contains(test), "{test:?} is not in SMOKE");
            let source = std::fs::read_to_string(dir.join(format!("{file}.rs"))).unwrap();
            assert!(
                source.contains("PANIC_ENV"),
                "tests/tests/{file}.rs uses no PANIC_ENV"
            );
        }
    }

    /// What runs last is a smoke test ignored on the host, and the plan runs it after the rest.
    #[test]
    fn run_last_tests_are_ignored_smoke_tests_planned_last() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/tests");
        for test @ (file, name) in RUN_LAST {
            assert!(SMOKE.contains(test), "{test:?} is not in SMOKE");
            let source = std::fs::read_to_string(dir.join(format!("{file}.rs"))).unwrap();
            let at = source.find(&format!("\nfn {name}()")).unwrap();
            let attrs = &source[source[..at].rfind("\n\n").unwrap_or(0)..at];
            assert!(
                attrs.contains("#[ignore = "),
                "{file}::{name} is not ignored on the host"
            );
        }
        let ws = Workspace {
            root: PathBuf::from("/w"),
            target: PathBuf::from("/w/target"),
        };
        let binaries: BTreeMap<String, PathBuf> = ["a", "gpu_inject"]
            .map(|f| (f.to_owned(), PathBuf::from(format!("/w/{f}"))))
            .into();
        let chosen = [("gpu_inject", "x"), RUN_LAST[0], ("a", "y")];
        let text = plan(&ws, Path::new("/w/xtrace"), &chosen, &binaries).unwrap();
        let runs: Vec<&str> = text.lines().filter(|l| l.starts_with("run ")).collect();
        assert_eq!(
            runs,
            [
                "run gpu_inject '/w/gpu_inject' x",
                "run a '/w/a' y",
                "run gpu_inject '/w/gpu_inject' --include-ignored inject_refuses_under_yama_ptrace_scope_3",
            ]
        );
    }

    #[test]
    fn outcomes_are_read_per_file() {
        let chosen = [("a", "x"), ("b", "x"), ("b", "y"), ("b", "z")];
        let lines: Vec<String> = [
            "kmatrix: begin a\r",
            "test x ... ok\r",
            "kmatrix: begin b",
            "test x ... FAILED",
            "test y ... ignored, needs root",
        ]
        .map(String::from)
        .to_vec();
        let got: Vec<Outcome> = outcomes(&chosen, &lines).into_iter().map(|(_, o)| o).collect();
        assert_eq!(
            got,
            [
                Outcome::Passed,
                Outcome::Failed,
                Outcome::Ignored,
                Outcome::NoResult
            ]
        );
    }
}
