//! Statistics of a capture's spans: per probe (name and category) count, total, self time, mean,
//! standard deviation and exact nearest-rank percentiles; per thread the spans, the time in
//! outermost spans and the probe with the most self time there.
use std::collections::BTreeMap;

use serde::Serialize;

use super::{
    capture::{Capture, Name},
    spans::Nesting,
};

/// One probe's spans (a uprobe, a USDT or NVTX range, a CUDA call), all times in ns.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeStats {
    pub name: String,
    /// The trace category: `uprobe`, `usdt_span`, `cuda`, ...
    pub kind: String,
    pub count: u64,
    pub total_ns: u64,
    /// Total minus the time in spans nested directly inside these.
    pub self_ns: u64,
    pub min_ns: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Population standard deviation of the durations.
    pub stddev_ns: u64,
}

pub use crate::pipeline::stats::percentile;

/// Mean and population standard deviation.
pub fn mean_sd(values: &[u64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = values.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Durations of every span, per name (the order of trace.json).
pub fn durations(capture: &Capture) -> BTreeMap<&Name, Vec<u64>> {
    let mut by_name: BTreeMap<&Name, Vec<u64>> = BTreeMap::new();
    for span in &capture.spans {
        by_name
            .entry(&capture.names[span.name as usize])
            .or_default()
            .push(span.dur_ns);
    }
    by_name
}

/// Statistics of the durations of one probe; `self_ns` is given.
pub fn summarize(name: &Name, mut durations: Vec<u64>, self_ns: u64) -> ProbeStats {
    durations.sort_unstable();
    let total: u128 = durations.iter().map(|&d| u128::from(d)).sum();
    let (_, sd) = mean_sd(&durations);
    let count = durations.len() as u64;
    ProbeStats {
        name: name.name.clone(),
        kind: name.cat.clone(),
        count,
        total_ns: total.min(u128::from(u64::MAX)) as u64,
        self_ns,
        min_ns: durations.first().copied().unwrap_or(0),
        mean_ns: if count == 0 {
            0
        } else {
            (total / u128::from(count)) as u64
        },
        p50_ns: percentile(&durations, 50.0),
        p90_ns: percentile(&durations, 90.0),
        p99_ns: percentile(&durations, 99.0),
        max_ns: durations.last().copied().unwrap_or(0),
        stddev_ns: sd.round() as u64,
    }
}

/// Per probe, sorted by total time (largest first), then name.
pub fn probes(capture: &Capture, nesting: &Nesting) -> Vec<ProbeStats> {
    let mut self_by_name = vec![0u64; capture.names.len()];
    let mut durations: Vec<Vec<u64>> = vec![Vec::new(); capture.names.len()];
    for (span, self_ns) in capture.spans.iter().zip(&nesting.self_ns) {
        // A span names one of the capture's names; one that does not is left out.
        let name = span.name as usize;
        if let (Some(own), Some(all)) = (self_by_name.get_mut(name), durations.get_mut(name)) {
            *own += self_ns;
            all.push(span.dur_ns);
        }
    }
    let mut stats: Vec<ProbeStats> = capture
        .names
        .iter()
        .zip(durations)
        .zip(self_by_name)
        .filter(|((_, durations), _)| !durations.is_empty())
        .map(|((name, durations), self_ns)| summarize(name, durations, self_ns))
        .collect();
    stats.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.kind.cmp(&b.kind))
    });
    stats
}

/// One thread's traced time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadStats {
    pub pid: u32,
    pub tid: u32,
    /// The thread's name from trace.json (empty when unnamed).
    pub name: String,
    pub spans: u64,
    /// Time in its outermost spans (wall time covered by traced calls).
    pub traced_ns: u64,
    /// The probe with the most self time on this thread, and that time.
    pub top: String,
    pub top_self_ns: u64,
}

/// Per thread, by traced time (largest first), then pid and tid.
pub fn threads(capture: &Capture, nesting: &Nesting) -> Vec<ThreadStats> {
    #[derive(Default)]
    struct Acc {
        spans: u64,
        traced: u64,
        by_name: BTreeMap<u32, u64>,
    }
    let mut acc: BTreeMap<(u32, u32), Acc> = BTreeMap::new();
    for (i, span) in capture.spans.iter().enumerate() {
        let a = acc.entry((span.pid, span.tid)).or_default();
        a.spans += 1;
        if nesting.parent[i].is_none() {
            a.traced += span.dur_ns;
        }
        *a.by_name.entry(span.name).or_default() += nesting.self_ns[i];
    }
    let mut threads: Vec<ThreadStats> = acc
        .into_iter()
        .map(|((pid, tid), a)| {
            let top = a
                .by_name
                .iter()
                .max_by(|x, y| x.1.cmp(y.1).then_with(|| y.0.cmp(x.0)))
                .map(|(&name, &ns)| (capture.names[name as usize].name.clone(), ns))
                .unwrap_or_default();
            ThreadStats {
                pid,
                tid,
                name: capture.threads.get(&(pid, tid)).cloned().unwrap_or_default(),
                spans: a.spans,
                traced_ns: a.traced,
                top: top.0,
                top_self_ns: top.1,
            }
        })
        .collect();
    threads.sort_by(|a, b| {
        b.traced_ns
            .cmp(&a.traced_ns)
            .then((a.pid, a.tid).cmp(&(b.pid, b.tid)))
    });
    threads
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 90.0), 90);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[7], 50.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
        assert_eq!(percentile(&[1, 2, 3], 50.0), 2);
    }

    #[test]
    fn summary_of_durations() {
        let name = Name {
            name: "f".into(),
            cat: "uprobe".into(),
        };
        let s = summarize(&name, vec![4, 2, 6, 8], 5);
        assert_eq!((s.count, s.total_ns, s.self_ns), (4, 20, 5));
        assert_eq!((s.min_ns, s.mean_ns, s.p50_ns, s.max_ns), (2, 5, 4, 8));
        assert_eq!(s.stddev_ns, 2); // sqrt(5) = 2.24
    }
}
