//! Captured argument and return values: each call's `ArgsEvent` (written at entry) waits here until
//! the call's span arrives (same tid and entry time), then both are rendered for trace.json and
//! counted per probe for summary.json (min/max of integers, the most frequent values).
use std::{borrow::Cow, collections::HashMap};

use serde::Serialize;
use xtrace_common::event::{ArgsEvent, LongStrEvent, ARG_STR_LEN};

use super::strings::Strings;
use crate::{
    image::Images,
    model::{pending::Pending, text::c_text},
    probes::{spec::ArgType, Capture},
};

/// Distinct values counted per argument; later new values only count as `other`.
const MAX_DISTINCT: usize = 1024;
/// Most frequent values listed per argument in summary.json.
const TOP: usize = 10;

/// One rendered value; ordered by number (integers, pointers) or text (strings).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Value {
    Int(i128),
    /// A pointer, shown in hex.
    Ptr(u64),
    /// A string argument; None when it could not be read.
    Str(Option<String>),
}

impl Value {
    /// The register `raw` as `ty`; `string` holds the bytes read for a `str`.
    pub fn from_register(ty: ArgType, raw: u64, string: &[u8]) -> Value {
        match ty {
            ArgType::U8 => Value::Int(i128::from(raw as u8)),
            ArgType::U16 => Value::Int(i128::from(raw as u16)),
            ArgType::U32 => Value::Int(i128::from(raw as u32)),
            ArgType::U64 => Value::Int(i128::from(raw)),
            ArgType::I8 => Value::Int(i128::from(raw as i8)),
            ArgType::I16 => Value::Int(i128::from(raw as i16)),
            ArgType::I32 => Value::Int(i128::from(raw as i32)),
            ArgType::I64 => Value::Int(i128::from(raw as i64)),
            ArgType::Ptr => Value::Ptr(raw),
            ArgType::Str | ArgType::StrN(_) if string.is_empty() => Value::Str(None),
            ArgType::Str => Value::Str(Some(c_text(string))),
            // The kernel reads at least an `ArgsEvent`'s 63 bytes: a shorter `str:N` is cut here.
            ArgType::StrN(n) => Value::Str(Some(c_text(&string[..string.len().min(usize::from(n))]))),
        }
    }

    /// The value as JSON text.
    pub(crate) fn json(&self) -> String {
        match self {
            Value::Int(v) => v.to_string(),
            Value::Ptr(p) => format!("\"{p:#x}\""),
            Value::Str(Some(s)) => serde_json::to_string(s).unwrap_or_else(|_| "null".into()),
            Value::Str(None) => "null".into(),
        }
    }

    /// The value as a JSON value (for summary.json).
    fn to_json_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.json()).unwrap_or(serde_json::Value::Null)
    }
}

/// Statistics of one captured argument (or the return value) of one probe.
#[derive(Clone, Debug, Serialize)]
pub struct ValueSummary {
    /// `arg0`..`arg5`, or `ret`.
    pub name: String,
    #[serde(rename = "type")]
    pub ty: &'static str,
    /// Calls whose value was recorded.
    pub count: u64,
    /// Smallest and largest integer value (integers only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<serde_json::Value>,
    /// The most frequent values, most frequent first: exact counts while at most 1,024 distinct
    /// values were seen; values first seen after that are counted in `other` only.
    pub top: Vec<TopValue>,
    pub other: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TopValue {
    pub value: serde_json::Value,
    pub count: u64,
}

#[derive(Clone, Debug)]
struct ValueStats {
    name: String,
    ty: ArgType,
    count: u64,
    min: Option<i128>,
    max: Option<i128>,
    counts: HashMap<String, (Value, u64)>,
    other: u64,
}

impl ValueStats {
    fn new(name: String, ty: ArgType) -> Self {
        ValueStats {
            name,
            ty,
            count: 0,
            min: None,
            max: None,
            counts: HashMap::new(),
            other: 0,
        }
    }

    fn add(&mut self, value: &Value) {
        self.count += 1;
        if let Value::Int(v) = value {
            self.min = Some(self.min.map_or(*v, |m| m.min(*v)));
            self.max = Some(self.max.map_or(*v, |m| m.max(*v)));
        }
        let key = value.json();
        if let Some((_, n)) = self.counts.get_mut(&key) {
            *n += 1;
        } else if self.counts.len() < MAX_DISTINCT {
            self.counts.insert(key, (value.clone(), 1));
        } else {
            self.other += 1;
        }
    }

    fn summary(&self) -> ValueSummary {
        let mut top: Vec<&(Value, u64)> = self.counts.values().collect();
        // Most frequent first; equally frequent ones in the values' order (-7 before -1 before 10).
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let number = |v: i128| serde_json::from_str(&v.to_string()).unwrap_or_default();
        ValueSummary {
            name: self.name.clone(),
            ty: self.ty.name(),
            count: self.count,
            min: self.min.map(number),
            max: self.max.map(number),
            other: self.other + top.iter().skip(TOP).map(|(_, n)| n).sum::<u64>(),
            top: top
                .into_iter()
                .take(TOP)
                .map(|(value, count)| TopValue {
                    value: value.to_json_value(),
                    count: *count,
                })
                .collect(),
        }
    }
}

/// Pairs arguments with spans and aggregates values.
#[derive(Debug, Default)]
pub struct Values {
    captures: Vec<Capture>,
    /// The rendered arguments of calls waiting for their spans.
    pending: Pending<Vec<Value>>,
    stats: Vec<Vec<ValueStats>>,
    /// Strings the kernel could not read, read from their mapped files.
    strings: Strings,
    /// Long strings (`str:N`) sent before their calls' arguments, by thread: (entry time,
    /// argument, bytes with their NUL).
    long: HashMap<u32, Vec<(u64, u16, Vec<u8>)>>,
}

impl Values {
    pub fn new(captures: Vec<Capture>) -> Self {
        let stats = captures
            .iter()
            .map(|c| {
                let mut s: Vec<ValueStats> = c
                    .args
                    .iter()
                    .enumerate()
                    .map(|(i, t)| ValueStats::new(format!("arg{i}"), *t))
                    .collect();
                s.extend(c.ret.map(|t| ValueStats::new("ret".into(), t)));
                s
            })
            .collect();
        Values {
            captures,
            stats,
            ..Default::default()
        }
    }

    /// A call's arguments, to be paired with its span. Arguments still waiting on this thread (or
    /// goroutine, for Go code) at the same or a greater depth belong to calls that have ended
    /// without a span (shorter than `--min-duration`, or left without returning) and are dropped.
    pub fn args(&mut self, images: &mut Images, event: &ArgsEvent) {
        let Some(capture) = self.captures.get(event.probe_id as usize) else {
            return;
        };
        let pid = event.header.pid;
        // Those of earlier calls on this thread are of calls whose arguments were lost.
        let long = self.long.remove(&event.header.tid).unwrap_or_default();
        let values = capture
            .args
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let len = usize::from(event.str_len[i]).min(event.strings[i].len());
                let mut read = &event.strings[i][..len];
                if let Some((_, _, bytes)) = long.iter().find(|l| (l.0, l.1) == (event.start_ns, i as u16)) {
                    read = bytes;
                }
                // A Go string has no NUL: only what the kernel read of it.
                let bytes = match t.string_max() {
                    Some(max) if !capture.go => self.strings.resolve(images, (pid, event.args[i]), read, max),
                    _ => Cow::Borrowed(read),
                };
                Value::from_register(*t, event.args[i], &bytes)
            })
            .collect();
        if capture.go && event.goroutine != 0 {
            let goroutine = (event.header.pid, event.goroutine);
            let (tid, start_ns) = (event.header.tid, event.start_ns);
            self.pending
                .enter_goroutine(goroutine, tid, start_ns, event.depth, values);
        } else {
            self.pending
                .enter(event.header.tid, event.start_ns, event.depth, values);
        }
    }

    /// The span of probe `probe` on `tid` that entered at `start_ns` and returned `ret` with the
    /// string it points at, when read (None: left by a tail call, so no return value yet): its
    /// values as trace.json `args` members (`"arg0":1,"ret":-2`), or None when the probe captures
    /// none.
    /// Arguments still waiting on this thread from calls that entered at or after `start_ns` belong
    /// to calls that ended without a span (longjmp, exceptions) and are dropped.
    pub fn span(
        &mut self,
        probe: usize,
        tid: u32,
        start_ns: u64,
        ret: Option<(u64, &[u8])>,
    ) -> Option<String> {
        let capture = self.captures.get(probe)?;
        if capture.args.is_empty() && capture.ret.is_none() {
            return None;
        }
        // None when the arguments were not recorded (ring buffer full, too many pending): the span
        // still has its return value, which its own record carries.
        let args = match self.pending.take(tid, start_ns) {
            Some(values) => Some(values),
            None if capture.args.is_empty() => Some(Vec::new()),
            None => None,
        };
        let ret = match (capture.ret, ret) {
            (Some(t), Some((ret, string))) => Some(Value::from_register(t, ret, string)),
            _ => None,
        };
        let stats = &mut self.stats[probe];
        let mut json = String::new();
        let (arg_stats, ret_stat) = stats.split_at_mut(capture.args.len());
        for (stat, value) in arg_stats.iter_mut().zip(args.iter().flatten()) {
            stat.add(value);
            json += &format!(",\"{}\":{}", stat.name, value.json());
        }
        if let (Some(stat), Some(value)) = (ret_stat.first_mut(), &ret) {
            stat.add(value);
            json += &format!(",\"{}\":{}", stat.name, value.json());
        }
        Some(json)
    }

    /// A long string argument (`str:N`), for its call's arguments that follow.
    pub fn long_string(&mut self, event: &LongStrEvent) {
        let len = usize::from(event.len).min(event.bytes.len());
        let arg = (event.start_ns, event.arg, event.bytes[..len].to_vec());
        self.long.entry(event.header.tid).or_default().push(arg);
    }

    /// The string a `-> str` return value `ret` of process `pid` points at: `read`, what the
    /// kernel read at the return, or else the bytes of the read-only file mapping there.
    pub fn returned_string<'a>(
        &mut self,
        images: &mut Images,
        (probe, pid, ret): (usize, u32, u64),
        read: &'a [u8],
    ) -> Cow<'a, [u8]> {
        match self.captures.get(probe) {
            Some(capture) if capture.ret == Some(ArgType::Str) && !capture.go => {
                self.strings.resolve(images, (pid, ret), read, ARG_STR_LEN - 1)
            }
            _ => Cow::Borrowed(read),
        }
    }

    /// A process whose records follow: its mappings are looked up while it runs, when some probe
    /// reads strings.
    pub fn seen(&self, images: &mut Images, pid: u32) {
        let strings = |c: &Capture| c.args.iter().any(|t| t.is_str()) || c.ret.is_some_and(ArgType::is_str);
        if self.captures.iter().any(strings) {
            images.readable.seen(pid);
        }
    }

    /// String arguments and return values at a non-null address that could not be read.
    pub fn unreadable_strings(&self) -> u64 {
        self.strings.unreadable()
    }

    /// Argument records dropped because too many calls were waiting for their spans.
    pub fn dropped(&self) -> u64 {
        self.pending.dropped
    }

    /// The value statistics of probe `probe` (empty for a probe that captures nothing).
    pub fn summary_of(&self, probe: usize) -> Vec<ValueSummary> {
        self.stats
            .get(probe)
            .map(|s| s.iter().map(ValueStats::summary).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use xtrace_common::event::EventHeader;

    use super::*;

    fn args_event(probe_id: u32, tid: u32, start_ns: u64, regs: [u64; 6], text: &str) -> ArgsEvent {
        args_at(probe_id, tid, start_ns, 0, regs, text)
    }

    fn args_at(probe_id: u32, tid: u32, start_ns: u64, depth: u8, regs: [u64; 6], text: &str) -> ArgsEvent {
        args_in(0, probe_id, tid, start_ns, depth, regs, text)
    }

    /// [`args_at`] of a call of Go code kept by `goroutine` (0: by its thread).
    fn args_in(
        goroutine: u64,
        probe_id: u32,
        tid: u32,
        start_ns: u64,
        depth: u8,
        regs: [u64; 6],
        text: &str,
    ) -> ArgsEvent {
        let mut strings = [[0u8; 64]; 6];
        strings[2][..text.len()].copy_from_slice(text.as_bytes());
        let mut str_len = [0u8; 6];
        str_len[2] = text.len() as u8 + 1;
        ArgsEvent {
            header: EventHeader {
                tid,
                ..Default::default()
            },
            start_ns,
            probe_id,
            spec: 0,
            args: regs,
            str_len,
            depth,
            _pad: 0,
            goroutine,
            strings,
            stack: [0; 4],
            caller: 0,
        }
    }

    fn values() -> Values {
        Values::new(vec![
            Capture {
                args: vec![ArgType::U64, ArgType::I32, ArgType::Str],
                ret: Some(ArgType::I32),
                go: false,
            },
            Capture::default(),
        ])
    }

    /// `-> str`: the string read at the return; `null` when unreadable (nothing read) or left by a
    /// tail call (no return value yet: no `ret` at all).
    #[test]
    fn a_returned_string_is_the_one_read_at_the_return() {
        let mut v = Values::new(vec![Capture {
            args: vec![],
            ret: Some(ArgType::Str),
            go: false,
        }]);
        let json = v.span(0, 7, 100, Some((0x1000, b"alpha\0"))).unwrap();
        assert_eq!(json, r#","ret":"alpha""#);
        assert_eq!(v.span(0, 7, 200, Some((0, &[]))).unwrap(), r#","ret":null"#);
        assert_eq!(v.span(0, 7, 300, None).unwrap(), "");
        assert_eq!(v.summary_of(0)[0].count, 2);
    }

    /// A span whose argument record was dropped (ring buffer full) keeps its return value, which
    /// its own record carries; only the return value's statistics count it.
    #[test]
    fn a_span_without_its_arguments_keeps_its_return_value() {
        let mut v = values();
        assert_eq!(
            v.span(0, 7, 100, Some(((-5i64) as u64, &[]))).unwrap(),
            r#","ret":-5"#
        );
        let summary = &v.summary_of(0);
        assert_eq!(summary[0].count, 0, "arg0 was not recorded");
        assert_eq!((summary[3].name.as_str(), summary[3].count), ("ret", 1));
    }

    #[test]
    fn renders_typed_values_and_pairs_by_thread_and_entry() {
        let mut v = values();
        v.args(
            &mut Images::default(),
            &args_event(0, 7, 100, [5, (-3i32) as u32 as u64, 0, 0, 0, 0], "hello"),
        );
        v.args(
            &mut Images::default(),
            &args_event(0, 8, 100, [6, 1, 0, 0, 0, 0], "other"),
        );
        let json = v.span(0, 7, 100, Some(((-1i64) as u64, &[]))).unwrap();
        assert_eq!(json, r#","arg0":5,"arg1":-3,"arg2":"hello","ret":-1"#);
        let json = v.span(0, 8, 100, Some((0, &[]))).unwrap();
        assert_eq!(json, r#","arg0":6,"arg1":1,"arg2":"other","ret":0"#);
        assert_eq!(v.span(1, 7, 200, Some((0, &[]))), None);
        let summary = &v.summary_of(0);
        assert_eq!(summary[1].min, Some(serde_json::json!(-3)));
        assert_eq!(summary[1].max, Some(serde_json::json!(1)));
        assert_eq!(summary[2].top.len(), 2);
        // Equally frequent values in numeric order: -3 before 1 (JSON text would put "-3" first
        // too, but "10" before "9").
        let top: Vec<&serde_json::Value> = summary[1].top.iter().map(|t| &t.value).collect();
        assert_eq!(top, [&serde_json::json!(-3), &serde_json::json!(1)]);
        for (arg0, ret) in [(10, 1), (9, 2)] {
            v.args(
                &mut Images::default(),
                &args_event(0, 9, 100, [arg0, 0, 0, 0, 0, 0], "x"),
            );
            v.span(0, 9, 100, Some((ret, &[]))).unwrap();
        }
        let top: Vec<serde_json::Value> = v.summary_of(0)[0].top.iter().map(|t| t.value.clone()).collect();
        assert_eq!(top, [5, 6, 9, 10].map(|n| serde_json::json!(n)));
        assert_eq!(summary[3].name, "ret");
        assert_eq!(summary[3].count, 2);
    }

    #[test]
    fn drops_arguments_of_calls_that_never_returned() {
        let mut v = values();
        // Outer call at 100; an inner call at 150 left by longjmp; the outer call returns.
        v.args(
            &mut Images::default(),
            &args_event(0, 7, 100, [1, 0, 0, 0, 0, 0], "a"),
        );
        v.args(
            &mut Images::default(),
            &args_at(0, 7, 150, 1, [2, 0, 0, 0, 0, 0], "b"),
        );
        v.args(
            &mut Images::default(),
            &args_event(0, 9, 120, [3, 0, 0, 0, 0, 0], "c"),
        );
        assert!(v.span(0, 7, 100, Some((0, &[]))).unwrap().contains(r#""arg0":1"#));
        assert_eq!(v.pending.len(), 1, "the other thread's call still waits");
        assert!(v.span(0, 9, 120, Some((0, &[]))).unwrap().contains(r#""arg0":3"#));
        assert!(v.pending.is_empty());
    }

    #[test]
    fn a_new_call_at_the_same_depth_ends_earlier_ones() {
        let mut v = values();
        // Outer call at depth 0; two inner calls at depth 1 whose spans were filtered out.
        v.args(
            &mut Images::default(),
            &args_at(0, 7, 100, 0, [1, 0, 0, 0, 0, 0], "outer"),
        );
        v.args(
            &mut Images::default(),
            &args_at(0, 7, 110, 1, [2, 0, 0, 0, 0, 0], "a"),
        );
        v.args(
            &mut Images::default(),
            &args_at(0, 7, 120, 1, [3, 0, 0, 0, 0, 0], "b"),
        );
        assert_eq!(
            v.pending.len(),
            2,
            "the call at 110 ended when the one at 120 began"
        );
        v.args(
            &mut Images::default(),
            &args_at(0, 7, 130, 1, [4, 0, 0, 0, 0, 0], "c"),
        );
        assert_eq!(v.pending.len(), 2);
        assert!(v
            .span(0, 7, 100, Some((0, &[])))
            .unwrap()
            .contains(r#""arg2":"outer""#));
        assert!(v.pending.is_empty());
    }

    /// Go code: goroutines take turns on thread 7 inside their calls, all at depth 0 of their
    /// own goroutine, and their spans come in another order: each finds its own arguments.
    #[test]
    fn calls_of_go_code_wait_per_goroutine_not_per_thread() {
        let mut v = Values::new(vec![Capture {
            args: vec![ArgType::I64],
            ret: None,
            go: true,
        }]);
        let go = |g: u64, tid: u32, start: u64, depth: u8, arg: u64| {
            args_in(g, 0, tid, start, depth, [arg, 0, 0, 0, 0, 0], "")
        };
        for (g, start, arg) in [(0xc1, 100, 1), (0xc2, 110, 2), (0xc3, 120, 3)] {
            v.args(&mut Images::default(), &go(g, 7, start, 0, arg));
        }
        assert_eq!(v.pending.len(), 3);
        assert_eq!(v.span(0, 7, 110, None).unwrap(), r#","arg0":2"#);
        assert_eq!(v.span(0, 7, 100, None).unwrap(), r#","arg0":1"#);
        assert_eq!(v.span(0, 7, 120, None).unwrap(), r#","arg0":3"#);
        assert!(v.pending.is_empty());
        // One that never ends waits while thousands of others come and go.
        v.args(&mut Images::default(), &go(0xc1, 7, 1, 0, 9));
        for start in 2..20_000 {
            v.args(&mut Images::default(), &go(0xc2, 8, start, 0, start));
            v.span(0, 8, start, None);
        }
        assert_eq!(v.pending.len(), 1);
        v.args(&mut Images::default(), &go(0xc2, 8, 50_000, 0, 5));
        assert_eq!(v.span(0, 7, 1, None).unwrap(), r#","arg0":9"#);
        assert_eq!(v.span(0, 8, 50_000, None).unwrap(), r#","arg0":5"#);
        // --min-duration: a long call's goroutine makes 40,000 short calls, whose spans never
        // come, on two threads; each ends the one before it, and the long call keeps its own.
        v.args(&mut Images::default(), &go(0xc4, 7, 60_000, 0, 4));
        for start in 60_001..100_000 {
            v.args(
                &mut Images::default(),
                &go(0xc4, 7 + (start % 2) as u32, start, 1, 1),
            );
        }
        assert_eq!(v.pending.len(), 2);
        assert_eq!(v.span(0, 7, 60_000, None).unwrap(), r#","arg0":4"#);
        // The next call at depth 0 ends the last short one.
        v.args(&mut Images::default(), &go(0xc4, 8, 100_000, 0, 6));
        assert_eq!(v.pending.len(), 1);
        assert_eq!(v.span(0, 8, 100_000, None).unwrap(), r#","arg0":6"#);
        // Calls the kernel kept by thread (no goroutine) follow the thread's rule.
        v.args(&mut Images::default(), &go(0, 9, 100_001, 0, 7));
        v.args(&mut Images::default(), &go(0, 9, 100_002, 0, 8));
        assert_eq!(v.pending.len(), 1);
        assert_eq!(v.span(0, 9, 100_002, None).unwrap(), r#","arg0":8"#);
        // A goroutine's span takes its own arguments only: a call its thread ran later for
        // another goroutine, or kept by the thread (cgo's C code), keeps its own.
        v.args(&mut Images::default(), &go(0xc5, 10, 150_000, 0, 11));
        v.args(&mut Images::default(), &go(0, 10, 150_001, 0, 12));
        v.args(&mut Images::default(), &go(0xc6, 10, 150_002, 0, 13));
        assert_eq!(v.span(0, 10, 150_000, None).unwrap(), r#","arg0":11"#);
        assert_eq!(v.span(0, 10, 150_001, None).unwrap(), r#","arg0":12"#);
        assert_eq!(v.span(0, 10, 150_002, None).unwrap(), r#","arg0":13"#);
        assert!(v.pending.is_empty());
        // Past 131,072 waiting at once (goroutines parked inside calls), the oldest is dropped,
        // and counted.
        for start in 200_000..200_000 + (1 << 17) + 1 {
            v.args(&mut Images::default(), &go(start, 9, start, 0, 1));
        }
        assert_eq!(v.pending.len(), 1 << 17);
        assert_eq!(v.dropped(), 1);
        assert_eq!(v.span(0, 9, 200_000, None).unwrap(), "");
        assert_eq!(v.span(0, 9, 200_001, None).unwrap(), r#","arg0":1"#);
    }

    #[test]
    fn unreadable_strings_are_null_and_pointers_hex() {
        assert_eq!(Value::from_register(ArgType::Str, 0, &[]).json(), "null");
        assert_eq!(
            Value::from_register(ArgType::Ptr, 0xdead, &[]).json(),
            "\"0xdead\""
        );
        assert_eq!(Value::from_register(ArgType::U8, 0x1ff, &[]).json(), "255");
        assert_eq!(Value::from_register(ArgType::I16, 0xffff, &[]).json(), "-1");
    }
}
