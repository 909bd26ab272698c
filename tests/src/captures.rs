//! Captures without BPF, for the analysis subcommands (`xtrace report`, `xtrace diff`): the
//! recorded fixture captures in `tests/data/`, synthetic captures written with deterministic
//! pseudo-random durations, and running xtrace to completion with its exit status and output.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Command,
};

use crate::xtrace_bin;

/// `tests/data/NAME`.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data").join(name)
}

/// `tests/data/NAME/FILE` parsed as JSON.
pub fn capture_json(name: &str, file: &str) -> serde_json::Value {
    let path = data(name).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Of capture NAME's trace.json: the time in outermost spans (ns) and the number of spans, from
/// its own `depth`.
pub fn trace_totals(name: &str) -> (u64, u64) {
    let trace = capture_json(name, "trace.json");
    let spans: Vec<&serde_json::Value> = trace["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    let outer: u64 = spans
        .iter()
        .filter(|e| e["args"]["depth"] == 0)
        .map(|e| (e["dur"].as_f64().expect("dur") * 1000.0).round() as u64)
        .sum();
    (outer, spans.len() as u64)
}

/// What capture NAME's profile.pb.gz must total, per sample type: samples, CPU ns (samples x the
/// sampling period), spans, and the time in outermost spans.
pub fn profile_totals(name: &str) -> [u64; 4] {
    let summary = capture_json(name, "summary.json");
    let samples = summary["samples"].as_u64().expect("samples");
    let hz = summary["sample_frequency_hz"].as_u64().expect("frequency");
    let (outer_ns, spans) = trace_totals(name);
    [samples, samples * (1_000_000_000 / hz), spans, outer_ns]
}

/// How an analysis command ended.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Checks that it exited 0, showing what it printed if not.
    pub fn assert_success(&self) {
        assert_eq!(
            self.code,
            Some(0),
            "stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
    }

    /// The one stderr line of a user error (exit 2), checked.
    pub fn user_error(&self) -> &str {
        assert_eq!(self.code, Some(2), "exit status; stderr:\n{}", self.stderr);
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "exactly one stderr line, got:\n{}", self.stderr);
        assert!(lines[0].starts_with("xtrace: error: "), "{}", lines[0]);
        lines[0]
    }
}

/// Runs xtrace with `args` to completion (no BPF, no root).
pub fn xtrace(args: Vec<OsString>) -> Ran {
    xtrace_in(Path::new("."), args)
}

/// Like [`xtrace`], in the directory `cwd`.
pub fn xtrace_in(cwd: &Path, args: Vec<OsString>) -> Ran {
    xtrace_in_with_env(cwd, args, &[])
}

/// Like [`xtrace`], with `env` set.
pub fn xtrace_with_env(args: Vec<OsString>, env: &[(&str, &str)]) -> Ran {
    xtrace_in_with_env(Path::new("."), args, env)
}

fn xtrace_in_with_env(cwd: &Path, args: Vec<OsString>, env: &[(&str, &str)]) -> Ran {
    let output = Command::new(xtrace_bin())
        .current_dir(cwd)
        .args(&args)
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| panic!("running xtrace {args:?}: {e}"));
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A 64-bit linear congruential generator (Knuth's MMIX constants): the same numbers on every run.
pub struct Lcg(pub u64);

impl Lcg {
    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Writes a capture into `dir`: one thread, the spans of each probe back to back (durations in
/// ns), a summary.json whose `format_version` is `version` (left out when None).
pub fn write_capture(dir: &Path, version: Option<u64>, probes: &[(&str, Vec<u64>)]) {
    std::fs::create_dir_all(dir).unwrap();
    let mut events = Vec::new();
    let mut ts = 1_000_000_000u64;
    let mut summaries = Vec::new();
    for (name, durations) in probes {
        for d in durations {
            events.push(format!(
                "{{\"ph\":\"X\",\"name\":\"{name}\",\"cat\":\"uprobe\",\"ts\":{}.{:03},\"dur\":{}.{:03},\"pid\":10,\"tid\":10,\"args\":{{\"depth\":0}}}}",
                ts / 1000,
                ts % 1000,
                d / 1000,
                d % 1000
            ));
            ts += d + 1000;
        }
        let total: u64 = durations.iter().sum();
        summaries.push(format!(
            "{{\"name\":\"{name}\",\"kind\":\"uprobe\",\"target\":\"app\",\"count\":{},\"total_ns\":{total}}}",
            durations.len()
        ));
    }
    events.push(r#"{"ph":"M","name":"process_name","pid":10,"tid":10,"args":{"name":"app"}}"#.into());
    events.push(r#"{"ph":"M","name":"thread_name","pid":10,"tid":10,"args":{"name":"app"}}"#.into());
    std::fs::write(
        dir.join("trace.json"),
        format!(
            "{{\"traceEvents\":[\n{}\n],\"displayTimeUnit\":\"ns\"}}\n",
            events.join(",\n")
        ),
    )
    .unwrap();
    let version = version.map_or(String::new(), |v| format!("\"format_version\":{v},"));
    std::fs::write(
        dir.join("summary.json"),
        format!(
            "{{{version}\"duration_ns\":{},\"stop_reason\":\"duration\",\"lost_events\":0,\"lost\":{{\"ring_full\":0,\"too_deep\":0,\"no_thread_slot\":0}},\"unmatched_entries\":0,\"decode_errors\":0,\"probes\":[{}]}}\n",
            ts - 1_000_000_000,
            summaries.join(",")
        ),
    )
    .unwrap();
}

/// `n` durations around `mean_ns`, uniformly ±20%, with every 20th 3 to 8 times longer (a noisy
/// workload), from `seed`; `scale` multiplies them all (1.02 = 2% slower).
pub fn noisy_durations(seed: u64, n: usize, mean_ns: f64, scale: f64) -> Vec<u64> {
    let mut rng = Lcg(seed);
    (0..n)
        .map(|i| {
            let mut d = mean_ns * (0.8 + 0.4 * rng.next_f64());
            if i % 20 == 7 {
                d *= 3.0 + 5.0 * rng.next_f64();
            }
            (d * scale).round() as u64
        })
        .collect()
}

/// Compares `actual` with the golden file `tests/data/golden/NAME`; with `XTRACE_BLESS=1` in the
/// environment it (re)writes the file instead.
pub fn golden(name: &str, actual: &str) {
    let path = data("golden").join(name);
    if std::env::var("XTRACE_BLESS").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (XTRACE_BLESS=1 writes it)", path.display()));
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the output at line {}:\n  expected: {:?}\n  actual:   {:?}\n(XTRACE_BLESS=1 rewrites it)",
            path.display(),
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first)
        );
    }
}
