//! The bench's results: one `Row` per measurement (what, value, ratio, goal, verdict, note, data),
//! the raw per-run numbers, the stdout table and `target/bench/bench.json`. Also the small number
//! helpers (median, ns and rate formatting) every measurement uses.
use std::{fs, path::Path};

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
    NotApplicable,
    /// A row without a goal of its own (a reference number).
    Info,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Fail => "FAIL",
            Self::NotApplicable => "n/a",
            Self::Info => "-",
        }
    }

    pub fn from_bool(pass: bool) -> Self {
        if pass {
            Self::Pass
        } else {
            Self::Fail
        }
    }
}

#[derive(Clone, Debug)]
pub struct Row {
    pub id: String,
    pub what: String,
    pub value: String,
    pub ratio: String,
    pub goal: String,
    pub verdict: Verdict,
    pub note: String,
    /// Machine-readable numbers behind `value` (medians, units spelled out).
    pub data: Value,
}

impl Row {
    pub fn new(id: &str, what: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            id: id.to_owned(),
            what: what.into(),
            value: value.into(),
            ratio: String::new(),
            goal: String::new(),
            verdict: Verdict::Info,
            note: String::new(),
            data: Value::Null,
        }
    }

    pub fn ratio(mut self, ratio: impl Into<String>) -> Self {
        self.ratio = ratio.into();
        self
    }

    pub fn goal(mut self, goal: impl Into<String>, verdict: Verdict) -> Self {
        self.goal = goal.into();
        self.verdict = verdict;
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    pub fn data(mut self, data: Value) -> Self {
        self.data = data;
        self
    }
}

#[derive(Default)]
pub struct Report {
    pub machine: Map<String, Value>,
    pub config: Map<String, Value>,
    /// Lines printed between the machine facts and the table: how to read it.
    pub legend: Vec<String>,
    rows: Vec<Row>,
    raw: Map<String, Value>,
}

impl Report {
    /// Adds a row and echoes it on stderr, so a long run shows progress.
    pub fn row(&mut self, row: Row) {
        eprintln!(
            "bench: = {}: {} {} {}",
            row.what,
            row.value,
            row.ratio,
            row.verdict.label()
        );
        self.rows.push(row);
    }

    pub fn raw(&mut self, key: &str, value: Value) {
        self.raw.insert(key.to_owned(), value);
    }

    pub fn print_table(&self) {
        println!("xtrace bench");
        for (key, value) in &self.machine {
            let text = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
            println!("  {key:<10} {text}");
        }
        println!();
        for line in &self.legend {
            println!("{line}");
        }
        if !self.legend.is_empty() {
            println!();
        }
        let header = ["MEASUREMENT", "VALUE", "RATIO", "GOAL", "VERDICT"];
        let cells: Vec<[&str; 5]> = self
            .rows
            .iter()
            .map(|r| [&*r.what, &*r.value, &*r.ratio, &*r.goal, r.verdict.label()])
            .collect();
        let mut widths = header.map(|h| h.chars().count());
        for row in &cells {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: [&str; 5]| {
            let mut text = String::new();
            for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
                let pad = width - cell.chars().count();
                text.push_str(cell);
                if i + 1 < cells.len() {
                    text.push_str(&" ".repeat(pad + 2));
                }
            }
            text
        };
        println!("{}", line(header));
        for (row, cell) in self.rows.iter().zip(&cells) {
            println!("{}", line(*cell));
            if !row.note.is_empty() {
                println!("    {}", row.note);
            }
        }
    }

    /// The table as Markdown, for docs/performance.md: the machine facts as a list, the legend,
    /// then one row per measurement with its note in a column of its own.
    pub fn markdown(&self) -> String {
        let cell = |text: &str| text.replace('|', "\\|");
        let mut out = String::from("Machine:\n\n");
        for (key, value) in &self.machine {
            let text = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
            out.push_str(&format!("- {key}: {}\n", cell(&text)));
        }
        out.push('\n');
        for line in &self.legend {
            out.push_str(&format!("{line}\n"));
        }
        out.push_str("\n| measurement | value | ratio | goal | verdict | note |\n");
        out.push_str("|---|---|---|---|---|---|\n");
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                cell(&r.what),
                cell(&r.value),
                cell(&r.ratio),
                cell(&r.goal),
                r.verdict.label(),
                cell(&r.note)
            ));
        }
        out
    }

    /// bench.json's document: the machine, the configuration, the legend, the rows, the raw runs.
    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                json!({
                    "id": r.id, "what": r.what, "value": r.value, "ratio": r.ratio, "goal": r.goal,
                    "verdict": r.verdict.label(), "note": r.note, "data": r.data,
                })
            })
            .collect();
        json!({
            "machine": self.machine, "config": self.config, "legend": self.legend, "rows": rows,
            "raw": self.raw,
        })
    }

    /// The report [`Report::to_json`] wrote (a bench run in a guest kernel, read back on the host).
    pub fn from_json(doc: &Value) -> Result<Report> {
        let object = |key: &str| doc[key].as_object().cloned().unwrap_or_default();
        let text = |row: &Value, key: &str| row[key].as_str().unwrap_or_default().to_owned();
        let rows = doc["rows"].as_array().context("a bench report without rows")?;
        let rows = rows
            .iter()
            .map(|row| {
                let label = text(row, "verdict");
                let verdict = [
                    Verdict::Pass,
                    Verdict::Fail,
                    Verdict::NotApplicable,
                    Verdict::Info,
                ]
                .into_iter()
                .find(|v| v.label() == label)
                .with_context(|| format!("a bench row with the verdict {label:?}"))?;
                Ok(Row {
                    id: text(row, "id"),
                    what: text(row, "what"),
                    value: text(row, "value"),
                    ratio: text(row, "ratio"),
                    goal: text(row, "goal"),
                    verdict,
                    note: text(row, "note"),
                    data: row["data"].clone(),
                })
            })
            .collect::<Result<Vec<Row>>>()?;
        let legend = doc["legend"].as_array().map(Vec::as_slice).unwrap_or_default();
        Ok(Report {
            machine: object("machine"),
            config: object("config"),
            legend: legend
                .iter()
                .filter_map(|l| l.as_str().map(str::to_owned))
                .collect(),
            rows,
            raw: object("raw"),
        })
    }

    pub fn write_json(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(&self.to_json()).context("could not serialize bench.json")?;
        fs::write(path, text + "\n").with_context(|| format!("could not write {}", path.display()))
    }
}

/// The median of `values` (mean of the middle two for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// `1.4 ns`, `712 ns`, `9.81 µs`, `12.3 ms`, `1.20 s`.
pub fn fmt_ns(ns: f64) -> String {
    let abs = ns.abs();
    if abs < 10.0 {
        format!("{ns:.2} ns")
    } else if abs < 1e3 {
        format!("{ns:.0} ns")
    } else if abs < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if abs < 1e9 {
        format!("{:.1} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// Events per second: `512 k/s`, `1.02 M/s`.
pub fn fmt_rate(per_sec: f64) -> String {
    if per_sec >= 1e6 {
        format!("{:.2} M/s", per_sec / 1e6)
    } else {
        format!("{:.0} k/s", per_sec / 1e3)
    }
}

/// `12,345,678`.
pub fn fmt_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Report, Row, Verdict};

    #[test]
    fn markdown_has_the_machine_legend_and_one_row_per_measurement() {
        let mut report = Report::default();
        report.machine.insert("kernel".into(), json!("6.18"));
        report.legend.push("Medians of 5 runs.".into());
        report.row(
            Row::new("span", "emulated: span", "1.40 µs")
                .ratio("1.28x")
                .goal("≤ 1.10x", Verdict::Fail)
                .note("a | b"),
        );
        report.row(Row::new("floor", "emulated: floor", "604 ns"));
        assert_eq!(
            report.markdown(),
            "Machine:\n\n- kernel: 6.18\n\nMedians of 5 runs.\n\n\
             | measurement | value | ratio | goal | verdict | note |\n\
             |---|---|---|---|---|---|\n\
             | emulated: span | 1.40 µs | 1.28x | ≤ 1.10x | FAIL | a \\| b |\n\
             | emulated: floor | 604 ns |  |  | - |  |\n"
        );
        let back = Report::from_json(&report.to_json()).unwrap();
        assert_eq!(back.markdown(), report.markdown());
        assert_eq!(back.to_json(), report.to_json());
    }
}
