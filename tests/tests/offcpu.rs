//! Off-CPU time (`--off-cpu`) on the real kernel, with fixture `offcpu` (tests/fixtures/offcpu.c):
//! `sleep N MS` waits N times MS in clock_nanosleep under sleeper(); `mutex MS` blocks the main
//! thread in waiter() on a mutex a thread named "holder" holds for MS. The CPU is sampled at
//! 1 Hz beside: naming the samples of the default 99 Hz costs a debug xtrace under the kernel
//! matrix's emulation more than the tests' time limit allows.

use serde_json::Value;
use xtrace_tests::{
    args, fixtures::fixtures, output::Outputs, profile::profile_command, require_bpf, run::run_error, TempDir,
};

const MS: u64 = 1_000_000;

/// offcpu.folded as (stack, nanoseconds) lines.
fn off_cpu_folded(out: &Outputs) -> Vec<(String, u64)> {
    let path = out.dir.join("offcpu.folded");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .map(|line| {
            let (stack, ns) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("not folded: {line}"));
            (
                stack.to_string(),
                ns.parse().unwrap_or_else(|_| panic!("not folded: {line}")),
            )
        })
        .collect()
}

/// Nanoseconds of the folded stacks `keep` accepts.
fn off_cpu_ns(out: &Outputs, keep: impl Fn(&str) -> bool) -> u64 {
    off_cpu_folded(out)
        .iter()
        .filter(|(s, _)| keep(s))
        .map(|(_, ns)| ns)
        .sum()
}

/// The summary's entry for thread `tid`.
fn thread(out: &Outputs, tid: u64) -> &Value {
    let threads = out.summary["off_cpu"]["threads"]
        .as_array()
        .expect("off_cpu.threads");
    threads
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("no thread {tid} in {threads:?}"))
}

/// A thread's (intervals, ns) in wait `name`.
fn wait(thread: &Value, name: &str) -> (u64, u64) {
    let waits = thread["waits"].as_array().expect("waits");
    let found = waits
        .iter()
        .find(|w| w["wait"] == name)
        .unwrap_or_else(|| panic!("no wait {name} in {waits:?}"));
    (
        found["intervals"].as_u64().unwrap(),
        found["ns"].as_u64().unwrap(),
    )
}

/// Ten sleeps of 50 ms in one function: exactly ten clock_nanosleep waits of the main thread,
/// 500 ms in all (sleeps overrun, never underrun), every one under sleeper() in offcpu.folded,
/// which shows them with the wait as the leaf; the text summary says so too.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn sleeps_in_a_function_are_its_off_cpu_time() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("offcpu-sleep");
    let out = profile_command(
        args!["--off-cpu", "-F", "1"],
        &fixtures().offcpu,
        &["sleep", "10", "50"],
        &tmp,
    );
    let pid = out.summary["command"]["pid"].as_u64().unwrap();
    let (count, ns) = wait(thread(&out, pid), "clock_nanosleep");
    assert_eq!(count, 10, "{}", out.summary["off_cpu"]);
    assert!((500 * MS..525 * MS).contains(&ns), "{ns} ns asleep");
    let under_sleeper = off_cpu_ns(&out, |s| {
        s.starts_with("offcpu;") && s.contains(";main;sleeper;") && s.ends_with(";[clock_nanosleep]")
    });
    assert_eq!(under_sleeper, ns, "{:?}", off_cpu_folded(&out));
    // The ten, and any wait of the program's start that took 1 ms (a slow disk, an emulator).
    let sent = out.summary["off_cpu"]["sent"].as_u64().unwrap();
    assert!(sent >= 10, "{}", out.summary["off_cpu"]);
    assert!(out.dir.join("offcpu.svg").is_file());
    assert!(out.summary_txt.contains(" off CPU in "), "{}", out.summary_txt);
}

/// Waits shorter than MIN are added up in the kernel: the same ten sleeps with MIN 1s are ten
/// waits of 500 ms in all, none sent on its own.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn waits_under_min_are_added_up_exactly() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("offcpu-short");
    let out = profile_command(
        args!["--off-cpu=1s", "-F", "1"],
        &fixtures().offcpu,
        &["sleep", "10", "50"],
        &tmp,
    );
    let pid = out.summary["command"]["pid"].as_u64().unwrap();
    let (count, ns) = wait(thread(&out, pid), "clock_nanosleep");
    assert_eq!(count, 10, "{}", out.summary["off_cpu"]);
    assert!((500 * MS..525 * MS).contains(&ns), "{ns} ns asleep");
    assert_eq!(out.summary["off_cpu"]["sent"], 0, "{}", out.summary["off_cpu"]);
    assert_eq!(out.summary["off_cpu"]["min_ns"], 1_000_000_000u64);
}

/// A thread blocked on a mutex: its futex wait lies under waiter() and lasts about as long as
/// the holder held the mutex, and the holder is the thread that woke it. (Its other futex wait,
/// in pthread_join, may or may not block.)
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_wait_on_a_mutex_is_woken_by_its_holder() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("offcpu-mutex");
    let out = profile_command(
        args!["--off-cpu", "-F", "1"],
        &fixtures().offcpu,
        &["mutex", "200"],
        &tmp,
    );
    let pid = out.summary["command"]["pid"].as_u64().unwrap();
    let main = thread(&out, pid);
    let under_waiter = off_cpu_ns(&out, |s| s.contains(";main;waiter;") && s.ends_with(";[futex]"));
    assert!(
        (150 * MS..=210 * MS).contains(&under_waiter),
        "{:?}",
        off_cpu_folded(&out)
    );
    let wakers = main["woken_by"].as_array().unwrap();
    assert!(
        wakers
            .iter()
            .any(|w| w["comm"] == "holder" && w["pid"] == pid && w["tid"] != pid),
        "{wakers:?}"
    );
}

/// A MIN that is not a duration: one line naming the accepted form, exit 2.
#[test]
fn an_off_cpu_min_that_is_no_duration_is_refused() {
    for bad in ["--off-cpu=-1ms", "--off-cpu=soon", "--off-cpu=5"] {
        let line = run_error(args![bad, "-p", "1"]);
        assert!(
            line.contains("is not a duration such as 1ms, 50us or 1s, or 0 for every wait"),
            "{bad}: {line}"
        );
    }
}
