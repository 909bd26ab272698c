//! Attaches the empty `noop` uprobe program to SYMBOL in the executable or library FILE (for every
//! process), prints `attached`, and detaches when its standard input closes. `cargo xtask bench`
//! uses it to measure the bare cost of a uprobe hit.
//!
//! Usage: uprobe_floor FILE SYMBOL
use std::io::Read;

use aya::programs::{uprobe::UProbeScope, UProbe};
use xtrace::probes::elf::ElfSymbols;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(file), Some(symbol)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: uprobe_floor FILE SYMBOL");
    };
    let path = std::path::Path::new(&file);
    let offsets = ElfSymbols::read(path, path)?.lookup(&symbol)?;
    let mut ebpf = xtrace::bpf::load(xtrace_common::probe::DEFAULT_RING_BYTES)?;
    let program: &mut UProbe = ebpf
        .program_mut("noop")
        .ok_or_else(|| anyhow::anyhow!("no noop program"))?
        .try_into()?;
    program.load()?;
    for (_, offset) in offsets {
        program.attach(offset, path, UProbeScope::AllProcesses)?;
    }
    println!("attached");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    Ok(())
}
