//! `--inject`: loading xtrace's tool library into a running CUDA process that was not started with
//! `CUDA_INJECTION64_PATH`, so that it gets a GPU device timeline too.
//!
//! First every check that needs no ptrace ([`preflight`]): Yama's `ptrace_scope`, another tracer,
//! CAP_SYS_PTRACE, a mapped libcuda, glibc 2.34 or later (`dlopen` in libc.so.6), and whether the
//! library is loaded already (then nothing is done). Then one thread is seized ([`ptrace`]) and
//! brought to a system-call entry while no other thread holds the dynamic loader's lock
//! ([`loader_lock`]): the main thread, or, when it reaches none within half the wait (it
//! computes) or another holds the lock, each other thread in turn ([`safe_point`]). There its
//! call becomes a `getpid` and it is sent into stage 0 (written into the padding after a
//! library's code, [`site`]), which `mmap`s a page of code and room for the library's bytes and
//! hands the address over at a `getpid`;
//! xtrace writes the [`trampoline`] and the library there and points the thread at it, which
//! takes the loader's lock (waiting half a second at most for another thread to let it go), says
//! at a `getpid` whether it did, loads the library from a memfd, calls its `xtrace_inject_start`
//! and restores the thread itself. Both blobs end by making the thread's own call anew, so the
//! thread resumes correctly whatever step xtrace dies at. xtrace then waits for the library's
//! watcher thread, `xtrace-gpu`, to appear.
//!
//! A debug build pauses at a named step when `XTRACE_TEST_INJECT_PAUSE` names it (`seized`,
//! `staged`, `entered`, `mapped`, `written`, `started`, `reported`), for the tests that kill
//! xtrace there, and goes on once the file `XTRACE_TEST_INJECT_RESUME` names exists.
mod loader_lock;
mod preflight;
mod ptrace;
mod site;
mod trampoline;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use crate::target::Process;
use ptrace::SafePoint;

/// How long the threads may take to reach a system call before `--inject` gives up: all of it for
/// the main thread of a process that has no other, half of it when it has.
pub const SAFE_POINT_WAIT: Duration = Duration::from_secs(2);
/// How long each thread but the main one may take to reach a system call.
pub const OTHER_THREAD_WAIT: Duration = Duration::from_millis(200);
/// How long the library may take to load and start its watcher thread.
pub const START_WAIT: Duration = Duration::from_secs(10);
/// The watcher thread's name (xtrace/tool/src/injection.rs).
pub const WATCHER: &str = "xtrace-gpu";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("--inject: Yama's ptrace_scope is 3 (/proc/sys/kernel/yama/ptrace_scope): no process may be traced with ptrace until reboot, so xtrace cannot load its library into pid {pid}; start the process with CUDA_INJECTION64_PATH=/path/to/libxtrace_tool.so instead")]
    PtraceScope { pid: u32 },
    #[error("--inject: pid {pid} is traced already by pid {tracer} ({name}), and a process has one tracer at a time; detach that debugger or tracer first")]
    Traced { pid: u32, tracer: u32, name: String },
    #[error("--inject needs CAP_SYS_PTRACE to load its library into pid {pid}: run xtrace as root, or give it that capability (docker run --cap-add SYS_PTRACE)")]
    NoCapability { pid: u32 },
    #[error("--inject: pid {pid} maps no CUDA driver (libcuda.so): there is no GPU work to trace; inject into the process that runs CUDA")]
    NoCuda { pid: u32 },
    #[error("--inject: pid {pid}'s C library ({libc}) has no dlopen, which glibc has had since 2.34: xtrace cannot load its library into it; start the process with CUDA_INJECTION64_PATH=/path/to/libxtrace_tool.so instead")]
    OldGlibc { pid: u32, libc: String },
    #[error(
        "--inject: {why}; start pid {pid} with CUDA_INJECTION64_PATH=/path/to/libxtrace_tool.so instead"
    )]
    Unsupported { pid: u32, why: String },
    #[error("--inject: no thread of pid {pid} made a system call within {waited_ms} ms ({threads} tried; a thread that only computes has no safe point to stop at); each was left as it was; try again while the process does I/O or waits")]
    NoSafePoint {
        pid: u32,
        threads: usize,
        waited_ms: u128,
    },
    #[error("--inject: thread {owner} of pid {pid} was inside the dynamic loader (loading a library) whenever a thread could be taken, within {waited_ms} ms: xtrace's library loaded then could wait for it for good; each thread was left as it was; try again once the process has loaded its libraries")]
    LoaderBusy { pid: u32, owner: u32, waited_ms: u128 },
    #[error("--inject into pid {pid} failed at {step}: {reason}")]
    Ptrace {
        pid: u32,
        step: &'static str,
        reason: String,
    },
    #[error("--inject: libxtrace_tool.so was written into pid {pid}, but its watcher thread did not start within {waited_s} s: the library's load failed in the process (its dynamic loader refused it, or its memory ran out)")]
    NotStarted { pid: u32, waited_s: u64 },
}

/// What `--inject` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Loaded by thread `tid`, which was stopped for `stopped`; the watcher ran `took` after the
    /// start.
    Loaded {
        tid: u32,
        stopped: Duration,
        took: Duration,
    },
    /// The library's watcher runs in the process already.
    AlreadyLoaded,
}

/// Loads `library` (the shipped tool library) into `process`.
pub fn inject(process: &Process, library: &Path) -> Result<Outcome, Error> {
    let pid = process.pid;
    let found = match preflight::check(process)? {
        preflight::Found::Loaded => return Ok(Outcome::AlreadyLoaded),
        preflight::Found::Ready(found) => found,
    };
    let bytes = std::fs::read(library).map_err(|e| Error::Unsupported {
        pid,
        why: format!("cannot read {}: {e}", library.display()),
    })?;
    let started = Instant::now();
    let tid = load(pid, &found, &bytes)?;
    let stopped = started.elapsed();
    let deadline = Instant::now() + START_WAIT;
    while Instant::now() < deadline {
        if watcher_runs(pid) {
            return Ok(Outcome::Loaded {
                tid,
                stopped,
                took: started.elapsed(),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(Error::NotStarted {
        pid,
        waited_s: START_WAIT.as_secs(),
    })
}

/// A thread of `pid` stopped at a safe point, with its registers there: the main thread, for all
/// of [`SAFE_POINT_WAIT`] when it is the only one, else for half of it; then each other thread, in
/// the order they were made, for [`OTHER_THREAD_WAIT`], until `SAFE_POINT_WAIT` has passed. A
/// thread that reaches none is let go as it was; one that exits meanwhile is passed over. Calls
/// made from the loader's code are no safe point, and no call is while another thread holds the
/// loader's lock: that thread is let go at once.
fn safe_point(pid: u32, found: &preflight::Ready) -> Result<(ptrace::Tracee, libc::user_regs_struct), Error> {
    let fail = |step: &'static str| move |reason: String| Error::Ptrace { pid, step, reason };
    let started = Instant::now();
    let end = started + SAFE_POINT_WAIT;
    let threads = threads(pid);
    let main_wait = match threads.len() {
        0 | 1 => SAFE_POINT_WAIT,
        _ => SAFE_POINT_WAIT / 2,
    };
    let mut tried = 0;
    let mut loader_busy = None;
    for tid in threads {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let wait = if tid == pid { main_wait } else { OTHER_THREAD_WAIT };
        let mut tracee = match ptrace::Tracee::seize(pid, tid) {
            Ok(tracee) => tracee,
            Err(_) if tid != pid && !thread_exists(pid, tid) => continue,
            Err(e) => return Err(e),
        };
        if tried == 0 {
            pause_for_test("seized");
        }
        tried += 1;
        match tracee.reach_safe_point((now + wait).min(end), &found.loader, found.load_lock) {
            Ok(SafePoint::At(at_entry)) => return Ok((tracee, *at_entry)),
            Ok(SafePoint::LoaderBusy(owner)) => {
                loader_busy = Some(owner);
                tracee.detach().map_err(fail("PTRACE_DETACH"))?;
            }
            Ok(SafePoint::Deadline) => tracee.detach().map_err(fail("PTRACE_DETACH"))?,
            Err(_) if tid != pid && !thread_exists(pid, tid) => continue,
            Err(e) => return Err(fail("waiting for a system call")(e)),
        }
    }
    let waited_ms = started.elapsed().as_millis();
    Err(match loader_busy {
        Some(owner) => Error::LoaderBusy {
            pid,
            owner,
            waited_ms,
        },
        None => Error::NoSafePoint {
            pid,
            threads: tried,
            waited_ms,
        },
    })
}

/// The threads of `pid`, the main thread first, then the others by id (the order they were
/// made, until ids wrap).
fn threads(pid: u32) -> Vec<u32> {
    let mut others: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(|t| t.ok()?.file_name().to_str()?.parse().ok())
                .filter(|&tid| tid != pid)
                .collect()
        })
        .unwrap_or_default();
    others.sort_unstable();
    std::iter::once(pid).chain(others).collect()
}

fn thread_exists(pid: u32, tid: u32) -> bool {
    Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// The ptrace part: from seizing a thread to detaching it. From the moment its registers first
/// change (into stage 0) the thread resumes by itself from wherever xtrace leaves it: a failure
/// from there on returns with the thread let go to finish stage 0, which undoes its `mmap`.
fn load(pid: u32, found: &preflight::Ready, bytes: &[u8]) -> Result<u32, Error> {
    let fail = |step: &'static str| move |reason: String| Error::Ptrace { pid, step, reason };
    let started = Instant::now();
    let (tracee, at_entry) = safe_point(pid, found)?;
    let resume = trampoline::resume_registers(&at_entry);
    let library_len = bytes.len() as u64;
    let size = trampoline::PAGE + library_len.div_ceil(trampoline::PAGE) * trampoline::PAGE;
    let site = found.stage.address;
    let stage = trampoline::stage_code(size, &resume);
    // Checked again now that the thread is held: another `--inject` that began meanwhile holds a
    // thread while its stage 0 may run, and a library unloaded since would have freed the place.
    preflight::refuse_other_tracer(pid)?;
    let there = tracee
        .read_bytes(site, stage.len())
        .map_err(fail("reading stage 0's place"))?;
    if !site::still_there(pid, &found.stage) || !site::is_free_bytes(&there) {
        return Err(fail("writing stage 0")(format!(
            "the code of {} moved or changed since it was checked; try again",
            found.stage.library
        )));
    }
    tracee
        .write_bytes(site, &stage)
        .map_err(fail("writing stage 0"))?;
    pause_for_test("staged");
    tracee
        .set_registers(&trampoline::stage_registers(&at_entry, site))
        .map_err(fail("entering stage 0"))?;
    pause_for_test("entered");
    let handover = tracee
        .run_to_getpid(trampoline::handover_address(site))
        .map_err(fail("stage 0 in the process"))?;
    let code = match handover.rdi as i64 {
        address @ 0.. => address as u64,
        errno => {
            // Nothing mapped: from the getpid's exit the thread goes back to its call at once,
            // and stage 0 is cleared, the process as it was.
            let reason = std::io::Error::from_raw_os_error(-errno as i32).to_string();
            tracee.finish_call().map_err(fail("stage 0 in the process"))?;
            tracee
                .set_registers(&resume)
                .map_err(fail("restoring the registers"))?;
            clear_stage(&tracee, &found.stage, pid);
            return Err(fail("mmap in the process")(reason));
        }
    };
    pause_for_test("mapped");
    let library = code + trampoline::PAGE;
    tracee
        .write_bytes(library, bytes)
        .map_err(fail("writing the library"))?;
    let page = trampoline::code_page(&trampoline::Values {
        dlopen: found.libc.dlopen,
        dlsym: found.libc.dlsym,
        trylock: found.libc.mutex_trylock,
        unlock: found.libc.mutex_unlock,
        load_lock: found.load_lock.unwrap_or(0),
        library,
        library_len,
        resume,
    });
    tracee
        .write_bytes(code, &page)
        .map_err(fail("writing the trampoline"))?;
    pause_for_test("written");
    // The hand-over's getpid is made, the thread sent to the trampoline.
    let start = trampoline::start_registers(&resume, code, found.xsave);
    tracee
        .set_registers(&start)
        .map_err(fail("starting the trampoline"))?;
    pause_for_test("started");
    clear_stage(&tracee, &found.stage, pid);
    // The trampoline first takes the loader's lock, which another thread may have taken since
    // the safe point, and says whether it could; it loads nothing when it could not.
    let report = tracee
        .run_to_getpid(trampoline::report_address(code))
        .map_err(fail("the trampoline in the process"))?;
    pause_for_test("reported");
    let tid = tracee.tid;
    tracee.detach().map_err(fail("PTRACE_DETACH"))?;
    match report.rdi as i32 {
        0 => Ok(tid),
        libc::EBUSY => Err(Error::LoaderBusy {
            pid,
            owner: report.rsi as u32,
            waited_ms: started.elapsed().as_millis(),
        }),
        errno => Err(fail("taking the loader's lock")(
            std::io::Error::from_raw_os_error(errno).to_string(),
        )),
    }
}

/// Gives the padding stage 0 lay in its zeros back, once the thread will not run it again.
fn clear_stage(tracee: &ptrace::Tracee, stage: &site::Site, pid: u32) {
    if let Err(e) = tracee.write_bytes(stage.address, &vec![0; trampoline::stage_len()]) {
        log::debug!("--inject: stage 0 left in {} of pid {pid}: {e}", stage.library);
    }
}

/// Whether a thread of `pid` is the tool library's watcher.
pub fn watcher_runs(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .filter_map(|t| t.ok())
        .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == WATCHER))
}

/// In a debug build, stops here when `XTRACE_TEST_INJECT_PAUSE` names `step`: until the file
/// `XTRACE_TEST_INJECT_RESUME` names exists, or for good.
fn pause_for_test(step: &str) {
    if cfg!(debug_assertions) && std::env::var("XTRACE_TEST_INJECT_PAUSE").is_ok_and(|s| s == step) {
        eprintln!("xtrace: test: --inject paused at {step}");
        let resume = std::env::var_os("XTRACE_TEST_INJECT_RESUME");
        while !resume.as_ref().is_some_and(|file| Path::new(file).exists()) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
