//! A capture's trace.json events written again through the writer a recording uses (either
//! format), placed where the caller asks: `xtrace convert` replays a capture as it is into the
//! other format; `xtrace merge` replays each capture shifted onto a common clock, with its
//! processes numbered and named apart from the other captures'. A flow arrow's end (`"ph":"f"`),
//! which trace.json writes right after the span it ends in, is put back on that span: each span
//! is held until the next event.
use serde_json::{Map, Value};

use crate::{
    analysis::trace_file::{micros_to_ns, Events, Progress, RawEvent},
    output::Sink,
    pipeline::{
        perfetto::{SampleFrame, KERNEL_MAPPING},
        writer::{
            thread_counter_name, AsyncEdge, EventKind, EventWriter, Flow, FlowKind, SpanOut, TimelineSample,
        },
    },
};

/// Where one capture's events go in the trace written.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// Added to every time (ns): the capture's clock onto the trace's.
    pub shift_ns: u64,
    /// Added to every pid and tid, so that the processes of captures of several hosts, whose
    /// pids may be the same, stay apart.
    pub id_offset: u32,
    /// Put before every process's name, with `: ` (`node7 rank 3: python3`).
    pub process_prefix: Option<String>,
}

/// Replays trace.json events into `writer` as `placement` says.
pub(crate) struct Replay<'w> {
    pub(crate) writer: &'w mut EventWriter<Sink>,
    pub(crate) placement: Placement,
    pub(crate) progress: Progress,
    /// The last span read, not yet written: a flow's end may follow it.
    pub(crate) held: Option<SpanOut>,
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

/// An event's `id` (`"0x1"`), a hex number.
fn hex_id(e: &RawEvent) -> Result<u64, String> {
    let id = e.id.as_deref().unwrap_or("0");
    u64::from_str_radix(id.trim_start_matches("0x"), 16)
        .map_err(|_| format!("an event whose id {id:?} is not a hex number"))
}

impl Replay<'_> {
    /// Writes the span held back, if any: once the next event is read, and at the end.
    pub(crate) fn release(&mut self) -> Result<(), String> {
        match self.held.take() {
            Some(span) => self
                .writer
                .span(&span)
                .map_err(|e| format!("writing the trace: {e}")),
            None => Ok(()),
        }
    }

    /// A pid or tid of the event, placed.
    /// The end of a flow (`f`), put on the span held before it: an arrow ends where its slice
    /// begins (a launch's GPU work, a wake-up's `runnable`).
    fn flow_end(&mut self, e: &RawEvent, (pid, tid): (u32, u32), name: &str) -> Result<(), String> {
        let (id, ts) = (hex_id(e)?, self.time(e.ts, name)?);
        let kind = FlowKind::of_id(id);
        if let Some(held) = self
            .held
            .as_mut()
            .filter(|h| (h.pid, h.tid, h.start_ns) == (pid, tid, ts))
        {
            if let EventKind::Span { flow, .. } = &mut held.kind {
                *flow = Some(Flow { id, end: true, kind });
            }
        }
        Ok(())
    }

    fn id(&self, id: Option<u64>, what: &str) -> Result<u32, String> {
        u32::try_from(id.unwrap_or(0))
            .ok()
            .and_then(|id| id.checked_add(self.placement.id_offset))
            .ok_or_else(|| format!("a {what} does not fit 32 bits"))
    }

    /// A time of the event (µs), placed (ns).
    fn time(&self, us: Option<f64>, name: &str) -> Result<u64, String> {
        us.and_then(micros_to_ns)
            .and_then(|ns| ns.checked_add(self.placement.shift_ns))
            .ok_or_else(|| format!("an event whose time is missing, negative or past 146 years ({name})"))
    }

    /// A duration (µs), in ns.
    fn duration(us: Option<f64>, name: &str) -> Result<u64, String> {
        us.and_then(micros_to_ns)
            .ok_or_else(|| format!("an event whose time is missing, negative or past 146 years ({name})"))
    }

    fn process_name(&self, name: &str) -> String {
        match &self.placement.process_prefix {
            Some(prefix) => format!("{prefix}: {name}"),
            None => name.to_string(),
        }
    }
}

impl Events for Replay<'_> {
    fn progress(&mut self) -> &mut Progress {
        &mut self.progress
    }

    fn event(&mut self, e: &RawEvent) -> Result<(), String> {
        let pid = self.id(e.pid, "pid")?;
        let tid = self.id(e.tid, "tid")?;
        let name = e.name.as_deref().unwrap_or("");
        let cat = e.cat.as_deref().unwrap_or("");
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
        let io = |r: std::io::Result<()>| r.map_err(|e| format!("writing the trace: {e}"));
        let ph = e.ph.as_deref().unwrap_or("");
        if ph == "f" {
            return self.flow_end(e, (pid, tid), name);
        }
        self.release()?;
        match ph {
            "X" => {
                let depth = args.remove("depth").and_then(|d| d.as_u64()).unwrap_or(0);
                self.held = Some(SpanOut {
                    start_ns: self.time(e.ts, name)?,
                    kind: EventKind::span(Self::duration(e.dur, name)?, depth as u32),
                    ..span(&args)
                });
                Ok(())
            }
            "s" => io(self.writer.span(&SpanOut {
                start_ns: self.time(e.ts, name)?,
                kind: EventKind::Instant {
                    flow: Some(Flow {
                        id: hex_id(e)?,
                        end: false,
                        kind: FlowKind::of_id(hex_id(e)?),
                    }),
                },
                ..span(&args)
            })),
            // A wake-up's instant: the flow start that follows it writes it again.
            "i" | "I" if cat == crate::model::wait::TIMELINE_CATEGORY && name == "wake" => Ok(()),
            "i" | "I" if cat == "sample" => {
                let stack = args.get("stack").and_then(Value::as_str).unwrap_or(name);
                let sample = TimelineSample {
                    leaf: name.into(),
                    folded: stack.into(),
                    frames: folded_frames(stack),
                };
                io(self.writer.sample(pid, tid, self.time(e.ts, name)?, &sample))
            }
            "i" | "I" => io(self.writer.span(&SpanOut {
                start_ns: self.time(e.ts, name)?,
                kind: EventKind::INSTANT,
                ..span(&args)
            })),
            // An integer `bytes` alone: a CUDA memory counter, an integer in a Perfetto trace.
            "C" if args.len() == 1 && args.get("bytes").is_some_and(Value::is_u64) => {
                io(self.writer.span(&SpanOut {
                    start_ns: self.time(e.ts, name)?,
                    kind: EventKind::Counter(args.get("bytes").and_then(Value::as_u64).unwrap_or(0)),
                    ..span(&Map::new())
                }))
            }
            // A thread's counter (off-CPU short waits): the tid it was recorded with in its name.
            "C" if cat == crate::model::wait::TIMELINE_CATEGORY => {
                let recorded_tid = e.tid.unwrap_or(0) as u32;
                io(self.writer.span(&SpanOut {
                    start_ns: self.time(e.ts, name)?,
                    name: Some(thread_counter_name(name, recorded_tid).into()),
                    kind: EventKind::ThreadCounter(args.get("value").and_then(Value::as_u64).unwrap_or(0)),
                    ..span(&Map::new())
                }))
            }
            "C" => {
                let values: Vec<(String, f64)> = args
                    .iter()
                    .map(|(series, v)| (series.clone(), v.as_f64().unwrap_or(0.0)))
                    .collect();
                io(self.writer.counter(pid, name, self.time(e.ts, name)?, &values))
            }
            ph @ ("b" | "e") => {
                let edge = AsyncEdge {
                    begin: ph == "b",
                    id: hex_id(e)?,
                };
                io(self.writer.span(&SpanOut {
                    start_ns: self.time(e.ts, name)?,
                    kind: EventKind::Async(edge),
                    ..span(&args)
                }))
            }
            "M" => {
                let named = args.get("name").and_then(Value::as_str);
                match (name, named) {
                    ("process_name", Some(n)) => io(self.writer.process_name(pid, &self.process_name(n))),
                    ("thread_name", Some(n)) => io(self.writer.thread_name(pid, tid, n)),
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}
