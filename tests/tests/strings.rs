//! String arguments: `-u 'strfn(i64, i32, str)'` on the `calls` fixture, whose modes pass strfn(K,
//! -K, S) a string the kernel program's read cannot always reach (see calls.c): a literal in
//! `.rodata` on a page not touched before the first call (read from the executable's file), and
//! strings longer than the 63 bytes a plain `str` keeps (`str:N`).

use serde_json::{json, Value};
use xtrace_tests::{
    fixtures::fixtures,
    output::{u64_field, Outputs},
    require_bpf,
    run::trace_new_fixture,
};

/// strfn's spans in call order, with exactly `calls` of them.
fn strfn_spans(out: &Outputs, calls: usize) -> Vec<&Value> {
    let mut spans: Vec<&Value> = out
        .events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == "strfn")
        .collect();
    spans.sort_by(|a, b| a["ts"].as_f64().partial_cmp(&b["ts"].as_f64()).unwrap());
    assert_eq!(spans.len(), calls);
    spans
}

/// Every call's (K, -K, text), in order.
fn assert_strfn_args(out: &Outputs, texts: &[&str]) {
    for (k, span) in strfn_spans(out, texts.len()).iter().enumerate() {
        let k = k as i64;
        let expected = json!({"depth": 0, "arg0": k, "arg1": -k, "arg2": texts[k as usize]});
        assert_eq!(span["args"], expected, "call {k}");
    }
    assert_eq!(out.lost_events(), 0);
}

/// A literal in `.rodata` that strfn reads only after its entry probe fired: at the first call
/// its page is not mapped in yet, and the kernel program's read fails; user space reads it from
/// the executable's file. All 7 calls have it, the first included, and none is unreadable.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_cold_rodata_string_is_read_at_its_first_call() {
    if !require_bpf() {
        return;
    }
    let spec = "strfn(i64, i32, str)";
    let (out, _) = trace_new_fixture(&fixtures().calls, &["cold"], &[spec], "str-cold");
    assert_strfn_args(&out, &["cold literal in .rodata"; 7]);
    assert_eq!(u64_field(&out.summary, "unreadable_strings"), 0);
    let values = &out.probe("strfn")["values"][2];
    assert_eq!(
        values["top"],
        json!([{"value": "cold literal in .rodata", "count": 7}])
    );
}
