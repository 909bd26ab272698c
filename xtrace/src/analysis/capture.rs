//! Loading a capture directory: summary.json (required; `format_version` checked, missing = 1),
//! trace.json or trace.json.gz (read by `trace_file`: complete events `"ph":"X"` become spans,
//! instants are counted, `M` events name processes and threads) and stacks.folded (optional CPU
//! samples).
use std::{
    collections::BTreeMap,
    fmt,
    path::{Path, PathBuf},
};

use serde_json::Value;

use super::{Error, Result};
use crate::model::summary::FORMAT_VERSION;

/// One complete event of trace.json.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// Index into [`Capture::names`].
    pub name: u32,
    pub pid: u32,
    pub tid: u32,
    pub start_ns: u64,
    pub dur_ns: u64,
    /// The `args` object as JSON when it holds more than `depth` (arguments, CUDA details).
    pub args: Option<Box<str>>,
}

impl Span {
    pub fn end_ns(&self) -> u64 {
        self.start_ns.saturating_add(self.dur_ns)
    }
}

/// A span's name and category (`uprobe`, `usdt_span`, `cuda`, ...).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name {
    pub name: String,
    pub cat: String,
}

/// A loaded capture.
#[derive(Debug, Default)]
pub struct Capture {
    pub dir: PathBuf,
    pub format_version: u64,
    /// summary.json as written.
    pub summary: Value,
    pub names: Vec<Name>,
    pub spans: Vec<Span>,
    /// Instant events per (name, category), CPU samples on the timeline excluded.
    pub instants: BTreeMap<Name, u64>,
    pub processes: BTreeMap<u32, String>,
    pub threads: BTreeMap<(u32, u32), String>,
    /// stacks.folded: (frames outermost first, the process first; samples).
    pub folded: Vec<(String, u64)>,
    /// Counter tracks' values, when loaded with [`Load::counters`].
    pub counters: Vec<Counter>,
    /// The timeline's CPU samples, when loaded with [`Load::samples`], in the trace's order.
    pub timed_samples: Vec<TimedSample>,
}

/// A CPU sample of the timeline: when, and its call stack folded (outermost first, as the
/// timeline keeps it: its innermost 32 frames).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedSample {
    pub ts_ns: u64,
    pub stack: String,
}

/// One value of one series of a counter track: trace.json's `"ph":"C"` events, one per series
/// in `args`; a Perfetto trace's counter events, whose track is one series (`series` None).
#[derive(Clone, Debug, PartialEq)]
pub struct Counter {
    pub pid: u32,
    pub track: String,
    pub series: Option<String>,
    pub ts_ns: u64,
    pub value: f64,
}

impl Counter {
    /// The values of a trace.json counter event, one per series of its `args` object.
    pub(super) fn of_args(pid: u32, track: &str, ts_ns: u64, args: Option<&str>) -> Vec<Counter> {
        let values: BTreeMap<String, f64> = args
            .and_then(|a| serde_json::from_str(a).ok())
            .unwrap_or_default();
        let counter = |(series, value)| Counter {
            pid,
            track: track.to_owned(),
            series: Some(series),
            ts_ns,
            value,
        };
        values.into_iter().map(counter).collect()
    }
}

/// What to read besides summary.json.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Read the trace at all (false: summary.json and stacks.folded only).
    pub trace: bool,
    /// Keep the spans (false: only names, metadata and instants are kept).
    pub spans: bool,
    /// Keep the counter tracks' values (`xtrace view`'s GPU charts).
    pub counters: bool,
    /// Keep the CPU samples of the timeline with their times (`merge`'s stragglers).
    pub samples: bool,
}

impl Default for Load {
    fn default() -> Self {
        Load {
            trace: true,
            spans: true,
            counters: false,
            samples: false,
        }
    }
}

impl Capture {
    /// The summary's unsigned field `key` (0 when absent).
    pub fn field(&self, key: &str) -> u64 {
        self.summary.get(key).and_then(Value::as_u64).unwrap_or(0)
    }

    /// Samples in stacks.folded.
    pub fn samples(&self) -> u64 {
        self.folded.iter().map(|(_, n)| n).sum()
    }

    /// The CPU sampling frequency recorded in the summary, if it sampled.
    pub fn sample_hz(&self) -> Option<u64> {
        self.summary
            .get("sample_frequency_hz")
            .and_then(Value::as_u64)
            .filter(|&hz| hz > 0)
    }

    /// The root frame of a process: its name in trace.json, else `pid N`.
    pub fn process_name(&self, pid: u32) -> String {
        self.processes
            .get(&pid)
            .cloned()
            .unwrap_or_else(|| format!("pid {pid}"))
    }

    /// Whether there is nothing to analyse: no span, no instant, no sample.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty() && self.instants.is_empty() && self.folded.is_empty()
    }
}

/// Loads `dir`; a directory without the files of a capture, a newer format, or unreadable JSON
/// is an error naming the file.
pub fn load(dir: &Path, what: Load) -> Result<Capture> {
    let not_capture = |reason: &str| Error::NotACapture {
        path: dir.to_path_buf(),
        reason: reason.into(),
    };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(not_capture("not a directory")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_capture("no such directory")),
        // A link loop, a parent directory it may not search: the system's refusal.
        Err(e) => return Err(unreadable(dir, e)),
    }
    let summary_path = dir.join(crate::output::SUMMARY_JSON);
    let text = match super::read_regular(&summary_path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(cut_short(dir).unwrap_or_else(|| not_capture("no summary.json")))
        }
        Err(e) => return Err(unreadable(&summary_path, e)),
    };
    let summary: Value = serde_json::from_slice(&text).map_err(|e| malformed(&summary_path, e))?;
    if !summary.is_object() || summary.get("duration_ns").and_then(Value::as_u64).is_none() {
        return Err(not_capture("summary.json is not an xtrace summary"));
    }
    let format_version = match summary.get("format_version") {
        None => 1,
        Some(v) => v
            .as_u64()
            .filter(|&v| v >= 1)
            .ok_or_else(|| malformed(&summary_path, "format_version is not a positive integer"))?,
    };
    if format_version > u64::from(FORMAT_VERSION) {
        return Err(Error::NewerVersion {
            path: dir.to_path_buf(),
            found: format_version,
            supported: FORMAT_VERSION,
        });
    }
    let mut capture = Capture {
        dir: dir.to_path_buf(),
        format_version,
        summary,
        ..Capture::default()
    };
    if what.trace {
        super::trace_file::read(dir, &mut capture, what)?;
    }
    let folded_path = dir.join(crate::output::STACKS_FOLDED);
    match super::read_regular(&folded_path) {
        Ok(text) => {
            let text = String::from_utf8(text).map_err(|e| malformed(&folded_path, e))?;
            capture.folded = parse_folded(&text).map_err(|e| malformed(&folded_path, e))?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(unreadable(&folded_path, e)),
    }
    let counted = capture
        .summary
        .get("samples")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    // A --flight capture directory counts the run's samples; its flight directories hold them.
    let flight_run = capture.summary["flight"].is_object() && capture.summary["flight"]["trigger"].is_null();
    if counted > 0 && capture.folded.is_empty() && !flight_run {
        return Err(malformed(
            &folded_path,
            format!("missing or empty, while summary.json counts {counted} CPU samples"),
        ));
    }
    Ok(capture)
}

/// The error for a directory whose recording was cut short: a file of it left as `NAME.partial`.
pub(crate) fn cut_short(dir: &Path) -> Option<Error> {
    let name = [
        crate::output::TRACE_FILE,
        crate::output::TRACE_FILE_GZ,
        crate::output::PERFETTO_FILE,
        crate::output::PERFETTO_FILE_GZ,
        crate::output::SUMMARY_JSON,
    ]
    .into_iter()
    .map(crate::output::partial)
    .find(|partial| dir.join(partial).exists())?;
    Some(Error::CutShort {
        path: dir.to_path_buf(),
        partial: name,
    })
}

/// Loads `dir` and refuses it when there is nothing in it to analyse: no spans, samples, instants
/// or time off CPU.
pub fn load_nonempty(dir: &Path, what: Load) -> Result<Capture> {
    let capture = load(dir, what)?;
    let flight = capture.summary["flight"]["directories"].as_array();
    if let Some(first) = flight
        .and_then(|d| d.first()?.as_str())
        .filter(|_| capture.is_empty())
    {
        return Err(Error::FlightOnly {
            path: dir.to_path_buf(),
            first: dir.join(first),
        });
    }
    // Time off CPU is something to analyse too (`--off-cpu` alone).
    let off_cpu = std::fs::metadata(dir.join(crate::output::OFFCPU_FOLDED)).is_ok_and(|m| m.len() > 0);
    if capture.is_empty() && !off_cpu {
        return Err(Error::Empty {
            path: dir.to_path_buf(),
        });
    }
    Ok(capture)
}

pub(crate) fn malformed(path: &Path, reason: impl fmt::Display) -> Error {
    Error::Malformed {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// A capture file (or directory) that could not be opened: the system's refusal (a permission, a
/// link loop) is no damage of the capture; anything else is (see [`malformed`]).
pub(super) fn unreadable(path: &Path, e: std::io::Error) -> Error {
    let Some(code) = e.raw_os_error() else {
        return malformed(path, e);
    };
    let reason = os_reason(code);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let reason = match e.kind() {
        // Root too can be refused: a network file system that maps root to nobody.
        std::io::ErrorKind::PermissionDenied if root => format!("{reason}; make it readable to root"),
        std::io::ErrorKind::PermissionDenied => {
            format!("{reason}; make it readable to this user, or run as its owner or root")
        }
        _ => reason,
    };
    Error::Unreadable {
        path: path.to_path_buf(),
        reason,
    }
}

/// The system's text for error `code`, as `strerror` gives it, lower case first, without Rust's
/// ` (os error N)`: "permission denied".
pub(super) fn os_reason(code: i32) -> String {
    let text = std::io::Error::from_raw_os_error(code).to_string();
    let text = text.split(" (os error").next().unwrap_or_default();
    let mut chars = text.chars();
    chars
        .next()
        .map_or_else(String::new, |first| first.to_lowercase().chain(chars).collect())
}

/// Folded stacks: `frame;frame;... COUNT` per line; blank lines are skipped.
pub fn parse_folded(text: &str) -> Result<Vec<(String, u64)>, String> {
    let mut stacks = Vec::new();
    let mut total: u64 = 0;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let parsed = line
            .rsplit_once(' ')
            .and_then(|(stack, n)| Some((stack, n.parse::<u64>().ok()?)))
            .filter(|(stack, _)| !stack.is_empty());
        let Some((stack, n)) = parsed else {
            // A count of digits alone that does not parse is too big for 64 bits.
            let huge = line
                .rsplit_once(' ')
                .is_some_and(|(stack, n)| !stack.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            return Err(match huge {
                true => format!("the count at line {} is past 2^64", i + 1),
                false => format!("line {} is not `frame;frame;... COUNT`", i + 1),
            });
        };
        // No sum of the counts (per frame, per function) can overflow when their total does not.
        total = total
            .checked_add(n)
            .ok_or_else(|| format!("the counts add up past 2^64 at line {}", i + 1))?;
        stacks.push((stack.to_string(), n));
    }
    Ok(stacks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(label: &str, summary: &str, trace: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtrace-capture-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("summary.json"), summary).unwrap();
        std::fs::write(dir.join("trace.json"), trace).unwrap();
        dir
    }

    const TRACE: &str = r#"{"traceEvents":[
{"ph":"X","name":"work","cat":"uprobe","ts":1000.5,"dur":2.25,"pid":7,"tid":8,"args":{"depth":0}},
{"ph":"X","name":"parse","cat":"uprobe","ts":1010.000,"dur":1.000,"pid":7,"tid":8,"args":{"depth":0,"arg0":3}},
{"ph":"i","s":"t","name":"app:tick","cat":"usdt","ts":1011.0,"pid":7,"tid":8,"args":{"arg0":1}},
{"ph":"i","s":"t","name":"hot","cat":"sample","ts":1012.0,"pid":7,"tid":8,"args":{"stack":"a;hot"}},
{"ph":"C","name":"CUDA device memory (bytes)","ts":1013.0,"pid":7,"args":{"bytes":5}},
{"ph":"M","name":"process_name","pid":7,"tid":7,"args":{"name":"app"}},
{"ph":"M","name":"thread_name","pid":7,"tid":8,"args":{"name":"worker"}}
],"displayTimeUnit":"ns"}"#;

    #[test]
    fn loads_spans_instants_and_names() {
        let d = dir("ok", r#"{"duration_ns": 5, "probes": []}"#, TRACE);
        let c = load(&d, Load::default()).unwrap();
        assert_eq!(c.format_version, 1);
        assert_eq!(c.spans.len(), 2);
        assert_eq!((c.spans[0].start_ns, c.spans[0].dur_ns), (1_000_500, 2_250));
        assert_eq!(c.names[c.spans[1].name as usize].name, "parse");
        assert_eq!(c.spans[0].args, None);
        assert_eq!(c.spans[1].args.as_deref(), Some(r#"{"depth":0,"arg0":3}"#));
        assert_eq!(c.instants.len(), 1);
        assert_eq!(c.process_name(7), "app");
        assert_eq!(c.threads[&(7, 8)], "worker");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn refuses_what_is_not_a_capture() {
        let d = dir("bad", r#"{"duration_ns": 5, "format_version": 2}"#, TRACE);
        let e = load(&d, Load::default()).unwrap_err().to_string();
        assert!(
            e.contains("capture format version 2 is newer than version 1"),
            "{e}"
        );
        std::fs::write(d.join("summary.json"), r#"[1,2]"#).unwrap();
        let e = load(&d, Load::default()).unwrap_err().to_string();
        assert!(
            e.contains("not an xtrace capture (summary.json is not an xtrace summary)"),
            "{e}"
        );
        std::fs::write(d.join("summary.json"), r#"{"duration_ns": 5}"#).unwrap();
        std::fs::write(
            d.join("trace.json"),
            r#"{"traceEvents":[{"ph":"X","ts":-1,"dur":1}]}"#,
        )
        .unwrap();
        let e = load(&d, Load::default()).unwrap_err().to_string();
        assert!(e.contains("is negative or past 146 years"), "{e}");
        std::fs::write(d.join("trace.json"), r#"{"traceEvents":[{"ph":"X""#).unwrap();
        assert!(matches!(load(&d, Load::default()), Err(Error::Malformed { .. })));
        std::fs::write(d.join("trace.json"), r#"{"traceEvents":[]}"#).unwrap();
        assert!(matches!(
            load_nonempty(&d, Load::default()),
            Err(Error::Empty { .. })
        ));
        // A --flight capture's events are in its flight directories.
        std::fs::write(
            d.join("summary.json"),
            r#"{"duration_ns": 5, "flight": {"directories": ["flight-001"]}}"#,
        )
        .unwrap();
        let e = load_nonempty(&d, Load::default()).unwrap_err().to_string();
        assert!(
            e.ends_with(&format!(
                "give one of them, e.g. {}",
                d.join("flight-001").display()
            )),
            "{e}"
        );
        std::fs::remove_file(d.join("summary.json")).unwrap();
        let e = load(&d, Load::default()).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "not an xtrace capture (no summary.json); give a directory written by `xtrace -o DIR`"
            ),
            "{e}"
        );
        std::fs::rename(d.join("trace.json"), d.join("trace.json.partial")).unwrap();
        let e = load(&d, Load::default()).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: a recording cut short (trace.json.partial was never completed: xtrace was \
                 killed, panicked or could not write it); record it again",
                d.display()
            )
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn folded_counts_that_add_up_past_64_bits_are_refused() {
        let max = u64::MAX;
        assert_eq!(
            parse_folded(&format!("a;b {max}\n")).unwrap(),
            [("a;b".to_string(), max)]
        );
        assert_eq!(
            parse_folded(&format!("a;b {max}\n\na;c 1\n")).unwrap_err(),
            "the counts add up past 2^64 at line 3"
        );
        assert_eq!(
            parse_folded("a;b 99999999999999999999\n").unwrap_err(),
            "the count at line 1 is past 2^64"
        );
        assert_eq!(
            parse_folded("a;b x\n").unwrap_err(),
            "line 1 is not `frame;frame;... COUNT`"
        );
    }

    /// A capture whose summary counts CPU samples but whose stacks.folded is gone or empty is
    /// damaged, not empty.
    #[test]
    fn samples_counted_without_their_stacks_are_damage() {
        let d = dir("no-folded", r#"{"duration_ns": 5, "samples": 301}"#, TRACE);
        let e = load(&d, Load::default()).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: missing or empty, while summary.json counts 301 CPU samples; the capture is \
                 damaged: record it again",
                d.join("stacks.folded").display()
            )
        );
        std::fs::write(d.join("stacks.folded"), "").unwrap();
        assert!(matches!(load(&d, Load::default()), Err(Error::Malformed { .. })));
        std::fs::write(d.join("stacks.folded"), "app;main 301\n").unwrap();
        assert_eq!(load(&d, Load::default()).unwrap().samples(), 301);
    }

    #[test]
    fn reads_gzip_traces_and_folded_stacks() {
        use std::io::Write;
        let d = dir("gz", r#"{"duration_ns": 5}"#, "");
        std::fs::remove_file(d.join("trace.json")).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(TRACE.as_bytes()).unwrap();
        std::fs::write(d.join("trace.json.gz"), gz.finish().unwrap()).unwrap();
        std::fs::write(d.join("stacks.folded"), "app;main;hot 3\napp;main 1\n").unwrap();
        let c = load(
            &d,
            Load {
                trace: true,
                spans: false,
                counters: false,
                samples: false,
            },
        )
        .unwrap();
        assert!(c.spans.is_empty());
        assert_eq!(c.names.len(), 2);
        assert_eq!(c.samples(), 4);
        std::fs::write(d.join("stacks.folded"), "app;main;hot x\n").unwrap();
        let e = load(&d, Load::default()).unwrap_err().to_string();
        assert!(e.contains("stacks.folded: line 1 is not"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
