//! `xtrace diff BASE NEW`: compares per-probe latency (p50 and mean of the spans' durations) and
//! CPU sample shares between two captures; a CI gate. A probe regressed when its p50 or mean grew
//! by more than `--threshold`, the one-sided Mann–Whitney U test says NEW's durations are larger
//! with p < 0.01, and both captures hold at least `--min-count` of its spans. With stacks.folded
//! on both sides it also writes a differential flamegraph.
use std::path::{Path, PathBuf};

use clap::Args;

use crate::export::table::render;
use crate::{
    analysis::{
        capture::{self, Capture, Load, Name},
        mannwhitney, stats, Error, Result,
    },
    model::duration::human,
    output,
};

/// The one-sided p-value below which a change is taken as real.
pub const ALPHA: f64 = 0.01;

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The reference capture (a directory written by `xtrace -o DIR`).
    #[arg(value_name = "BASE")]
    pub base: PathBuf,

    /// The capture to judge against BASE.
    #[arg(value_name = "NEW")]
    pub new: PathBuf,

    #[command(flatten)]
    pub judging: Judging,

    /// Where to write the differential flamegraph (when both captures have stacks.folded).
    #[arg(short = 'o', long = "output", value_name = "SVG", default_value = "diff.svg")]
    pub output: PathBuf,

    /// Also write the probes' comparison and the verdict as Markdown to FILE, for a
    /// pull-request comment (the same table `xtrace gate --markdown` writes).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
}

/// How a probe is judged (`xtrace diff`, `xtrace view --diff`).
#[derive(Clone, Copy, Debug, Args)]
pub struct Judging {
    /// Relative growth of a probe's p50 or mean beyond which it regressed (with statistical
    /// support): a percentage such as `5%` or `5`.
    #[arg(allow_hyphen_values = true, long, value_name = "PERCENT", default_value = "5%", value_parser = parse_percent)]
    pub threshold: f64,

    /// Judge only probes with at least N spans in each capture.
    #[arg(
        allow_negative_numbers = true,
        long = "min-count",
        value_name = "N",
        default_value_t = 20
    )]
    pub min_count: u64,
}

impl Default for Judging {
    /// The flags' own defaults, read from their definitions above.
    fn default() -> Self {
        use clap::{Command, FromArgMatches};
        let matches = Self::augment_args(Command::new("judging")).get_matches_from(["judging"]);
        // The defaults above are constants that parse; a failure is a bug in them.
        Self::from_arg_matches(&matches).expect("Judging's defaults parse")
    }
}

/// `5%`, `5` or `2.5%` → 0.05, 0.05, 0.025.
pub(crate) fn parse_percent(text: &str) -> Result<f64, String> {
    let trimmed = text.trim();
    let number = trimmed.strip_suffix('%').unwrap_or(trimmed);
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v / 100.0),
        _ => Err(format!("`{text}` is not a percentage such as 5% or 2.5")),
    }
}

/// How one probe compares.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub name: String,
    pub base_count: u64,
    pub new_count: u64,
    pub base_p50: u64,
    pub new_p50: u64,
    pub base_mean: u64,
    pub new_mean: u64,
    /// One-sided p-value in the direction the p50 moved (None: not tested).
    pub p: Option<f64>,
    pub verdict: &'static str,
}

/// Two captures compared, as `xtrace diff` prints it and `xtrace view --diff` shows it.
pub struct Comparison {
    /// The probes' table's cells, one row per probe ([`PROBE_HEADER`]'s columns).
    pub probe_cells: Vec<Vec<String>>,
    /// The off-CPU and CPU samples' tables, as printed (empty where neither side has them).
    pub tables: String,
    /// The closing line: which probes regressed, if any.
    pub verdict: String,
    pub regressed: Vec<String>,
    /// The differential flamegraph, when both captures have stacks.folded.
    pub svg: Option<Vec<u8>>,
}

/// What `xtrace diff` found.
pub struct Outcome {
    /// The tables for stdout.
    pub text: String,
    pub regressed: Vec<String>,
    /// The files written: the flamegraph (when both sides have samples), the Markdown.
    pub wrote: Vec<PathBuf>,
}

fn change(base: u64, new: u64) -> f64 {
    if base == 0 {
        return if new == 0 { 0.0 } else { f64::INFINITY };
    }
    (new as f64 - base as f64) / base as f64
}

fn show_change(c: f64) -> String {
    if c.is_infinite() {
        "+inf".into()
    } else if (c * 1000.0).round() == 0.0 {
        "0.0%".into()
    } else {
        format!("{:+.1}%", c * 100.0)
    }
}

/// Compares the spans of both captures, probe by probe (name and kind), sorted by name.
pub fn compare(base: &Capture, new: &Capture, threshold: f64, min_count: u64) -> Vec<Row> {
    let (b, n) = (stats::durations(base), stats::durations(new));
    let mut names: Vec<&Name> = b.keys().chain(n.keys()).copied().collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let empty = Vec::new();
            let (bd, nd) = (b.get(name).unwrap_or(&empty), n.get(name).unwrap_or(&empty));
            let (bs, ns) = (
                stats::summarize(name, bd.clone(), 0),
                stats::summarize(name, nd.clone(), 0),
            );
            let mut row = Row {
                name: name.name.clone(),
                base_count: bs.count,
                new_count: ns.count,
                base_p50: bs.p50_ns,
                new_p50: ns.p50_ns,
                base_mean: bs.mean_ns,
                new_mean: ns.mean_ns,
                p: None,
                verdict: "",
            };
            row.verdict = if bd.is_empty() {
                "only in NEW"
            } else if nd.is_empty() {
                "only in BASE"
            } else if bs.count < min_count || ns.count < min_count {
                "too few spans"
            } else {
                let test = mannwhitney::test(bd, nd);
                let (p50, mean) = (change(bs.p50_ns, ns.p50_ns), change(bs.mean_ns, ns.mean_ns));
                let slower = p50 > threshold || mean > threshold;
                let faster = p50 < -threshold || mean < -threshold;
                let (p_greater, p_less) = test.map_or((1.0, 1.0), |t| (t.p_greater, t.p_less));
                row.p = Some(if ns.p50_ns >= bs.p50_ns { p_greater } else { p_less });
                if slower && p_greater < ALPHA {
                    "REGRESSED"
                } else if faster && p_less < ALPHA {
                    "improved"
                } else if slower || faster {
                    "not significant"
                } else {
                    "no change"
                }
            };
            row
        })
        .collect()
}

/// Self-sample shares per function (the innermost frame, `_[k]` dropped).
fn sample_shares(capture: &Capture) -> std::collections::BTreeMap<String, f64> {
    let total = capture.samples().max(1) as f64;
    let mut shares = std::collections::BTreeMap::new();
    for (stack, n) in &capture.folded {
        let leaf = stack.rsplit(';').next().unwrap_or(stack);
        let leaf = leaf.strip_suffix("_[k]").unwrap_or(leaf).to_string();
        *shares.entry(leaf).or_insert(0.0) += *n as f64 * 100.0 / total;
    }
    shares
}

/// Folded stacks as text, for the differential flamegraph.
fn folded_text(capture: &Capture) -> String {
    capture
        .folded
        .iter()
        .map(|(stack, n)| format!("{stack} {n}\n"))
        .collect()
}

/// The header of the probes' table.
pub const PROBE_HEADER: [&str; 11] = [
    "PROBE",
    "BASE N",
    "NEW N",
    "BASE P50",
    "NEW P50",
    "P50",
    "BASE MEAN",
    "NEW MEAN",
    "MEAN",
    "P",
    "VERDICT",
];

/// The rows of the probes compared: counts, p50 and mean on each side, their changes, the
/// p-value and the verdict.
fn probe_cells(rows: &[Row]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| {
            let tested = r.base_count > 0 && r.new_count > 0;
            let delta = |b, n| {
                if tested {
                    show_change(change(b, n))
                } else {
                    "-".into()
                }
            };
            // A side without spans has no durations: `-`, not 0ns.
            let time = |count: u64, ns: u64| if count > 0 { human(ns) } else { "-".into() };
            vec![
                r.name.clone(),
                r.base_count.to_string(),
                r.new_count.to_string(),
                time(r.base_count, r.base_p50),
                time(r.new_count, r.new_p50),
                delta(r.base_p50, r.new_p50),
                time(r.base_count, r.base_mean),
                time(r.new_count, r.new_mean),
                delta(r.base_mean, r.new_mean),
                r.p.map_or("-".into(), |p| {
                    if p < 0.001 {
                        "<0.001".into()
                    } else {
                        format!("{p:.3}")
                    }
                }),
                r.verdict.to_string(),
            ]
        })
        .collect()
}

/// The CPU sample counts of each side, and the table of the 10 functions whose self shares moved
/// most.
fn sample_table(base: &Capture, new: &Capture) -> String {
    let (bs, ns) = (sample_shares(base), sample_shares(new));
    let mut functions: Vec<(&String, f64, f64)> = bs
        .keys()
        .chain(ns.keys())
        .map(|f| (f, *bs.get(f).unwrap_or(&0.0), *ns.get(f).unwrap_or(&0.0)))
        .collect();
    functions.sort_by(|a, b| {
        (b.2 - b.1)
            .abs()
            .total_cmp(&(a.2 - a.1).abs())
            .then_with(|| a.0.cmp(b.0))
    });
    functions.dedup_by(|a, b| a.0 == b.0);
    let cells: Vec<Vec<String>> = functions
        .iter()
        .take(10)
        .map(|(f, b, n)| {
            vec![
                f.to_string(),
                format!("{b:.1}%"),
                format!("{n:.1}%"),
                format!("{:+.1}", n - b),
            ]
        })
        .collect();
    let mut text = format!(
        "\nCPU SAMPLES: {} in BASE, {} in NEW; self shares that moved most (percentage points)\n",
        base.samples(),
        new.samples()
    );
    text += &render(&["FUNCTION", "BASE", "NEW", "CHANGE"], &cells, 1);
    text
}

/// Time off CPU per wait on each side, and its change (a side recorded without `--off-cpu`
/// counts as none).
fn off_cpu_table(
    base: &crate::analysis::offcpu::OffCpuTime,
    new: &crate::analysis::offcpu::OffCpuTime,
) -> String {
    let rows: Vec<Vec<String>> = crate::analysis::offcpu::compare(base, new)
        .into_iter()
        .map(|(wait, b, n)| vec![wait, human(b), human(n), show_change(change(b, n))])
        .collect();
    let mut text = format!(
        "\nOFF-CPU: {} in BASE, {} in NEW; time per wait\n",
        human(base.total_ns),
        human(new.total_ns)
    );
    text += &render(&["WAIT", "BASE", "NEW", "CHANGE"], &rows, 1);
    text
}

/// Compares the captures in `base_dir` and `new_dir`.
pub fn comparison(base_dir: &Path, new_dir: &Path, judging: Judging) -> Result<Comparison> {
    let base = capture::load_nonempty(base_dir, Load::default())?;
    let new = capture::load_nonempty(new_dir, Load::default())?;
    if base.format_version != new.format_version {
        return Err(Error::VersionMismatch {
            base: base_dir.to_path_buf(),
            new: new_dir.to_path_buf(),
            base_version: base.format_version,
            new_version: new.format_version,
        });
    }
    let min_duration = |c: &Capture| c.summary.get("min_duration_ns").and_then(|v| v.as_u64());
    if min_duration(&base) != min_duration(&new) {
        let shown = |c: &Capture| min_duration(c).map_or("none".into(), human);
        return Err(Error::MinDurationMismatch {
            base: base_dir.to_path_buf(),
            new: new_dir.to_path_buf(),
            base_min: shown(&base),
            new_min: shown(&new),
        });
    }
    let rows = compare(&base, &new, judging.threshold, judging.min_count);
    let regressed: Vec<String> = rows
        .iter()
        .filter(|r| r.verdict == "REGRESSED")
        .map(|r| r.name.clone())
        .collect();
    let mut tables = String::new();
    let (base_off, new_off) = (
        crate::analysis::offcpu::load(base_dir, &base.summary)?,
        crate::analysis::offcpu::load(new_dir, &new.summary)?,
    );
    if base_off.is_some() || new_off.is_some() {
        tables += &off_cpu_table(&base_off.unwrap_or_default(), &new_off.unwrap_or_default());
    }
    let mut svg = None;
    if !base.folded.is_empty() && !new.folded.is_empty() {
        tables += &sample_table(&base, &new);
        let title = format!("xtrace diff: {} vs {}", new_dir.display(), base_dir.display());
        svg = Some(super::flamegraph::draw_diff(
            &folded_text(&base),
            &folded_text(&new),
            title,
            true,
        )?);
    }
    let threshold = show_change(judging.threshold);
    let threshold = threshold.trim_start_matches('+');
    let verdict = match regressed.len() {
        0 => format!(
            "\nno probe regressed beyond {threshold} (p50 or mean, one-sided Mann-Whitney p < {ALPHA}, at least {} spans each)\n",
            judging.min_count
        ),
        n => format!(
            "\n{n} probe{} regressed beyond {threshold} (p50 or mean, one-sided Mann-Whitney p < {ALPHA}): {}\n",
            if n == 1 { "" } else { "s" },
            regressed.join(", ")
        ),
    };
    Ok(Comparison {
        probe_cells: probe_cells(&rows),
        tables,
        verdict,
        regressed,
        svg,
    })
}

/// Runs `xtrace diff`.
pub fn run(args: &DiffArgs) -> Result<Outcome> {
    let compared = comparison(&args.base, &args.new, args.judging)?;
    let mut text = String::new();
    if !compared.probe_cells.is_empty() {
        text += &render(&PROBE_HEADER, &compared.probe_cells, 1);
    }
    text += &compared.tables;
    text += &compared.verdict;
    let mut wrote = Vec::new();
    if let Some(svg) = &compared.svg {
        output::write_path(&args.output, svg)?;
        wrote.push(args.output.clone());
    }
    if let Some(path) = &args.markdown {
        let table = crate::export::table::markdown(&PROBE_HEADER, &compared.probe_cells, 1);
        let title = format!(
            "## xtrace diff: {} against {}\n\n",
            args.new.display(),
            args.base.display()
        );
        output::write_path(path, format!("{title}{table}{}", compared.verdict).as_bytes())?;
        wrote.push(path.clone());
    }
    Ok(Outcome {
        text,
        regressed: compared.regressed,
        wrote,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::capture::Span;

    fn capture(durations: &[u64]) -> Capture {
        Capture {
            names: vec![Name {
                name: "work".into(),
                cat: "uprobe".into(),
            }],
            spans: durations
                .iter()
                .enumerate()
                .map(|(i, &dur_ns)| Span {
                    name: 0,
                    pid: 1,
                    tid: 1,
                    start_ns: i as u64 * 1_000_000,
                    dur_ns,
                    args: None,
                })
                .collect(),
            ..Capture::default()
        }
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_percent("5%"), Ok(0.05));
        assert_eq!(parse_percent("2.5"), Ok(0.025));
        assert!(parse_percent("-1%").is_err());
        assert!(parse_percent("five").is_err());
        assert!(parse_percent("5%%%").is_err(), "one % at most");
    }

    #[test]
    fn verdicts() {
        let base: Vec<u64> = (0..100).map(|i| 1000 + i * 3).collect();
        let slow: Vec<u64> = base.iter().map(|d| d * 12 / 10).collect();
        let rows = compare(&capture(&base), &capture(&slow), 0.05, 20);
        assert_eq!(rows[0].verdict, "REGRESSED", "{rows:?}");
        let rows = compare(&capture(&slow), &capture(&base), 0.05, 20);
        assert_eq!(rows[0].verdict, "improved", "{rows:?}");
        let rows = compare(&capture(&base), &capture(&base), 0.05, 20);
        assert_eq!(rows[0].verdict, "no change", "{rows:?}");
        let rows = compare(&capture(&base[..10]), &capture(&slow[..10]), 0.05, 20);
        assert_eq!(rows[0].verdict, "too few spans", "{rows:?}");
        // A 20% slower mean from one huge outlier is not a regression.
        let mut outlier = base.clone();
        outlier[0] = 1000 * 100 * 3;
        let rows = compare(&capture(&base), &capture(&outlier), 0.05, 20);
        assert_eq!(rows[0].verdict, "not significant", "{rows:?}");
    }
}
