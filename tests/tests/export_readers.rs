//! The exports read back by the tools people open them with: Go's `go tool pprof` (Debian's
//! golang-go) for profile.pb.gz, and Valgrind's `callgrind_annotate` (the format KCachegrind
//! reads) for `--format callgrind`. `cargo xtask setup` installs both; no root needed.

use std::process::Command;

use xtrace_tests::{
    args,
    captures::{data, profile_totals, xtrace},
    TempDir,
};

/// A recorded capture with nested spans and CPU samples.
const WORKLOAD: &str = "workload-1";

/// Runs `program` with `args` to success; its stdout.
fn run(program: &str, args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(program)
        .args(args)
        // go keeps a cache under $HOME; the test must not depend on whose home that is.
        .env("HOME", std::env::temp_dir())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (`cargo xtask setup` installs it)"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// A number as callgrind_annotate prints it (`626,046,025`).
fn number(text: &str) -> u64 {
    text.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("a number: {text:?}"))
}

/// Whether a word of callgrind_annotate's output is a cost (not a percentage or a name).
fn is_count(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_digit()) && word.chars().all(|c| c.is_ascii_digit() || c == ',')
}

#[test]
fn go_tool_pprof_reads_the_profile_with_the_capture_totals() {
    let tmp = TempDir::new("go-pprof");
    let file = tmp.join("profile.pb.gz");
    let ran = xtrace(args!["report", data(WORKLOAD), "--format", "pprof", "-o", &file]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let raw = run(
        "go",
        &[
            "tool".as_ref(),
            "pprof".as_ref(),
            "-raw".as_ref(),
            file.as_os_str(),
        ],
    );
    // `-raw` lists the sample types, then one line per sample: its values, ':', its locations.
    let types = raw
        .lines()
        .skip_while(|l| *l != "Samples:")
        .nth(1)
        .expect("a sample type line");
    assert_eq!(
        types.split_whitespace().collect::<Vec<_>>(),
        [
            "samples/count",
            "cpu/nanoseconds[dflt]",
            "spans/count",
            "span_time/nanoseconds"
        ]
    );
    let mut totals = [0u64; 4];
    let mut rows = 0;
    for line in raw.lines().skip_while(|l| *l != "Samples:").skip(2) {
        let Some((values, locations)) = line.split_once(':') else {
            break;
        };
        let values: Vec<u64> = values.split_whitespace().map(number).collect();
        assert_eq!(values.len(), 4, "{line:?}");
        assert!(!locations.trim().is_empty(), "every sample has a stack: {line:?}");
        for (t, v) in totals.iter_mut().zip(values) {
            *t += v;
        }
        rows += 1;
    }
    assert!(rows > 0, "{raw}");
    assert_eq!(totals, profile_totals(WORKLOAD));
    // `-top` names the hottest function by self CPU time as the capture's samples do.
    let top = run(
        "go",
        &[
            "tool".as_ref(),
            "pprof".as_ref(),
            "-top".as_ref(),
            file.as_os_str(),
        ],
    );
    let first = top
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .nth(1)
        .expect("a first row");
    assert!(first.trim_end().ends_with(" spin_us"), "{top}");
}

#[test]
fn callgrind_annotate_reads_the_callgrind_output_with_the_capture_totals() {
    let tmp = TempDir::new("callgrind-annotate");
    let file = tmp.join("callgrind.out");
    let ran = xtrace(args!["report", data(WORKLOAD), "--format", "callgrind"]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    std::fs::write(&file, &ran.stdout).expect("writing the callgrind file");
    let text = run(
        "callgrind_annotate",
        &["--threshold=100".as_ref(), file.as_os_str()],
    );
    assert!(text.contains("Events recorded:  Span_ns Samples"), "{text}");
    let [samples, _, _, outer_ns] = profile_totals(WORKLOAD);
    let totals = text
        .lines()
        .find(|l| l.ends_with("PROGRAM TOTALS"))
        .expect("a PROGRAM TOTALS line");
    let numbers: Vec<u64> = totals
        .split_whitespace()
        .filter(|w| is_count(w))
        .map(number)
        .collect();
    assert_eq!(numbers, [outer_ns, samples], "{totals}");
    // Every function's self cost, listed at a 100% threshold, adds up to the totals.
    let mut sums = [0u64; 2];
    for line in text.lines().filter(|l| l.contains("???:")) {
        let costs: Vec<u64> = line
            .split_whitespace()
            .filter(|w| is_count(w))
            .map(number)
            .collect();
        assert_eq!(costs.len(), 2, "{line:?}");
        sums[0] += costs[0];
        sums[1] += costs[1];
    }
    assert_eq!(sums, [outer_ns, samples], "{text}");
    // Inclusive costs come from the edges into a function: an outermost span's function, also
    // reached by sampled edges (thread_main → train_step), has all its spans' time.
    let inclusive = run(
        "callgrind_annotate",
        &[
            "--inclusive=yes".as_ref(),
            "--threshold=100".as_ref(),
            file.as_os_str(),
        ],
    );
    let report = xtrace(args!["report", data(WORKLOAD), "--format", "json"]);
    let report: serde_json::Value = serde_json::from_str(&report.stdout).unwrap();
    let total_of = |name: &str| {
        report["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["total_ns"]
            .as_u64()
            .unwrap()
    };
    let inclusive_of = |name: &str| -> u64 {
        let line = inclusive
            .lines()
            .find(|l| l.ends_with(&format!("???:{name}")))
            .unwrap_or_else(|| panic!("no {name} in {inclusive}"));
        number(line.split_whitespace().find(|w| is_count(w)).unwrap())
    };
    for name in ["train_step", "load_batch", "forward"] {
        assert_eq!(inclusive_of(name), total_of(name), "{name}: {inclusive}");
    }
    assert_eq!(inclusive_of("workload"), outer_ns, "{inclusive}");
}

/// A Python frame (`qualname (file.py:LINE)`) is, to pprof, function `qualname` of `file.py` at
/// LINE: `-top -lines` shows it so, beside native frames shown by name alone.
#[test]
fn go_tool_pprof_shows_python_frames_at_their_file_and_line() {
    let tmp = TempDir::new("go-pprof-python");
    let capture = tmp.join("capture");
    std::fs::create_dir(&capture).unwrap();
    for file in ["summary.json", "trace.json"] {
        std::fs::copy(data(WORKLOAD).join(file), capture.join(file)).unwrap();
    }
    std::fs::write(
        capture.join("stacks.folded"),
        "python3;<module> (job.py:1);train (job.py:40);Trainer.step (job.py:88);PyNumber_Add 7\n\
         python3;<module> (job.py:1);train (job.py:40);Trainer.step (job.py:88) 3\n",
    )
    .unwrap();
    let file = tmp.join("profile.pb.gz");
    let ran = xtrace(args!["report", &capture, "--format", "pprof", "-o", &file]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let top = run(
        "go",
        &[
            "tool".as_ref(),
            "pprof".as_ref(),
            "-sample_index=samples".as_ref(),
            "-top".as_ref(),
            "-lines".as_ref(),
            file.as_os_str(),
        ],
    );
    // flat, flat%, sum%, cum, cum%, then the name: by flat samples, then by name.
    let rows: Vec<(u64, u64, String)> = top
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let name = words.get(5..)?.join(" ");
            Some((words[0].parse().ok()?, words[3].parse().ok()?, name))
        })
        .filter(|(_, _, name)| name.contains("job.py") || name == "PyNumber_Add")
        .collect();
    assert_eq!(
        rows,
        [
            (7, 7, "PyNumber_Add".to_string()),
            (3, 10, "Trainer.step job.py:88".to_string()),
            (0, 10, "<module> job.py:1".to_string()),
            (0, 10, "train job.py:40".to_string()),
        ],
        "{top}"
    );
}
