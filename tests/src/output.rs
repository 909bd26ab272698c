//! Reading what xtrace writes into its `-o` directory: `trace.json` (Chrome trace events: `X` spans,
//! `i` instants and `M` metadata), `summary.json` (per-probe statistics, stop reason, losses, command, targets)
//! and `summary.txt`. Parsing panics with the file name and the offending event, so a malformed
//! output fails the test with a readable message.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// One `"ph":"X"` event of trace.json.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub name: String,
    pub cat: String,
    /// Start in µs.
    pub ts: f64,
    /// Duration in µs.
    pub dur: f64,
    pub pid: u64,
    pub tid: u64,
    pub depth: u64,
    /// The whole `args` object (depth and captured values).
    pub args: Value,
}

impl Span {
    /// Start in ns, from the µs float (3 decimals).
    pub fn start_ns(&self) -> i64 {
        us_to_ns(self.ts)
    }

    /// Duration in ns, from the µs float (3 decimals).
    pub fn dur_ns(&self) -> i64 {
        us_to_ns(self.dur)
    }

    pub fn end_ns(&self) -> i64 {
        self.start_ns() + self.dur_ns()
    }
}

/// Converts µs with 3 decimals back to integer ns.
pub fn us_to_ns(us: f64) -> i64 {
    (us * 1000.0).round() as i64
}

/// All outputs of one run.
#[derive(Debug)]
pub struct Outputs {
    pub dir: PathBuf,
    pub events: Vec<Value>,
    pub summary: Value,
    pub summary_txt: String,
}

impl Outputs {
    /// Reads and parses trace.json, summary.json and summary.txt from `dir`.
    pub fn read(dir: &Path) -> Outputs {
        let trace = read_json(&dir.join("trace.json"));
        let events = trace
            .get("traceEvents")
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("trace.json in {} has no traceEvents array", dir.display()))
            .clone();
        let summary = read_json(&dir.join("summary.json"));
        let txt = dir.join("summary.txt");
        let summary_txt =
            std::fs::read_to_string(&txt).unwrap_or_else(|e| panic!("reading {}: {e}", txt.display()));
        Outputs {
            dir: dir.to_path_buf(),
            events,
            summary,
            summary_txt,
        }
    }

    /// [`Outputs::read`] for a run that also profiled: checks stacks.folded and flamegraph.svg
    /// exist.
    pub fn read_profiled(dir: &Path) -> Outputs {
        for file in ["stacks.folded", "flamegraph.svg"] {
            assert!(dir.join(file).is_file(), "{} has no {file}", dir.display());
        }
        Outputs::read(dir)
    }

    /// Self samples of `name` in summary.json's hot_functions, in percent of all samples.
    pub fn self_share(&self, name: &str) -> f64 {
        let samples = self.summary["samples"].as_f64().expect("samples");
        let hot = self.summary["hot_functions"].as_array().expect("hot_functions");
        let found = hot.iter().find(|f| f["name"] == name);
        found.map_or(0.0, |f| f["self"].as_f64().unwrap() * 100.0 / samples)
    }

    /// Shares of the profile fixture's split functions, in percent of the samples in either (with
    /// what they call, such as the vDSO clock reads), so time outside the split (start-up, the
    /// loop) does not count.
    pub fn split_shares(&self, [hot_a, hot_b]: [&str; 2]) -> (f64, f64) {
        let hot = self.summary["hot_functions"].as_array().expect("hot_functions");
        let total = |name: &str| {
            let found = hot.iter().find(|f| f["name"] == name);
            found.map_or(0.0, |f| f["total"].as_f64().unwrap())
        };
        let (a, b) = (total(hot_a), total(hot_b));
        assert!(a + b > 0.0, "no samples in {hot_a} or {hot_b}: {hot:?}");
        (a * 100.0 / (a + b), b * 100.0 / (a + b))
    }

    /// The samples of the stacks.folded lines whose stack `keep` takes.
    pub fn samples_where(&self, keep: impl Fn(&str) -> bool) -> u64 {
        self.folded_sum("stacks.folded", keep)
    }

    /// stacks.folded as (stack, samples) lines.
    pub fn folded(&self) -> Vec<(String, u64)> {
        self.folded_file("stacks.folded")
    }

    /// offcpu.folded as (stack, nanoseconds) lines.
    pub fn off_cpu_folded(&self) -> Vec<(String, u64)> {
        self.folded_file("offcpu.folded")
    }

    /// The nanoseconds of the offcpu.folded lines whose stack `keep` takes.
    pub fn off_cpu_ns_where(&self, keep: impl Fn(&str) -> bool) -> u64 {
        self.folded_sum("offcpu.folded", keep)
    }

    /// The counts of the folded file `name`'s lines whose stack `keep` takes.
    fn folded_sum(&self, name: &str, keep: impl Fn(&str) -> bool) -> u64 {
        self.folded_file(name)
            .iter()
            .filter(|(stack, _)| keep(stack))
            .map(|(_, count)| count)
            .sum()
    }

    /// The folded file `name` (stacks, offcpu or wallclock) as (stack, count) lines.
    pub fn folded_file(&self, name: &str) -> Vec<(String, u64)> {
        let path = self.dir.join(name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        text.lines()
            .map(|line| {
                let (stack, count) = line
                    .rsplit_once(' ')
                    .unwrap_or_else(|| panic!("{name} line without a count: {line:?}"));
                let count = count
                    .parse()
                    .unwrap_or_else(|_| panic!("{name} line with a bad count: {line:?}"));
                (stack.to_string(), count)
            })
            .collect()
    }

    /// Every `X` event, parsed.
    pub fn spans(&self) -> Vec<Span> {
        self.events
            .iter()
            .filter(|e| e.get("ph").and_then(Value::as_str) == Some("X"))
            .map(parse_span)
            .collect()
    }

    /// The off-CPU waits sent on their own (each at least the capture's MIN): the `off_cpu`
    /// slices other than `runnable`.
    pub fn sent_waits(&self) -> Vec<Span> {
        self.spans()
            .into_iter()
            .filter(|s| s.cat == "off_cpu" && s.name != "runnable")
            .collect()
    }

    /// `X` events named `name`.
    pub fn spans_named(&self, name: &str) -> Vec<Span> {
        self.spans().into_iter().filter(|s| s.name == name).collect()
    }

    /// The `args` of every instant event (`"ph":"i"`) named `name`, in trace order.
    pub fn instants(&self, name: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| {
                e.get("ph").and_then(Value::as_str) == Some("i")
                    && e.get("name").and_then(Value::as_str) == Some(name)
            })
            .map(|e| &e["args"])
            .collect()
    }

    /// The CPU samples on the timeline (instant events of category `sample`), in trace order.
    pub fn timeline_samples(&self) -> Vec<&Value> {
        self.events.iter().filter(|e| e["cat"] == "sample").collect()
    }

    /// Samples on the timeline per process: (pid, count), by pid.
    pub fn samples_by_pid(&self) -> Vec<(u32, u64)> {
        let mut by_pid = std::collections::BTreeMap::new();
        for sample in self.timeline_samples() {
            *by_pid.entry(sample["pid"].as_u64().unwrap() as u32).or_insert(0) += 1;
        }
        by_pid.into_iter().collect()
    }

    /// Checks that no sample of process `pid` on the timeline has a frame named by its address.
    pub fn assert_symbolized(&self, pid: u32) {
        for sample in self.timeline_samples() {
            let stack = sample["args"]["stack"].as_str().unwrap();
            if sample["pid"] == pid {
                assert!(!has_bare_frame(stack), "process {pid}: {stack}");
            }
        }
    }

    /// Checks the samples of the children `profile forks 5` started (`children`, in order: even
    /// ones forked, odd ones exec'd): no frame is named by its address (`0x...`, `module+0x...`),
    /// a forked child's samples in `split` are under `;main;forks;split;`, an exec'd one's under
    /// its own `;main;split;`, and each kind has ~100 samples in `split` (20 children of each kind
    /// spin for ~5 ms, at 999 Hz).
    pub fn assert_forks_symbolized(&self, children: &[u32]) {
        let (mut forked, mut execed) = (0, 0);
        for sample in self.timeline_samples() {
            let pid = sample["pid"].as_u64().unwrap() as u32;
            let Some(i) = children.iter().position(|c| *c == pid) else {
                continue;
            };
            let stack = sample["args"]["stack"].as_str().unwrap();
            assert!(!has_bare_frame(stack), "child {pid} (#{i}): {stack}");
            if !stack.contains(";split;") {
                continue; // starting or leaving
            }
            if i % 2 == 0 {
                assert!(
                    stack.contains(";main;forks;split;"),
                    "forked child {pid}: {stack}"
                );
                forked += 1;
            } else {
                assert!(
                    stack.contains(";main;split;") && !stack.contains("forks"),
                    "exec'd child {pid}: {stack}"
                );
                execed += 1;
            }
        }
        assert!(
            (50..=150).contains(&forked) && (50..=150).contains(&execed),
            "samples in split: {forked} of forked children, {execed} of exec'd ones"
        );
    }

    /// `M` events whose name is `kind` (`process_name` or `thread_name`).
    pub fn metadata(&self, kind: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| {
                e.get("ph").and_then(Value::as_str) == Some("M")
                    && e.get("name").and_then(Value::as_str) == Some(kind)
            })
            .collect()
    }

    /// summary.json's `stop_reason`.
    pub fn stop_reason(&self) -> &str {
        self.summary["stop_reason"]
            .as_str()
            .unwrap_or_else(|| panic!("summary.json has no string stop_reason: {}", self.summary))
    }

    /// summary.json's `lost_events`.
    pub fn lost_events(&self) -> u64 {
        u64_field(&self.summary, "lost_events")
    }

    /// The entry of summary.json's `probes` named `name` (exactly one must exist).
    pub fn probe(&self, name: &str) -> &Value {
        let probes = self.summary["probes"]
            .as_array()
            .unwrap_or_else(|| panic!("summary.json has no probes array: {}", self.summary));
        let matching: Vec<&Value> = probes
            .iter()
            .filter(|p| p["name"].as_str() == Some(name))
            .collect();
        assert_eq!(
            matching.len(),
            1,
            "expected exactly one probe named {name:?} in summary.json, got {probes:?}"
        );
        matching[0]
    }

    /// `count` of the summary probe `name`.
    pub fn probe_count(&self, name: &str) -> u64 {
        u64_field(self.probe(name), "count")
    }
}

/// `value[key]` as u64, panicking with the value when it is missing or not an integer.
pub fn u64_field(value: &Value, key: &str) -> u64 {
    value[key]
        .as_u64()
        .unwrap_or_else(|| panic!("field {key:?} is not an unsigned integer in {value}"))
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()))
}

fn parse_span(event: &Value) -> Span {
    let str_field = |key: &str| {
        event[key]
            .as_str()
            .unwrap_or_else(|| panic!("X event without string {key:?}: {event}"))
            .to_owned()
    };
    let f64_field = |key: &str| {
        event[key]
            .as_f64()
            .unwrap_or_else(|| panic!("X event without numeric {key:?}: {event}"))
    };
    Span {
        name: str_field("name"),
        cat: str_field("cat"),
        ts: f64_field("ts"),
        dur: f64_field("dur"),
        pid: u64_field(event, "pid"),
        tid: u64_field(event, "tid"),
        depth: event["args"]["depth"]
            .as_u64()
            .unwrap_or_else(|| panic!("X event without args.depth: {event}")),
        args: event["args"].clone(),
    }
}

/// Whether a folded stack has a frame named by its address (`0x...`, `module+0x...`).
fn has_bare_frame(stack: &str) -> bool {
    stack
        .split(';')
        .any(|frame| frame.starts_with("0x") || frame.contains("+0x"))
}
