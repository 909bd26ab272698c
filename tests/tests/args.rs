//! Argument and return values: `-u 'argfn(u64, i32, str, i8, u16, i64) -> i32'` on the `calls`
//! fixture (mode `args`: argfn(K, -1000K, NAMES[K % 3], -K, 60000 + K, -2^40 - K) returns -7K for
//! K = 0..8). Every value is asserted exactly in trace.json, and summary.json's per-probe values.

use std::path::Path;

use serde_json::{json, Value};
use xtrace_tests::{
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{symbol_offset, trace_new_fixture},
    TempDir,
};

const SPEC: &str = "argfn(u64, i32, str, i8, u16, i64) -> i32";

/// The entry-probe offset summary.json gives `argfn`, and the symbol's offset `xtrace list
/// symbols` shows.
fn argfn_offsets(out: &Outputs, program: &Path) -> (String, u64) {
    let probed = out.probe("argfn")["offset"].as_str().expect("offset").to_owned();
    (probed, symbol_offset(program, "argfn"))
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn integer_string_and_return_values_exactly() {
    if !require_bpf() {
        return;
    }
    let (out, _) = trace_new_fixture(&fixtures().calls, &["args"], &[SPEC], "args");
    assert_argfn_values(&out);
    let (probed, symbol) = argfn_offsets(&out, &fixtures().calls);
    assert_eq!(
        probed,
        format!("{symbol:#x}"),
        "no endbr64: the probe is on the first instruction"
    );
}

/// `-> str` reads the string the return value points at when the call returns: pick(K) returns
/// "alpha", "", NULL and 70 x 'x' (cut to 63 bytes), with its argument captured at entry or
/// nothing captured at entry at all.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn returned_strings_are_read_at_the_return() {
    if !require_bpf() {
        return;
    }
    let long = "x".repeat(63);
    let returned = [json!("alpha"), json!(""), Value::Null, json!(long)];
    for (spec, label, with_arg) in [
        ("pick(i32) -> str", "ret-str-arg", true),
        ("pick -> str", "ret-str", false),
    ] {
        let (out, _) = trace_new_fixture(&fixtures().calls, &["args"], &[spec], label);
        let mut spans: Vec<&Value> = out
            .events
            .iter()
            .filter(|e| e["ph"] == "X" && e["name"] == "pick")
            .collect();
        spans.sort_by(|a, b| a["ts"].as_f64().partial_cmp(&b["ts"].as_f64()).unwrap());
        assert_eq!(spans.len(), 4, "{spec}");
        for (k, (span, ret)) in spans.iter().zip(&returned).enumerate() {
            let mut expected = json!({"depth": 0, "ret": ret});
            if with_arg {
                expected["arg0"] = json!(k);
            }
            assert_eq!(span["args"], expected, "{spec}: call {k}");
        }
        let values = &out.probe("pick")["values"];
        let ret = values.as_array().expect("values").last().expect("ret");
        assert_eq!(
            (&ret["name"], u64_field(ret, "count")),
            (&json!("ret"), 4),
            "{spec}"
        );
        assert_eq!(out.lost_events(), 0);
    }
}

/// A function matched by several `-u` takes one spec's value types: an exact name's before a
/// glob's, whatever their order; of two exact names, the first's, and xtrace says so.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn an_exact_spec_beats_a_glob_for_value_types() {
    if !require_bpf() {
        return;
    }
    let (out, _) = trace_new_fixture(&fixtures().calls, &["args"], &["argf*", SPEC], "args-glob");
    assert_argfn_values(&out);
    let (out, finished) = trace_new_fixture(
        &fixtures().calls,
        &["args"],
        &["pick(i32) -> str", "pick(i64)"],
        "args-twice",
    );
    assert_eq!(out.spans_named("pick")[3].args["ret"], json!("x".repeat(63)));
    assert!(
        finished.stderr.iter().any(|l| l
            == "xtrace: warning: -u 'pick(i64)': `pick` is traced already through -u 'pick(i32) -> str', whose value types apply"),
        "{:?}",
        finished.stderr
    );
}

/// Code built with `-fcf-protection` starts every function with `endbr64`, which x86 uprobes
/// single-step (~10 µs a hit, as `cargo xtask bench`'s stepped site shows) where they emulate the
/// `push` that follows. The entry probe goes on that next instruction and sees the same
/// arguments, return address and return value.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn entry_probe_goes_after_endbr64() {
    if !require_bpf() {
        return;
    }
    let (out, _) = trace_new_fixture(&fixtures().calls_cet, &["args"], &[SPEC], "args-cet");
    assert_argfn_values(&out);
    let (probed, symbol) = argfn_offsets(&out, &fixtures().calls_cet);
    assert_eq!(probed, format!("{:#x}", symbol + 4));
}

/// argfn(K, -1000K, NAMES[K % 3], -K, 60000 + K, -2^40 - K) returning -7K for K = 0..8, in
/// trace.json and summary.json.
fn assert_argfn_values(out: &Outputs) {
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
