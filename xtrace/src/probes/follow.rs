//! Following the processes that sampled processes start (the kernel side is
//! xtrace-ebpf/src/follow.rs): the two tracepoints' field offsets, read from their formats in
//! tracefs, and attaching them.
use aya::{programs::TracePoint, Ebpf};

use crate::error::{Error, Result};

/// Room in the sampled-process table for followed processes alive at once, beyond the targets.
pub const FOLLOW_MAX: u32 = 8192;

/// Where the fields the programs read lie in the tracepoints' records (all 0 when not following).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offsets {
    /// task/task_newtask `pid`: the new task.
    pub newtask_pid: u32,
    /// task/task_newtask `clone_flags`.
    pub newtask_clone_flags: u32,
    /// sched/sched_process_exit `group_dead`; None on kernels whose record lacks it (then a
    /// followed process stays in the table after it exits).
    pub exit_group_dead: Option<u32>,
}

const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The format of tracepoint `event` ("system/name"), from the first tracefs mount that has it.
fn format(event: &str) -> Result<String> {
    let mut last = None;
    for root in TRACEFS {
        match std::fs::read_to_string(format!("{root}/events/{event}/format")) {
            Ok(text) => return Ok(text),
            Err(e) => last = Some(e),
        }
    }
    Err(Error::io(
        format!(
            "the format of tracepoint {event} (needed to follow child processes; --no-inherit does without)"
        ),
        last.unwrap_or_else(|| std::io::Error::other("no tracefs")),
    ))
}

/// The offset of `field` in a tracepoint format (lines `field:TYPE NAME; offset:N; size:S; ...`).
pub fn field_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let mut parts = line.trim().split(';').map(str::trim);
        let declaration = parts.next()?.strip_prefix("field:")?;
        let name = declaration.rsplit(' ').next()?;
        let name = name.split('[').next()?;
        if name != field {
            return None;
        }
        parts.find_map(|p| p.strip_prefix("offset:"))?.parse().ok()
    })
}

/// The offsets on this kernel.
pub fn offsets() -> Result<Offsets> {
    let newtask = format("task/task_newtask")?;
    let field = |name: &str| {
        field_offset(&newtask, name).ok_or_else(|| {
            Error::io(
                "tracepoint task/task_newtask",
                std::io::Error::other(format!(
                    "its record has no `{name}` field; give --no-inherit to sample the targets only"
                )),
            )
        })
    };
    let exit = format("sched/sched_process_exit")?;
    Ok(Offsets {
        newtask_pid: field("pid")?,
        newtask_clone_flags: field("clone_flags")?,
        exit_group_dead: field_offset(&exit, "group_dead"),
    })
}

/// Loads and attaches the programs (fd-based: they go with the object).
pub fn attach(ebpf: &mut Ebpf, offsets: &Offsets) -> Result<()> {
    let mut hooks = vec![("process_fork", "task", "task_newtask")];
    if offsets.exit_group_dead.is_some() {
        hooks.push(("process_exit", "sched", "sched_process_exit"));
    }
    for (program, category, name) in hooks {
        let hook: &mut TracePoint = crate::bpf::program_mut(ebpf, program)?;
        hook.load().map_err(|source| Error::Attach {
            what: format!("loading {program}"),
            source,
        })?;
        hook.attach(category, name).map_err(|source| Error::Attach {
            what: format!("{program} to {category}/{name}"),
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::field_offset;

    const NEWTASK: &str = "name: task_newtask
ID: 205
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:pid_t pid;\toffset:8;\tsize:4;\tsigned:1;
\tfield:char comm[16];\toffset:12;\tsize:16;\tsigned:0;
\tfield:u64 clone_flags;\toffset:32;\tsize:8;\tsigned:0;
";

    #[test]
    fn offsets_of_named_fields() {
        assert_eq!(field_offset(NEWTASK, "pid"), Some(8));
        assert_eq!(field_offset(NEWTASK, "comm"), Some(12));
        assert_eq!(field_offset(NEWTASK, "clone_flags"), Some(32));
        assert_eq!(field_offset(NEWTASK, "common_pid"), Some(4));
        assert_eq!(field_offset(NEWTASK, "group_dead"), None);
        assert_eq!(field_offset(NEWTASK, "flags"), None);
    }
}
