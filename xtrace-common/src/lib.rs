//! Records shared by the xtrace kernel programs (`xtrace-ebpf`) and user space (`xtrace`).
//!
//! Every record written to the ring buffer starts with an [`event::EventHeader`] whose `kind` says which
//! payload follows. All records are `#[repr(C)]` without implicit padding so both sides agree on the
//! layout byte for byte; user space checks the length of every record before reading it.
#![no_std]

pub mod event;
pub mod gpu;
pub mod offcpu;
pub mod probe;
pub mod python;
pub mod ranges;
pub mod stacks;
pub mod usdt;
