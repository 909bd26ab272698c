//! Two ranks of an MPI job under real Open MPI: `mpirun -np 2` starts one xtrace per rank, each
//! launching fixture `mpifix` (see tests/fixtures/mpifix.c); and two ranks of an NCCL-like job,
//! one xtrace each with the tool library (see tests/fixtures/ncclfix.c).
use std::{path::Path, process::Command};

use crate::{
    fixtures::{mpifix, ncclfix},
    xtrace_bin,
};

/// Runs `mpirun -np 2 xtrace FLAGS -o OUT -- mpifix ARGS...` (OUT with `{rank}` in it) to its end;
/// each xtrace's summary table is dropped, the files are what a test reads.
pub fn mpirun_ranks(flags: &[&str], out: &Path, args: &[&str]) {
    let status = Command::new("mpirun")
        .args(["-np", "2", "--oversubscribe"])
        // Open MPI refuses to start as root unless told twice.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .arg(xtrace_bin())
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(mpifix())
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("mpirun (Open MPI's launcher, installed by `cargo xtask setup`)");
    assert!(status.success(), "mpirun: {status}");
}

/// Runs `xtrace --nvtx -o OUT/r{RANK} -- ncclfix OUT/barrier STEPS SLOW_MS` for ranks 0 and 1 at
/// once (RANK and WORLD_SIZE=2 in their environment), each to its end.
pub fn nccl_ranks(out: &Path, steps: u32, slow_ms: u32) {
    let barrier = out.join("barrier");
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            Command::new(xtrace_bin())
                .args(["--nvtx", "-q", "-o"])
                .arg(out.join(format!("r{rank}")))
                .arg("--")
                .arg(ncclfix())
                .arg(&barrier)
                .args([steps.to_string(), slow_ms.to_string()])
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "2")
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("xtrace")
        })
        .collect();
    for mut rank in ranks {
        let status = rank.wait().expect("waiting for xtrace");
        assert!(status.success(), "xtrace --nvtx ncclfix: {status}");
    }
}
