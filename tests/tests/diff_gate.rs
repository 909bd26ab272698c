//! `xtrace diff BASE NEW` as a CI gate (no root needed): exit 1 only for a regression beyond the
//! threshold that the Mann–Whitney U test supports, 0 for noise, 2 for bad input.

use xtrace_tests::{
    args,
    captures::{data, golden, noisy_durations, write_capture, xtrace},
    TempDir,
};

/// BASE and NEW with the same probes; NEW's `work` durations scaled by `slowdown`, `steady`
/// unchanged, each from its own seed.
fn pair(tmp: &TempDir, slowdown: f64) -> (std::path::PathBuf, std::path::PathBuf) {
    let (base, new) = (tmp.join("base"), tmp.join("new"));
    write_capture(
        &base,
        Some(1),
        &[
            ("work", noisy_durations(1, 300, 200_000.0, 1.0)),
            ("steady", noisy_durations(2, 300, 50_000.0, 1.0)),
        ],
    );
    write_capture(
        &new,
        Some(1),
        &[
            ("work", noisy_durations(3, 300, 200_000.0, slowdown)),
            ("steady", noisy_durations(4, 300, 50_000.0, 1.0)),
        ],
    );
    (base, new)
}

#[test]
fn a_20_percent_slowdown_fails_the_gate() {
    let tmp = TempDir::new("diff-20");
    let (base, new) = pair(&tmp, 1.20);
    let ran = xtrace(args!["diff", &base, &new, "-o", tmp.join("diff.svg")]);
    assert_eq!(ran.code, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    let work = ran.stdout.lines().find(|l| l.starts_with("work ")).unwrap();
    assert!(work.ends_with("REGRESSED"), "{work}");
    assert!(work.contains("<0.001"), "{work}");
    let steady = ran.stdout.lines().find(|l| l.starts_with("steady ")).unwrap();
    assert!(!steady.contains("REGRESSED"), "{steady}");
    assert!(
        ran.stdout.contains("1 probe regressed beyond 5.0%"),
        "{}",
        ran.stdout
    );
    // No stacks on either side: no flamegraph.
    assert!(!tmp.join("diff.svg").exists());
    // A higher threshold lets it pass.
    let ran = xtrace(args!["diff", &base, &new, "--threshold", "25%"]);
    assert_eq!(ran.code, Some(0), "{}", ran.stdout);
    // So does a minimum count above the spans recorded.
    let ran = xtrace(args!["diff", &base, &new, "--min-count", "301"]);
    assert_eq!(ran.code, Some(0), "{}", ran.stdout);
    assert!(ran.stdout.contains("too few spans"), "{}", ran.stdout);
}

#[test]
fn a_2_percent_slowdown_passes_the_gate() {
    let tmp = TempDir::new("diff-2");
    let (base, new) = pair(&tmp, 1.02);
    let ran = xtrace(args!["diff", &base, &new]);
    assert_eq!(ran.code, Some(0), "{}\n{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("no probe regressed beyond 5.0%"),
        "{}",
        ran.stdout
    );
}

#[test]
fn two_runs_of_the_same_noisy_workload_pass_the_gate() {
    // Synthetic: the same distribution (with 5% of spans 3-8x longer) from two seeds.
    let tmp = TempDir::new("diff-same");
    let (base, new) = pair(&tmp, 1.0);
    let ran = xtrace(args!["diff", &base, &new]);
    assert_eq!(ran.code, Some(0), "{}\n{}", ran.stdout, ran.stderr);
    // Recorded: two 0.3 s captures of the demo workload on a busy 2-CPU machine, whose means
    // differ by up to 30% from scheduling noise alone.
    let svg = tmp.join("recorded.svg");
    let ran = xtrace(args!["diff", data("workload-1"), data("workload-2"), "-o", &svg]);
    assert_eq!(ran.code, Some(0), "{}\n{}", ran.stdout, ran.stderr);
    golden("workload.diff.txt", &ran.stdout);
    // Both have CPU samples: a differential flamegraph of them.
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("<svg") && text.contains("spin_us"),
        "an SVG with the sampled frames"
    );
    assert_eq!(ran.stderr.trim(), format!("xtrace: wrote {}", svg.display()));
    // A capture against itself: nothing moves.
    let ran = xtrace(args!["diff", data("workload-1"), data("workload-1"), "-o", &svg]);
    assert_eq!(ran.code, Some(0), "{}", ran.stdout);
    assert_eq!(ran.stdout.matches("no change").count(), 6, "{}", ran.stdout);
}

/// A probe recorded in one capture only: its row says so, with `-` for the durations of the side
/// that has none.
#[test]
fn a_probe_in_one_capture_only_has_no_durations_on_the_other() {
    let tmp = TempDir::new("diff-only");
    let (base, new) = (tmp.join("base"), tmp.join("new"));
    write_capture(&base, Some(1), &[("work", vec![1_000; 30])]);
    write_capture(
        &new,
        Some(1),
        &[("work", vec![1_000; 30]), ("extra", vec![2_000; 30])],
    );
    let ran = xtrace(args!["diff", &base, &new]);
    assert_eq!(ran.code, Some(0), "{}\n{}", ran.stdout, ran.stderr);
    let extra = ran.stdout.lines().find(|l| l.starts_with("extra ")).unwrap();
    let cells: Vec<&str> = extra.split_whitespace().collect();
    assert_eq!(
        cells,
        ["extra", "0", "30", "-", "2.0µs", "-", "-", "2.0µs", "-", "-", "only", "in", "NEW"]
    );
}

#[test]
fn bad_inputs_exit_2() {
    let tmp = TempDir::new("diff-bad");
    let (base, new) = pair(&tmp, 1.0);
    write_capture(&tmp.join("v2"), Some(2), &[("work", vec![1_000; 30])]);
    let ran = xtrace(args!["diff", &base, tmp.join("v2")]);
    let line = ran.user_error();
    assert!(
        line.contains("v2: capture format version 2 is newer than version 1"),
        "{line}"
    );
    let ran = xtrace(args!["diff", &base, tmp.path()]);
    assert!(ran
        .user_error()
        .contains("not an xtrace capture (no summary.json)"));
    let empty = tmp.join("empty");
    write_capture(&empty, Some(1), &[]);
    let ran = xtrace(args!["diff", &empty, &new]);
    assert!(ran.user_error().contains("the capture is empty"));
    // NEW recorded with --min-duration: its trace.json holds only the calls that lasted 100 µs.
    let filtered = tmp.join("filtered");
    write_capture(
        &filtered,
        Some(1),
        &[("work", noisy_durations(5, 300, 200_000.0, 1.0))],
    );
    let path = filtered.join("summary.json");
    let text = std::fs::read_to_string(&path).expect("summary.json");
    let mut summary: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    summary["min_duration_ns"] = 100_000.into();
    std::fs::write(&path, summary.to_string()).expect("summary.json written");
    let ran = xtrace(args!["diff", &base, &filtered]);
    assert_eq!(
        ran.user_error(),
        format!(
            "xtrace: error: the captures were recorded with different --min-duration ({}: none, {}: \
             100.0µs), so their trace.json files hold different shares of the calls and their \
             durations cannot be compared; record both with the same --min-duration, or without",
            base.display(),
            filtered.display()
        )
    );
    let ran = xtrace(args!["diff", &base, &new, "--threshold", "lots"]);
    assert!(ran
        .user_error()
        .contains("`lots` is not a percentage such as 5% or 2.5"));
}
