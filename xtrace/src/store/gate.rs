//! `xtrace gate`: a candidate run judged against the spread of at least three stored baseline
//! runs. For each function the statistic is its p50, computed from the histogram: per baseline
//! run, and over the candidate's calls (its runs' histograms added up when it is a label). The
//! candidate regressed on a function when its p50 is above the slowest baseline run's by more
//! than the threshold AND above the baseline runs' mean by more than [`SIGMAS`] standard
//! deviations: the first keeps noise-free baselines from flagging tiny changes, the second noisy
//! ones from flagging their own noise. Improvements are judged the same way downwards.
use super::{history, Backend, Error, Function, Result, StoredRun};
use crate::pipeline::stats::ProbeStats;

/// Baseline runs the gate needs at least.
pub const MIN_BASELINE: usize = 3;
/// Standard deviations of the baseline's p50s a change must also exceed.
pub const SIGMAS: f64 = 3.0;

/// One function's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    pub name: String,
    pub kind: String,
    /// The baseline runs that called it, and their p50s' mean, lowest and highest.
    pub base_runs: usize,
    pub base_mean_p50: f64,
    pub base_best_p50: u64,
    pub base_worst_p50: u64,
    pub new_p50: u64,
    pub new_count: u64,
    pub verdict: &'static str,
}

/// The gate's whole answer.
pub struct Outcome {
    pub judged: Vec<Judged>,
    pub regressed: bool,
}

fn p50(f: &Function) -> u64 {
    ProbeStats::from_histogram(&f.histogram, u128::from(f.total_ns), f.min_ns, f.max_ns)
        .distribution()
        .p50_ns
}

/// Judges `candidate` (the candidate's functions, their runs added up) against `baseline`'s
/// stored runs; functions with fewer than `min_count` calls in the candidate are not judged.
pub fn judge(
    store: &mut dyn Backend,
    baseline: &[StoredRun],
    candidate: &[Function],
    threshold: f64,
    min_count: u64,
) -> Result<Outcome> {
    let attempts: Vec<String> = baseline.iter().map(|r| r.attempt.clone()).collect();
    let names: Vec<String> = candidate.iter().map(|f| f.name.clone()).collect();
    let stored = store.functions(&attempts, &names)?;
    let mut judged = Vec::new();
    for new in candidate.iter().filter(|f| f.count >= min_count.max(1)) {
        let base: Vec<u64> = stored
            .iter()
            .filter(|s| s.function.name == new.name && s.function.kind == new.kind)
            .map(|s| p50(&s.function))
            .collect();
        if base.len() < MIN_BASELINE {
            continue;
        }
        let n = base.len() as f64;
        let mean = base.iter().map(|&v| v as f64).sum::<f64>() / n;
        let sd = (base.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        let (best, worst) = (*base.iter().min().unwrap_or(&0), *base.iter().max().unwrap_or(&0));
        let new_p50 = p50(new);
        let value = new_p50 as f64;
        let verdict = if value > worst as f64 * (1.0 + threshold) && value > mean + SIGMAS * sd {
            "regressed"
        } else if value < best as f64 * (1.0 - threshold) && value < mean - SIGMAS * sd {
            "improved"
        } else {
            "same"
        };
        judged.push(Judged {
            name: new.name.clone(),
            kind: new.kind.clone(),
            base_runs: base.len(),
            base_mean_p50: mean,
            base_best_p50: best,
            base_worst_p50: worst,
            new_p50,
            new_count: new.count,
            verdict,
        });
    }
    let regressed = judged.iter().any(|j| j.verdict == "regressed");
    Ok(Outcome { judged, regressed })
}

/// The stored runs labelled `selector`, at least [`MIN_BASELINE`] of them.
pub fn baseline(store: &mut dyn Backend, selector: &(String, String)) -> Result<Vec<StoredRun>> {
    let runs = history::runs(store, Some(selector))?;
    if runs.len() < MIN_BASELINE {
        return Err(Error::TooFewBaseline {
            selector: format!("{}={}", selector.0, selector.1),
            found: runs.len(),
            needed: MIN_BASELINE,
        });
    }
    Ok(runs)
}

/// The candidate's functions from its stored runs labelled `selector`, added up.
pub fn stored_candidate(store: &mut dyn Backend, selector: &(String, String)) -> Result<Vec<Function>> {
    let runs = history::runs(store, Some(selector))?;
    if runs.is_empty() {
        return Err(Error::NoCandidate {
            selector: format!("{}={}", selector.0, selector.1),
        });
    }
    let attempts: Vec<String> = runs.iter().map(|r| r.attempt.clone()).collect();
    let mut merged: Vec<Function> = Vec::new();
    for s in store.functions(&attempts, &[])? {
        let f = s.function;
        match merged.iter_mut().find(|m| m.name == f.name && m.kind == f.kind) {
            Some(m) => {
                m.count += f.count;
                m.total_ns += f.total_ns;
                m.min_ns = m.min_ns.min(f.min_ns);
                m.max_ns = m.max_ns.max(f.max_ns);
                m.histogram.extend(f.histogram);
            }
            None => merged.push(f),
        }
    }
    Ok(merged)
}

/// The verdicts as table rows: function, baseline runs, baseline p50 mean and range, new p50,
/// change, verdict.
pub fn rows(outcome: &Outcome) -> Vec<Vec<String>> {
    use crate::model::duration::human;
    outcome
        .judged
        .iter()
        .map(|j| {
            let change = if j.base_mean_p50 > 0.0 {
                format!("{:+.1}%", (j.new_p50 as f64 / j.base_mean_p50 - 1.0) * 100.0)
            } else {
                "-".into()
            };
            vec![
                j.name.clone(),
                j.base_runs.to_string(),
                human(j.base_mean_p50.round() as u64),
                format!("{}..{}", human(j.base_best_p50), human(j.base_worst_p50)),
                human(j.new_p50),
                change,
                j.verdict.to_string(),
            ]
        })
        .collect()
}

/// The header of [`rows`].
pub const HEADER: [&str; 7] = [
    "FUNCTION",
    "BASE RUNS",
    "BASE P50",
    "BASE RANGE",
    "NEW P50",
    "CHANGE",
    "VERDICT",
];
