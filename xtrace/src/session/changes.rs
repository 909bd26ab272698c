//! What the session does while recording about changes in the traced processes: a CUDA library
//! loaded later (`--cuda`), and an exec by a thread other than a process's first, which leaves
//! the process's probes dead in the kernel.
use std::sync::mpsc;

use crate::{
    cuda,
    probes::{attach, uprobe::Plan},
};

use super::{targets::Targets, Said};

/// Attaches the CUDA libraries process `pid` loaded since it was last looked at; returns a line
/// for the user per library: a notice when attached, a warning saying why not.
pub fn late_attach(
    late: &mut cuda::late::Late,
    pid: u32,
    targets: &Targets,
    scope_pids: &[Option<u32>],
    plan: &mut Plan,
    ebpf: &mut aya::Ebpf,
    attached: &mut attach::Attached,
) -> Vec<Said> {
    let processes = targets.processes();
    let (Some(scope), Some(process)) = (
        scope_pids.iter().position(|p| *p == Some(pid)),
        processes.iter().find(|p| p.pid == pid),
    ) else {
        return Vec::new();
    };
    let found = match late.scan(plan, scope, process) {
        Ok(found) => found,
        Err(e) => {
            return vec![Said::Warning(format!(
                "could not look for CUDA libraries pid {pid} loaded: {e}"
            ))]
        }
    };
    found
        .iter()
        .flat_map(|f| {
            let path = f.file.shown.display();
            let attached = match attach::attach_more(ebpf, attached, plan, &f.attachments, scope_pids) {
                Ok(()) => Said::Notice(format!(
                    "attached {} CUDA probes to {path}, loaded by pid {pid} after the start",
                    f.attachments.len()
                )),
                Err(e) => Said::Warning(format!(
                    "could not attach to {path}, loaded by pid {pid}: {e}; it is not traced"
                )),
            };
            // As for a library mapped from the start.
            let lacks = crate::cuda::plan::lacks(&f.file.shown, &f.missing).map(Said::Warning);
            std::iter::once(attached).chain(lacks)
        })
        .collect()
}

/// Processes whose probes are being closed after a thread other than their first ran exec, to be
/// attached again once closed. The kernel ties a process's uprobe links to its first thread, which
/// that exec ended: they no longer place their probes in the program it runs now (an exec by the
/// first thread keeps them), but where new links place them, the old ones fire too. Closing a link
/// can wait on the kernel for a while (see `probes::detach`), so it is done on a thread of its own
/// while recording goes on; the process's calls in between are not traced.
#[derive(Debug, Default)]
pub struct Execs {
    /// (pid, plan scope, said when its old links are closed).
    closing: Vec<(u32, usize, mpsc::Receiver<()>)>,
}

impl Execs {
    /// Starts closing the probes of process `pid`, if it is traced by pid (with `-a` the probes are
    /// every process's); returns a warning line when they cannot be attached again.
    pub fn exec(
        &mut self,
        pid: u32,
        scope_pids: &[Option<u32>],
        attached: &mut attach::Attached,
    ) -> Vec<Said> {
        let Some(scope) = scope_pids.iter().position(|p| *p == Some(pid)) else {
            return Vec::new();
        };
        if self.closing.iter().any(|(p, ..)| *p == pid) {
            return Vec::new();
        }
        if attached.mechanism != attach::Mechanism::UprobeMulti {
            return vec![Said::Warning(format!(
                "pid {pid}: a thread other than its first ran exec, which ends the kernel's probes \
                 of the process, and perf-event uprobes cannot be attached again; it is not traced \
                 from here"
            ))];
        }
        let old = attached.take_scope(scope);
        let (closed_tx, closed) = mpsc::channel();
        // A thread that cannot be made drops the links here, closing them before it returns.
        let _ = std::thread::Builder::new()
            .name("xtrace-reattach".into())
            .spawn(move || {
                drop(old);
                let _ = closed_tx.send(());
            });
        self.closing.push((pid, scope, closed));
        Vec::new()
    }

    /// Attaches again the probes of each process whose old links are closed; a line for the user
    /// per process.
    pub fn attach_closed(&mut self, plan: &Plan, attached: &mut attach::Attached) -> Vec<Said> {
        let mut lines = Vec::new();
        self.closing.retain(|(pid, scope, closed)| {
            if matches!(closed.try_recv(), Err(mpsc::TryRecvError::Empty)) {
                return true;
            }
            lines.push(match attach::reattach(attached, plan, *scope, *pid) {
                Ok(uprobes) => Said::Notice(format!(
                    "pid {pid}: a thread other than its first ran exec, which ends the kernel's \
                     probes of the process: attached its {uprobes} uprobes again (its calls in \
                     between are not traced)"
                )),
                Err(e) => Said::Warning(format!(
                    "pid {pid}: a thread other than its first ran exec, which ends the kernel's \
                     probes of the process, and attaching them again failed: {e}; it is not \
                     traced from here"
                )),
            });
            false
        });
        lines
    }
}
