//! What a recording shows on the console: the live status line on a terminal (a pseudo-terminal
//! from util-linux `script`), nothing with `-q`, and log lines only when RUST_LOG asks for them.
//! Each runs `profile split MS` (tests/fixtures/profile.c) launched under CPU sampling.

use std::process::{Command, Output, Stdio};

use xtrace_tests::{bpf::Attachments, fixtures::fixtures, output::Outputs, require_bpf, xtrace_bin, TempDir};

/// Runs `xtrace FLAGS -F 99 -o OUT -- profile split MS` on a pseudo-terminal; returns what
/// the terminal showed.
fn on_terminal(flags: &str, ms: u32, out: &std::path::Path) -> String {
    let command = format!("-F 99 -- {} split {ms}", fixtures().profile.display());
    run_on_terminal(&format!("{flags} -o {} {command}", out.display()))
}

/// Runs `xtrace ARGS` on a pseudo-terminal; returns what the terminal showed.
fn run_on_terminal(args: &str) -> String {
    let line = format!("{} {args} </dev/null", xtrace_bin().display());
    let before = Attachments::snapshot();
    let ran = Command::new("script")
        .args(["-qefc", &line, "/dev/null"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running script (util-linux): {e}"));
    before.assert_none_left();
    let shown = String::from_utf8_lossy(&ran.stdout).into_owned();
    assert!(ran.status.success(), "{line}: {}\n{shown}", ran.status);
    shown
}

/// The status line's fields, each time it was drawn: (events, lost, size text of `file`).
fn status_lines(shown: &str, file: &str) -> Vec<(u64, u64, String)> {
    shown
        .split(['\r', '\n'])
        .map(|part| part.trim_start_matches("\x1b[2K"))
        .filter_map(|part| {
            let words: Vec<&str> = part.split_whitespace().collect();
            // spinner, elapsed, N, events, R/s, L, lost, FILE, SIZE, UNIT
            let at = words.iter().position(|w| *w == "events")?;
            let events = words.get(at - 1)?.parse().ok()?;
            assert!(words.get(at + 1)?.ends_with("/s"), "{part:?}");
            assert_eq!(words.get(at + 3), Some(&"lost"), "{part:?}");
            let lost = words.get(at + 2)?.parse().ok()?;
            assert_eq!(words.get(at + 4), Some(&file), "{part:?}");
            Some((events, lost, words[at + 5..].join(" ")))
        })
        .collect()
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_terminal_shows_the_live_status_line() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("console-tty");
    let out = tmp.join("out");
    let shown = on_terminal("", 1500, &out);
    let drawn = status_lines(&shown, "trace.json");
    assert!(!drawn.is_empty(), "no status line on the terminal:\n{shown}");
    let samples = Outputs::read_profiled(&out).summary["samples"].as_u64().unwrap();
    // Events only grow, never past what the capture holds; nothing was lost.
    assert!(drawn.windows(2).all(|w| w[0].0 <= w[1].0), "{drawn:?}");
    let last = drawn.last().unwrap();
    assert!(last.0 > 0 && last.0 <= samples, "{last:?} of {samples} samples");
    assert!(drawn.iter().all(|d| d.1 == 0), "{drawn:?}");
    assert!(
        last.2.ends_with(" B") || last.2.ends_with(" kB"),
        "trace.json size: {last:?}"
    );
    assert!(shown.contains("xtrace: attached the sampler"), "{shown}");

    // --gzip, recording `spans spin` (~100 spans a ms streamed as they come): the status line
    // names trace.json.gz and counts its compressed bytes, which the file on disk ends with at
    // least (the uncompressed JSON is several times more).
    let tmp = TempDir::new("console-tty-gzip");
    let shown = run_on_terminal(&format!(
        "--gzip -u work -d 1.5 -o {} -- {} spin",
        tmp.join("out").display(),
        fixtures().spans.display()
    ));
    let drawn = status_lines(&shown, "trace.json.gz");
    let last = drawn.last().unwrap_or_else(|| panic!("no status line:\n{shown}"));
    let on_disk = std::fs::metadata(tmp.join("out/trace.json.gz")).unwrap().len() as f64;
    assert!(
        bytes(&last.2) <= on_disk * 1.05,
        "{last:?} shown, {on_disk} bytes on disk"
    );

    // -q: nothing from xtrace at all (the fixture's own `ready` line is all there is).
    let tmp = TempDir::new("console-tty-quiet");
    let shown = on_terminal("-q", 300, &tmp.join("out"));
    assert_eq!(shown.trim(), "ready", "-q on a terminal");

    // With log lines on, no status line is drawn between them.
    let tmp = TempDir::new("console-tty-log");
    let out = tmp.join("out");
    let line = format!(
        "RUST_LOG=xtrace=debug {} -F 99 -o {} -- {} split 300 </dev/null",
        xtrace_bin().display(),
        out.display(),
        fixtures().profile.display()
    );
    let ran = Command::new("script")
        .args(["-qefc", &line, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("running script (util-linux)");
    let shown = String::from_utf8_lossy(&ran.stdout).into_owned();
    assert!(ran.status.success(), "{shown}");
    assert!(shown.contains("[DEBUG xtrace::"), "{shown}");
    assert!(status_lines(&shown, "trace.json").is_empty(), "{shown}");
}

/// The bytes a status-line size shows ("830 B", "1.5 kB", "2.0 MB").
fn bytes(size: &str) -> f64 {
    let (number, unit) = size.split_once(' ').unwrap_or_else(|| panic!("a size: {size:?}"));
    let scale = match unit {
        "B" => 1.0,
        "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        _ => panic!("unit of {size:?}"),
    };
    number.parse::<f64>().expect("a number") * scale
}

/// Runs `xtrace -q -F 999 -o OUT -- profile split 300` with stderr piped and RUST_LOG set to
/// `log` (or unset).
fn with_log(log: Option<&str>, out: &std::path::Path) -> Output {
    let mut command = Command::new(xtrace_bin());
    command.args(["-q", "-F", "999", "-o"]).arg(out).arg("--");
    command.arg(&fixtures().profile).args(["split", "300"]);
    command.env_remove("RUST_LOG").stdin(Stdio::null());
    if let Some(log) = log {
        command.env("RUST_LOG", log);
    }
    let before = Attachments::snapshot();
    let ran = command.output().expect("running xtrace");
    before.assert_none_left();
    assert!(ran.status.success(), "{ran:?}");
    ran
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn rust_log_turns_on_log_lines() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("console-log");
    let out = tmp.join("out");
    let ran = with_log(Some("xtrace=debug"), &out);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    let summary = Outputs::read_profiled(&out).summary;
    let mechanism = summary["attach_mechanism"].as_str().unwrap();
    let pid = summary["command"]["pid"].as_u64().unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    let starting = |prefix: String| {
        assert!(
            lines.iter().any(|l| l.starts_with(&prefix)),
            "no line starting {prefix:?}:\n{stderr}"
        );
    };
    starting(format!(
        "[INFO  xtrace::session] attached 0 uprobes ({mechanism}) in "
    ));
    starting("[DEBUG xtrace::session] following child processes of the sampled ones: ".into());
    starting(format!(
        "[DEBUG xtrace::image] process {pid} replaced its program: image "
    ));
    starting("[INFO  xtrace::session] detached in ".into());
    // Only xtrace's own lines at xtrace=debug; nothing else on stderr with -q.
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("[INFO  xtrace") || l.starts_with("[DEBUG xtrace")),
        "{stderr}"
    );

    // Without RUST_LOG, -q leaves stderr empty.
    let tmp = TempDir::new("console-no-log");
    let ran = with_log(None, &tmp.join("out"));
    assert_eq!(String::from_utf8_lossy(&ran.stderr), "");
}
