//! CPython's GIL among the contended locks (`--off-cpu`): `pyfix.py gil SECONDS`
//! (tests/fixtures/pyfix.py) runs two threads that take turns at the GIL, each computing in pure
//! Python for 3 ms and then sleeping 0.5 ms, which drops the GIL and wakes the other, while its
//! main thread waits for them in join(). Traced by `--pid` for 2 s within their turns, on every
//! interpreter present (Debian's static python3.11 and pyenv's 3.10 to 3.13): the lock named
//! `GIL` was waited on by exactly the two threads, each for about 2.5 ms of every 6 (less its
//! time waiting for a CPU), and released by each of them.
//!
//! The turns are what make the holders known. Two threads that only spin take the GIL from each
//! other at the switch interval: each wait for it lasts the whole interval (5 ms) and ends at its
//! timeout, a wake-up from a timer interrupt, which names no holder; the holder's release then
//! ends a second, short wait, under MIN, whose waker is not kept. Such a capture has holders only
//! where something else (another process taking the CPU) stretched a wait.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use xtrace_tests::{
    args,
    fixtures::{script, Fixture},
    output::{u64_field, Outputs},
    python::interpreters,
    require_bpf,
    run::Xtrace,
    TempDir,
};

/// Where `_PyRuntime` holds the main interpreter's GIL condition variable (its `cond`, the lock
/// named `GIL`) in CPython 3.`minor`.
fn gil_cond_symbol(minor: u32) -> String {
    let offset = match minor {
        10 => 352 + 32,
        11 => 360 + 32,
        12 => 77_432 + 32,
        13 => 96_104 + 32,
        _ => unreachable!("no GIL offset for 3.{minor}"),
    };
    format!("_PyRuntime+{offset:#x}")
}

/// The two threads contend for the GIL for the 2 s of a `--pid` capture: one lock named `GIL`,
/// its waiters exactly the two, each waiting 25% to 75% of the capture less its time runnable
/// (about 42%: 2.5 ms of every 6), its holders exactly the two; summary.txt names it.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn two_threads_contending_for_the_gil_wait_on_the_lock_named_gil() {
    if !require_bpf() {
        return;
    }
    for python in interpreters() {
        let mut fixture = Fixture::spawn(&python.path, &[script("pyfix.py").to_str().unwrap(), "gil", "12"]);
        let workers: BTreeSet<u64> = fixture.wait_ready_tids().into_iter().map(u64::from).collect();
        assert_eq!(workers.len(), 2, "{}: {workers:?}", python.label);
        let pid = u64::from(fixture.pid());
        let tmp = TempDir::new("offcpu-gil");
        let out = tmp.join("out");
        let xtrace = Xtrace::spawn(args!["-p", pid.to_string(), "--off-cpu", "-d", "2", "-o", &out]);
        xtrace.wait().assert_success();
        assert!(
            fixture.is_running(),
            "{}: the fixture ended within the capture",
            python.label
        );
        let out = Outputs::read(&out);
        assert_eq!(out.stop_reason(), "duration", "{}", python.label);
        let duration = u64_field(&out.summary, "duration_ns");
        let locks = out.summary["off_cpu"]["locks"].as_array().expect("off_cpu.locks");
        let gils: Vec<&Value> = locks.iter().filter(|l| l["name"] == "GIL").collect();
        assert_eq!(gils.len(), 1, "{}: {locks:#?}", python.label);
        let gil = gils[0];
        assert_eq!(gil["pid"], pid, "{}", python.label);
        let workers: BTreeMap<u64, u64> = runnable_ns(&out)
            .into_iter()
            .filter(|(tid, _)| workers.contains(tid))
            .collect();
        assert_eq!(
            workers.len(),
            2,
            "{}: {:#?}",
            python.label,
            out.summary["off_cpu"]
        );
        assert_gil_waits(python.label, gil, &workers, duration);
        let symbol = gil_cond_symbol(python.minor);
        assert_eq!(gil["symbol"], symbol, "{}: {gil:#?}", python.label);
        let line = format!("  lock `GIL` (`{symbol}`) in ");
        let text = out.summary_txt.lines().find(|l| l.starts_with(&line));
        let text = text.unwrap_or_else(|| panic!("{}: no GIL line in\n{}", python.label, out.summary_txt));
        assert!(
            text.contains(&format!("(pid {pid}): ")),
            "{}: {text}",
            python.label
        );
        assert!(
            text.contains(" of 2 threads; released most by "),
            "{}: {text}",
            python.label
        );
    }
}

/// Each thread's time waiting for a CPU (`runnable_ns`), by tid, from the summary's off_cpu
/// section.
fn runnable_ns(out: &Outputs) -> BTreeMap<u64, u64> {
    let threads = out.summary["off_cpu"]["threads"]
        .as_array()
        .expect("off_cpu.threads");
    threads
        .iter()
        .map(|t| (u64_field(t, "tid"), u64_field(t, "runnable_ns")))
        .collect()
}

/// `gil`'s waiters and holders are exactly `workers` (tid: nanoseconds runnable), their waits
/// adding up to the lock's. Each waits for the GIL while the other holds it: about 42% of the
/// `duration` it did not spend waiting for a CPU (which a busy machine makes longer), asserted
/// within 25% to 75%.
fn assert_gil_waits(label: &str, gil: &Value, workers: &BTreeMap<u64, u64>, duration: u64) {
    let waiters = gil["waiter_threads"].as_array().expect("waiter_threads");
    let tids: BTreeSet<u64> = waiters.iter().map(|w| u64_field(w, "tid")).collect();
    assert_eq!(tids, workers.keys().copied().collect(), "{label}: {gil:#?}");
    assert_eq!(u64_field(gil, "waiters"), 2, "{label}");
    for waiter in waiters {
        let runnable = workers[&u64_field(waiter, "tid")];
        let share = u64_field(waiter, "wait_ns") as f64 / duration.saturating_sub(runnable) as f64;
        assert!(
            (0.25..=0.75).contains(&share),
            "{label}: {share:.2} of {duration} ns less {runnable} runnable: {gil:#?}"
        );
        eprintln!(
            "gil: {label}: thread {} waited {:.0}% of the capture's {duration} ns less {runnable} runnable",
            waiter["tid"],
            share * 100.0
        );
    }
    let total: u64 = waiters.iter().map(|w| u64_field(w, "wait_ns")).sum();
    assert_eq!(u64_field(gil, "wait_ns"), total, "{label}");
    let holders = gil["holders"].as_array().expect("holders");
    let tids: BTreeSet<u64> = holders.iter().map(|h| u64_field(h, "tid")).collect();
    assert_eq!(tids, workers.keys().copied().collect(), "{label}: {gil:#?}");
    let released: Vec<u64> = holders.iter().map(|h| u64_field(h, "wakeups")).collect();
    eprintln!("gil: {label}: holders released waits of at least 1 ms {released:?} times");
}
