//! Following the processes that sampled processes start (the kernel side is
//! xtrace-ebpf/src/follow.rs): what the programs need to know of this kernel, read from its BTF,
//! and attaching them to their raw tracepoints, which the kernel names without tracefs.
use aya::Ebpf;

use crate::{
    bpf::{btf::KernelBtf, layout::Offsets},
    error::{Error, Result},
};

/// The facts on this kernel; those of `struct pid` only when xtrace runs in a PID namespace of
/// its own (`in_namespace`).
pub fn offsets(in_namespace: bool) -> Result<Offsets> {
    let needed = |what: &str| format!("{what} (needed to follow child processes; --no-inherit does without)");
    let btf = KernelBtf::shared().map_err(|e| Error::io(needed("the kernel's BTF"), e))?;
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
    let member = |name: &str, member: &str| {
        btf.member_offset(name, member)
            .ok_or_else(|| missing(&format!("its struct {name} has no `{member}`")))
    };
    let mut offsets = Offsets {
        task_pid: member("task_struct", "pid")?,
        exit_group_dead: btf.tracepoint_args("sched_process_exit") == Some(2),
        ..Offsets::default()
    };
    if in_namespace {
        offsets.task_thread_pid = member("task_struct", "thread_pid")?;
        offsets.pid_level = member("pid", "level")?;
        offsets.pid_numbers = member("pid", "numbers")?;
        offsets.upid_size = btf
            .struct_size("upid")
            .ok_or_else(|| missing("it has no struct upid"))?;
    }
    Ok(offsets)
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
