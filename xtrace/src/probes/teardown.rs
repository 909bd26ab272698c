//! The uprobes left in the kernel after a recording on perf-event uprobes (kernels before 6.6,
//! or `XTRACE_UPROBE_ATTACH=perf_event`), removed by a background process so that xtrace can exit.
//!
//! Removing a perf-event uprobe waits for the kernel's grace periods, under a lock that makes
//! every removal wait for the one before: ~80 ms each on Linux 6.1 and 6.18, 43 s for 300
//! functions (600 uprobes). At the stop their programs were told to return at once
//! (`bpf::stop_programs`), so the uprobes left do no work for xtrace; once the outputs are
//! written, [`Teardown::hand_off`] forks a helper that keeps only the uprobes' events and links,
//! closes them one by one and exits, and xtrace returns. If the helper is killed, the kernel
//! closes them as it exits.
//!
//! Whoever closes a uprobe's descriptors last pays for its removal. The helper therefore starts
//! closing only once xtrace has closed its own copies (it waits for the end of a pipe xtrace
//! holds): otherwise a helper scheduled first closes copies that cost nothing while xtrace still
//! holds its own, and xtrace, closing the last ones, pays for every removal before it can exit.
use std::{
    io::{self, IsTerminal},
    os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd},
    time::Duration,
};

/// How often the helper says how far it got, on a terminal.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// The helper's name (`ps`, /proc/PID/comm).
const HELPER_NAME: &[u8] = b"xtrace-detach\0";

/// Perf-event uprobes still in the traced processes, their programs stopped: each one's event
/// and link, in the order they are closed.
#[derive(Debug, Default)]
pub struct Teardown {
    /// At USDT sites and function entries: closed first.
    entries: Vec<OwnedFd>,
    /// At returns and exit instructions.
    exits: Vec<OwnedFd>,
}

impl Teardown {
    pub(super) fn new(entries: Vec<OwnedFd>, exits: Vec<OwnedFd>) -> Self {
        Teardown { entries, exits }
    }

    /// Uprobes left to remove (each an event and a link).
    pub fn uprobes(&self) -> usize {
        (self.entries.len() + self.exits.len()) / 2
    }

    /// Forks the helper that removes the uprobes, and closes this process's descriptors of them
    /// (at once: the helper holds the events); returns the helper's pid. The helper starts a
    /// session of its own (a Ctrl-C or the terminal closing does not reach it), keeps only the
    /// uprobes' descriptors, and writes its progress to stderr every [`PROGRESS_EVERY`] when
    /// `progress` and stderr is a terminal; otherwise stderr is closed in it, so that nothing
    /// waits for it to end (a pipe reader waiting for end of file). On an error nothing changes:
    /// dropping `self` removes the uprobes here.
    pub fn hand_off(&mut self, progress: bool) -> io::Result<u32> {
        let forked = self.fork_helper(progress)?;
        Ok(self.release(forked))
    }

    /// Forks the helper, which waits for [`Teardown::release`] before it closes anything.
    fn fork_helper(&self, progress: bool) -> io::Result<Forked> {
        let order: Vec<RawFd> = self
            .entries
            .iter()
            .chain(&self.exits)
            .map(AsRawFd::as_raw_fd)
            .collect();
        let (wait, go) = go_pipe()?;
        let mut keep = order.clone();
        keep.push(wait.as_raw_fd());
        keep.sort_unstable();
        if keep.first().is_some_and(|fd| *fd <= 2) {
            return Err(io::Error::other(
                "a uprobe's event has a standard stream's descriptor",
            ));
        }
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        let helper = Helper {
            order: &order,
            keep: &keep,
            null: null.as_raw_fd(),
            wait: wait.as_raw_fd(),
            progress: progress && io::stderr().is_terminal(),
        };
        // SAFETY: the child runs only `Helper::run`, which makes system calls that are safe after
        // a fork (no allocation, no lock) and ends with `_exit`.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => helper.run(),
            pid => Ok(Forked { pid: pid as u32, go }),
        }
    }

    /// Closes this process's copies of the descriptors, then lets the helper start: every copy
    /// closed here costs nothing while the helper holds its own. Returns the helper's pid.
    fn release(&mut self, forked: Forked) -> u32 {
        let all = std::mem::take(&mut self.entries)
            .into_iter()
            .chain(std::mem::take(&mut self.exits));
        close_in_runs(all.map(IntoRawFd::into_raw_fd).collect());
        drop(forked.go);
        forked.pid
    }
}

/// Closes `fds` (owned here, none used afterwards) with one close_range(2) per run of
/// consecutive descriptors: the uprobes' events and links were opened one after another, so a
/// few system calls close thousands (each a system call of its own under software emulation
/// costs ~25 µs).
fn close_in_runs(mut fds: Vec<RawFd>) {
    fds.sort_unstable();
    let mut rest = fds.as_slice();
    while let Some(&first) = rest.first() {
        let run = rest
            .iter()
            .zip(first..)
            .take_while(|(fd, expected)| **fd == *expected)
            .count();
        close_range(first as u32, (first + run as RawFd - 1) as u32);
        rest = &rest[run..];
    }
}

/// A helper forked and waiting: its pid, and the pipe's write end whose closing lets it start.
struct Forked {
    pid: u32,
    go: OwnedFd,
}

/// A pipe (read end, write end), both close-on-exec, the read end above the standard streams
/// (it is kept in the helper, whose streams are replaced).
fn go_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are new and owned here only.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // `try_clone` duplicates to the lowest descriptor from 3 up.
    let read = if read.as_raw_fd() <= 2 {
        read.try_clone()?
    } else {
        read
    };
    Ok((read, write))
}

impl Drop for Teardown {
    /// Removes what was not handed off, here: entries first.
    fn drop(&mut self) {
        self.entries.clear();
        self.exits.clear();
    }
}

/// What the forked helper does, prepared before the fork: it may not allocate.
struct Helper<'a> {
    /// The uprobes' events and links, in the order they are closed.
    order: &'a [RawFd],
    /// The same, sorted: every other descriptor is closed.
    keep: &'a [RawFd],
    /// /dev/null, put in place of the standard streams.
    null: RawFd,
    /// The read end of the pipe whose end of file says xtrace closed its copies.
    wait: RawFd,
    progress: bool,
}

impl Helper<'_> {
    fn run(&self) -> ! {
        // SAFETY: system calls on plain values and descriptors this process holds; `HELPER_NAME`
        // ends with a NUL.
        unsafe {
            libc::setsid();
            libc::prctl(libc::PR_SET_NAME, HELPER_NAME.as_ptr());
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
                libc::signal(signal, libc::SIG_DFL);
            }
            libc::dup2(self.null, 0);
            libc::dup2(self.null, 1);
            if !self.progress {
                libc::dup2(self.null, 2);
            }
        }
        close_all_but(self.keep);
        wait_for_end(self.wait);
        let started = now_ns();
        let mut said = started;
        // Two descriptors a uprobe: its event, then its link.
        let total = self.order.len() as u64 / 2;
        for (index, fd) in self.order.iter().enumerate() {
            // SAFETY: a descriptor this process holds and closes once.
            unsafe { libc::close(*fd) };
            let now = now_ns();
            if self.progress && now.saturating_sub(said) >= PROGRESS_EVERY.as_nanos() as u64 {
                said = now;
                let descriptors_closed = index as u64 + 1;
                say(&progress_line(descriptors_closed / 2, total));
            }
        }
        if self.progress {
            say(&done_line(total, now_ns().saturating_sub(started)));
        }
        // SAFETY: ends the helper without running the parent's exit handlers or destructors.
        unsafe { libc::_exit(0) }
    }
}

/// Waits until the pipe's read end `fd` reads end of file (the parent closed its copies and the
/// write end, or it died), and closes it.
fn wait_for_end(fd: RawFd) {
    let mut byte = 0u8;
    loop {
        // SAFETY: reads at most one byte into a live local.
        let n = unsafe { libc::read(fd, (&raw mut byte).cast(), 1) };
        if n >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    // SAFETY: a descriptor this process holds and closes once.
    unsafe { libc::close(fd) };
}

/// Closes every descriptor from 3 up that is not in `keep` (sorted, each above 2).
fn close_all_but(keep: &[RawFd]) {
    let mut from = 3u32;
    for fd in keep.iter().map(|fd| *fd as u32) {
        if fd > from {
            close_range(from, fd - 1);
        }
        from = fd + 1;
    }
    close_range(from, u32::MAX);
}

/// close_range(2) (Linux 5.9), or one close per descriptor below the limit where it fails.
fn close_range(first: u32, last: u32) {
    // SAFETY: closing descriptors this process holds; none is used afterwards.
    let done = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) } == 0;
    if !done {
        // SAFETY: as above.
        let limit = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) }.clamp(0, 1 << 20) as u32;
        for fd in first..=last.min(limit) {
            // SAFETY: as above.
            unsafe { libc::close(fd as i32) };
        }
    }
}

/// CLOCK_MONOTONIC in ns.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the call writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Writes `line` to stderr; an error (the terminal gone) is ignored.
fn say(line: &Line) {
    // SAFETY: writes bytes of a live buffer.
    unsafe { libc::write(2, line.bytes().as_ptr().cast(), line.bytes().len()) };
}

/// "xtrace: removing uprobes in the background: 120 of 600 done".
fn progress_line(closed: u64, total: u64) -> Line {
    let mut line = Line::default();
    line.push("xtrace: removing uprobes in the background: ");
    line.number(closed);
    line.push(" of ");
    line.number(total);
    line.push(" done\n");
    line
}

/// "xtrace: removed 600 uprobes in the background in 43.2 s".
fn done_line(total: u64, ns: u64) -> Line {
    let mut line = Line::default();
    line.push("xtrace: removed ");
    line.number(total);
    line.push(" uprobes in the background in ");
    line.number(ns / 1_000_000_000);
    line.push(".");
    line.number(ns / 100_000_000 % 10);
    line.push(" s\n");
    line
}

/// A line of text built without allocating (the helper may not allocate); longer text is cut.
struct Line {
    buf: [u8; 128],
    len: usize,
}

impl Default for Line {
    fn default() -> Self {
        Line {
            buf: [0; 128],
            len: 0,
        }
    }
}

impl Line {
    fn push(&mut self, text: &str) {
        text.bytes().for_each(|b| self.push_byte(b));
    }

    fn push_byte(&mut self, b: u8) {
        if self.len < self.buf.len() {
            self.buf[self.len] = b;
            self.len += 1;
        }
    }

    fn number(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for d in &digits[at..] {
            self.push_byte(*d);
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn lines_say_how_far_the_helper_got() {
        assert_eq!(
            progress_line(120, 600).bytes(),
            b"xtrace: removing uprobes in the background: 120 of 600 done\n"
        );
        assert_eq!(
            done_line(600, 43_250_000_000).bytes(),
            b"xtrace: removed 600 uprobes in the background in 43.2 s\n"
        );
        assert_eq!(
            done_line(0, 0).bytes(),
            b"xtrace: removed 0 uprobes in the background in 0.0 s\n"
        );
        let mut long = Line::default();
        long.push(&"x".repeat(200));
        long.number(u64::MAX);
        assert_eq!(long.bytes().len(), 128);
    }

    /// Closes exactly the descriptors it is given, in runs or alone, whatever their order. The
    /// write ends of pipes, moved to consecutive descriptors far above what the tests running
    /// beside this one use, stand in: a read end sees end of file once its write end is closed,
    /// whatever number the descriptor is given next.
    #[test]
    fn descriptors_are_closed_in_runs_and_no_other() {
        let pairs: Vec<(std::fs::File, RawFd)> = (0..12)
            .map(|_| {
                let (read, write) = pipe();
                // SAFETY: plain calls on descriptors owned here.
                let moved = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 900) };
                assert!(moved >= 900, "{}", io::Error::last_os_error());
                // SAFETY: as above.
                unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
                (read, moved)
            })
            .collect();
        // Every third one kept: runs of two among the closed.
        let closed: Vec<RawFd> = pairs
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 3 != 1)
            .map(|(_, p)| p.1)
            .rev()
            .collect();
        close_in_runs(closed);
        for (i, (mut read, write)) in pairs.into_iter().enumerate() {
            let got = read.read(&mut [0u8; 1]);
            if i % 3 == 1 {
                assert_eq!(
                    got.unwrap_err().kind(),
                    io::ErrorKind::WouldBlock,
                    "pipe {i} closed"
                );
                // SAFETY: kept above; closed once.
                unsafe { libc::close(write) };
            } else {
                // A helper forked by a test beside this one may hold a copy for a moment.
                let mut poll = libc::pollfd {
                    fd: read.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one pollfd.
                unsafe { libc::poll(&mut poll, 1, 5_000) };
                assert_eq!(read.read(&mut [0u8; 1]).unwrap(), 0, "pipe {i} left open");
            }
        }
        close_in_runs(Vec::new());
    }

    /// A pipe: (read end, write end).
    fn pipe() -> (std::fs::File, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two new descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both are new and owned here.
        unsafe { (std::fs::File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    /// The helper holds what it was handed (the write ends of pipes stand in for events: a
    /// reader sees end of file once every copy is closed), closes them all and exits 0; this
    /// process's copies are closed by the hand-off.
    #[test]
    fn the_helper_closes_every_descriptor_it_was_handed_and_exits() {
        let (mut readers, writers): (Vec<_>, Vec<_>) = (0..6).map(|_| pipe()).unzip();
        let mut writers = writers.into_iter();
        let entries: Vec<OwnedFd> = writers.by_ref().take(4).collect();
        let mut teardown = Teardown::new(entries, writers.collect());
        assert_eq!(teardown.uprobes(), 3);
        let pid = teardown.hand_off(false).expect("forking the helper");
        assert_eq!(teardown.uprobes(), 0);
        for reader in &mut readers {
            let mut rest = Vec::new();
            assert_eq!(
                reader.read_to_end(&mut rest).unwrap(),
                0,
                "end of file, nothing written"
            );
        }
        let mut status = 0;
        // SAFETY: waits for this process's own child.
        assert_eq!(unsafe { libc::waitpid(pid as i32, &mut status, 0) }, pid as i32);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "status {status:#x}"
        );
    }

    /// What /proc/`pid`/fd/`fd` names ("pipe:[1234]"), or None.
    fn fd_target(pid: u32, fd: RawFd) -> Option<String> {
        let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
        Some(link.to_string_lossy().into_owned())
    }

    /// The helper closes nothing before this process has closed its copies (else this process
    /// pays for the removals, closing the last copies): until then it holds every descriptor
    /// it was handed and has not exited; then it closes them all and exits 0.
    #[test]
    fn the_helper_waits_for_this_process_to_close_its_copies_first() {
        let (mut readers, writers): (Vec<_>, Vec<_>) = (0..4).map(|_| pipe()).unzip();
        let own = std::process::id();
        let handed: Vec<String> = writers
            .iter()
            .map(|w| fd_target(own, w.as_raw_fd()).expect("a pipe's write end here"))
            .collect();
        let mut teardown = Teardown::new(writers, Vec::new());
        let forked = teardown.fork_helper(false).expect("forking the helper");
        let pid = forked.pid;
        std::thread::sleep(Duration::from_millis(300));
        let mut status = 0;
        // SAFETY: asks about this process's own child without waiting.
        let waited = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
        assert_eq!(
            waited, 0,
            "the helper ended before this process closed its copies"
        );
        let held: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .expect("the helper's descriptors")
            .filter_map(|entry| {
                let fd = entry.ok()?.file_name().to_str()?.parse().ok()?;
                fd_target(pid, fd)
            })
            .filter(|target| handed.contains(target))
            .collect();
        assert_eq!(
            held.len(),
            4,
            "the helper holds every descriptor handed: {held:?}"
        );
        assert_eq!(teardown.release(forked), pid);
        assert_eq!(teardown.uprobes(), 0);
        for reader in &mut readers {
            let mut rest = Vec::new();
            assert_eq!(reader.read_to_end(&mut rest).unwrap(), 0, "end of file");
        }
        // SAFETY: waits for this process's own child.
        assert_eq!(unsafe { libc::waitpid(pid as i32, &mut status, 0) }, pid as i32);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "status {status:#x}"
        );
    }
}
