//! Bottlenecks of a capture: spans more than 2σ above their probe's mean (for probes with enough
//! spans), functions ranked by their share of self time (spans) and of self samples (CPU
//! sampling), and a hint when waits — CUDA synchronization, locks — take most of the traced time.
use std::collections::BTreeMap;

use serde::Serialize;

use super::{capture::Capture, spans::Nesting, stats::mean_sd};

/// Standard deviations above the mean beyond which a span is an outlier.
pub const SIGMAS: f64 = 2.0;
/// Share of the traced time in waits from which the wait hint is given.
pub const WAIT_DOMINATES: f64 = 0.5;

/// One unusually long span.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outlier {
    pub name: String,
    pub kind: String,
    /// Start as in trace.json (CLOCK_MONOTONIC), and from the capture's first span.
    pub ts_ns: u64,
    pub offset_ns: u64,
    pub dur_ns: u64,
    pub mean_ns: u64,
    pub stddev_ns: u64,
    /// (dur − mean) / σ, two decimals.
    pub sigmas: f64,
    pub pid: u32,
    pub tid: u32,
    pub thread: String,
    /// The span's `args` without `depth`; null when it had none.
    pub args: Option<serde_json::Value>,
}

/// A function's share of self time (ns) or of self samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Share {
    pub name: String,
    pub value: u64,
    pub percent: f64,
}

/// Time in one kind of wait.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Waits {
    /// `cuda_sync` or `locks`.
    pub kind: &'static str,
    pub wait_ns: u64,
    /// Of the traced time (the outermost spans of every thread).
    pub percent: f64,
    /// The waiting functions, most time first.
    pub functions: Vec<Share>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bottlenecks {
    /// Probes with fewer spans are not searched for outliers.
    pub min_count: u64,
    /// Outliers found in all; `outliers` lists the most extreme.
    pub outliers_total: u64,
    pub outliers: Vec<Outlier>,
    pub self_time: Vec<Share>,
    pub self_samples: Vec<Share>,
    pub waits: Vec<Waits>,
    pub hints: Vec<String>,
}

/// Which wait a function is, by name: CUDA synchronization or a lock/condition wait.
pub fn wait_kind(name: &str) -> Option<&'static str> {
    if name.starts_with("cu") && name.contains("Synchronize") {
        return Some("cuda_sync");
    }
    let lower = name.to_ascii_lowercase();
    const LOCKS: &[&str] = &[
        "mutex_lock",
        "mutex::lock",
        "lll_lock",
        "cond_wait",
        "cond_timedwait",
        "rwlock_rdlock",
        "rwlock_wrlock",
        "sem_wait",
        "sem_timedwait",
        "futex",
        "spin_lock",
    ];
    LOCKS.iter().any(|l| lower.contains(l)).then_some("locks")
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    (part as f64 * 10_000.0 / whole as f64).round() / 100.0
}

/// Top `limit` of `values` by value (then name) as shares of `whole`.
fn shares(values: BTreeMap<String, u64>, whole: u64, limit: usize) -> Vec<Share> {
    let mut list: Vec<Share> = values
        .into_iter()
        .filter(|(_, v)| *v > 0)
        .map(|(name, value)| Share {
            percent: percent(value, whole),
            name,
            value,
        })
        .collect();
    list.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
    list.truncate(limit);
    list
}

/// The span's arguments without `depth`.
fn args(raw: Option<&str>) -> Option<serde_json::Value> {
    let mut value: serde_json::Value = serde_json::from_str(raw?).ok()?;
    let object = value.as_object_mut()?;
    object.remove("depth");
    (!object.is_empty()).then_some(value)
}

/// Finds the bottlenecks; lists at most `limit` of each kind.
pub fn find(capture: &Capture, nesting: &Nesting, min_count: u64, limit: usize) -> Bottlenecks {
    let mut outliers = outliers(capture, min_count);
    let outliers_total = outliers.len() as u64;
    outliers.truncate(limit);

    let traced: u64 = capture
        .spans
        .iter()
        .zip(&nesting.parent)
        .filter(|(_, p)| p.is_none())
        .map(|(s, _)| s.dur_ns)
        .sum();
    let (self_by_name, waits) = self_times_and_waits(capture, nesting);
    let self_total: u64 = nesting.self_ns.iter().sum();
    let mut sampled: BTreeMap<String, u64> = BTreeMap::new();
    for (stack, n) in &capture.folded {
        let leaf = stack.rsplit(';').next().unwrap_or(stack);
        *sampled
            .entry(leaf.strip_suffix("_[k]").unwrap_or(leaf).to_string())
            .or_default() += n;
    }
    let waits: Vec<Waits> = waits
        .into_iter()
        .map(|(kind, functions)| {
            let wait_ns = functions.values().sum();
            Waits {
                kind,
                wait_ns,
                percent: percent(wait_ns, traced),
                functions: shares(functions, traced, limit),
            }
        })
        .collect();
    let hints = wait_hints(&waits, traced);
    Bottlenecks {
        min_count,
        outliers_total,
        outliers,
        self_time: shares(self_by_name, self_total, limit),
        self_samples: shares(sampled, capture.samples(), limit),
        waits,
        hints,
    }
}

/// The spans more than [`SIGMAS`] standard deviations longer than the mean of their name (of
/// names with at least `min_count` spans, and 2), furthest out first.
fn outliers(capture: &Capture, min_count: u64) -> Vec<Outlier> {
    let mut durations: Vec<Vec<u64>> = vec![Vec::new(); capture.names.len()];
    for span in &capture.spans {
        durations[span.name as usize].push(span.dur_ns);
    }
    let moments: Vec<Option<(f64, f64)>> = durations
        .iter()
        .map(|d| (d.len() as u64 >= min_count.max(2)).then(|| mean_sd(d)))
        .collect();
    let first = capture.spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let mut outliers: Vec<Outlier> = Vec::new();
    for span in &capture.spans {
        let Some((mean, sd)) = moments[span.name as usize] else {
            continue;
        };
        let dur = span.dur_ns as f64;
        if sd <= 0.0 || dur <= mean + SIGMAS * sd {
            continue;
        }
        let name = &capture.names[span.name as usize];
        outliers.push(Outlier {
            name: name.name.clone(),
            kind: name.cat.clone(),
            ts_ns: span.start_ns,
            offset_ns: span.start_ns - first,
            dur_ns: span.dur_ns,
            mean_ns: mean.round() as u64,
            stddev_ns: sd.round() as u64,
            sigmas: ((dur - mean) / sd * 100.0).round() / 100.0,
            pid: span.pid,
            tid: span.tid,
            thread: capture
                .threads
                .get(&(span.pid, span.tid))
                .cloned()
                .unwrap_or_default(),
            args: args(span.args.as_deref()),
        });
    }
    outliers.sort_by(|a, b| {
        b.sigmas
            .total_cmp(&a.sigmas)
            .then(a.ts_ns.cmp(&b.ts_ns))
            .then_with(|| a.name.cmp(&b.name))
    });
    outliers
}

/// Self time by span name, and wait time by wait kind and function name.
type SelfTimesAndWaits = (
    BTreeMap<String, u64>,
    BTreeMap<&'static str, BTreeMap<String, u64>>,
);

/// The self time of each span name, and the time spent in each kind of wait by function (a wait
/// inside another wait counted once).
fn self_times_and_waits(capture: &Capture, nesting: &Nesting) -> SelfTimesAndWaits {
    let mut self_by_name: BTreeMap<String, u64> = BTreeMap::new();
    let mut waits: BTreeMap<&'static str, BTreeMap<String, u64>> = BTreeMap::new();
    for (i, span) in capture.spans.iter().enumerate() {
        let name = &capture.names[span.name as usize].name;
        *self_by_name.entry(name.clone()).or_default() += nesting.self_ns[i];
        // A wait inside another wait (cudaDeviceSynchronize → cuCtxSynchronize) counts once.
        if let Some(kind) = wait_kind(name) {
            let mut outer_wait = false;
            let mut at = nesting.parent[i];
            while let Some(p) = at {
                if wait_kind(&capture.names[capture.spans[p as usize].name as usize].name).is_some() {
                    outer_wait = true;
                    break;
                }
                at = nesting.parent[p as usize];
            }
            if !outer_wait {
                *waits.entry(kind).or_default().entry(name.clone()).or_default() += span.dur_ns;
            }
        }
    }
    (self_by_name, waits)
}

/// What to do where waits take [`WAIT_DOMINATES`] of the `traced` time or more: one hint per
/// kind of wait.
fn wait_hints(waits: &[Waits], traced: u64) -> Vec<String> {
    let mut hints = Vec::new();
    let wait_total: u64 = waits.iter().map(|w| w.wait_ns).sum();
    if traced > 0 && wait_total as f64 >= WAIT_DOMINATES * traced as f64 {
        for w in waits {
            let what = match w.kind {
                "cuda_sync" => "CUDA synchronization: the CPU waits for the GPU; queue more work before synchronizing, or overlap it with streams and asynchronous copies",
                _ => "lock waits: threads contend; shorten the critical sections or split the lock",
            };
            let top = w
                .functions
                .first()
                .map_or(String::new(), |f| format!(", most in {}", f.name));
            hints.push(format!(
                "waits dominate: {:.1}% of the traced time is {what} ({}{top})",
                w.percent,
                crate::model::duration::human(w.wait_ns),
            ));
        }
    }
    hints
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{
        capture::{Name, Span},
        spans::nest,
    };

    fn capture(spans: Vec<(u32, u64, u64, Option<&str>)>, names: &[&str]) -> Capture {
        Capture {
            names: names
                .iter()
                .map(|n| Name {
                    name: n.to_string(),
                    cat: "uprobe".into(),
                })
                .collect(),
            spans: spans
                .into_iter()
                .map(|(name, start_ns, dur_ns, args)| Span {
                    name,
                    pid: 1,
                    tid: 2,
                    start_ns,
                    dur_ns,
                    args: args.map(Into::into),
                })
                .collect(),
            ..Capture::default()
        }
    }

    #[test]
    fn a_long_span_among_regular_ones_is_an_outlier() {
        let mut spans: Vec<_> = (0..20).map(|i| (0, i * 1000, 100 + i % 3, None)).collect();
        spans.push((0, 50_000, 900, Some(r#"{"depth":0,"arg0":7}"#)));
        let c = capture(spans, &["work"]);
        let b = find(&c, &nest(&c.spans), 10, 20);
        assert_eq!(b.outliers_total, 1);
        let o = &b.outliers[0];
        assert_eq!((o.dur_ns, o.ts_ns, o.offset_ns), (900, 50_000, 50_000));
        assert!(o.sigmas > 4.0, "{o:?}");
        assert_eq!(o.args, Some(serde_json::json!({"arg0": 7})));
        // With a higher minimum count the probe is not searched.
        assert_eq!(find(&c, &nest(&c.spans), 50, 20).outliers_total, 0);
    }

    #[test]
    fn waits_that_dominate_give_a_hint() {
        // step [0,100) holds a launch (10) and a sync (70) wrapping the driver's sync (60).
        let c = capture(
            vec![
                (0, 0, 100, None),
                (1, 5, 10, None),
                (2, 20, 70, None),
                (3, 25, 60, None),
            ],
            &[
                "step",
                "cudaLaunchKernel",
                "cudaDeviceSynchronize",
                "cuCtxSynchronize",
            ],
        );
        let b = find(&c, &nest(&c.spans), 10, 20);
        assert_eq!(b.waits.len(), 1);
        assert_eq!(
            (b.waits[0].kind, b.waits[0].wait_ns, b.waits[0].percent),
            ("cuda_sync", 70, 70.0)
        );
        assert_eq!(b.hints.len(), 1);
        assert!(b.hints[0].starts_with("waits dominate: 70.0% of the traced time is CUDA synchronization"));
        assert_eq!(b.self_time[0].name, "cuCtxSynchronize");
        assert_eq!(b.self_time[0].percent, 60.0);
        assert_eq!(wait_kind("pthread_mutex_lock"), Some("locks"));
        assert_eq!(wait_kind("forward"), None);
    }
}
