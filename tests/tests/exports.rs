//! Export formats of a capture (no root needed): profile.pb.gz decoded by a hand-written protobuf
//! wire reader (not xtrace's prost structs) with totals checked against the capture, callgrind
//! parsed back, the span flamegraph, and a gzip-compressed trace read like a plain one.

use std::{collections::HashMap, io::Read};

use xtrace_tests::{
    args,
    captures::{capture_json, data, profile_totals, trace_totals, xtrace, xtrace_in},
    TempDir,
};

const WORKLOAD: &str = "workload-1";

/// Reads protobuf wire format: (field number, wire type, varint value or bytes).
struct Wire<'a>(&'a [u8]);

enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

impl<'a> Wire<'a> {
    fn varint(&mut self) -> u64 {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.0.split_first().expect("truncated varint");
            self.0 = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return value;
            }
        }
        panic!("varint longer than 10 bytes")
    }

    fn next(&mut self) -> Option<(u64, Field<'a>)> {
        if self.0.is_empty() {
            return None;
        }
        let key = self.varint();
        let field = match key & 7 {
            0 => Field::Varint(self.varint()),
            2 => {
                let len = self.varint() as usize;
                let (bytes, rest) = self.0.split_at(len);
                self.0 = rest;
                Field::Bytes(bytes)
            }
            other => panic!("unexpected wire type {other} in a pprof profile"),
        };
        Some((key >> 3, field))
    }
}

/// A repeated integer field, packed or not.
fn push_ints(out: &mut Vec<u64>, field: Field) {
    match field {
        Field::Varint(v) => out.push(v),
        Field::Bytes(bytes) => {
            let mut w = Wire(bytes);
            while !w.0.is_empty() {
                out.push(w.varint());
            }
        }
    }
}

/// What the test needs of a profile: sample type names, per-type totals, the string table, and
/// the names at each sample's locations (innermost first).
struct Decoded {
    strings: Vec<String>,
    types: Vec<(u64, u64)>,
    samples: Vec<(Vec<u64>, Vec<u64>)>,
    function_names: HashMap<u64, u64>,
    location_functions: HashMap<u64, u64>,
}

fn decode(gz: &[u8]) -> Decoded {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(gz).read_to_end(&mut bytes).unwrap();
    let mut d = Decoded {
        strings: Vec::new(),
        types: Vec::new(),
        samples: Vec::new(),
        function_names: HashMap::new(),
        location_functions: HashMap::new(),
    };
    let mut w = Wire(&bytes);
    while let Some((number, field)) = w.next() {
        match (number, field) {
            (1, Field::Bytes(b)) => {
                let (mut t, mut u) = (0, 0);
                let mut inner = Wire(b);
                while let Some((n, f)) = inner.next() {
                    match (n, f) {
                        (1, Field::Varint(v)) => t = v,
                        (2, Field::Varint(v)) => u = v,
                        _ => {}
                    }
                }
                d.types.push((t, u));
            }
            (2, Field::Bytes(b)) => {
                let (mut locations, mut values) = (Vec::new(), Vec::new());
                let mut inner = Wire(b);
                while let Some((n, f)) = inner.next() {
                    match n {
                        1 => push_ints(&mut locations, f),
                        2 => push_ints(&mut values, f),
                        _ => {}
                    }
                }
                d.samples.push((locations, values));
            }
            (4, Field::Bytes(b)) => {
                let (mut id, mut function) = (0, 0);
                let mut inner = Wire(b);
                while let Some((n, f)) = inner.next() {
                    match (n, f) {
                        (1, Field::Varint(v)) => id = v,
                        (4, Field::Bytes(line)) => {
                            let mut l = Wire(line);
                            while let Some((ln, lf)) = l.next() {
                                if let (1, Field::Varint(v)) = (ln, lf) {
                                    function = v;
                                }
                            }
                        }
                        _ => {}
                    }
                }
                d.location_functions.insert(id, function);
            }
            (5, Field::Bytes(b)) => {
                let (mut id, mut name) = (0, 0);
                let mut inner = Wire(b);
                while let Some((n, f)) = inner.next() {
                    match (n, f) {
                        (1, Field::Varint(v)) => id = v,
                        (2, Field::Varint(v)) => name = v,
                        _ => {}
                    }
                }
                d.function_names.insert(id, name);
            }
            (6, Field::Bytes(b)) => d.strings.push(String::from_utf8(b.to_vec()).unwrap()),
            _ => {}
        }
    }
    d
}

impl Decoded {
    fn total(&self, kind: &str) -> u64 {
        let column = self
            .types
            .iter()
            .position(|(t, _)| self.strings[*t as usize] == kind)
            .unwrap_or_else(|| panic!("no sample type {kind}"));
        self.samples.iter().map(|(_, v)| v[column]).sum()
    }

    fn frames(&self, locations: &[u64]) -> Vec<&str> {
        locations
            .iter()
            .map(|l| self.strings[self.function_names[&self.location_functions[l]] as usize].as_str())
            .collect()
    }
}

#[test]
fn pprof_decodes_and_its_totals_match_the_capture() {
    let tmp = TempDir::new("pprof");
    let file = tmp.join("profile.pb.gz");
    let ran = xtrace(args!["report", data(WORKLOAD), "--format", "pprof", "-o", &file]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let p = decode(&std::fs::read(&file).unwrap());
    assert_eq!(p.strings[0], "", "string 0 is empty");
    let types: Vec<(&str, &str)> = p
        .types
        .iter()
        .map(|(t, u)| (p.strings[*t as usize].as_str(), p.strings[*u as usize].as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("samples", "count"),
            ("cpu", "nanoseconds"),
            ("spans", "count"),
            ("span_time", "nanoseconds")
        ]
    );
    let summary = capture_json(WORKLOAD, "summary.json");
    let [samples, cpu_ns, spans, outer_ns] = profile_totals(WORKLOAD);
    assert_eq!(p.total("samples"), samples);
    assert_eq!(p.total("cpu"), cpu_ns);
    assert_eq!(p.total("spans"), spans);
    let probes: u64 = summary["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["count"].as_u64().unwrap())
        .sum();
    assert_eq!(p.total("spans"), probes, "every recorded call is in the profile");
    assert_eq!(
        p.total("span_time"),
        outer_ns,
        "self times add up to the outermost spans"
    );
    // Stacks: innermost first, the process last.
    let path = ["matmul", "backward", "train_step", "workload"];
    assert!(
        p.samples.iter().any(|(l, v)| v[2] > 0 && p.frames(l) == path),
        "a span sample for {path:?}"
    );
    // The default output name, in the current directory.
    let ran = xtrace_in(tmp.path(), args!["report", data(WORKLOAD), "--format", "pprof"]);
    assert_eq!(ran.stderr.trim(), "xtrace: wrote profile.pb.gz");
    assert!(tmp.join("profile.pb.gz").is_file());
}

/// Callgrind text parsed back: event names, the summary line, per function name its self costs,
/// and the calls into each function.
struct Callgrind {
    events: Vec<String>,
    summary: Vec<u64>,
    self_cost: HashMap<String, Vec<u64>>,
    calls_into: HashMap<String, u64>,
}

fn parse_callgrind(text: &str) -> Callgrind {
    let mut events = Vec::new();
    let mut summary = Vec::new();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut self_cost: HashMap<String, Vec<u64>> = HashMap::new();
    let mut calls_into: HashMap<String, u64> = HashMap::new();
    let (mut current, mut callee, mut pending_call) = (String::new(), String::new(), None);
    let resolve = |names: &mut HashMap<String, String>, spec: &str| -> String {
        let spec = spec.trim();
        let (id, name) = match spec.split_once(") ") {
            Some((id, name)) => (id.trim_start_matches('('), Some(name)),
            None => (spec.trim_start_matches('(').trim_end_matches(')'), None),
        };
        if let Some(name) = name {
            names.insert(id.to_string(), name.to_string());
        }
        names
            .get(id)
            .cloned()
            .unwrap_or_else(|| panic!("undefined function id {id}"))
    };
    for line in text.lines() {
        if let Some(e) = line.strip_prefix("events: ") {
            events = e.split_whitespace().map(String::from).collect();
        } else if let Some(s) = line.strip_prefix("summary: ") {
            summary = s.split_whitespace().map(|n| n.parse().unwrap()).collect();
        } else if let Some(f) = line.strip_prefix("fn=") {
            current = resolve(&mut names, f);
        } else if let Some(f) = line.strip_prefix("cfn=") {
            callee = resolve(&mut names, f);
        } else if let Some(c) = line.strip_prefix("calls=") {
            let n: u64 = c.split_whitespace().next().unwrap().parse().unwrap();
            assert!(n > 0, "calls=0 would be read as self cost");
            pending_call = Some(n);
        } else if line.starts_with(|c: char| c.is_ascii_digit()) {
            let costs: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .map(|n| n.parse().unwrap())
                .collect();
            assert_eq!(costs.len(), events.len(), "{line}");
            if let Some(n) = pending_call.take() {
                *calls_into.entry(callee.clone()).or_default() += n;
            } else {
                let own = self_cost.entry(current.clone()).or_insert(vec![0; events.len()]);
                for (o, c) in own.iter_mut().zip(costs) {
                    *o += c;
                }
            }
        } else {
            assert!(
                line.is_empty() || line.starts_with('#') || line.contains(": ") || line.starts_with("fl="),
                "unexpected line {line:?}"
            );
        }
    }
    Callgrind {
        events,
        summary,
        self_cost,
        calls_into,
    }
}

#[test]
fn callgrind_parses_back_to_the_capture() {
    let ran = xtrace(args!["report", data(WORKLOAD), "--format", "callgrind"]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let Callgrind {
        events,
        summary,
        self_cost,
        calls_into,
    } = parse_callgrind(&ran.stdout);
    assert_eq!(events, ["Span_ns", "Samples"]);
    let totals: Vec<u64> = (0..2).map(|i| self_cost.values().map(|c| c[i]).sum()).collect();
    assert_eq!(totals, summary, "self costs add up to the summary line");
    let (outer_ns, _) = trace_totals(WORKLOAD);
    let capture = capture_json(WORKLOAD, "summary.json");
    assert_eq!(summary, [outer_ns, capture["samples"].as_u64().unwrap()]);
    let count = |name: &str| {
        capture["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["count"]
            .as_u64()
            .unwrap()
    };
    // Every matmul is called by backward; matmul and spin_us are leaves with their own cost.
    assert_eq!(calls_into["matmul"], count("matmul"));
    assert_eq!(self_cost["matmul"][1], 0, "matmul's samples are in spin_us");
    assert!(self_cost["spin_us"][1] > 0);
}

#[test]
fn span_flamegraph_and_gzip_traces() {
    let tmp = TempDir::new("spanflame");
    let svg = tmp.join("spans.svg");
    let ran = xtrace(args![
        "report",
        data(WORKLOAD),
        "--format",
        "span-flamegraph",
        "-o",
        &svg
    ]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let text = std::fs::read_to_string(&svg).unwrap();
    let (outer_ns, spans) = trace_totals(WORKLOAD);
    assert!(
        text.contains(&format!("xtrace: {spans} spans")),
        "title counts the spans"
    );
    assert!(
        text.contains(&format!(
            "<title>workload ({} ns, 100.00%)</title>",
            group(outer_ns)
        )),
        "the root holds all traced time"
    );
    assert!(text.contains("<title>matmul ("), "nested frames");
    assert!(text.contains("inverted = false"), "upright by default");
    let icicle = tmp.join("icicle.svg");
    let ran = xtrace(args![
        "report",
        data(WORKLOAD),
        "--format",
        "span-flamegraph",
        "--icicle",
        "-o",
        &icicle
    ]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let inverted = std::fs::read_to_string(&icicle).unwrap();
    assert!(inverted.contains("inverted = true"), "--icicle hangs the stacks");
    let titles = |svg: &str| {
        let mut titles: Vec<String> = svg
            .split("<title>")
            .skip(1)
            .map(|t| t.split("</title>").next().unwrap().to_string())
            .collect();
        titles.sort();
        titles
    };
    assert_eq!(titles(&inverted), titles(&text), "the same frames, only hanging");
    // The same capture with trace.json gzipped reports the same.
    let gz = tmp.join("gz");
    std::fs::create_dir(&gz).unwrap();
    for f in ["summary.json", "stacks.folded"] {
        std::fs::copy(data(WORKLOAD).join(f), gz.join(f)).unwrap();
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(
        &mut encoder,
        &std::fs::read(data(WORKLOAD).join("trace.json")).unwrap(),
    )
    .unwrap();
    std::fs::write(gz.join("trace.json.gz"), encoder.finish().unwrap()).unwrap();
    let plain = xtrace(args!["report", data(WORKLOAD), "--format", "json"]);
    let zipped = xtrace(args!["report", &gz, "--format", "json"]);
    assert_eq!(zipped.code, Some(0), "{}", zipped.stderr);
    assert_eq!(plain.stdout, zipped.stdout);
}

/// 1234567 → "1,234,567", as inferno writes counts.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
