//! Attaches the empty `noop` uprobe program to SYMBOL in the executable or library FILE (for every
//! process), and with `--return` also the empty `noop_ret` uretprobe program (the hooks a span
//! needs), prints `attached`, and detaches when its standard input closes. `cargo xtask bench` uses
//! it to measure the bare cost of the hooks.
//!
//! Usage: uprobe_floor FILE SYMBOL [--return]
use std::io::Read;

use aya::programs::{uprobe::UProbeScope, UProbe};
use xtrace::probes::elf::ElfSymbols;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(file), Some(symbol)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: uprobe_floor FILE SYMBOL [--return]");
    };
    let path = std::path::Path::new(&file);
    let offsets = ElfSymbols::read(path, path)?.lookup(&symbol)?;
    let with_return = args.next().as_deref() == Some("--return");
    let mut ebpf = xtrace::bpf::load(xtrace_common::probe::DEFAULT_RING_BYTES)?;
    let programs: &[&str] = if with_return {
        &["noop_ret", "noop"]
    } else {
        &["noop"]
    };
    for name in programs {
        let program: &mut UProbe = ebpf
            .program_mut(name)
            .ok_or_else(|| anyhow::anyhow!("no {name} program"))?
            .try_into()?;
        program.load()?;
        for (_, offset) in &offsets {
            program.attach(*offset, path, UProbeScope::AllProcesses)?;
        }
    }
    println!("attached");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    Ok(())
}
