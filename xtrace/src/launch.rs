//! Launching a command for `xtrace -- COMMAND`: finding it as a shell would, holding the forked
//! child before its `exec` until the probes are attached, and explaining an `exec` that fails.
use std::{
    io::{Read, Write},
    os::fd::AsRawFd,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::ExitStatus,
};

use crate::{
    error::{Error, Result},
    target::{pidfd_open, Process},
};

/// The directories a command is looked for in without `$PATH`: the C library's `execvp`'s.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Finds `command` the way a shell would: as given if it contains '/', else in `$PATH` (without
/// one, in `/bin:/usr/bin`, as `execvp` does).
pub fn resolve_command(command: &std::ffi::OsStr) -> Result<PathBuf> {
    resolve_in(command, std::env::var_os("PATH"))
}

/// [`resolve_command`] with `path` for `$PATH`.
fn resolve_in(command: &std::ffi::OsStr, path: Option<std::ffi::OsString>) -> Result<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let not_found = || Error::CommandNotFound {
        command: command.to_string_lossy().into_owned(),
    };
    let executable = |m: &std::fs::Metadata| {
        use std::os::unix::fs::PermissionsExt;
        m.is_file() && m.permissions().mode() & 0o111 != 0
    };
    if command.as_bytes().contains(&b'/') {
        let path = PathBuf::from(command);
        let why = match path.metadata() {
            Ok(m) if executable(&m) => return Ok(path),
            Err(e) => e.to_string(),
            Ok(m) if m.is_dir() => "it is a directory".to_string(),
            Ok(m) if !m.is_file() => "it is not a regular file".to_string(),
            Ok(_) => "it is not executable (chmod +x)".to_string(),
        };
        return Err(Error::CommandUnusable {
            command: command.to_string_lossy().into_owned(),
            why,
        });
    }
    let path = path.unwrap_or_else(|| DEFAULT_PATH.into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(command))
        .find(|p| p.metadata().is_ok_and(|m| executable(&m)))
        .ok_or_else(not_found)
}

/// A launched command, stopped before `exec` until `release` is called. Dropping it unreleased
/// makes the child exit without running the command. The command gets SIGTERM if xtrace dies
/// (PR_SET_PDEATHSIG).
/// The name of xtrace's launcher thread, which a launched command keeps until its exec.
pub const LAUNCHER_THREAD: &str = "xtrace-launch";

/// A launched command's file (argv[0] resolved), opened once when resolved: what xtrace reads
/// and attaches to is that file, through its descriptor, even if the path names another by then
/// (a rebuild): probes placed by one file's offsets in another would break its code.
#[derive(Debug)]
pub struct Program {
    pub path: PathBuf,
    file: std::fs::File,
}

impl Program {
    pub fn open(path: &Path) -> Result<Program> {
        let file = std::fs::File::open(path).map_err(|source| Error::Launch {
            command: path.display().to_string(),
            source,
        })?;
        Ok(Program {
            path: path.to_path_buf(),
            file,
        })
    }

    /// The file as a target: reached through xtrace's descriptor, shown by its path.
    pub fn target(&self) -> crate::target::TargetFile {
        crate::target::TargetFile {
            open: PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd())),
            shown: self.path.clone(),
        }
    }

    /// Whether this file was replaced on disk before process `pid` ran it: its path names
    /// another file now, and the process runs another file than this one. (A `#!` script runs its
    /// interpreter, and `env` or a shell may have exec'd another program already: neither is a
    /// replacement while the path still names this file.)
    pub fn replaced_before(&self, pid: u32) -> bool {
        use std::os::unix::fs::MetadataExt;
        let id = |m: std::fs::Metadata| (m.dev(), m.ino());
        let Ok(ours) = self.file.metadata().map(id) else {
            return false;
        };
        let differs = |path: &Path| std::fs::metadata(path).map(id).is_ok_and(|theirs| theirs != ours);
        differs(&self.path) && differs(Path::new(&format!("/proc/{pid}/exe")))
    }
}

pub struct Launch {
    pub process: Process,
    pub argv: Vec<String>,
    /// The file run (argv[0] resolved).
    pub program: Program,
    gate: std::io::PipeWriter,
    spawned: std::sync::mpsc::Receiver<std::io::Result<()>>,
    exited: Option<tokio::sync::oneshot::Receiver<std::io::Result<ExitStatus>>>,
}

impl Launch {
    /// The name the kernel gives the command at its exec: the name of the file run (a `#!`
    /// script's own), cut to 15 bytes.
    pub fn comm(&self) -> String {
        use std::os::unix::ffi::OsStrExt;
        let name = self.program.path.file_name().map_or(&[][..], |n| n.as_bytes());
        String::from_utf8_lossy(&name[..name.len().min(15)]).into_owned()
    }

    /// Forks the child for `argv` (program already resolved to `program`); it waits at the gate.
    /// `env` is added to xtrace's own environment for the command.
    pub fn start(
        image: Program,
        argv: &[std::ffi::OsString],
        env: &[(&str, std::ffi::OsString)],
    ) -> Result<Self> {
        let program = image.path.as_path();
        let command = argv[0].to_string_lossy().into_owned();
        let launch_err = |source| Error::Launch {
            command: command.clone(),
            source,
        };
        let (gate_read, gate) = std::io::pipe().map_err(launch_err)?;
        let (mut pid_read, pid_write) = std::io::pipe().map_err(launch_err)?;
        // The exec the child makes itself, by a raw system call: once the probes are attached it
        // enters no function of the C library (a traced one would count as the command's call:
        // `execvp` and its helpers, or the cancellation bookkeeping after a blocking `read`).
        let exec = RawExec::new(program, argv, env).map_err(launch_err)?;
        let mut cmd = std::process::Command::new(program);
        cmd.arg0(&argv[0]).args(&argv[1..]);
        let (gate_fd, gate_write_fd, pid_fd) =
            (gate_read.as_raw_fd(), gate.as_raw_fd(), pid_write.as_raw_fd());
        let xtrace = std::process::id() as libc::pid_t;
        // SAFETY: before the gate the hook only calls async-signal-safe functions (close, prctl,
        // getppid, getpid, write, _exit), after it only system calls.
        unsafe {
            cmd.pre_exec(move || {
                // Our copy of the gate's write end would keep the read below from ever seeing EOF.
                libc::close(gate_write_fd);
                // The command never outlives xtrace, however xtrace ends (SIGKILL, a panic): it
                // gets SIGTERM when the thread that forked it (the launcher, alive until the
                // command exits) dies. If xtrace died before this line, stop here.
                // Not running the command, the child leaves at once with _exit: returning an error
                // would have it report the error to the parent, which aborts the child (a core
                // file) when xtrace is dead.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 || libc::getppid() != xtrace {
                    libc::_exit(1);
                }
                // Written by a raw system call too: xtrace may attach as soon as it reads it, before
                // a C library wrapper would have returned.
                raw::write_pid(pid_fd, libc::getpid());
                if !raw::wait_gate(gate_fd) {
                    raw::exit(1); // the gate closed unopened: xtrace dropped the launch or died
                }
                // Returns only if the exec failed: std reports the error to spawn().
                Err(std::io::Error::from_raw_os_error(exec.exec()))
            });
        }
        let (spawned_tx, spawned) = std::sync::mpsc::channel();
        let (exited_tx, exited) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name(LAUNCHER_THREAD.into())
            .spawn(move || {
                // The pipe ends stay open in this thread until the child has exec'd or failed.
                let _ends = (gate_read, pid_write);
                match cmd.spawn() {
                    Ok(mut child) => {
                        drop(_ends);
                        let _ = spawned_tx.send(Ok(()));
                        let _ = exited_tx.send(child.wait());
                    }
                    Err(e) => {
                        let _ = spawned_tx.send(Err(e));
                    }
                }
            })
            .map_err(launch_err)?;
        let mut pid = [0u8; 4];
        if pid_read.read_exact(&mut pid).is_err() {
            let error = spawned
                .recv()
                .ok()
                .and_then(|r| r.err())
                .unwrap_or_else(|| std::io::Error::other("fork failed"));
            return Err(launch_err(error));
        }
        let pid = i32::from_ne_bytes(pid) as u32;
        let pidfd = pidfd_open(pid).map_err(launch_err)?;
        Ok(Launch {
            process: Process { pid, pidfd },
            // For the summary and messages: arguments that are not UTF-8 are shown lossily.
            argv: argv.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
            program: image,
            gate,
            spawned,
            exited: Some(exited),
        })
    }

    /// Lets the child exec the command; fails if the exec failed.
    pub fn release(&mut self) -> Result<()> {
        let command = self.argv[0].clone();
        self.gate.write_all(&[1]).map_err(|source| Error::Launch {
            command: command.clone(),
            source,
        })?;
        match self.spawned.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(source)) if source.kind() == std::io::ErrorKind::NotFound => {
                // The file is there (it was resolved): what exec missed is its interpreter.
                let source = match missing_interpreter(&self.program.path) {
                    Some(interpreter) => std::io::Error::new(
                        source.kind(),
                        format!("its interpreter {interpreter} does not exist ({source})"),
                    ),
                    None => source,
                };
                Err(Error::Launch { command, source })
            }
            Ok(Err(source)) => Err(Error::Launch { command, source }),
            Err(_) => Err(Error::Launch {
                command,
                source: std::io::Error::other("launcher thread died"),
            }),
        }
    }

    /// The receiver of the command's exit status (once).
    pub fn take_exit(&mut self) -> Option<tokio::sync::oneshot::Receiver<std::io::Result<ExitStatus>>> {
        self.exited.take()
    }
}

/// The file, arguments and environment of a launched command, as the kernel's `execve` takes
/// them, made before the fork: the child only passes pointers to them.
struct RawExec {
    path: std::ffi::CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    /// `/bin/sh FILE ARGS...`, run when the file has no `#!` line and is no binary the kernel
    /// runs (ENOEXEC), as `execvp` and shells do.
    sh_argv: Vec<*const libc::c_char>,
    /// What the pointers point into.
    _strings: Vec<std::ffi::CString>,
}

/// The shell a file without `#!` runs under.
const SHELL: &std::ffi::CStr = c"/bin/sh";

// SAFETY: the pointers point into `_strings`, `path` and `SHELL`, heap buffers and a constant that
// live as long as the pointers and are never changed.
unsafe impl Send for RawExec {}
unsafe impl Sync for RawExec {}

impl RawExec {
    /// `argv` as given; the environment is xtrace's with `env` set over it (one entry per name).
    fn new(
        program: &Path,
        argv: &[std::ffi::OsString],
        env: &[(&str, std::ffi::OsString)],
    ) -> std::io::Result<Self> {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let c_string = |bytes: Vec<u8>| {
            std::ffi::CString::new(bytes).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "an argument or environment variable holds a NUL byte",
                )
            })
        };
        let mut vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
        for (key, value) in env {
            vars.retain(|(k, _)| k != key);
            vars.push((key.into(), value.clone()));
        }
        let path = c_string(program.as_os_str().as_bytes().to_vec())?;
        let args = argv
            .iter()
            .map(|a| c_string(a.as_bytes().to_vec()))
            .collect::<Result<Vec<_>, _>>()?;
        let vars = vars
            .into_iter()
            .map(|(k, v)| {
                let mut var = k.into_vec();
                var.push(b'=');
                var.extend(v.into_vec());
                c_string(var)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let pointers = |strings: &mut dyn Iterator<Item = &std::ffi::CStr>| {
            let mut p: Vec<*const libc::c_char> = strings.map(|s| s.as_ptr()).collect();
            p.push(std::ptr::null());
            p
        };
        let argv = pointers(&mut args.iter().map(|a| a.as_c_str()));
        let envp = pointers(&mut vars.iter().map(|v| v.as_c_str()));
        let script = [SHELL, path.as_c_str()].into_iter();
        let sh_argv = pointers(&mut script.chain(args.iter().skip(1).map(|a| a.as_c_str())));
        let mut strings = args;
        strings.extend(vars);
        Ok(RawExec {
            path,
            argv,
            envp,
            sh_argv,
            _strings: strings,
        })
    }

    /// Replaces the process with the command; returns the error number if that failed.
    fn exec(&self) -> i32 {
        match raw::execve(&self.path, &self.argv, &self.envp) {
            libc::ENOEXEC => raw::execve(SHELL, &self.sh_argv, &self.envp),
            error => error,
        }
    }
}

/// The system calls a launched command's child makes between telling xtrace its pid and its
/// exec, made directly: no function of the C library runs while the probes are attached.
mod raw {
    /// `syscall(n, a, b, c)`, returning the kernel's value (`-errno` on failure).
    #[cfg(target_arch = "x86_64")]
    unsafe fn syscall3(n: libc::c_long, a: usize, b: usize, c: usize) -> isize {
        let ret: isize;
        // SAFETY: the caller passes a system call number and arguments valid for it.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") n as isize => ret,
                in("rdi") a, in("rsi") b, in("rdx") c,
                lateout("rcx") _, lateout("r11") _,
                options(nostack)
            );
        }
        ret
    }

    #[cfg(target_arch = "aarch64")]
    unsafe fn syscall3(n: libc::c_long, a: usize, b: usize, c: usize) -> isize {
        let ret: isize;
        // SAFETY: the caller passes a system call number and arguments valid for it.
        unsafe {
            core::arch::asm!(
                "svc 0",
                in("x8") n,
                inlateout("x0") a as isize => ret,
                in("x1") b, in("x2") c,
                options(nostack)
            );
        }
        ret
    }

    /// Elsewhere, the C library's `syscall`, whose own return runs after the wait (traced, if
    /// `syscall` is).
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    unsafe fn syscall3(n: libc::c_long, a: usize, b: usize, c: usize) -> isize {
        // SAFETY: the caller passes a system call number and arguments valid for it.
        let ret = unsafe { libc::syscall(n, a, b, c) } as isize;
        match ret {
            -1 => {
                -(std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO) as isize)
            }
            ret => ret,
        }
    }

    /// Tells xtrace the child's pid through `fd`.
    pub fn write_pid(fd: i32, pid: libc::pid_t) {
        let pid = pid.to_ne_bytes();
        // SAFETY: writes a local's bytes.
        unsafe { syscall3(libc::SYS_write, fd as usize, pid.as_ptr() as usize, pid.len()) };
    }

    /// Waits until a byte can be read from `fd`: false when it closed first.
    pub fn wait_gate(fd: i32) -> bool {
        let mut byte = 0u8;
        loop {
            // SAFETY: reads one byte into a local.
            let n = unsafe { syscall3(libc::SYS_read, fd as usize, (&raw mut byte) as usize, 1) };
            if n != -(libc::EINTR as isize) {
                return n == 1;
            }
        }
    }

    /// Replaces the process; returns the error number if that failed.
    pub fn execve(path: &std::ffi::CStr, argv: &[*const libc::c_char], envp: &[*const libc::c_char]) -> i32 {
        // SAFETY: NUL-terminated strings and NULL-terminated pointer arrays, kept alive by the
        // caller.
        let n = unsafe {
            syscall3(
                libc::SYS_execve,
                path.as_ptr() as usize,
                argv.as_ptr() as usize,
                envp.as_ptr() as usize,
            )
        };
        -n as i32
    }

    /// Ends the process at once.
    pub fn exit(code: i32) -> ! {
        // SAFETY: exit_group does not return.
        unsafe {
            syscall3(libc::SYS_exit_group, code as usize, 0, 0);
        }
        unreachable!("exit_group returned")
    }
}

/// The interpreter `program` names that does not exist: an ELF file's dynamic linker
/// (`PT_INTERP`), or a script's `#!` line; None when it names none or it exists.
fn missing_interpreter(program: &Path) -> Option<String> {
    use object::read::elf::{FileHeader, ProgramHeader};
    let mut head = Vec::new();
    std::fs::File::open(program)
        .ok()?
        .take(64 << 10)
        .read_to_end(&mut head)
        .ok()?;
    let interpreter = if let Some(line) = head.strip_prefix(b"#!") {
        let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
        let word = line.split(|b| b.is_ascii_whitespace()).find(|w| !w.is_empty())?;
        String::from_utf8_lossy(word).into_owned()
    } else {
        let header = object::elf::FileHeader64::<object::Endianness>::parse(&*head).ok()?;
        let endian = header.endian().ok()?;
        let interp = header
            .program_headers(endian, &*head)
            .ok()?
            .iter()
            .find(|p| p.p_type(endian) == object::elf::PT_INTERP)?;
        let bytes = interp.data(endian, &*head).ok()?;
        let bytes = &bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len())];
        String::from_utf8_lossy(bytes).into_owned()
    };
    (!Path::new(&interpreter).exists()).then_some(interpreter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_resolve_through_path() {
        assert!(resolve_command(std::ffi::OsStr::new("sh"))
            .unwrap()
            .ends_with("sh"));
        assert!(matches!(
            resolve_command(std::ffi::OsStr::new("no-such-command-xtrace")),
            Err(Error::CommandNotFound { .. })
        ));
        assert!(matches!(
            resolve_command(std::ffi::OsStr::new("/etc/passwd")),
            Err(Error::CommandUnusable { why, .. }) if why.contains("not executable")
        ));
        // Without $PATH, execvp's default.
        assert_eq!(resolve_in("sh".as_ref(), None).unwrap(), Path::new("/bin/sh"));
    }

    /// A binary whose dynamic linker is missing: a copy of one with its `PT_INTERP` path changed.
    #[test]
    fn a_missing_interpreter_is_named() {
        let ours = std::fs::read("/proc/self/exe").unwrap();
        let interpreter = b"/lib64/ld-linux-x86-64.so.2\0";
        let Some(at) = ours.windows(interpreter.len()).position(|w| w == interpreter) else {
            return; // linked otherwise (static, another loader): nothing to change
        };
        let dir = std::env::temp_dir().join(format!("xtrace-interp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (good, bad) = (dir.join("good"), dir.join("bad"));
        std::fs::write(&good, &ours).unwrap();
        let mut changed = ours.clone();
        changed[at + interpreter.len() - 2] = b'9';
        std::fs::write(&bad, &changed).unwrap();
        assert_eq!(missing_interpreter(&good), None);
        assert_eq!(
            missing_interpreter(&bad).as_deref(),
            Some("/lib64/ld-linux-x86-64.so.9")
        );
        std::fs::write(&bad, "#!/nonexistent/sh -e\necho\n").unwrap();
        assert_eq!(missing_interpreter(&bad).as_deref(), Some("/nonexistent/sh"));
        std::fs::write(&bad, "#!/bin/sh\n").unwrap();
        assert_eq!(missing_interpreter(&bad), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn launch_waits_at_the_gate_and_reports_exit() {
        let program = resolve_command(std::ffi::OsStr::new("sh")).unwrap();
        let argv: Vec<std::ffi::OsString> = vec!["sh".into(), "-c".into(), "exit 7".into()];
        let mut launch = Launch::start(Program::open(&program).unwrap(), &argv, &[]).unwrap();
        // Still held at the gate: it is our forked copy, not yet `sh`.
        assert_ne!(launch.process.info().comm.as_deref(), Some("sh"));
        launch.release().unwrap();
        let status = launch.take_exit().unwrap().blocking_recv().unwrap().unwrap();
        assert_eq!(status.code(), Some(7));
    }

    /// A script without `#!` runs under /bin/sh, with its arguments, as `execvp` and shells run
    /// it; the environment xtrace adds replaces a variable of the same name.
    #[test]
    fn a_script_without_an_interpreter_line_runs_under_sh() {
        let dir = std::env::temp_dir().join(format!("xtrace-noshebang-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("script");
        std::fs::write(&script, "echo \"$0 $1 $2 $XTRACE_LAUNCH_TEST\" > \"$1\"\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = dir.join("out");
        let argv: Vec<std::ffi::OsString> = vec!["script".into(), out.clone().into(), "two".into()];
        let env = [("XTRACE_LAUNCH_TEST", std::ffi::OsString::from("set"))];
        let mut launch = Launch::start(Program::open(&script).unwrap(), &argv, &env).unwrap();
        launch.release().unwrap();
        let status = launch.take_exit().unwrap().blocking_recv().unwrap().unwrap();
        assert_eq!(status.code(), Some(0));
        let written = std::fs::read_to_string(&out).unwrap();
        assert_eq!(
            written,
            format!("{} {} two set\n", script.display(), out.display())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unreleased_launch_never_runs_the_command() {
        let marker = std::env::temp_dir().join(format!("xtrace-gate-{}", std::process::id()));
        let program = resolve_command(std::ffi::OsStr::new("touch")).unwrap();
        let argv: Vec<std::ffi::OsString> = vec!["touch".into(), marker.clone().into_os_string()];
        let mut launch = Launch::start(Program::open(&program).unwrap(), &argv, &[]).unwrap();
        let exited = launch.take_exit().unwrap();
        drop(launch);
        // The child leaves with _exit(1) before exec: the command never runs.
        let status = exited.blocking_recv().unwrap().unwrap();
        assert_eq!(status.code(), Some(1));
        assert!(!marker.exists());
    }
}
