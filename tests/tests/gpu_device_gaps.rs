//! What the host threads were doing in the GPU's longest idle gaps (summary.json
//! `gpu_device.gpus[].longest_gaps[].host`, and summary.txt's line under the GPU's), on the real
//! kernel with the stand-in CUDA runtime, driver and CUPTI (see gpu_device.rs): gpuapp's `gap`
//! launches a kernel, then waits in cudaStreamSynchronize (the stand-in driver's
//! cuStreamSynchronize busy for 3 ms) while the GPU runs nothing, three times, and launches once
//! more, so each gap is known and so is what covered it.

use std::collections::BTreeMap;

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::fixtures,
    gpu::{cupti_args, device_slices, per_name},
    output::{us_to_ns, Outputs, Span},
    require_bpf,
    run::Xtrace,
    TempDir,
};

/// The one span named `name` for which `keep` holds.
fn find<'a>(spans: &'a [Span], name: &str, keep: impl Fn(&Span) -> bool) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name && keep(s)).collect();
    assert_eq!(found.len(), 1, "{name}: {found:?}");
    found[0]
}

fn ns(v: &serde_json::Value) -> i64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}")) as i64
}

/// Gap `gap` (summary.json) lies between two launches with a synchronization inside it, and its
/// `host` names exactly the spans that covered it, with their overlaps; returns the thread.
fn assert_gap_covered(spans: &[Span], gap: &serde_json::Value) -> u64 {
    let (start, end) = (ns(&gap["start_ns"]), ns(&gap["start_ns"]) + ns(&gap["dur_ns"]));
    let sync = find(spans, "cudaStreamSynchronize", |s| {
        start <= s.start_ns() && s.end_ns() <= end
    });
    let inner = find(spans, "cuStreamSynchronize", |s| {
        start <= s.start_ns() && s.end_ns() <= end
    });
    // The launch whose kernel ended as the gap began, and the one whose kernel began as it
    // ended: each covers the gap from one of its ends.
    let before = find(spans, "cuLaunchKernel", |s| {
        s.start_ns() < start && start < s.end_ns()
    });
    let after = find(spans, "cuLaunchKernel", |s| {
        s.start_ns() < end && end < s.end_ns()
    });
    let pid = sync.tid;
    let host: Vec<(String, u64, u64, i64)> = gap["host"]
        .as_array()
        .expect("host")
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap().to_owned(),
                a["tid"].as_u64().unwrap(),
                a["depth"].as_u64().unwrap(),
                ns(&a["overlap_ns"]),
            )
        })
        .collect();
    let mut launches = [before.end_ns() - start, end - after.start_ns()];
    launches.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(
        host,
        [
            (
                "cudaStreamSynchronize".to_owned(),
                pid,
                0,
                sync.end_ns() - sync.start_ns()
            ),
            (
                "cuStreamSynchronize".to_owned(),
                pid,
                1,
                inner.end_ns() - inner.start_ns()
            ),
            ("cuLaunchKernel".to_owned(), pid, 0, launches[0]),
            ("cuLaunchKernel".to_owned(), pid, 0, launches[1]),
        ],
        "{gap}"
    );
    assert!(sync.end_ns() - sync.start_ns() >= 3_000_000, "{sync:?}");
    pid
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn each_longest_gap_names_the_synchronization_the_host_waited_in() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("gpu-gaps");
    let out_dir = tmp.join("out");
    let [flag, lib] = cupti_args();
    let before = Attachments::snapshot();
    let app = fixtures().gpuapp.display().to_string();
    let finished = Xtrace::spawn(args![
        "--cuda",
        "-o",
        &out_dir,
        "--",
        app,
        flag,
        lib,
        "init",
        "wait-active",
        "gap",
        "3",
        "sleep",
        "300"
    ])
    .wait();
    finished.assert_success();
    before.assert_none_left();
    let out = Outputs::read(&out_dir);
    let slices = device_slices(&out);
    assert_eq!(per_name(&slices).get("vector_add"), Some(&4), "{slices:?}");
    let spans = out.spans();
    let gpu = &out.summary["gpu_device"];
    assert_eq!(gpu["host_spans_left_out_up_to_ns"], 0);
    let busy = &gpu["gpus"][0];
    let gaps = busy["longest_gaps"].as_array().expect("gaps");
    // Four kernels, three gaps: one per synchronization between them.
    assert_eq!(gaps.len(), 3, "{busy}");
    let threads: Vec<u64> = gaps.iter().map(|gap| assert_gap_covered(&spans, gap)).collect();
    let pid = threads[0];
    assert!(threads.iter().all(|&t| t == pid), "{threads:?}");
    let line = out
        .summary_txt
        .lines()
        .find(|l| l.starts_with("    during it: "))
        .unwrap_or_else(|| panic!("{}", out.summary_txt));
    assert!(
        line.starts_with("    during it: cudaStreamSynchronize ")
            && line.contains(&format!(" (tid {pid}), cuStreamSynchronize "))
            && line.ends_with(&format!(" (tid {pid})"))
            && line.matches(" (tid ").count() == 3,
        "{line}"
    );
}

/// With CPU sampling each gap also counts the process's samples taken in it, by innermost frame:
/// exactly the sample events trace.json has on the process's threads within the gap.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn with_sampling_each_gap_counts_the_samples_taken_in_it() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("gpu-gaps-sampled");
    let out_dir = tmp.join("out");
    let [flag, lib] = cupti_args();
    let app = fixtures().gpuapp.display().to_string();
    let finished = Xtrace::spawn(args![
        "--cuda",
        "-F",
        "999",
        "-o",
        &out_dir,
        "--",
        app,
        flag,
        lib,
        "init",
        "wait-active",
        "gap",
        "10",
        "sleep",
        "300"
    ])
    .wait();
    finished.assert_success();
    let out = Outputs::read(&out_dir);
    let busy = &out.summary["gpu_device"]["gpus"][0];
    let pid = busy["pid"].as_u64().unwrap();
    let gaps = busy["longest_gaps"].as_array().expect("gaps");
    assert_eq!(gaps.len(), 5, "{busy}");
    let mut sampled = 0;
    for gap in gaps {
        let (start, end) = (ns(&gap["start_ns"]), ns(&gap["start_ns"]) + ns(&gap["dur_ns"]));
        let mut in_trace: BTreeMap<String, u64> = BTreeMap::new();
        for sample in out
            .events
            .iter()
            .filter(|e| e["cat"] == "sample" && e["pid"] == pid)
        {
            let at = us_to_ns(sample["ts"].as_f64().unwrap());
            if start <= at && at < end {
                *in_trace
                    .entry(sample["name"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
        }
        let samples = &gap["samples"];
        let count = samples["count"].as_u64().unwrap();
        assert_eq!(count, in_trace.values().sum::<u64>(), "{gap}");
        let hot: BTreeMap<String, u64> = samples["hot_frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["frame"].as_str().unwrap().to_owned(),
                    f["samples"].as_u64().unwrap(),
                )
            })
            .collect();
        // At most five frames listed, the most sampled.
        let mut expected: Vec<(String, u64)> = in_trace.into_iter().collect();
        expected.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        expected.truncate(5);
        assert_eq!(hot, expected.into_iter().collect::<BTreeMap<_, _>>(), "{gap}");
        sampled += count;
    }
    // Five gaps of at least 3 ms each, sampled at 999 Hz.
    assert!(sampled > 0, "{busy}");
    assert!(
        out.summary_txt.contains("    sampled in it: ") || gaps[0]["samples"]["count"] == 0,
        "{}",
        out.summary_txt
    );
}
