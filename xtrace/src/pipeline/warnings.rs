//! `--warn-over PATTERN=DURATION`: a span longer than the limit of the first rule whose glob
//! matches its name is counted, and the first [`MAX_SHOWN`] are reported live as warning lines.
use std::collections::HashMap;

use serde::Serialize;

use crate::{model::duration::human, probes::glob};

/// Warning lines shown while recording; later ones are only counted.
pub const MAX_SHOWN: u64 = 100;

/// One `--warn-over` rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarnRule {
    /// As the user wrote it.
    pub text: String,
    pub pattern: String,
    pub limit_ns: u64,
}

impl WarnRule {
    /// `PATTERN=DURATION`; `duration` parses the part after the last `=`.
    pub fn parse(text: &str, duration: impl Fn(&str) -> Result<u64, String>) -> Result<Self, String> {
        let (pattern, limit) = text
            .rsplit_once('=')
            .ok_or_else(|| format!("`{text}` is not PATTERN=DURATION, e.g. 'work=100ms' or 'ns::*=1ms'"))?;
        if pattern.is_empty() {
            return Err(format!("`{text}` has an empty PATTERN; `*` matches every span"));
        }
        Ok(WarnRule {
            text: text.to_string(),
            pattern: pattern.to_string(),
            limit_ns: duration(limit)?,
        })
    }
}

/// One rule's count in summary.json.
#[derive(Clone, Debug, Serialize)]
pub struct WarnSummary {
    pub rule: String,
    pub limit_ns: u64,
    /// Spans longer than the limit.
    pub count: u64,
}

#[derive(Debug, Default)]
pub struct Warnings {
    rules: Vec<WarnRule>,
    /// Per probe id: its name and the rule its spans fall under, resolved once (a span may carry
    /// its own name instead).
    probes: Vec<(String, Option<usize>)>,
    counts: Vec<u64>,
    /// The rule of each span name seen so far (None: no rule matches).
    rule_of: HashMap<Box<str>, Option<usize>>,
    pending: Vec<String>,
    shown: u64,
}

/// The first rule whose pattern matches `name`, or the function's own name when `name` is one
/// told apart by its file (`work (app)`, a function of that name being traced in two files) or
/// by its source file (`free_mem (setenv.c)`), or both.
fn first_rule(rules: &[WarnRule], name: &str) -> Option<usize> {
    // Without each ` (...)` suffix in turn: a function told apart in its file, then by its file
    // (`free_mem (setenv.c) (libc.so.6)`).
    let unqualified = |name: &str| -> Option<String> {
        name.strip_suffix(')')
            .and_then(|n| n.rsplit_once(" ("))
            .filter(|(_, file)| !file.contains(['(', ')']))
            .map(|(function, _)| function.to_string())
    };
    let names: Vec<String> = std::iter::successors(Some(name.to_string()), |n| unqualified(n)).collect();
    rules
        .iter()
        .position(|r| names.iter().any(|n| glob::matches(&r.pattern, n)))
}

impl Warnings {
    /// `probes`: the probe names by probe id.
    pub fn new(rules: Vec<WarnRule>, probes: Vec<String>) -> Self {
        Warnings {
            counts: vec![0; rules.len()],
            probes: probes
                .into_iter()
                .map(|name| {
                    let rule = first_rule(&rules, &name);
                    (name, rule)
                })
                .collect(),
            rules,
            ..Default::default()
        }
    }

    /// A span (`X` event) about to be written. Spans of a probe cost an index lookup and a
    /// comparison; only a span over its limit builds a line.
    pub fn span(&mut self, span: &super::writer::SpanOut) {
        let super::writer::EventKind::Span { dur_ns, .. } = span.kind else {
            return;
        };
        if self.rules.is_empty() {
            return;
        }
        let ids = (span.pid, span.tid);
        if let Some(name) = &span.name {
            return self.check(name, dur_ns, ids, span.start_ns);
        }
        let Some((_, Some(index))) = self.probes.get(span.probe) else {
            return;
        };
        let index = *index;
        if dur_ns > self.rules[index].limit_ns {
            let name = self.probes[span.probe].0.clone();
            self.over(index, &name, dur_ns, ids, span.start_ns);
        }
    }

    /// A span named `name` of `dur_ns` by (pid, tid), begun at `start_ns`.
    pub fn check(&mut self, name: &str, dur_ns: u64, ids: (u32, u32), start_ns: u64) {
        if self.rules.is_empty() {
            return;
        }
        let rule = match self.rule_of.get(name) {
            Some(rule) => *rule,
            None => {
                let rule = first_rule(&self.rules, name);
                self.rule_of.insert(name.into(), rule);
                rule
            }
        };
        if let Some(index) = rule {
            if dur_ns > self.rules[index].limit_ns {
                self.over(index, name, dur_ns, ids, start_ns);
            }
        }
    }

    /// Counts a span over the limit of rule `index`, and words it while lines are still shown.
    fn over(&mut self, index: usize, name: &str, dur_ns: u64, (pid, tid): (u32, u32), start_ns: u64) {
        let rule = &self.rules[index];
        self.counts[index] += 1;
        self.shown += 1;
        if self.shown <= MAX_SHOWN {
            self.pending.push(format!(
                "{name} took {}, over its limit of {} (--warn-over {}): pid {pid} tid {tid} at {:.6} s",
                human(dur_ns),
                human(rule.limit_ns),
                rule.text,
                start_ns as f64 / 1e9
            ));
        }
        if self.shown == MAX_SHOWN + 1 {
            self.pending.push(format!(
                "more than {MAX_SHOWN} spans over their --warn-over limits; the rest are only counted in summary.json"
            ));
        }
    }

    /// The spans over their limits so far, under every rule.
    pub fn over_total(&self) -> u64 {
        self.shown
    }

    /// The warning lines not yet shown.
    pub fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.pending)
    }

    pub fn summary(&self) -> Vec<WarnSummary> {
        self.rules
            .iter()
            .zip(&self.counts)
            .map(|(rule, count)| WarnSummary {
                rule: rule.text.clone(),
                limit_ns: rule.limit_ns,
                count: *count,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> Result<u64, String> {
        text.strip_suffix("ms")
            .and_then(|n| n.parse::<u64>().ok())
            .map(|n| n * 1_000_000)
            .ok_or_else(|| format!("bad {text}"))
    }

    #[test]
    fn first_matching_rule_counts_and_the_first_lines_are_shown() {
        let rules = vec![
            WarnRule::parse("ns::*=5ms", ms).unwrap(),
            WarnRule::parse("*=100ms", ms).unwrap(),
        ];
        let mut w = Warnings::new(rules, Vec::new());
        w.check("ns::work", 6_000_000, (1, 2), 3_000_000_000);
        w.check("ns::work", 5_000_000, (1, 2), 0);
        w.check("other", 50_000_000, (1, 2), 0);
        w.check("other", 150_000_000, (1, 2), 0);
        let lines = w.take();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            "ns::work took 6.00ms, over its limit of 5.00ms (--warn-over ns::*=5ms): pid 1 tid 2 at 3.000000 s"
        );
        let counts: Vec<u64> = w.summary().iter().map(|s| s.count).collect();
        assert_eq!(counts, vec![1, 1]);
        for _ in 0..MAX_SHOWN + 5 {
            w.check("other", 200_000_000, (1, 2), 0);
        }
        assert_eq!(
            w.take().len() as u64,
            MAX_SHOWN - 2 + 1,
            "capped, then one closing line"
        );
        assert_eq!(w.summary()[1].count, MAX_SHOWN + 6);
    }

    #[test]
    fn a_function_named_with_its_file_matches_by_its_own_name() {
        let rules = vec![WarnRule::parse("work=5ms", ms).unwrap()];
        let mut w = Warnings::new(rules, Vec::new());
        w.check("work (app)", 6_000_000, (1, 2), 0);
        w.check("work (libwork.so)", 6_000_000, (1, 2), 0);
        w.check("ns::work(int)", 6_000_000, (1, 2), 0);
        // Told apart in its file, then by its file.
        w.check(
            "work (util.c) (/proc/7/root/usr/lib/libwork.so)",
            6_000_000,
            (1, 2),
            0,
        );
        assert_eq!(w.summary()[0].count, 3);
    }

    #[test]
    fn probe_spans_use_the_probe_name_and_its_rule() {
        use crate::pipeline::writer::SpanOut;
        let rules = vec![WarnRule::parse("work=5ms", ms).unwrap()];
        let mut w = Warnings::new(rules, vec!["work".into(), "other".into()]);
        let span = |probe, dur_ns| SpanOut {
            probe,
            pid: 1,
            tid: 2,
            kind: crate::pipeline::writer::EventKind::span(dur_ns, 0),
            ..Default::default()
        };
        w.span(&span(0, 6_000_000));
        w.span(&span(0, 5_000_000));
        w.span(&span(1, 60_000_000));
        w.span(&SpanOut {
            kind: crate::pipeline::writer::EventKind::INSTANT,
            ..span(0, 9_000_000)
        });
        let lines = w.take();
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("work took 6.00ms"), "{}", lines[0]);
        assert_eq!(w.summary()[0].count, 1);
    }

    #[test]
    fn malformed_rules_are_refused() {
        assert!(WarnRule::parse("work", ms)
            .unwrap_err()
            .contains("PATTERN=DURATION"));
        assert!(WarnRule::parse("=5ms", ms).unwrap_err().contains("empty PATTERN"));
        assert_eq!(WarnRule::parse("a=b=5ms", ms).unwrap().pattern, "a=b");
    }
}
