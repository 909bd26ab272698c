//! Off-CPU waits on the timeline (`--off-cpu`), in both trace formats, with fixture `offcpu`
//! (tests/fixtures/offcpu.c): `sleep N MS` waits N times MS in clock_nanosleep under sleeper();
//! `mutex MS` blocks the main thread in waiter() on the static mutex `lock` a thread named
//! "holder" holds for MS; `poll N MS` waits N times MS in poll(2), ended by a timer's interrupt.
//! Each wait of at least MIN is a slice of category `off_cpu` on its
//! thread (in a Perfetto trace on the thread's `off-CPU` child track), a wake-up by a thread a
//! `wake` instant on the waker's thread with a flow arrow forward to the woken thread's wait for a
//! CPU (`runnable`), which begins as the wait ends. The CPU is sampled at 1 Hz
//! beside, as in offcpu.rs.

use std::ffi::OsString;

use serde_json::Value;
use xtrace_tests::{
    args,
    bpf::Attachments,
    captures::xtrace,
    fixtures::fixtures,
    output::{us_to_ns, Outputs},
    perfetto::{decode, trace_events},
    profile::profile_command,
    require_bpf,
    run::Xtrace,
    TempDir,
};

const MS: i64 = 1_000_000;

/// The trace.json events of category `off_cpu` and phase `ph`.
fn off_cpu<'a>(out: &'a Outputs, ph: &str) -> Vec<&'a Value> {
    out.events
        .iter()
        .filter(|e| e["cat"] == "off_cpu" && e["ph"] == ph)
        .collect()
}

fn ns(event: &Value, field: &str) -> i64 {
    us_to_ns(
        event[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{field} of {event}")),
    )
}

/// The summary's (intervals, ns) of wait `name` of thread `tid`.
fn summary_wait(out: &Outputs, tid: u64, name: &str) -> (u64, u64) {
    let threads = out.summary["off_cpu"]["threads"]
        .as_array()
        .expect("off_cpu.threads");
    let thread = threads.iter().find(|t| t["tid"] == tid).expect("the thread");
    let wait = thread["waits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["wait"] == name)
        .unwrap_or_else(|| panic!("no {name} in {thread}"));
    (wait["intervals"].as_u64().unwrap(), wait["ns"].as_u64().unwrap())
}

/// Ten sleeps of 50 ms: exactly ten `clock_nanosleep` slices on the main thread, each at least
/// 50 ms, whose durations add up to the summary's clock_nanosleep time to the nanosecond.
/// Without `--off-cpu`, none.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn each_sleep_is_a_slice_on_its_thread() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("offtl-sleep");
    let out = profile_command(
        args!["--off-cpu", "-F", "1", "--trace-format", "json"],
        &fixtures().offcpu,
        &["sleep", "10", "50"],
        &tmp,
    );
    let pid = out.summary["command"]["pid"].as_u64().unwrap();
    let sleeps: Vec<&Value> = off_cpu(&out, "X")
        .into_iter()
        .filter(|e| e["name"] == "clock_nanosleep" && e["tid"] == pid)
        .collect();
    assert_eq!(sleeps.len(), 10, "{sleeps:?}");
    assert!(sleeps.iter().all(|e| ns(e, "dur") >= 50 * MS), "{sleeps:?}");
    // Woken by the timer, whichever thread its interrupt came in: no waker, and no arrow.
    assert!(
        sleeps.iter().all(|e| e["args"]["state"] == "sleeping"
            && e["args"]["woken_by"] == "timer"
            && e["args"]["waker"].is_null()),
        "{sleeps:?}"
    );
    let arrows: Vec<&Value> = ["s", "f", "i"].iter().flat_map(|ph| off_cpu(&out, ph)).collect();
    assert!(arrows.is_empty(), "a sleep has no wake-up arrow: {arrows:?}");
    let total: i64 = sleeps.iter().map(|e| ns(e, "dur")).sum();
    let (count, summed) = summary_wait(&out, pid, "clock_nanosleep");
    assert_eq!((count, total as u64), (10, summed));
    // A `runnable` slice follows a wait only where it waited for a CPU, and begins at its end.
    for runnable in off_cpu(&out, "X").into_iter().filter(|e| e["name"] == "runnable") {
        let at = ns(runnable, "ts");
        assert!(
            off_cpu(&out, "X")
                .iter()
                .any(|w| w["tid"] == runnable["tid"] && ns(w, "ts") + ns(w, "dur") == at),
            "{runnable}"
        );
    }
    // No spans: `report` leaves them out.
    let report = xtrace_tests::captures::xtrace(args!["report", &out.dir, "--format", "csv"]);
    assert_eq!(report.code, Some(0), "{}", report.stderr);
    assert!(!report.stdout.contains("off_cpu"), "{}", report.stdout);

    let tmp = TempDir::new("offtl-none");
    let out = profile_command(
        args!["-F", "1", "--trace-format", "json"],
        &fixtures().offcpu,
        &["sleep", "2", "10"],
        &tmp,
    );
    assert!(
        out.events.iter().all(|e| e["cat"] != "off_cpu"),
        "off-CPU events without --off-cpu"
    );
}

/// Ten polls of 20 ms with no descriptors, each ended by a timer's interrupt while a thread
/// named "spinner" keeps the CPUs busy: exactly ten `poll` slices on the main thread, each
/// `woken_by: interrupt` (at least eight: a wake-up may go unseen) with no waker and no arrow,
/// whichever thread the interrupt came in on (the spinner, often: once it was named as the
/// waker).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_wait_ended_by_an_interrupt_names_no_thread() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("offtl-poll");
    let out = profile_command(
        args!["--off-cpu", "-F", "1", "--trace-format", "json"],
        &fixtures().offcpu,
        &["poll", "10", "20"],
        &tmp,
    );
    let pid = out.summary["command"]["pid"].as_u64().unwrap();
    let polls: Vec<&Value> = off_cpu(&out, "X")
        .into_iter()
        .filter(|e| e["name"] == "poll" && e["tid"] == pid)
        .collect();
    assert_eq!(polls.len(), 10, "{:?}", off_cpu(&out, "X"));
    // A wake-up from an interrupt that came in while another program of xtrace's on that CPU
    // was inside a task-storage access is not seen: the kernel gives the wake-up's program no
    // task storage then. Such a poll says `unseen`, never a thread; one in a fresh-clone CI run
    // did.
    assert!(
        polls.iter().all(|e| ns(e, "dur") >= 20 * MS
            && ["interrupt", "unseen"].contains(&e["args"]["woken_by"].as_str().unwrap_or(""))
            && e["args"]["waker"].is_null()),
        "{polls:?}"
    );
    let by_interrupt = polls
        .iter()
        .filter(|e| e["args"]["woken_by"] == "interrupt")
        .count();
    assert!(by_interrupt >= 8, "{polls:?}");
    let arrows: Vec<&Value> = ["s", "f", "i"].iter().flat_map(|ph| off_cpu(&out, ph)).collect();
    assert!(arrows.is_empty(), "an interrupt draws no arrow: {arrows:?}");
    let (count, _) = summary_wait(&out, pid, "poll");
    assert_eq!(count, 10);
}

/// A wait on a mutex: one `futex lock` slice on the main thread of at least 190 ms, its args
/// naming the holder as the waker and the lock's address; a `wake` instant on the holder's
/// thread at the wait's end starts a flow (`s`) that ends (`f`, bound to the enclosing slice)
/// on the `runnable` slice that follows the wait, as it begins: the arrow goes forward in time.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_wait_on_a_mutex_has_an_arrow_from_its_holder() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("offtl-mutex");
    let out = profile_command(
        args!["--off-cpu", "-F", "1", "--trace-format", "json"],
        &fixtures().offcpu,
        &["mutex", "200"],
        &tmp,
    );
    let pid = out.summary["command"]["pid"].as_u64().unwrap();
    let holder = out
        .metadata("thread_name")
        .into_iter()
        .find(|m| m["args"]["name"] == "holder")
        .and_then(|m| m["tid"].as_u64())
        .expect("the holder thread named");
    assert_ne!(holder, pid);
    let waits: Vec<&Value> = off_cpu(&out, "X")
        .into_iter()
        .filter(|e| e["name"] == "futex lock" && e["tid"] == pid)
        .collect();
    assert_eq!(waits.len(), 1, "{:?}", off_cpu(&out, "X"));
    let wait = waits[0];
    assert!(ns(wait, "dur") >= 190 * MS, "{wait}");
    let args = &wait["args"];
    assert_eq!(args["state"], "sleeping", "{wait}");
    assert_eq!(args["waker"], format!("holder {pid}/{holder}"), "{wait}");
    assert!(args["lock"].as_str().unwrap().starts_with("0x"), "{wait}");
    assert!(args["runnable_ns"].is_u64(), "{wait}");
    let end = ns(wait, "ts") + ns(wait, "dur");
    // The wait for a CPU that follows the wait, as it ends (the clock's nanoseconds pass through
    // microseconds with 3 decimals: equal within 1 ns).
    let runnable: Vec<&Value> = off_cpu(&out, "X")
        .into_iter()
        .filter(|e| e["name"] == "runnable" && e["tid"] == pid && (ns(e, "ts") - end).abs() <= 1)
        .collect();
    assert_eq!(runnable.len(), 1, "{:?}", off_cpu(&out, "X"));
    let woken = ns(runnable[0], "ts");
    assert_eq!(
        ns(runnable[0], "dur"),
        args["runnable_ns"].as_i64().unwrap(),
        "{wait}"
    );
    // The flow's end on that `runnable`, as it begins (the main thread's other waits,
    // pthread_join's, may have arrows of their own); its start on the holder at the same time,
    // with the same id, beside the wake-up's instant; none ends at the wait's start.
    let ends: Vec<&Value> = off_cpu(&out, "f")
        .into_iter()
        .filter(|f| f["tid"] == pid && ns(f, "ts") == woken)
        .collect();
    assert_eq!(ends.len(), 1, "{:?}", off_cpu(&out, "f"));
    assert!(
        off_cpu(&out, "f").iter().all(|f| ns(f, "ts") != ns(wait, "ts")),
        "{:?}",
        off_cpu(&out, "f")
    );
    assert_eq!(
        (&ends[0]["bp"], &ends[0]["name"]),
        (&Value::from("e"), &Value::from("wake"))
    );
    let id = &ends[0]["id"];
    let starts: Vec<&Value> = off_cpu(&out, "s")
        .into_iter()
        .filter(|s| &s["id"] == id)
        .collect();
    assert_eq!(starts.len(), 1, "{:?}", off_cpu(&out, "s"));
    assert_eq!(
        (starts[0]["tid"].as_u64(), ns(starts[0], "ts")),
        (Some(holder), woken)
    );
    assert!(
        off_cpu(&out, "i")
            .iter()
            .any(|i| i["name"] == "wake" && i["tid"] == holder && ns(i, "ts") == woken),
        "{:?}",
        off_cpu(&out, "i")
    );
}

/// `xtrace FLAGS -o OUT -- offcpu ARGS` with a Perfetto trace, to its end; the decoded trace,
/// the summary and what was printed (by the fixture, then xtrace's summary).
fn perfetto_run(fixture_args: &[&str], tmp: &TempDir) -> (Value, Value, String) {
    let out = tmp.join("out");
    let before = Attachments::snapshot();
    let mut all: Vec<OsString> = args![
        "--off-cpu",
        "-F",
        "1",
        "--trace-format",
        "perfetto",
        "-o",
        &out,
        "--"
    ];
    all.push(fixtures().offcpu.clone().into_os_string());
    all.extend(fixture_args.iter().map(OsString::from));
    let finished = Xtrace::spawn(all).wait();
    finished.assert_success();
    before.assert_none_left();
    let summary: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    (
        decode(&out.join("trace.perfetto-trace")),
        summary,
        finished.stdout,
    )
}

/// The same in a Perfetto trace: the slices on each thread's `off-CPU` child track, the wake-up
/// an instant on the holder's whose flow id the `runnable` slice after the wait ends as it
/// begins, at the same time (the decoder reports an arrow that ends before it starts).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn perfetto_traces_have_the_waits_and_arrows_too() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("offtl-pf-sleep");
    let (decoded, summary, _) = perfetto_run(&["sleep", "10", "50"], &tmp);
    let pid = summary["command"]["pid"].as_i64().unwrap();
    let sleeps: Vec<&Value> = decoded["off_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s[0] == pid && s[1] == pid && s[2] == "clock_nanosleep")
        .collect();
    assert_eq!(sleeps.len(), 10, "{}", decoded["off_cpu"]);
    let durations: Vec<i64> = sleeps
        .iter()
        .map(|s| s[4].as_i64().unwrap() - s[3].as_i64().unwrap())
        .collect();
    assert!(durations.iter().all(|&d| d >= 50 * MS), "{durations:?}");
    let threads = summary["off_cpu"]["threads"].as_array().unwrap();
    let main = threads.iter().find(|t| t["tid"] == pid).unwrap();
    let summed = main["waits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["wait"] == "clock_nanosleep")
        .unwrap()["ns"]
        .as_i64();
    assert_eq!(Some(durations.iter().sum::<i64>()), summed);
    // The main thread's track, and those of threads a timer's interrupt found running.
    assert!(
        decoded["tracks"]["children"]["off-CPU"].as_u64() >= Some(1),
        "{}",
        decoded["tracks"]
    );

    let tmp = TempDir::new("offtl-pf-mutex");
    let (decoded, summary, _) = perfetto_run(&["mutex", "200"], &tmp);
    let pid = summary["command"]["pid"].as_i64().unwrap();
    let holder = decoded["tracks"]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t[2] == "holder")
        .and_then(|t| t[1].as_i64())
        .expect("the holder's thread track");
    let waits: Vec<&Value> = decoded["off_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s[0] == pid && s[1] == pid && s[2] == "futex lock")
        .collect();
    assert_eq!(waits.len(), 1, "{}", decoded["off_cpu"]);
    let (begin, end) = (waits[0][3].as_i64().unwrap(), waits[0][4].as_i64().unwrap());
    assert!(end - begin >= 190 * MS, "{}", waits[0]);
    assert_eq!(decoded["errors"], serde_json::json!([]));
    let edges: Vec<&Value> = decoded["flow_edges"]
        .as_array()
        .unwrap()
        .iter()
        // The main thread's other waits (pthread_join's) may have arrows of their own.
        .filter(|e| e["to"][2] == pid && e["to"][4] == end)
        .collect();
    assert_eq!(edges.len(), 1, "{}", decoded["flow_edges"]);
    assert_eq!(
        edges[0]["to"],
        serde_json::json!(["runnable", pid, pid, "off-CPU", end])
    );
    assert_eq!(
        edges[0]["from"],
        serde_json::json!(["wake", pid, holder, "off-CPU", end])
    );
}

/// A JSON recording of the mutex's wait converts to Perfetto and back event for event: the
/// waits, the wake-up's instant and both ends of its arrow, which ends on a `runnable` slice as
/// it begins.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn off_cpu_waits_convert_to_perfetto_and_back() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("offcpu-round-trip");
    let out = tmp.join("out");
    let offcpu = fixtures().offcpu.display().to_string();
    let args = args![
        // Over MIN only the mutex: the main thread's wait for the holder to start, about 1 ms
        // on a loaded machine, is added up, not sent with an arrow of its own.
        "--off-cpu=20ms",
        "-F",
        "1",
        "--trace-format",
        "json",
        "-o",
        &out,
        "--",
        offcpu,
        "mutex",
        "100"
    ];
    Xtrace::spawn(args).wait().assert_success();
    let ran = xtrace(args!["convert", &out]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let back = tmp.join("back");
    std::fs::create_dir(&back).unwrap();
    std::fs::copy(out.join("summary.json"), back.join("summary.json")).unwrap();
    std::fs::rename(
        out.join("trace.perfetto-trace"),
        back.join("trace.perfetto-trace"),
    )
    .unwrap();
    let ran = xtrace(args!["convert", &back]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let recorded = trace_events(&out.join("trace.json"));
    let converted = trace_events(&back.join("trace.json"));
    for (ph, name) in [("f", "wake"), ("s", "wake"), ("i", "wake"), ("X", "futex lock")] {
        let (ph, name) = (format!(r#""ph":"{ph}""#), format!(r#""name":"{name}""#));
        let n = recorded
            .iter()
            .filter(|e| e.contains(&ph) && e.contains(&name))
            .count();
        assert_eq!(n, 1, "{ph} {name}: {recorded:#?}");
    }
    let flow_end = recorded.iter().find(|e| e.contains(r#""ph":"f""#)).unwrap();
    let flow_end: Value = serde_json::from_str(flow_end).unwrap();
    let runnable = recorded
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .find(|e| e["name"] == "runnable" && e["tid"] == flow_end["tid"] && e["ts"] == flow_end["ts"]);
    assert!(runnable.is_some(), "no runnable at {flow_end}: {recorded:#?}");
    // The threads' short-wait counters, where the threads had short waits (they need not: see
    // short_waits_are_counters_of_their_thread), convert too, as compared below.
    assert_eq!(converted.len(), recorded.len());
    assert!(
        converted == recorded,
        "the events differ: {recorded:#?}\n{converted:#?}"
    );
}

/// The values of thread `tid`'s counter track `track` of a decoded Perfetto trace, with its unit.
fn thread_counter(decoded: &Value, tid: i64, track: &str) -> (Vec<i64>, Vec<i64>, String) {
    let found = decoded["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["tid"] == tid && c["track"] == track)
        .unwrap_or_else(|| panic!("no {track} of {tid}: {}", decoded["counters"]));
    let numbers = |field: &str| -> Vec<i64> {
        found[field]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as i64)
            .collect()
    };
    (
        numbers("values"),
        numbers("times"),
        found["unit"].as_str().unwrap().into(),
    )
}

/// 12,000 sleeps of 0.1 ms (about 2 s) under MIN 1 ms are added up in the kernel, yet the
/// thread's `short waits (ns)` and `short waits (count)` counter tracks, read once a second,
/// show them: over the capture they add up exactly to the summary's added-up blocked time (its
/// blocked time less the waits sent on their own, which are slices) and to the sleeps that
/// blocked (less those that overran MIN and were sent), and end at 0. A sleep blocks unless its
/// 0.1 ms are up before the thread leaves its CPU (a virtual CPU its host stalls): the fixture
/// counts the sleeps that did, from its voluntary context switches.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn short_waits_are_counters_of_their_thread() {
    if !require_bpf() {
        return;
    }
    const SLEEPS: i64 = 12_000;
    let tmp = TempDir::new("offtl-short");
    let (decoded, summary, printed) = perfetto_run(&["sleep", &SLEEPS.to_string(), "0.1"], &tmp);
    let pid = summary["command"]["pid"].as_i64().unwrap();
    let blocked_sleeps: i64 = printed
        .lines()
        .find_map(|line| line.strip_prefix("blocked "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the fixture printed {printed:?}"));
    assert!(
        blocked_sleeps <= SLEEPS && blocked_sleeps > SLEEPS * 9 / 10,
        "{blocked_sleeps} of {SLEEPS} sleeps blocked"
    );
    let (blocked, times, unit) = thread_counter(&decoded, pid, "short waits (ns)");
    assert_eq!(unit, "UNIT_TIME_NS");
    let (counts, count_times, unit) = thread_counter(&decoded, pid, "short waits (count)");
    assert_eq!(unit, "UNIT_COUNT");
    assert_eq!(times, count_times);
    assert!(times.len() >= 3, "{times:?}: a point a second and a last 0");
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    assert_eq!((blocked.last(), counts.last()), (Some(&0), Some(&0)));
    // The waits sent on their own: slices on the thread's off-CPU track.
    let sent: Vec<(String, i64)> = decoded["off_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s[1] == pid && s[2] != "runnable")
        .map(|s| {
            (
                s[2].as_str().unwrap().to_string(),
                s[4].as_i64().unwrap() - s[3].as_i64().unwrap(),
            )
        })
        .collect();
    let thread = summary["off_cpu"]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == pid)
        .unwrap();
    let blocked_ns = thread["sleeping_ns"].as_i64().unwrap() + thread["uninterruptible_ns"].as_i64().unwrap();
    let sent_ns: i64 = sent.iter().map(|(_, ns)| ns).sum();
    assert_eq!(blocked.iter().sum::<i64>(), blocked_ns - sent_ns, "{thread}");
    let sent_sleeps = sent.iter().filter(|(name, _)| name == "clock_nanosleep").count() as i64;
    let waits = thread["waits"].as_array().unwrap();
    let blocked_waits: i64 = waits
        .iter()
        .filter(|w| w["wait"] != "runnable")
        .map(|w| w["intervals"].as_i64().unwrap())
        .sum();
    assert_eq!(
        counts.iter().sum::<i64>(),
        blocked_waits - sent.len() as i64,
        "{thread}"
    );
    // Its sleeps, short or sent, are exactly those of the fixture's that blocked (it may also
    // block elsewhere, in a page fault's mmap lock say, which the counters hold too).
    let sleeps = waits
        .iter()
        .find(|w| w["wait"] == "clock_nanosleep")
        .and_then(|w| w["intervals"].as_i64());
    assert_eq!(sleeps, Some(blocked_sleeps), "{thread}");
    assert!(sent_sleeps <= blocked_sleeps, "{thread}");

    // In trace.json (by `convert`): `C` events on the thread, the tid in their names before the
    // unit, with the same values.
    let out = tmp.join("out");
    let ran = xtrace(args!["convert", &out]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let events: Vec<Value> = trace_events(&out.join("trace.json"))
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .filter(|e: &Value| e["ph"] == "C" && e["cat"] == "off_cpu" && e["tid"] == pid)
        .collect();
    let sum = |name: String| -> i64 {
        let values: Vec<i64> = events
            .iter()
            .filter(|e| e["name"] == name.as_str())
            .map(|e| e["args"]["value"].as_i64().unwrap())
            .collect();
        assert_eq!(values.len(), times.len(), "{name}: {events:?}");
        values.iter().sum()
    };
    assert_eq!(
        sum(format!("short waits {pid} (ns)")),
        blocked.iter().sum::<i64>()
    );
    assert_eq!(
        sum(format!("short waits {pid} (count)")),
        counts.iter().sum::<i64>()
    );
}
