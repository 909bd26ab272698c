//! Attaching a plan with one perf-event uprobe per offset, process and program: the mechanism of
//! kernels without uprobe_multi links (before 6.6), or of `XTRACE_UPROBE_ATTACH=perf_event`. Every
//! uprobe is opened by hand (`bpf::perf_uprobe`), so that the stop can take the programs off all
//! of them at once and leave their slow removal to a background process (`super::teardown`).
use std::os::fd::{AsFd, BorrowedFd};

use aya::Ebpf;

use super::{
    attach::{function_groups, program, programs_for, usdt_groups, whom, Attached, Group, Mechanism},
    uprobe::{Attachment, Plan},
};
use crate::{
    bpf::{perf_uprobe, uprobe_program::UprobeProgram},
    error::{Error, Result},
};

/// Loads program `name` into the kernel.
pub(super) fn load(ebpf: &mut Ebpf, name: UprobeProgram) -> Result<()> {
    program(ebpf, name)?.load().map_err(|source| Error::Attach {
        what: format!("loading {name}"),
        source,
    })
}

/// Attaches every planned probe with perf-event uprobes.
pub(super) fn attach_perf_event(ebpf: &mut Ebpf, plan: &Plan, pids: &[Option<u32>]) -> Result<Attached> {
    raise_open_files_limit();
    let mut attached = Attached::new(Mechanism::PerfEvent);
    for name in programs_for(plan) {
        load(ebpf, name)?;
        if name.is_usdt() {
            let fd = program_fd(ebpf, name)?;
            for g in usdt_groups(plan, name) {
                let sites = g.offsets.iter().zip(&g.cookies).zip(&g.ref_ctr_offsets);
                for ((offset, cookie), ref_ctr) in sites {
                    let pid = pids[g.scope];
                    let probe =
                        perf_uprobe::attach(fd, &g.file.open, (*offset, false), *ref_ctr, pid, *cookie)
                            .map_err(|e| {
                                let site = &plan.usdt_sites[*cookie as usize];
                                let probe = &plan.probes[site.site.probe_id as usize].name;
                                refused(name, &g, probe, *offset, pid, e)
                            })?;
                    attached.perf_usdt.push(probe);
                    attached.uprobes += 1;
                }
            }
            continue;
        }
        attach_functions_perf_event(ebpf, &mut attached, name, plan, &plan.attachments, pids)?;
    }
    Ok(attached)
}

/// Raises the soft limit on open files to the hard one: each perf-event uprobe holds two (the
/// event and its link), 1,200 for 300 functions, past the usual soft limit of 1,024. A command
/// xtrace launches was started before, with the limits it was given.
fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: the calls read and write one rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// The file descriptor of program `name`, loaded.
pub(super) fn program_fd(ebpf: &mut Ebpf, name: UprobeProgram) -> Result<BorrowedFd<'_>> {
    let fd = program(ebpf, name)?.fd().map_err(|source| Error::Attach {
        what: name.to_string(),
        source,
    })?;
    Ok(fd.as_fd())
}

/// Attaches span program `name` (loaded) to `attachments` with perf-event uprobes, kept in
/// `attached`.
pub(super) fn attach_functions_perf_event(
    ebpf: &mut Ebpf,
    attached: &mut Attached,
    name: UprobeProgram,
    plan: &Plan,
    attachments: &[Attachment],
    pids: &[Option<u32>],
) -> Result<()> {
    let fd = program_fd(ebpf, name)?;
    for g in function_groups(name, plan, attachments) {
        let pid = pids[g.scope];
        for (offset, cookie) in g.offsets.iter().zip(&g.cookies) {
            let at = (*offset, name.is_return_probe());
            let probe = perf_uprobe::attach(fd, &g.file.open, at, 0, pid, *cookie).map_err(|e| {
                let probe = &plan.probes[*cookie as u32 as usize].name;
                refused(name, &g, probe, *offset, pid, e)
            })?;
            match name.ends_calls() {
                true => attached.perf_exit.push(probe),
                false => attached.perf_enter.push(probe),
            }
            attached.uprobes += 1;
        }
    }
    Ok(())
}

/// The error of an offset the kernel refused.
fn refused(
    program: UprobeProgram,
    g: &Group,
    probe: &str,
    offset: u64,
    pid: Option<u32>,
    e: std::io::Error,
) -> Error {
    Error::io(
        format!(
            "attaching {program} to {}:{probe} at {offset:#x} for {}",
            g.file.shown.display(),
            whom(pid)
        ),
        match e.raw_os_error() {
            Some(libc::EMFILE) => std::io::Error::other(
                "too many open files: each function takes two with perf-event uprobes (kernels \
                 before 6.6); raise the hard limit (`ulimit -Hn`) or trace fewer functions",
            ),
            _ => super::attach::explained(e),
        },
    )
}
