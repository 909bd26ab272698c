//! What a recording shows on the console: the live status line on a terminal (a pseudo-terminal
//! from util-linux `script`), nothing with `-q`, and log lines only when RUST_LOG asks for them.
//! Each runs `profile split MS` (tests/fixtures/profile.c) launched under CPU sampling.

use std::process::{Command, Output, Stdio};

use xtrace_tests::{bpf::Attachments, fixtures::fixtures, output::Outputs, require_bpf, xtrace_bin, TempDir};

/// Runs `xtrace FLAGS -F 99 -o OUT -- profile split MS` on a pseudo-terminal; returns what
/// the terminal showed.
fn on_terminal(flags: &str, ms: u32, out: &std::path::Path) -> String {
    let line = format!(
        "{} {flags} -F 99 -o {} -- {} split {ms} </dev/null",
        xtrace_bin().display(),
        out.display(),
        fixtures().profile.display()
    );
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

/// The status line's fields, each time it was drawn: (events, lost, trace.json size text).
fn status_lines(shown: &str) -> Vec<(u64, u64, String)> {
    shown
        .split(['\r', '\n'])
        .map(|part| part.trim_start_matches("\x1b[2K"))
        .filter_map(|part| {
            let words: Vec<&str> = part.split_whitespace().collect();
            // spinner, elapsed, N, events, R/s, L, lost, trace.json, SIZE, UNIT
            let at = words.iter().position(|w| *w == "events")?;
            let events = words.get(at - 1)?.parse().ok()?;
            assert!(words.get(at + 1)?.ends_with("/s"), "{part:?}");
            assert_eq!(words.get(at + 3), Some(&"lost"), "{part:?}");
            let lost = words.get(at + 2)?.parse().ok()?;
            assert_eq!(words.get(at + 4), Some(&"trace.json"), "{part:?}");
            Some((events, lost, words[at + 5..].join(" ")))
        })
        .collect()
}

#[test]
fn a_terminal_shows_the_live_status_line() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("console-tty");
    let out = tmp.join("out");
    let shown = on_terminal("", 1500, &out);
    let drawn = status_lines(&shown);
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

    // -q: nothing from xtrace at all (the fixture's own `ready` line is all there is).
    let tmp = TempDir::new("console-tty-quiet");
    let shown = on_terminal("-q", 300, &tmp.join("out"));
    assert_eq!(shown.trim(), "ready", "-q on a terminal");
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
        "[DEBUG xtrace::pipeline::samples] read the maps of process {pid}: "
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
