//! `xtrace view DIR`: the live view's page over a finished capture. Its one snapshot is made from
//! summary.json (each probe's count, rate over the capture, p50 and p99: the figures `xtrace
//! report` shows) and its flamegraph from stacks.folded; the recent stretches, which a stored
//! capture does not have, are null.
use serde::Serialize;
use serde_json::Value;

use crate::analysis::capture::Capture;

#[derive(Serialize)]
struct Snapshot<'a> {
    view: String,
    elapsed_s: f64,
    events: Option<u64>,
    event_rate: Option<f64>,
    lost: u64,
    samples: u64,
    stacks_kept_s: u64,
    probes: Vec<Row<'a>>,
    alerts: Vec<String>,
    alerts_total: u64,
    done: bool,
    stop_reason: Option<&'a str>,
}

#[derive(Serialize)]
struct Row<'a> {
    name: &'a str,
    kind: &'a str,
    last_10s: Option<()>,
    last_60s: Option<()>,
    all: super::publish::Figures,
}

/// The snapshot of `capture` as the page reads it.
pub fn snapshot(capture: &Capture) -> String {
    let summary = &capture.summary;
    let number = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).unwrap_or(0);
    let seconds = number(summary, "duration_ns") as f64 / 1e9;
    let probes = summary
        .get("probes")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let rows = probes
        .iter()
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
    let snapshot = Snapshot {
        view: capture.dir.display().to_string(),
        elapsed_s: seconds,
        events: None,
        event_rate: None,
        lost: number(summary, "lost_events"),
        samples: capture.samples(),
        stacks_kept_s: seconds as u64,
        probes: rows,
        alerts: Vec::new(),
        alerts_total: 0,
        done: true,
        stop_reason: summary.get("stop_reason").and_then(Value::as_str),
    };
    serde_json::to_string(&snapshot).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

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
            ..Default::default()
        };
        let v: Value = serde_json::from_str(&snapshot(&capture)).unwrap();
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
}
