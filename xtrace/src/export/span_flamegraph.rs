//! span-flamegraph.svg: a time-weighted flamegraph of instrumented code — every span's self time
//! at its call path of nested spans and ranges (the process as root), drawn by inferno. Widths are
//! nanoseconds of wall time on the traced threads, not samples.
use inferno::flamegraph::color::{BasicPalette, Palette};

use super::flamegraph::{self, folded_frame};
use crate::analysis::spans::SpanStack;

/// Folded lines `process;outer;...;inner SELF_NS`, sorted; paths with no self time are left out.
pub fn folded(stacks: &[SpanStack]) -> Vec<String> {
    stacks
        .iter()
        .filter(|s| s.self_ns > 0)
        .map(|s| {
            let frames: Vec<String> = s.frames.iter().map(|f| folded_frame(f)).collect();
            format!("{} {}", frames.join(";"), s.self_ns)
        })
        .collect()
}

/// The SVG of `stacks`, titled with what they cover.
pub fn svg(stacks: &[SpanStack], icicle: bool) -> Result<Vec<u8>, std::io::Error> {
    let lines = folded(stacks);
    let spans: u64 = stacks.iter().map(|s| s.spans).sum();
    let total: u64 = stacks.iter().map(|s| s.self_ns).sum();
    let chart = flamegraph::Chart {
        title: format!(
            "xtrace: {spans} spans, {} in traced calls",
            crate::model::duration::human(total)
        ),
        subtitle: Some("width: wall time in each call path (self time of nested spans)".into()),
        count_name: "ns",
        palette: Palette::Basic(BasicPalette::Hot),
        empty: "no spans",
        icicle,
    };
    flamegraph::svg(&lines, &chart)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_lines_and_svg() {
        let stacks = vec![
            SpanStack {
                frames: vec!["app".into(), "step".into()],
                spans: 2,
                self_ns: 30,
            },
            SpanStack {
                frames: vec!["app".into(), "step".into(), "a;b".into()],
                spans: 4,
                self_ns: 70,
            },
            SpanStack {
                frames: vec!["app".into(), "idle".into()],
                spans: 1,
                self_ns: 0,
            },
        ];
        assert_eq!(folded(&stacks), vec!["app;step 30", "app;step;a:b 70"]);
        let svg = String::from_utf8(svg(&stacks, false).unwrap()).unwrap();
        assert!(svg.contains("xtrace: 7 spans, 100ns in traced calls"), "title");
        assert!(svg.contains("step (100 ns, 100.00%)"), "step holds all the time");
    }
}
