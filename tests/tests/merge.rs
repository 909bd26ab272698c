//! `xtrace merge`: captures of the ranks of a job, as one capture on one clock. Two real captures
//! of fixture `spans exit 0` (work() 3 times each) under torchrun's variables, the second's clock
//! pairs then moved 1 s ahead, as a host whose monotonic clock runs 1 s behind its wall clock
//! compared with the first's would write them: every span of it lands exactly its shift later,
//! its process apart and named after its host and rank. A capture whose trace is Perfetto's
//! merges into the same trace.json; without `XTRACE_TRACE_FORMAT` the merged trace is Perfetto's.

use serde_json::Value;

use xtrace_tests::{
    args,
    fixtures::fixtures,
    output::Outputs,
    perfetto::{decode, slice_counts, trace_events},
    require_bpf,
    run::run_error,
    run::Xtrace,
    TempDir,
};

/// Records `spans exit 0` as rank `rank` of 2 into `dir`.
fn record_rank(dir: &std::path::Path, rank: &str) {
    let flags = args!["-u", "work", "-o", dir, "--", &fixtures().spans, "exit", "0"];
    Xtrace::spawn_with_env(flags, &[("RANK", rank), ("WORLD_SIZE", "2")])
        .wait()
        .assert_success();
}

/// `xtrace view` of a merged capture, whose summary lists no probes, shows the figures of its
/// spans: the 3 `work` calls of each of the two ranks.
fn view_shows_the_merged_spans(merged_dir: &std::path::Path) {
    let rows = xtrace_tests::live::served_probe_rows(merged_dir);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["name"], "work");
    assert_eq!(rows[0]["all"]["count"], 6, "3 calls of each rank");
}

/// realtime minus monotonic, at `at` (start or end), in ns.
fn offset(summary: &Value, at: &str) -> i128 {
    let c = &summary["clock"][at];
    i128::from(c["realtime_ns"].as_u64().unwrap()) - i128::from(c["monotonic_ns"].as_u64().unwrap())
}

/// The mean of a capture's two offsets.
fn mean_offset(summary: &Value) -> i128 {
    (offset(summary, "start") + offset(summary, "end")) / 2
}

/// `work` spans as (pid, ts in ns).
fn work(out: &Outputs) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = out
        .spans_named("work")
        .iter()
        .map(|s| (s.pid, (s.ts * 1000.0).round() as u64))
        .collect();
    spans.sort_unstable();
    spans
}

/// How far rank 1 may be off rank 0 (the reference, 0): its drift, half the slowest clock-pair
/// reads of both, and both wall clocks' error estimates where the kernel keeps them.
fn assert_uncertainty(parts: &[Value], (sa, sb): (&Value, &Value)) {
    let worst = |summary: &Value, key: &str| -> Option<u64> {
        let at = |at: &str| summary["clock"][at][key].as_u64();
        Some(at("start")?.max(at("end")?))
    };
    let reads = worst(sa, "read_ns").unwrap() + worst(sb, "read_ns").unwrap();
    assert!(reads > 0 && reads < 2_000_000, "clock pairs read in {reads} ns");
    let errors = worst(sa, "error_ns").unwrap_or(0) + worst(sb, "error_ns").unwrap_or(0);
    let drift = parts[1]["clock_drift_ns"].as_u64().unwrap();
    assert_eq!(parts[1]["uncertainty_ns"], drift + reads.div_ceil(2) + errors);
    assert_eq!(parts[0]["uncertainty_ns"], 0);
    assert_eq!(
        (&parts[0]["reference"], &parts[1]["reference"]),
        (&true.into(), &false.into())
    );
    let known = worst(sa, "error_ns").is_some() && worst(sb, "error_ns").is_some();
    assert_eq!(parts[1]["wall_clock_error_known"], known);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn merged_captures_lie_on_one_clock_shifted_by_their_clock_pairs() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("merge");
    let (a, b) = (tmp.join("rank0"), tmp.join("rank1"));
    record_rank(&a, "0");
    record_rank(&b, "1");
    // Rank 1's host: its wall clock 1 s further ahead of its monotonic clock.
    let path = b.join("summary.json");
    let mut summary: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for at in ["start", "end"] {
        let realtime = &mut summary["clock"][at]["realtime_ns"];
        *realtime = (realtime.as_u64().unwrap() + 1_000_000_000).into();
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&summary).unwrap()).unwrap();
    let (before_a, before_b) = (Outputs::read(&a), Outputs::read(&b));

    let merged_dir = tmp.join("merged");
    let finished = Xtrace::spawn(args!["merge", &a, &b, "-o", &merged_dir]).wait();
    finished.assert_success();
    assert_eq!(finished.stderr.len(), 1, "{:?}", finished.stderr);
    assert!(
        finished.stderr[0].starts_with("xtrace: merged 2 captures into "),
        "{:?}",
        finished.stderr
    );
    let merged = Outputs::read(&merged_dir);
    view_shows_the_merged_spans(&merged_dir);

    // Rank 0's clock is the reference (the smaller offset); rank 1 is shifted by the difference.
    let (offset_a, offset_b) = (mean_offset(&before_a.summary), mean_offset(&before_b.summary));
    assert!(offset_b > offset_a);
    let parts = merged.summary["merged"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0]["shift_ns"], 0);
    let shift_b = u64::try_from(offset_b - offset_a).unwrap();
    assert_eq!(parts[1]["shift_ns"], shift_b);
    assert!((999_000_000..1_001_000_000).contains(&shift_b), "{shift_b}");
    assert_eq!(parts[1]["ranks"], serde_json::json!([1]));
    assert_uncertainty(parts, (&before_a.summary, &before_b.summary));

    // Every span is there, each at its own time plus its capture's shift, its pid moved apart.
    let stride = 1u64 << 22;
    let expected: Vec<(u64, u64)> = work(&before_a)
        .into_iter()
        .map(|(pid, ts)| (pid + stride, ts))
        .chain(
            work(&before_b)
                .into_iter()
                .map(|(pid, ts)| (pid + 2 * stride, ts + shift_b)),
        )
        .collect();
    let got = work(&merged);
    assert_eq!(got.len(), 6);
    for ((pid, ts), (want_pid, want_ts)) in got.iter().zip(&expected) {
        assert_eq!(pid, want_pid);
        // trace.json keeps ns as three decimals of µs.
        assert!(ts.abs_diff(*want_ts) <= 1, "{ts} vs {want_ts}");
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let names: Vec<&str> = merged
        .metadata("process_name")
        .iter()
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    let pid_b = before_b.summary["targets"][0]["pid"].as_u64().unwrap();
    assert!(
        names.contains(&format!("{}: spans (rank 1 of 2)", host.trim()).as_str()),
        "{names:?}"
    );
    assert_eq!(merged.summary["targets"][1]["pid"], pid_b + 2 * stride);

    // The merged capture reads as any capture.
    let report = Xtrace::spawn(args!["report", &merged_dir]).wait();
    report.assert_success();
    assert!(
        report.stdout.starts_with("6 spans from 1 probe"),
        "{}",
        report.stdout
    );

    // Rank 1 as a Perfetto capture (its trace converted, trace.json gone): the same merge.
    Xtrace::spawn(args!["convert", &b]).wait().assert_success();
    let b_perfetto = tmp.join("rank1-perfetto");
    std::fs::create_dir(&b_perfetto).unwrap();
    for file in ["summary.json", "trace.perfetto-trace"] {
        std::fs::rename(b.join(file), b_perfetto.join(file)).unwrap();
    }
    let again = tmp.join("merged-again");
    Xtrace::spawn(args!["merge", &a, &b_perfetto, "-o", &again])
        .wait()
        .assert_success();
    assert!(
        trace_events(&again.join("trace.json")) == trace_events(&merged_dir.join("trace.json")),
        "the merged events differ"
    );

    // Without XTRACE_TRACE_FORMAT, merge writes Perfetto's format, as recording does: the same
    // six spans, read back by Perfetto's own definitions and by `report`.
    let perfetto = tmp.join("merged-perfetto");
    Xtrace::spawn_default_format(args!["merge", &a, &b_perfetto, "-o", &perfetto])
        .wait()
        .assert_success();
    assert!(!perfetto.join("trace.json").exists());
    let decoded = decode(&perfetto.join("trace.perfetto-trace"));
    assert_eq!(slice_counts(&decoded).get("work"), Some(&6), "{decoded}");
    let report = Xtrace::spawn(args!["report", &perfetto]).wait();
    report.assert_success();
    assert!(
        report.stdout.starts_with("6 spans from 1 probe"),
        "{}",
        report.stdout
    );
}

#[test]
fn a_capture_without_clock_pairs_or_the_output_among_the_inputs_is_refused() {
    let tmp = TempDir::new("merge-bad");
    let dir = tmp.join("old");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("summary.json"), r#"{"duration_ns": 5, "probes": []}"#).unwrap();
    std::fs::write(dir.join("trace.json"), r#"{"traceEvents": []}"#).unwrap();
    let line = run_error(args!["merge", &dir, &dir, "-o", tmp.join("out")]);
    assert!(
        line.ends_with(
            "summary.json: cannot be merged: it holds no clock pairs (clock.start and clock.end), which \
             place a capture on a common clock (an older xtrace wrote it); record it again"
        ),
        "{line}"
    );
    let line = run_error(args!["merge", &dir, tmp.join("other"), "-o", &dir]);
    assert!(
        line.ends_with("it is one of the captures merged; give another directory with -o"),
        "{line}"
    );
    let line = run_error(args!["merge", &dir, "-o", tmp.join("out")]);
    assert!(
        line.contains("2 values required") || line.contains("DIR"),
        "{line}"
    );
    assert!(!tmp.join("out").exists());
}
