//! `merge --align collectives`: the clock pairs place each capture as well as its host's wall
//! clock agrees with the others' (NTP: about a millisecond). The ranks of an MPI job leave a
//! synchronizing collective (MPI_Barrier, MPI_Allreduce, the all-gathers and all-to-alls) within
//! microseconds of each other, so the Nth such call on two ranks ends at one time: each capture
//! is moved by the median difference of its ends from the reference capture's, and the median
//! distance of its ends from that is how well the ranks now line up. NCCL's collectives do not
//! serve: their NVTX ranges end once the call has queued its work on the GPU, each rank on its
//! own, before the others arrive (the device kernels wait, not the call).
use serde::Serialize;

use crate::model::mpi_api::ends_together;

/// One capture's spans, unshifted: (name, start, end), by start.
pub type Spans = Vec<(String, u64, u64)>;

/// How `--align collectives` moved one capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Aligned {
    /// Added to its shift from the clock pairs (ns; negative: earlier).
    pub correction_ns: i64,
    /// Collective calls paired with the reference capture's.
    pub pairs: u64,
    /// The median distance of the paired ends from one another once moved (ns).
    pub residual_ns: u64,
}

/// The correction of each capture against capture `reference`, given the shifts of the clock
/// pairs; None for the reference, and for a capture with no collective to pair.
pub fn collectives(spans: &[&Spans], shifts: &[u64], reference: usize) -> Vec<Option<Aligned>> {
    let ends = |spans: &Spans, name: &str| -> Vec<u64> {
        spans.iter().filter(|s| s.0 == name).map(|s| s.2).collect()
    };
    let names: Vec<&str> = spans[reference]
        .iter()
        .map(|s| s.0.as_str())
        .filter(|n| ends_together(n))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    (0..spans.len())
        .map(|part| {
            if part == reference {
                return None;
            }
            let mut diffs: Vec<i128> = Vec::new();
            for name in &names {
                let (mine, theirs) = (ends(spans[part], name), ends(spans[reference], name));
                diffs.extend(mine.iter().zip(&theirs).map(|(m, t)| {
                    i128::from(*m) + i128::from(shifts[part]) - i128::from(*t) - i128::from(shifts[reference])
                }));
            }
            let middle = median(&mut diffs)?;
            let mut spread: Vec<i128> = diffs.iter().map(|d| (d - middle).abs()).collect();
            Some(Aligned {
                correction_ns: i64::try_from(-middle).ok()?,
                pairs: diffs.len() as u64,
                residual_ns: median(&mut spread)
                    .and_then(|m| u64::try_from(m).ok())
                    .unwrap_or(0),
            })
        })
        .collect()
}

fn median(values: &mut [i128]) -> Option<i128> {
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}

/// The shifts once corrected, all moved alike so that the smallest is 0 (no time goes negative);
/// also how far the reference capture's clock moved (its clock pairs move with it).
pub fn corrected(shifts: &[u64], aligned: &[Option<Aligned>]) -> Vec<u64> {
    let moved: Vec<i128> = shifts
        .iter()
        .zip(aligned)
        .map(|(s, a)| i128::from(*s) + a.map_or(0, |a| i128::from(a.correction_ns)))
        .collect();
    let least = moved.iter().copied().min().unwrap_or(0);
    moved
        .iter()
        .map(|m| u64::try_from(m - least).unwrap_or(0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(ends: &[(&str, u64)]) -> Spans {
        ends.iter().map(|&(n, e)| (n.to_string(), e - 5, e)).collect()
    }

    #[test]
    fn a_capture_is_moved_by_the_median_difference_of_its_collectives_ends() {
        // Capture 1's clock reads 1000 ns ahead; one of its ends is an outlier.
        let parts = [
            spans(&[
                ("MPI_Allreduce", 100),
                ("MPI_Allreduce", 200),
                ("MPI_Barrier", 300),
                ("MPI_Bcast", 400),
            ]),
            spans(&[
                ("MPI_Allreduce", 1100),
                ("MPI_Allreduce", 1290),
                ("MPI_Barrier", 1302),
                ("MPI_Bcast", 9999),
            ]),
        ];
        let aligned = collectives(&[&parts[0], &parts[1]], &[0, 0], 0);
        assert_eq!(aligned[0], None);
        // Diffs 1000, 1090, 1002 (MPI_Bcast's root leaves early: not paired); median 1002.
        let a = aligned[1].expect("paired");
        assert_eq!((a.correction_ns, a.pairs, a.residual_ns), (-1002, 3, 2));
        // The reference keeps its clock; the moved capture would go below it, so both move.
        assert_eq!(corrected(&[0, 0], &aligned), [1002, 0]);
        assert_eq!(
            corrected(
                &[5000, 0],
                &[
                    None,
                    Some(Aligned {
                        correction_ns: 20,
                        ..a
                    })
                ]
            ),
            [4980, 0]
        );
    }

    #[test]
    fn captures_without_collectives_in_common_are_left_as_they_are() {
        let parts = [spans(&[("MPI_Allreduce", 100)]), spans(&[("work", 100)])];
        assert_eq!(collectives(&[&parts[0], &parts[1]], &[0, 7], 0), [None, None]);
        assert_eq!(corrected(&[0, 7], &[None, None]), [0, 7]);
    }
}
