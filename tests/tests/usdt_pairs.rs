//! USDT probes that pair as real servers name them, on the real kernel: `query__start`/
//! `query__done` and `stmt_start`/`stmt_done` (PostgreSQL's and MySQL's convention) pair by
//! themselves; `-U 'PROVIDER:BEGIN..END1|END2'` pairs any names, with alternative ends. Fixture
//! `usdt_pairs run` (tests/fixtures/usdt_pairs.c) fires each a known number of times, leaves
//! begins open at the stop and fires ends with no begin on their thread. Malformed pairings are
//! refused with one line naming the accepted form, exit 2, nothing attached.

use std::collections::BTreeMap;

use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{error_on_spinner, run_error, Xtrace},
    TempDir,
};

/// Traces `usdt_pairs run` by `--pid` with `-U` each of `specs`, stopped by SIGINT after it fired
/// (while 2 txn begins are open).
fn trace_pairs(specs: &[&str]) -> (Outputs, TempDir) {
    let mut fixture = Fixture::spawn(&fixtures().usdt_pairs, &["run"]);
    fixture.wait_ready();
    let tmp = TempDir::new("usdt-pairs");
    let out_dir = tmp.join("out");
    let mut all = args!["-p", fixture.pid().to_string(), "-o", &out_dir];
    for spec in specs {
        all.extend(args!["-U", spec]);
    }
    let mut xtrace = Xtrace::spawn(all);
    xtrace.wait_attached();
    fixture.send("go");
    assert_eq!(fixture.next_line(), "fired");
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    fixture.go();
    assert!(fixture.wait().success(), "usdt_pairs fixture failed");
    (Outputs::read(&out_dir), tmp)
}

/// A pair's `open` and `unmatched_ends` in summary.json.
fn unpaired(out: &Outputs, pair: &str) -> (u64, u64) {
    let p = out.probe(pair);
    assert_eq!(p["kind"], "usdt_span", "{pair}");
    (p["open"].as_u64().unwrap(), p["unmatched_ends"].as_u64().unwrap())
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn start_done_pair_and_a_named_pairing_takes_either_end() {
    if !require_bpf() {
        return;
    }
    let (out, _tmp) = trace_pairs(&["xtpair:txn__start..txn__commit|txn__abort", "xtpair:*"]);
    // 7 commits and 3 aborts end 10 txn spans, each saying which end closed it, in order.
    let txns = out.spans_named("xtpair:txn");
    let ends: Vec<(i64, &str)> = txns
        .iter()
        .map(|s| (s.args["arg0"].as_i64().unwrap(), s.args["end"].as_str().unwrap()))
        .collect();
    let want: Vec<(i64, &str)> = (0..10)
        .map(|i| {
            (
                i,
                if [2, 5, 8].contains(&i) {
                    "txn__abort"
                } else {
                    "txn__commit"
                },
            )
        })
        .collect();
    assert_eq!(ends, want);
    assert!(txns
        .iter()
        .all(|s| s.depth == 0 && s.args["end_arg0"] == s.args["arg0"]));
    // query__start/query__done pair per thread: query 100 nested in query 4; the other thread's
    // query__done closes nothing of the main thread's.
    let queries = out.spans_named("xtpair:query");
    let ids: Vec<(i64, u64)> = queries
        .iter()
        .map(|s| (s.args["arg0"].as_i64().unwrap(), s.depth))
        .collect();
    let mut want: Vec<(i64, u64)> = (0..10).map(|i| (i, 0)).collect();
    want.insert(4, (100, 1));
    assert_eq!(ids, want);
    assert!(
        queries.iter().all(|s| s.args.get("end").is_none()),
        "one end: not recorded"
    );
    let threads: std::collections::BTreeSet<u64> = queries.iter().map(|s| s.tid).collect();
    assert_eq!(threads.len(), 1, "all on the main thread");
    assert_eq!(out.spans_named("xtpair:stmt").len(), 3, "_start/_done");
    assert_eq!(out.spans().len(), 24, "no other span");
    assert!(
        out.events.iter().all(|e| e["ph"] != "i"),
        "no instant: every probe paired"
    );

    let counts: BTreeMap<&str, u64> = [
        "xtpair:txn__start",
        "xtpair:txn__commit",
        "xtpair:txn__abort",
        "xtpair:query__start",
        "xtpair:query__done",
        "xtpair:stmt_start",
        "xtpair:stmt_done",
        "xtpair:txn",
        "xtpair:query",
        "xtpair:stmt",
    ]
    .into_iter()
    .map(|name| (name, out.probe_count(name)))
    .collect();
    let want = BTreeMap::from([
        ("xtpair:txn__start", 12),
        ("xtpair:txn__commit", 8),
        ("xtpair:txn__abort", 3),
        ("xtpair:query__start", 11),
        ("xtpair:query__done", 12),
        ("xtpair:stmt_start", 3),
        ("xtpair:stmt_done", 3),
        ("xtpair:txn", 10),
        ("xtpair:query", 11),
        ("xtpair:stmt", 3),
    ]);
    assert_eq!(counts, want);
    assert_eq!(
        unpaired(&out, "xtpair:txn"),
        (2, 1),
        "open at the stop, commit without begin"
    );
    assert_eq!(
        unpaired(&out, "xtpair:query"),
        (0, 1),
        "the other thread's query__done"
    );
    assert_eq!(unpaired(&out, "xtpair:stmt"), (0, 0));
    assert_eq!(out.summary["usdt_unpaired"], 4);
    assert!(
        out.summary_txt
            .contains("xtpair:txn: 2 still open at the stop, 1 end(s) without an open begin\n"),
        "{}",
        out.summary_txt
    );
    assert_eq!(out.lost_events(), 0);
}

/// The accepted form, which every pairing error ends with.
const FORM: &str = "a pairing is [TARGET:]PROVIDER:BEGIN..END[|END...], e.g. \
                    -U 'postgresql:transaction__start..transaction__commit|transaction__abort'";

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn malformed_pairings_are_refused_with_the_form() {
    if !require_bpf() {
        return;
    }
    for (spec, reason) in [
        ("postgresql:transaction__start..", "the END after `..` is empty"),
        ("xtpair:..txn__commit", "the BEGIN before `..` is empty"),
        ("xtpair:txn__start..txn__commit|", "an END between `|` is empty"),
    ] {
        let line = error_on_spinner(args!["-U", spec]);
        assert_eq!(line, format!("xtrace: error: -U '{spec}': {reason}; {FORM}"));
    }
}

/// A pairing whose BEGIN or an END matches no probe in the target is refused before anything is
/// attached, naming the name.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_pairing_name_that_matches_no_probe_is_refused() {
    if !require_bpf() {
        return;
    }
    let target = fixtures().usdt_pairs.display().to_string();
    let mut fixture = Fixture::spawn(&fixtures().usdt_pairs, &["run"]);
    fixture.wait_ready();
    let pid = fixture.pid().to_string();
    for (pairing, missing) in [
        ("xtpair:txn__start..txn__commit|txn__rollback", "txn__rollback"),
        ("xtpair:txn__begin..txn__commit", "txn__begin"),
    ] {
        let spec = format!("{target}:{pairing}");
        let line = run_error(args!["-p", &pid, "-U", &spec]);
        let head = format!(
            "xtrace: error: -U '{spec}': `{missing}` matches no USDT probe of provider xtpair in {target}"
        );
        assert!(line.starts_with(&head), "{line}");
        assert!(line.ends_with(FORM), "{line}");
    }
    fixture.go();
    assert!(fixture.wait().success());
}
