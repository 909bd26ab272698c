//! `cargo xtask`: orchestration for xtrace — toolchain setup, builds, the test run, the demo,
//! the benchmarks and the release.
//! Owns only the command line and dispatch; each subcommand lives in its own module.
mod bench;
mod build;
mod demo;
mod dist;
mod kernel;
mod lint;
mod man;
mod setup;
mod test;
mod util;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Development tasks for xtrace"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install what the build and the tests need (nightly rust-src, bpf-linker 0.10.0, Debian packages).
    Setup,
    /// Check the setup, then build the xtrace binary.
    Build(build::BuildArgs),
    /// Check the setup, then run the unit tests and the root integration tests (with --kernel: the
    /// smoke set inside that kernel under qemu instead; under CI also inside Debian 12's kernel).
    Test(test::TestArgs),
    /// Trace a bundled fake training loop for 3 seconds and write a Perfetto/Chrome trace.
    Demo,
    /// Measure xtrace against the bare uprobe floor and bpftrace; table + target/bench/bench.json.
    Bench(bench::BenchArgs),
    /// What `bench --kernel` runs inside the guest kernel.
    #[command(hide = true)]
    BenchGuest(bench::GuestArgs),
    /// rustfmt, clippy (host and kernel crates, warnings denied) and the module-cycle check.
    Lint,
    /// Regenerate docs/reference/{cli.md,man,completions} from the clap definitions.
    Man,
    /// Build and test the release: target/dist/xtrace-VERSION-x86_64-linux.tar.gz (static xtrace,
    /// tool library for glibc 2.17, man pages, completions) and xtrace_VERSION_amd64.deb.
    Dist(dist::DistArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Setup => setup::run(setup::Verbosity::EveryStep),
        Command::Build(args) => build::run(&args),
        Command::Test(args) => test::run(&args),
        Command::Demo => demo::run(),
        Command::Bench(args) => bench::run(&args),
        Command::BenchGuest(args) => bench::guest_main(&args),
        Command::Lint => lint::run(),
        Command::Man => man::run(),
        Command::Dist(args) => dist::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            if err.downcast_ref::<util::BadInput>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
