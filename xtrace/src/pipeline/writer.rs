//! The trace writer thread: the reader hands it spans in batches over a bounded channel, so writing
//! the trace never stalls draining the ring buffer (back-pressure only when the disk is slower
//! than the event stream for longer than the channel holds). The thread drives an [`EventWriter`]:
//! trace.json (`chrome`) or trace.perfetto-trace (`perfetto`).
use std::{
    io::{self, Write},
    sync::mpsc::{sync_channel, SyncSender},
    thread::JoinHandle,
};

use super::{chrome::ChromeWriter, perfetto::PerfettoWriter};
use crate::{clock::Snapshot, output::TraceFormat};

/// One trace event for the writer: a span, an instant, a counter's value or one end of an async
/// span, as its [`EventKind`] says; where and when it happened, and how it is named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanOut {
    pub probe: usize,
    pub pid: u32,
    pub tid: u32,
    pub start_ns: u64,
    pub kind: EventKind,
    /// Captured values as trace.json `args` members (`"arg0":1,"ret":0`), if the probe has any.
    pub values: Option<Box<str>>,
    /// A name that replaces the probe's (a USDT span named by an argument).
    pub name: Option<Box<str>>,
    /// A category that replaces the probe's (a range's domain).
    pub cat: Option<Box<str>>,
}

/// What a trace event is; each kind carries only what its writers read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A completed call or slice (`"ph":"X"`) of `dur_ns` from `start_ns`, at nesting `depth`;
    /// it may end a flow arrow at its start (a GPU launch's, a wake-up's on the woken thread's
    /// wait for a CPU).
    Span {
        dur_ns: u64,
        depth: u32,
        flow: Option<Flow>,
    },
    /// An instant event (`"ph":"i"`) at `start_ns`; it may start a flow arrow.
    Instant { flow: Option<Flow> },
    /// A counter sample (`"ph":"C"`) of the process's track named `name`, at `start_ns`.
    Counter(u64),
    /// A counter sample of the thread's own track named `name`, which ends with its unit
    /// (`short waits (ns)`), at `start_ns`: in trace.json, whose counters are a process's, named
    /// with the tid before the unit (see [`json_counter_name`]).
    ThreadCounter(u64),
    /// One end of an async span (`"ph":"b"`/`"e"`) at `start_ns`, told apart by its id.
    Async(AsyncEdge),
}

impl Default for EventKind {
    fn default() -> Self {
        EventKind::Span {
            dur_ns: 0,
            depth: 0,
            flow: None,
        }
    }
}

impl EventKind {
    /// A span of `dur_ns` at `depth`, ending no flow.
    pub fn span(dur_ns: u64, depth: u32) -> Self {
        EventKind::Span {
            dur_ns,
            depth,
            flow: None,
        }
    }

    /// Whether it is an instant (`"ph":"i"`).
    pub fn is_instant(self) -> bool {
        matches!(self, EventKind::Instant { .. })
    }

    /// An instant starting no flow.
    pub const INSTANT: EventKind = EventKind::Instant { flow: None };
}

impl SpanOut {
    /// Its duration: a span's own, 0 for any other kind.
    pub fn dur_ns(&self) -> u64 {
        match self.kind {
            EventKind::Span { dur_ns, .. } => dur_ns,
            _ => 0,
        }
    }

    /// Its nesting depth: a span's own, 0 for any other kind.
    pub fn depth(&self) -> u32 {
        match self.kind {
            EventKind::Span { depth, .. } => depth,
            _ => 0,
        }
    }

    /// Which end of which async span it is, if it is one.
    pub fn edge(&self) -> Option<AsyncEdge> {
        match self.kind {
            EventKind::Async(edge) => Some(edge),
            _ => None,
        }
    }

    /// The flow arrow it starts or ends, if any.
    pub fn flow(&self) -> Option<Flow> {
        match self.kind {
            EventKind::Span { flow, .. } | EventKind::Instant { flow } => flow,
            EventKind::Counter(_) | EventKind::ThreadCounter(_) | EventKind::Async(_) => None,
        }
    }
}

/// trace.json's name of thread `tid`'s counter track `name`: the tid before the unit the name
/// ends with (`short waits 4213 (ns)`), so that viewers, which keep a counter per process and
/// name, keep the threads' apart.
pub fn json_counter_name(name: &str, tid: u32) -> String {
    match name.rsplit_once(" (") {
        Some((base, unit)) => format!("{base} {tid} ({unit}"),
        None => format!("{name} {tid}"),
    }
}

/// The thread counter track's name that [`json_counter_name`] made `json` of, for thread `tid`.
pub fn thread_counter_name(json: &str, tid: u32) -> String {
    let with_tid = format!(" {tid}");
    match json.rsplit_once(" (") {
        Some((base, unit)) => format!("{} ({unit}", base.strip_suffix(&with_tid).unwrap_or(base)),
        None => json.strip_suffix(&with_tid).unwrap_or(json).to_string(),
    }
}

/// One end of a flow arrow between two events, told apart by its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    pub id: u64,
    pub end: bool,
    pub kind: FlowKind,
}

/// What a flow arrow joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowKind {
    /// A CUDA launch to the GPU work it launched: it ends where the slice begins.
    Launch,
    /// A thread's wake-up of another to the woken thread's wait for a CPU (`runnable`), which
    /// begins at the wake-up: it ends where that slice begins, so that it goes forward in time.
    Wake,
}

impl FlowKind {
    /// Wake-up flows' ids have this bit set, which no GPU launch's (a pid in the high 32 bits)
    /// has: a trace read back tells the two apart by it.
    pub const WAKE_BIT: u64 = 1 << 63;

    /// The kind of the flow with id `id`.
    pub fn of_id(id: u64) -> Self {
        match id & Self::WAKE_BIT {
            0 => FlowKind::Launch,
            _ => FlowKind::Wake,
        }
    }

    /// trace.json's name and category of its flow events (a flow there is told apart by id,
    /// category and name together), JSON-quoted.
    pub fn quoted_name_cat(self) -> (&'static str, &'static str) {
        match self {
            FlowKind::Launch => ("\"launch\"", "\"gpu\""),
            FlowKind::Wake => ("\"wake\"", "\"off_cpu\""),
        }
    }
}

/// A sampled stack as the timeline shows it: trace.json's innermost frame and innermost frames
/// folded, and a Perfetto trace's frames (outermost first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimelineSample {
    pub leaf: String,
    pub folded: String,
    pub frames: Vec<super::perfetto::SampleFrame>,
}

/// One end of an async span (a start/end range, which may end on another thread).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEdge {
    pub begin: bool,
    pub id: u64,
}

/// Spans per batch handed to the writer thread.
const BATCH: usize = 4096;
/// Batches in flight before the reader waits for the writer: 64K spans (~65 ms at 1 M spans/s),
/// enough to ride out the writer's stalls while keeping what waits in memory near 8 MB (256
/// batches could hold a million spans, >100 MB, behind a slow disk or --gzip).
const BATCHES_IN_FLIGHT: usize = 16;

pub struct TraceWriter<W: Write + Send + 'static> {
    /// None once finishing (closing the channel ends the writer thread's loop).
    tx: Option<SyncSender<Vec<SpanOut>>>,
    /// None once joined (after the thread stopped on an error).
    thread: Option<JoinHandle<io::Result<EventWriter<W>>>>,
    batch: Vec<SpanOut>,
}

impl<W: Write + Send + 'static> TraceWriter<W> {
    /// Starts the writer thread on `out`, writing the trace in `format`, its header for `probes`
    /// (name, category).
    pub fn spawn(out: W, probes: &[(&str, &str)], format: TraceFormat) -> io::Result<Self> {
        let mut trace = EventWriter::new(out, probes, format)?;
        let (tx, rx) = sync_channel::<Vec<SpanOut>>(BATCHES_IN_FLIGHT);
        let thread = std::thread::Builder::new()
            .name("xtrace-writer".into())
            .spawn(move || {
                for batch in rx {
                    for s in batch {
                        trace.span(&s)?;
                    }
                }
                Ok(trace)
            })?;
        Ok(TraceWriter {
            tx: Some(tx),
            thread: Some(thread),
            batch: Vec::with_capacity(BATCH),
        })
    }

    pub fn span(&mut self, span: SpanOut) -> io::Result<()> {
        self.batch.push(span);
        if self.batch.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Hands the pending batch to the writer thread.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        if self.tx.as_ref().is_some_and(|tx| tx.send(batch).is_ok()) {
            return Ok(());
        }
        // A closed channel means the writer thread stopped on an error: report that error.
        match self.join() {
            Err(e) => Err(e),
            Ok(_) => Err(io::Error::other("the trace writer stopped")),
        }
    }

    fn join(&mut self) -> io::Result<EventWriter<W>> {
        let thread = self
            .thread
            .take()
            .ok_or_else(|| io::Error::other("the trace writer stopped"))?;
        thread
            .join()
            .map_err(|_| io::Error::other("the trace writer panicked"))?
    }

    /// Sends what is pending, waits for the writer thread, and returns the trace for its metadata
    /// and closing; the writer's own error, if it had one.
    pub fn finish(mut self) -> io::Result<EventWriter<W>> {
        self.flush()?;
        self.tx = None;
        self.join()
    }
}

/// The writer of one trace format.
enum Format<W: Write> {
    Chrome(ChromeWriter<W>),
    Perfetto(Box<PerfettoWriter<W>>),
}

/// The trace in the format asked for, and the clock snapshots taken as it began and ended.
pub struct EventWriter<W: Write> {
    format: Format<W>,
    clocks: Vec<Snapshot>,
}

/// Calls the same method of whichever format's writer it is.
macro_rules! each {
    ($self:expr, $w:ident => $call:expr) => {
        match &mut $self.format {
            Format::Chrome($w) => $call,
            Format::Perfetto($w) => $call,
        }
    };
}

impl<W: Write> EventWriter<W> {
    /// Starts the trace in `format`; `probes` are (name, category) by probe id. The clocks are
    /// read now: the start's snapshot.
    pub fn new(out: W, probes: &[(&str, &str)], format: TraceFormat) -> io::Result<Self> {
        Self::starting(out, probes, format, crate::clock::snapshot())
    }

    /// [`EventWriter::new`] with the start's clocks read earlier: those of the capture a trace
    /// is written again from (`xtrace convert`, `xtrace merge`).
    pub fn starting(
        out: W,
        probes: &[(&str, &str)],
        format: TraceFormat,
        start: Snapshot,
    ) -> io::Result<Self> {
        let format = match format {
            TraceFormat::Json => Format::Chrome(ChromeWriter::new(out, probes)?),
            TraceFormat::Perfetto => Format::Perfetto(Box::new(PerfettoWriter::new(out, probes, &start)?)),
        };
        Ok(EventWriter {
            format,
            clocks: vec![start],
        })
    }

    pub fn span(&mut self, span: &SpanOut) -> io::Result<()> {
        each!(self, w => w.span(span))
    }

    pub fn counter(&mut self, pid: u32, name: &str, ts_ns: u64, values: &[(String, f64)]) -> io::Result<()> {
        each!(self, w => w.counter(pid, name, ts_ns, values))
    }

    /// One CPU sample: in trace.json an instant named `leaf` with the folded `stack`, in a
    /// Perfetto trace a sample whose call stack is `frames` (outermost first).
    pub fn sample(&mut self, pid: u32, tid: u32, ts_ns: u64, sample: &TimelineSample) -> io::Result<()> {
        match &mut self.format {
            Format::Chrome(w) => w.sample(pid, tid, ts_ns, &sample.leaf, &sample.folded),
            Format::Perfetto(w) => w.sample(pid, tid, ts_ns, &sample.frames),
        }
    }

    pub fn process_name(&mut self, pid: u32, name: &str) -> io::Result<()> {
        each!(self, w => w.process_name(pid, name))
    }

    pub fn thread_name(&mut self, pid: u32, tid: u32, name: &str) -> io::Result<()> {
        each!(self, w => w.thread_name(pid, tid, name))
    }

    /// Reads the clocks as the trace ends; a Perfetto trace gets them as its last clock snapshot.
    pub fn end_clocks(&mut self) -> io::Result<()> {
        self.ending(crate::clock::snapshot())
    }

    /// [`EventWriter::end_clocks`] with the end's clocks read earlier.
    pub fn ending(&mut self, end: Snapshot) -> io::Result<()> {
        self.clocks.push(end);
        match &mut self.format {
            Format::Chrome(_) => Ok(()),
            Format::Perfetto(w) => w.clock_snapshot(&end),
        }
    }

    /// The clock snapshots taken: at the start, and at the end once [`Self::end_clocks`] ran.
    pub fn clocks(&self) -> &[Snapshot] {
        &self.clocks
    }

    /// The spans written so far: functions', USDT begin/end pairs', ranges'.
    pub fn spans(&self) -> u64 {
        match &self.format {
            Format::Chrome(w) => w.spans(),
            Format::Perfetto(w) => w.spans(),
        }
    }

    /// Ends the trace and returns the output, flushed.
    pub fn finish(self) -> io::Result<W> {
        match self.format {
            Format::Chrome(w) => w.finish(),
            Format::Perfetto(w) => w.finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_span_in_order_across_batches() {
        let mut writer = TraceWriter::spawn(Vec::new(), &[("work", "uprobe")], TraceFormat::Json).unwrap();
        let n = BATCH * 3 + 17;
        for i in 0..n {
            let span = SpanOut {
                probe: 0,
                pid: 1,
                tid: 2,
                start_ns: i as u64 * 1000,
                kind: EventKind::span(5, 0),
                values: None,
                ..Default::default()
            };
            writer.span(span.clone()).unwrap();
        }
        let out = writer.finish().unwrap().finish().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let events = doc["traceEvents"].as_array().unwrap();
        assert_eq!(events.len(), n);
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e["ts"].as_f64(), Some(i as f64), "span {i} out of order");
        }
    }

    /// A writer that fails after `budget` bytes, like a full disk.
    struct Full {
        budget: usize,
    }

    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if buf.len() > self.budget {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.budget -= buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn reports_the_writers_error() {
        let mut writer =
            TraceWriter::spawn(Full { budget: 1000 }, &[("work", "uprobe")], TraceFormat::Json).unwrap();
        let span = SpanOut {
            probe: 0,
            pid: 1,
            tid: 2,
            start_ns: 0,
            kind: EventKind::span(5, 0),
            values: None,
            ..Default::default()
        };
        let mut first = None;
        for _ in 0..100_000 {
            if let Err(e) = writer.span(span.clone()) {
                first = Some(e);
                break;
            }
        }
        assert_eq!(
            first.expect("a full output must fail").raw_os_error(),
            Some(libc::ENOSPC)
        );
        let err = writer
            .finish()
            .err()
            .expect("finishing after a failure fails too");
        assert_eq!(err.to_string(), "the trace writer stopped");
    }

    /// A thread's counter in trace.json has the tid before its unit, and reads back without it.
    #[test]
    fn a_thread_counter_is_named_with_its_tid_in_trace_json() {
        assert_eq!(json_counter_name("short waits (ns)", 42), "short waits 42 (ns)");
        assert_eq!(json_counter_name("waits", 42), "waits 42");
        assert_eq!(thread_counter_name("short waits 42 (ns)", 42), "short waits (ns)");
        assert_eq!(thread_counter_name("waits 42", 42), "waits");
        // Another thread's tid is not taken out.
        assert_eq!(thread_counter_name("waits 42 (ns)", 7), "waits 42 (ns)");
    }
}
