//! Per-hit cost on the same fixture function, once on a site whose first instruction x86 uprobes
//! emulate (`emulated_site`, nop), once on one the kernel single-steps (`stepped_site`, lea), and
//! once on one that starts with `endbr64` then `nop` (`cet_site`, as code built with
//! -fcf-protection does; xtrace and the floor probe the nop after it, bpftrace the `endbr64`), and
//! once on one that starts with the stepped site's `lea`, then a `nop` (`moved_site`: xtrace
//! moves its entry probe onto the `nop`, `--entry auto`, and so does the floor; bpftrace probes the
//! `lea`):
//! unprobed, the bare floors (an empty uprobe; an empty uprobe + uretprobe, the hooks a span
//! needs), the span lower bound (those hooks reading the clock twice and writing one record), an
//! xtrace span, an xtrace span whose exit is probed at the `ret` (`--exits ret`, which
//! the kernel single-steps), an xtrace span with its stack (`--stacks`), bpftrace count() and
//! bpftrace printf. The cost
//! of a hit is the median ns per call under the tool minus the median unprobed ns per call; runs
//! of the tools are interleaved so drift on a shared machine spreads over all of them.
use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::{json, Value};

use super::{
    prep::Env,
    report::{fmt_count, fmt_ns, median, Report, Row, Verdict},
    runs::{self, RunOut, Tool},
    Config,
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Site {
    Emulated,
    Stepped,
    Cet,
    Moved,
}

impl Site {
    fn symbol(self) -> &'static str {
        match self {
            Self::Emulated => "emulated_site",
            Self::Stepped => "stepped_site",
            Self::Cet => "cet_site",
            Self::Moved => "moved_site",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Emulated => "emulated (nop)",
            Self::Stepped => "stepped (lea)",
            Self::Cet => "CET (endbr64, nop)",
            Self::Moved => "moved (lea, nop)",
        }
    }

    /// Calls per run: about a second under each tool (a hit costs ~0.7 µs emulated, ~10 µs stepped).
    fn calls(self, tool: Tool) -> u64 {
        match (self, tool) {
            (_, Tool::Unprobed) => 100_000_000,
            // The ret is single-stepped (~10 µs a hit here).
            (_, Tool::SpanRet) => 100_000,
            (Self::Emulated, Tool::BpftracePrintf) => 200_000,
            (Self::Emulated, _) => 1_000_000,
            (Self::Stepped, Tool::BpftracePrintf) => 50_000,
            (Self::Stepped, _) => 100_000,
            // bpftrace single-steps the endbr64; xtrace and the floor hit the nop after it.
            (Self::Cet | Self::Moved, Tool::BpftracePrintf | Tool::BpftraceCount) => 50_000,
            (Self::Cet | Self::Moved, _) => 1_000_000,
        }
    }
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    for site in [Site::Emulated, Site::Stepped, Site::Cet, Site::Moved] {
        measure(env, cfg, site, report);
    }
    Ok(())
}

/// Median ns per call of the successful runs, and the first error when none succeeded.
struct ToolResult {
    ns: f64,
    error: Option<String>,
    /// A note on events the tool missed or lost, empty when every run saw every call.
    missed: String,
    /// Fastest and slowest run, ns per call.
    spread: (f64, f64),
}

fn measure(env: &Env, cfg: &Config, site: Site, report: &mut Report) {
    let sym = site.symbol();
    let tools: Vec<Tool> = Tool::ALL
        .into_iter()
        .filter(|t| !t.needs_bpftrace() || env.bpftrace.is_ok())
        .collect();
    let mut results: BTreeMap<&str, Vec<Result<RunOut, String>>> = BTreeMap::new();
    for i in 0..cfg.runs {
        for &tool in &tools {
            let n = cfg.scale(site.calls(tool));
            eprintln!(
                "bench: per-hit {sym} {} ({} calls), run {}/{}",
                tool.key(),
                fmt_count(n),
                i + 1,
                cfg.runs
            );
            let args = ["call".to_owned(), sym.to_owned(), n.to_string()];
            let out = runs::run(env, tool, sym, &args).map_err(|e| format!("{e:#}"));
            if let Err(e) = &out {
                eprintln!("bench: run failed: {e}");
            }
            results.entry(tool.key()).or_default().push(out);
        }
    }
    let mut raw = serde_json::Map::new();
    let mut summary: BTreeMap<&str, ToolResult> = BTreeMap::new();
    for (key, outs) in &results {
        let ok: Vec<&RunOut> = outs.iter().filter_map(|o| o.as_ref().ok()).collect();
        let missed: Vec<String> = ok
            .iter()
            .filter(|o| o.delivered.is_some_and(|d| d != o.work.calls) || o.lost.is_some_and(|l| l > 0))
            .map(|o| {
                let (d, l) = (o.delivered.unwrap_or(0), o.lost.unwrap_or(0));
                format!(
                    "saw {} of {} calls, {} lost",
                    fmt_count(d),
                    fmt_count(o.work.calls),
                    fmt_count(l)
                )
            })
            .collect();
        let ns: Vec<f64> = ok.iter().map(|o| o.work.ns_per_call).collect();
        summary.insert(
            key,
            ToolResult {
                ns: median(&ns),
                error: outs
                    .iter()
                    .find_map(|o| o.as_ref().err().cloned())
                    .filter(|_| ok.is_empty()),
                missed: if missed.is_empty() {
                    String::new()
                } else {
                    format!("runs that missed events: {}", missed.join("; "))
                },
                spread: (
                    ns.iter().copied().fold(f64::NAN, f64::min),
                    ns.iter().copied().fold(f64::NAN, f64::max),
                ),
            },
        );
        let runs: Vec<Value> = outs
            .iter()
            .map(|o| match o {
                Ok(o) => json!({"ns_per_call": o.work.ns_per_call, "calls": o.work.calls,
                    "elapsed_ns": o.work.elapsed_ns, "delivered": o.delivered, "lost": o.lost}),
                Err(e) => json!({"error": e}),
            })
            .collect();
        raw.insert((*key).to_owned(), Value::Array(runs));
    }
    report.raw(&format!("per_hit.{sym}"), Value::Object(raw));
    rows(site, &tools, &summary, report);
}

/// The notes of `tool`'s row: its runs' spread, what it costs over a span (`--stacks`) or its
/// lower bound (a span), and what it missed. `base` is the unprobed ns per call, `value` its
/// cost; `span` a span's cost, `bound` the span lower bound's ratio to `floor_name`.
fn notes(
    tool: Tool,
    r: &ToolResult,
    (base, value): (f64, f64),
    (span, bound, floor_name): (f64, f64, &str),
) -> Vec<String> {
    let mut notes = vec![format!(
        "runs {}-{}",
        fmt_ns(r.spread.0 - base),
        fmt_ns(r.spread.1 - base)
    )];
    if tool == Tool::SpanStacks && (value - span).is_finite() {
        notes.push(format!("{} over a span, goal ≤ 3µs", fmt_ns(value - span)));
    }
    if tool == Tool::Span && bound.is_finite() {
        notes.push(format!("span lower bound {bound:.2}x {floor_name}"));
    }
    if !r.missed.is_empty() {
        notes.push(r.missed.clone());
    } else if matches!(tool, Tool::Span | Tool::SpanRet | Tool::SpanStacks) {
        notes.push("every call delivered as a span, 0 lost".into());
    } else if tool == Tool::BpftracePrintf {
        notes.push("every call printed (to a file), 0 lost".into());
    }
    notes
}

fn rows(site: Site, tools: &[Tool], results: &BTreeMap<&str, ToolResult>, report: &mut Report) {
    let (sym, label) = (site.symbol(), site.label());
    let base = results.get("unprobed").map_or(f64::NAN, |r| r.ns);
    let cost = |tool: Tool| results.get(tool.key()).map_or(f64::NAN, |r| r.ns - base);
    let goal = "≤ 1.10x floor+ret";
    for &tool in tools {
        let Some(r) = results.get(tool.key()) else {
            continue;
        };
        let id = format!("per_hit.{sym}.{}", tool.key());
        let what = format!("{label}: {}", tool.label());
        if let Some(e) = &r.error {
            let row = Row::new(&id, what, "error").note(e.clone());
            report.row(if tool == Tool::Span {
                row.goal(goal, Verdict::Fail)
            } else {
                row
            });
            continue;
        }
        let value = if tool == Tool::Unprobed { r.ns } else { r.ns - base };
        // A span needs an entry and a return hook; bpftrace's probes here are entry probes only.
        let (floor, floor_name) = match tool {
            Tool::Span | Tool::SpanRet | Tool::SpanStacks | Tool::FloorClock => {
                (cost(Tool::FloorReturn), "floor+ret")
            }
            _ => (cost(Tool::Floor), "floor"),
        };
        let ratio = value / floor;
        let mut row = Row::new(&id, what, fmt_ns(value)).data(
            json!({"ns_per_hit": value, "ns_per_call": r.ns, "ratio_to_floor": finite(ratio),
                "floor": floor_name, "min_ns_per_call": r.spread.0, "max_ns_per_call": r.spread.1}),
        );
        if !matches!(tool, Tool::Unprobed | Tool::Floor) && ratio.is_finite() {
            row = row.ratio(format!("{ratio:.2}x {floor_name}"));
        }
        if tool == Tool::Span {
            let verdict = if ratio.is_finite() {
                Verdict::from_bool(ratio <= 1.10)
            } else {
                Verdict::NotApplicable
            };
            row = row.goal(goal, verdict);
        }
        let (span, bound) = (cost(Tool::Span), cost(Tool::FloorClock) / floor);
        let notes = notes(tool, r, (base, value), (span, bound, floor_name));
        if tool != Tool::Unprobed {
            row = row.note(notes.join("; "));
        }
        report.row(row);
    }
    let (span, printf) = (cost(Tool::Span), cost(Tool::BpftracePrintf));
    let id = format!("per_hit.{sym}.vs_bpftrace_printf");
    let what = format!("{label}: bpftrace printf / xtrace span, per event");
    let goal = "≥ 5x";
    let row = if span.is_finite() && printf.is_finite() {
        let times = printf / span;
        // What each tool adds to its kernel's probe hits to deliver the event: on a single-stepped
        // site the step, which neither tool can avoid, is most of both totals.
        let (own, theirs) = (span - cost(Tool::FloorReturn), printf - cost(Tool::BpftraceCount));
        let beyond = if own > 0.0 { theirs / own } else { f64::NAN };
        let row = Row::new(&id, what, format!("{times:.1}x"))
            .goal(goal, Verdict::from_bool(times >= 5.0))
            .data(
                json!({"times_cheaper": times, "xtrace_ns": span, "bpftrace_printf_ns": printf,
                "beyond_hooks": {"xtrace_ns": finite(own), "bpftrace_printf_ns": finite(theirs),
                    "times_cheaper": finite(beyond)}}),
            );
        let what = "beyond the hooks (xtrace span - floor+ret, printf - count())";
        if !(own.is_finite() && theirs.is_finite()) {
            row
        } else if beyond.is_finite() {
            let (own, theirs) = (fmt_ns(own), fmt_ns(theirs));
            row.note(format!("{what}: {own} vs {theirs} = {beyond:.1}x"))
        } else {
            // Medians of separate runs: a span this close to floor+ret can come out below it.
            let theirs = fmt_ns(theirs);
            row.note(format!(
                "{what}: xtrace's within the runs' noise (below 0) vs {theirs}"
            ))
        }
    } else {
        Row::new(&id, what, "n/a")
            .goal(goal, Verdict::NotApplicable)
            .note("a run of one of the two tools failed or bpftrace is missing")
    };
    report.row(row);
}

pub fn finite(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}
