//! NCCL's collectives through their NVTX ranges: fixture `ncclfix` (tests/fixtures/ncclfix.c)
//! plays two ranks that push ranges in NVTX domain `NCCL`, named by registered strings as NCCL
//! names them, around a real barrier between the two processes; rank 1 works 20 ms longer in each
//! of 10 steps. One `xtrace --nvtx` per rank (the tool library as their NVTX tool), then `merge`:
//! the ranges are counted exactly, rank 1 is the straggler at every `ncclAllReduce` and step,
//! 20 ms late (within 10%), and point-to-point and set-up calls are no collectives.
use serde_json::Value;

use xtrace_tests::{
    args, mpi::nccl_ranks, output::Outputs, ranges::range_counts, require_bpf, run::Xtrace, TempDir,
};

/// Each rank's ranges, exactly: (name, kind, count), and every NCCL one in domain NCCL.
fn assert_rank_ranges(rank: u64, out: &Outputs) {
    let target = &out.summary["targets"][0]["rank"];
    assert_eq!(
        (&target["rank"], &target["world_size"]),
        (&rank.into(), &2.into()),
        "{target}"
    );
    let p2p = if rank == 0 { "ncclSend" } else { "ncclRecv" };
    let mut expected: Vec<(String, String, u64)> = [
        ("ncclAllReduce", 10),
        ("ncclBroadcast", 3),
        ("ncclCommDestroy", 1),
        ("ncclCommInitRank", 1),
        (p2p, 2),
        ("step", 10),
    ]
    .iter()
    .map(|&(name, count)| (name.to_string(), "push".to_string(), count))
    .collect();
    expected.sort();
    assert_eq!(range_counts(out), expected, "rank {rank}");
    for range in out.summary["ranges"].as_array().unwrap() {
        let nccl = range["name"].as_str().unwrap().starts_with("nccl");
        let domain = if nccl { Value::from("NCCL") } else { Value::Null };
        assert_eq!(range["domain"], domain, "{range}");
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn nccl_ranges_are_collectives_and_the_slow_rank_is_named_the_straggler() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("nccl");
    let captures = tmp.join("captures");
    std::fs::create_dir_all(&captures).unwrap();
    nccl_ranks(&captures, 10, 20);
    let ranks = [
        Outputs::read(&captures.join("r0")),
        Outputs::read(&captures.join("r1")),
    ];
    for (rank, out) in ranks.iter().enumerate() {
        assert_rank_ranges(rank as u64, out);
    }

    let merged = tmp.join("merged");
    let flags = args![
        "merge",
        captures.join("r0"),
        captures.join("r1"),
        "--step",
        "step",
        "--align",
        "collectives",
        "-o",
        &merged
    ];
    Xtrace::spawn(flags).wait().assert_success();
    let merged = Outputs::read(&merged);
    // NCCL's calls end once their work is queued, each rank on its own: no alignment by them.
    let parts = merged.summary["merged"].as_array().unwrap();
    assert!(parts.iter().all(|p| p.get("aligned").is_none()), "{parts:?}");
    let stragglers = merged.summary["stragglers"].as_array().expect("stragglers");
    let names: Vec<(&str, &str, u64)> = stragglers
        .iter()
        .map(|s| {
            let (name, kind) = (s["name"].as_str().unwrap(), s["kind"].as_str().unwrap());
            (name, kind, s["rounds"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(
        names,
        [
            ("ncclAllReduce", "collective", 10),
            ("ncclBroadcast", "collective", 3),
            ("step", "step", 10)
        ]
    );
    let host = ranks[1].summary["host"].as_str().unwrap();
    for found in [&stragglers[0], &stragglers[2]] {
        let last = &found["ranks"].as_array().unwrap()[0];
        assert_eq!(found["ranks"].as_array().unwrap().len(), 1, "{found}");
        assert_eq!(
            (&last["rank"], &last["times_last"]),
            (&format!("{host} rank 1").into(), &10.into())
        );
        let late = last["late_total_ns"].as_u64().unwrap() as f64 / 10.0;
        assert!(
            (18e6..=22e6).contains(&late),
            "{found}: {late} ns late on average"
        );
    }
    let line = format!("straggler at collective ncclAllReduce: {host} rank 1 arrived last 10 of 10 times, ");
    assert!(merged.summary_txt.contains(&line), "{}", merged.summary_txt);
}
