//! The Mann–Whitney U test (Wilcoxon rank-sum) on two samples of durations, with the normal
//! approximation, tie correction and continuity correction: does NEW tend to take longer than
//! BASE (or less long)? Rank-based, so a few huge outliers cannot fake a regression the way they
//! move a mean.

/// The outcome of one test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    /// U of NEW: the pairs (base, new) with new > base, ties counting one half.
    pub u: f64,
    /// One-sided p-value of "NEW is stochastically larger than BASE".
    pub p_greater: f64,
    /// One-sided p-value of "NEW is stochastically smaller than BASE".
    pub p_less: f64,
}

/// Tests `new` against `base`; None when either is empty.
pub fn test(base: &[u64], new: &[u64]) -> Option<Outcome> {
    let (n1, n2) = (base.len() as f64, new.len() as f64);
    if base.is_empty() || new.is_empty() {
        return None;
    }
    let mut all: Vec<(u64, bool)> = base
        .iter()
        .map(|&v| (v, false))
        .chain(new.iter().map(|&v| (v, true)))
        .collect();
    all.sort_unstable();
    let total = all.len();
    let (mut rank_sum_new, mut ties) = (0.0f64, 0.0f64);
    let mut i = 0;
    while i < total {
        let mut j = i;
        while j < total && all[j].0 == all[i].0 {
            j += 1;
        }
        // Ranks i+1..=j share their mean.
        let rank = (i + 1 + j) as f64 / 2.0;
        let from_new = all[i..j].iter().filter(|(_, new)| *new).count() as f64;
        rank_sum_new += rank * from_new;
        let t = (j - i) as f64;
        ties += t * t * t - t;
        i = j;
    }
    let u = rank_sum_new - n2 * (n2 + 1.0) / 2.0;
    let n = n1 + n2;
    let mean = n1 * n2 / 2.0;
    let variance = n1 * n2 / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)).max(1.0));
    if variance <= 0.0 {
        // Every value equal: no evidence either way.
        return Some(Outcome {
            u,
            p_greater: 1.0,
            p_less: 1.0,
        });
    }
    let sd = variance.sqrt();
    let z_greater = (u - mean - 0.5) / sd;
    let z_less = (u - mean + 0.5) / sd;
    Some(Outcome {
        u,
        p_greater: upper_tail(z_greater),
        p_less: upper_tail(-z_less),
    })
}

/// P(Z > z) for a standard normal Z.
pub fn upper_tail(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// The complementary error function, by a Chebyshev fit with relative error below 1.2e-7.
fn erfc(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    let poly = [
        -1.265_512_23,
        1.000_023_68,
        0.374_091_96,
        0.096_784_18,
        -0.186_288_06,
        0.278_868_07,
        -1.135_203_98,
        1.488_515_87,
        -0.822_152_23,
        0.170_872_77,
    ];
    let series = poly.iter().rev().fold(0.0, |acc, c| c + t * acc);
    let y = t * (-x * x + series).exp();
    if x >= 0.0 {
        y
    } else {
        2.0 - y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfc_values() {
        for (x, want) in [
            (0.0, 1.0),
            (1.0, 0.157_299_207),
            (2.0, 0.004_677_735),
            (-1.0, 1.842_700_793),
        ] {
            assert!(
                (erfc(x) - want).abs() < 1e-6 * want.max(1e-3),
                "erfc({x}) = {}",
                erfc(x)
            );
        }
        assert!((upper_tail(1.959_964) - 0.025).abs() < 1e-6);
    }

    #[test]
    fn separated_samples_are_significant_one_way() {
        let base = [1, 2, 3, 4, 5];
        let new = [6, 7, 8, 9, 10];
        let o = test(&base, &new).unwrap();
        assert_eq!(o.u, 25.0);
        // Exact one-sided p is 1/252 = 0.004; the normal approximation gives 0.006.
        assert!(o.p_greater > 0.001 && o.p_greater < 0.01, "{o:?}");
        assert!(o.p_less > 0.99, "{o:?}");
        let o = test(&new, &base).unwrap();
        assert!(o.p_less < 0.01 && o.p_greater > 0.99, "{o:?}");
    }

    #[test]
    fn ties_and_identical_samples() {
        let o = test(&[5, 5, 5], &[5, 5, 5]).unwrap();
        assert_eq!((o.p_greater, o.p_less), (1.0, 1.0));
        let o = test(&[1, 2, 2, 3], &[2, 2, 3, 3]).unwrap();
        assert_eq!(o.u, 11.0);
        assert!(o.p_greater > 0.1, "{o:?}");
        assert_eq!(test(&[], &[1]), None);
    }
}
