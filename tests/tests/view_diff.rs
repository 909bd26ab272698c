//! `xtrace view --diff BASE NEW` in Debian's headless Chromium (tests/tools/view_diff_page.py):
//! two captures of `spans busy` whose `busy` calls take 1 ms and 1.3 ms; the page's table is
//! `xtrace diff`'s for the same pair (header, cells, verdicts) with the same closing line, and
//! the differential flamegraph names `busy`. The page sits behind the view's token, Host and
//! Origin checks; an unreadable BASE or NEW is one line, exit 2.

use std::{ffi::OsString, path::Path, process::Command};

use serde_json::Value;
use xtrace_tests::{
    args,
    captures::xtrace,
    fixtures::{fixtures, python},
    live::{ask, View},
    require_bpf,
    run::{run_error, Xtrace},
    TempDir,
};

/// Records `spans busy US 300` with `-u busy` and CPU samples into `dir`.
fn record_busy(dir: &Path, us: u32) {
    let mut flags = args!["-q", "-u", "busy", "-F", "499", "-o", dir, "--"];
    flags.push(fixtures().spans.clone().into());
    flags.extend(["busy", &us.to_string(), "300"].map(OsString::from));
    Xtrace::spawn(flags).wait().assert_success();
}

/// The lines of `xtrace diff`'s probes' table, header first, their words joined by one space.
fn printed_rows(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// Without the cookie, from a rebound host name, or from another site's page: 403.
fn assert_foreign_requests_refused(served: &View) {
    let host = format!("Host: {}", served.host());
    assert_eq!(
        ask(served.addr, "GET", "/state.json", std::slice::from_ref(&host)).status,
        403,
        "no cookie"
    );
    let rebound = format!("Host: rebound.example:{}", served.addr.port());
    assert_eq!(
        ask(served.addr, "GET", "/state.json", &[rebound, served.cookie()]).status,
        403
    );
    assert_eq!(
        ask(
            served.addr,
            "GET",
            "/flamegraph.svg",
            &[host, served.cookie(), "Origin: http://evil.example".into()]
        )
        .status,
        403
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn view_diff_shows_what_diff_prints() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("view-diff");
    let (base, new) = (tmp.join("base"), tmp.join("new"));
    record_busy(&base, 1000);
    record_busy(&new, 1300);
    let diff = xtrace(args!["diff", &base, &new, "-o", tmp.join("diff.svg")]);
    assert_eq!(
        diff.code,
        Some(1),
        "busy regressed:\n{}\n{}",
        diff.stdout,
        diff.stderr
    );
    let printed = printed_rows(&diff.stdout);
    let busy = printed
        .iter()
        .find(|r| r.starts_with("busy "))
        .expect("a busy row");
    assert!(busy.ends_with(" REGRESSED"), "{busy}");

    let mut view = Xtrace::spawn(args!["view", "--diff", &base, &new]);
    let line = view.wait_stderr("xtrace: live view at ");
    let served = View::from_line(&line);
    assert_foreign_requests_refused(&served);

    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("a URL");
    // XTRACE_VIEW_DIFF_SCREENSHOT=docs/images/view-diff.png keeps the page's picture.
    let screenshot = std::env::var("XTRACE_VIEW_DIFF_SCREENSHOT")
        .unwrap_or_else(|_| tmp.join("view-diff.png").to_string_lossy().into_owned());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/view_diff_page.py");
    let run = Command::new(python())
        .arg(&script)
        .args([url, screenshot.as_str()])
        .output()
        .expect("running tests/tools/view_diff_page.py");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "view_diff_page.py failed ({}):\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.trim()).expect("view_diff_page.py's JSON");
    let finished = view.wait();
    finished.assert_success();
    assert!(
        finished
            .stderr
            .last()
            .is_some_and(|l| l.starts_with("xtrace: closed the comparison of ")),
        "{:?}",
        finished.stderr
    );

    let after = std::net::TcpStream::connect_timeout(&served.addr, std::time::Duration::from_secs(2));
    assert_eq!(
        after.map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::ConnectionRefused),
        "nothing listens after Close"
    );
    // The page's cells, each row's joined by one space: the printed lines.
    let page_header: Vec<String> = serde_json::from_value(seen["header"].clone()).unwrap();
    let page_rows: Vec<Vec<String>> = serde_json::from_value(seen["rows"].clone()).unwrap();
    let page: Vec<String> = std::iter::once(page_header)
        .chain(page_rows)
        .map(|cells| cells.join(" "))
        .collect();
    assert_eq!(page, printed, "the page's table is xtrace diff's");
    let closing = diff
        .stdout
        .lines()
        .rev()
        .find(|l| !l.is_empty())
        .expect("a closing line");
    assert_eq!(seen["verdict"], closing);
    assert!(closing.starts_with("1 probe regressed beyond 5.0%"), "{closing}");
    let names: Vec<String> = serde_json::from_value(seen["flame_names"].clone()).unwrap();
    assert!(names.iter().any(|n| n.starts_with("busy (")), "{names:?}");
    assert_eq!(
        seen["flame_subtitle"],
        "width: NEW's samples; red: more than in BASE, blue: fewer"
    );
    assert!(
        std::fs::metadata(&screenshot).is_ok_and(|m| m.len() > 10_000),
        "a screenshot in {screenshot}"
    );
}

#[test]
fn view_diff_of_no_capture_is_one_line() {
    let tmp = TempDir::new("view-diff-none");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/workload-1");
    for (base, new) in [
        (tmp.join("missing"), data.clone()),
        (data.clone(), tmp.join("missing")),
    ] {
        let line = run_error(args!["view", "--diff", &base, &new]);
        assert!(
            line.ends_with(
                "missing: not an xtrace capture (no such directory); give a directory written by `xtrace -o DIR`"
            ),
            "{line}"
        );
    }
}

/// `--threshold` and `--min-count` judge a comparison; on one capture they are refused.
#[test]
fn view_judging_flags_need_a_comparison() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/workload-1");
    for flag in [["--threshold", "10%"], ["--min-count", "3"]] {
        let line = run_error(args!["view", &data, flag[0], flag[1]]);
        assert_eq!(
            line,
            "xtrace: error: --threshold and --min-count judge a comparison: give them with --diff BASE NEW; see `xtrace --help`"
        );
    }
}
