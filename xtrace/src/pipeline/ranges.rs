//! Annotation ranges from the tool library's `xtrace:*` USDT probes (NVTX, ITT and the
//! `xtrace_range_*` API): push/pop ranges become nested spans per thread and domain, start/end
//! ranges async spans that may end on another thread (`"ph":"b"`/`"e"`), marks instant events,
//! thread names rename trace.json's thread tracks. Statistics are kept per range name.
use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;
use xtrace_common::ranges;

use crate::{
    pipeline::{
        stats::{Distribution, ProbeStats},
        usdt::RangeArg,
        writer::{AsyncEdge, EventKind, SpanOut},
    },
    probes::{ranges::Wanted, usdt::spec::RangeOp},
};

/// Where a range came from: the first argument of every tool-library probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Xtrace,
    Nvtx,
    Itt,
}

impl Source {
    fn from_arg(value: u64) -> Option<Self> {
        match value {
            ranges::SOURCE_XTRACE => Some(Source::Xtrace),
            ranges::SOURCE_NVTX => Some(Source::Nvtx),
            ranges::SOURCE_ITT => Some(Source::Itt),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Source::Xtrace => "xtrace",
            Source::Nvtx => "nvtx",
            Source::Itt => "itt",
        }
    }
}

impl Wanted {
    fn keeps(self, source: Source) -> bool {
        match source {
            Source::Xtrace => self.xtrace,
            Source::Nvtx => self.nvtx,
            Source::Itt => self.itt,
        }
    }
}

/// A range open on a thread's stack of one domain.
#[derive(Debug)]
struct Open {
    start_ns: u64,
    name: Option<String>,
}

/// A start/end range waiting for its end.
#[derive(Debug)]
struct AsyncOpen {
    start_ns: u64,
    tid: u32,
    source: Source,
    domain: Option<String>,
    name: Option<String>,
}

/// Statistics are kept per (source, domain, name, kind).
type StatKey = (Source, Option<String>, String, &'static str);

/// What a hit asks of the pipeline.
#[derive(Debug, PartialEq, Eq)]
pub enum Output {
    Nothing,
    /// Events for trace.json.
    Events(Vec<SpanOut>),
    /// The thread `tid` of process `pid` is called `name` from now on.
    ThreadName {
        pid: u32,
        tid: u32,
        name: String,
    },
}

/// A range's name when the call gave none.
const UNNAMED: &str = "(unnamed)";

#[derive(Debug, Default)]
pub struct Ranges {
    wanted: Wanted,
    /// When the capture began attaching (CLOCK_MONOTONIC ns): a `range_pop` whose range began
    /// earlier pairs with a push from before the capture.
    since_ns: u64,
    /// Open push/pop ranges per (pid, tid, source, domain), innermost last.
    stacks: HashMap<(u32, u32, Source, Option<String>), Vec<Open>>,
    /// Open start/end ranges per (pid, source, id): NVTX and ITT number their ranges apart.
    open_async: HashMap<(u32, Source, u64), AsyncOpen>,
    /// Open start/end ranges of id 0 per pid and source, oldest first, with the id each has in trace.json:
    /// libnvToolsExt's probes see no range id (it returns 0 when no NVTX tool is loaded), so an
    /// end of id 0, or of an id not open, closes the process's oldest such range.
    unnumbered: HashMap<(u32, Source), VecDeque<(u64, AsyncOpen)>>,
    /// Ids given to ranges of id 0.
    next_unnumbered: u64,
    stats: HashMap<StatKey, ProbeStats>,
    /// Pops and ends whose range began before the capture.
    pub unpaired: u64,
    /// Whether ranges were asked for (`--ranges`, `--nvtx`, `--itt`): summary.json has their
    /// sections only then.
    asked: bool,
}

/// One range name's statistics in summary.json.
#[derive(Clone, Debug, Serialize)]
pub struct RangeSummary {
    pub name: String,
    /// The NVTX or ITT domain; null for the default one.
    pub domain: Option<String>,
    pub source: Source,
    /// `push` (nested per thread), `start` (start/end, may cross threads) or `mark` (instants:
    /// count only).
    pub kind: &'static str,
    #[serde(flatten)]
    pub stats: Distribution,
}

fn text(args: &[RangeArg], i: usize) -> Option<String> {
    match args.get(i) {
        Some(RangeArg::Str(s)) => s.clone(),
        _ => None,
    }
}

fn int(args: &[RangeArg], i: usize) -> u64 {
    match args.get(i) {
        Some(RangeArg::Int(v)) => *v,
        _ => 0,
    }
}

/// The async id in trace.json: the tool's id is unique within its process and source.
fn trace_id(pid: u32, source: Source, id: u64) -> u64 {
    (u64::from(pid) << 40) ^ ((source as u64) << 37) ^ id
}

/// Where the ids trace.json gives ranges of id 0 begin (above any id the tool library hands out).
const UNNUMBERED_IDS: u64 = 1 << 39;

impl Ranges {
    /// `since_ns`: CLOCK_MONOTONIC before the first probe was attached.
    pub fn new(wanted: Wanted, since_ns: u64) -> Self {
        Ranges {
            wanted,
            since_ns,
            asked: true,
            ..Default::default()
        }
    }

    /// No range asked for: only the tool library's other range probes (`gpu_records`) come.
    pub fn unasked(since_ns: u64) -> Self {
        Ranges {
            since_ns,
            ..Default::default()
        }
    }

    fn count(&mut self, key: StatKey, duration_ns: u64) {
        self.stats.entry(key).or_default().add(duration_ns);
    }

    /// A push/pop range that ended: counted, and its span for trace.json.
    fn closed(
        &mut self,
        source: Source,
        domain: Option<String>,
        name: Option<String>,
        (start_ns, end_ns, depth): (u64, u64, u32),
        span: impl Fn(u64, &Option<String>, &Option<String>) -> SpanOut,
    ) -> Output {
        let duration = end_ns.saturating_sub(start_ns);
        let key_name = name.clone().unwrap_or_else(|| UNNAMED.into());
        self.count((source, domain.clone(), key_name, "push"), duration);
        Output::Events(vec![SpanOut {
            kind: EventKind::span(duration, depth),
            ..span(start_ns, &name, &domain)
        }])
    }

    /// An async range started by thread `tid` of `pid` at `ts_ns`: kept open under its id, or in
    /// the process's queue of ranges started with id 0.
    fn start(&mut self, source: Source, args: &[RangeArg], (pid, tid, ts_ns): (u32, u32, u64)) {
        let open = AsyncOpen {
            start_ns: ts_ns,
            tid,
            source,
            domain: text(args, 1),
            name: text(args, 2),
        };
        match int(args, 3) {
            0 => {
                self.next_unnumbered += 1;
                let id = UNNUMBERED_IDS | self.next_unnumbered;
                self.unnumbered
                    .entry((pid, source))
                    .or_default()
                    .push_back((id, open));
            }
            id => {
                // A range of that id still open never ends now (its process started its
                // numbering again: an exec): it is counted as unpaired.
                if self.open_async.insert((pid, source, id), open).is_some() {
                    self.unpaired += 1;
                }
            }
        }
    }

    /// An async range of `pid` that ended at `ts_ns`: counted, and its begin and end for
    /// trace.json.
    fn end(
        &mut self,
        source: Source,
        args: &[RangeArg],
        (pid, ts_ns): (u32, u64),
        span: impl Fn(u64, &Option<String>, &Option<String>) -> SpanOut,
    ) -> Output {
        // An end whose id is unknown closes the oldest range started with id 0: another
        // NVTX tool than xtrace's hands out ids that libnvToolsExt's probes never saw.
        let id = int(args, 1);
        let found = self
            .open_async
            .remove(&(pid, source, id))
            .map(|open| (id, open))
            .or_else(|| {
                self.unnumbered
                    .get_mut(&(pid, source))
                    .and_then(VecDeque::pop_front)
            });
        let Some((id, open)) = found else {
            self.unpaired += 1;
            return Output::Nothing;
        };
        let duration = ts_ns.saturating_sub(open.start_ns);
        let name = open.name.clone().unwrap_or_else(|| UNNAMED.into());
        self.count((open.source, open.domain.clone(), name, "start"), duration);
        let edge = |begin| {
            EventKind::Async(AsyncEdge {
                begin,
                id: trace_id(pid, source, id),
            })
        };
        let begin = SpanOut {
            tid: open.tid,
            kind: edge(true),
            ..span(open.start_ns, &open.name, &open.domain)
        };
        let end = SpanOut {
            kind: edge(false),
            values: None,
            ..span(ts_ns, &open.name, &open.domain)
        };
        Output::Events(vec![begin, end])
    }

    /// One hit of probe `probe` by thread `tid` of `pid` at `ts_ns`.
    pub fn hit(
        &mut self,
        probe: u32,
        op: RangeOp,
        args: &[RangeArg],
        (pid, tid, ts_ns): (u32, u32, u64),
    ) -> Output {
        let Some(source) = Source::from_arg(int(args, 0)) else {
            return Output::Nothing;
        };
        if !self.wanted.keeps(source) {
            return Output::Nothing;
        }
        let span = |start_ns: u64, name: &Option<String>, domain: &Option<String>| SpanOut {
            probe: probe as usize,
            pid,
            tid,
            start_ns,
            name: Some(name.as_deref().unwrap_or(UNNAMED).into()),
            cat: Some(domain.as_deref().unwrap_or(source.name()).into()),
            values: Some(format!(",\"source\":\"{}\"", source.name()).into_boxed_str()),
            ..Default::default()
        };
        match op {
            RangeOp::Push => {
                let (domain, name) = (text(args, 1), text(args, 2));
                self.stacks
                    .entry((pid, tid, source, domain))
                    .or_default()
                    .push(Open {
                        start_ns: ts_ns,
                        name,
                    });
                Output::Nothing
            }
            RangeOp::Pop => {
                let domain = text(args, 1);
                let key = (pid, tid, source, domain);
                let Some((open, depth)) = self
                    .stacks
                    .get_mut(&key)
                    .and_then(|stack| Some((stack.pop()?, stack.len() as u32)))
                else {
                    self.unpaired += 1;
                    return Output::Nothing;
                };
                let domain = key.3;
                self.closed(source, domain, open.name, (open.start_ns, ts_ns, depth), span)
            }
            RangeOp::Closed => {
                let (domain, name, start_ns) = (text(args, 1), text(args, 2), int(args, 3));
                // 0: the library kept no push for it; before the capture: its entry is a push from
                // an earlier session whose pop went untraced. Either way the range began before.
                if start_ns == 0 || start_ns < self.since_ns {
                    self.unpaired += 1;
                    return Output::Nothing;
                }
                let depth = u32::try_from(int(args, 4)).unwrap_or(u32::MAX);
                self.closed(source, domain, name, (start_ns.min(ts_ns), ts_ns, depth), span)
            }
            RangeOp::Start => {
                self.start(source, args, (pid, tid, ts_ns));
                Output::Nothing
            }
            RangeOp::End => self.end(source, args, (pid, ts_ns), span),
            RangeOp::Mark => {
                let (domain, name) = (text(args, 1), text(args, 2));
                let key_name = name.clone().unwrap_or_else(|| UNNAMED.into());
                self.count((source, domain.clone(), key_name, "mark"), 0);
                Output::Events(vec![SpanOut {
                    kind: EventKind::INSTANT,
                    ..span(ts_ns, &name, &domain)
                }])
            }
            RangeOp::ThreadName => match text(args, 2) {
                Some(name) => {
                    // 0 (or our own tid) names the calling thread; NVTX passes an OS thread id.
                    let named = match int(args, 1) {
                        0 => tid,
                        other => u32::try_from(other).unwrap_or(tid),
                    };
                    Output::ThreadName {
                        pid,
                        tid: named,
                        name,
                    }
                }
                None => Output::Nothing,
            },
            // Their hits go to the kernel program `gpu_records`, never to `usdt_hit`.
            RangeOp::GpuRecords | RangeOp::GpuDrain => Output::Nothing,
        }
    }

    /// Whether a hit after the stop at `stop_ns` ends a range that began in the capture, before
    /// the stop: a pop or an end of a range xtrace saw begin, or the tool library's pop of a range
    /// it kept from then. Such a range is recorded, as a call in flight at the stop still ends
    /// its span; any other hit after the stop is left out.
    pub fn ends_open(&self, op: RangeOp, args: &[RangeArg], (pid, tid): (u32, u32), stop_ns: u64) -> bool {
        let Some(source) = Source::from_arg(int(args, 0)) else {
            return false;
        };
        if !self.wanted.keeps(source) {
            return false;
        }
        match op {
            RangeOp::Pop => self
                .stacks
                .get(&(pid, tid, source, text(args, 1)))
                .is_some_and(|stack| !stack.is_empty()),
            RangeOp::Closed => {
                let start_ns = int(args, 3);
                start_ns != 0 && (self.since_ns..=stop_ns).contains(&start_ns)
            }
            RangeOp::End => {
                self.open_async.contains_key(&(pid, source, int(args, 1)))
                    || self
                        .unnumbered
                        .get(&(pid, source))
                        .is_some_and(|open| !open.is_empty())
            }
            RangeOp::Push
            | RangeOp::Start
            | RangeOp::Mark
            | RangeOp::ThreadName
            | RangeOp::GpuRecords
            | RangeOp::GpuDrain => false,
        }
    }

    /// Ranges still open at the stop (never ended during the capture).
    pub fn still_open(&self) -> u64 {
        self.stacks.values().map(|s| s.len() as u64).sum::<u64>()
            + self.open_async.len() as u64
            + self.unnumbered.values().map(|q| q.len() as u64).sum::<u64>()
    }

    /// summary.json's `ranges` and `ranges_unpaired` (pops and ends whose push or start came
    /// before the capture, and ranges still open), when ranges were asked for.
    pub fn sections(&self) -> Option<(Vec<RangeSummary>, u64)> {
        self.asked
            .then(|| (self.summary(), self.unpaired + self.still_open()))
    }

    /// Per range name, sorted by total time, largest first (then by name).
    pub fn summary(&self) -> Vec<RangeSummary> {
        let sorted: BTreeMap<&StatKey, &ProbeStats> = self.stats.iter().collect();
        let mut ranges: Vec<RangeSummary> = sorted
            .into_iter()
            .map(|((source, domain, name, kind), stats)| RangeSummary {
                name: name.clone(),
                domain: domain.clone(),
                source: *source,
                kind,
                stats: stats.distribution(),
            })
            .collect();
        ranges.sort_by_key(|r| std::cmp::Reverse(r.stats.total_ns));
        ranges
    }
}

#[cfg(test)]
#[path = "ranges_tests.rs"]
mod tests;
