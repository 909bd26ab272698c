//! Following the processes that sampled processes start (the kernel side is
//! xtrace-ebpf/src/follow.rs): what the programs need to know of this kernel, read from its BTF,
//! and attaching them to their raw tracepoints, which the kernel names without tracefs.
use aya::Ebpf;

use crate::{
    bpf::btf::KernelBtf,
    error::{Error, Result},
};

/// Room in the sampled-process table for followed processes alive at once, beyond the targets.
pub const FOLLOW_MAX: u32 = 8192;

/// What the programs read on this kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offsets {
    /// Where `pid` lies in `struct task_struct`: task_newtask passes the new task.
    pub task_pid: u32,
    /// Whether sched_process_exit passes `group_dead` (Linux 6.16+); without it a followed process
    /// stays in the table after it exits.
    pub exit_group_dead: bool,
}

/// The facts on this kernel.
pub fn offsets() -> Result<Offsets> {
    let needed = |what: &str| format!("{what} (needed to follow child processes; --no-inherit does without)");
    let btf = KernelBtf::read().map_err(|e| Error::io(needed("the kernel's BTF"), e))?;
    let missing = |what: &str| {
        Error::io(
            needed("the kernel's BTF"),
            std::io::Error::other(what.to_string()),
        )
    };
    if btf.tracepoint_args("task_newtask") != Some(2) {
        return Err(missing(
            "it has no task_newtask tracepoint of (task, clone_flags)",
        ));
    }
    Ok(Offsets {
        task_pid: btf
            .member_offset("task_struct", "pid")
            .ok_or_else(|| missing("its struct task_struct has no `pid`"))?,
        exit_group_dead: btf.tracepoint_args("sched_process_exit") == Some(2),
    })
}

/// Loads and attaches the programs (fd-based: they go with the object).
pub fn attach(ebpf: &mut Ebpf, offsets: &Offsets) -> Result<()> {
    let mut hooks = vec![("process_fork", "task_newtask")];
    if offsets.exit_group_dead {
        hooks.push(("process_exit", "sched_process_exit"));
    }
    for (program, tracepoint) in hooks {
        crate::bpf::attach_raw_tracepoint(ebpf, program, tracepoint)?;
    }
    Ok(())
}
