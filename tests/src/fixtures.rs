//! Fixture programs: their paths, built once per test binary (build.rs compiles them), and
//! driving a running fixture over its stdin/stdout (`ready`, `tid N` lines, the `go` line).

mod build;

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    sync::{
        mpsc::{self, Receiver, RecvTimeoutError},
        OnceLock,
    },
    thread,
    time::{Duration, Instant},
};

use crate::{target_dir, SAFETY_TIMEOUT};

/// Paths of the built fixtures.
#[derive(Debug)]
pub struct Fixtures {
    /// `spans`: modes `threads T N`, `nested K`, `exit CODE`, `spin`, `busy US N`.
    pub spans: PathBuf,
    /// `libxtfix.so`, exporting `lib_work(int)`.
    pub libxtfix: PathBuf,
    /// `uselib`: linked against libxtfix.so; calls `lib_work` 7 times after the go line.
    pub uselib: PathBuf,
    /// `many`: glob_fn_000..glob_fn_299, glob_fn_K called (K % 5) + 1 times, other_fn 4 times.
    pub many: PathBuf,
    /// `matrix` (C++): ns::Matrix::{add x3, scale x5, trace x2}, ns::MatrixView::get x4, then
    /// thrower(1) from main, which throws, then catcher x4 calling thrower, which throws twice.
    pub matrix: PathBuf,
    /// `matrix` built with -O2: GCC splits catcher and thrower, moving their exception paths to
    /// `catcher(int) [clone .cold]` and `thrower(int) [clone .cold]`.
    pub matrix_o2: PathBuf,
    /// `calls`: modes `args`, `recurse`, `longjmp`, `ljrecurse`, `threadexit`, `durations`, `sharedvm` (see
    /// calls.c).
    pub calls: PathBuf,
    /// `calls` built with `-fcf-protection=full`: every function starts with `endbr64`.
    pub calls_cet: PathBuf,
    /// `calls` linked statically: glibc's IFUNCs (`strlen`) are in the executable itself.
    pub calls_static: PathBuf,
    /// `usdt run`: `<sys/sdt.h>` probes with known firings and values (see usdt.c).
    pub usdt: PathBuf,
    /// `usdt_malformed`: two malformed USDT notes (the 1st and 2nd), good:hit, and two notes at one
    /// address (good:twin_a, good:twin_b); run, it fires each once.
    pub usdt_malformed: PathBuf,
    /// `usdt_pairs run`: txn__start/txn__commit|txn__abort, query__start/query__done and
    /// stmt_start/stmt_done with known counts, some left open or without begin (see usdt_pairs.c).
    pub usdt_pairs: PathBuf,
    /// `usdt_sites run`: xtsites:tick 30 times from caller_a and 10 from caller_b, and the pair
    /// op__start/op__done 3 and 2 times from them (see usdt_sites.c).
    pub usdt_sites: PathBuf,
    /// `libxtsites.so`: usdt_sites.c's probes in `site_tick`, `site_op_start` and `site_op_done`,
    /// for pystacks.py's `usdt` mode.
    pub libxtsites: PathBuf,
    /// `unprobeable`: locked_entry and segment_entry start with prefixes uprobes refuse; plain;
    /// each called 5 times.
    pub unprobeable: PathBuf,
    /// `entries`: functions in assembly whose entry probes move past their first instructions, or
    /// must not; each called 7 times (see entries.c).
    pub entries: PathBuf,
    /// `profile split|syscalls|jit|libc|threads MS` (see profile.c), with frame pointers (-O0).
    pub profile: PathBuf,
    /// `offcpu sleep N MS | phases | mutex MS` (see offcpu.c): waits of known count and length.
    pub offcpu: PathBuf,
    /// The same built `-O2 -fomit-frame-pointer`.
    pub profile_nofp: PathBuf,
    /// `profile` with DWARF in zlib-compressed sections (`-g -gz=zlib`).
    pub profile_gz: PathBuf,
    /// `profile_rs MS`: profile.c's split mode as a Rust release build, without frame pointers
    /// (see profile_rs.rs).
    pub profile_rs: PathBuf,
    /// `cudaapp` (C++): CUDA calls with known counts and sizes (see cudaapp.cpp) through the
    /// stand-in runtime and driver `libcudart.so.12` and `libcuda.so.1` (cudart.c, cudadrv.c).
    pub cudaapp: PathBuf,
    /// `cudalate LIBCUDART [PLUGIN_DIR]`: dlopen()s the stand-in runtime after the go line, then makes known
    /// CUDA calls after a second line (see cudalate.c).
    pub cudalate: PathBuf,
    /// `gpuapp [--cupti LIBCUPTI] COMMAND...` (see gpuapp.c): kernels, copies and memsets with known
    /// counts through the stand-in runtime and driver, whose `cuInit` loads
    /// `CUDA_INJECTION64_PATH`; `libcupti.so.12` beside them is the stand-in CUPTI (cupti.c,
    /// cupti_multi.c).
    pub gpuapp: PathBuf,
    pub libcupti: PathBuf,
    /// `libslowinit.so` (see slowinit.c): a library whose constructor waits or computes, for
    /// gpuapp's `loader-busy` and `loader-spin`.
    pub libslowinit: PathBuf,
    /// `gpumem` (see gpumem.c): device memory held in steps given on stdin (`alloc N`, `free`),
    /// through the stand-in runtime, which publishes it to the stand-in NVML.
    pub gpumem: PathBuf,
    /// The stand-in NVML `libnvidia-ml.so.1` (nvml.c), alone in its directory, which xtrace is
    /// given as LD_LIBRARY_PATH (see [`Fixtures::nvml_env`]).
    pub libnvml: PathBuf,
    /// `ranges run` and `ranges names N` (see ranges.c): known ranges through xtrace's own API,
    /// linked against the tool library `libxtrace_tool.so` next to the xtrace binary under test.
    pub ranges: PathBuf,
}

impl Fixtures {
    /// The environment that makes xtrace load the stand-in NVML and lets it see the processes
    /// whose stand-in runtime publishes into `gpu_dir` (give the fixture the same
    /// `XTRACE_STANDIN_GPU_DIR`).
    pub fn nvml_env(&self, gpu_dir: &Path) -> Vec<(&'static str, String)> {
        let dir = self.libnvml.parent().expect("a directory");
        vec![
            ("LD_LIBRARY_PATH", dir.display().to_string()),
            ("XTRACE_STANDIN_GPU_DIR", gpu_dir.display().to_string()),
        ]
    }
}

/// The tool library next to the xtrace binary under test.
pub fn tool_library() -> PathBuf {
    let path = crate::xtrace_bin()
        .parent()
        .expect("the xtrace binary has a directory")
        .join("libxtrace_tool.so");
    assert!(
        path.is_file(),
        "{} not found: build it with `cargo build -p xtrace-tool` (cargo xtask test does)",
        path.display()
    );
    path
}

/// The Python of the venv holding the range tests' PyPI clients (nvtx, ittapi).
pub fn python() -> PathBuf {
    let path = crate::target_dir().join("xtrace-pyenv/bin/python3");
    assert!(
        path.is_file(),
        "{} not found: `cargo xtask setup` creates it with the nvtx and ittapi packages",
        path.display()
    );
    path
}

/// A Python fixture script in tests/fixtures/.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name)
}

/// `gocalls calls|grow|restart|park|parkexit|strings|spin|exec|fail` (see gocalls.go), built with `go build` on first use (only the Go
/// tests need it).
pub fn gocalls() -> &'static Path {
    static GOCALLS: OnceLock<PathBuf> = OnceLock::new();
    GOCALLS.get_or_init(|| build::go("gocalls"))
}

/// `gocgo` (see gocgo.go): Go code calling C code through cgo, built with `go build` on first use.
pub fn gocgo() -> &'static Path {
    static GOCGO: OnceLock<PathBuf> = OnceLock::new();
    GOCGO.get_or_init(|| build::go("gocgo"))
}

/// `mpifix STEPS SLOW_RANK SLOW_MS [spin]` (see mpifix.c): MPI calls with known counts and sizes, and a
/// rank slower than the others by SLOW_MS per step; built with `mpicc` on first use (only the MPI
/// tests need it).
pub fn mpifix() -> &'static Path {
    static MPIFIX: OnceLock<PathBuf> = OnceLock::new();
    MPIFIX.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mpifix.c");
        let binary = build::out_dir().join("mpifix");
        build::compile(&[src], &binary, &[]);
        binary
    })
}

/// `ncclfix BARRIER STEPS SLOW_MS` with RANK and WORLD_SIZE (see ncclfix.c): NCCL's NVTX ranges
/// around a real barrier between two ranks; built on first use against the NVTX3 headers of the
/// venv's nvidia-nvtx-cu12 (`cargo xtask setup`).
pub fn ncclfix() -> &'static Path {
    static NCCLFIX: OnceLock<PathBuf> = OnceLock::new();
    NCCLFIX.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/ncclfix.c");
        let lib = target_dir().join("xtrace-pyenv/lib");
        let include = std::fs::read_dir(&lib)
            .into_iter()
            .flatten()
            .flatten()
            .map(|python| python.path().join("site-packages/nvidia/nvtx/include"))
            .find(|include| include.is_dir())
            .unwrap_or_else(|| {
                panic!(
                    "no nvidia/nvtx/include under {}: run `cargo xtask setup`",
                    lib.display()
                )
            });
        let binary = build::out_dir().join("ncclfix");
        build::compile(&[src], &binary, &[&format!("-I{}", include.display()), "-ldl"]);
        binary
    })
}

/// Builds the fixtures on first use (once per test binary) and returns their paths.
pub fn fixtures() -> &'static Fixtures {
    static FIXTURES: OnceLock<Fixtures> = OnceLock::new();
    FIXTURES.get_or_init(build::all)
}

/// A running fixture with piped stdin/stdout; killed and reaped on drop.
pub struct Fixture {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    name: String,
}

impl Fixture {
    /// Starts `program args...` with stdin and stdout piped (stderr inherited).
    pub fn spawn(program: &Path, args: &[&str]) -> Fixture {
        Fixture::spawn_with_env(program, args, &[])
    }

    /// [`Fixture::spawn`] with extra environment variables.
    pub fn spawn_with_env(program: &Path, args: &[&str], env: &[(&str, &Path)]) -> Fixture {
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Fixture {
            stdin: child.stdin.take(),
            child,
            lines,
            name: format!("{} {}", program.display(), args.join(" ")),
        }
    }

    /// `spans spin` (calls `work` forever), started and ready: a live target for `--pid`.
    pub fn spin() -> Fixture {
        let mut fixture = Fixture::spawn(&fixtures().spans, &["spin"]);
        fixture.wait_ready();
        fixture
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads stdout until the `ready` line and returns the lines before it.
    pub fn wait_ready(&mut self) -> Vec<String> {
        let deadline = Instant::now() + SAFETY_TIMEOUT;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line == "ready" => return before,
                Ok(line) => before.push(line),
                Err(RecvTimeoutError::Timeout) => {
                    panic!("fixture `{}` printed no `ready` line in time", self.name)
                }
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "fixture `{}` closed stdout before `ready` (status {:?})",
                    self.name,
                    self.child.try_wait()
                ),
            }
        }
    }

    /// The thread ids the fixture printed as `tid N` lines before `ready`.
    pub fn wait_ready_tids(&mut self) -> Vec<u32> {
        self.wait_ready()
            .iter()
            .filter_map(|line| line.strip_prefix("tid "))
            .map(|tid| tid.parse().expect("tid line holds a number"))
            .collect()
    }

    /// Writes the `go` line that releases the fixture's calls.
    pub fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("go() is called once");
        stdin.write_all(b"go\n").expect("writing go to the fixture");
        stdin.flush().expect("flushing the fixture's stdin");
        self.stdin = None;
    }

    /// Writes `line` to the fixture's stdin, keeping it open (unlike [`Fixture::go`]).
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is still open");
        writeln!(stdin, "{line}").expect("writing to the fixture");
        stdin.flush().expect("flushing the fixture's stdin");
    }

    /// Makes `offcpu phases` sleep `ms` milliseconds `n` times and waits until it has; how many
    /// of the sleeps blocked (left the CPU), from its `done B` line. Fewer than `n` only where
    /// a sleep's time was up before its thread could leave the CPU (a stalled virtual CPU).
    pub fn sleep_phase(&mut self, n: u32, ms: f64) -> u64 {
        self.send(&format!("{n} {ms}"));
        let line = self.next_line();
        let blocked = line
            .strip_prefix("done ")
            .and_then(|b| b.parse().ok())
            .unwrap_or_else(|| panic!("`offcpu phases` printed {line:?}, not `done B`"));
        assert!(blocked <= u64::from(n), "{line} of {n} sleeps");
        blocked
    }

    /// The next line the fixture prints (with the safety timeout).
    pub fn next_line(&mut self) -> String {
        self.lines
            .recv_timeout(SAFETY_TIMEOUT)
            .unwrap_or_else(|e| panic!("fixture `{}` printed no line in time: {e}", self.name))
    }

    /// The pids of the `child PID` lines `profile children|forks` prints, up to its
    /// `children exited` line.
    pub fn children_until_exited(&mut self) -> Vec<u32> {
        self.children_and_cpu_until_exited().0
    }

    /// [`Fixture::children_until_exited`], with the CPU time (ms) of each child by pid, from the
    /// `cpu PID MS` lines `profile` prints as it reaps them.
    pub fn children_and_cpu_until_exited(&mut self) -> (Vec<u32>, Vec<(u32, f64)>) {
        let (mut children, mut cpu) = (Vec::new(), Vec::new());
        loop {
            let line = self.next_line();
            if line == "children exited" {
                return (children, cpu);
            }
            children.extend(child_pid(&line));
            if let Some((pid, ms)) = line.strip_prefix("cpu ").and_then(|r| r.split_once(' ')) {
                cpu.push((pid.parse().expect("cpu PID"), ms.parse().expect("cpu MS")));
            }
        }
    }

    /// Waits (with the safety timeout) for the fixture to exit.
    pub fn wait(&mut self) -> ExitStatus {
        wait_child(&mut self.child, SAFETY_TIMEOUT)
            .unwrap_or_else(|| panic!("fixture `{}` did not exit in time", self.name))
    }

    /// Whether the fixture is still running (not yet exited).
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait on the fixture").is_none()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The pid of a `child PID` line that `profile children|forks` prints; None for other lines.
pub fn child_pid(line: &str) -> Option<u32> {
    line.strip_prefix("child ")
        .map(|pid| pid.parse().expect("child PID"))
}

/// Polls `child` until it exits or `timeout` passes (then returns None and leaves it running).
pub fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
}
