//! Attaches the empty `noop` uprobe program to SYMBOL in the executable or library FILE (for every
//! process; on the instruction xtrace's entry probe goes on, `--entry auto`), and with `--return` also the empty `noop_ret` uretprobe program (the hooks a span
//! needs), prints `attached`, and detaches when its standard input closes. `--clock` attaches
//! `clock` and `clock_ret` instead (the hooks, two clock reads and one ring-buffer record per call:
//! a lower bound for a span) and drains the ring buffer every 10 ms, as xtrace does. `cargo xtask bench` uses
//! it to measure the bare cost of the hooks. It attaches the way xtrace does: uprobe_multi links,
//! or perf-event uprobes when `XTRACE_UPROBE_ATTACH=perf_event`.
//!
//! `usdt:PROVIDER:NAME[,PROVIDER:NAME...]` instead of SYMBOL attaches at those USDT call sites,
//! raising their semaphores (uprobe_multi only).
//!
//! Usage: uprobe_floor FILE SYMBOL|usdt:PROBES [--return|--clock]
use std::{
    io::Read,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use aya::{
    maps::RingBuf,
    programs::{uprobe::UProbeScope, UProbe},
};
use xtrace::{
    bpf::{
        uprobe_multi::{self, MultiTarget},
        uprobe_program::UprobeProgram,
    },
    probes::{
        attach::ATTACH_ENV,
        elf::ElfSymbols,
        entry::{EntryMode, EntrySites},
    },
};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(file), Some(symbol)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: uprobe_floor FILE SYMBOL|usdt:PROBES [--return|--clock]");
    };
    let path = std::path::Path::new(&file);
    let (offsets, ref_ctrs): (Vec<u64>, Vec<u64>) = match symbol.strip_prefix("usdt:") {
        Some(probes) => usdt_sites(path, probes)?,
        None => {
            // Where xtrace's entry probe goes (`--entry auto`, no arguments captured).
            let symbols = ElfSymbols::read(path, path, &Default::default())?;
            let code = std::fs::File::open(path)?;
            let mut sites = EntrySites::default();
            let mut offsets = Vec::new();
            for f in symbols.find(&symbol)? {
                offsets.push((sites.offset(EntryMode::Auto, &code, &symbols, f, 0)?, 0));
            }
            offsets.into_iter().unzip()
        }
    };
    let usdt = symbol.starts_with("usdt:");
    let mode = args.next();
    let programs: &[UprobeProgram] = match mode.as_deref() {
        None => &[UprobeProgram::Noop],
        Some("--return") => &[UprobeProgram::NoopRet, UprobeProgram::Noop],
        Some("--clock") => &[UprobeProgram::ClockRet, UprobeProgram::Clock],
        Some(other) => anyhow::bail!("unknown flag {other}: give --return or --clock"),
    };
    let clock = mode.as_deref() == Some("--clock");
    let options = xtrace::bpf::LoadOptions {
        ring_bytes: xtrace_common::probe::DEFAULT_RING_BYTES,
        ..Default::default()
    };
    let mut ebpf = xtrace::bpf::load(
        &options,
        xtrace::bpf::loader::Parsed::parse(Default::default()).loader,
    )?;
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
            ref_ctr_offsets: usdt.then_some(ref_ctrs.as_slice()),
            pid: None,
            ret: program.program().is_return_probe(),
        })?);
    }
    if !multi && usdt {
        anyhow::bail!("USDT sites need uprobe_multi here (unset {ATTACH_ENV})");
    }
    if !multi {
        for name in programs.iter().map(|p| p.name()) {
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
    let stop = Arc::new(AtomicBool::new(false));
    let drain = clock
        .then(|| -> anyhow::Result<_> {
            let map = ebpf
                .take_map("EVENTS")
                .ok_or_else(|| anyhow::anyhow!("no EVENTS map"))?;
            let mut ring = RingBuf::try_from(map)?;
            let stop = Arc::clone(&stop);
            Ok(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    while ring.next().is_some() {}
                    std::thread::sleep(Duration::from_millis(10));
                }
            }))
        })
        .transpose()?;
    println!("attached");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    stop.store(true, Ordering::Relaxed);
    if let Some(drain) = drain {
        let _ = drain.join();
    }
    Ok(())
}

/// The file offsets and semaphore offsets of the USDT call sites of `probes`
/// (`provider:name,...`) in `path`.
fn usdt_sites(path: &std::path::Path, probes: &str) -> anyhow::Result<(Vec<u64>, Vec<u64>)> {
    let elf = xtrace::elf::Elf::read(path)?;
    let (notes, _) = xtrace::probes::usdt::notes::read_notes(&elf.parse()?).map_err(anyhow::Error::msg)?;
    let wanted: Vec<&str> = probes.split(',').collect();
    let sites: Vec<(u64, u64)> = notes
        .iter()
        .filter(|n| wanted.contains(&format!("{}:{}", n.provider, n.name).as_str()))
        .map(|n| (n.offset, n.semaphore_offset.unwrap_or(0)))
        .collect();
    if sites.is_empty() {
        anyhow::bail!("no USDT site of {probes} in {}", path.display());
    }
    Ok(sites.into_iter().unzip())
}
