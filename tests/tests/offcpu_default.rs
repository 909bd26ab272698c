//! Off-CPU time on by itself: `xtrace -p PID` with no probe flag measures it at MIN 1 ms, as
//! CPU sampling turns on at 99 Hz; `--no-off-cpu` turns it off. Fixture `offcpu phases`
//! (tests/fixtures/offcpu.c): for each line "N MS" it reads, sleeper() sleeps MS milliseconds N
//! times, then it prints "done B", B the sleeps that blocked.

use serde_json::Value;
use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::Xtrace,
    TempDir,
};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// Records `offcpu phases` with `-p PID -o DIR` and `flags` while it sleeps 6 times 5 ms (each
/// at least the default MIN: sent with its stack) and 25 times 200 µs (added up in the kernel);
/// the pid, the outputs, and how many of the 5 ms and of the 200 µs sleeps blocked.
fn capture(flags: &[&str], tmp: &TempDir) -> (u64, Outputs, [u64; 2]) {
    let mut fixture = Fixture::spawn(&fixtures().offcpu, &["phases"]);
    fixture.wait_ready();
    let out_dir = tmp.join("out");
    let pid = u64::from(fixture.pid());
    let mut all = args!["-p", pid.to_string(), "-o", &out_dir];
    all.extend(flags.iter().map(Into::into));
    let mut xtrace = Xtrace::spawn(all);
    // The attached line says so, as off-CPU time is on by itself.
    let attached = xtrace.wait_attached();
    let said = attached.contains(" and off-CPU time (MIN 1.00ms) to pid ");
    assert_eq!(said, !flags.contains(&"--no-off-cpu"), "{attached}");
    let blocked = [fixture.sleep_phase(6, 5.0), fixture.sleep_phase(25, 0.2)];
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    (pid, Outputs::read_profiled(&out_dir), blocked)
}

/// Thread `tid`'s (intervals, ns) in wait `name`, from the summary's off_cpu section.
fn waits_of(off: &Value, tid: u64, name: &str) -> (u64, u64) {
    let threads = off["threads"].as_array().expect("off_cpu.threads");
    threads
        .iter()
        .filter(|t| t["tid"] == tid)
        .flat_map(|t| t["waits"].as_array().expect("waits"))
        .filter(|w| w["wait"] == name)
        .map(|w| (w["intervals"].as_u64().unwrap(), w["ns"].as_u64().unwrap()))
        .fold((0, 0), |(c, n), (count, ns)| (c + count, n + ns))
}

/// Without any flag but the output directory: exactly the fixture's 31 clock_nanosleep waits
/// in its summary's off_cpu section (MIN 1 ms), the 6 of 5 ms among those sent with their
/// stacks; their time, all under sleeper() in offcpu.folded, is at least what was asked (sleeps
/// overrun, never underrun); offcpu.svg and wallclock.svg are written beside the CPU profile.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_pid_without_flags_measures_off_cpu_time() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("offcpu-default");
    let (pid, out, [long, short]) = capture(&[], &tmp);
    let off = &out.summary["off_cpu"];
    assert_eq!(u64_field(off, "min_ns"), MS, "{off}");
    // Every sleep that blocked (31 but where a virtual CPU stalled), each at least as long as
    // asked and at most 2 ms longer.
    let (count, ns) = waits_of(off, pid, "clock_nanosleep");
    assert_eq!(count, long + short, "{off}");
    let asked = long * 5 * MS + short * 200 * US;
    assert!(
        (asked..asked + count * 2 * MS).contains(&ns),
        "{ns} ns asleep: {off}"
    );
    let under_sleeper =
        out.off_cpu_ns_where(|s| s.contains(";main;phases;sleeper;") && s.ends_with(";[clock_nanosleep]"));
    assert_eq!(under_sleeper, ns, "{:?}", out.off_cpu_folded());
    // Sent on their own, each a slice in trace.json: the waits of 1 ms or more. They are the
    // sleeps of 5 ms, the waits for the fixture's next line, and any sleep of 200 µs whose
    // thread got its CPU back late (a virtual CPU its host stalls).
    let sent = out.sent_waits();
    assert_eq!(u64_field(off, "sent"), sent.len() as u64, "{off}");
    assert_eq!(u64_field(off, "lost"), 0, "{off}");
    assert!(sent.iter().all(|s| s.dur_ns() >= MS as i64), "{sent:?}");
    let sent_sleeps = |at_least: u64| {
        sent.iter()
            .filter(|s| s.name == "clock_nanosleep" && s.dur_ns() >= at_least as i64)
            .count() as u64
    };
    assert!(sent_sleeps(5 * MS) >= long, "{sent:?}");
    assert!(sent_sleeps(MS) <= long + short, "{sent:?}");
    for file in ["offcpu.folded", "offcpu.svg", "wallclock.folded", "wallclock.svg"] {
        assert!(out.dir.join(file).is_file(), "no {file}");
    }
    assert_eq!(out.summary["sample_frequency_hz"], 99);
    assert!(out.summary_txt.contains(" off CPU in "), "{}", out.summary_txt);
}

/// `--no-off-cpu`: the same capture has no off_cpu section and writes no off-CPU file; the CPU
/// is sampled at 99 Hz as without it.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn no_off_cpu_turns_it_off() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("offcpu-default-off");
    let (_, out, _) = capture(&["--no-off-cpu"], &tmp);
    assert_eq!(out.summary["off_cpu"], Value::Null, "{}", out.summary["off_cpu"]);
    for file in ["offcpu.folded", "offcpu.svg", "wallclock.folded", "wallclock.svg"] {
        assert!(!out.dir.join(file).exists(), "{file} written");
    }
    assert_eq!(out.summary["sample_frequency_hz"], 99);
    assert!(!out.summary_txt.contains(" off CPU in "), "{}", out.summary_txt);
}
