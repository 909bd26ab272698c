//! Attaches the empty `noop` uprobe program to SYMBOL in the executable or library FILE (for every
//! process), and with `--return` also the empty `noop_ret` uretprobe program (the hooks a span
//! needs), prints `attached`, and detaches when its standard input closes. `cargo xtask bench` uses
//! it to measure the bare cost of the hooks. It attaches the way xtrace does: uprobe_multi links,
//! or perf-event uprobes when `XTRACE_UPROBE_ATTACH=perf_event`.
//!
//! Usage: uprobe_floor FILE SYMBOL [--return]
use std::io::Read;

use aya::programs::{uprobe::UProbeScope, UProbe};
use xtrace::{
    bpf::uprobe_multi::{self, MultiTarget},
    probes::{attach::ATTACH_ENV, elf::ElfSymbols},
};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(file), Some(symbol)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: uprobe_floor FILE SYMBOL [--return]");
    };
    let path = std::path::Path::new(&file);
    let offsets: Vec<u64> = ElfSymbols::read(path, path)?
        .lookup(&symbol)?
        .into_iter()
        .map(|(_, offset)| offset)
        .collect();
    let with_return = args.next().as_deref() == Some("--return");
    let mut ebpf = xtrace::bpf::load(&xtrace::bpf::LoadOptions {
        ring_bytes: xtrace_common::probe::DEFAULT_RING_BYTES,
        ..Default::default()
    })?;
    let programs: &[&str] = if with_return {
        &["noop_ret", "noop"]
    } else {
        &["noop"]
    };
    let mut links = Vec::new();
    let multi = std::env::var(ATTACH_ENV).as_deref() != Ok("perf_event");
    let loaded = if multi {
        uprobe_multi::load(&ebpf, programs)?
    } else {
        Vec::new()
    };
    for program in &loaded {
        let cookies = vec![0; offsets.len()];
        links.push(program.attach(&MultiTarget {
            path,
            offsets: &offsets,
            cookies: &cookies,
            ref_ctr_offsets: None,
            pid: None,
            ret: program.name() == "noop_ret",
        })?);
    }
    if !multi {
        for name in programs {
            let program: &mut UProbe = ebpf
                .program_mut(name)
                .ok_or_else(|| anyhow::anyhow!("no {name} program"))?
                .try_into()?;
            program.load()?;
            for offset in &offsets {
                program.attach(*offset, path, UProbeScope::AllProcesses)?;
            }
        }
    }
    println!("attached");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    Ok(())
}
