//! Per-probe duration statistics: count, total, min, max, mean and nearest-rank percentiles.
//! Durations are kept exactly (8 bytes a span) so percentiles are exact.

#[derive(Clone, Debug, Default)]
pub struct ProbeStats {
    durations: Vec<u64>,
    total: u128,
}

/// The summary of one probe's durations, all in nanoseconds; zero when there were no calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Distribution {
    pub count: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl ProbeStats {
    pub fn add(&mut self, duration_ns: u64) {
        self.durations.push(duration_ns);
        self.total += u128::from(duration_ns);
    }

    pub fn count(&self) -> u64 {
        self.durations.len() as u64
    }

    pub fn distribution(&mut self) -> Distribution {
        let count = self.durations.len();
        if count == 0 {
            return Distribution::default();
        }
        self.durations.sort_unstable();
        let sorted = &self.durations;
        // Nearest rank: the smallest value with at least p% of the values at or below it.
        let rank = |p: u64| sorted[((p as usize * count).div_ceil(100)).clamp(1, count) - 1];
        Distribution {
            count: count as u64,
            total_ns: u64::try_from(self.total).unwrap_or(u64::MAX),
            min_ns: sorted[0],
            mean_ns: u64::try_from(self.total / count as u128).unwrap_or(u64::MAX),
            p50_ns: rank(50),
            p90_ns: rank(90),
            p99_ns: rank(99),
            max_ns: sorted[count - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_to_hundred() {
        let mut stats = ProbeStats::default();
        for d in (1..=100).rev() {
            stats.add(d);
        }
        let d = stats.distribution();
        assert_eq!(
            d,
            Distribution {
                count: 100,
                total_ns: 5050,
                min_ns: 1,
                mean_ns: 50,
                p50_ns: 50,
                p90_ns: 90,
                p99_ns: 99,
                max_ns: 100
            }
        );
    }

    #[test]
    fn small_and_empty() {
        let mut stats = ProbeStats::default();
        assert_eq!(stats.distribution(), Distribution::default());
        stats.add(7);
        let d = stats.distribution();
        assert_eq!(
            (d.count, d.min_ns, d.p50_ns, d.p99_ns, d.max_ns, d.mean_ns),
            (1, 7, 7, 7, 7, 7)
        );
        stats.add(9);
        let d = stats.distribution();
        assert_eq!((d.p50_ns, d.p90_ns, d.mean_ns, d.total_ns), (7, 9, 8, 16));
    }
}
