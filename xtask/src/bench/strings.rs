//! Per-hit cost of string arguments on `string_site` (an emulated `nop` entry), which is passed a
//! resident 150-byte string: an xtrace span without arguments, `str` (63 bytes kept, in the
//! arguments' record) and `str:4096` (the whole string in a record of its own, sized to it), each
//! through the non-sleepable entry program (`XTRACE_SLEEPABLE_STRINGS=0`) and through the
//! sleepable one that probes reading strings get by default. Cost = median ns per call under
//! xtrace - median ns per call unprobed; runs are interleaved. Ring bytes per hit are the records
//! each call writes, from their layouts (xtrace-common's event.rs): each takes its size rounded up
//! to 8 plus an 8-byte header.
use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::{
    per_hit::finite,
    prep::Env,
    report::{fmt_count, fmt_ns, median, Report, Row},
    runs::{self, Tool, XtraceSpec},
    Config,
};

const SYMBOL: &str = "string_site";
/// The workload's string, without its NUL.
const STRING_LEN: u64 = 150;
/// Record sizes (xtrace-common `event.rs`): `SpanEvent`, `ArgsEvent`, `LongStrEvent`'s header.
const SPAN_BYTES: u64 = 48;
const ARGS_BYTES: u64 = 528;
const LONG_STR_AT: u64 = 40;

/// Ring bytes a record of `len` bytes takes.
fn footprint(len: u64) -> u64 {
    len.div_ceil(8) * 8 + 8
}

/// One measured configuration.
struct Case {
    key: &'static str,
    label: &'static str,
    /// The `-u` spec; None: unprobed.
    spec: Option<&'static str>,
    sleepable: bool,
    /// Ring bytes per hit.
    ring: u64,
}

fn cases() -> Vec<Case> {
    let span = footprint(SPAN_BYTES);
    let args = span + footprint(ARGS_BYTES);
    let long = args + footprint(LONG_STR_AT + STRING_LEN + 1);
    let case = |key, label, spec, sleepable, ring| Case {
        key,
        label,
        spec,
        sleepable,
        ring,
    };
    vec![
        case("unprobed", "unprobed call", None, false, 0),
        case("span", "xtrace span, no arguments", Some(SYMBOL), false, span),
        case(
            "str",
            "str (63 bytes kept)",
            Some("string_site(str)"),
            false,
            args,
        ),
        case(
            "str4096",
            "str:4096 (150 bytes read)",
            Some("string_site(str:4096)"),
            false,
            long,
        ),
        case(
            "str_sleepable",
            "str, sleepable entry",
            Some("string_site(str)"),
            true,
            args,
        ),
        case(
            "str4096_sleepable",
            "str:4096, sleepable entry",
            Some("string_site(str:4096)"),
            true,
            long,
        ),
    ]
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    let cases = cases();
    let calls = cfg.scale(1_000_000);
    let args = ["call".to_owned(), SYMBOL.to_owned(), calls.to_string()];
    let mut times: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut missed = Vec::new();
    for i in 0..cfg.runs {
        for case in &cases {
            eprintln!(
                "bench: strings {} ({} calls), run {}/{}",
                case.key,
                fmt_count(calls),
                i + 1,
                cfg.runs
            );
            let ns = match case.spec {
                None => runs::run(env, Tool::Unprobed, SYMBOL, &args)?.work.ns_per_call,
                Some(spec) => {
                    let mut xtrace = XtraceSpec::new(&env.hits, &args, &[spec]);
                    if !case.sleepable {
                        xtrace.env = vec![("XTRACE_SLEEPABLE_STRINGS".into(), "0".into())];
                    }
                    let out = runs::xtrace(env, &xtrace)?;
                    let summary = out.summary.context("xtrace wrote no summary")?;
                    let seen = runs::probe_count(&summary, SYMBOL);
                    if seen != calls || runs::lost_events(&summary) > 0 {
                        missed.push(format!(
                            "{}: saw {} of {}",
                            case.key,
                            fmt_count(seen),
                            fmt_count(calls)
                        ));
                    }
                    out.work.ns_per_call
                }
            };
            times.entry(case.key).or_default().push(ns);
        }
    }
    report.raw("strings", json!(times));
    rows(&cases, &times, &missed, report);
    Ok(())
}

fn rows(cases: &[Case], times: &BTreeMap<&str, Vec<f64>>, missed: &[String], report: &mut Report) {
    let ns = |key: &str| times.get(key).map_or(f64::NAN, |t| median(t));
    let base = ns("unprobed");
    let span = ns("span") - base;
    for case in cases {
        let value = if case.spec.is_none() {
            base
        } else {
            ns(case.key) - base
        };
        let id = format!("strings.{}", case.key);
        let what = format!("{SYMBOL} (150-byte string): {}", case.label);
        let mut row = Row::new(&id, what, fmt_ns(value)).data(json!({
            "ns_per_hit": finite(value), "ring_bytes_per_hit": case.ring,
            "runs_ns_per_call": times.get(case.key).cloned().map(Value::from)}));
        if case.spec.is_some() {
            let extra = value - span;
            let mut note = format!("{} ring bytes/hit", case.ring);
            if case.key != "span" && extra.is_finite() {
                note += &format!("; {} over the span without arguments", fmt_ns(extra));
            }
            if let Some(m) = missed.iter().find(|m| m.starts_with(&format!("{}:", case.key))) {
                note += &format!("; {m}");
            }
            row = row.note(note);
        }
        report.row(row);
    }
}
