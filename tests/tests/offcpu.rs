//! Off-CPU time (`--off-cpu`) on the real kernel, with fixture `offcpu` (tests/fixtures/offcpu.c):
//! `sleep N MS` waits N times MS in clock_nanosleep under sleeper(); `mutex MS` blocks the main
//! thread in waiter() on a mutex a thread named "holder" holds for MS. The CPU is sampled at
//! 1 Hz beside: naming the samples of the default 99 Hz costs a debug xtrace under the kernel
//! matrix's emulation more than the tests' time limit allows. The Python tests run
//! `pyfix.py waits N` (tests/fixtures/pyfix.py) on every interpreter present. With `--flight`,
//! `offcpu phases` sleeps as each line it reads asks: a flight directory holds the waits of its
//! window, long and short, and none of the phase before it.

use std::{thread, time::Duration};

use serde_json::Value;
use xtrace_tests::{
    args,
    captures::xtrace,
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    profile::profile_command,
    python::interpreters,
    require_bpf,
    run::{run_error, Xtrace},
    TempDir,
};

const MS: u64 = 1_000_000;

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
    let under_sleeper = out.off_cpu_ns_where(|s| {
        s.starts_with("offcpu;") && s.contains(";main;sleeper;") && s.ends_with(";[clock_nanosleep]")
    });
    assert_eq!(under_sleeper, ns, "{:?}", out.off_cpu_folded());
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
    let under_waiter = out.off_cpu_ns_where(|s| s.contains(";main;waiter;") && s.ends_with(";[futex]"));
    assert!(
        (150 * MS..=210 * MS).contains(&under_waiter),
        "{:?}",
        out.off_cpu_folded()
    );
    let wakers = main["woken_by"].as_array().unwrap();
    assert!(
        wakers
            .iter()
            .any(|w| w["comm"] == "holder" && w["pid"] == pid && w["tid"] != pid),
        "{wakers:?}"
    );
    // wallclock.folded: every off-CPU stack with its frames marked `_[i]` (drawn apart) and its
    // nanoseconds, every sample one period (1 s at -F 1).
    let wall: std::collections::BTreeMap<String, u64> =
        out.folded_file("wallclock.folded").into_iter().collect();
    for (stack, ns) in out.off_cpu_folded() {
        let (root, rest) = stack.split_once(';').unwrap();
        let marked: Vec<String> = rest.split(';').map(|f| format!("{f}_[i]")).collect();
        assert_eq!(
            wall.get(&format!("{root};{}", marked.join(";"))),
            Some(&ns),
            "{stack}"
        );
    }
    for (stack, samples) in out.folded() {
        assert_eq!(wall.get(&stack), Some(&(samples * 1_000_000_000)), "{stack}");
    }
    let svg = out.dir.join("wallclock.svg");
    let svg = std::fs::read_to_string(&svg).unwrap_or_else(|e| panic!("{}: {e}", svg.display()));
    assert!(svg.contains("off CPU in aqua"));
    // The wait is the lock's: the fixture's static `lock`, released by the holder thread, with
    // the waiter's stack under waiter() and the holder's where it unlocked.
    let locks = out.summary["off_cpu"]["locks"].as_array().expect("off_cpu.locks");
    let lock = &locks[0];
    assert_eq!(lock["name"], "lock", "{locks:?}");
    assert_eq!(lock["place"], fixtures().offcpu.to_str().unwrap(), "{lock}");
    assert_eq!(
        (lock["pid"].as_u64(), lock["waiters"].as_u64()),
        (Some(pid), Some(1)),
        "{lock}"
    );
    let wait_ns = lock["wait_ns"].as_u64().unwrap();
    assert!((150 * MS..=210 * MS).contains(&wait_ns), "{lock}");
    assert!(
        wait_ns <= under_waiter + MS,
        "{lock}: more than the futex wait under waiter()"
    );
    let holders = lock["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{lock}");
    assert_eq!(
        (holders[0]["comm"].as_str(), holders[0]["wakeups"].as_u64()),
        (Some("holder"), Some(1))
    );
    assert_ne!(holders[0]["tid"].as_u64(), Some(pid));
    let waiter = lock["waiter_stack"].as_str().unwrap();
    assert!(waiter.contains(";main;waiter;"), "{waiter}");
    let holder = lock["holder_stack"].as_str().expect("the holder's stack");
    assert!(
        holder.contains("lll_lock_wake") || holder.contains("mutex_unlock"),
        "{holder}"
    );
    let line = format!("  lock `lock` in {} (pid {pid}): ", fixtures().offcpu.display());
    let line = out.summary_txt.lines().find(|l| l.starts_with(&line));
    let line = line.unwrap_or_else(|| panic!("no lock line in\n{}", out.summary_txt));
    let released = format!(
        " of 1 threads; released most by holder {pid}/{} (1x)",
        holders[0]["tid"]
    );
    assert!(line.ends_with(&released), "{line}");
}

/// `report` shows a capture's time off CPU by wait, its longest waits and its locks; `diff`
/// compares the time per wait of two captures: here a mutex held 200 ms, then 100 ms.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn report_and_diff_show_time_off_cpu() {
    if !require_bpf() {
        return;
    }
    let (base, new) = (TempDir::new("offcpu-base"), TempDir::new("offcpu-new"));
    let flags = || args!["--off-cpu", "-F", "1"];
    let base = profile_command(flags(), &fixtures().offcpu, &["mutex", "200"], &base);
    let new = profile_command(flags(), &fixtures().offcpu, &["mutex", "100"], &new);
    let report = xtrace(args!["report", &base.dir]);
    assert_eq!(report.code, Some(0), "{}", report.stderr);
    let text = &report.stdout;
    let row = |table: &str, first: &str| -> Vec<String> {
        let section = text
            .split(table)
            .nth(1)
            .unwrap_or_else(|| panic!("no {table} in:\n{text}"));
        let line = section
            .lines()
            .find(|l| l.split_whitespace().next() == Some(first));
        line.unwrap_or_else(|| panic!("no {first} row under {table}:\n{text}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    assert!(text.contains("\nOFF-CPU: "), "{text}");
    let futex = row("\nOFF-CPU: ", "futex");
    let ms = |cell: &str| {
        cell.strip_suffix("ms")
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(-1.0)
    };
    assert!((150.0..=215.0).contains(&ms(&futex[1])), "{futex:?}");
    let lock = row("\nCONTENDED LOCKS\n", "lock");
    assert_eq!(lock[1], "1", "{lock:?}");
    assert_eq!(lock[3], "holder", "{lock:?}");
    assert!(text.contains(";main;waiter;"), "{text}");
    // The JSON report carries the same.
    let json = xtrace(args!["report", &base.dir, "--format", "json"]);
    let parsed: Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert_eq!(parsed["off_cpu"]["locks"][0]["lock"], "lock");

    let diff = xtrace(args![
        "diff",
        &base.dir,
        &new.dir,
        "-o",
        base.dir.join("diff.svg")
    ]);
    assert_eq!(diff.code, Some(0), "{}", diff.stdout);
    let line = diff
        .stdout
        .lines()
        .find(|l| l.starts_with("futex "))
        .unwrap_or_else(|| panic!("{}", diff.stdout));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert!(
        ms(cells[1]) > 150.0 && (75.0..=115.0).contains(&ms(cells[2])),
        "{line}"
    );
    assert!(cells[3].starts_with('-'), "{line}");
}

/// The waits' (intervals, ns) of thread `tid` in wait `name`, none when it has none.
fn waits_of(out: &Outputs, tid: u64, name: &str) -> (u64, u64) {
    let threads = out.summary["off_cpu"]["threads"]
        .as_array()
        .expect("off_cpu.threads");
    threads
        .iter()
        .filter(|t| t["tid"] == tid)
        .flat_map(|t| t["waits"].as_array().expect("waits"))
        .filter(|w| w["wait"] == name)
        .map(|w| (w["intervals"].as_u64().unwrap(), w["ns"].as_u64().unwrap()))
        .fold((0, 0), |(c, n), (count, ns)| (c + count, n + ns))
}

/// With `--flight 2s` and `--off-cpu=20ms`: 4 sleeps of 50 ms and 30 of 2 ms, a pause longer
/// than the window and the second between two reads of the kernel's added-up waits, then 6 of
/// 50 ms and 40 of 2 ms, and SIGUSR1. flight-001's off_cpu has exactly the second phase's 46
/// clock_nanosleep waits of the fixture's thread, 6 sent on their own, 40 added up in the kernel;
/// its offcpu.folded puts their time under sleeper(), and wallclock.folded holds it too. The
/// stop's window, after them, has none; the capture directory has the run's 80. (A sleep whose
/// time is up before its thread leaves the CPU is no wait: the counts are of those the fixture
/// says blocked.)
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_flight_window_holds_the_waits_of_its_time() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().offcpu, &["phases"]);
    fixture.wait_ready();
    let tmp = TempDir::new("offcpu-flight");
    let out_dir = tmp.join("out");
    let pid = u64::from(fixture.pid());
    let flags = args![
        "-p",
        pid.to_string(),
        "--off-cpu=20ms",
        "-F",
        "1",
        "--flight",
        "2s",
        "-o",
        &out_dir
    ];
    let mut xtrace = Xtrace::spawn(flags);
    xtrace.wait_attached();
    let first = fixture.sleep_phase(4, 50.0) + fixture.sleep_phase(30, 2.0);
    // The window, the second the added-up waits may wait to be read, and a margin.
    thread::sleep(Duration::from_millis(3500));
    let long = fixture.sleep_phase(6, 50.0);
    let short = fixture.sleep_phase(40, 2.0);
    xtrace.signal(libc::SIGUSR1);
    xtrace.wait_stderr("xtrace: flight recorder: wrote ");
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();

    let out = Outputs::read_profiled(&out_dir.join("flight-001"));
    let off = &out.summary["off_cpu"];
    assert_eq!(u64_field(off, "min_ns"), 20 * MS);
    let (count, ns) = waits_of(&out, pid, "clock_nanosleep");
    // The sleeps that blocked (46 but where a virtual CPU stalled).
    assert_eq!(count, long + short, "the second phase's only: {off}");
    // Sleeps overrun, never underrun; 2 ms each for the short ones at most.
    let asked = long * 50 * MS + short * 2 * MS;
    assert!(
        (asked..asked + count * 2 * MS).contains(&ns),
        "{ns} ns asleep: {off}"
    );
    let under_sleeper = out.off_cpu_ns_where(|s| {
        s.starts_with("offcpu;") && s.contains(";main;phases;sleeper;") && s.ends_with(";[clock_nanosleep]")
    });
    assert_eq!(under_sleeper, ns, "{:?}", out.off_cpu_folded());
    // Sent on their own, each a slice in the window's trace.json: the waits of 20 ms or more,
    // the six long sleeps and the waits for the fixture's next line among them.
    let sent = out.sent_waits();
    assert_eq!(u64_field(off, "sent"), sent.len() as u64, "{off}");
    assert!(sent.iter().all(|s| s.dur_ns() >= 20 * MS as i64), "{sent:?}");
    let long_sent = sent
        .iter()
        .filter(|s| s.name == "clock_nanosleep" && s.dur_ns() >= 50 * MS as i64)
        .count();
    assert!(long_sent as u64 >= long, "{sent:?}");
    let folded_ns: u64 = out.off_cpu_folded().iter().map(|(_, ns)| ns).sum();
    assert_eq!(folded_ns, u64_field(off, "off_cpu_ns"), "{off}");
    assert!(out.dir.join("offcpu.svg").is_file());
    let wall = out.folded_file("wallclock.folded");
    let wall_off: u64 = wall
        .iter()
        .filter(|(stack, _)| stack.contains("_[i]"))
        .map(|(_, ns)| ns)
        .sum();
    assert_eq!(wall_off, folded_ns, "{wall:?}");
    assert!(out.summary_txt.contains(" off CPU in "), "{}", out.summary_txt);

    let stop = Outputs::read(&out_dir.join("flight-002"));
    assert_eq!(
        waits_of(&stop, pid, "clock_nanosleep"),
        (0, 0),
        "{}",
        stop.summary["off_cpu"]
    );
    let whole = Outputs::read(&out_dir);
    assert_eq!(
        waits_of(&whole, pid, "clock_nanosleep").0,
        first + long + short,
        "{}",
        whole.summary["off_cpu"]
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

/// Whether folded `stack` has the frame `frame` and ends in wait `leaf`.
fn waited_in(stack: &str, frame: &str, leaf: &str) -> bool {
    stack.split(';').any(|f| f == frame) && stack.rsplit(';').next() == Some(leaf)
}

/// Python frames on off-CPU stacks, on every interpreter present: `pyfix.py waits 10` sleeps ten
/// times 50 ms in nap(), exactly ten waits of the main thread whose time all lies under
/// `nap (pyfix.py:99)`, while another thread waits in blocked() for a lock the main thread holds
/// through the naps, about 500 ms under `blocked (pyfix.py:105)`. summary.json's hottest waits
/// name both.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn python_functions_that_wait_are_named_on_off_cpu_stacks() {
    if !require_bpf() {
        return;
    }
    for python in interpreters() {
        let (out, _tmp) = python.run("waits", "10", &["--off-cpu", "-F", "99"]);
        python.assert_recognised(&out);
        let pid = out.summary["command"]["pid"].as_u64().unwrap();
        let main = thread(&out, pid);
        // 3.10's time.sleep() waits in select() (pselect6 where libc makes it so), later ones in
        // clock_nanosleep().
        let sleep = ["clock_nanosleep", "select", "pselect6"]
            .into_iter()
            .find(|name| {
                main["waits"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|w| w["wait"] == *name)
            })
            .unwrap_or_else(|| panic!("{}: no sleep in {main}", python.label));
        let (count, ns) = wait(main, sleep);
        assert_eq!(count, 10, "{}: {main}", python.label);
        assert!(
            (500 * MS..550 * MS).contains(&ns),
            "{}: {ns} ns asleep",
            python.label
        );
        let nap = python.frame("nap", 99);
        let leaf = format!("[{sleep}]");
        let under_nap = out.off_cpu_ns_where(|s| waited_in(s, &nap, &leaf));
        assert_eq!(under_nap, ns, "{}: {:?}", python.label, out.off_cpu_folded());
        let blocked = python.frame("blocked", 105);
        let under_blocked = out.off_cpu_ns_where(|s| waited_in(s, &blocked, "[futex]"));
        assert!(
            (400 * MS..=750 * MS).contains(&under_blocked),
            "{}: {under_blocked} ns under {blocked}: {:?}",
            python.label,
            out.off_cpu_folded()
        );
        let hot = out.summary["off_cpu"]["hot_stacks"].as_array().unwrap();
        for frame in [&nap, &blocked] {
            assert!(
                hot.iter()
                    .any(|h| h["stack"].as_str().unwrap().contains(frame.as_str())),
                "{}: {frame} not in {hot:?}",
                python.label
            );
        }
    }
}

/// `--no-python`: off-CPU stacks of a Python process hold native frames only, the eval loop's
/// among them.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn no_python_leaves_python_frames_off_off_cpu_stacks() {
    if !require_bpf() {
        return;
    }
    let Some(python) = interpreters().into_iter().next() else {
        return;
    };
    let (out, _tmp) = python.run("waits", "4", &["--off-cpu", "-F", "99", "--no-python"]);
    assert_eq!(out.summary["python"], serde_json::json!([]));
    let folded = out.off_cpu_folded();
    assert!(
        folded.iter().all(|(s, _)| !s.contains("(pyfix.py:")),
        "{folded:?}"
    );
    let eval = out.off_cpu_ns_where(|s| s.contains(";_PyEval_EvalFrameDefault;"));
    assert!(eval >= 200 * MS, "{eval} ns under the eval loop: {folded:?}");
}
