//! `xtrace report DIR`: re-renders a capture. `--format text|json|csv` gives per-probe statistics
//! (count, total, self, mean, p50/p90/p99/max), top-N by total and by self time, per-thread
//! time, losses and bottlenecks (outliers, self-time shares, waits); `pprof`, `callgrind` and
//! `span-flamegraph` write the capture in those formats. Output is deterministic: sorted, no
//! paths, no current time.
use std::{collections::BTreeMap, path::PathBuf};

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::export::table::{csv_field, render};
use crate::{
    analysis::{
        capture::{self, Capture, Load},
        outliers::{self, Bottlenecks},
        spans::{self, Nesting},
        stats::{self, ProbeStats, ThreadStats},
        Error, Result,
    },
    export::{callgrind, pprof, span_flamegraph},
    model::duration::human,
    output,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Readable tables (stdout).
    Text,
    /// Everything as one JSON object (stdout).
    Json,
    /// The per-probe table as CSV (stdout).
    Csv,
    /// Google's pprof profile of the samples and spans (default file profile.pb.gz).
    Pprof,
    /// Callgrind format for KCachegrind (stdout).
    Callgrind,
    /// Time-weighted flamegraph of nested spans (default file span-flamegraph.svg).
    SpanFlamegraph,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The capture: a directory written by `xtrace -o DIR`.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// What to produce.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,

    /// Write to FILE instead of stdout (pprof and span-flamegraph: instead of profile.pb.gz and
    /// span-flamegraph.svg in the current directory).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Rows of the top-N tables and of the outlier and share lists.
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// Search only probes with at least N spans for outliers.
    #[arg(
        long = "min-count",
        allow_negative_numbers = true,
        value_name = "N",
        default_value_t = 10
    )]
    pub min_count: u64,

    /// With --format span-flamegraph: draw it as an icicle graph (stacks hanging from the top).
    #[arg(long = "icicle")]
    pub icicle: bool,
}

/// A probe's self time among all self time.
#[derive(Clone, Debug, Serialize)]
pub struct SelfShare {
    pub name: String,
    pub kind: String,
    pub self_ns: u64,
    pub percent: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct InstantCount {
    pub name: String,
    pub kind: String,
    pub count: u64,
}

/// Everything `--format text|json|csv` shows.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub format_version: u64,
    pub duration_ns: u64,
    pub stop_reason: String,
    pub spans: u64,
    pub samples: u64,
    pub sample_frequency_hz: Option<u64>,
    pub min_duration_ns: Option<u64>,
    pub lost_events: u64,
    pub lost: BTreeMap<String, u64>,
    pub unmatched_entries: u64,
    pub decode_errors: u64,
    pub probes: Vec<ProbeStats>,
    pub top_by_total: Vec<String>,
    pub top_by_self: Vec<SelfShare>,
    pub threads: Vec<ThreadStats>,
    pub instants: Vec<InstantCount>,
    pub bottlenecks: Bottlenecks,
    /// With `--off-cpu`: time off CPU by wait, the stacks that waited longest, the locks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_cpu: Option<crate::analysis::offcpu::OffCpuTime>,
}

/// Builds the report of a loaded capture.
pub fn report(capture: &Capture, nesting: &Nesting, top: usize, min_count: u64) -> Report {
    let probes = stats::probes(capture, nesting);
    let self_total: u64 = nesting.self_ns.iter().sum();
    let mut by_self: Vec<&ProbeStats> = probes.iter().collect();
    by_self.sort_by(|a, b| b.self_ns.cmp(&a.self_ns).then_with(|| a.name.cmp(&b.name)));
    let summary = &capture.summary;
    let lost = summary
        .get("lost")
        .and_then(|l| l.as_object())
        .map(|l| {
            l.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    Report {
        format_version: capture.format_version,
        duration_ns: capture.field("duration_ns"),
        stop_reason: summary
            .get("stop_reason")
            .and_then(|s| s.as_str())
            .unwrap_or("")
            .to_string(),
        spans: capture.spans.len() as u64,
        samples: capture.samples(),
        sample_frequency_hz: capture.sample_hz(),
        min_duration_ns: summary.get("min_duration_ns").and_then(|v| v.as_u64()),
        lost_events: capture.field("lost_events"),
        lost,
        unmatched_entries: capture.field("unmatched_entries"),
        decode_errors: capture.field("decode_errors"),
        top_by_total: probes.iter().take(top).map(|p| p.name.clone()).collect(),
        top_by_self: by_self
            .iter()
            .take(top)
            .map(|p| SelfShare {
                name: p.name.clone(),
                kind: p.kind.clone(),
                self_ns: p.self_ns,
                percent: if self_total == 0 {
                    0.0
                } else {
                    (p.self_ns as f64 * 10_000.0 / self_total as f64).round() / 100.0
                },
            })
            .collect(),
        threads: stats::threads(capture, nesting),
        instants: capture
            .instants
            .iter()
            .map(|(n, &count)| InstantCount {
                name: n.name.clone(),
                kind: n.cat.clone(),
                count,
            })
            .collect(),
        bottlenecks: outliers::find(capture, nesting, min_count, top),
        probes,
        off_cpu: None,
    }
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "kind,name,count,total_ns,self_ns,min_ns,mean_ns,p50_ns,p90_ns,p99_ns,max_ns,stddev_ns\n",
        );
        for p in &self.probes {
            out += &format!(
                "{},{},{},{},{},{},{},{},{},{},{},{}\n",
                csv_field(&p.kind),
                csv_field(&p.name),
                p.count,
                p.total_ns,
                p.self_ns,
                p.min_ns,
                p.mean_ns,
                p.p50_ns,
                p.p90_ns,
                p.p99_ns,
                p.max_ns,
                p.stddev_ns
            );
        }
        out
    }

    pub fn to_text(&self, top: usize) -> String {
        let mut out = self.header_text();
        let of = |n: usize| {
            if n > top {
                format!(" (of {n})")
            } else {
                String::new()
            }
        };
        let rows: Vec<Vec<String>> = self
            .probes
            .iter()
            .take(top)
            .map(|p| {
                vec![
                    p.name.clone(),
                    p.kind.clone(),
                    p.count.to_string(),
                    human(p.total_ns),
                    human(p.self_ns),
                    human(p.mean_ns),
                    human(p.p50_ns),
                    human(p.p90_ns),
                    human(p.p99_ns),
                    human(p.max_ns),
                ]
            })
            .collect();
        if !rows.is_empty() {
            out += &format!("\nTOP {} BY TOTAL TIME{}\n", rows.len(), of(self.probes.len()));
            out += &render(
                &[
                    "PROBE", "KIND", "COUNT", "TOTAL", "SELF", "MEAN", "P50", "P90", "P99", "MAX",
                ],
                &rows,
                2,
            );
        }
        let rows: Vec<Vec<String>> = self
            .top_by_self
            .iter()
            .map(|s| vec![s.name.clone(), human(s.self_ns), format!("{:.1}%", s.percent)])
            .collect();
        if !rows.is_empty() {
            out += &format!("\nTOP {} BY SELF TIME{}\n", rows.len(), of(self.probes.len()));
            out += &render(&["PROBE", "SELF", "SHARE"], &rows, 1);
        }
        out += &self.threads_text(top);
        let rows: Vec<Vec<String>> = self
            .instants
            .iter()
            .map(|i| vec![i.name.clone(), i.kind.clone(), i.count.to_string()])
            .collect();
        if !rows.is_empty() {
            out += "\nINSTANT EVENTS\n";
            out += &render(&["NAME", "KIND", "COUNT"], &rows, 2);
        }
        out += &bottlenecks_text(&self.bottlenecks);
        if let Some(off) = &self.off_cpu {
            out += &off_cpu_text(off, top);
        }
        out
    }

    /// The lines before the tables: counts, duration and stop reason, losses, --min-duration.
    fn header_text(&self) -> String {
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let (spans, probes) = (self.spans as usize, self.probes.len());
        let mut out = format!(
            "{spans} span{} from {probes} probe{}",
            plural(spans),
            plural(probes)
        );
        if self.samples > 0 {
            let hz = self
                .sample_frequency_hz
                .map_or(String::new(), |hz| format!(" at {hz} Hz"));
            out += &format!(", {} CPU samples{hz}", self.samples);
        }
        // A part summary.json lacks (a hand-made or older capture) is left out, not shown empty.
        let within = |text: String| {
            if text.is_empty() {
                text
            } else {
                format!(" ({text})")
            }
        };
        out += &format!(
            " in {}{}\n",
            human(self.duration_ns),
            within(self.stop_reason.replace('_', " "))
        );
        let lost: Vec<String> = self.lost.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out += &format!(
            "lost events: {}{}; unmatched entries: {}; decode errors: {}\n",
            self.lost_events,
            within(lost.join(", ")),
            self.unmatched_entries,
            self.decode_errors
        );
        if let Some(min) = self.min_duration_ns {
            out += &format!(
                "recorded with --min-duration {}: shorter calls are counted in summary.json only\n",
                human(min)
            );
        }
        out
    }

    /// The table of the `top` threads by traced time.
    fn threads_text(&self, top: usize) -> String {
        let rows: Vec<Vec<String>> = self
            .threads
            .iter()
            .take(top)
            .map(|t| {
                vec![
                    t.pid.to_string(),
                    t.tid.to_string(),
                    t.name.clone(),
                    t.spans.to_string(),
                    human(t.traced_ns),
                    format!("{} ({})", t.top, human(t.top_self_ns)),
                ]
            })
            .collect();
        if rows.is_empty() {
            return String::new();
        }
        let mut out = if rows.len() < self.threads.len() {
            format!(
                "\nTHREADS: TOP {} BY TRACED TIME (of {})\n",
                rows.len(),
                self.threads.len()
            )
        } else {
            "\nTHREADS\n".to_string()
        };
        out += &render(
            &["PID", "TID", "THREAD", "SPANS", "TRACED", "MOST SELF TIME"],
            &rows,
            0,
        );
        out
    }
}

fn bottlenecks_text(b: &Bottlenecks) -> String {
    let mut out = format!(
        "\nOUTLIERS (more than 2σ above their probe's mean, probes with at least {} spans): {}\n",
        b.min_count, b.outliers_total
    );
    let rows: Vec<Vec<String>> = b
        .outliers
        .iter()
        .map(|o| {
            vec![
                o.name.clone(),
                format!("+{}", human(o.offset_ns)),
                human(o.dur_ns),
                human(o.mean_ns),
                format!("{:.1}", o.sigmas),
                format!("{}/{}", o.pid, o.tid),
                o.thread.clone(),
                o.args.as_ref().map_or(String::new(), |a| a.to_string()),
            ]
        })
        .collect();
    out += &render(
        &[
            "PROBE", "AT", "DURATION", "MEAN", "SIGMAS", "PID/TID", "THREAD", "ARGS",
        ],
        &rows,
        1,
    );
    let shares = |title: &str, list: &[outliers::Share], ns: bool| {
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|s| {
                let value = if ns { human(s.value) } else { s.value.to_string() };
                vec![s.name.clone(), value, format!("{:.1}%", s.percent)]
            })
            .collect();
        if rows.is_empty() {
            return String::new();
        }
        format!("\n{title}\n")
            + &render(
                &["FUNCTION", if ns { "SELF" } else { "SAMPLES" }, "SHARE"],
                &rows,
                1,
            )
    };
    // Self time per function is the TOP BY SELF TIME table above.
    out += &shares("FUNCTIONS BY SELF SAMPLES (CPU sampling)", &b.self_samples, false);
    for w in &b.waits {
        out += &format!(
            "\nwaits ({}): {} = {:.1}% of the traced time\n",
            w.kind.replace('_', " "),
            human(w.wait_ns),
            w.percent
        );
    }
    for hint in &b.hints {
        out += &format!("hint: {hint}\n");
    }
    out
}

/// What the CLI prints: the report on stdout, or a note about the file written.
pub enum Rendered {
    Stdout(Vec<u8>),
    Wrote(String),
}

/// Runs `xtrace report`.
/// The off-CPU tables: time per wait, the stacks that waited longest, the contended locks.
fn off_cpu_text(off: &crate::analysis::offcpu::OffCpuTime, top: usize) -> String {
    let share = |ns: u64| format!("{:.1}%", ns as f64 * 100.0 / off.total_ns.max(1) as f64);
    let mut waits: Vec<(&String, &u64)> = off.by_wait.iter().collect();
    waits.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let rows: Vec<Vec<String>> = waits
        .iter()
        .take(top)
        .map(|(w, &ns)| vec![w.to_string(), human(ns), share(ns)])
        .collect();
    let mut out = format!("\nOFF-CPU: {} in all\n", human(off.total_ns));
    out += &render(&["WAIT", "TIME", "SHARE"], &rows, 1);
    let rows: Vec<Vec<String>> = off
        .top_stacks
        .iter()
        .take(top)
        .map(|(stack, ns)| vec![stack.clone(), human(*ns), share(*ns)])
        .collect();
    if !rows.is_empty() {
        out += "\nOFF-CPU STACKS (longest waits)\n";
        out += &render(&["STACK", "TIME", "SHARE"], &rows, 1);
    }
    let rows: Vec<Vec<String>> = off
        .locks
        .iter()
        .take(top)
        .map(|l| {
            let holder = l.holder.clone().unwrap_or_else(|| "-".into());
            vec![l.lock.clone(), l.waits.to_string(), human(l.wait_ns), holder]
        })
        .collect();
    if !rows.is_empty() {
        out += "\nCONTENDED LOCKS\n";
        out += &render(&["LOCK", "WAITS", "TIME", "RELEASED MOST BY"], &rows, 1);
    }
    out
}

pub fn run(args: &ReportArgs) -> Result<Rendered> {
    let capture = capture::load_nonempty(&args.dir, Load::default())?;
    let nesting = spans::nest(&capture.spans);
    let (bytes, default_file): (Vec<u8>, Option<&str>) = match args.format {
        Format::Text | Format::Json | Format::Csv => {
            let mut report = report(&capture, &nesting, args.top, args.min_count);
            report.off_cpu = crate::analysis::offcpu::load(&args.dir, &capture.summary)?;
            let text = match args.format {
                Format::Text => report.to_text(args.top),
                Format::Json => report.to_json(),
                _ => report.to_csv(),
            };
            (text.into_bytes(), None)
        }
        Format::Callgrind => (callgrind::write(&capture, &nesting).into_bytes(), None),
        Format::Pprof => (
            pprof_bytes(&capture, &nesting)?,
            Some(crate::output::PROFILE_PB_GZ),
        ),
        Format::SpanFlamegraph => {
            if capture.spans.is_empty() {
                return Err(Error::Xtrace(crate::error::Error::Usage(format!(
                    "{}: no spans to draw a span flamegraph from (a CPU profile only: see its flamegraph.svg)",
                    args.dir.display()
                ))));
            }
            let stacks = spans::stacks(&capture, &nesting);
            let svg = span_flamegraph::svg(&stacks, args.icicle).map_err(|e| crate::error::Error::Io {
                what: "drawing the span flamegraph".into(),
                source: e,
            })?;
            (svg, Some(crate::output::SPAN_FLAMEGRAPH_SVG))
        }
    };
    match (&args.output, default_file) {
        (Some(path), _) => {
            output::write_path(path, &bytes)?;
            Ok(Rendered::Wrote(format!("wrote {}", output::shown(path))))
        }
        (None, Some(name)) => {
            output::write_path(std::path::Path::new(name), &bytes)?;
            Ok(Rendered::Wrote(format!("wrote {name}")))
        }
        (None, None) => Ok(Rendered::Stdout(bytes)),
    }
}

/// profile.pb.gz of a capture: its samples and its spans.
pub fn pprof_bytes(capture: &Capture, nesting: &Nesting) -> Result<Vec<u8>> {
    let stacks = spans::stacks(capture, nesting);
    pprof::encode(&pprof::Input {
        folded: &capture.folded,
        sample_hz: capture.sample_hz(),
        span_stacks: &stacks,
        duration_ns: capture.field("duration_ns"),
    })
    .map_err(|e| {
        Error::Xtrace(crate::error::Error::Io {
            what: "compressing the profile".into(),
            source: e,
        })
    })
}
