//! Running the xtrace binary: spawn it in its own process group, drain stdout and stderr in
//! threads (so it never blocks on a full pipe), wait for the `xtrace: attached ` line, signal it,
//! and wait for it to exit, all bounded by [`SAFETY_TIMEOUT`]. On drop a still-running xtrace and
//! everything in its process group (a launched command) is killed.

use std::{
    ffi::{OsStr, OsString},
    io::{BufRead, BufReader, Read},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        mpsc::{self, Receiver, RecvTimeoutError},
        Arc, Mutex,
    },
    thread,
    time::{Duration, Instant},
};

pub use crate::namespaces::{as_nobody, namespace_pid, namespace_pids, nsenter_flags, only_child};
use crate::{fixtures::wait_child, xtrace_bin, SAFETY_TIMEOUT};

/// The stderr prefix xtrace prints once every probe is attached.
pub const ATTACHED_PREFIX: &str = "xtrace: attached ";

/// The stderr prefix of the line that names the helper removing uprobes in the background.
pub const BACKGROUND_PREFIX: &str = "xtrace: removing ";

/// A running xtrace process.
pub struct Xtrace {
    child: Child,
    stderr_lines: Receiver<String>,
    stderr_all: Arc<Mutex<Vec<String>>>,
    stdout: Receiver<String>,
    args: String,
}

/// How an xtrace run ended.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: Vec<String>,
    /// Whether processes of xtrace's process group (a launched command, its children) were still
    /// alive 1 s after xtrace exited; they are killed before `wait` returns.
    pub left_processes: bool,
}

/// The environment that makes a debug build of xtrace panic once the first events are read
/// (`XTRACE_TEST_PANIC`), with its report on one line.
pub const PANIC_ENV: [(&str, &str); 2] = [("XTRACE_TEST_PANIC", "1"), ("RUST_BACKTRACE", "0")];

impl Finished {
    /// Asserts xtrace was killed by `signal`.
    pub fn assert_killed_by(&self, signal: i32) {
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&self.status),
            Some(signal),
            "stderr: {:?}",
            self.stderr
        );
    }

    /// Asserts xtrace ended by a panic (exit code 101).
    pub fn assert_panicked(&self) {
        assert_eq!(self.status.code(), Some(101), "stderr: {:?}", self.stderr);
    }

    /// The pid of the helper xtrace left removing perf-event uprobes in the background, from its
    /// `xtrace: removing N uprobes in the background (pid P)` line; None when it left none.
    pub fn background_helper(&self) -> Option<u32> {
        self.stderr.iter().find_map(|line| {
            let rest = line.strip_prefix(BACKGROUND_PREFIX)?;
            let pid = rest.split_once("(pid ")?.1.strip_suffix(')')?;
            Some(pid.parse().expect("the helper's pid"))
        })
    }

    /// Waits, for up to `timeout`, until the helper of [`Self::background_helper`] (if any) has
    /// ended: its uprobes are then out of the traced processes.
    pub fn wait_background_removal(&self, timeout: Duration) {
        let Some(pid) = self.background_helper() else {
            return;
        };
        let deadline = Instant::now() + timeout;
        // Gone, or a zombie that an init which reaps slowly keeps.
        while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| stat_fields(&s)[0] != "Z") {
            assert!(
                Instant::now() < deadline,
                "the background helper {pid} still runs {timeout:?} after xtrace exited"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asserts exit code 0, showing stderr otherwise.
    pub fn assert_success(&self) {
        assert_eq!(
            self.status.code(),
            Some(0),
            "xtrace did not exit 0 ({}); stderr:\n{}",
            self.status,
            self.stderr.join("\n")
        );
    }
}

impl Xtrace {
    /// Starts `xtrace -p PID -u work FLAGS... -o OUT`: the usual recording of a running `spans`
    /// fixture.
    pub fn record_work(pid: u32, flags: Vec<OsString>, out: impl AsRef<std::path::Path>) -> Xtrace {
        let mut args = crate::args!["-p", pid.to_string(), "-u", "work"];
        args.extend(flags);
        args.extend(crate::args!["-o", out.as_ref()]);
        Xtrace::spawn(args)
    }

    /// Starts xtrace with `args` (stdin null; environment inherited except `RUST_LOG`, so that
    /// stderr holds only what the CLI prints).
    pub fn spawn<I, S>(args: I) -> Xtrace
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::spawn_command(Command::new(xtrace_bin()), args)
    }

    /// Like [`Xtrace::spawn`] but through `setpriv` as uid/gid 65534 with no groups (no capabilities).
    pub fn spawn_unprivileged<I, S>(args: I) -> Xtrace
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::spawn_with_capabilities(&[], args)
    }

    /// Like [`Xtrace::spawn`] but as root without CAP_SYS_PTRACE (dropped from the bounding set,
    /// as a container drops it).
    pub fn spawn_without_ptrace<I, S>(args: I) -> Xtrace
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut setpriv = Command::new("setpriv");
        setpriv
            .args(["--bounding-set=-sys_ptrace", "--"])
            .arg(xtrace_bin());
        Self::spawn_command(setpriv, args)
    }

    /// Like [`Xtrace::spawn_unprivileged`], keeping capabilities `caps` (setpriv names: `bpf`,
    /// `perfmon`) as ambient ones, so they stay effective in xtrace as user 65534.
    pub fn spawn_with_capabilities<I, S>(caps: &[&str], args: I) -> Xtrace
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut setpriv = as_nobody(caps);
        setpriv.arg(xtrace_bin());
        Self::spawn_command(setpriv, args)
    }

    /// Like [`Xtrace::spawn`] but as the first process of new PID and mount namespaces with their
    /// own /proc (`unshare --pid --fork --mount-proc`), as in a container. [`Xtrace::pid`] is then
    /// `unshare`'s; xtrace's own (host) pid is its [`only_child`].
    pub fn spawn_in_pid_namespace<I, S>(args: I) -> Xtrace
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::spawn_unshared(&["--pid", "--fork", "--mount-proc"], args)
    }

    /// Like [`Xtrace::spawn_in_pid_namespace`] but keeping the host's /proc (`unshare --pid
    /// --fork`), whose pids are not xtrace's.
    pub fn spawn_in_pid_namespace_with_host_proc<I, S>(args: I) -> Xtrace
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::spawn_unshared(&["--pid", "--fork"], args)
    }

    /// Like [`Xtrace::spawn`] but in the PID namespace of process `pid_of` and the mount namespace
    /// of process `mount_of` (`nsenter`); [`Xtrace::pid`] is `nsenter`'s.
    pub fn spawn_in_namespaces_of<I, S>(pid_of: u32, mount_of: u32, args: I) -> Xtrace
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut nsenter = Command::new("nsenter");
        nsenter.args(nsenter_flags(pid_of, mount_of));
        nsenter.arg("--").arg(xtrace_bin());
        Self::spawn_command(nsenter, args)
    }

    fn spawn_unshared<I, S>(flags: &[&str], args: I) -> Xtrace
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut unshare = Command::new("unshare");
        unshare.args(flags).arg("--").arg(xtrace_bin());
        Self::spawn_command(unshare, args)
    }

    /// Like [`Xtrace::spawn`] but with bpf() failing with ENOSYS, as in a kernel without BPF
    /// ([`crate::seccomp::hide_bpf`]).
    pub fn spawn_without_bpf<I, S>(args: I) -> Xtrace
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(xtrace_bin());
        crate::seccomp::hide_bpf(&mut command);
        Self::spawn_command(command, args)
    }

    /// Like [`Xtrace::spawn`] with the trace format xtrace itself defaults to: without the
    /// [`crate::TRACE_FORMAT_ENV`] the tests set to json.
    pub fn spawn_default_format<I, S>(args: I) -> Xtrace
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(xtrace_bin());
        command.env_remove(crate::TRACE_FORMAT_ENV);
        Self::spawn_command(command, args)
    }

    /// Like [`Xtrace::spawn`] with extra environment variables.
    pub fn spawn_with_env<I, S>(args: I, env: &[(&str, &str)]) -> Xtrace
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(xtrace_bin());
        command.envs(env.iter().copied());
        Self::spawn_command(command, args)
    }

    fn spawn_command<I, S>(mut command: Command, args: I) -> Xtrace
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        use std::os::unix::process::CommandExt;

        command.args(args);
        let shown = format!("{command:?}");
        let mut child = command
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {shown}: {e}"));

        let mut stdout = child.stdout.take().expect("stdout is piped");
        let (stdout_tx, stdout_rx) = mpsc::channel();
        thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            let _ = stdout_tx.send(text);
        });
        let stderr = child.stderr.take().expect("stderr is piped");
        let stderr_all = Arc::new(Mutex::new(Vec::new()));
        let (tx, stderr_lines) = mpsc::channel();
        let all = Arc::clone(&stderr_all);
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                all.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        Xtrace {
            child,
            stderr_lines,
            stderr_all,
            stdout: stdout_rx,
            args: shown,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the `xtrace: attached ` line on stderr and returns it. Panics (with stderr) if
    /// xtrace exits first or the safety timeout passes.
    pub fn wait_attached(&mut self) -> String {
        self.wait_stderr(ATTACHED_PREFIX)
    }

    /// Waits for the next stderr line that starts with `prefix` and returns it.
    pub fn wait_stderr(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + SAFETY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!(
                    "`{}` printed no `{prefix}` line within {SAFETY_TIMEOUT:?}; stderr:\n{}",
                    self.args,
                    self.stderr_text()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = wait_child(&mut self.child, SAFETY_TIMEOUT);
                    panic!(
                        "`{}` closed stderr before printing `{prefix}` (status {status:?}); stderr:\n{}",
                        self.args,
                        self.stderr_text()
                    )
                }
            }
        }
    }

    /// Sends `signal` (e.g. `libc::SIGINT`) to the xtrace process itself.
    pub fn signal(&self, signal: i32) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits pid_t");
        // SAFETY: kill has no memory-safety preconditions; the child is not reaped yet, so the
        // pid still names it.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
    }

    /// Waits (with the safety timeout) for xtrace to exit, without collecting its output: for a
    /// test that times how long it takes. [`Self::wait`] collects it afterwards.
    pub fn wait_exit(&mut self) -> ExitStatus {
        wait_child(&mut self.child, SAFETY_TIMEOUT)
            .unwrap_or_else(|| panic!("`{}` did not exit within {SAFETY_TIMEOUT:?}", self.args))
    }

    /// Waits (with the safety timeout) for xtrace to exit and collects its output.
    pub fn wait(mut self) -> Finished {
        let Some(status) = wait_child(&mut self.child, SAFETY_TIMEOUT) else {
            self.kill_group();
            panic!(
                "`{}` did not exit within {SAFETY_TIMEOUT:?}; stderr:\n{}",
                self.args,
                self.stderr_text()
            );
        };
        // The reader threads end at EOF. A launched command that outlives xtrace may keep the
        // pipes open, so wait for EOF only briefly.
        let stdout = self
            .stdout
            .recv_timeout(Duration::from_secs(2))
            .unwrap_or_else(|_| "(xtrace's stdout was still open after it exited)".to_owned());
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            match self.stderr_lines.recv_timeout(deadline - Instant::now()) {
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let left_processes = self.group_alive_after(Duration::from_secs(1));
        self.kill_group();
        Finished {
            status,
            stdout,
            stderr: self.stderr_all.lock().unwrap().clone(),
            left_processes,
        }
    }

    fn stderr_text(&self) -> String {
        self.stderr_all.lock().unwrap().join("\n")
    }

    /// Polls until no process of xtrace's process group runs (zombies, which an init that reaps
    /// slowly may keep for seconds, do not count) or `grace` passes; true if one still runs.
    fn group_alive_after(&self, grace: Duration) -> bool {
        let pgid = self.child.id();
        let deadline = Instant::now() + grace;
        loop {
            if !group_runs(pgid) {
                return false;
            }
            if Instant::now() >= deadline {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill_group(&mut self) {
        let pgid = libc::pid_t::try_from(self.child.id()).expect("pid fits pid_t");
        // SAFETY: kill has no memory-safety preconditions. The group was created by
        // `process_group(0)` at spawn and lives while any member does; ESRCH is fine.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Whether a process of process group `pgid` runs (exists and is not a zombie), from /proc/*/stat.
fn group_runs(pgid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .any(|stat| {
            let fields = stat_fields(&stat);
            fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
        })
}

/// The fields of a /proc/PID/stat line after the command name in parentheses (which may hold
/// spaces): state, ppid, pgrp, ...
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')')
        .map_or_else(Vec::new, |(_, rest)| rest.split_whitespace().collect())
}

/// The state letter of process `pid` (R, S, T, ...), from /proc/PID/stat.
pub fn process_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("reading /proc/PID/stat");
    let fields = stat_fields(&stat);
    let state = fields.first().expect("a state after the command name");
    state.chars().next().expect("a state letter")
}

impl Drop for Xtrace {
    /// Kills xtrace and whatever is left in its process group (a launched command).
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// The common `--pid` scenario: with `fixture` waiting after its `ready` line, run
/// `xtrace -p PID -u PROBE... -o OUT`, wait for the attached line, release the fixture with `go`,
/// and expect the fixture to exit 0 and xtrace to stop on its own with exit 0 and no program left.
pub fn trace_fixture_to_exit(
    fixture: &mut crate::fixtures::Fixture,
    uprobes: &[&str],
    out: &std::path::Path,
) -> Finished {
    let mut flags = Vec::new();
    for probe in uprobes {
        flags.extend(crate::args!["-u", *probe]);
    }
    trace_fixture_with(fixture, flags, &[], out)
}

/// [`trace_fixture_to_exit`] with any flags (`xtrace -p PID FLAGS... -o OUT`) and extra
/// environment variables for xtrace.
pub fn trace_fixture_with(
    fixture: &mut crate::fixtures::Fixture,
    flags: Vec<OsString>,
    env: &[(&str, &str)],
    out: &std::path::Path,
) -> Finished {
    let before = crate::bpf::Attachments::snapshot();
    let mut args = crate::args!["-p", fixture.pid().to_string()];
    args.extend(flags);
    args.extend(crate::args!["-o", out]);
    let mut xtrace = Xtrace::spawn_with_env(&args, env);
    xtrace.wait_attached();
    fixture.go();
    let status = fixture.wait();
    assert!(status.success(), "fixture failed: {status}");
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    finished
}

/// Starts fixture `program` with `args`, waits for its ready line, traces it to its exit with
/// `probes` ([`trace_fixture_to_exit`]) into a fresh temporary directory, and reads the outputs.
pub fn trace_new_fixture(
    program: &std::path::Path,
    args: &[&str],
    probes: &[&str],
    label: &str,
) -> (crate::output::Outputs, Finished) {
    let mut fixture = crate::fixtures::Fixture::spawn(program, args);
    fixture.wait_ready();
    let tmp = crate::TempDir::new(label);
    let out = tmp.join("out");
    let finished = trace_fixture_to_exit(&mut fixture, probes, &out);
    (crate::output::Outputs::read(&out), finished)
}

/// Waits for `xtrace` (started after `before` was taken) and checks the user-error contract: exit
/// code 2, exactly one stderr line starting `xtrace: error: `, no xtrace BPF program left.
/// Returns the error line.
pub fn expect_user_error(before: &crate::bpf::Attachments, xtrace: Xtrace) -> String {
    let Finished { status, stderr, .. } = xtrace.wait();
    before.assert_none_left();
    assert_eq!(
        status.code(),
        Some(2),
        "exit status {status}; stderr:\n{}",
        stderr.join("\n")
    );
    assert_eq!(
        stderr.len(),
        1,
        "exactly one stderr line, got:\n{}",
        stderr.join("\n")
    );
    let line = stderr[0].clone();
    assert!(line.starts_with("xtrace: error: "), "error line: {line:?}");
    line
}

/// Runs xtrace with `args` and checks the user-error contract ([`expect_user_error`]).
pub fn run_error(args: Vec<OsString>) -> String {
    run_error_with_env(args, &[])
}

/// [`run_error`] with extra environment variables.
pub fn run_error_with_env(args: Vec<OsString>, env: &[(&str, &str)]) -> String {
    let before = crate::bpf::Attachments::snapshot();
    expect_user_error(&before, Xtrace::spawn_with_env(args, env))
}

/// Runs `xtrace -p PID FLAGS...` on a spinning fixture and checks the user-error contract
/// ([`run_error`]); returns the error line.
pub fn error_on_spinner(flags: Vec<OsString>) -> String {
    let fixture = crate::fixtures::Fixture::spin();
    let mut args = crate::args!["-p", fixture.pid().to_string()];
    args.extend(flags);
    run_error(args)
}

/// The rows of `xtrace list symbols ARGS...` (which must succeed), split into their columns:
/// OFFSET, ADDRESS, SIZE, PROBE, NAME.
pub fn listed_symbols(args: Vec<OsString>) -> Vec<Vec<String>> {
    let mut all = vec![OsString::from("list"), "symbols".into()];
    all.extend(args);
    let listed = Xtrace::spawn(all).wait();
    listed.assert_success();
    listed
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// The file offset `xtrace list symbols PROGRAM SYMBOL` gives `symbol` (its only row).
pub fn symbol_offset(program: &std::path::Path, symbol: &str) -> u64 {
    let listed = Xtrace::spawn([
        OsStr::new("list"),
        OsStr::new("symbols"),
        program.as_os_str(),
        OsStr::new(symbol),
    ])
    .wait();
    listed.assert_success();
    let row = listed.stdout.lines().nth(1).expect("one row under the header");
    let offset = row.split_whitespace().next().expect("OFFSET column");
    u64::from_str_radix(offset.trim_start_matches("0x"), 16).expect("hex offset")
}
