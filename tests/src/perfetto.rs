//! Reading a trace.perfetto-trace back with Perfetto's own protobuf definitions:
//! tests/tools/perfetto_decode.py, run by the venv `cargo xtask setup` makes (it pins the PyPI
//! `perfetto` and `protobuf` packages). The script checks the encoding (sequence flags, interned
//! ids, track descriptors, slice ends) and prints what the trace holds as JSON.

use std::{collections::BTreeMap, path::Path, process::Command};

use serde_json::Value;

/// The decoded trace at `path`, which must have passed every check of the script and left no
/// slice open.
pub fn decode(path: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/perfetto_decode.py");
    let out = Command::new(crate::fixtures::python())
        .arg(&script)
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "perfetto_decode.py could not read {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let decoded: Value = serde_json::from_slice(&out.stdout).expect("the script prints JSON");
    assert_eq!(decoded["errors"], Value::Array(Vec::new()), "{}", path.display());
    assert_eq!(decoded["open_slices"], 0, "{}", path.display());
    decoded
}

/// Slices per name, over every thread, track and depth.
pub fn slice_counts(decoded: &Value) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for s in decoded["slices"].as_array().into_iter().flatten() {
        *counts
            .entry(s["name"].as_str().unwrap_or("?").to_string())
            .or_default() += s["count"].as_u64().unwrap_or(0);
    }
    counts
}

/// The values of the counter track `name`, in time order, and its unit.
pub fn counter(decoded: &Value, name: &str) -> (Vec<u64>, String) {
    let track = decoded["counters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["track"] == name)
        .unwrap_or_else(|| panic!("no counter track {name}: {decoded}"));
    let values = track["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as u64)
        .collect();
    (values, track["unit"].as_str().unwrap_or("").to_string())
}

/// The events of a trace.json, each as its JSON text (keys sorted), sorted: the multiset two
/// traces of the same capture must share.
pub fn trace_events(path: &Path) -> Vec<String> {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let doc: Value = serde_json::from_slice(&text).expect("JSON");
    let mut events: Vec<String> = doc["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .map(Value::to_string)
        .collect();
    events.sort();
    events
}
