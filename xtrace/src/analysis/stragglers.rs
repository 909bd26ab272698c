//! Stragglers among the ranks of a merged capture: for each collective call (the Nth call of an
//! MPI collective on every rank is one collective) and each step (`merge --step NAME`: the Nth
//! span of that name on every rank), the rank that arrived last, and by how much. A rank arrives
//! at a collective when its call begins; at a step when its first collective inside the step
//! begins (where it starts to wait for the others), else when the step ends. The straggler kept
//! everyone waiting for `late_ns`: its arrival less the next-latest rank's. What it was doing
//! meanwhile is its own spans that overlap that wait, added up by name.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::mpi_api::{functions, Class};

/// One rank's spans, on the merged clock.
pub struct RankSpans {
    /// How the rank is shown: `node7 rank 3`.
    pub rank: String,
    /// (name, start, end), by start.
    pub spans: Vec<(String, u64, u64)>,
}

/// summary.json `stragglers[]`: one collective or step name.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Stragglers {
    pub name: String,
    /// `collective` or `step`.
    pub kind: &'static str,
    /// How many times every rank took part (the fewest calls of any rank).
    pub rounds: u64,
    /// Per rank that arrived last at least once, the most often first.
    pub ranks: Vec<LastRank>,
}

/// A rank that arrived last.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LastRank {
    pub rank: String,
    /// Rounds it arrived last at.
    pub times_last: u64,
    /// The others' wait for it alone, added up over those rounds (ns).
    pub late_total_ns: u64,
    pub late_max_ns: u64,
    /// Its own spans that overlapped those waits, by name, the most time first (at most 5).
    pub meanwhile: Vec<Meanwhile>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Meanwhile {
    pub name: String,
    pub overlap_ns: u64,
}

/// The stragglers of every MPI collective the ranks called, then of each step name in `steps`.
pub fn find(ranks: &[RankSpans], steps: &[String]) -> Vec<Stragglers> {
    if ranks.len() < 2 {
        return Vec::new();
    }
    let collectives: Vec<&'static str> = functions()
        .into_iter()
        .filter(|f| f.class == Class::Collective)
        .map(|f| f.name)
        .collect();
    let is_collective = |name: &str| collectives.contains(&name);
    let mut found = Vec::new();
    for name in &collectives {
        let arrivals: Vec<Vec<u64>> = ranks
            .iter()
            .map(|r| r.spans.iter().filter(|s| s.0 == *name).map(|s| s.1).collect())
            .collect();
        found.extend(rounds(name, "collective", ranks, &arrivals));
    }
    for step in steps {
        let arrivals: Vec<Vec<u64>> = ranks
            .iter()
            .map(|r| {
                r.spans
                    .iter()
                    .filter(|s| s.0 == *step)
                    .map(|&(_, start, end)| {
                        r.spans
                            .iter()
                            .find(|s| s.1 >= start && s.1 < end && is_collective(&s.0))
                            .map_or(end, |s| s.1)
                    })
                    .collect()
            })
            .collect();
        found.extend(rounds(step, "step", ranks, &arrivals));
    }
    found
}

/// What one rank's rounds as the last to arrive add up to.
#[derive(Default)]
struct Tally<'a> {
    times_last: u64,
    late_total_ns: u64,
    late_max_ns: u64,
    /// Its spans' overlap with the waits, by name.
    meanwhile: BTreeMap<&'a str, u64>,
}

/// The stragglers of `name`, given each rank's arrival at each of its rounds.
fn rounds(name: &str, kind: &'static str, ranks: &[RankSpans], arrivals: &[Vec<u64>]) -> Option<Stragglers> {
    let rounds = arrivals.iter().map(Vec::len).min().unwrap_or(0);
    if rounds == 0 {
        return None;
    }
    let mut last: BTreeMap<usize, Tally> = BTreeMap::new();
    for round in 0..rounds {
        let mut at: Vec<(u64, usize)> = arrivals.iter().enumerate().map(|(r, a)| (a[round], r)).collect();
        at.sort_unstable();
        let (arrived, rank) = at[at.len() - 1];
        let (next, _) = at[at.len() - 2];
        let late = arrived - next;
        let tally = last.entry(rank).or_default();
        tally.times_last += 1;
        tally.late_total_ns += late;
        tally.late_max_ns = tally.late_max_ns.max(late);
        for (span, start, end) in &ranks[rank].spans {
            let overlap = (*end).min(arrived).saturating_sub((*start).max(next));
            if overlap > 0 && span != name {
                *tally.meanwhile.entry(span.as_str()).or_default() += overlap;
            }
        }
    }
    let mut ranks: Vec<LastRank> = last
        .into_iter()
        .map(|(r, tally)| {
            let mut meanwhile: Vec<Meanwhile> = tally
                .meanwhile
                .into_iter()
                .map(|(name, overlap_ns)| Meanwhile {
                    name: name.to_string(),
                    overlap_ns,
                })
                .collect();
            meanwhile.sort_by(|a, b| b.overlap_ns.cmp(&a.overlap_ns).then(a.name.cmp(&b.name)));
            meanwhile.truncate(5);
            LastRank {
                rank: ranks[r].rank.clone(),
                times_last: tally.times_last,
                late_total_ns: tally.late_total_ns,
                late_max_ns: tally.late_max_ns,
                meanwhile,
            }
        })
        .collect();
    ranks.sort_by(|a, b| {
        b.times_last
            .cmp(&a.times_last)
            .then(b.late_total_ns.cmp(&a.late_total_ns))
    });
    Some(Stragglers {
        name: name.to_string(),
        kind,
        rounds: rounds as u64,
        ranks,
    })
}

/// summary.txt's lines: the rank most often last at each collective and step, where it was late
/// by at least `floor_ns` on average (below the clocks' alignment, lateness is noise).
pub fn text(found: &[Stragglers], floor_ns: u64) -> String {
    let human = crate::model::duration::human;
    let mut out = String::new();
    for s in found {
        let Some(worst) = s
            .ranks
            .first()
            .filter(|w| w.late_total_ns / w.times_last.max(1) >= floor_ns)
        else {
            continue;
        };
        let meanwhile: Vec<String> = worst
            .meanwhile
            .iter()
            .map(|m| format!("{} {}", m.name, human(m.overlap_ns)))
            .collect();
        out += &format!(
            "straggler at {} {}: {} arrived last {} of {} times, {} late on average (at most {}){}\n",
            s.kind,
            s.name,
            worst.rank,
            worst.times_last,
            s.rounds,
            human(worst.late_total_ns / worst.times_last.max(1)),
            human(worst.late_max_ns),
            match meanwhile.is_empty() {
                true => String::new(),
                false => format!("; meanwhile {}", meanwhile.join(", ")),
            }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(name: &str, spans: &[(&str, u64, u64)]) -> RankSpans {
        RankSpans {
            rank: name.into(),
            spans: spans.iter().map(|&(n, s, e)| (n.to_string(), s, e)).collect(),
        }
    }

    #[test]
    fn the_rank_that_arrives_last_is_named_with_its_lateness_and_what_it_did() {
        // Three ranks, two allreduces inside two steps; rank 2 computes 30 ns longer each time,
        // rank 1 10 ns longer.
        let ranks = [
            rank(
                "r0",
                &[("step", 0, 200), ("work", 0, 100), ("MPI_Allreduce", 100, 200)],
            ),
            rank(
                "r1",
                &[("step", 0, 200), ("work", 0, 110), ("MPI_Allreduce", 110, 200)],
            ),
            rank(
                "r2",
                &[("step", 0, 200), ("work", 0, 140), ("MPI_Allreduce", 140, 200)],
            ),
        ];
        let found = find(&ranks, &["step".to_string()]);
        assert_eq!(found.len(), 2);
        for (s, kind, name) in [
            (&found[0], "collective", "MPI_Allreduce"),
            (&found[1], "step", "step"),
        ] {
            assert_eq!((s.kind, s.name.as_str(), s.rounds), (kind, name, 1));
            assert_eq!(s.ranks.len(), 1);
            let r = &s.ranks[0];
            assert_eq!(
                (r.rank.as_str(), r.times_last, r.late_total_ns, r.late_max_ns),
                ("r2", 1, 30, 30)
            );
            // The step encloses the wait too; work is what it did.
            let work = r
                .meanwhile
                .iter()
                .find(|m| m.name == "work")
                .map(|m| m.overlap_ns);
            assert_eq!(work, Some(30));
        }
        assert_eq!(text(&found, 31), "");
        assert!(text(&found, 30).starts_with(
            "straggler at collective MPI_Allreduce: r2 arrived last 1 of 1 times, 30ns late on average"
        ));
    }

    #[test]
    fn rounds_are_the_fewest_calls_of_any_rank_and_one_rank_has_none() {
        let ranks = [
            rank("r0", &[("MPI_Barrier", 0, 5), ("MPI_Barrier", 10, 15)]),
            rank("r1", &[("MPI_Barrier", 3, 5)]),
        ];
        let found = find(&ranks, &[]);
        assert_eq!(found[0].rounds, 1);
        assert_eq!(found[0].ranks[0].rank, "r1");
        assert!(find(&ranks[..1], &[]).is_empty());
    }
}
