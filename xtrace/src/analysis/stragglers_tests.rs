//! Tests of the stragglers (`super`): small cases worked by hand, and a large synthetic capture
//! checked against the span-by-span definition.
use super::*;

fn rank(name: &str, spans: &[(&str, u64, u64)]) -> RankSpans {
    RankSpans {
        rank: name.into(),
        spans: spans.iter().map(|&(n, s, e)| (n.to_string(), s, e)).collect(),
        ..RankSpans::default()
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
#[test]
fn the_late_ranks_samples_and_gpu_slices_during_the_wait_are_counted() {
    let mut r0 = rank("r0", &[("MPI_Allreduce", 100, 200)]);
    (r0.samples, r0.gpu) = (Some(Vec::new()), Some(Vec::new()));
    // Rank 1 arrives at 150: the wait is [100, 150).
    let mut r1 = rank("r1", &[("work", 0, 150), ("MPI_Allreduce", 150, 200)]);
    let sample = |t: u64, stack: &str| (t, stack.to_string());
    r1.samples = Some(vec![
        sample(90, "main;work;spin"),
        sample(100, "main;work;spin"),
        sample(110, "main;work;memcpy"),
        sample(120, "main;work;spin"),
        sample(130, "main;work;spin"),
        sample(150, "main;MPI_Allreduce"),
    ]);
    // Two streams: k1 and k2 overlap on [110, 120); the copy runs past the wait's end.
    let slice = |n: &str, s: u64, e: u64| (n.to_string(), s, e);
    r1.gpu = Some(vec![
        slice("k1", 80, 120),
        slice("k2", 110, 140),
        slice("memcpy HtoD", 145, 160),
    ]);
    let found = find(&[r0, r1], &[]);
    let last = &found[0].ranks[0];
    assert_eq!((last.rank.as_str(), last.late_total_ns), ("r1", 50));
    let stacks = |s: &WaitSamples| -> Vec<(String, u64)> {
        s.stacks.iter().map(|s| (s.stack.clone(), s.count)).collect()
    };
    let samples = last.samples.as_ref().expect("sampled");
    assert_eq!(samples.count, 4);
    assert_eq!(
        stacks(samples),
        [
            ("main;work;spin".to_string(), 3),
            ("main;work;memcpy".to_string(), 1)
        ]
    );
    let gpu = last.gpu.as_ref().expect("device timeline");
    // Busy on [100, 140) and [145, 150).
    assert_eq!(gpu.busy_ns, 45);
    let slices: Vec<(&str, u64)> = gpu
        .slices
        .iter()
        .map(|m| (m.name.as_str(), m.overlap_ns))
        .collect();
    assert_eq!(slices, [("k2", 30), ("k1", 20), ("memcpy HtoD", 5)]);
    assert!(text(&found, 50).ends_with(
        "; meanwhile work 50ns; 4 CPU samples, most in main;work;spin (3); GPU busy 45ns, most in k2 (30ns)\n"
    ), "{}", text(&found, 50));
    // Without -F or the device timeline there is nothing to say of either.
    let plain = find(
        &[
            rank("r0", &[("MPI_Barrier", 0, 9)]),
            rank("r1", &[("MPI_Barrier", 5, 9)]),
        ],
        &[],
    );
    assert_eq!(
        (&plain[0].ranks[0].samples, &plain[0].ranks[0].gpu),
        (&None, &None)
    );
}

/// The stragglers as the definition says them, span by span: quadratic, for comparison.
fn reference(ranks: &[RankSpans], steps: &[String]) -> Vec<Stragglers> {
    let collectives: Vec<&str> = functions()
        .into_iter()
        .filter(|f| f.class == Class::Collective)
        .map(|f| f.name)
        .collect();
    let mut arrivals: Vec<(String, &'static str, Vec<Vec<u64>>)> = Vec::new();
    for name in &collectives {
        let at = ranks
            .iter()
            .map(|r| r.spans.iter().filter(|s| s.0 == *name).map(|s| s.1).collect())
            .collect();
        arrivals.push((name.to_string(), "collective", at));
    }
    for step in steps {
        let at = ranks
            .iter()
            .map(|r| {
                let first = |start: u64, end: u64| {
                    let inside = |s: &&(String, u64, u64)| {
                        s.1 >= start && s.1 < end && collectives.contains(&s.0.as_str())
                    };
                    r.spans.iter().find(inside).map_or(end, |s| s.1)
                };
                r.spans
                    .iter()
                    .filter(|s| s.0 == *step)
                    .map(|s| first(s.1, s.2))
                    .collect()
            })
            .collect();
        arrivals.push((step.clone(), "step", at));
    }
    let mut found = Vec::new();
    for (name, kind, at) in arrivals {
        let rounds = at.iter().map(Vec::len).min().unwrap_or(0);
        if rounds == 0 {
            continue;
        }
        let mut tallies: BTreeMap<usize, (u64, u64, u64, BTreeMap<String, u64>)> = BTreeMap::new();
        for round in 0..rounds {
            let mut order: Vec<(u64, usize)> = at.iter().enumerate().map(|(r, a)| (a[round], r)).collect();
            order.sort_unstable();
            let ((arrived, rank), (next, _)) = (order[order.len() - 1], order[order.len() - 2]);
            let t = tallies.entry(rank).or_default();
            (t.0, t.1, t.2) = (t.0 + 1, t.1 + arrived - next, t.2.max(arrived - next));
            for (span, start, end) in &ranks[rank].spans {
                let overlap = (*end).min(arrived).saturating_sub((*start).max(next));
                if overlap > 0 && *span != name {
                    *t.3.entry(span.clone()).or_default() += overlap;
                }
            }
        }
        let mut last: Vec<LastRank> = tallies
            .into_iter()
            .map(|(r, (times_last, late_total_ns, late_max_ns, meanwhile))| {
                let mut meanwhile: Vec<Meanwhile> = meanwhile
                    .into_iter()
                    .map(|(name, overlap_ns)| Meanwhile { name, overlap_ns })
                    .collect();
                meanwhile.sort_by(|a, b| b.overlap_ns.cmp(&a.overlap_ns).then(a.name.cmp(&b.name)));
                meanwhile.truncate(5);
                LastRank {
                    rank: ranks[r].rank.clone(),
                    times_last,
                    late_total_ns,
                    late_max_ns,
                    meanwhile,
                    samples: None,
                    gpu: None,
                }
            })
            .collect();
        last.sort_by_key(|b| std::cmp::Reverse((b.times_last, b.late_total_ns)));
        found.push(Stragglers {
            name,
            kind,
            rounds: rounds as u64,
            ranks: last,
        });
    }
    found
}

/// A deterministic stream of numbers below `bound` (an LCG: no dependency, the same every run).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

#[test]
fn a_large_capture_gives_what_the_span_by_span_definition_gives() {
    // Four ranks of 400 steps: each a step span, a run of short work spans of six names (some
    // crossing the step's end), an allreduce or a barrier, and spans that enclose many steps
    // (a whole-run `main`, an `epoch` every 50 steps), so that windows meet long spans.
    let mut lcg = Lcg(7);
    let ranks: Vec<RankSpans> = (0..4)
        .map(|r| {
            let mut spans = vec![("main".to_string(), 0, 400 * 10_000)];
            for step in 0..400u64 {
                let t = step * 10_000;
                if step % 50 == 0 {
                    spans.push(("epoch".into(), t, t + 50 * 10_000 - 1));
                }
                spans.push(("step".into(), t, t + 9_000));
                let mut at = t;
                for _ in 0..lcg.below(12) + 1 {
                    let length = lcg.below(1_500) + 1;
                    spans.push((format!("work{}", lcg.below(6)), at, at + length));
                    at += lcg.below(length + 1);
                }
                let call = if step % 3 == 0 {
                    "MPI_Barrier"
                } else {
                    "MPI_Allreduce"
                };
                let arrive = (at + lcg.below(500)).min(t + 8_000);
                spans.push((call.into(), arrive, t + 8_500 + lcg.below(10)));
            }
            spans.sort_by_key(|s| s.1);
            RankSpans {
                rank: format!("r{r}"),
                spans,
                ..RankSpans::default()
            }
        })
        .collect();
    assert!(ranks.iter().map(|r| r.spans.len()).sum::<usize>() > 10_000);
    let steps = ["step".to_string(), "epoch".to_string()];
    let found = find(&ranks, &steps);
    assert_eq!(found, reference(&ranks, &steps));
    let names: Vec<&str> = found.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["MPI_Barrier", "MPI_Allreduce", "step", "epoch"]);
    assert_eq!((found[0].rounds, found[1].rounds, found[3].rounds), (134, 266, 8));
}
