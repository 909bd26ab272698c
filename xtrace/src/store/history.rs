//! Answers across stored runs: a function's statistics run by run, or per value of a label (its
//! runs' histograms added up), computed here from the stored buckets so that every store gives
//! the same figures.
use std::collections::BTreeMap;

use super::{Backend, Result, StoredFunction, StoredRun};
use crate::pipeline::stats::{Distribution, ProbeStats};

/// One function's statistics over one group of runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Point {
    /// The group: a run's start time and id, or a label's value.
    pub group: String,
    pub runs: usize,
    pub stats: Distribution,
}

/// One function across the groups of runs, in their order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    pub name: String,
    pub kind: String,
    pub points: Vec<Point>,
}

/// Sums of several runs' statistics of one function.
#[derive(Default)]
struct Sum {
    histogram: Vec<[u64; 2]>,
    total_ns: u128,
    min_ns: Option<u64>,
    max_ns: u64,
    runs: usize,
}

impl Sum {
    fn add(&mut self, f: &super::Function) {
        self.histogram.extend_from_slice(&f.histogram);
        self.total_ns += u128::from(f.total_ns);
        self.min_ns = Some(self.min_ns.map_or(f.min_ns, |m| m.min(f.min_ns)));
        self.max_ns = self.max_ns.max(f.max_ns);
        self.runs += 1;
    }

    fn distribution(&self) -> Distribution {
        ProbeStats::from_histogram(
            &self.histogram,
            self.total_ns,
            self.min_ns.unwrap_or(0),
            self.max_ns,
        )
        .distribution()
    }
}

/// How runs are grouped into the points of a series.
pub enum Grouping<'a> {
    /// One point per run, oldest first.
    Run,
    /// One point per value of this label, ordered by each value's first run; runs without the
    /// label are left out.
    Label(&'a str),
}

/// The group of `run`, or None when it has none.
fn group_of(run: &StoredRun, grouping: &Grouping) -> Option<String> {
    match grouping {
        Grouping::Run => Some(format!(
            "{} {}",
            crate::model::duration::utc(run.run.started_ns),
            run.run.id.get(..8).unwrap_or(&run.run.id)
        )),
        Grouping::Label(label) => run.run.labels.get(*label).cloned(),
    }
}

/// The runs stored whole whose `label` is `value`, oldest first; all of them without a selector.
pub fn runs(store: &mut dyn Backend, selector: Option<&(String, String)>) -> Result<Vec<StoredRun>> {
    let mut runs = store.runs()?;
    if let Some((label, value)) = selector {
        runs.retain(|r| r.run.labels.get(label) == Some(value));
    }
    runs.sort_by(|a, b| (a.run.started_ns, &a.run.id).cmp(&(b.run.started_ns, &b.run.id)));
    Ok(runs)
}

/// The series of the functions `names` (every function stored when empty) over `runs`, grouped by
/// `grouping`; functions by total time over all runs, largest first.
pub fn series(
    store: &mut dyn Backend,
    runs: &[StoredRun],
    names: &[String],
    grouping: &Grouping,
) -> Result<Vec<Series>> {
    let attempts: Vec<String> = runs.iter().map(|r| r.attempt.clone()).collect();
    let functions = store.functions(&attempts, names)?;
    let group_of_attempt: BTreeMap<&str, (usize, String)> = runs
        .iter()
        .enumerate()
        .filter_map(|(order, r)| Some((r.attempt.as_str(), (order, group_of(r, grouping)?))))
        .collect();
    // (name, kind) -> group -> (first run's order, sum)
    let mut sums: BTreeMap<(String, String), BTreeMap<String, (usize, Sum)>> = BTreeMap::new();
    for StoredFunction { attempt, function } in &functions {
        let Some((order, group)) = group_of_attempt.get(attempt.as_str()) else {
            continue;
        };
        let key = (function.name.clone(), function.kind.clone());
        let entry = sums
            .entry(key)
            .or_default()
            .entry(group.clone())
            .or_insert((*order, Sum::default()));
        entry.0 = entry.0.min(*order);
        entry.1.add(function);
    }
    let mut series: Vec<(u128, Series)> = sums
        .into_iter()
        .map(|((name, kind), groups)| {
            let total: u128 = groups.values().map(|(_, s)| s.total_ns).sum();
            let mut points: Vec<(usize, Point)> = groups
                .into_iter()
                .map(|(group, (order, sum))| {
                    let point = Point {
                        group,
                        runs: sum.runs,
                        stats: sum.distribution(),
                    };
                    (order, point)
                })
                .collect();
            points.sort_by_key(|(order, _)| *order);
            let points = points.into_iter().map(|(_, p)| p).collect();
            (total, Series { name, kind, points })
        })
        .collect();
    series.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    Ok(series.into_iter().map(|(_, s)| s).collect())
}

/// The text `xtrace history` prints: a table per function.
pub fn render(series: &[Series], group_header: &str) -> String {
    use crate::model::duration::human;
    let mut out = String::new();
    for s in series {
        out.push_str(&format!("{} ({})\n", s.name, s.kind));
        let rows: Vec<Vec<String>> = s
            .points
            .iter()
            .map(|p| {
                vec![
                    p.group.clone(),
                    p.runs.to_string(),
                    p.stats.count.to_string(),
                    human(p.stats.p50_ns),
                    human(p.stats.p99_ns),
                    human(p.stats.mean_ns),
                    human(p.stats.max_ns),
                ]
            })
            .collect();
        let header = [group_header, "RUNS", "COUNT", "P50", "P99", "MEAN", "MAX"];
        out.push_str(&crate::export::table::render(&header, &rows, 1));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_merge_runs() {
        let f = |min, max, hist: Vec<[u64; 2]>| super::super::Function {
            name: "f".into(),
            kind: "uprobe".into(),
            count: hist.iter().map(|b| b[1]).sum(),
            total_ns: hist.iter().map(|b| b[0] * b[1]).sum(),
            min_ns: min,
            max_ns: max,
            histogram: hist,
        };
        let mut sum = Sum::default();
        sum.add(&f(10, 20, vec![[10, 3], [20, 1]]));
        sum.add(&f(5, 30, vec![[5, 1], [30, 5]]));
        let d = sum.distribution();
        assert_eq!((d.count, d.min_ns, d.max_ns, d.total_ns), (10, 5, 30, 205));
        assert_eq!((d.p50_ns, d.p99_ns), (20, 30));
        assert_eq!(sum.runs, 2);
    }
}
