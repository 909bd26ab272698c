//! `xtrace convert`: a capture's trace.json (or .gz) rewritten as trace.perfetto-trace beside it,
//! event by event through the writer a recording uses, so that the two traces hold the same
//! spans, instants, counters, async ranges, samples and names. The JSON is read with the
//! streaming parser (any layout); the Perfetto trace is written through `NAME.partial` and never
//! over a trace already there.
use std::{io::Read, path::Path};

use serde_json::{Map, Value};

use crate::{
    analysis::{
        capture::malformed,
        trace_file::{self, micros_to_ns, Events, Progress, RawEvent},
        Error, Result,
    },
    clock::Snapshot,
    output::{self, Sink, TraceFormat},
    pipeline::{
        perfetto::{PerfettoWriter, SampleFrame, KERNEL_MAPPING},
        writer::{AsyncEdge, SpanOut},
    },
};

/// Converts the trace of capture `dir` to `format`, compressed when `gzip`; returns the name of
/// the file written.
pub fn run(dir: &Path, format: TraceFormat, gzip: bool) -> Result<&'static str> {
    let (path, reader, from) = trace_file::open(dir)?;
    if from == format {
        return Err(Error::NotConvertible {
            path,
            reason: "it is in that format already; give another --trace-format".into(),
        });
    }
    if format == TraceFormat::Json {
        return Err(Error::NotConvertible {
            path,
            reason: "only trace.json converts so far (to perfetto); record again with --trace-format json"
                .into(),
        });
    }
    let summary = crate::analysis::capture::load(
        dir,
        crate::analysis::capture::Load {
            trace: false,
            spans: false,
        },
    )?;
    let clock = |at: &str| -> Snapshot {
        let c = &summary.summary["clock"][at];
        let ns = |k: &str| c[k].as_u64().unwrap_or(0);
        Snapshot {
            monotonic_ns: ns("monotonic_ns"),
            realtime_ns: ns("realtime_ns"),
            boottime_ns: ns("boottime_ns"),
        }
    };
    let name = format.file_name(gzip);
    let out = output::prepare(Some(dir), true)?;
    if out
        .kind(name)
        .map_err(|e| crate::error::Error::Output {
            path: out.join(name),
            source: e,
        })?
        .is_some()
    {
        return Err(Error::NotConvertible {
            path: out.join(name),
            reason: "it is there already, and convert never writes over a trace; remove it first".into(),
        });
    }
    let (sink, _) = Sink::new(output::create(&out, name)?, gzip);
    let written = |source| {
        Error::Xtrace(crate::error::Error::Output {
            path: out.join(&output::partial(name)),
            source,
        })
    };
    let writer = PerfettoWriter::new(sink, &[], &clock("start")).map_err(written)?;
    let mut convert = Convert {
        writer,
        progress: Progress::default(),
    };
    convert_events(&path, reader, &mut convert)?;
    let mut writer = convert.writer;
    writer.clock_snapshot(&clock("end")).map_err(written)?;
    writer.finish().and_then(Sink::close).map_err(written)?;
    output::complete(&out, name)?;
    Ok(name)
}

fn convert_events(path: &Path, reader: Box<dyn Read>, convert: &mut Convert) -> Result<()> {
    let streamed = trace_file::stream(reader, convert);
    match convert.progress.refused.take() {
        Some(refused) => Err(malformed(path, refused)),
        None => streamed.map_err(|e| malformed(path, e)),
    }
}

/// The events of trace.json, handed to the Perfetto writer.
struct Convert {
    writer: PerfettoWriter<Sink>,
    progress: Progress,
}

/// An event's `args` object, parsed; empty when it has none.
fn args_of(event: &RawEvent) -> Result<Map<String, Value>, String> {
    match &event.args {
        None => Ok(Map::new()),
        Some(raw) => {
            serde_json::from_str(raw.get()).map_err(|e| format!("args that are not an object ({e})"))
        }
    }
}

/// `args` members as the writer takes them: `,"k":v,...`.
fn members(args: &Map<String, Value>) -> Option<Box<str>> {
    if args.is_empty() {
        return None;
    }
    let object = Value::Object(args.clone()).to_string();
    let inner = &object[1..object.len() - 1];
    Some(format!(",{inner}").into())
}

/// The frames of a sample's folded `stack` (trace.json keeps the 32 innermost, by name only):
/// kernel frames (`_[k]`) under [`KERNEL_MAPPING`], the others under `[unknown]`, pcs unknown (0).
fn folded_frames(stack: &str) -> Vec<SampleFrame> {
    stack
        .split(';')
        .map(|frame| match frame.strip_suffix("_[k]") {
            Some(name) => SampleFrame {
                name: name.into(),
                module: KERNEL_MAPPING.into(),
                rel_pc: 0,
            },
            None => SampleFrame {
                name: frame.into(),
                module: "[unknown]".into(),
                rel_pc: 0,
            },
        })
        .collect()
}

impl Events for Convert {
    fn progress(&mut self) -> &mut Progress {
        &mut self.progress
    }

    fn event(&mut self, e: &RawEvent) -> Result<(), String> {
        let pid = u32::try_from(e.pid.unwrap_or(0)).map_err(|_| "a pid does not fit 32 bits")?;
        let tid = u32::try_from(e.tid.unwrap_or(0)).map_err(|_| "a tid does not fit 32 bits")?;
        let name = e.name.as_deref().unwrap_or("");
        let cat = e.cat.as_deref().unwrap_or("");
        let time = |us: Option<f64>| {
            us.and_then(micros_to_ns)
                .ok_or_else(|| format!("an event whose time is missing, negative or past 146 years ({name})"))
        };
        let mut args = args_of(e)?;
        let span = |args: &Map<String, Value>| SpanOut {
            probe: usize::MAX,
            pid,
            tid,
            name: Some(name.into()),
            cat: Some(cat.into()),
            values: members(args),
            ..Default::default()
        };
        let io = |r: std::io::Result<()>| r.map_err(|e| format!("writing the Perfetto trace: {e}"));
        match e.ph.as_deref().unwrap_or("") {
            "X" => {
                let depth = args.remove("depth").and_then(|d| d.as_u64()).unwrap_or(0);
                let out = SpanOut {
                    start_ns: time(e.ts)?,
                    dur_ns: time(e.dur)?,
                    depth: depth as u32,
                    ..span(&args)
                };
                io(self.writer.span(&out))
            }
            "i" | "I" if cat == "sample" => {
                let stack = args.get("stack").and_then(Value::as_str).unwrap_or(name);
                io(self.writer.sample(pid, tid, time(e.ts)?, &folded_frames(stack)))
            }
            "i" | "I" => io(self.writer.span(&SpanOut {
                start_ns: time(e.ts)?,
                instant: true,
                ..span(&args)
            })),
            "C" => {
                let values: Vec<(String, f64)> = args
                    .iter()
                    .map(|(series, v)| (series.clone(), v.as_f64().unwrap_or(0.0)))
                    .collect();
                io(self.writer.counter(pid, name, time(e.ts)?, &values))
            }
            ph @ ("b" | "e") => {
                let id = e.id.as_deref().unwrap_or("0");
                let id = u64::from_str_radix(id.trim_start_matches("0x"), 16)
                    .map_err(|_| format!("an async event whose id {id:?} is not a hex number"))?;
                let edge = AsyncEdge { begin: ph == "b", id };
                io(self.writer.span(&SpanOut {
                    start_ns: time(e.ts)?,
                    edge: Some(edge),
                    ..span(&args)
                }))
            }
            "M" => {
                let named = args.get("name").and_then(Value::as_str);
                match (name, named) {
                    ("process_name", Some(n)) => io(self.writer.process_name(pid, n)),
                    ("thread_name", Some(n)) => io(self.writer.thread_name(pid, tid, n)),
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}
