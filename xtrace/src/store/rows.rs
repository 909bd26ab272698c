//! What a store keeps of one capture, read from its directory: the run (its id, host, labels,
//! command, clock), per-function statistics with their mergeable histograms, and per-stack sample
//! counts. The run id is a hash of the capture's files, so the same capture pushed twice has the
//! same id and is stored once.
use std::{collections::BTreeMap, path::Path};

use serde_json::Value;

use super::{Error, Result};

/// One run: the `runs` row, written last as the mark that the run's other rows are all there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Run {
    /// A hash of the capture's summary.json and stacks.folded (32 hex digits).
    pub id: String,
    pub host: String,
    /// When the capture began, CLOCK_REALTIME ns.
    pub started_ns: u64,
    pub duration_ns: u64,
    /// The launched command's words, redacted ([`redact`]); empty for `--pid` and `-a`.
    pub command: String,
    pub stop_reason: String,
    pub labels: BTreeMap<String, String>,
}

/// One traced function's (or USDT span's, CUDA call's, range's) statistics in one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    pub kind: String,
    pub count: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// (the bucket's smallest value in ns, calls), as summary.json's `histogram`.
    pub histogram: Vec<[u64; 2]>,
}

/// One CUDA kernel's launches and device time in one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kernel {
    pub name: String,
    /// Launch calls (summary.json's `cuda.launches`).
    pub launches: u64,
    /// Runs on the device and their time (`gpu_device.top_kernels`; 0 without the timeline).
    pub device_count: u64,
    pub device_total_ns: u64,
}

/// One MPI function's calls in one run (`--mpi`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MpiRow {
    pub name: String,
    pub class: String,
    pub calls: u64,
    pub total_ns: u64,
    pub bytes: u64,
}

/// The highest reading of one NVML metric of one GPU in one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    pub device: u64,
    /// The metric: summary.json's `gpus[]` field without its `max_` (`gpu_utilization_pct`).
    pub name: String,
    /// In thousandths of the metric's unit.
    pub max_milli: u64,
}

/// One span of the trace (`--store-spans`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanRow {
    pub name: String,
    pub pid: u32,
    pub tid: u32,
    pub start_ns: u64,
    pub dur_ns: u64,
}

/// Everything stored of one capture.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunRows {
    pub run: Run,
    pub functions: Vec<Function>,
    /// stacks.folded: (frames outermost first, samples).
    pub stacks: Vec<(String, u64)>,
    pub kernels: Vec<Kernel>,
    pub mpi: Vec<MpiRow>,
    pub counters: Vec<Counter>,
    /// With `--store-spans`: every span of the trace.
    pub spans: Option<Vec<SpanRow>>,
}

/// Reads what is stored of the capture in `dir`; its trace's spans too with `spans`.
pub fn read(dir: &Path, spans: bool) -> Result<RunRows> {
    let summary_path = dir.join("summary.json");
    let bytes = crate::analysis::read_regular(&summary_path).map_err(|e| Error::Capture {
        path: dir.to_path_buf(),
        reason: format!("its summary.json cannot be read: {e}"),
    })?;
    let summary: Value = serde_json::from_slice(&bytes).map_err(|e| Error::Capture {
        path: dir.to_path_buf(),
        reason: format!("its summary.json is not JSON: {e}"),
    })?;
    let folded_path = dir.join("stacks.folded");
    let folded = match crate::analysis::read_regular(&folded_path) {
        Ok(folded) => folded,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(Error::Capture {
                path: folded_path,
                reason: e.to_string(),
            })
        }
    };
    let stacks =
        crate::analysis::capture::parse_folded(&String::from_utf8_lossy(&folded)).map_err(|reason| {
            Error::Capture {
                path: folded_path,
                reason,
            }
        })?;
    let run = run(&summary, id(&bytes, &folded)).ok_or_else(|| Error::Capture {
        path: dir.to_path_buf(),
        reason: "its summary.json lacks the run's host, clock or duration (recorded by an older xtrace?)"
            .into(),
    })?;
    let spans = match spans {
        true => Some(span_rows(dir)?),
        false => None,
    };
    Ok(RunRows {
        run,
        functions: functions(&summary),
        stacks,
        kernels: kernels(&summary),
        mpi: mpi(&summary),
        counters: counters(&summary),
        spans,
    })
}

/// Every span of the capture's trace, either format.
fn span_rows(dir: &Path) -> Result<Vec<SpanRow>> {
    let capture = crate::analysis::capture::load(dir, Default::default()).map_err(|e| Error::Capture {
        path: dir.to_path_buf(),
        reason: format!("its spans cannot be read: {e}"),
    })?;
    Ok(capture
        .spans
        .iter()
        .map(|s| SpanRow {
            name: capture.names[s.name as usize].name.clone(),
            pid: s.pid,
            tid: s.tid,
            start_ns: s.start_ns,
            dur_ns: s.dur_ns,
        })
        .collect())
}

/// The kernels of summary.json's `cuda.launches` and `gpu_device.top_kernels`, by name.
fn kernels(summary: &Value) -> Vec<Kernel> {
    let list = |pointer: &str| {
        summary
            .pointer(pointer)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let n = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).unwrap_or(0);
    let mut by_name: BTreeMap<String, Kernel> = BTreeMap::new();
    for launch in list("/cuda/launches") {
        if let Some(name) = launch.get("kernel").and_then(Value::as_str) {
            by_name.entry(name.to_string()).or_default().launches += n(&launch, "count");
        }
    }
    for kernel in list("/gpu_device/top_kernels") {
        if let Some(name) = kernel.get("name").and_then(Value::as_str) {
            let row = by_name.entry(name.to_string()).or_default();
            row.device_count += n(&kernel, "count");
            row.device_total_ns += n(&kernel, "total_ns");
        }
    }
    by_name
        .into_iter()
        .map(|(name, k)| Kernel { name, ..k })
        .collect()
}

/// summary.json's `mpi.functions`.
fn mpi(summary: &Value) -> Vec<MpiRow> {
    let functions = summary.pointer("/mpi/functions").and_then(Value::as_array);
    let row = |f: &Value| {
        let n = |key: &str| f.get(key).and_then(Value::as_u64).unwrap_or(0);
        Some(MpiRow {
            name: f.get("name")?.as_str()?.to_string(),
            class: f.get("class")?.as_str()?.to_string(),
            calls: n("calls"),
            total_ns: n("total_ns"),
            bytes: n("bytes"),
        })
    };
    functions.into_iter().flatten().filter_map(row).collect()
}

/// The highest readings of summary.json's `gpus` (each `max_*` field NVML reported).
fn counters(summary: &Value) -> Vec<Counter> {
    let gpus = summary.get("gpus").and_then(Value::as_array);
    let mut found = Vec::new();
    for gpu in gpus.into_iter().flatten() {
        let device = gpu.get("index").and_then(Value::as_u64).unwrap_or(0);
        for (key, value) in gpu.as_object().into_iter().flatten() {
            let (Some(name), Some(max)) = (key.strip_prefix("max_"), value.as_f64()) else {
                continue;
            };
            found.push(Counter {
                device,
                name: name.to_string(),
                max_milli: (max * 1000.0).round().max(0.0) as u64,
            });
        }
    }
    found
}

/// The run id: two 64-bit SipHashes with fixed, different keys over the capture's files.
fn id(summary: &[u8], folded: &[u8]) -> String {
    use std::hash::Hasher;
    let half = |k: u64| {
        #[allow(deprecated)]
        let mut h = std::hash::SipHasher::new_with_keys(k, !k);
        h.write(summary);
        h.write_u8(0);
        h.write(folded);
        h.finish()
    };
    format!(
        "{:016x}{:016x}",
        half(0x7874_7261_6365_0001),
        half(0x7874_7261_6365_0002)
    )
}

fn run(summary: &Value, id: String) -> Option<Run> {
    let u64_at = |pointer: &str| summary.pointer(pointer).and_then(Value::as_u64);
    let text = |key: &str| {
        summary
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let argv: Vec<String> = summary
        .pointer("/command/argv")
        .and_then(Value::as_array)
        .map(|words| words.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default();
    let labels = summary
        .get("labels")
        .and_then(Value::as_object)
        .map(|labels| {
            let text = |(k, v): (&String, &Value)| Some((k.clone(), v.as_str()?.to_string()));
            labels.iter().filter_map(text).collect()
        })
        .unwrap_or_default();
    Some(Run {
        id,
        host: summary.get("host")?.as_str()?.to_string(),
        started_ns: u64_at("/clock/start/realtime_ns")?,
        duration_ns: u64_at("/duration_ns")?,
        command: redact(&argv).join(" "),
        stop_reason: text("stop_reason"),
        labels,
    })
}

fn functions(summary: &Value) -> Vec<Function> {
    let probes = summary.get("probes").and_then(Value::as_array);
    let function = |p: &Value| {
        let n = |key: &str| p.get(key).and_then(Value::as_u64).unwrap_or(0);
        let histogram = p
            .get("histogram")
            .and_then(Value::as_array)
            .map(|buckets| {
                let pair = |b: &Value| Some([b.get(0)?.as_u64()?, b.get(1)?.as_u64()?]);
                buckets.iter().filter_map(pair).collect()
            })
            .unwrap_or_default();
        Some(Function {
            name: p.get("name")?.as_str()?.to_string(),
            kind: p.get("kind")?.as_str()?.to_string(),
            count: n("count"),
            total_ns: n("total_ns"),
            min_ns: n("min_ns"),
            max_ns: n("max_ns"),
            histogram,
        })
    };
    let mut functions: Vec<Function> = probes.into_iter().flatten().filter_map(function).collect();
    functions.retain(|f| f.count > 0);
    functions
}

/// Words of a command line whose name says they hold a secret: `--password=X`, `TOKEN=X` and the
/// word after `--password` keep their name and lose their value.
pub const SECRET_WORDS: &[&str] = &[
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "api_key",
    "api-key",
    "credential",
    "auth",
    "private_key",
    "private-key",
];

/// `argv` with the values of secret-looking words replaced by `<redacted>` ([`SECRET_WORDS`]).
pub fn redact(argv: &[String]) -> Vec<String> {
    let secret = |name: &str| {
        let name = name.to_ascii_lowercase();
        SECRET_WORDS.iter().any(|w| name.contains(w))
    };
    let mut out = Vec::with_capacity(argv.len());
    let mut next_is_secret = false;
    for word in argv {
        if std::mem::take(&mut next_is_secret) {
            out.push("<redacted>".to_string());
            continue;
        }
        match word.split_once('=') {
            Some((name, _)) if secret(name) => out.push(format!("{name}=<redacted>")),
            None if word.starts_with('-') && secret(word) => {
                next_is_secret = true;
                out.push(word.clone());
            }
            _ => out.push(word.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_mpi_and_counters_of_a_summary() {
        let summary = serde_json::json!({
            "cuda": {"launches": [{"kernel": "add", "count": 5}, {"kernel": "scale", "count": 2}]},
            "gpu_device": {"top_kernels": [{"name": "add", "count": 5, "total_ns": 50}]},
            "mpi": {"functions": [{"name": "MPI_Send", "class": "point_to_point", "calls": 5,
                                   "total_ns": 9, "bytes": 5120, "unsized_calls": 0}]},
            "gpus": [{"index": 1, "name": "H100", "samples": 3, "max_power_w": 312.5,
                      "max_gpu_utilization_pct": null}]
        });
        let k = |name: &str, launches, device_count, device_total_ns| Kernel {
            name: name.into(),
            launches,
            device_count,
            device_total_ns,
        };
        assert_eq!(kernels(&summary), [k("add", 5, 5, 50), k("scale", 2, 0, 0)]);
        assert_eq!(mpi(&summary)[0].bytes, 5120);
        let power = Counter {
            device: 1,
            name: "power_w".into(),
            max_milli: 312_500,
        };
        assert_eq!(counters(&summary), [power]);
    }

    fn words(text: &str) -> Vec<String> {
        text.split(' ').map(String::from).collect()
    }

    #[test]
    fn secrets_are_redacted_names_kept() {
        let argv = words("python train.py --password hunter2 API_TOKEN=abc --lr=0.1 --auth-file f x");
        assert_eq!(
            redact(&argv).join(" "),
            "python train.py --password <redacted> API_TOKEN=<redacted> --lr=0.1 --auth-file <redacted> x"
        );
    }

    #[test]
    fn rows_of_a_summary() {
        let summary = serde_json::json!({
            "host": "node1", "labels": {"commit": "abc"}, "duration_ns": 5,
            "stop_reason": "duration", "clock": {"start": {"realtime_ns": 77}},
            "command": {"argv": ["app", "--token", "t"]},
            "probes": [
                {"name": "work", "kind": "uprobe", "count": 3, "total_ns": 30, "min_ns": 5,
                 "max_ns": 20, "histogram": [[5, 2], [20, 1]]},
                {"name": "idle", "kind": "uprobe", "count": 0}
            ]
        });
        let run = run(&summary, "id".into()).unwrap();
        assert_eq!(run.command, "app --token <redacted>");
        assert_eq!((run.started_ns, run.duration_ns), (77, 5));
        assert_eq!(run.labels["commit"], "abc");
        let functions = functions(&summary);
        assert_eq!(functions.len(), 1);
        assert!(kernels(&summary).is_empty() && mpi(&summary).is_empty() && counters(&summary).is_empty());
        assert_eq!(functions[0].histogram, vec![[5, 2], [20, 1]]);
        assert_ne!(id(b"a", b""), id(b"", b"a"));
        assert_eq!(id(b"a", b"b").len(), 32);
    }
}
