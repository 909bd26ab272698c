//! Per-probe duration statistics in constant memory: exact count, total, min and max, and
//! percentiles from a log-linear histogram — exact below 128 ns, within 1/128 (0.8%) above, never
//! outside [min, max]. Memory is a few kB per probe whatever the number of spans, so a long
//! capture does not grow xtrace. Exact nearest-rank percentiles of a sorted list, too.

/// Sub-buckets per power of two (2^SUB_BITS): the relative resolution.
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;

/// The nearest-rank `p`-th percentile (0 < p ≤ 100) of ascending `sorted`; 0 when empty.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Bucket of a duration: values below SUB map to themselves; above, one bucket per 1/SUB of a power
/// of two.
fn bucket(value: u64) -> usize {
    if value < SUB {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros(); // >= SUB_BITS
    let shift = exponent - SUB_BITS;
    let sub = (value >> shift) & (SUB - 1);
    ((u64::from(shift) + 1) * SUB + sub) as usize
}

/// Smallest value that falls in bucket `index`.
fn bucket_floor(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB {
        return index;
    }
    let shift = index / SUB - 1;
    let sub = index % SUB;
    (SUB + sub) << shift
}

#[derive(Clone, Debug, Default)]
pub struct ProbeStats {
    /// Calls below `--min-duration`, merged from the kernel's summary.
    pub short: u64,
    /// Counts per bucket, grown to the largest bucket seen.
    buckets: Vec<u64>,
    count: u64,
    total: u128,
    min: u64,
    max: u64,
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
        let index = bucket(duration_ns);
        if index >= self.buckets.len() {
            self.buckets.resize(index + 1, 0);
        }
        self.buckets[index] += 1;
        if self.count == 0 || duration_ns < self.min {
            self.min = duration_ns;
        }
        self.max = self.max.max(duration_ns);
        self.count += 1;
        self.total += u128::from(duration_ns);
    }

    /// Merges calls summarised in the kernel (below `--min-duration`): count, total, min and max
    /// exactly; each log2 bucket enters the histogram at its lower bound (within a factor of 2).
    pub fn add_short(&mut self, short: &xtrace_common::probe::ShortCalls) {
        if short.count == 0 {
            return;
        }
        for (i, &n) in short.log2.iter().enumerate().filter(|(_, &n)| n > 0) {
            let floor = if i == 0 { 0 } else { 1u64 << (i - 1) };
            let index = bucket(floor.clamp(short.min_ns(), short.max_ns));
            if index >= self.buckets.len() {
                self.buckets.resize(index + 1, 0);
            }
            self.buckets[index] += n;
        }
        if self.count == 0 || short.min_ns() < self.min {
            self.min = short.min_ns();
        }
        self.max = self.max.max(short.max_ns);
        self.count += short.count;
        self.total += u128::from(short.total_ns);
        self.short += short.count;
    }

    /// Adds every call `other` holds, as if each had been added here (the `--min-duration`
    /// count included).
    pub fn merge(&mut self, other: &ProbeStats) {
        if other.count == 0 {
            return;
        }
        if other.buckets.len() > self.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
        if self.count == 0 || other.min < self.min {
            self.min = other.min;
        }
        self.max = self.max.max(other.max);
        self.count += other.count;
        self.total += other.total;
        self.short += other.short;
    }

    /// The calls it holds.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The bytes it holds, its histogram's included.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.buckets.capacity() * std::mem::size_of::<u64>()
    }

    /// The histogram's buckets that hold calls, as (the bucket's smallest value in ns, calls),
    /// smallest first: what summary.json and a store keep, so that the calls of many captures
    /// merge into one distribution ([`ProbeStats::from_histogram`]).
    pub fn histogram(&self) -> Vec<[u64; 2]> {
        let filled = self.buckets.iter().enumerate().filter(|(_, &n)| n > 0);
        filled.map(|(i, &n)| [bucket_floor(i), n]).collect()
    }

    /// Statistics made again from a [`ProbeStats::histogram`] (of one capture, or the sum of
    /// several) and its exact total, minimum and maximum: the same percentiles as the original's.
    pub fn from_histogram(histogram: &[[u64; 2]], total_ns: u128, min_ns: u64, max_ns: u64) -> Self {
        let mut stats = ProbeStats::default();
        for &[floor, n] in histogram.iter().filter(|[_, n]| *n > 0) {
            let index = bucket(floor);
            if index >= stats.buckets.len() {
                stats.buckets.resize(index + 1, 0);
            }
            stats.buckets[index] += n;
            stats.count += n;
        }
        if stats.count > 0 {
            (stats.total, stats.min, stats.max) = (total_ns, min_ns, max_ns);
        }
        stats
    }

    /// Nearest-rank percentiles `ps` (ascending), in one pass over the buckets: for each, the
    /// bucket holding the value with rank ceil(p% × count), reported as the bucket's smallest
    /// value, clamped to [min, max].
    fn percentiles<const N: usize>(&self, ps: [u64; N]) -> [u64; N] {
        let ranks = ps.map(|p| (u128::from(p) * u128::from(self.count)).div_ceil(100).max(1) as u64);
        let mut values = [self.max; N];
        let (mut next, mut seen) = (0, 0);
        for (index, n) in self.buckets.iter().enumerate() {
            seen += n;
            while next < N && seen >= ranks[next] {
                values[next] = bucket_floor(index).clamp(self.min, self.max);
                next += 1;
            }
            if next == N {
                break;
            }
        }
        values
    }

    pub fn distribution(&self) -> Distribution {
        if self.count == 0 {
            return Distribution::default();
        }
        let [p50_ns, p90_ns, p99_ns] = self.percentiles([50, 90, 99]);
        Distribution {
            count: self.count,
            total_ns: u64::try_from(self.total).unwrap_or(u64::MAX),
            min_ns: self.min,
            mean_ns: u64::try_from(self.total / u128::from(self.count)).unwrap_or(u64::MAX),
            p50_ns,
            p90_ns,
            p99_ns,
            max_ns: self.max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut last = 0;
        for value in (0..200_000u64).chain([u32::MAX as u64, u64::MAX / 3, u64::MAX]) {
            let index = bucket(value);
            assert!(index >= last, "bucket order at {value}");
            last = index;
            let floor = bucket_floor(index);
            assert!(floor <= value, "floor {floor} above {value}");
            assert!(
                (value - floor) as f64 <= value as f64 / SUB as f64,
                "{value} too far from {floor}"
            );
            assert_eq!(bucket(floor), index, "floor of bucket {index} is in it");
        }
        assert_eq!(bucket(127), 127);
        assert_eq!(bucket_floor(bucket(128)), 128);
    }

    #[test]
    fn kernel_summaries_merge_exact_totals() {
        use xtrace_common::probe::{ShortCalls, LOG2_BUCKETS};
        let mut stats = ProbeStats::default();
        stats.add(5_000_000);
        let mut log2 = [0; LOG2_BUCKETS];
        log2[11] = 3; // [1024, 2048) ns
        let short = ShortCalls {
            count: 3,
            total_ns: 4_000,
            min_ns_not: !1_100,
            max_ns: 1_500,
            log2,
        };
        stats.add_short(&short);
        let d = stats.distribution();
        assert_eq!((d.count, d.total_ns), (4, 5_004_000));
        assert_eq!((d.min_ns, d.max_ns), (1_100, 5_000_000));
        // The bucket's lower bound (1024) is clamped to the exact minimum.
        assert_eq!(d.p50_ns, 1_100);
        assert_eq!(stats.short, 3);
    }

    #[test]
    fn one_to_hundred_is_exact() {
        let mut stats = ProbeStats::default();
        for d in (1..=100).rev() {
            stats.add(d);
        }
        assert_eq!(
            stats.distribution(),
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
    fn large_values_within_resolution() {
        let mut stats = ProbeStats::default();
        for d in 1..=10_000u64 {
            stats.add(d * 1_000);
        }
        let d = stats.distribution();
        assert_eq!(
            (d.count, d.min_ns, d.max_ns, d.total_ns),
            (10_000, 1_000, 10_000_000, 50_005_000_000)
        );
        for (got, exact) in [
            (d.p50_ns, 5_000_000u64),
            (d.p90_ns, 9_000_000),
            (d.p99_ns, 9_900_000),
        ] {
            assert!(
                got <= exact && (exact - got) as f64 <= exact as f64 / 128.0,
                "{got} vs {exact}"
            );
        }
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

    #[test]
    fn merging_equals_adding_all() {
        let (mut a, mut b, mut all) = (
            ProbeStats::default(),
            ProbeStats::default(),
            ProbeStats::default(),
        );
        for d in 1..=300u64 {
            let d = d * d * 37;
            if d % 3 == 0 {
                a.add(d)
            } else {
                b.add(d)
            }
            all.add(d);
        }
        let mut merged = ProbeStats::default();
        merged.merge(&a);
        merged.merge(&b);
        merged.merge(&ProbeStats::default());
        assert_eq!(merged.distribution(), all.distribution());
        assert_eq!(merged.count(), 300);
        assert!(merged.bytes() > std::mem::size_of::<ProbeStats>());
    }

    #[test]
    fn a_histogram_makes_the_same_distribution_again() {
        let (mut a, mut b, mut both) = (
            ProbeStats::default(),
            ProbeStats::default(),
            ProbeStats::default(),
        );
        for d in (1..=3_000u64).map(|i| i * 997 % 50_000) {
            a.add(d);
            both.add(d);
        }
        for d in 40_000..40_500u64 {
            b.add(d * 3);
            both.add(d * 3);
        }
        let again = ProbeStats::from_histogram(&a.histogram(), a.total, a.min, a.max);
        assert_eq!(again.distribution(), a.distribution());
        // Two captures' histograms summed give what one capture of both calls gives.
        let mut sum = a.histogram();
        sum.extend(b.histogram());
        let (a, b) = (a.distribution(), b.distribution());
        let total = u128::from(a.total_ns + b.total_ns);
        let merged = ProbeStats::from_histogram(&sum, total, a.min_ns.min(b.min_ns), a.max_ns.max(b.max_ns));
        assert_eq!(merged.distribution(), both.distribution());
        assert_eq!(
            ProbeStats::from_histogram(&[], 0, 0, 0).distribution(),
            Distribution::default()
        );
    }

    #[test]
    fn percentiles_stay_within_min_and_max() {
        let mut stats = ProbeStats::default();
        stats.add(1_000_001);
        stats.add(1_000_003);
        let d = stats.distribution();
        assert!(d.p50_ns >= d.min_ns && d.p99_ns <= d.max_ns, "{d:?}");
        assert_eq!(d.p50_ns, 1_000_001);
    }
}
