//! The live view's GPU charts in Debian's headless Chromium (tests/tools/live_gpu_page.py):
//! `gpumem` holds 1, 3 and then 2 MiB through the stand-in CUDA runtime while xtrace traces it
//! with `--cuda --live` and the stand-in NVML (tests/fixtures/nvml.c); the page's NVML memory
//! chart of the process and its CUDA memory chart step through the same values, and after Stop
//! every chart's last value is the last reading of trace.json's counter track (the stand-in's
//! value for its last read). `xtrace view` of the capture shows the same last values.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::Value;
use xtrace_tests::{
    args,
    fixtures::{fixtures, python, Fixture},
    output::Outputs,
    require_bpf,
    run::Xtrace,
    TempDir,
};

const MIB: u64 = 1 << 20;

/// GPU → track → series → last value, as the page script prints them.
type Lasts = BTreeMap<String, BTreeMap<String, BTreeMap<String, f64>>>;

/// The last value of each series of each counter track of trace.json, keyed as the page keys
/// them: the GPU's index for GPU tracks, `cuda` for the processes' CUDA device memory.
fn trace_lasts(out: &Outputs) -> Lasts {
    let mut lasts = Lasts::new();
    for e in out.events.iter().filter(|e| e["ph"] == "C") {
        let pid = e["pid"].as_u64().unwrap();
        let track = e["name"].as_str().unwrap();
        let (gpu, series): (String, Vec<(String, f64)>) = match pid.checked_sub(0x7fff_0000) {
            Some(index) => (
                index.to_string(),
                e["args"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
                    .collect(),
            ),
            None if track == "CUDA device memory (bytes)" => (
                "cuda".into(),
                vec![(format!("pid {pid}"), e["args"]["bytes"].as_f64().unwrap())],
            ),
            None => continue,
        };
        let charts = lasts
            .entry(gpu)
            .or_default()
            .entry(track.to_string())
            .or_default();
        charts.extend(series);
    }
    lasts
}

/// Runs tests/tools/live_gpu_page.py with `args`.
fn page_script(args: &[&str]) -> std::process::Child {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/live_gpu_page.py");
    Command::new(python())
        .arg(&script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("running tests/tools/live_gpu_page.py")
}

/// The next JSON line of the page script.
fn next_json(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> Value {
    let line = lines
        .next()
        .expect("a line from live_gpu_page.py")
        .expect("reading live_gpu_page.py");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

fn url_of(line: &str) -> String {
    line.split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("a URL")
        .to_string()
}

/// The page's last values: numbers as the script read them.
fn page_lasts(charts: &Value) -> Lasts {
    serde_json::from_value(charts.clone()).unwrap_or_else(|e| panic!("{e}: {charts}"))
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn live_gpu_charts_follow_the_stand_ins() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("live-gpu");
    let gpu_dir = tmp.join("gpu");
    std::fs::create_dir(&gpu_dir).unwrap();
    let mut fixture = Fixture::spawn_with_env(
        &fixtures().gpumem,
        &[],
        &[("XTRACE_STANDIN_GPU_DIR", gpu_dir.as_path())],
    );
    fixture.wait_ready();
    let pid = fixture.pid();
    let out = tmp.join("out");
    let env = fixtures().nvml_env(&gpu_dir);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut xtrace =
        Xtrace::spawn_with_env(args!["--cuda", "--live", "-p", pid.to_string(), "-o", &out], &env);
    let url = url_of(&xtrace.wait_stderr("xtrace: live view at "));
    xtrace.wait_attached();
    // The first allocation makes the charts: NVML lists the process once it holds memory.
    fixture.send("alloc 1048576");
    assert_eq!(fixture.next_line(), format!("held {MIB}"));
    let screenshot = std::env::var("XTRACE_LIVE_GPU_SCREENSHOT")
        .unwrap_or_else(|_| tmp.join("live-gpu.png").to_string_lossy().into_owned());
    let final_bytes = (2 * MIB).to_string();
    let mut page = page_script(&["live", &url, &pid.to_string(), &final_bytes, &screenshot]);
    let mut lines = BufReader::new(page.stdout.take().unwrap()).lines();
    assert_eq!(next_json(&mut lines)["watching"], true);
    // Each step held 2.5 s: the page, updated every second, sees each.
    std::thread::sleep(Duration::from_millis(2500));
    for (command, held) in [("alloc 2097152", 3 * MIB), ("free", 2 * MIB)] {
        fixture.send(command);
        assert_eq!(fixture.next_line(), format!("held {held}"));
        std::thread::sleep(Duration::from_millis(2500));
    }
    writeln!(page.stdin.as_mut().unwrap(), "done").unwrap();
    let seen = next_json(&mut lines);
    assert!(page.wait().unwrap().success(), "live_gpu_page.py failed: {seen}");
    let finished = xtrace.wait();
    finished.assert_success();
    fixture.send("exit");
    let outputs = Outputs::read(&out);
    assert_eq!(outputs.stop_reason(), "stopped_from_page");
    assert_eq!(seen["state"], "stopped: stopped from page");
    let steps = [MIB, 3 * MIB, 2 * MIB];
    assert_eq!(seen["nvml_steps"], serde_json::json!(steps), "{seen}");
    assert_eq!(seen["cuda_steps"], serde_json::json!(steps), "{seen}");

    // Every chart ends where trace.json's track ends: the stand-in's value for its last read.
    let page = page_lasts(&seen["charts"]);
    let trace = trace_lasts(&outputs);
    assert_eq!(page, trace);
    let gpus = outputs.summary["gpus"].as_array().unwrap();
    for (index, gpu) in gpus.iter().enumerate() {
        let last_read = gpu["samples"].as_f64().unwrap() - 1.0;
        let charts = &page[&index.to_string()];
        assert_eq!(charts["power (W)"]["power"], 100.0 + 0.5 * last_read);
        assert_eq!(charts["SM clock (MHz)"]["sm"], 1000.0 + 10.0 * last_read);
    }
    assert_eq!(
        page["0"]["traced processes' memory (bytes)"][&format!("pid {pid}")],
        steps[2] as f64
    );
    assert!(
        std::fs::metadata(&screenshot).is_ok_and(|m| m.len() > 10_000),
        "a screenshot in {screenshot}"
    );

    // `xtrace view` of the capture draws the same last values.
    let mut view = Xtrace::spawn(args!["view", &out]);
    let url = url_of(&view.wait_stderr("xtrace: live view at "));
    let mut script = page_script(&["view", &url]);
    let mut lines = BufReader::new(script.stdout.take().unwrap()).lines();
    let viewed = next_json(&mut lines);
    assert!(script.wait().unwrap().success(), "{viewed}");
    view.wait().assert_success();
    assert_eq!(page_lasts(&viewed["charts"]), trace);
}
