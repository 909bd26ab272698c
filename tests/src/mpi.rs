//! Two ranks of an MPI job under real Open MPI: `mpirun -np 2` starts one xtrace per rank, each
//! launching fixture `mpifix` (see tests/fixtures/mpifix.c).
use std::{path::Path, process::Command};

use crate::{fixtures::mpifix, xtrace_bin};

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
