//! USDT hits: each event names its call site, whose probe decides what the hit becomes: an instant
//! event, the opening of a span (a begin probe), or the end of the innermost open span of its pair
//! on that thread (an end probe). Arguments are rendered as the spec's types say, else as the
//! note's signedness.
use std::collections::{BTreeMap, HashMap};

use xtrace_common::{
    event::{LongStrEvent, UsdtEvent, ARG_STR_LEN},
    usdt::MAX_USDT_ARGS,
};

use crate::{
    model::text::{c_text, wide_text},
    pipeline::{kept_names::KeptNames, values::Value},
    probes::usdt::{
        plan::{Role, UsdtProbe},
        spec::{RangeOp, UsdtArgType},
    },
};

/// What user space needs of a call site: its probe and which arguments the note marks signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteView {
    pub probe_id: u32,
    pub signed: Vec<bool>,
}

/// A span opened by a begin probe.
#[derive(Debug)]
struct Open {
    start_ns: u64,
    name: Option<String>,
    args: String,
}

/// One argument of a range probe.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeArg {
    Int(u64),
    /// A string argument; None for a null pointer.
    Str(Option<String>),
}

/// What one hit becomes.
#[derive(Debug, PartialEq, Eq)]
pub enum Hit {
    /// An instant event of `probe` with its arguments (trace.json `args` members).
    Instant { probe: u32, args: String },
    /// A begin probe's hit: the span is open.
    Opened { probe: u32 },
    /// An end probe's hit that closed a span of probe `span`.
    Closed {
        probe: u32,
        span: u32,
        start_ns: u64,
        depth: u32,
        name: Option<String>,
        args: String,
    },
    /// An end probe's hit with no open span on its thread (begun before the capture).
    Unpaired { probe: u32 },
    /// A hit of a tool-library range probe: its raw arguments, strings read where the spec asked.
    Range {
        probe: u32,
        op: RangeOp,
        args: Vec<RangeArg>,
    },
    /// A site not in the table; never expected.
    Unknown,
}

#[derive(Debug, Default)]
pub struct Usdt {
    sites: Vec<SiteView>,
    probes: BTreeMap<u32, UsdtProbe>,
    /// Open spans per (tid, span probe), innermost last.
    open: HashMap<(u32, u32), Vec<Open>>,
    /// Per span probe, end hits that found no span of it open on their thread.
    unmatched: HashMap<u32, u64>,
    /// Names the tool library keeps, by process and address.
    kept: KeptNames,
    /// Long strings (`str:N`) sent before their hits, by thread: (hit time, argument, bytes with
    /// their NUL).
    long: HashMap<u32, Vec<(u64, u16, Vec<u8>)>>,
}

impl Usdt {
    pub fn new(sites: Vec<SiteView>, probes: BTreeMap<u32, UsdtProbe>) -> Self {
        Usdt {
            sites,
            probes,
            open: HashMap::new(),
            unmatched: HashMap::new(),
            kept: KeptNames::default(),
            long: HashMap::new(),
        }
    }

    /// Whether `probe` is a USDT probe.
    pub fn owns(&self, probe: u32) -> bool {
        self.probes.contains_key(&probe)
    }

    /// A long string argument (`str:N`) of the hit that follows on its thread.
    pub fn long_string(&mut self, event: &LongStrEvent) {
        let len = usize::from(event.len).min(event.bytes.len());
        let arg = (event.start_ns, event.arg, event.bytes[..len].to_vec());
        self.long.entry(event.header.tid).or_default().push(arg);
    }

    /// The long strings of thread `tid`'s hit at `ns`, by argument; those of earlier hits on the
    /// thread (whose records were lost) are dropped.
    pub fn take_long(&mut self, tid: u32, ns: u64) -> Vec<(usize, Vec<u8>)> {
        let long = self.long.remove(&tid).unwrap_or_default();
        long.into_iter()
            .filter(|(at, _, _)| *at == ns)
            .map(|(_, arg, bytes)| (usize::from(arg), bytes))
            .collect()
    }

    /// One hit; `strings[i]` holds the bytes read for argument i (empty when not a string).
    pub fn hit(&mut self, event: &UsdtEvent, strings: &[&[u8]]) -> Hit {
        let Some(site) = self.sites.get(event.site as usize) else {
            return Hit::Unknown;
        };
        let probe = site.probe_id;
        let Some(info) = self.probes.get(&probe) else {
            return Hit::Unknown;
        };
        if let Role::Range(op) = info.role {
            let nargs = (event.nargs as usize).min(MAX_USDT_ARGS);
            let args = (0..nargs)
                .map(|i| match info.types.get(i) {
                    Some(UsdtArgType::Kept) => RangeArg::Str(self.kept.text(
                        event.header.pid,
                        event.args[i],
                        strings.get(i).copied().unwrap_or(&[]),
                    )),
                    Some(t) if t.is_string() => RangeArg::Str(text(*t, &event.args, i, strings)),
                    _ => RangeArg::Int(event.args[i]),
                })
                .collect();
            return Hit::Range { probe, op, args };
        }
        // An end probe's arguments join its begin's in the span, as end_arg0...
        let prefix = if matches!(info.role, Role::End { .. }) {
            "end_arg"
        } else {
            "arg"
        };
        let mut args = String::new();
        let mut name = None;
        let nargs = (event.nargs as usize).min(MAX_USDT_ARGS);
        for i in 0..nargs {
            let raw = event.args[i];
            let string = strings.get(i).copied().unwrap_or(&[]);
            let value = match info.types.get(i).copied().unwrap_or(UsdtArgType::Note) {
                UsdtArgType::Note if site.signed.get(i).copied().unwrap_or(false) => {
                    Value::Int(i128::from(raw as i64))
                }
                UsdtArgType::Note => Value::Int(i128::from(raw)),
                UsdtArgType::As(ty) => Value::from_register(ty, raw, string),
                UsdtArgType::Name => {
                    let value = Value::from_register(crate::probes::spec::ArgType::Str, raw, string);
                    if let Value::Str(Some(text)) = &value {
                        name = Some(text.clone());
                    }
                    value
                }
                ty @ (UsdtArgType::Wide | UsdtArgType::Message { .. }) => {
                    Value::Str(text(ty, &event.args, i, strings))
                }
                UsdtArgType::Kept => Value::Str(self.kept.text(event.header.pid, raw, string)),
            };
            args += &format!(",\"{prefix}{i}\":{}", value.json());
        }
        // An end of a pairing with several: the span says which closed it.
        if let Some(end) = &info.end_name {
            args += &format!(",\"end\":{}", serde_json::Value::from(end.as_str()));
        }
        let tid = event.header.tid;
        let now = event.header.ts_ns;
        match info.role {
            Role::Instant => Hit::Instant { probe, args },
            Role::Begin { span } => {
                self.open.entry((tid, span)).or_default().push(Open {
                    start_ns: now,
                    name,
                    args,
                });
                Hit::Opened { probe }
            }
            Role::Range(_) => Hit::Unknown, // handled above
            Role::End { span } => {
                let stack = self.open.entry((tid, span)).or_default();
                match stack.pop() {
                    Some(open) => Hit::Closed {
                        probe,
                        span,
                        start_ns: open.start_ns,
                        depth: stack.len() as u32,
                        name: open.name,
                        args: open.args + &args,
                    },
                    None => {
                        *self.unmatched.entry(span).or_default() += 1;
                        Hit::Unpaired { probe }
                    }
                }
            }
        }
    }

    /// The span probe `probe` opens, if it is a pair's begin.
    pub fn span_of(&self, probe: u32) -> Option<u32> {
        match self.probes.get(&probe)?.role {
            Role::Begin { span } => Some(span),
            _ => None,
        }
    }

    /// Whether `event` is an end probe's hit that would close a span open on its thread: such a
    /// hit ends a span begun during the capture, so it is kept even after the stop, as a call in
    /// flight at the stop still ends its span.
    pub fn ends_open(&self, event: &UsdtEvent) -> bool {
        let Some(site) = self.sites.get(event.site as usize) else {
            return false;
        };
        match self.probes.get(&site.probe_id).map(|p| &p.role) {
            Some(Role::End { span }) => self
                .open
                .get(&(event.header.tid, *span))
                .is_some_and(|open| !open.is_empty()),
            _ => false,
        }
    }

    /// The hit of a range probe's site (what [`Usdt::hit`] gives it, which changes no span);
    /// None for any other site.
    pub fn range(&mut self, event: &UsdtEvent, strings: &[&[u8]]) -> Option<Hit> {
        let site = self.sites.get(event.site as usize)?;
        let info = self.probes.get(&site.probe_id)?;
        matches!(info.role, Role::Range(_)).then(|| self.hit(event, strings))
    }

    /// Spans still open (their end never came during the capture).
    pub fn still_open(&self) -> u64 {
        self.open.values().map(|v| v.len() as u64).sum()
    }

    /// Of the pair whose spans are probe `span`: how many are still open (on any thread), and how
    /// many of its end hits found none open on their thread.
    pub fn unpaired(&self, span: u32) -> (u64, u64) {
        let open = self
            .open
            .iter()
            .filter(|((_, s), _)| *s == span)
            .map(|(_, v)| v.len() as u64)
            .sum();
        (open, self.unmatched.get(&span).copied().unwrap_or(0))
    }
}

/// String argument `i` of a hit as its type says: None for a null pointer (the default domain) or
/// a message of a type that is not read; "" when the pointer was unreadable.
fn text(ty: UsdtArgType, args: &[u64], i: usize, strings: &[&[u8]]) -> Option<String> {
    if args.get(i).is_none_or(|&v| v == 0) {
        return None;
    }
    let bytes = strings.get(i).copied().unwrap_or(&[]);
    match ty {
        UsdtArgType::Wide => Some(wide_text(bytes)),
        UsdtArgType::Message { type_arg } => match args.get(usize::from(type_arg)).map(|&t| t as i32) {
            Some(MESSAGE_ASCII) => Some(c_text(bytes)),
            Some(MESSAGE_UNICODE) => Some(wide_text(bytes)),
            _ => None,
        },
        _ => Some(c_text(bytes)),
    }
}

/// `nvtxMessageType_t` values whose message is text.
const MESSAGE_ASCII: i32 = 1;
const MESSAGE_UNICODE: i32 = 2;

/// The string bytes of a `UsdtStrEvent`'s arguments.
pub fn strings<'a>(
    str_len: &[u8; MAX_USDT_ARGS],
    strings: &'a [[u8; ARG_STR_LEN]; MAX_USDT_ARGS],
) -> Vec<&'a [u8]> {
    str_len
        .iter()
        .zip(strings)
        .map(|(len, s)| &s[..usize::from(*len).min(ARG_STR_LEN)])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use xtrace_common::event::EventHeader;

    fn event(site: u32, tid: u32, ts_ns: u64, args: &[u64]) -> UsdtEvent {
        let mut e = UsdtEvent {
            header: EventHeader {
                kind: 4,
                cpu: 0,
                pid: tid,
                tid,
                ts_ns,
            },
            site,
            nargs: args.len() as u32,
            args: [0; MAX_USDT_ARGS],
        };
        e.args[..args.len()].copy_from_slice(args);
        e
    }

    #[test]
    fn begin_end_pairs_per_thread_innermost_first() {
        let probes = BTreeMap::from([
            (
                0,
                UsdtProbe {
                    role: Role::Begin { span: 2 },
                    types: vec![UsdtArgType::Note, UsdtArgType::Name],
                    end_name: None,
                },
            ),
            (
                1,
                UsdtProbe {
                    role: Role::End { span: 2 },
                    types: vec![],
                    end_name: None,
                },
            ),
            (
                3,
                UsdtProbe {
                    role: Role::Instant,
                    types: vec![],
                    end_name: None,
                },
            ),
        ]);
        let sites = vec![
            SiteView {
                probe_id: 0,
                signed: vec![true, false],
            },
            SiteView {
                probe_id: 1,
                signed: vec![true],
            },
            SiteView {
                probe_id: 3,
                signed: vec![true, false],
            },
        ];
        let mut usdt = Usdt::new(sites, probes);
        assert_eq!(usdt.hit(&event(1, 7, 5, &[9]), &[]), Hit::Unpaired { probe: 1 });
        assert_eq!(
            usdt.hit(&event(0, 7, 10, &[1, 0]), &[b"", b"outer\0"]),
            Hit::Opened { probe: 0 }
        );
        assert_eq!(
            usdt.hit(&event(0, 7, 20, &[2, 0]), &[b"", b"inner\0"]),
            Hit::Opened { probe: 0 }
        );
        assert_eq!(
            usdt.hit(&event(0, 8, 25, &[3, 0]), &[b"", b""]),
            Hit::Opened { probe: 0 }
        );
        assert_eq!(
            usdt.hit(&event(1, 7, 30, &[2]), &[]),
            Hit::Closed {
                probe: 1,
                span: 2,
                start_ns: 20,
                depth: 1,
                name: Some("inner".into()),
                args: ",\"arg0\":2,\"arg1\":\"inner\",\"end_arg0\":2".into()
            }
        );
        let Hit::Closed { start_ns, depth, .. } = usdt.hit(&event(1, 7, 40, &[1]), &[]) else {
            panic!("the outer span closes")
        };
        assert_eq!((start_ns, depth), (10, 0));
        assert_eq!(usdt.still_open(), 1, "thread 8's span is still open");
        assert_eq!(usdt.unpaired(2), (1, 1), "open, and ends without a begin");
        // After the stop, an end is kept only where it closes an open span of its thread.
        assert!(usdt.ends_open(&event(1, 8, 45, &[3])), "thread 8's end");
        assert!(!usdt.ends_open(&event(1, 7, 45, &[3])), "thread 7 has none open");
        assert!(!usdt.ends_open(&event(0, 8, 45, &[4, 0])), "a begin");
        assert!(!usdt.ends_open(&event(2, 8, 45, &[])), "an instant");
        assert!(!usdt.ends_open(&event(9, 8, 45, &[])), "an unknown site");
        assert_eq!(
            usdt.hit(&event(2, 7, 50, &[u64::MAX, u64::MAX]), &[]),
            Hit::Instant {
                probe: 3,
                args: ",\"arg0\":-1,\"arg1\":18446744073709551615".into()
            }
        );
        assert_eq!(usdt.hit(&event(9, 7, 60, &[]), &[]), Hit::Unknown);
    }

    /// A pairing with two ends (`txn__start..txn__commit|txn__abort`): either closes the
    /// innermost span open on its thread, which records which did; an end on another thread
    /// closes nothing there and is counted for the pair.
    #[test]
    fn alternative_ends_close_one_span_and_say_which() {
        let probe = |role, end_name: Option<&str>| UsdtProbe {
            role,
            types: vec![],
            end_name: end_name.map(str::to_string),
        };
        let probes = BTreeMap::from([
            (0, probe(Role::Begin { span: 3 }, None)),
            (1, probe(Role::End { span: 3 }, Some("txn__commit"))),
            (2, probe(Role::End { span: 3 }, Some("txn__abort"))),
        ]);
        let sites = (0..3)
            .map(|probe_id| SiteView {
                probe_id,
                signed: vec![false],
            })
            .collect();
        let mut usdt = Usdt::new(sites, probes);
        assert_eq!(usdt.hit(&event(0, 7, 10, &[1]), &[]), Hit::Opened { probe: 0 });
        assert_eq!(usdt.hit(&event(0, 7, 20, &[2]), &[]), Hit::Opened { probe: 0 });
        assert_eq!(usdt.hit(&event(2, 8, 25, &[2]), &[]), Hit::Unpaired { probe: 2 });
        let closed = |hit| match hit {
            Hit::Closed {
                span,
                start_ns,
                depth,
                args,
                ..
            } => (span, start_ns, depth, args),
            other => panic!("not closed: {other:?}"),
        };
        assert_eq!(
            closed(usdt.hit(&event(2, 7, 30, &[2]), &[])),
            (
                3,
                20,
                1,
                ",\"arg0\":2,\"end_arg0\":2,\"end\":\"txn__abort\"".into()
            )
        );
        assert_eq!(
            closed(usdt.hit(&event(1, 7, 40, &[1]), &[])),
            (
                3,
                10,
                0,
                ",\"arg0\":1,\"end_arg0\":1,\"end\":\"txn__commit\"".into()
            )
        );
        assert_eq!(usdt.hit(&event(0, 7, 50, &[3]), &[]), Hit::Opened { probe: 0 });
        assert_eq!(usdt.unpaired(3), (1, 1));
        assert_eq!(usdt.unpaired(4), (0, 0), "another pair");
    }
}
