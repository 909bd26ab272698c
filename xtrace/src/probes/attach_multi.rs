//! Attaching a plan with uprobe_multi links (6.6+): one link per program, file and traced process
//! ([`super::attach::Group`]), and telling a kernel without them, so that `attach` falls back to
//! perf-event uprobes.
use std::path::Path;

use aya::Ebpf;

use super::{
    attach::{explained, program_groups, programs_for, whom, Attached, Group, Mechanism, ENOTSUPP},
    uprobe::Plan,
};
use crate::{
    bpf::{
        uprobe_multi::{self, MultiLink, MultiProgram, MultiTarget},
        uprobe_program::UprobeProgram,
    },
    error::{Error, Result},
};

/// Attaches with uprobe_multi links; `Ok(None)` when the kernel does not support them.
pub(super) fn attach_multi(ebpf: &Ebpf, plan: &Plan, pids: &[Option<u32>]) -> Result<Option<Attached>> {
    let programs = match uprobe_multi::load(ebpf, &programs_for(plan)) {
        Ok(programs) => programs,
        Err(Error::Io { source, .. }) if unsupported(&source) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut attached = Attached::new(Mechanism::UprobeMulti);
    for program in &programs {
        let name = program.program();
        for g in program_groups(name, plan) {
            let link = match link_group(program, &g, pids[g.scope]) {
                Ok(link) => link,
                // A kernel without uprobe_multi refuses the first link; one with it refuses a
                // link whose offsets it cannot probe with the same errors.
                Err(e) if attached.uprobes == 0 && unsupported(&e) && !has_uprobe_multi(program) => {
                    return Ok(None)
                }
                Err(e) => return Err(group_error(name, &g, pids[g.scope], e)),
            };
            attached.keep(g.scope, link, name.ends_calls(), g.offsets.len());
        }
    }
    attached.programs = programs;
    Ok(Some(attached))
}

/// One uprobe_multi link of `program` on a group's offsets (with their reference counters for
/// USDT sites), for process `pid` (None: every process); return probes for `span_exit`.
pub(super) fn link_group(program: &MultiProgram, g: &Group, pid: Option<u32>) -> std::io::Result<MultiLink> {
    let role = program.program();
    program.attach(&MultiTarget {
        path: &g.file.open,
        offsets: &g.offsets,
        cookies: &g.cookies,
        ref_ctr_offsets: role.is_usdt().then_some(g.ref_ctr_offsets.as_slice()),
        pid,
        ret: role.is_return_probe(),
    })
}

/// The error of a group the kernel refused.
pub(super) fn group_error(program: UprobeProgram, g: &Group, pid: Option<u32>, e: std::io::Error) -> Error {
    Error::io(
        format!(
            "attaching {program} to {} offsets in {} for {}",
            g.offsets.len(),
            g.file.shown.display(),
            whom(pid)
        ),
        explained(e),
    )
}

/// Whether the kernel has uprobe_multi links: one has them when it refuses a link on `/` (no
/// regular file) with EBADF, after it accepted the attach type.
fn has_uprobe_multi(program: &MultiProgram) -> bool {
    let probe = program.attach(&MultiTarget {
        path: Path::new("/"),
        offsets: &[0],
        cookies: &[0],
        ref_ctr_offsets: None,
        pid: None,
        ret: false,
    });
    matches!(probe, Err(e) if e.raw_os_error() == Some(libc::EBADF))
}

/// Errors with which a kernel older than 6.6 refuses uprobe_multi programs or links.
fn unsupported(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP))
}
