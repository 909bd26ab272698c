//! Off-CPU waits: what a thread waited for while off CPU, as a name: the system call it slept in (x86-64
//! numbers), or its scheduler state where it slept outside one. Shown as the leaf frame of
//! offcpu.folded (`[futex]`, `[read]`, `[runnable]`) and in the summary.
use xtrace_common::offcpu::{state, NO_SYSCALL};

/// The category of the off-CPU waits' slices and wake-ups on the timeline. They are no spans:
/// the trace's readers (`report`, the span flamegraph) leave them out, and its span count does
/// not count them.
pub const TIMELINE_CATEGORY: &str = "off_cpu";
/// The name of a thread's child track that holds them in a Perfetto trace.
pub const TIMELINE_TRACK: &str = "off-CPU";

/// The kind of one off-CPU interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Wait {
    /// A `xtrace_common::offcpu::state` value.
    pub state: u32,
    /// The system call, or `NO_SYSCALL`.
    pub syscall: i32,
}

impl Wait {
    /// What it is called: `runnable` for a thread preempted or waiting for a CPU; the system
    /// call's name for a sleep in one, with `, uninterruptible` for a `D` sleep (disk and other
    /// I/O); `sleep` or `uninterruptible` outside a system call (a page fault's I/O, a kernel
    /// thread).
    pub fn name(&self) -> String {
        let call = match self.syscall {
            NO_SYSCALL => None,
            nr => Some(syscall_name(nr).map_or_else(|| format!("syscall {nr}"), str::to_string)),
        };
        match (self.state, call) {
            (state::RUNNABLE, _) => "runnable".into(),
            (state::UNINTERRUPTIBLE, Some(call)) => format!("{call}, uninterruptible"),
            (state::UNINTERRUPTIBLE, None) => "uninterruptible".into(),
            (_, Some(call)) => call,
            (_, None) => "sleep".into(),
        }
    }

    /// The scheduler state's name, as the summary lists time by it.
    pub fn state_name(&self) -> &'static str {
        match self.state {
            state::RUNNABLE => "runnable",
            state::UNINTERRUPTIBLE => "uninterruptible",
            _ => "sleeping",
        }
    }
}

/// x86-64 system calls a thread commonly sleeps in, by number.
const SYSCALLS: &[(i32, &str)] = &[
    (0, "read"),
    (1, "write"),
    (2, "open"),
    (3, "close"),
    (7, "poll"),
    (9, "mmap"),
    (10, "mprotect"),
    (11, "munmap"),
    (16, "ioctl"),
    (17, "pread64"),
    (18, "pwrite64"),
    (19, "readv"),
    (20, "writev"),
    (23, "select"),
    (24, "sched_yield"),
    (34, "pause"),
    (35, "nanosleep"),
    (40, "sendfile"),
    (42, "connect"),
    (43, "accept"),
    (44, "sendto"),
    (45, "recvfrom"),
    (46, "sendmsg"),
    (47, "recvmsg"),
    (56, "clone"),
    (57, "fork"),
    (59, "execve"),
    (61, "wait4"),
    (62, "kill"),
    (74, "fsync"),
    (75, "fdatasync"),
    (82, "rename"),
    (87, "unlink"),
    (101, "ptrace"),
    (128, "rt_sigtimedwait"),
    (130, "rt_sigsuspend"),
    (162, "sync"),
    (202, "futex"),
    (217, "getdents64"),
    (230, "clock_nanosleep"),
    (232, "epoll_wait"),
    (247, "waitid"),
    (257, "openat"),
    (270, "pselect6"),
    (271, "ppoll"),
    (277, "sync_file_range"),
    (281, "epoll_pwait"),
    (288, "accept4"),
    (295, "preadv"),
    (296, "pwritev"),
    (299, "recvmmsg"),
    (306, "syncfs"),
    (307, "sendmmsg"),
    (426, "io_uring_enter"),
    (435, "clone3"),
    (441, "epoll_pwait2"),
    (449, "futex_waitv"),
];

/// The name of x86-64 system call `nr`, where it is one threads commonly sleep in.
pub fn syscall_name(nr: i32) -> Option<&'static str> {
    SYSCALLS
        .binary_search_by_key(&nr, |(n, _)| *n)
        .ok()
        .map(|i| SYSCALLS[i].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_named_by_call_and_state() {
        assert!(
            SYSCALLS.windows(2).all(|w| w[0].0 < w[1].0),
            "sorted, for the search"
        );
        let wait = |state, syscall| Wait { state, syscall }.name();
        assert_eq!(wait(state::SLEEPING, 230), "clock_nanosleep");
        assert_eq!(wait(state::SLEEPING, 202), "futex");
        assert_eq!(wait(state::UNINTERRUPTIBLE, 74), "fsync, uninterruptible");
        assert_eq!(wait(state::RUNNABLE, 202), "runnable");
        assert_eq!(wait(state::SLEEPING, NO_SYSCALL), "sleep");
        assert_eq!(wait(state::UNINTERRUPTIBLE, NO_SYSCALL), "uninterruptible");
        assert_eq!(wait(state::SLEEPING, 400), "syscall 400");
    }
}
