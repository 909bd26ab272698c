//! `xtrace view DIR`: the live view's page over a finished capture. Its one snapshot is made from
//! summary.json (each probe's count, rate over the capture, p50 and p99: the figures `xtrace
//! report` shows; for a merged capture, whose summary lists no probes, from its spans, as
//! `xtrace report` works them out), its flamegraph from stacks.folded, its GPU charts from the
//! trace's counter tracks and its threads' time off CPU from summary.json's `off_cpu` section;
//! the recent stretches, which a stored capture does not have, are null. With `--diff`
//! the snapshot holds `xtrace diff`'s tables instead.
use serde::Serialize;
use serde_json::Value;

use super::gpu_charts::{Charts, GpuCharts};
use crate::{analysis::capture::Capture, cuda::nvml::track_pid, pipeline::family::cuda::CUDA_MEMORY_TRACK};

#[derive(Serialize)]
struct Snapshot<'a> {
    view: String,
    elapsed_s: f64,
    events: Option<u64>,
    event_rate: Option<f64>,
    lost: u64,
    /// xtrace's own CPU time, which a stored capture does not have.
    xtrace_cpu: Option<()>,
    samples: u64,
    stacks_kept_s: u64,
    probes: Vec<Row<'a>>,
    alerts: Vec<String>,
    alerts_total: u64,
    done: bool,
    stop_reason: Option<&'a str>,
    #[serde(flatten)]
    charts: Charts,
    threads: Vec<Thread<'a>>,
    threads_seen: usize,
    /// Whether the threads' rows have their time off CPU (a capture made with `--off-cpu`).
    off_cpu: bool,
}

/// A thread's calls and time off CPU over the whole capture (a stored capture has no recent
/// stretches).
#[derive(Serialize)]
struct Thread<'a> {
    pid: u32,
    tid: u32,
    name: &'a str,
    calls_10s: Option<()>,
    calls_60s: Option<()>,
    calls: u64,
    samples_10s_pct: Option<()>,
    off_cpu: Option<super::threads::OffCpu>,
}

#[derive(Serialize)]
struct Row<'a> {
    name: &'a str,
    kind: &'a str,
    last_10s: Option<()>,
    last_60s: Option<()>,
    all: super::publish::Figures,
}

/// Two captures compared, as `xtrace diff` prints them: what the page shows of
/// `xtrace view --diff`.
#[derive(Serialize)]
pub struct DiffPage<'a> {
    pub base: String,
    pub new: String,
    /// The probes' table: its header and a row of cells per probe, as printed.
    pub header: &'a [&'a str],
    pub rows: &'a [Vec<String>],
    /// The off-CPU and CPU samples' tables, as printed.
    pub tables: &'a str,
    /// The closing line.
    pub verdict: &'a str,
    /// Whether the differential flamegraph was drawn (both captures have stacks).
    pub flamegraph: bool,
}

/// The one snapshot of `xtrace view --diff`.
pub fn diff_snapshot(diff: &DiffPage) -> String {
    serde_json::json!({
        "view": format!("{} vs {}", diff.new, diff.base),
        "done": true,
        "diff": diff,
    })
    .to_string()
}

/// The snapshot of `capture` as the page reads it.
pub fn snapshot(capture: &Capture) -> String {
    let summary = &capture.summary;
    let number = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).unwrap_or(0);
    let seconds = number(summary, "duration_ns") as f64 / 1e9;
    let probes = probe_values(capture);
    fn text<'v>(v: &'v Value, key: &str) -> &'v str {
        v.get(key).and_then(Value::as_str).unwrap_or("")
    }
    let mut shown: Vec<&Value> = probes
        .iter()
        // The rows summary.txt shows, in its order.
        .filter(|p| crate::export::summary::has_row(text(p, "kind"), text(p, "target"), number(p, "count")))
        .collect();
    shown.sort_by(|a, b| {
        let name = |v| text(v, "name");
        crate::export::summary::by_total(name(a), number(a, "total_ns"), name(b), number(b, "total_ns"))
    });
    let rows = shown
        .into_iter()
        .map(|p| {
            let count = number(p, "count");
            Row {
                name: p.get("name").and_then(Value::as_str).unwrap_or("?"),
                kind: p.get("kind").and_then(Value::as_str).unwrap_or(""),
                last_10s: None,
                last_60s: None,
                all: super::publish::Figures {
                    count,
                    rate: match seconds > 0.0 {
                        true => (count as f64 / seconds * 10.0).round() / 10.0,
                        false => 0.0,
                    },
                    p50_ns: number(p, "p50_ns"),
                    p99_ns: number(p, "p99_ns"),
                },
            }
        })
        .collect();
    let off_cpu = summary.get("off_cpu").filter(|o| o.is_object());
    let (threads, threads_seen) = threads(capture, off_cpu);
    let snapshot = Snapshot {
        view: capture.dir.display().to_string(),
        elapsed_s: seconds,
        events: None,
        event_rate: None,
        lost: number(summary, "lost_events"),
        xtrace_cpu: None,
        samples: capture.samples(),
        stacks_kept_s: seconds as u64,
        probes: rows,
        alerts: Vec::new(),
        alerts_total: 0,
        done: true,
        stop_reason: summary.get("stop_reason").and_then(Value::as_str),
        charts: charts(capture),
        threads,
        threads_seen,
        off_cpu: off_cpu.is_some(),
    };
    serde_json::to_string(&snapshot).unwrap_or_default()
}

/// The probes' figures: summary.json's, or for a capture whose summary has none (a merged
/// capture's), those `xtrace report` works out from its spans.
fn probe_values(capture: &Capture) -> std::borrow::Cow<'_, [Value]> {
    use crate::analysis::{spans, stats};
    match capture.summary.get("probes").and_then(Value::as_array) {
        Some(probes) => std::borrow::Cow::Borrowed(probes.as_slice()),
        None => {
            let nesting = spans::nest(&capture.spans);
            let computed = stats::probes(capture, &nesting)
                .iter()
                .filter_map(|p| serde_json::to_value(p).ok())
                .collect();
            std::borrow::Cow::Owned(computed)
        }
    }
}

/// The threads with the most spans, then the most time off CPU (at most `threads::SHOWN`), as
/// the live page shows them, and how many threads have spans or time off CPU. `off_cpu`:
/// summary.json's section, whose threads' blocked time is their sleeping and uninterruptible
/// time.
fn threads<'a>(capture: &'a Capture, off_cpu: Option<&Value>) -> (Vec<Thread<'a>>, usize) {
    use std::collections::HashMap;
    let mut calls: HashMap<(u32, u32), u64> = HashMap::new();
    for span in &capture.spans {
        *calls.entry((span.pid, span.tid)).or_default() += 1;
    }
    let ns = |t: &Value, key: &str| t.get(key).and_then(Value::as_u64).unwrap_or(0);
    let mut off: HashMap<(u32, u32), super::threads::OffCpu> = HashMap::new();
    for t in off_cpu
        .and_then(|o| o.get("threads"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let id = |key| u32::try_from(ns(t, key)).unwrap_or(0);
        let figures = super::threads::OffCpu {
            blocked_10s_ns: None,
            runnable_10s_ns: None,
            blocked_ns: ns(t, "sleeping_ns") + ns(t, "uninterruptible_ns"),
            runnable_ns: ns(t, "runnable_ns"),
        };
        calls.entry((id("pid"), id("tid"))).or_default();
        off.insert((id("pid"), id("tid")), figures);
    }
    let off_total = |key: &(u32, u32)| off.get(key).map_or(0, |o| o.blocked_ns + o.runnable_ns);
    let mut busiest: Vec<((u32, u32), u64)> = calls.into_iter().collect();
    let seen = busiest.len();
    busiest.sort_by(|a, b| {
        (b.1, off_total(&b.0))
            .cmp(&(a.1, off_total(&a.0)))
            .then(a.0.cmp(&b.0))
    });
    busiest.truncate(super::threads::SHOWN);
    let rows = busiest
        .into_iter()
        .map(|((pid, tid), calls)| Thread {
            pid,
            tid,
            name: capture.threads.get(&(pid, tid)).map_or("?", String::as_str),
            calls_10s: None,
            calls_60s: None,
            calls,
            samples_10s_pct: None,
            off_cpu: off_cpu.map(|_| {
                off.remove(&(pid, tid)).unwrap_or(super::threads::OffCpu {
                    blocked_10s_ns: None,
                    runnable_10s_ns: None,
                    blocked_ns: 0,
                    runnable_ns: 0,
                })
            }),
        })
        .collect();
    (rows, seen)
}

/// The GPU charts of the trace's counters, in seconds from the first: the GPUs' pseudo-processes'
/// tracks, and each process's CUDA device memory.
fn charts(capture: &Capture) -> Charts {
    let mut charts = Charts::default();
    let first_ns = capture.counters.iter().map(|c| c.ts_ns).min().unwrap_or(0);
    for c in &capture.counters {
        let (track, series) = match &c.series {
            Some(series) => (c.track.as_str(), series.as_str()),
            None => track_and_series(&c.track),
        };
        let t_s = c.ts_ns.saturating_sub(first_ns) as f64 / 1e9;
        let points = match c.pid.checked_sub(track_pid(0)) {
            Some(index) => {
                let gpu = match charts.gpus.iter().position(|g| g.index == index) {
                    Some(at) => &mut charts.gpus[at],
                    None => {
                        let name = capture.processes.get(&c.pid).map_or("", String::as_str);
                        let name = name.split_once(": ").map_or(name, |(_, n)| n);
                        charts.gpus.push(GpuCharts::new(index, name.to_string()));
                        charts.gpus.last_mut().expect("just pushed")
                    }
                };
                gpu.chart(track).series.entry(series.to_string()).or_default()
            }
            None if track == CUDA_MEMORY_TRACK => {
                charts.cuda_memory.entry(format!("pid {}", c.pid)).or_default()
            }
            None => continue,
        };
        points.add(t_s, c.value);
    }
    charts.gpus.sort_by_key(|g| g.index);
    charts
}

/// A Perfetto counter track's name as (track, series), as trace.json has them: Perfetto has one
/// track per series, named `TRACK SERIES` where a track has several, `TRACK` where it has one
/// (then its series is known for the tracks of fixed series, and `value` for the others).
fn track_and_series(name: &str) -> (&str, &str) {
    use crate::{cuda::nvml_read, pipeline::family::cuda};
    let fixed = nvml_read::FIXED_SERIES.iter().copied().chain([
        (cuda::CUDA_MEMORY_TRACK, &["bytes"][..]),
        (cuda::CUDA_PINNED_TRACK, &["bytes"][..]),
    ]);
    let open = nvml_read::PROCESS_TRACKS.iter().map(|t| (*t, &[][..]));
    for (track, series) in fixed.chain(open) {
        if name == track {
            return (track, series.first().copied().unwrap_or("value"));
        }
        if let Some(s) = name.strip_prefix(track).and_then(|s| s.strip_prefix(' ')) {
            return (track, s);
        }
    }
    (name, "value")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A span of probe 0 for each (pid, tid), 1 ns long.
    fn one_call_each(threads: &[(u32, u32)]) -> Vec<crate::analysis::capture::Span> {
        threads
            .iter()
            .map(|&(pid, tid)| crate::analysis::capture::Span {
                name: 0,
                pid,
                tid,
                start_ns: 0,
                dur_ns: 1,
                args: None,
            })
            .collect()
    }

    #[test]
    fn rows_are_the_summary_figures() {
        let capture = Capture {
            dir: "cap".into(),
            summary: serde_json::json!({
                "duration_ns": 2_000_000_000u64,
                "lost_events": 3,
                "stop_reason": "duration",
                "probes": [{"name": "work", "kind": "uprobe", "count": 50, "p50_ns": 7, "p99_ns": 9}],
            }),
            folded: vec![("a;b".into(), 4)],
            threads: [((1, 2), "worker".to_string())].into(),
            spans: one_call_each(&[(1, 2), (1, 3), (1, 2)]),
            ..Default::default()
        };
        let v: Value = serde_json::from_str(&snapshot(&capture)).unwrap();
        assert_eq!(
            (&v["threads"], &v["threads_seen"]),
            (
                &serde_json::json!([
                    {"pid": 1, "tid": 2, "name": "worker", "calls_10s": null, "calls_60s": null,
                     "calls": 2, "samples_10s_pct": null, "off_cpu": null},
                    {"pid": 1, "tid": 3, "name": "?", "calls_10s": null, "calls_60s": null,
                     "calls": 1, "samples_10s_pct": null, "off_cpu": null},
                ]),
                &serde_json::json!(2)
            )
        );
        assert_eq!(v["off_cpu"], false);
        assert_eq!(v["probes"][0]["all"]["count"], 50);
        assert_eq!(v["probes"][0]["all"]["rate"], 25.0);
        assert_eq!(v["probes"][0]["all"]["p99_ns"], 9);
        assert!(v["probes"][0]["last_10s"].is_null());
        assert_eq!((v["lost"].as_u64(), v["samples"].as_u64()), (Some(3), Some(4)));
        assert_eq!(
            (v["done"].as_bool(), v["view"].as_str()),
            (Some(true), Some("cap"))
        );
    }

    /// With an `off_cpu` section: each thread's blocked time is its sleeping and uninterruptible
    /// time; a thread that only waited has a row, after those with calls.
    #[test]
    fn threads_time_off_cpu_is_the_summary_figures() {
        let capture = Capture {
            summary: serde_json::json!({"off_cpu": {"threads": [
                {"pid": 1, "tid": 2, "sleeping_ns": 70, "uninterruptible_ns": 5, "runnable_ns": 3},
                {"pid": 1, "tid": 4, "sleeping_ns": 9, "uninterruptible_ns": 0, "runnable_ns": 0},
            ]}}),
            spans: one_call_each(&[(1, 3)]),
            ..Default::default()
        };
        let v: Value = serde_json::from_str(&snapshot(&capture)).unwrap();
        assert_eq!(
            (&v["off_cpu"], &v["threads_seen"]),
            (&Value::Bool(true), &serde_json::json!(3))
        );
        let off: Vec<(u64, &Value)> = v["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["tid"].as_u64().unwrap(), &t["off_cpu"]))
            .collect();
        let figures = |blocked: u64, runnable: u64| {
            serde_json::json!({"blocked_10s_ns": null, "runnable_10s_ns": null,
                               "blocked_ns": blocked, "runnable_ns": runnable})
        };
        assert_eq!(
            off,
            [(3, &figures(0, 0)), (2, &figures(75, 3)), (4, &figures(9, 0))]
        );
    }

    #[test]
    fn gpu_charts_of_the_trace_counters_and_perfetto_track_names() {
        let counter =
            |pid, track: &str, series: Option<&str>, ts_ns, value| crate::analysis::capture::Counter {
                pid,
                track: track.into(),
                series: series.map(Into::into),
                ts_ns,
                value,
            };
        let gpu0 = track_pid(0);
        let capture = Capture {
            processes: [(gpu0, "GPU 0: H100".to_string())].into(),
            counters: vec![
                counter(gpu0, "power (W)", Some("power"), 1_000_000_000, 100.0),
                counter(gpu0, "PCIe (KB/s) tx", None, 2_000_000_000, 5.0),
                counter(gpu0, "power (W)", None, 3_500_000_000, 101.5),
                counter(7, CUDA_MEMORY_TRACK, Some("bytes"), 3_000_000_000, 4096.0),
                counter(
                    7,
                    "CUDA pinned host memory (bytes)",
                    Some("bytes"),
                    3_000_000_000,
                    1.0,
                ),
            ],
            ..Default::default()
        };
        let v: Value = serde_json::from_str(&snapshot(&capture)).unwrap();
        assert_eq!(
            (&v["gpus"], &v["cuda_memory"]),
            (
                &serde_json::json!([{"index": 0, "name": "H100", "charts": [
                    {"track": "power (W)", "series": {"power": [[0.0, 100.0], [2.5, 101.5]]}},
                    {"track": "PCIe (KB/s)", "series": {"tx": [[1.0, 5.0]]}},
                ]}]),
                &serde_json::json!({"pid 7": [[2.0, 4096.0]]})
            )
        );
    }
}
