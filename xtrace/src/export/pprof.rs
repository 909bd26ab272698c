//! profile.pb.gz: Google's pprof format (profile.proto, gzipped), read by `go tool pprof`,
//! Pyroscope and Parca. The messages below are written from the published profile.proto field
//! numbers as prost structs (no protoc at build time). One profile holds both sources, each
//! sample carrying values only in its own columns:
//! - CPU samples (stacks.folded): `samples`/`count` and `cpu`/`nanoseconds` (samples × period);
//! - spans: `spans`/`count` and `span_time`/`nanoseconds`, each call path of nested spans carrying
//!   its self time, so the profile's totals are the time in outermost spans.
//!
//! Frames become functions by name (no addresses) in one mapping marked as already symbolized; a
//! sample's locations list the innermost frame first. A Python frame (`qualname (file.py:LINE)`)
//! is the function `qualname` of `file.py` starting at LINE, its location at that line; other
//! frames have no source lines.
use std::{collections::HashMap, io::Write};

use prost::Message;

use crate::analysis::spans::SpanStack;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// What goes into the profile.
pub struct Input<'a> {
    /// stacks.folded: (frames joined by `;`, outermost first; samples).
    pub folded: &'a [(String, u64)],
    /// The sampling frequency; samples count as 1/hz seconds of CPU each.
    pub sample_hz: Option<u64>,
    pub span_stacks: &'a [SpanStack],
    pub duration_ns: u64,
}

/// Builds the profile: strings, functions and locations interned by name.
struct Builder {
    profile: Profile,
    strings: HashMap<String, i64>,
    locations: HashMap<String, u64>,
}

impl Builder {
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    /// The location of frame `name` (one function, one location per distinct name).
    fn location(&mut self, name: &str) -> u64 {
        if let Some(&id) = self.locations.get(name) {
            return id;
        }
        let id = self.profile.function.len() as u64 + 1;
        let system_name = self.string(name);
        let (function, line) = match python_source(name) {
            Some((qualname, file, line)) => {
                let (name, filename) = (self.string(qualname), self.string(file));
                (
                    Function {
                        id,
                        name,
                        system_name,
                        filename,
                        start_line: line,
                    },
                    line,
                )
            }
            None => (
                Function {
                    id,
                    name: system_name,
                    system_name,
                    ..Function::default()
                },
                0,
            ),
        };
        self.profile.function.push(function);
        self.profile.location.push(Location {
            id,
            mapping_id: 1,
            line: vec![Line {
                function_id: id,
                line,
            }],
        });
        self.locations.insert(name.to_string(), id);
        id
    }

    fn value_type(&mut self, kind: &str, unit: &str) -> ValueType {
        ValueType {
            r#type: self.string(kind),
            unit: self.string(unit),
        }
    }

    /// A sample of `frames` (outermost first) with `values`.
    fn sample<'f>(&mut self, frames: impl DoubleEndedIterator<Item = &'f str>, value: Vec<i64>) {
        let location_id = frames.rev().map(|f| self.location(f)).collect();
        self.profile.sample.push(Sample { location_id, value });
    }
}

/// A Python frame's parts, as xtrace names it (`qualname (file.py:LINE)`, LINE the line the
/// function is defined on): its qualified name, file and line.
fn python_source(frame: &str) -> Option<(&str, &str, i64)> {
    let (qualname, source) = frame.strip_suffix(')')?.rsplit_once(" (")?;
    let (file, line) = source.rsplit_once(':')?;
    let plain = !file.is_empty() && !file.contains(['(', ')']) && !qualname.is_empty();
    let line: i64 = line.parse().ok().filter(|_| plain)?;
    Some((qualname, file, line))
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The profile message, not yet encoded.
pub fn profile(input: &Input) -> Profile {
    let mut b = Builder {
        profile: Profile::default(),
        strings: HashMap::new(),
        locations: HashMap::new(),
    };
    b.string("");
    let has_samples = !input.folded.is_empty();
    let has_spans = !input.span_stacks.is_empty();
    let period = input.sample_hz.map_or(0, |hz| 1_000_000_000 / hz.max(1));
    if has_samples {
        let t = b.value_type("samples", "count");
        b.profile.sample_type.push(t);
        let t = b.value_type("cpu", "nanoseconds");
        b.profile.sample_type.push(t);
    }
    if has_spans {
        let t = b.value_type("spans", "count");
        b.profile.sample_type.push(t);
        let t = b.value_type("span_time", "nanoseconds");
        b.profile.sample_type.push(t);
    }
    let columns = b.profile.sample_type.len();
    for (stack, n) in input.folded {
        let mut value = vec![0; columns];
        value[0] = clamp(*n);
        value[1] = clamp(n.saturating_mul(period));
        b.sample(stack.split(';'), value);
    }
    let first_span_column = if has_samples { 2 } else { 0 };
    for s in input.span_stacks {
        let mut value = vec![0; columns];
        value[first_span_column] = clamp(s.spans);
        value[first_span_column + 1] = clamp(s.self_ns);
        // Named as the CPU samples' frames are (read from stacks.folded), so that both meet at
        // one root when a name holds `;` or a line break (a process's name may).
        let frames: Vec<String> = s
            .frames
            .iter()
            .map(|f| super::flamegraph::folded_frame(f))
            .collect();
        b.sample(frames.iter().map(String::as_str), value);
    }
    let filename = b.string("xtrace");
    b.profile.mapping.push(Mapping {
        id: 1,
        filename,
        has_functions: true,
    });
    b.profile.duration_nanos = clamp(input.duration_ns);
    if has_samples {
        b.profile.period_type = Some(b.value_type("cpu", "nanoseconds"));
        b.profile.period = clamp(period);
        b.profile.default_sample_type = b.string("cpu");
    } else if has_spans {
        b.profile.period_type = Some(b.value_type("span_time", "nanoseconds"));
        b.profile.period = 1;
        b.profile.default_sample_type = b.string("span_time");
    }
    let comment = b.string("written by xtrace");
    b.profile.comment.push(comment);
    b.profile
}

/// The gzipped profile.pb.gz bytes.
pub fn encode(input: &Input) -> std::io::Result<Vec<u8>> {
    let bytes = profile(input).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&bytes)?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_and_spans_in_their_own_columns() {
        let folded = vec![("app;main;hot".to_string(), 3), ("app;main".to_string(), 1)];
        let stacks = vec![SpanStack {
            frames: vec!["app".into(), "main".into()],
            spans: 2,
            self_ns: 500,
        }];
        let p = profile(&Input {
            folded: &folded,
            sample_hz: Some(100),
            span_stacks: &stacks,
            duration_ns: 7,
        });
        assert_eq!(p.string_table[0], "");
        let types: Vec<&str> = p
            .sample_type
            .iter()
            .map(|t| p.string_table[t.r#type as usize].as_str())
            .collect();
        assert_eq!(types, ["samples", "cpu", "spans", "span_time"]);
        assert_eq!(p.sample[0].value, vec![3, 30_000_000, 0, 0]);
        assert_eq!(p.sample[2].value, vec![0, 0, 2, 500]);
        // Innermost first: hot, main, app; `app` and `main` are shared.
        assert_eq!(p.sample[0].location_id, vec![1, 2, 3]);
        assert_eq!(p.sample[2].location_id, vec![2, 3]);
        assert_eq!(p.string_table[p.function[0].name as usize], "hot");
        assert_eq!(p.string_table[p.default_sample_type as usize], "cpu");
        let decoded = Profile::decode(
            profile(&Input {
                folded: &folded,
                sample_hz: Some(100),
                span_stacks: &stacks,
                duration_ns: 7,
            })
            .encode_to_vec()
            .as_slice(),
        )
        .unwrap();
        assert_eq!(decoded, p);
    }

    #[test]
    fn python_frames_carry_their_file_and_line() {
        let folded = vec![(
            "python3;main (app.py:3);Trainer.step (train.py:88);PyNumber_Add".to_string(),
            1,
        )];
        let p = profile(&Input {
            folded: &folded,
            sample_hz: Some(100),
            span_stacks: &[],
            duration_ns: 7,
        });
        let text = |i: i64| p.string_table[i as usize].as_str();
        let functions: Vec<(&str, &str, &str, i64)> = p
            .function
            .iter()
            .map(|f| (text(f.name), text(f.system_name), text(f.filename), f.start_line))
            .collect();
        assert_eq!(
            functions,
            [
                ("PyNumber_Add", "PyNumber_Add", "", 0),
                ("Trainer.step", "Trainer.step (train.py:88)", "train.py", 88),
                ("main", "main (app.py:3)", "app.py", 3),
                ("python3", "python3", "", 0),
            ]
        );
        let lines: Vec<i64> = p.location.iter().map(|l| l.line[0].line).collect();
        assert_eq!(lines, [0, 88, 3, 0]);
        for not_python in ["f (x)", "f (a:b)", "(x.py:3)", "g (x.py:)", "h (a(b).py:2)"] {
            assert_eq!(python_source(not_python), None, "{not_python}");
        }
        assert_eq!(
            python_source("<lambda> (<frozen os>:7)"),
            Some(("<lambda>", "<frozen os>", 7))
        );
    }

    /// A process named `x;y` (newline) `z`: its CPU samples' root, read from stacks.folded, is
    /// `x:y:z`; its spans' root is named the same, so both meet at one location.
    #[test]
    fn span_and_sample_roots_meet_for_names_with_separators() {
        let folded = vec![("x:y:z;main".to_string(), 1)];
        let stacks = vec![SpanStack {
            frames: vec!["x;y\nz".into(), "main".into()],
            spans: 1,
            self_ns: 5,
        }];
        let p = profile(&Input {
            folded: &folded,
            sample_hz: Some(100),
            span_stacks: &stacks,
            duration_ns: 7,
        });
        assert_eq!(p.sample[0].location_id, p.sample[1].location_id);
        assert_eq!(p.location.len(), 2);
    }
}
