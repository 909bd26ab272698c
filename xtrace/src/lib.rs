//! xtrace: an eBPF tracer and profiler for running processes.
//!
//! Data flows one way: `probes` resolve and attach → kernel programs (xtrace-ebpf) → ring buffer →
//! `pipeline` (read, decode, aggregate) → `export` (Chrome trace, summary). `session` drives one
//! recording from start to stop; the binary's `main` only parses arguments and prints errors.

pub mod analysis;
pub mod bpf;
pub mod cli;
pub mod clock;
pub mod cuda;
pub mod demangle;
pub mod error;
pub mod export;
pub mod output;
pub mod pipeline;
pub mod privilege;
pub mod probes;
pub mod session;
pub mod target;

pub use error::Error;
