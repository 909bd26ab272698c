//! Where the kernel programs find what they read in the kernel's own structures on this kernel,
//! from its BTF: for following the processes sampled ones start ([`Offsets`], read by
//! `probes::follow`) and for samples taken in a uprobe's single-step ([`UprobeTask`]).

/// What the programs that follow child processes read on this kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offsets {
    /// Where `pid` lies in `struct task_struct`: task_newtask passes the new task.
    pub task_pid: u32,
    /// Whether sched_process_exit passes `group_dead` (Linux 6.16+); without it a followed process
    /// stays in the table after it exits.
    pub exit_group_dead: bool,
    /// When xtrace runs in a PID namespace of its own, where a new task's pid there is found:
    /// `task_struct.thread_pid`, `pid.level`, `pid.numbers` and the size of `struct upid` (all 0
    /// in the initial namespace).
    pub task_thread_pid: u32,
    pub pid_level: u32,
    pub pid_numbers: u32,
    pub upid_size: u32,
}

/// Where a task's uprobe state lies on this kernel (its BTF): `task_struct.utask`, and in `struct
/// uprobe_task` its `state`, `vaddr` (the probed instruction's address) and `xol_vaddr` (the
/// out-of-line slot it runs a copy of). A sample taken while the kernel single-steps a probed
/// instruction's copy finds the thread's instruction pointer in the `[uprobes]` page, where no
/// unwind information is: the sampler puts back the probed address. All 0 when the BTF does not
/// say (the stacks then stop at `[uprobes]`, as before).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UprobeTask {
    pub task_utask: u32,
    pub state: u32,
    pub vaddr: u32,
    pub xol_vaddr: u32,
}

impl UprobeTask {
    /// The offsets on this kernel, or all 0.
    pub fn read() -> UprobeTask {
        let Ok(btf) = super::btf::KernelBtf::shared() else {
            return UprobeTask::default();
        };
        let offsets = (|| {
            Some(UprobeTask {
                task_utask: btf.member_offset("task_struct", "utask")?,
                state: btf.member_offset("uprobe_task", "state")?,
                vaddr: btf.member_offset("uprobe_task", "vaddr")?,
                xol_vaddr: btf.member_offset("uprobe_task", "xol_vaddr")?,
            })
        })();
        offsets.unwrap_or_default()
    }
}
