//! Attaching, when the recording stops, the tool library's `xtrace:gpu_drain` sites (planned
//! with `gpu_records`, left out of the attach at the start): raising their semaphores asks each
//! traced process's library for its last device records while `gpu_records` still takes them
//! (`session::drain`). The program put there is `gpu_records`, already loaded: the site fires
//! only when a library's watcher starts, with an empty batch. The links join the others and are
//! closed with them.
use aya::Ebpf;

use super::{
    attach::{group, is_gpu_site, Attached, Mechanism},
    attach_multi::{group_error, link_group},
    attach_perf::program_fd,
    uprobe::Plan,
    usdt::spec::RangeOp,
};
use crate::{
    bpf::{perf_uprobe, uprobe_program::UprobeProgram},
    error::{Error, Result},
};

/// Attaches every `gpu_drain` site of `plan`, each for its scope's process (`pids`); returns the
/// uprobes placed (0 when the plan has none).
pub fn attach_drain(
    ebpf: &mut Ebpf,
    attached: &mut Attached,
    plan: &Plan,
    pids: &[Option<u32>],
) -> Result<usize> {
    let program = UprobeProgram::GpuRecords;
    let groups = group(
        plan.usdt_sites
            .iter()
            .enumerate()
            .filter(|(_, s)| is_gpu_site(plan, s, RangeOp::GpuDrain))
            .map(|(i, s)| (s.scope, &s.file, s.offset, i as u64, s.ref_ctr_offset)),
    );
    let mut placed = 0;
    match attached.mechanism {
        Mechanism::UprobeMulti => {
            let Some(multi) = attached.programs.iter().find(|p| p.program() == program) else {
                return Ok(0);
            };
            let mut links = Vec::new();
            for g in &groups {
                let pid = pids[g.scope];
                let link = link_group(multi, g, pid).map_err(|e| group_error(program, g, pid, e))?;
                links.push((g.scope, link, g.offsets.len()));
            }
            for (scope, link, n) in links {
                attached.keep(scope, link, false, n);
                placed += n;
            }
        }
        Mechanism::PerfEvent => {
            if groups.is_empty() {
                return Ok(0);
            }
            let fd = program_fd(ebpf, program)?;
            for g in &groups {
                let pid = pids[g.scope];
                let refused = |e| {
                    let file = g.file.shown.display();
                    Error::io(format!("attaching {program} to xtrace:gpu_drain in {file}"), e)
                };
                for ((offset, cookie), ref_ctr) in g.offsets.iter().zip(&g.cookies).zip(&g.ref_ctr_offsets) {
                    let site = (*offset, false);
                    let probe = perf_uprobe::attach(fd, &g.file.open, site, *ref_ctr, pid, *cookie)
                        .map_err(refused)?;
                    attached.perf_usdt.push(probe);
                    attached.uprobes += 1;
                    placed += 1;
                }
            }
        }
    }
    Ok(placed)
}
