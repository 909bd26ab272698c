//! `xtrace history --svg FILE`: each function's p50 and p99 across the groups of runs as a line
//! chart, one panel per function, in one self-contained SVG (no script, no external font).
use std::fmt::Write;

use super::history::Series;
use crate::model::duration::human;

const WIDTH: f64 = 720.0;
const PANEL: f64 = 220.0;
/// Room for the axis labels: left (times), bottom (groups), top (title).
const LEFT: f64 = 80.0;
const BOTTOM: f64 = 60.0;
const TOP: f64 = 30.0;

/// Characters that must be escaped in SVG text.
fn text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The chart of `series`, groups left to right in their order.
pub fn svg(series: &[Series]) -> String {
    let height = TOP + series.len().max(1) as f64 * (PANEL + BOTTOM + TOP);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="11">"#
    );
    out.push_str("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    if series.is_empty() {
        out.push_str("<text x=\"20\" y=\"20\">no runs stored for these functions</text>\n");
    }
    for (i, s) in series.iter().enumerate() {
        panel(&mut out, s, TOP + i as f64 * (PANEL + BOTTOM + TOP));
    }
    out.push_str("</svg>\n");
    out
}

/// One function's panel, its top at `y0`.
fn panel(out: &mut String, s: &Series, y0: f64) {
    let top = y0 + TOP;
    let (plot_w, n) = (WIDTH - LEFT - 20.0, s.points.len());
    let highest = s.points.iter().map(|p| p.stats.p99_ns).max().unwrap_or(0).max(1) as f64;
    let x = |i: usize| {
        LEFT + if n > 1 {
            plot_w * i as f64 / (n - 1) as f64
        } else {
            plot_w / 2.0
        }
    };
    let y = |ns: u64| top + PANEL - PANEL * ns as f64 / highest;
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{}" font-size="13" font-weight="bold">{} ({}): p50 and p99</text>"#,
        y0 + 20.0,
        text(&s.name),
        text(&s.kind)
    );
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{0}" stroke="#888"/><line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="#888"/>"##,
        top + PANEL,
        LEFT + plot_w
    );
    for fraction in [0.0, 0.5, 1.0] {
        let ns = (highest * fraction) as u64;
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            y(ns) + 4.0,
            human(ns)
        );
    }
    for (name, colour, pick) in [
        (
            "p50",
            "#1f6fb2",
            (|p: &super::history::Point| p.stats.p50_ns) as fn(&_) -> u64,
        ),
        ("p99", "#d9480f", |p: &super::history::Point| p.stats.p99_ns),
    ] {
        let points: Vec<String> = s
            .points
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{:.1},{:.1}", x(i), y(pick(p))))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline class="{name}" fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        for (i, p) in s.points.iter().enumerate() {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"><title>{} {name} {}</title></circle>"#,
                x(i),
                y(pick(p)),
                text(&p.group),
                human(pick(p))
            );
        }
    }
    for (i, p) in s.points.iter().enumerate() {
        let (gx, gy) = (x(i), top + PANEL + 14.0);
        let _ = writeln!(
            out,
            r#"<text x="{gx:.1}" y="{gy:.1}" text-anchor="end" transform="rotate(-30 {gx:.1} {gy:.1})">{}</text>"#,
            text(&p.group)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{pipeline::stats::Distribution, store::history::Point};

    #[test]
    fn a_panel_per_function_a_point_per_group() {
        let point = |group: &str, p50, p99| Point {
            group: group.into(),
            runs: 1,
            stats: Distribution {
                count: 1,
                p50_ns: p50,
                p99_ns: p99,
                ..Distribution::default()
            },
        };
        let series = vec![Series {
            name: "a<b>".into(),
            kind: "uprobe".into(),
            points: vec![point("1a2b", 100, 200), point("3c4d", 150, 400)],
        }];
        let svg = svg(&series);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("a&lt;b&gt; (uprobe): p50 and p99"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 4);
        // The highest p99 is at the top of the panel, a p50 of half of it half way down.
        assert!(svg.contains(r##"class="p99" fill="none" stroke="#d9480f" stroke-width="2" points="80.0,170.0 700.0,60.0""##), "{svg}");
        assert!(svg.contains(">3c4d p50 150ns</title>"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(super::svg(&[]).contains("no runs stored"));
    }
}
