//! `xtrace flamegraph --diff BASE NEW`: a differential flamegraph from folded files and from
//! capture directories (no root needed).

use xtrace_tests::{args, run::run_error, run::Xtrace, TempDir};

/// The `<title>` of the frame `name` in an inferno SVG, and the fill of its rectangle.
fn frame(svg: &str, name: &str) -> (String, String) {
    let start = svg
        .find(&format!("<title>{name} ("))
        .unwrap_or_else(|| panic!("no frame {name} in the SVG"));
    let title_end = svg[start..].find("</title>").unwrap() + start;
    let title = svg[start + 7..title_end].to_string();
    let fill_at = svg[title_end..].find("fill=\"").unwrap() + title_end + 6;
    let fill_end = svg[fill_at..].find('"').unwrap() + fill_at;
    (title, svg[fill_at..fill_end].to_string())
}

/// Whether an `rgb(r,g,b)` fill is red (r largest) or blue (b largest).
fn hue(fill: &str) -> &'static str {
    let rgb: Vec<u32> = fill
        .trim_start_matches("rgb(")
        .trim_end_matches(')')
        .split(',')
        .map(|c| c.trim().parse().unwrap())
        .collect();
    if rgb[0] > rgb[2] {
        "red"
    } else if rgb[2] > rgb[0] {
        "blue"
    } else {
        "grey"
    }
}

#[test]
fn diff_of_folded_files_and_capture_directories() {
    let tmp = TempDir::new("flamediff");
    let base = tmp.join("base.folded");
    std::fs::write(&base, "app;main;shrank 10\napp;main;grew 5\n").unwrap();
    let capture = tmp.join("capture");
    std::fs::create_dir(&capture).unwrap();
    std::fs::write(
        capture.join("stacks.folded"),
        "app;main;shrank 5\napp;main;grew 15\napp;main;fresh 2\n",
    )
    .unwrap();
    let svg_path = tmp.join("diff.svg");
    let finished = Xtrace::spawn(args!["flamegraph", "--diff", &base, &capture, "-o", &svg_path]).wait();
    finished.assert_success();
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    // Widths are NEW's samples; colours the change from BASE.
    let (title, fill) = frame(&svg, "grew");
    assert!(title.starts_with("grew (15 samples"), "{title}");
    assert_eq!(hue(&fill), "red", "{title}: {fill}");
    let (title, fill) = frame(&svg, "shrank");
    assert!(title.starts_with("shrank (5 samples"), "{title}");
    assert_eq!(hue(&fill), "blue", "{title}: {fill}");
    let (title, _) = frame(&svg, "fresh");
    assert!(title.starts_with("fresh (2 samples"), "{title}");
    assert!(svg.contains("all (22 samples"), "NEW has 22 samples in all");
}

#[test]
fn diff_of_what_is_not_a_capture_is_refused() {
    let tmp = TempDir::new("flamediff-bad");
    let good = tmp.join("good.folded");
    std::fs::write(&good, "app;main 1\n").unwrap();
    let line = run_error(args!["flamegraph", "--diff", tmp.path(), &good]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: {}: no stacks.folded in this directory: give a capture recorded with CPU \
             sampling (-F) or a folded-stack file",
            tmp.path().display()
        )
    );
    let text = tmp.join("notes.txt");
    std::fs::write(&text, "hello world\n").unwrap();
    let line = run_error(args!["flamegraph", "--diff", &good, &text]);
    assert!(
        line.ends_with("not folded stacks (lines of `frame;frame;... COUNT`)"),
        "{line}"
    );
    // One bad line among good ones is refused, as `xtrace report` refuses it.
    let mixed = tmp.join("mixed.folded");
    std::fs::write(&mixed, "app;main 1\ngarbage\n").unwrap();
    let line = run_error(args!["flamegraph", "--diff", &good, &mixed]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: {}: line 2 is not `frame;frame;... COUNT`: not folded stacks (lines of \
             `frame;frame;... COUNT`)",
            mixed.display()
        )
    );
    // A FIFO is refused at once, not waited on.
    let fifo = tmp.join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let line = run_error(args!["flamegraph", "--diff", &fifo, &good]);
    assert!(line.contains("fifo: it is not a regular file"), "{line}");
    // A recording cut short says so.
    let cut = tmp.join("cut");
    std::fs::create_dir(&cut).unwrap();
    std::fs::write(cut.join("trace.json.partial"), "{").unwrap();
    let line = run_error(args!["flamegraph", "--diff", &cut, &good]);
    assert!(
        line.ends_with(
            "cut: a recording cut short (trace.json.partial was never completed); record it again"
        ),
        "{line}"
    );
}
