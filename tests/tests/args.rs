//! Argument and return values: `-u 'argfn(u64, i32, str, i8, u16, i64) -> i32'` on the `calls`
//! fixture (mode `args`: argfn(K, -1000K, NAMES[K % 3], -K, 60000 + K, -2^40 - K) returns -7K for
//! K = 0..8). Every value is asserted exactly in trace.json, and summary.json's per-probe values.

use serde_json::{json, Value};
use xtrace_tests::{
    fixtures::{fixtures, Fixture},
    output::u64_field,
    require_bpf,
    run::trace_new_fixture,
    TempDir,
};

#[test]
fn integer_string_and_return_values_exactly() {
    if !require_bpf() {
        return;
    }
    let spec = "argfn(u64, i32, str, i8, u16, i64) -> i32";
    let (out, _) = trace_new_fixture(&fixtures().calls, &["args"], &[spec], "args");
    let mut spans: Vec<&Value> = out
        .events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == "argfn")
        .collect();
    spans.sort_by(|a, b| a["ts"].as_f64().partial_cmp(&b["ts"].as_f64()).unwrap());
    assert_eq!(spans.len(), 9);
    let long = "x".repeat(63);
    let names = ["alpha", "", long.as_str()];
    for (k, span) in spans.iter().enumerate() {
        let k = k as i64;
        let expected = json!({
            "depth": 0,
            "arg0": k,
            "arg1": -1000 * k,
            "arg2": names[k as usize % 3],
            "arg3": -k,
            "arg4": 60000 + k,
            "arg5": -(1i64 << 40) - k,
            "ret": -7 * k,
        });
        assert_eq!(span["args"], expected, "call {k}");
    }
    let probe = out.probe("argfn");
    assert_eq!(u64_field(probe, "count"), 9);
    let values = probe["values"]
        .as_array()
        .expect("values for a probe with a spec");
    let names: Vec<&str> = values.iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["arg0", "arg1", "arg2", "arg3", "arg4", "arg5", "ret"]);
    assert_eq!(
        (values[1]["min"].clone(), values[1]["max"].clone()),
        (json!(-8000), json!(0))
    );
    assert_eq!(values[1]["type"], "i32");
    // Equal counts are listed in the order of their JSON text.
    assert_eq!(
        values[2]["top"],
        json!([
            {"value": "", "count": 3},
            {"value": "alpha", "count": 3},
            {"value": long, "count": 3}
        ])
    );
    assert_eq!(
        (values[6]["min"].clone(), values[6]["max"].clone()),
        (json!(-56), json!(0))
    );
    assert_eq!(u64_field(&values[6], "count"), 9);
    assert_eq!(out.lost_events(), 0);
    assert_eq!(u64_field(&out.summary, "args_unpaired"), 0);
}

#[test]
fn probes_without_a_spec_have_no_values() {
    if !require_bpf() {
        return;
    }
    let (out, _) = trace_new_fixture(&fixtures().calls, &["args"], &["argfn"], "args-none");
    let spans = out.spans_named("argfn");
    assert_eq!(spans.len(), 9);
    for event in out.events.iter().filter(|e| e["ph"] == "X") {
        assert_eq!(event["args"], json!({"depth": 0}));
    }
    assert!(out.probe("argfn").get("values").is_none());
}

#[test]
fn bad_argument_spec_points_at_the_character() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().calls, &["args"]);
    fixture.wait_ready();
    let tmp = TempDir::new("args-bad");
    let line = xtrace_tests::run::run_error(xtrace_tests::args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "argfn(u64, i33)",
        "-o",
        tmp.join("out")
    ]);
    assert!(
        line.contains("unknown argument type `i33`") && line.contains("column 12"),
        "{line}"
    );
}
