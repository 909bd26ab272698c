//! xtrace: an eBPF tracer and profiler for running processes.
//!
//! Data flows one way: `probes` resolve and attach → kernel programs (xtrace-ebpf) → ring buffer →
//! `pipeline` (read, decode, aggregate, stream the Chrome trace) → `export` (summary, profiles).
//! `session` drives one recording from start to stop; the binary's `main` only parses arguments
//! and prints errors. `model` holds the plain data every layer shares.

pub mod analysis;
pub mod bpf;
pub mod check;
pub mod cli;
pub mod clock;
pub mod cuda;
pub mod demangle;
pub mod elf;
pub mod error;
pub mod export;
pub mod image;
pub mod inject;
pub mod launch;
pub mod live;
pub mod model;
pub mod mpi;
pub mod output;
pub mod pidns;
pub mod pipeline;
pub mod privilege;
pub mod probes;
pub mod procfs;
pub mod python;
pub mod session;
pub mod shell;
pub mod store;
pub mod target;

pub use error::Error;

/// The path of the C library the test binary runs with, from its own mappings.
#[cfg(test)]
pub(crate) fn test_libc() -> String {
    procfs::own_maps()
        .unwrap()
        .into_iter()
        .map(|m| m.path)
        .find(|p| p.contains("/libc.so"))
        .expect("the test links libc")
}
