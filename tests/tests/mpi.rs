//! `--mpi` and `merge`'s stragglers, on real Open MPI: `mpirun -np 2` starts one xtrace per rank,
//! each launching fixture `mpifix 10 1 20` (10 steps of 10 ms of work and a 1024-double
//! MPI_Allreduce, rank 1 working 20 ms longer each step; 5 sends of 256 ints from rank 0 to rank 1
//! with tag 7; 3 broadcasts of 100 chars from rank 0; one barrier). Every call is counted with its
//! bytes, and the merged capture names rank 1 the straggler at every allreduce and step; with -F,
//! its CPU samples during the waits are in `compute`.
use serde_json::Value;

use xtrace_tests::{
    args,
    fixtures::fixtures,
    mpi::mpirun_ranks,
    output::Outputs,
    require_bpf,
    run::{run_error, Xtrace},
    TempDir,
};

/// Runs `mpirun -np 2 xtrace FLAGS -o DIR/r{rank} -- mpifix 10 1 20 MORE...`.
fn record_ranks(dir: &std::path::Path, flags: &[&str], more: &[&str]) {
    let args = [&["10", "1", "20"][..], more].concat();
    mpirun_ranks(flags, &dir.join("r{rank}"), &args);
}

/// summary.json's `mpi` section as (name, class, calls, bytes, unsized calls), by name.
fn functions(summary: &Value) -> Vec<(String, String, u64, u64, u64)> {
    let mpi = &summary["mpi"];
    assert_eq!(mpi["without_args"], 0, "{mpi}");
    mpi["functions"]
        .as_array()
        .expect("mpi.functions")
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["class"].as_str().unwrap().to_string(),
                f["calls"].as_u64().unwrap(),
                f["bytes"].as_u64().unwrap(),
                f["unsized_calls"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn row(name: &str, class: &str, calls: u64, bytes: u64) -> (String, String, u64, u64, u64) {
    (name.into(), class.into(), calls, bytes, 0)
}

/// The `args` of every span named `name`, as (count, datatype, bytes, peer or root, tag).
fn call_args(out: &Outputs, name: &str, place: &str) -> Vec<(Value, Value, Value, Value, Value)> {
    out.spans_named(name)
        .iter()
        .map(|s| {
            let a = &s.args;
            (
                a["count"].clone(),
                a["datatype"].clone(),
                a["bytes"].clone(),
                a[place].clone(),
                a["tag"].clone(),
            )
        })
        .collect()
}

/// Rank `rank`'s MPI calls, exactly: per function, its calls and bytes; each call's count,
/// datatype, bytes, peer and tag or root; with --stacks, where the allreduces came from.
fn assert_rank_calls(rank: u64, out: &Outputs) {
    let target = &out.summary["targets"][0]["rank"];
    assert_eq!(target["rank"], rank, "{target}");
    assert_eq!(
        (&target["world_size"], &target["launcher"]),
        (&2.into(), &"open-mpi".into())
    );
    let (p2p, tag) = match rank {
        0 => (row("MPI_Send", "point_to_point", 5, 5 * 256 * 4), 1),
        _ => (row("MPI_Recv", "point_to_point", 5, 5 * 256 * 4), 0),
    };
    let mut expected = vec![
        row("MPI_Allreduce", "collective", 10, 10 * 1024 * 8),
        row("MPI_Barrier", "collective", 1, 0),
        row("MPI_Bcast", "collective", 3, 3 * 100),
        row("MPI_Finalize", "setup", 1, 0),
        row("MPI_Init", "setup", 1, 0),
        p2p.clone(),
    ];
    expected.sort();
    assert_eq!(functions(&out.summary), expected, "rank {rank}");
    // Each span says what it moved: to or from whom, with which tag.
    let sends = call_args(out, &p2p.0, "peer");
    let send = (256.into(), "MPI_INT".into(), 1024.into(), tag.into(), 7.into());
    assert_eq!(sends, vec![send; 5], "rank {rank}");
    let allreduce = (
        1024.into(),
        "MPI_DOUBLE".into(),
        8192.into(),
        Value::Null,
        Value::Null,
    );
    assert_eq!(call_args(out, "MPI_Allreduce", "root"), vec![allreduce; 10]);
    let bcast = (100.into(), "MPI_CHAR".into(), 100.into(), 0.into(), Value::Null);
    assert_eq!(call_args(out, "MPI_Bcast", "root"), vec![bcast; 3]);
    assert!(
        out.summary_txt.contains("\nMPI: 21 calls of 6 functions\n"),
        "{}",
        out.summary_txt
    );
    // With --stacks, where each was called from: every allreduce from step().
    let probes = out.summary["probes"].as_array().unwrap();
    let allreduce = probes.iter().find(|p| p["name"] == "MPI_Allreduce");
    let sites = &allreduce.expect("MPI_Allreduce's row")["call_sites"];
    assert_eq!(sites.as_array().map(Vec::len), Some(1), "{sites}");
    assert_eq!(sites[0]["count"], 10, "{sites}");
    assert!(
        sites[0]["site"].as_str().unwrap().starts_with("step+0x"),
        "{sites}"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn mpi_calls_carry_their_bytes_and_the_slow_rank_is_named_the_straggler() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("mpi");
    record_ranks(
        &tmp.join("captures"),
        &["--mpi", "--stacks", "-u", "compute", "-u", "step"],
        &[],
    );
    let (r0, r1) = (
        Outputs::read(&tmp.join("captures/r0")),
        Outputs::read(&tmp.join("captures/r1")),
    );
    for (rank, out) in [(0, &r0), (1, &r1)] {
        assert_rank_calls(rank, out);
    }

    let merged = tmp.join("merged");
    let flags = args![
        "merge",
        tmp.join("captures/r0"),
        tmp.join("captures/r1"),
        "--step",
        "step",
        "-o",
        &merged
    ];
    Xtrace::spawn(flags).wait().assert_success();
    let merged = Outputs::read(&merged);
    let host = r1.summary["host"].as_str().unwrap().to_string();
    let stragglers = merged.summary["stragglers"].as_array().expect("stragglers");
    for (kind, name) in [("collective", "MPI_Allreduce"), ("step", "step")] {
        let found = stragglers
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {stragglers:?}"));
        assert_eq!(
            (&found["kind"], &found["rounds"]),
            (&kind.into(), &10.into()),
            "{found}"
        );
        // Rank 1 arrived last every time, 20 ms late on average (within 10%), working.
        let ranks = found["ranks"].as_array().unwrap();
        assert_eq!(ranks.len(), 1, "{found}");
        let last = &ranks[0];
        assert_eq!(last["rank"], format!("{host} rank 1"));
        assert_eq!(last["times_last"], 10);
        let late = last["late_total_ns"].as_u64().unwrap() as f64 / 10.0;
        assert!((18e6..=22e6).contains(&late), "{name}: {late} ns late on average");
        let compute = last["meanwhile"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "compute")
            .and_then(|m| m["overlap_ns"].as_u64())
            .unwrap_or_default();
        assert!(
            compute as f64 >= 0.9 * 10.0 * late,
            "{name}: compute {compute} ns of the waits"
        );
        assert!(last.get("samples").is_none(), "not sampled: {last}");
    }
    let line = format!("straggler at collective MPI_Allreduce: {host} rank 1 arrived last 10 of 10 times, ");
    assert!(merged.summary_txt.contains(&line), "{}", merged.summary_txt);
}

/// With -F, the straggler's CPU samples during the waits: rank 1 computing on the CPU (`spin`).
/// Its lateness is not checked here: a rank spinning on a loaded machine is preempted, and the
/// sampling's own work on two CPUs moves its arrivals by milliseconds either way.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn the_stragglers_samples_during_the_waits_are_in_what_it_computed() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("mpi-samples");
    record_ranks(&tmp.join("captures"), &["--mpi", "-F", "99"], &["spin"]);
    let merged = tmp.join("merged");
    let flags = args![
        "merge",
        tmp.join("captures/r0"),
        tmp.join("captures/r1"),
        "-o",
        &merged
    ];
    Xtrace::spawn(flags).wait().assert_success();
    let merged = Outputs::read(&merged);
    let stragglers = merged.summary["stragglers"].as_array().expect("stragglers");
    let allreduce = stragglers
        .iter()
        .find(|s| s["name"] == "MPI_Allreduce")
        .expect("MPI_Allreduce");
    let last = &allreduce["ranks"][0];
    assert!(last["rank"].as_str().unwrap().ends_with(" rank 1"), "{allreduce}");
    assert!(last["times_last"].as_u64().unwrap() >= 7, "{allreduce}");
    let waited = last["late_total_ns"].as_u64().unwrap() as f64;
    assert_samples_in_compute(&last["samples"], waited);
    assert!(
        merged.summary_txt.contains(" CPU samples, most in "),
        "{}",
        merged.summary_txt
    );
}

/// The straggler's CPU samples during waits of `waited` ns in all (on the CPU for all but 5 ms of
/// each, sampled at 99 Hz): some, no more than the waits hold (fewer when the machine preempts
/// it), and at least 80% of them in `compute`.
fn assert_samples_in_compute(samples: &Value, waited: f64) {
    let count = samples["count"].as_u64().expect("samples.count");
    let most = waited / 1e9 * 99.0;
    assert!(
        count >= 3 && count as f64 <= 1.2 * most + 2.0,
        "{count} samples in the waits, at most {most} expected: {samples}"
    );
    let in_compute: u64 = samples["stacks"]
        .as_array()
        .expect("samples.stacks")
        .iter()
        .filter(|s| s["stack"].as_str().unwrap().split(';').any(|f| f == "compute"))
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    assert!(
        in_compute as f64 >= 0.8 * count as f64,
        "{in_compute} of {count} samples in compute: {samples}"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn mpi_without_an_mpi_library_is_refused() {
    if !require_bpf() {
        return;
    }
    let error = run_error(args!["--mpi", "--", &fixtures().spans, "exit", "0"]);
    assert!(
        error.starts_with("xtrace: error: --mpi: the target has no MPI library (libmpi.so*, libmpich.so*)"),
        "{error}"
    );
}

/// The ends of each rank's MPI_Allreduce calls in a merged capture, per pid, in order (µs).
fn allreduce_ends(merged: &Outputs) -> Vec<Vec<f64>> {
    let mut by_pid: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
    for s in merged.spans_named("MPI_Allreduce") {
        by_pid.entry(s.pid).or_default().push(s.ts + s.dur);
    }
    by_pid
        .into_values()
        .map(|mut ends| {
            ends.sort_by(f64::total_cmp);
            ends
        })
        .collect()
}

/// The median of how far rank 1's allreduces end after rank 0's (µs). The median: on a loaded
/// machine a rank spinning in MPI can be preempted and leave a call milliseconds late.
fn median_apart(ends: &[Vec<f64>]) -> f64 {
    let mut apart: Vec<f64> = ends[0].iter().zip(&ends[1]).map(|(a, b)| b - a).collect();
    apart.sort_by(f64::total_cmp);
    apart[apart.len() / 2]
}

/// `--align collectives`: rank 1's host clock made 5 ms fast (its clock pairs moved), the clock
/// pairs alone place its allreduces 5 ms late; the collectives' ends bring them back together.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn align_collectives_undoes_a_host_clock_off_by_5_ms() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("mpi-align");
    record_ranks(&tmp.join("captures"), &["--mpi"], &[]);
    let path = tmp.join("captures/r1/summary.json");
    let mut summary: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for at in ["start", "end"] {
        let realtime = &mut summary["clock"][at]["realtime_ns"];
        *realtime = (realtime.as_u64().unwrap() + 5_000_000).into();
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&summary).unwrap()).unwrap();
    let captures = [tmp.join("captures/r0"), tmp.join("captures/r1")];
    let merge = |out: &str, align: &str| {
        let flags = args![
            "merge",
            &captures[0],
            &captures[1],
            "--align",
            align,
            "-o",
            tmp.join(out)
        ];
        Xtrace::spawn(flags).wait().assert_success();
        Outputs::read(&tmp.join(out))
    };
    // Apart by the 5 ms (the allreduce ends are within microseconds on one host).
    let by_clocks = allreduce_ends(&merge("by-clocks", "clocks"));
    assert_eq!(by_clocks.iter().map(Vec::len).collect::<Vec<_>>(), [10, 10]);
    let apart = median_apart(&by_clocks);
    assert!(
        (apart - 5000.0).abs() < 500.0,
        "ends {apart} µs apart: {by_clocks:?}"
    );
    let aligned = merge("by-collectives", "collectives");
    let parts = aligned.summary["merged"].as_array().unwrap();
    assert!(parts[0].get("aligned").is_none(), "the reference: {}", parts[0]);
    let moved = &parts[1]["aligned"];
    assert_eq!(moved["pairs"], 11, "10 allreduces and a barrier: {moved}");
    let correction = moved["correction_ns"].as_i64().unwrap();
    assert!((-5_500_000..=-4_500_000).contains(&correction), "{moved}");
    assert!(moved["residual_ns"].as_u64().unwrap() < 500_000, "{moved}");
    let ends = allreduce_ends(&aligned);
    let apart = median_apart(&ends);
    assert!(apart.abs() < 500.0, "ends {apart} µs apart: {ends:?}");
    assert!(
        aligned
            .summary_txt
            .contains("  aligned by 11 collectives: moved "),
        "{}",
        aligned.summary_txt
    );
}
