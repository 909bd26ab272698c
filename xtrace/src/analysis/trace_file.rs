//! Reading trace.json (or trace.json.gz) of a capture into a [`Capture`]. A trace laid out the way
//! xtrace writes it — the line `{"traceEvents":[`, then one event per line, then
//! `],"displayTimeUnit":"ns"}` — is read a line at a time, each event parsed from its own bytes
//! (serde_json's slice parser, about three times faster than its reader parser). Any other layout
//! of valid JSON, and any trace the line reader finds wrong, is read again by the streaming parser,
//! which accepts every layout and gives the error of a malformed one.
use std::{
    borrow::Cow,
    collections::HashMap,
    fmt,
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
};

use serde::{
    de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor},
    Deserialize, Deserializer,
};
use serde_json::value::RawValue;

use super::{
    capture::{cut_short, malformed, unreadable, Capture, Counter, Name, Span},
    Error, Result,
};
use crate::{
    output::TraceFormat,
    pipeline::chrome::{HEAD_LINE, TAIL_LINE},
};

/// Reads the trace of `dir` into `capture`: names, instants, process and thread names, and the
/// spans and counters when `what` asks for them.
pub(super) fn read(dir: &Path, capture: &mut Capture, what: super::capture::Load) -> Result<()> {
    let (path, reader, format) = open(dir)?;
    let mut sink = Sink::new(capture, what.spans);
    (sink.keep_counters, sink.keep_samples) = (what.counters, what.samples);
    if format == TraceFormat::Perfetto {
        return super::perfetto_file::read(&path, reader, &mut sink);
    }
    if read_lines(BufReader::with_capacity(1 << 20, reader), &mut sink) == Some(()) {
        return Ok(());
    }
    if let Some(refused) = sink.progress.refused.take() {
        return Err(malformed(&path, refused));
    }
    sink.clear();
    let (_, reader, _) = open(dir)?;
    let streamed = stream(reader, &mut sink);
    // serde_json places an error raised between events after the separator that follows, so an
    // event the sink refuses is named by its place in the array instead.
    match sink.progress.refused.take() {
        Some(refused) => Err(malformed(&path, refused)),
        None => streamed.map_err(|e| malformed(&path, e)),
    }
}

/// Reads a trace of any layout with serde_json's streaming parser.
pub(crate) fn stream<S: Events>(reader: impl Read, sink: &mut S) -> serde_json::Result<()> {
    let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 20, reader));
    TraceSeed(sink).deserialize(&mut de).and_then(|()| de.end())
}

/// The trace of a capture, the first of trace.json, trace.json.gz, trace.perfetto-trace and
/// trace.perfetto-trace.gz found (a compressed one is decompressed as it is read).
pub(crate) fn open(dir: &Path) -> Result<(PathBuf, Box<dyn Read>, TraceFormat)> {
    use crate::output::{PERFETTO_FILE, PERFETTO_FILE_GZ, TRACE_FILE, TRACE_FILE_GZ};
    let candidates = [
        (TRACE_FILE, TraceFormat::Json, false),
        (TRACE_FILE_GZ, TraceFormat::Json, true),
        (PERFETTO_FILE, TraceFormat::Perfetto, false),
        (PERFETTO_FILE_GZ, TraceFormat::Perfetto, true),
    ];
    for (name, format, gz) in candidates {
        let path = dir.join(name);
        let file = match super::open_regular(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            other => other.map_err(|e| unreadable(&path, e))?,
        };
        let reader: Box<dyn Read> = match gz {
            true => Box::new(flate2::read::GzDecoder::new(file)),
            false => Box::new(file),
        };
        return Ok((path, reader, format));
    }
    Err(cut_short(dir).unwrap_or_else(|| Error::NotACapture {
        path: dir.to_path_buf(),
        reason: "no trace.json, trace.perfetto-trace or their .gz".into(),
    }))
}

/// Reads a trace laid out one event per line; None at the first line that is not in that layout
/// (the caller then reads the file again with the streaming parser), and at an event the sink
/// refuses, which is then in `sink.refused` with its line's number.
fn read_lines<S: Events>(mut reader: impl BufRead, sink: &mut S) -> Option<()> {
    let mut line = Vec::with_capacity(4096);
    // The head line is read through a bound: a trace in another layout may be one long line, which
    // the streaming parser reads in bounded memory.
    (&mut reader)
        .take(HEAD_LINE.len() as u64 + 1)
        .read_until(b'\n', &mut line)
        .ok()?;
    if line.strip_suffix(b"\n") != Some(HEAD_LINE) {
        return None;
    }
    let mut next = |line: &mut Vec<u8>| -> Option<bool> {
        line.clear();
        let n = reader.read_until(b'\n', line).ok()?;
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        Some(n > 0)
    };
    for number in 2.. {
        if !next(&mut line)? {
            return None; // no closing line
        }
        match line.first() {
            None => continue, // the empty line before the tail of an empty trace
            Some(b'{') => {
                let event = line.strip_suffix(b",").unwrap_or(&line);
                let event: RawEvent = serde_json::from_slice(event).ok()?;
                if let Err(e) = sink.event(&event) {
                    sink.progress().refused = Some(format!("{e} at line {number}"));
                    return None;
                }
            }
            Some(_) if line == TAIL_LINE => break,
            Some(_) => return None,
        }
    }
    // Nothing but white space may follow.
    while next(&mut line)? {
        if !line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
    }
    Some(())
}

/// Where parsed events go (from trace.json, or from trace.perfetto-trace through
/// [`super::perfetto_file`]).
pub(super) struct Sink<'c> {
    pub(super) capture: &'c mut Capture,
    keep_spans: bool,
    /// Whether counters are kept (`xtrace view`).
    pub(super) keep_counters: bool,
    /// Whether CPU samples are kept with their times (`merge`).
    pub(super) keep_samples: bool,
    /// category → name → index into `capture.names`.
    interned: HashMap<String, HashMap<String, u32>>,
    /// The durations of the complete events so far, added: past `u64::MAX` the capture is refused,
    /// so that no sum of them (per name, thread or call edge) can overflow.
    durations: u128,
    progress: Progress,
}

/// What reads a trace's events: a capture's [`Sink`], or `xtrace convert`'s writer.
pub(crate) trait Events {
    /// One event; an error refuses the trace.
    fn event(&mut self, event: &RawEvent) -> Result<(), String>;
    fn progress(&mut self) -> &mut Progress;
}

/// How far the parser got: events read (the streaming parser names a refused event by its
/// place), and why an event was refused, and where it is.
#[derive(Default)]
pub(crate) struct Progress {
    events: u64,
    pub refused: Option<String>,
}

/// One trace event; unknown members are ignored. The line reader's strings are borrowed from the
/// line where they have no escapes; the streaming parser's are owned (a reader lends no bytes).
#[derive(Deserialize)]
pub(crate) struct RawEvent<'a> {
    #[serde(borrow)]
    pub ph: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub cat: Option<Cow<'a, str>>,
    pub ts: Option<f64>,
    pub dur: Option<f64>,
    pub pid: Option<u64>,
    pub tid: Option<u64>,
    /// An async event's id (`"0x1"`).
    #[serde(borrow)]
    pub id: Option<Cow<'a, str>>,
    pub args: Option<Box<RawValue>>,
}

/// The latest time (and longest duration) an event may have: 2^62 ns, 146 years.
const MAX_TIME_NS: u64 = 1 << 62;

/// Chrome µs (with ns decimals) to ns; None when negative, past [`MAX_TIME_NS`] or not finite.
pub(crate) fn micros_to_ns(us: f64) -> Option<u64> {
    let ns = (us * 1000.0).round();
    (0.0..=MAX_TIME_NS as f64).contains(&ns).then_some(ns as u64)
}

/// A time in µs for a message: in scientific notation when it is huge.
fn shown_micros(us: f64) -> String {
    if us.abs() < 1e15 {
        format!("{us}")
    } else {
        format!("{us:e}")
    }
}

impl<'c> Sink<'c> {
    pub(super) fn new(capture: &'c mut Capture, keep_spans: bool) -> Self {
        Sink {
            capture,
            keep_spans,
            keep_counters: false,
            keep_samples: false,
            interned: HashMap::new(),
            durations: 0,
            progress: Progress::default(),
        }
    }

    /// Forgets what was read (before reading the trace again).
    fn clear(&mut self) {
        let c = &mut *self.capture;
        c.names.clear();
        c.spans.clear();
        c.instants.clear();
        c.processes.clear();
        c.threads.clear();
        c.counters.clear();
        c.timed_samples.clear();
        self.interned.clear();
        self.durations = 0;
        self.progress = Progress::default();
    }
}

impl Events for Sink<'_> {
    fn progress(&mut self) -> &mut Progress {
        &mut self.progress
    }

    fn event(&mut self, event: &RawEvent) -> Result<(), String> {
        let pid = u32::try_from(event.pid.unwrap_or(0)).map_err(|_| "a pid does not fit 32 bits")?;
        let tid = u32::try_from(event.tid.unwrap_or(0)).map_err(|_| "a tid does not fit 32 bits")?;
        let (name, cat) = (event.name.as_deref(), event.cat.as_deref());
        let args = event.args.as_deref().map(RawValue::get);
        match event.ph.as_deref().unwrap_or("") {
            "X" => {
                let (Some(ts), Some(dur)) = (event.ts, event.dur) else {
                    return Err("a complete event (\"ph\":\"X\") lacks ts or dur".into());
                };
                let (Some(start_ns), Some(dur_ns)) = (micros_to_ns(ts), micros_to_ns(dur)) else {
                    return Err(format!(
                        "a complete event's time is negative or past 146 years (ts {} µs, dur {} µs)",
                        shown_micros(ts),
                        shown_micros(dur)
                    ));
                };
                // `{"depth":N}` alone has no comma; anything more is worth keeping.
                let args = args.filter(|a| a.contains(','));
                let name = Name {
                    name: name.unwrap_or("").to_owned(),
                    cat: cat.unwrap_or("").to_owned(),
                };
                self.span(&name, (pid, tid), start_ns, dur_ns, args)?;
            }
            "i" | "I" if self.keep_samples && cat == Some("sample") => {
                let ts_ns = event
                    .ts
                    .and_then(micros_to_ns)
                    .ok_or("a sample without a valid ts")?;
                let stack = args.and_then(|a| serde_json::from_str::<serde_json::Value>(a).ok());
                let stack = stack.as_ref().and_then(|a| a["stack"].as_str()).unwrap_or("?");
                let sample = super::capture::TimedSample {
                    ts_ns,
                    stack: stack.to_owned(),
                };
                self.capture.timed_samples.push(sample);
            }
            "i" | "I" => self.instant(name.unwrap_or(""), cat.unwrap_or("")),
            "C" if self.keep_counters && cat != Some(crate::model::wait::TIMELINE_CATEGORY) => {
                let ts_ns = event
                    .ts
                    .and_then(micros_to_ns)
                    .ok_or("a counter without a valid ts")?;
                let counters = Counter::of_args(pid, name.unwrap_or(""), ts_ns, args);
                self.capture.counters.extend(counters);
            }
            "M" => {
                #[derive(Deserialize)]
                struct Named {
                    name: Option<String>,
                }
                let named = args
                    .and_then(|a| serde_json::from_str::<Named>(a).ok())
                    .and_then(|n| n.name);
                match (name, named) {
                    (Some("process_name"), Some(n)) => self.process(pid, n),
                    (Some("thread_name"), Some(n)) => self.thread(pid, tid, n),
                    _ => {}
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Sink<'_> {
    /// A complete span; `args` the JSON object of its arguments, when it has any. Its times must
    /// be at most [`MAX_TIME_NS`] and all durations must add up to at most 2^64 ns, so that no
    /// sum of them (per name, thread or call edge) can overflow.
    pub(super) fn span(
        &mut self,
        name: &Name,
        (pid, tid): (u32, u32),
        start_ns: u64,
        dur_ns: u64,
        args: Option<&str>,
    ) -> Result<(), String> {
        if name.cat == crate::model::wait::TIMELINE_CATEGORY {
            // An off-CPU wait: no span (the summary holds the waits).
            return Ok(());
        }
        if start_ns > MAX_TIME_NS || dur_ns > MAX_TIME_NS {
            return Err(format!(
                "a span's time is past 146 years (start {start_ns} ns, duration {dur_ns} ns)"
            ));
        }
        self.durations += u128::from(dur_ns);
        if self.durations > u128::from(u64::MAX) {
            return Err("the complete events' durations add up past 2^64 ns".into());
        }
        let name = self.intern(&name.name, &name.cat);
        if self.keep_spans {
            self.capture.spans.push(Span {
                name,
                pid,
                tid,
                start_ns,
                dur_ns,
                args: args.map(Box::from),
            });
        }
        Ok(())
    }

    /// An instant event; CPU samples (category `sample`) and off-CPU wake-ups are not counted.
    pub(super) fn instant(&mut self, name: &str, cat: &str) {
        if cat != "sample" && cat != crate::model::wait::TIMELINE_CATEGORY {
            let name = Name {
                name: name.to_owned(),
                cat: cat.to_owned(),
            };
            *self.capture.instants.entry(name).or_default() += 1;
        }
    }

    pub(super) fn process(&mut self, pid: u32, name: String) {
        self.capture.processes.insert(pid, name);
    }

    pub(super) fn thread(&mut self, pid: u32, tid: u32, name: String) {
        self.capture.threads.insert((pid, tid), name);
    }

    /// The index of (name, category) in `capture.names`, added when first seen.
    fn intern(&mut self, name: &str, cat: &str) -> u32 {
        if let Some(&id) = self.interned.get(cat).and_then(|names| names.get(name)) {
            return id;
        }
        let id = self.capture.names.len() as u32;
        self.capture.names.push(Name {
            name: name.to_owned(),
            cat: cat.to_owned(),
        });
        self.interned
            .entry(cat.to_owned())
            .or_default()
            .insert(name.to_owned(), id);
        id
    }
}

/// The whole trace: `{"traceEvents":[...], ...}` or a bare array of events.
struct TraceSeed<'s, S>(&'s mut S);

impl<'de, S: Events> DeserializeSeed<'de> for TraceSeed<'_, S> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de, S: Events> Visitor<'de> for TraceSeed<'_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Chrome trace: {\"traceEvents\": [...]}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "traceEvents" {
                map.next_value_seed(EventsSeed(&mut *self.0))?;
                seen = true;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        if seen {
            Ok(())
        } else {
            Err(serde::de::Error::custom("no traceEvents array"))
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        EventsSeed(self.0).visit_seq(seq)
    }
}

/// The `traceEvents` array, one event at a time.
struct EventsSeed<'s, S>(&'s mut S);

impl<'de, S: Events> DeserializeSeed<'de> for EventsSeed<'_, S> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_seq(self)
    }
}

impl<'de, S: Events> Visitor<'de> for EventsSeed<'_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(event) = seq.next_element::<RawEvent>()? {
            let sink = &mut *self.0;
            sink.progress().events += 1;
            if let Err(e) = sink.event(&event) {
                let refused = format!("{e} in event {} of traceEvents", sink.progress().events);
                sink.progress().refused = Some(refused.clone());
                return Err(serde::de::Error::custom(refused));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "trace_file_tests.rs"]
mod tests;
