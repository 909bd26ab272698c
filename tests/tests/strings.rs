//! String arguments: `-u 'strfn(i64, i32, str)'` on the `calls` fixture, whose modes pass strfn(K,
//! -K, S) a string the kernel program's read cannot always reach (see calls.c): a literal in
//! `.rodata` on a page not touched before the first call (read from the executable's file), one
//! in a private file mapping not touched either (read by the sleepable entry program, which can
//! fault the page in), and strings longer than the 63 bytes a plain `str` keeps (`str:N`).

use serde_json::{json, Value};
use xtrace_tests::{
    fixtures::fixtures,
    output::{u64_field, Outputs},
    require_bpf,
    run::{trace_fixture_with, trace_new_fixture},
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

/// A string in a MAP_PRIVATE read-write file mapping that nothing touched before strfn's first
/// call: its page is not mapped in, and as the mapping is writable its bytes need not be the
/// file's, so only a read that faults the page in can reach it. The sleepable entry program
/// (`span_enter_s`) does, at the first call: all 7 calls have it, as a `str` (in the arguments'
/// record) and as a `str:100` (a long string record, read in task storage), with uprobe_multi
/// links and with perf-event uprobes, and none is unreadable.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_private_mapping_string_is_read_at_its_first_call() {
    if !require_bpf() {
        return;
    }
    for (ty, mechanism) in [
        ("str", "uprobe_multi"),
        ("str:100", "uprobe_multi"),
        ("str", "perf_event"),
        ("str:100", "perf_event"),
    ] {
        let spec = format!("strfn(i64, i32, {ty})");
        let env = [("XTRACE_UPROBE_ATTACH", mechanism)];
        let (out, finished) = trace_privmap(&spec, &env);
        let warned = finished.stderr.iter().any(|l| l.contains("sleepable"));
        assert!(!warned, "{spec} {mechanism}: {:?}", finished.stderr);
        assert_strfn_args(&out, &["private mapping text"; 7]);
        assert_eq!(
            u64_field(&out.summary, "unreadable_strings"),
            0,
            "{spec} {mechanism}"
        );
        let values = &out.probe("strfn")["values"][2];
        assert_eq!(
            values["top"],
            json!([{"value": "private mapping text", "count": 7}])
        );
    }
}

/// `XTRACE_SLEEPABLE_STRINGS=0` keeps string probes on the non-sleepable entry program, as on a
/// kernel without sleepable uprobes, and says so in one line: the first call's string is `null`
/// and counted unreadable; the later ones, on the page strfn faulted in, are read.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn without_sleepable_entries_an_untouched_private_mapping_is_unreadable() {
    if !require_bpf() {
        return;
    }
    let (out, finished) = trace_privmap("strfn(i64, i32, str)", &[("XTRACE_SLEEPABLE_STRINGS", "0")]);
    let said: Vec<&String> = finished
        .stderr
        .iter()
        .filter(|l| l.contains("XTRACE_SLEEPABLE_STRINGS=0"))
        .collect();
    assert_eq!(
        said,
        [
            "xtrace: warning: XTRACE_SLEEPABLE_STRINGS=0: a string argument on a page the process has \
          not touched yet is read from its file where that is a read-only file mapping, and is null \
          otherwise"
        ]
    );
    let spans = strfn_spans(&out, 7);
    assert_eq!(spans[0]["args"]["arg2"], Value::Null);
    for span in &spans[1..] {
        assert_eq!(span["args"]["arg2"], "private mapping text");
    }
    assert_eq!(u64_field(&out.summary, "unreadable_strings"), 1);
}

/// The `privmap` mode traced with `spec` and xtrace's extra environment `env`.
fn trace_privmap(spec: &str, env: &[(&str, &str)]) -> (Outputs, xtrace_tests::run::Finished) {
    let mut fixture = xtrace_tests::fixtures::Fixture::spawn(&fixtures().calls, &["privmap"]);
    fixture.wait_ready();
    let tmp = xtrace_tests::TempDir::new("str-privmap");
    let out = tmp.join("out");
    let finished = trace_fixture_with(&mut fixture, xtrace_tests::args!["-u", spec], env, &out);
    (Outputs::read(&out), finished)
}

/// A 150-byte string: `str:200` reads it whole, `str:100` its first 100 bytes, a plain `str` its
/// first 63, and `str:9` its first 9.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_long_string_is_read_up_to_the_asked_length() {
    if !require_bpf() {
        return;
    }
    let text = "0123456789".repeat(15);
    for (ty, kept) in [("str:200", 150), ("str:100", 100), ("str", 63), ("str:9", 9)] {
        let spec = format!("strfn(i64, i32, {ty})");
        let label = format!("str-long-{}", ty.replace(':', "-"));
        let (out, _) = trace_new_fixture(&fixtures().calls, &["longstr"], &[&spec], &label);
        assert_strfn_args(&out, &[&text[..kept]; 3]);
        assert_eq!(u64_field(&out.summary, "unreadable_strings"), 0, "{spec}");
    }
}

/// `str:0`, a length past 4096 and a length that is no number: one line naming the accepted form,
/// exit status 2, nothing attached.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_bad_string_length_names_the_accepted_form() {
    if !require_bpf() {
        return;
    }
    let mut fixture = xtrace_tests::fixtures::Fixture::spawn(&fixtures().calls, &["longstr"]);
    fixture.wait_ready();
    let tmp = xtrace_tests::TempDir::new("str-bad");
    for (spec, column) in [
        ("strfn(str:0)", 7),
        ("strfn(i64, i32, str:4097)", 17),
        ("strfn(str:abc)", 7),
    ] {
        let line = xtrace_tests::run::run_error(xtrace_tests::args![
            "-p",
            fixture.pid().to_string(),
            "-u",
            spec,
            "-o",
            tmp.join("out")
        ]);
        assert_eq!(
            line,
            format!(
                "xtrace: error: invalid probe `{spec}`: a string length is str:N with N from 1 to \
                 4096 at column {column}"
            )
        );
    }
}
