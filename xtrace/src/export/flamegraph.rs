//! Folded stacks and their inferno flamegraph, as every stack output writes them: the CPU
//! profile (stacks.folded, flamegraph.svg), the off-CPU time (offcpu.folded, offcpu.svg) and the
//! span flamegraph (span-flamegraph.svg). A folded line is `root;outer;...;inner COUNT`; a chart
//! says what a count is (samples, nanoseconds), its title and its colours.
use std::collections::BTreeMap;

use inferno::flamegraph::{color::Palette, Direction, Options};

use crate::{
    error::{Error, Result},
    output,
};

/// What a flamegraph is titled and what its widths count.
pub struct Chart {
    pub title: String,
    /// A line under the title, if any.
    pub subtitle: Option<String>,
    /// What one count is, as the tooltips say it: `samples`, `ns`.
    pub count_name: &'static str,
    pub palette: Palette,
    /// The text of the SVG drawn when there is no stack: `no samples`.
    pub empty: &'static str,
    /// Roots at the top (an icicle graph).
    pub icicle: bool,
}

pub use crate::model::folded::{fold, folded_frame};

/// The lines `STACK COUNT` of `folded`, in its order (sorted by stack).
pub fn lines(folded: &BTreeMap<String, u64>) -> Vec<String> {
    folded.iter().map(|(stack, n)| format!("{stack} {n}")).collect()
}

/// The SVG of folded `lines`, or a one-line SVG saying `chart.empty` when there are none.
pub fn svg(lines: &[String], chart: &Chart) -> std::io::Result<Vec<u8>> {
    if lines.is_empty() {
        let text = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\"><text x=\"10\" y=\"20\">{}</text></svg>\n",
            chart.empty
        );
        return Ok(text.into_bytes());
    }
    let mut options = Options::default();
    options.title = chart.title.clone();
    options.subtitle = chart.subtitle.clone();
    options.count_name = chart.count_name.into();
    options.colors = chart.palette;
    if chart.icicle {
        options.direction = Direction::Inverted;
    }
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)?;
    Ok(svg)
}

/// Writes `folded` (stack → count) into `out` as the file `folded_name`, one `STACK COUNT` line
/// per stack, and its flamegraph as `svg_name`.
pub fn write(
    out: &output::Dir,
    folded: &BTreeMap<String, u64>,
    folded_name: &str,
    svg_name: &str,
    chart: &Chart,
) -> Result<()> {
    let lines = lines(folded);
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    output::write(out, folded_name, text.as_bytes())?;
    let svg = svg(&lines, chart).map_err(|source| Error::Output {
        path: out.join(svg_name),
        source,
    })?;
    output::write(out, svg_name, &svg)
}

#[cfg(test)]
mod tests {
    use inferno::flamegraph::color::BasicPalette;

    use super::*;

    fn chart(icicle: bool) -> Chart {
        Chart {
            title: "xtrace: 0.000 s off CPU".into(),
            subtitle: None,
            count_name: "ns",
            palette: Palette::Basic(BasicPalette::Blue),
            empty: "no time off CPU",
            icicle,
        }
    }

    #[test]
    fn folded_lines_are_made_safe_and_sorted() {
        let mut folded = BTreeMap::new();
        *folded
            .entry(fold("app;1", &["main".into(), "a\nb".into()], Some("[futex]")))
            .or_default() += 30;
        *folded.entry(fold("app;1", &["main".into()], None)).or_default() += 5;
        *folded.entry(fold("app;1", &["main".into()], None)).or_default() += 7;
        *folded.entry(fold("", &[], Some("[read]"))).or_default() += 1;
        assert_eq!(
            lines(&folded),
            vec![";[read] 1", "app:1;main 12", "app:1;main;a:b;[futex] 30"]
        );
    }

    /// A fresh output directory under the system's temporary one.
    fn out_dir(name: &str) -> (std::path::PathBuf, output::Dir) {
        let path = std::env::temp_dir().join(format!("xtrace-flamegraph-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        let dir = output::Dir::open_or_create(&path, None).unwrap();
        (path, dir)
    }

    /// The fill colours of the frames (`rect`s) of `svg`, as (red, green, blue).
    fn fills(svg: &str) -> Vec<(u8, u8, u8)> {
        svg.split("<rect ")
            .skip(1)
            .filter_map(|rect| {
                let rest = &rect[rect[..rect.find('>')?].find("fill=\"rgb(")? + 10..];
                let rgb: Vec<u8> = rest[..rest.find(')')?]
                    .split(',')
                    .map(|c| c.parse().unwrap())
                    .collect();
                Some((rgb[0], rgb[1], rgb[2]))
            })
            .collect()
    }

    #[test]
    fn the_writer_writes_both_files() {
        let (path, out) = out_dir("both");
        let folded = BTreeMap::from([
            ("app;main;nap;[nanosleep]".to_string(), 1_500_000),
            ("app;main;[futex]".to_string(), 500_000),
        ]);
        write(&out, &folded, "offcpu.folded", "offcpu.svg", &chart(false)).unwrap();
        let text = std::fs::read_to_string(path.join("offcpu.folded")).unwrap();
        assert_eq!(
            text,
            "app;main;[futex] 500000\napp;main;nap;[nanosleep] 1500000\n"
        );
        let drawn = std::fs::read_to_string(path.join("offcpu.svg")).unwrap();
        assert!(drawn.starts_with("<?xml"), "{drawn}");
        assert!(
            drawn.contains(">xtrace: 0.000 s off CPU</text>"),
            "title: {drawn}"
        );
        assert!(
            drawn.contains("<title>main (2,000,000 ns, 100.00%)</title>"),
            "count name: {drawn}"
        );
        assert!(
            drawn.contains("<title>[futex] (500,000 ns, 25.00%)</title>"),
            "{drawn}"
        );
        // Blue: red and green alike, from 80 to 140; blue from 205.
        let fills = fills(&drawn);
        assert_eq!(
            fills.len(),
            6,
            "all, app, main, nap, [nanosleep], [futex]: {drawn}"
        );
        assert!(
            fills
                .iter()
                .all(|&(r, g, b)| r == g && (80..=140).contains(&r) && b >= 205),
            "{fills:?}"
        );
        assert!(drawn.contains("var inverted = false;"), "{drawn}");
        let icicle = svg(&lines(&folded), &chart(true)).unwrap();
        assert!(String::from_utf8(icicle)
            .unwrap()
            .contains("var inverted = true;"));
        std::fs::remove_dir_all(path).unwrap();
    }

    #[test]
    fn nothing_to_draw_is_said_in_one_line() {
        let (path, out) = out_dir("empty");
        write(
            &out,
            &BTreeMap::new(),
            "offcpu.folded",
            "offcpu.svg",
            &chart(true),
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(path.join("offcpu.folded")).unwrap(), "");
        assert_eq!(
            std::fs::read_to_string(path.join("offcpu.svg")).unwrap(),
            "<svg xmlns=\"http://www.w3.org/2000/svg\"><text x=\"10\" y=\"20\">no time off CPU</text></svg>\n"
        );
        std::fs::remove_dir_all(path).unwrap();
    }
}
