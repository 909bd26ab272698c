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
        writer::{AsyncEdge, SpanOut},
    },
    probes::usdt::spec::RangeOp,
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

/// Which sources a recording keeps (`--ranges`, `--nvtx`, `--itt`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    pub xtrace: bool,
    pub nvtx: bool,
    pub itt: bool,
}

impl Wanted {
    pub const ALL: Wanted = Wanted {
        xtrace: true,
        nvtx: true,
        itt: true,
    };

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
    /// Open start/end ranges per (pid, id).
    open_async: HashMap<(u32, u64), AsyncOpen>,
    /// Open start/end ranges of id 0 per pid, oldest first, with the id each has in trace.json:
    /// libnvToolsExt's probes see no range id (it returns 0 when no NVTX tool is loaded), so an
    /// end of id 0, or of an id not open, closes the process's oldest such range.
    unnumbered: HashMap<u32, VecDeque<(u64, AsyncOpen)>>,
    /// Ids given to ranges of id 0.
    next_unnumbered: u64,
    stats: HashMap<StatKey, ProbeStats>,
    /// Pops and ends whose range began before the capture.
    pub unpaired: u64,
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

/// The async id in trace.json: the tool's id is unique within its process.
fn trace_id(pid: u32, id: u64) -> u64 {
    (u64::from(pid) << 40) ^ id
}

/// Where the ids trace.json gives ranges of id 0 begin (above any id the tool library hands out).
const UNNUMBERED_IDS: u64 = 1 << 39;

impl Ranges {
    /// `since_ns`: CLOCK_MONOTONIC before the first probe was attached.
    pub fn new(wanted: Wanted, since_ns: u64) -> Self {
        Ranges {
            wanted,
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
            dur_ns: duration,
            depth,
            ..span(start_ns, &name, &domain)
        }])
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
                        self.unnumbered.entry(pid).or_default().push_back((id, open));
                    }
                    id => {
                        self.open_async.insert((pid, id), open);
                    }
                }
                Output::Nothing
            }
            RangeOp::End => {
                // An end whose id is unknown closes the oldest range started with id 0: another
                // NVTX tool than xtrace's hands out ids that libnvToolsExt's probes never saw.
                let id = int(args, 1);
                let found = self
                    .open_async
                    .remove(&(pid, id))
                    .map(|open| (id, open))
                    .or_else(|| self.unnumbered.get_mut(&pid).and_then(VecDeque::pop_front));
                let Some((id, open)) = found else {
                    self.unpaired += 1;
                    return Output::Nothing;
                };
                let duration = ts_ns.saturating_sub(open.start_ns);
                let name = open.name.clone().unwrap_or_else(|| UNNAMED.into());
                self.count((open.source, open.domain.clone(), name, "start"), duration);
                let edge = |begin| {
                    Some(AsyncEdge {
                        begin,
                        id: trace_id(pid, id),
                    })
                };
                let begin = SpanOut {
                    tid: open.tid,
                    edge: edge(true),
                    ..span(open.start_ns, &open.name, &open.domain)
                };
                let end = SpanOut {
                    edge: edge(false),
                    values: None,
                    ..span(ts_ns, &open.name, &open.domain)
                };
                Output::Events(vec![begin, end])
            }
            RangeOp::Mark => {
                let (domain, name) = (text(args, 1), text(args, 2));
                let key_name = name.clone().unwrap_or_else(|| UNNAMED.into());
                self.count((source, domain.clone(), key_name, "mark"), 0);
                Output::Events(vec![SpanOut {
                    instant: true,
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
        }
    }

    /// Ranges still open at the stop (never ended during the capture).
    pub fn still_open(&self) -> u64 {
        self.stacks.values().map(|s| s.len() as u64).sum::<u64>()
            + self.open_async.len() as u64
            + self.unnumbered.values().map(|q| q.len() as u64).sum::<u64>()
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
mod tests {
    use super::*;

    fn s(text: &str) -> RangeArg {
        RangeArg::Str(Some(text.into()))
    }

    const NVTX: RangeArg = RangeArg::Int(2);
    const NONE: RangeArg = RangeArg::Str(None);

    fn events(output: Output) -> Vec<SpanOut> {
        match output {
            Output::Events(events) => events,
            other => panic!("expected events, got {other:?}"),
        }
    }

    #[test]
    fn push_pop_nest_per_thread_and_domain() {
        let mut r = Ranges::new(
            Wanted {
                nvtx: true,
                ..Default::default()
            },
            0,
        );
        assert_eq!(
            r.hit(0, RangeOp::Push, &[NVTX, NONE, s("outer")], (1, 1, 10)),
            Output::Nothing
        );
        assert_eq!(
            r.hit(0, RangeOp::Push, &[NVTX, NONE, s("inner")], (1, 1, 20)),
            Output::Nothing
        );
        // Another domain's stack and another thread's stack are separate.
        r.hit(0, RangeOp::Push, &[NVTX, s("io"), s("read")], (1, 1, 25));
        r.hit(0, RangeOp::Push, &[NVTX, NONE, s("other")], (1, 2, 26));
        let inner = events(r.hit(1, RangeOp::Pop, &[NVTX, NONE], (1, 1, 30)));
        assert_eq!(
            (
                inner[0].name.as_deref(),
                inner[0].start_ns,
                inner[0].dur_ns,
                inner[0].depth
            ),
            (Some("inner"), 20, 10, 1)
        );
        assert_eq!(inner[0].cat.as_deref(), Some("nvtx"));
        let read = events(r.hit(1, RangeOp::Pop, &[NVTX, s("io")], (1, 1, 35)));
        assert_eq!(
            (read[0].name.as_deref(), read[0].cat.as_deref()),
            (Some("read"), Some("io"))
        );
        let outer = events(r.hit(1, RangeOp::Pop, &[NVTX, NONE], (1, 1, 40)));
        assert_eq!((outer[0].depth, outer[0].dur_ns), (0, 30));
        assert_eq!(r.hit(1, RangeOp::Pop, &[NVTX, NONE], (1, 1, 50)), Output::Nothing);
        assert_eq!(r.unpaired, 1);
        assert_eq!(r.still_open(), 1, "thread 2's range");
        let summary = r.summary();
        assert_eq!(summary[0].name, "outer");
        assert_eq!(summary.len(), 3);
    }

    #[test]
    fn a_pop_with_its_start_is_a_range_unless_it_began_before_the_capture() {
        let mut r = Ranges::new(Wanted::ALL, 100);
        let closed = |r: &mut Ranges, name: RangeArg, start: u64, end: u64| {
            let args = [
                RangeArg::Int(1),
                NONE,
                name,
                RangeArg::Int(start),
                RangeArg::Int(1),
            ];
            r.hit(0, RangeOp::Closed, &args, (1, 1, end))
        };
        let step = events(closed(&mut r, s("step"), 150, 200));
        assert_eq!(
            (
                step[0].name.as_deref(),
                step[0].start_ns,
                step[0].dur_ns,
                step[0].depth,
                step[0].cat.as_deref()
            ),
            (Some("step"), 150, 50, 1, Some("xtrace"))
        );
        // A push kept in an earlier session, and a pop the library kept no push for.
        assert_eq!(closed(&mut r, s("old"), 90, 210), Output::Nothing);
        assert_eq!(closed(&mut r, NONE, 0, 220), Output::Nothing);
        assert_eq!((r.unpaired, r.still_open()), (2, 0));
        let summary = r.summary();
        assert_eq!(summary.len(), 1);
        assert_eq!(
            (
                summary[0].name.as_str(),
                summary[0].kind,
                summary[0].stats.count,
                summary[0].stats.total_ns
            ),
            ("step", "push", 1, 50)
        );
    }

    #[test]
    fn start_end_crosses_threads_and_marks_count() {
        let mut r = Ranges::new(
            Wanted {
                itt: true,
                ..Default::default()
            },
            0,
        );
        let itt = RangeArg::Int(3);
        r.hit(
            2,
            RangeOp::Start,
            &[RangeArg::Int(3), s("d"), s("load"), RangeArg::Int(7)],
            (5, 5, 100),
        );
        let edges = events(r.hit(
            3,
            RangeOp::End,
            &[RangeArg::Int(3), RangeArg::Int(7)],
            (5, 6, 150),
        ));
        assert_eq!(edges.len(), 2);
        assert_eq!(
            (edges[0].tid, edges[0].start_ns, edges[0].edge.unwrap().begin),
            (5, 100, true)
        );
        assert_eq!(
            (edges[1].tid, edges[1].start_ns, edges[1].edge.unwrap().begin),
            (6, 150, false)
        );
        assert_eq!(edges[0].edge.unwrap().id, edges[1].edge.unwrap().id);
        let mark = events(r.hit(
            4,
            RangeOp::Mark,
            &[RangeArg::Int(3), NONE, s("tick")],
            (5, 5, 160),
        ));
        assert!(mark[0].instant);
        assert_eq!(mark[0].cat.as_deref(), Some("itt"));
        // NVTX is not kept in this recording.
        assert_eq!(
            r.hit(4, RangeOp::Mark, &[NVTX, NONE, s("x")], (5, 5, 170)),
            Output::Nothing
        );
        assert_eq!(
            r.hit(
                5,
                RangeOp::ThreadName,
                &[itt, RangeArg::Int(0), s("worker")],
                (5, 6, 180)
            ),
            Output::ThreadName {
                pid: 5,
                tid: 6,
                name: "worker".into()
            }
        );
        let summary = r.summary();
        assert_eq!(summary.len(), 2);
        assert_eq!(r.still_open(), 0);
        assert_eq!((summary[0].kind, summary[0].stats.total_ns), ("start", 50));
        assert_eq!((summary[1].kind, summary[1].stats.count), ("mark", 1));
    }

    #[test]
    fn ranges_without_ids_end_oldest_first() {
        let mut r = Ranges::new(Wanted::ALL, 0);
        let start = |r: &mut Ranges, name: &str, ts| {
            r.hit(
                0,
                RangeOp::Start,
                &[NVTX, NONE, s(name), RangeArg::Int(0)],
                (5, 5, ts),
            )
        };
        let end = |r: &mut Ranges, id: u64, ts| {
            events(r.hit(1, RangeOp::End, &[NVTX, RangeArg::Int(id)], (5, 6, ts)))
        };
        start(&mut r, "a", 10);
        start(&mut r, "b", 20);
        let a = end(&mut r, 0, 30);
        assert_eq!(
            (a[0].name.as_deref(), a[0].start_ns, a[1].start_ns),
            (Some("a"), 10, 30)
        );
        // Another tool's id, never seen at a start.
        let b = end(&mut r, 77, 40);
        assert_eq!((b[0].name.as_deref(), b[0].start_ns), (Some("b"), 20));
        assert_ne!(a[0].edge.unwrap().id, b[0].edge.unwrap().id);
        assert_eq!(
            r.hit(1, RangeOp::End, &[NVTX, RangeArg::Int(0)], (5, 6, 50)),
            Output::Nothing
        );
        assert_eq!((r.unpaired, r.still_open()), (1, 0));
    }
}
