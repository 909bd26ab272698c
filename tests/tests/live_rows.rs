//! The live view's tables end equal to the capture's files. Probes: `gpumem` calls the stand-in
//! CUDA runtime under `--cuda --live`, whose plan also keeps a block of probes for CUDA libraries
//! loaded later (never placed here); the last snapshot names each function once, hides the CUDA
//! functions never called, and ends with summary.json's counts, its rows in summary.txt's order
//! (the most time first), as `xtrace view` of the capture shows them. Threads: `spans threads 4 N`'s
//! threads each call `work` N times; the last snapshot's per-thread calls are trace.json's spans
//! per thread, and `xtrace view` of the capture shows the same. Off CPU: `offcpu phases`
//! sleeps as each line it reads asks, under `--off-cpu=30ms --live`, long sleeps sent one by one
//! and short ones added up in the kernel; the last snapshot's blocked time of the sleeping thread
//! is summary.json's to the nanosecond, in the event stream and in the page's table as headless
//! Chromium reads it after pressing Stop (tests/tools/page_threads.py), and `xtrace view` shows
//! the same.

use std::{collections::BTreeMap, time::Duration};

use serde_json::Value;
use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    live::{read_events, View},
    output::Outputs,
    require_bpf,
    run::Xtrace,
    TempDir,
};

const MIB: u64 = 1 << 20;

/// name → count of the rows of a snapshot's probe table.
fn page_rows(snapshot: &Value) -> Vec<(String, u64)> {
    snapshot["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["all"]["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn live_probe_rows_are_the_summary_rows() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("live-rows");
    let mut fixture = Fixture::spawn(&fixtures().gpumem, &[]);
    fixture.wait_ready();
    let pid = fixture.pid();
    let out = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args!["--cuda", "--live", "-p", pid.to_string(), "-o", &out]);
    let view = View::from_line(&xtrace.wait_stderr("xtrace: live view at "));
    xtrace.wait_attached();
    let events = read_events(&view);
    for (command, held) in [
        ("alloc 1048576", MIB),
        ("alloc 2097152", 3 * MIB),
        ("free", 2 * MIB),
    ] {
        fixture.send(command);
        assert_eq!(fixture.next_line(), format!("held {held}"));
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(view.stop().status, 200);
    xtrace.wait().assert_success();
    fixture.send("exit");
    let outputs = Outputs::read(&out);
    let messages = events.join().expect("the event stream's reader");
    let last = messages.last().expect("a last snapshot");
    assert_eq!(last["done"], true, "{last}");

    let rows = page_rows(last);
    let mut seen = std::collections::BTreeSet::new();
    for (name, _) in &rows {
        assert!(seen.insert(name.clone()), "{name} has one row: {rows:?}");
    }
    // summary.txt's rows: the CUDA functions called, and every other probe.
    let summary: BTreeMap<String, u64> = outputs.summary["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] != "cuda" || p["count"].as_u64() > Some(0))
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["count"].as_u64().unwrap(),
            )
        })
        .collect();
    // In summary.txt's order, the most time first (then by name), in the page and in
    // `xtrace view`.
    let order: Vec<&str> = rows.iter().map(|(name, _)| name.as_str()).collect();
    let mut by_total: Vec<(u64, &str)> = outputs.summary["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["total_ns"].as_u64().unwrap(), p["name"].as_str().unwrap()))
        .filter(|(_, name)| order.contains(name))
        .collect();
    by_total.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    assert_eq!(order, by_total.iter().map(|(_, n)| *n).collect::<Vec<_>>());
    let txt: Vec<&str> = outputs
        .summary_txt
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|first| order.contains(first))
        .collect();
    assert_eq!(&txt[..order.len()], &order[..], "{}", outputs.summary_txt);
    let mut viewer = Xtrace::spawn(args!["view", &out]);
    let served = View::from_line(&viewer.wait_stderr("xtrace: live view at "));
    let state: Value = serde_json::from_slice(&served.get("/state.json").body).expect("JSON");
    assert_eq!(page_rows(&state), rows, "{}", state["probes"]);
    assert_eq!(served.stop().status, 200);
    viewer.wait().assert_success();
    let page: BTreeMap<String, u64> = rows.into_iter().collect();
    assert_eq!(page, summary);
    assert_eq!((page["cudaMalloc"], page["cudaFree"]), (2, 1), "{page:?}");
    for name in page.keys() {
        assert!(
            outputs
                .summary_txt
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{name} is a row of summary.txt:\n{}",
            outputs.summary_txt
        );
    }
}

/// tid → calls of a snapshot's thread table, the threads with calls only.
fn thread_calls(snapshot: &Value) -> BTreeMap<u64, u64> {
    snapshot["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter(|t| t["calls"].as_u64() > Some(0))
        .map(|t| (t["tid"].as_u64().unwrap(), t["calls"].as_u64().unwrap()))
        .collect()
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn live_thread_rows_end_equal_to_the_trace() {
    if !require_bpf() {
        return;
    }
    const CALLS: u64 = 30_000;
    let tmp = TempDir::new("live-threads");
    let mut fixture = Fixture::spawn(&fixtures().spans, &["threads", "4", &CALLS.to_string()]);
    let tids = fixture.wait_ready_tids();
    assert_eq!(tids.len(), 4);
    let out = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args![
        "-u",
        "work",
        "-F",
        "499",
        "--live",
        "-p",
        fixture.pid().to_string(),
        "-o",
        &out
    ]);
    let view = View::from_line(&xtrace.wait_stderr("xtrace: live view at "));
    xtrace.wait_attached();
    let events = read_events(&view);
    fixture.go();
    assert!(fixture.wait().success());
    xtrace.wait().assert_success();
    let outputs = Outputs::read(&out);
    let last = events
        .join()
        .expect("the event stream's reader")
        .pop()
        .expect("a snapshot");
    assert_eq!(last["done"], true, "{last}");

    // trace.json's spans per thread: each worker's CALLS.
    let mut trace: BTreeMap<u64, u64> = BTreeMap::new();
    for e in outputs
        .events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == "work")
    {
        *trace.entry(e["tid"].as_u64().unwrap()).or_default() += 1;
    }
    let expected: BTreeMap<u64, u64> = tids.iter().map(|&t| (u64::from(t), CALLS)).collect();
    assert_eq!(trace, expected);
    assert_eq!(thread_calls(&last), trace, "{}", last["threads"]);
    let threads = last["threads"].as_array().unwrap();
    for t in threads.iter().filter(|t| t["calls"].as_u64() > Some(0)) {
        assert_eq!(t["pid"], fixture.pid(), "{t}");
        assert_eq!(t["name"], "spans", "{t}");
        assert!(t["samples_10s_pct"].is_f64(), "sampled: {t}");
        assert!(t["off_cpu"].is_null(), "no --off-cpu: {t}");
    }
    assert_eq!(last["off_cpu"], false);
    let shares: f64 = threads.iter().filter_map(|t| t["samples_10s_pct"].as_f64()).sum();
    assert!(shares <= 100.5, "{shares}");
    assert_eq!(last["threads_seen"].as_u64(), Some(threads.len() as u64));

    // `xtrace view` of the capture: the same calls per thread.
    let mut viewer = Xtrace::spawn(args!["view", &out]);
    let served = View::from_line(&viewer.wait_stderr("xtrace: live view at "));
    let state: Value = serde_json::from_slice(&served.get("/state.json").body).expect("JSON");
    assert_eq!(thread_calls(&state), trace, "{}", state["threads"]);
    assert_eq!(served.stop().status, 200);
    viewer.wait().assert_success();
}

/// The `off_cpu` figures of thread `tid` in a snapshot's thread table.
fn thread_off_cpu(snapshot: &Value, tid: u32) -> &Value {
    let threads = snapshot["threads"].as_array().expect("threads");
    let row = threads
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("no thread {tid} in {threads:?}"));
    &row["off_cpu"]
}

/// Thread `tid`'s off-CPU cells in the thread table of the page at `line`'s URL, read in
/// headless Chromium (tests/tools/page_threads.py); `mode` `stop` presses Stop first and reads
/// the page's last figures.
fn page_threads(line: &str, tid: u32, mode: &str) -> Value {
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("a URL");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/page_threads.py");
    let run = std::process::Command::new(xtrace_tests::fixtures::python())
        .arg(&script)
        .args([url, &tid.to_string(), mode])
        .output()
        .expect("running tests/tools/page_threads.py");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "page_threads.py failed ({}):\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("page_threads.py's JSON")
}

/// How the page shows a duration under a second (its `duration()`): milliseconds to one decimal.
fn shown_ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn live_off_cpu_time_ends_equal_to_the_summary() {
    if !require_bpf() {
        return;
    }
    const MS: u64 = 1_000_000;
    let tmp = TempDir::new("live-offcpu");
    let mut fixture = Fixture::spawn(&fixtures().offcpu, &["phases"]);
    fixture.wait_ready();
    let pid = fixture.pid();
    let out = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args![
        "--off-cpu=30ms",
        "-F",
        "1",
        "--live",
        "-p",
        pid.to_string(),
        "-o",
        &out
    ]);
    let line = xtrace.wait_stderr("xtrace: live view at ");
    let view = View::from_line(&line);
    xtrace.wait_attached();
    let events = read_events(&view);
    // Ten sleeps of 50 ms, each sent; twenty of 5 ms, added up in the kernel.
    let long = fixture.sleep_phase(10, 50.0);
    let short = fixture.sleep_phase(20, 5.0);
    // The kernel's table is read once a second: at least one read after the short sleeps.
    std::thread::sleep(Duration::from_millis(1500));
    // The page in Chromium: Stop, then its last figures.
    let browser = page_threads(&line, pid, "stop");
    xtrace.wait().assert_success();
    drop(fixture);
    let outputs = Outputs::read(&out);
    let messages = events.join().expect("the event stream's reader");
    let last = messages.last().expect("a last snapshot");
    assert_eq!(
        (&last["done"], &last["off_cpu"]),
        (&Value::Bool(true), &Value::Bool(true)),
        "{last}"
    );

    let summary = outputs.summary["off_cpu"]["threads"]
        .as_array()
        .expect("off_cpu.threads")
        .iter()
        .find(|t| t["tid"] == pid)
        .unwrap_or_else(|| panic!("thread {pid} in {}", outputs.summary["off_cpu"]));
    let ns = |key: &str| summary[key].as_u64().unwrap();
    let blocked = ns("sleeping_ns") + ns("uninterruptible_ns");
    // The sleeps that blocked (all but where a virtual CPU stalled), and the waits in read
    // between the phases.
    let slept = long * 50 * MS + short * 5 * MS;
    assert!(blocked >= slept, "{summary}");
    let page = thread_off_cpu(last, pid);
    assert_eq!(page["blocked_ns"].as_u64(), Some(blocked), "{page} vs {summary}");
    assert_eq!(
        page["runnable_ns"].as_u64(),
        Some(ns("runnable_ns")),
        "{page} vs {summary}"
    );
    // The sleeps were within the last 10 s.
    // The page shows them: each cell's data-ns exactly, its text rounded as `duration()` does.
    assert_eq!(browser["offcpu_headers"], 6, "{browser}");
    let cell = &browser["row"]["blocked"];
    assert_eq!(cell["ns"].as_u64(), Some(blocked), "{browser}");
    if blocked < 1_000_000_000 {
        assert_eq!(
            cell["text"].as_str(),
            Some(shown_ms(blocked).as_str()),
            "{browser}"
        );
    }
    assert_eq!(
        browser["row"]["runnable"]["ns"].as_u64(),
        Some(ns("runnable_ns")),
        "{browser}"
    );
    let blocked_10s = page["blocked_10s_ns"].as_u64().unwrap();
    assert!((slept..=blocked).contains(&blocked_10s), "{page}");
    // Some snapshot before the last showed the sleeps sent one by one (500 ms and more).
    assert!(
        messages
            .iter()
            .filter(|m| m["done"] == false)
            .any(|m| thread_off_cpu(m, pid)["blocked_ns"].as_u64() >= Some(long * 50 * MS)),
        "the blocked time rose while the capture ran"
    );

    // `xtrace view` of the capture: the same figures, the whole capture's only.
    let mut viewer = Xtrace::spawn(args!["view", &out]);
    let line = viewer.wait_stderr("xtrace: live view at ");
    let served = View::from_line(&line);
    let state: Value = serde_json::from_slice(&served.get("/state.json").body).expect("JSON");
    assert_eq!(state["off_cpu"], true);
    let browser = page_threads(&line, pid, "view");
    assert_eq!(
        browser["row"]["blocked"]["ns"].as_u64(),
        Some(blocked),
        "{browser}"
    );
    assert_eq!(browser["row"]["blocked10"]["text"], "–", "{browser}");
    let stored = thread_off_cpu(&state, pid);
    assert_eq!(
        (stored["blocked_ns"].as_u64(), stored["runnable_ns"].as_u64()),
        (Some(blocked), Some(ns("runnable_ns"))),
        "{stored}"
    );
    assert!(stored["blocked_10s_ns"].is_null(), "{stored}");
    assert_eq!(served.stop().status, 200);
    viewer.wait().assert_success();
}
