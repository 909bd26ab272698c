//! Stores of runs, on real captures and real stores: a SQLite file and a ClickHouse server started
//! by the test (tests/src/clickhouse.rs). Captures come from fixture `spans` (tests/fixtures/
//! spans.c): `busy US N` calls busy() N times, each call spinning US µs of CLOCK_MONOTONIC. What is checked: a run is stored once
//! however often it is pushed, also after a push cut short before its commit mark; both stores
//! give the same history, byte for byte; the gate passes a run as fast as its baseline and fails
//! one 20% slower; `record --store` pushes, and a store that cannot be reached costs a warning,
//! not the capture; bad URLs and selectors are one line and exit 2.

use std::{ffi::OsString, path::PathBuf, process::Command};

use xtrace_tests::{
    args,
    captures::{xtrace, xtrace_with_env},
    clickhouse::ClickHouse,
    fixtures::fixtures,
    require_bpf,
    run::Xtrace,
    TempDir,
};

/// Records `spans MODE...` with `-u FUNCTION` and `--label`s into `dir`.
fn record(dir: &PathBuf, function: &str, labels: &[&str], mode: &[&str]) {
    let mut flags = args!["-q", "-u", function, "-o", dir];
    for label in labels {
        flags.extend(args!["--label", label]);
    }
    flags.push("--".into());
    flags.push(fixtures().spans.clone().into());
    flags.extend(mode.iter().map(OsString::from));
    Xtrace::spawn(flags).wait().assert_success();
}

/// The rows of `history`'s table for `function` (after its `NAME (KIND)` line), split on spaces.
fn history_rows(stdout: &str, function: &str) -> Vec<Vec<String>> {
    let mut lines = stdout
        .lines()
        .skip_while(|l| !l.starts_with(&format!("{function} (")));
    lines
        .next()
        .unwrap_or_else(|| panic!("no {function} in:\n{stdout}"));
    lines
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn runs_are_stored_once_and_both_stores_tell_the_same_history() {
    if !require_bpf() {
        return;
    }
    let Some(server) = ClickHouse::start() else {
        return;
    };
    let tmp = TempDir::new("store-history");
    let (a, b) = (tmp.join("a"), tmp.join("b"));
    record(&a, "busy", &["commit=aaa"], &["busy", "1", "200"]);
    record(&b, "busy", &["commit=bbb"], &["busy", "1", "300"]);
    let sqlite = format!("sqlite:{}", tmp.join("runs.db").display());
    let clickhouse = server.url("xtrace_test");
    for url in [&sqlite, &clickhouse] {
        for dir in [&a, &b] {
            let ran = xtrace(args!["push", dir, "--store", url]);
            ran.assert_success();
            assert!(ran.stderr.starts_with("xtrace: stored run "), "{}", ran.stderr);
        }
        // Pushed again: stored once.
        let again = xtrace(args!["push", &a, "--store", url]);
        again.assert_success();
        assert!(again.stderr.contains("was already stored"), "{}", again.stderr);
    }
    // Each capture lists where it went.
    let stored = std::fs::read_to_string(a.join("stored.txt")).expect("stored.txt");
    assert_eq!(stored.lines().count(), 2, "{stored}");
    assert!(
        stored
            .lines()
            .all(|l| l.starts_with(&sqlite) || l.starts_with(&clickhouse)),
        "{stored}"
    );

    let by_run = xtrace(args!["history", "busy", "--store", &sqlite]);
    by_run.assert_success();
    let rows = history_rows(&by_run.stdout, "busy");
    // One row per run, oldest first: RUN (date, time, id) RUNS COUNT ...
    let counts: Vec<&str> = rows.iter().map(|r| r[4].as_str()).collect();
    assert_eq!(counts, ["200", "300"], "{}", by_run.stdout);
    assert_eq!(
        xtrace(args!["history", "busy", "--store", &clickhouse]).stdout,
        by_run.stdout
    );

    let by_commit = xtrace(args!["history", "--by", "commit", "--store", &clickhouse]);
    by_commit.assert_success();
    let rows = history_rows(&by_commit.stdout, "busy");
    let groups: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str(), r[2].as_str()))
        .collect();
    assert_eq!(
        groups,
        [("aaa", "1", "200"), ("bbb", "1", "300")],
        "{}",
        by_commit.stdout
    );
    let svg = tmp.join("history.svg");
    let plotted = xtrace(args![
        "history", "--by", "commit", "--store", &sqlite, "--svg", &svg
    ]);
    assert_eq!(plotted.stdout, by_commit.stdout);
    let drawn = std::fs::read_to_string(&svg).expect("history.svg");
    assert!(drawn.contains(">busy (uprobe): p50 and p99</text>"), "{drawn}");
    // A line each for p50 and p99, a point per commit on each.
    assert_eq!(
        (
            drawn.matches("<polyline").count(),
            drawn.matches("<circle").count()
        ),
        (2, 4)
    );
    assert!(
        drawn.contains(">aaa p50 ") && drawn.contains(">bbb p99 "),
        "{drawn}"
    );
    assert!(
        by_commit.stdout.starts_with("busy (uprobe)\nCOMMIT "),
        "{}",
        by_commit.stdout
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_push_cut_short_before_its_mark_is_stored_once_when_pushed_again() {
    if !require_bpf() {
        return;
    }
    let Some(server) = ClickHouse::start() else {
        return;
    };
    let tmp = TempDir::new("store-cut");
    let dir = tmp.join("run");
    record(&dir, "busy", &["commit=ccc"], &["busy", "1", "50"]);
    let sqlite = format!("sqlite:{}", tmp.join("runs.db").display());
    for url in [sqlite, server.url("xtrace_cut")] {
        let cut = xtrace_with_env(
            args!["push", &dir, "--store", &url],
            &[("XTRACE_TEST_PUSH_CUT", "1")],
        );
        assert_eq!(cut.code, Some(1), "{}", cut.stderr);
        assert!(
            cut.stderr.contains("cut short before the runs row"),
            "{}",
            cut.stderr
        );
        // Its rows are there, unread: no run yet.
        let none = xtrace(args!["history", "busy", "--store", &url]);
        none.assert_success();
        assert_eq!(none.stdout, "", "a run without its mark was read");
        xtrace(args!["push", &dir, "--store", &url]).assert_success();
        xtrace(args!["push", &dir, "--store", &url]).assert_success();
        let history = xtrace(args!["history", "busy", "--store", &url]);
        let rows = history_rows(&history.stdout, "busy");
        assert_eq!(rows.len(), 1, "{}", history.stdout);
        assert_eq!(rows[0][3..5], ["1", "50"], "{}", history.stdout);
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn the_gate_passes_the_same_speed_and_fails_twenty_percent_slower_on_both_stores() {
    if !require_bpf() {
        return;
    }
    let Some(server) = ClickHouse::start() else {
        return;
    };
    let tmp = TempDir::new("store-gate");
    let sqlite = format!("sqlite:{}", tmp.join("runs.db").display());
    let clickhouse = server.url("xtrace_gate");
    for i in 0..3 {
        let dir = tmp.join(&format!("base{i}"));
        // Each run also labelled apart, so that its capture (and run id) differs from the others'.
        record(
            &dir,
            "busy",
            &["build=base", &format!("try={i}")],
            &["busy", "200", "100"],
        );
        for url in [&sqlite, &clickhouse] {
            xtrace(args!["push", &dir, "--store", url]).assert_success();
        }
    }
    let (same, slower) = (tmp.join("same"), tmp.join("slower"));
    record(&same, "busy", &["build=same"], &["busy", "200", "100"]);
    record(&slower, "busy", &["build=slower"], &["busy", "240", "100"]);
    for url in [&sqlite, &clickhouse] {
        let markdown = tmp.join("gate.md");
        let passed = xtrace(args![
            "gate",
            "--store",
            url,
            "--baseline",
            "build=base",
            "--candidate",
            &same
        ]);
        passed.assert_success();
        assert!(
            passed
                .stdout
                .contains("no function regressed beyond 5% of the slowest of 3 baseline runs"),
            "{}",
            passed.stdout
        );
        let failed = xtrace(args![
            "gate",
            "--store",
            url,
            "--baseline",
            "build=base",
            "--candidate",
            &slower,
            "--markdown",
            &markdown
        ]);
        assert_eq!(failed.code, Some(1), "{}\n{}", failed.stdout, failed.stderr);
        let line = failed
            .stdout
            .lines()
            .find(|l| l.starts_with("busy "))
            .expect("a row for busy");
        assert!(line.ends_with("regressed"), "{line}");
        let written = std::fs::read_to_string(&markdown).expect("the Markdown report");
        assert!(written.starts_with("## xtrace gate: "), "{written}");
        assert!(
            written.contains("| busy | 3 |") && written.contains("| regressed |"),
            "{written}"
        );
        // The candidate as stored runs, by label.
        xtrace(args!["push", &slower, "--store", url]).assert_success();
        let by_label = xtrace(args![
            "gate",
            "--store",
            url,
            "--baseline",
            "build=base",
            "--candidate",
            "build=slower"
        ]);
        assert_eq!(by_label.code, Some(1), "{}", by_label.stdout);
        let too_few = xtrace(args![
            "gate",
            "--store",
            url,
            "--baseline",
            "build=same",
            "--candidate",
            &same
        ]);
        assert_eq!(
            too_few.user_error(),
            format!("xtrace: error: the gate needs at least 3 baseline runs labelled build=same in the store; it holds 0: push more baseline runs first")
        );
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn record_stores_the_run_and_a_store_down_costs_a_warning_only() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("store-record");
    let db = tmp.join("runs.db");
    let dir = tmp.join("stored");
    let mut all = args![
        "-u",
        "busy",
        "--store",
        format!("sqlite:{}", db.display()),
        "-o",
        &dir
    ];
    all.extend(args!["--", &fixtures().spans, "busy", "1", "7"]);
    let finished = Xtrace::spawn(all).wait();
    finished.assert_success();
    assert!(
        finished
            .stderr
            .iter()
            .any(|l| l.starts_with("xtrace: stored run ")),
        "{:?}",
        finished.stderr
    );
    // summary.json carries the histogram stored: its buckets hold every call.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).expect("summary.json"))
            .expect("JSON");
    let buckets = summary["probes"][0]["histogram"].as_array().expect("a histogram");
    let calls: u64 = buckets.iter().map(|b| b[1].as_u64().expect("calls")).sum();
    assert_eq!(calls, 7, "{buckets:?}");
    let history = xtrace(args!["history", "--store", format!("sqlite:{}", db.display())]);
    assert_eq!(
        history_rows(&history.stdout, "busy")[0][4],
        "7",
        "{}",
        history.stdout
    );

    // A store that cannot be reached: the capture is written, and the warning says how to push it.
    let down = tmp.join("down");
    let finished = Xtrace::spawn(args![
        "-u",
        "busy",
        "--store=clickhouse://127.0.0.1:1/xt",
        "-o",
        &down,
        "--",
        &fixtures().spans,
        "busy",
        "1",
        "7"
    ])
    .wait();
    finished.assert_success();
    assert!(down.join("summary.json").is_file());
    let warning = finished
        .stderr
        .iter()
        .find(|l| l.starts_with("xtrace: warning: the capture was not stored: "))
        .unwrap_or_else(|| panic!("no warning in {:?}", finished.stderr));
    assert!(
        warning.ends_with(&format!(
            "send it later with `xtrace push {} --store clickhouse://127.0.0.1:1/xt`",
            down.display()
        )),
        "{warning}"
    );
}

#[test]
fn bad_store_urls_and_selectors_are_one_line() {
    let tmp = TempDir::new("store-bad");
    let dir = tmp.path();
    let cases = [
        (
            args!["push", dir, "--store", "postgres://h/db"],
            "unknown kind of store; give sqlite:PATH or clickhouse://HOST:PORT/DB",
        ),
        (
            args!["push", dir, "--store", "clickhouse://u:p@127.0.0.1:8123/db"],
            "credentials do not go in the URL",
        ),
        (
            args!["push", dir, "--store", "clickhouse://127.0.0.1/db"],
            "give the HTTP interface's host and port",
        ),
        (
            args!["history", "--store", "sqlite:x.db", "--where", "commit"],
            "is not a run selector; give LABEL=VALUE",
        ),
    ];
    for (args, expected) in cases {
        let ran = xtrace(args);
        let line = ran.user_error();
        assert!(line.contains(expected), "{line}");
    }
    // Not a capture.
    let line = xtrace(args![
        "push",
        dir,
        "--store",
        format!("sqlite:{}", tmp.join("r.db").display())
    ])
    .user_error()
    .to_string();
    assert!(
        line.ends_with(
            "cannot be stored: its summary.json cannot be read: No such file or directory (os error 2)"
        ),
        "{line}"
    );
}

#[test]
fn a_store_of_a_newer_schema_is_refused_with_both_versions() {
    let tmp = TempDir::new("store-newer");
    let db = tmp.join("runs.db");
    // A store written by a later xtrace, made with Python's own sqlite3 module.
    let script = "import sqlite3, sys\n\
                  db = sqlite3.connect(sys.argv[1])\n\
                  db.execute('CREATE TABLE schema_versions (version INTEGER NOT NULL)')\n\
                  db.execute('INSERT INTO schema_versions VALUES (1), (2), (3)')\n\
                  db.commit()\n";
    let made = Command::new("python3")
        .args(["-c", script])
        .arg(&db)
        .status()
        .expect("python3");
    assert!(made.success());
    let url = format!("sqlite:{}", db.display());
    let ran = xtrace(args!["history", "--store", &url]);
    assert_eq!(
        ran.user_error(),
        format!("xtrace: error: store `{url}` has schema version 3, newer than version 2, which this xtrace writes; use a newer xtrace with it")
    );
    // Refused, never written: it still has its one table.
    let tables = Command::new("python3")
        .args(["-c", "import sqlite3, sys\nprint([r[0] for r in sqlite3.connect(sys.argv[1]).execute(\"SELECT name FROM sqlite_master WHERE type = 'table'\")])"])
        .arg(&db)
        .output()
        .expect("python3");
    assert_eq!(String::from_utf8_lossy(&tables.stdout), "['schema_versions']\n");
}
