//! `--inject` on the real kernel with the stand-in CUDA runtime, driver and CUPTI (see
//! gpu_device.rs): fixture `gpuapp` started without `CUDA_INJECTION64_PATH` (its `cuInit` loads no
//! tool library) and reading commands from stdin, so that its one thread sits in `read` when
//! xtrace seizes it. xtrace loads libxtrace_tool.so into it with ptrace and a memfd; the device
//! timeline then works as for a process started with the variable, the process goes on as it
//! was (a computing thread is taken at its next system call, a sleeping one sleeps to its end), a
//! second `--inject` loads nothing, and each refusal leaves the process as it was. A debug
//! build of xtrace pauses at a named injection step (`XTRACE_TEST_INJECT_PAUSE`), where the tests
//! kill it.

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::Fixture,
    gpu::{
        assert_injected_by, assert_linked_inside_the_capture, attach_round, counts, device_slices, expected,
        finish_round, per_name, stdin_app, thread_names,
    },
    output::Outputs,
    require_bpf,
    run::{expect_user_error, Xtrace},
    TempDir,
};

/// gpuapp with the stand-in CUPTI loaded, CUDA initialized without the variable, on stdin.
fn uninjected_app() -> Fixture {
    stdin_app(&[])
}

/// [`uninjected_app`] with its `waiter` thread started (waiting in `read`), and that thread's id.
fn app_with_waiter() -> (Fixture, u32) {
    let mut app = uninjected_app();
    app.send("waiter");
    let waiter = app
        .next_line()
        .strip_prefix("waiting ")
        .and_then(|tid| tid.parse().ok())
        .expect("the waiter's thread id");
    (app, waiter)
}

/// The process's mappings of the injected library, by inode: one inode per load.
fn injected_inodes(pid: u32) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("the fixture's maps");
    let mut inodes: Vec<String> = maps
        .lines()
        .filter(|l| l.ends_with("/memfd:libxtrace_tool.so (deleted)"))
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_owned))
        .collect();
    inodes.dedup();
    inodes
}

/// The process's executable mappings, as /proc/PID/maps gives them.
fn code_mappings(pid: u32) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("the fixture's maps");
    maps.lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|perms| perms.contains('x'))
        })
        .map(str::to_owned)
        .collect()
}

/// Whether the process's mapping of libc's code holds the file's bytes, the padding after the
/// code (where `--inject`'s stage 0 runs) included.
fn libc_code_as_in_file(pid: u32) -> bool {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("the fixture's maps");
    let line = maps
        .lines()
        .find(|l| l.contains(" r-xp ") && l.ends_with("/libc.so.6"))
        .expect("libc's code in the fixture");
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (start, end) = fields[0].split_once('-').unwrap();
    let (start, end) = (
        u64::from_str_radix(start, 16).unwrap(),
        u64::from_str_radix(end, 16).unwrap(),
    );
    let offset = u64::from_str_radix(fields[2], 16).unwrap();
    let mut mapped = vec![0; (end - start) as usize];
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    mem.read_exact_at(&mut mapped, start).unwrap();
    let mut file = vec![0; mapped.len()];
    let libc = std::fs::File::open(format!("/proc/{pid}/root{}", fields[5])).unwrap();
    libc.read_exact_at(&mut file, offset).unwrap();
    mapped == file
}

/// One `--inject` recording of `rounds` rounds of work; returns its outputs and stderr.
fn inject_round(app: &mut Fixture, rounds: u32, label: &str) -> (Outputs, Vec<String>) {
    let (out, finished) = attach_round(app, rounds, label, &["--inject"]);
    (out, finished.stderr)
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn inject_gives_a_process_started_without_the_variable_its_device_timeline() {
    if !require_bpf() {
        return;
    }
    let mut app = uninjected_app();
    assert_eq!(thread_names(app.pid()), ["gpuapp"]);
    let code = code_mappings(app.pid());
    let (out, stderr) = inject_round(&mut app, 3, "gpu-inject");
    assert_injected_by(&stderr, app.pid(), app.pid());
    // No notice telling how to start the process: it has the library now.
    assert!(
        !stderr.iter().any(|l| l.contains("was not started with")),
        "{stderr:?}"
    );
    let slices = device_slices(&out);
    assert_eq!(per_name(&slices), expected(3));
    assert_linked_inside_the_capture(&out, &device_slices(&out), 9, 0);
    assert_eq!(out.summary["gpu_device"]["gpus"][0]["kernels"], 9);
    // xtrace gone: the process goes on, with the library loaded once, its watcher running, and
    // CUPTI unsubscribed and finalized.
    assert_eq!(thread_names(app.pid()), ["gpuapp", "xtrace-gpu"]);
    assert_eq!(injected_inodes(app.pid()).len(), 1);
    // Of xtrace's code, one anonymous page is left (the trampoline's; the others are the
    // library, what it needs and the kernel's uprobe page), and libc's padding is zeros again.
    let added: Vec<String> = code_mappings(app.pid())
        .into_iter()
        .filter(|l| !code.contains(l) && l.split_whitespace().count() == 5)
        .collect();
    assert_eq!(added.len(), 1, "{added:?}");
    let range = added[0]
        .split_whitespace()
        .next()
        .unwrap()
        .split_once('-')
        .unwrap();
    let size = u64::from_str_radix(range.1, 16).unwrap() - u64::from_str_radix(range.0, 16).unwrap();
    assert_eq!(size, 4096, "{added:?}");
    assert!(libc_code_as_in_file(app.pid()));
    app.send("work 2");
    assert_eq!(app.next_line(), "done 2");
    app.send("counts");
    let c = counts(&app.next_line());
    // Through CUDA 13's cuptiSubscribe_v2, which the stand-in has.
    assert_eq!(
        (
            c["cuptiSubscribe_v2"],
            c["cuptiSubscribe"],
            c["cuptiUnsubscribe"],
            c["cuptiFinalize"],
            c["records"]
        ),
        (1, 0, 1, 1, 18)
    );
    app.send("quit");
    assert!(app.wait().success());
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_second_inject_finds_the_library_and_loads_nothing() {
    if !require_bpf() {
        return;
    }
    let mut app = uninjected_app();
    let (first, _) = inject_round(&mut app, 2, "gpu-inject-first");
    assert_eq!(per_name(&device_slices(&first)), expected(2));
    // A CUDA call while the library deactivates, for CUPTI to be finalized.
    app.send("sleep 300");
    app.send("work 1");
    assert_eq!(app.next_line(), "done 1");
    let (second, stderr) = inject_round(&mut app, 4, "gpu-inject-second");
    assert_eq!(per_name(&device_slices(&second)), expected(4));
    let told: Vec<&String> = stderr.iter().filter(|l| l.contains("--inject")).collect();
    assert_eq!(
        told,
        [&format!(
            "xtrace: warning: --inject: pid {} has xtrace's tool library loaded already; nothing injected",
            app.pid()
        )]
    );
    assert_eq!(injected_inodes(app.pid()).len(), 1);
    assert_eq!(thread_names(app.pid()), ["gpuapp", "xtrace-gpu"]);
    app.send("counts");
    let c = counts(&app.next_line());
    // Subscribed once per trace; the second is finalized at the next CUDA call.
    assert_eq!((c["cuptiSubscribe_v2"], c["cuptiFinalize"]), (2, 1));
    app.send("quit");
    assert!(app.wait().success());
}

/// The process answers as before and has no library of xtrace's.
fn assert_untouched(app: &mut Fixture) {
    app.send("work 1");
    assert_eq!(app.next_line(), "done 1");
    assert!(injected_inodes(app.pid()).is_empty());
    assert_eq!(thread_names(app.pid()), ["gpuapp"]);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn inject_refuses_what_it_cannot_do_and_leaves_the_process_untouched() {
    if !require_bpf() {
        return;
    }
    let mut app = uninjected_app();
    let pid = app.pid();
    let inject = |pid: u32| args!["-p", pid.to_string(), "--cuda", "--inject"];
    // No CUDA in the process.
    let plain = Fixture::spin();
    let line = expect_user_error(&Attachments::snapshot(), Xtrace::spawn(inject(plain.pid())));
    assert_eq!(
        line,
        format!(
            "xtrace: error: --inject: pid {} maps no CUDA driver (libcuda.so): there is no GPU work to \
             trace; inject into the process that runs CUDA",
            plain.pid()
        )
    );
    // Without CAP_SYS_PTRACE.
    let line = expect_user_error(
        &Attachments::snapshot(),
        Xtrace::spawn_without_ptrace(inject(pid)),
    );
    assert_eq!(
        line,
        format!(
            "xtrace: error: --inject needs CAP_SYS_PTRACE to load its library into pid {pid}: run xtrace \
             as root, or give it that capability (docker run --cap-add SYS_PTRACE)"
        )
    );
    assert_untouched(&mut app);
    // A thread that never makes a system call, the process's only one: refused after the wait,
    // and it computes on.
    app.send("spin");
    assert_eq!(app.next_line(), "spinning");
    let line = expect_user_error(&Attachments::snapshot(), Xtrace::spawn(inject(pid)));
    let waited = line
        .strip_prefix(&format!(
            "xtrace: error: --inject: no thread of pid {pid} made a system call within "
        ))
        .and_then(|rest| rest.split_once(" ms (1 tried; "))
        .map(|(ms, _)| ms.parse::<u64>().expect("milliseconds"))
        .unwrap_or_else(|| panic!("{line}"));
    assert!((2000..3000).contains(&waited), "{line}");
    // SAFETY: kill has no memory-safety preconditions; the fixture is not reaped yet.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGUSR1) }, 0);
    assert_eq!(app.next_line(), "spun");
    assert_untouched(&mut app);
    // A stopped process (Ctrl-Z): ptrace would resume it.
    // SAFETY: kill has no memory-safety preconditions; the fixture is not reaped yet.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) }, 0);
    while xtrace_tests::run::process_state(pid) != 'T' {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let line = expect_user_error(&Attachments::snapshot(), Xtrace::spawn(inject(pid)));
    assert!(line.contains(&format!("pid {pid} is stopped (SIGSTOP")), "{line}");
    assert_eq!(xtrace_tests::run::process_state(pid), 'T');
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) }, 0);
    assert_untouched(&mut app);
    // A kernel thread; a pid that does not exist.
    let line = expect_user_error(&Attachments::snapshot(), Xtrace::spawn(inject(2)));
    assert!(line.contains("pid 2 is a kernel thread"), "{line}");
    let line = expect_user_error(&Attachments::snapshot(), Xtrace::spawn(inject(u32::MAX >> 10)));
    assert!(line.contains("no process with pid"), "{line}");
    // --inject without --pid or --cuda: clap's error.
    let line = expect_user_error(
        &Attachments::snapshot(),
        Xtrace::spawn(args!["--inject", "-p", pid.to_string()]),
    );
    assert!(line.contains("--cuda"), "{line}");
    // Another tracer attached: this test process seizes the fixture.
    // SAFETY: PTRACE_SEIZE of the fixture (a child of this process) with no options.
    let seized = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid as libc::pid_t, 0, 0) };
    assert_eq!(seized, 0, "{}", std::io::Error::last_os_error());
    let line = expect_user_error(&Attachments::snapshot(), Xtrace::spawn(inject(pid)));
    assert!(
        line.starts_with(&format!(
            "xtrace: error: --inject: pid {pid} is traced already by pid {} (",
            // SAFETY: gettid has no preconditions; the tracer is this thread.
            unsafe { libc::gettid() }
        )),
        "{line}"
    );
    assert_untouched(&mut app);
    app.send("quit");
    assert!(app.wait().success());
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_tracer_of_a_thread_but_the_main_one_refuses_too() {
    if !require_bpf() {
        return;
    }
    // Another --inject holds one thread, not always the main one: this test process seizes the
    // fixture's waiter thread.
    let (mut app, waiter) = app_with_waiter();
    let pid = app.pid();
    let waiter = waiter as libc::pid_t;
    // SAFETY: PTRACE_SEIZE of a thread of the fixture (a child of this process) with no options.
    let seized = unsafe { libc::ptrace(libc::PTRACE_SEIZE, waiter, 0, 0) };
    assert_eq!(seized, 0, "{}", std::io::Error::last_os_error());
    let line = expect_user_error(
        &Attachments::snapshot(),
        Xtrace::spawn(args!["-p", pid.to_string(), "--cuda", "--inject"]),
    );
    // SAFETY: gettid has no preconditions; the tracer is this thread.
    let tracer = unsafe { libc::gettid() };
    assert!(
        line.starts_with(&format!(
            "xtrace: error: --inject: pid {pid} is traced already by pid {tracer} ("
        )),
        "{line}"
    );
    app.send("work 1");
    assert_eq!(app.next_line(), "done 1");
    assert!(injected_inodes(pid).is_empty());
    assert_eq!(thread_names(pid), ["gpuapp", "waiter"]);
    app.send("quit");
    // The waiter's exit is told to its tracer, this thread, which reaps it before the process
    // can be.
    let mut status = 0;
    // SAFETY: waits for the one traced thread; writes one int.
    let reaped = unsafe { libc::waitpid(waiter, &mut status, libc::__WALL) };
    assert_eq!(reaped, waiter, "{}", std::io::Error::last_os_error());
    assert!(app.wait().success());
}

#[test]
#[ignore = "sets Yama's ptrace_scope to 3, which only a reboot undoes: the kernel matrix's guest runs it last"]
fn inject_refuses_under_yama_ptrace_scope_3() {
    if !require_bpf() {
        return;
    }
    let scope = "/proc/sys/kernel/yama/ptrace_scope";
    let mut app = uninjected_app();
    let pid = app.pid();
    std::fs::write(scope, "3").unwrap_or_else(|e| panic!("{scope}: {e} (a kernel without Yama?)"));
    assert_eq!(std::fs::read_to_string(scope).unwrap(), "3\n");
    let line = expect_user_error(
        &Attachments::snapshot(),
        Xtrace::spawn(args!["-p", pid.to_string(), "--cuda", "--inject"]),
    );
    assert_eq!(
        line,
        format!(
            "xtrace: error: --inject: Yama's ptrace_scope is 3 (/proc/sys/kernel/yama/ptrace_scope): no \
             process may be traced with ptrace until reboot, so xtrace cannot load its library into pid \
             {pid}; start the process with CUDA_INJECTION64_PATH=/path/to/libxtrace_tool.so instead"
        )
    );
    assert_untouched(&mut app);
    // Nor can the setting be lowered: what makes this test one for a guest that is powered off.
    assert!(std::fs::write(scope, "1").is_err());
    app.send("quit");
    assert!(app.wait().success());
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_failed_mmap_leaves_the_process_as_it_was_and_seccomp_sees_no_call_minus_1() {
    if !require_bpf() {
        return;
    }
    let mut app = uninjected_app();
    let pid = app.pid();
    // Killed by seccomp if xtrace ever made the thread's call -1 (a skipped call) at an entry,
    // where seccomp judges the call after the tracer.
    app.send("seccomp");
    assert_eq!(app.next_line(), "filtered");
    let code = code_mappings(pid);
    // Address space for 64 KiB more than the process has: too little for the library's bytes.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let size_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().strip_suffix(" kB"))
        .and_then(|v| v.parse().ok())
        .expect("VmSize");
    let limit = |bytes: u64| libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    let set_limit = |bytes: u64| {
        // SAFETY: prlimit reads one rlimit and writes none (null old limit).
        let set = unsafe {
            libc::prlimit(
                pid as libc::pid_t,
                libc::RLIMIT_AS,
                &limit(bytes),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
    };
    set_limit((size_kib + 64) * 1024);
    let line = expect_user_error(
        &Attachments::snapshot(),
        Xtrace::spawn(args!["-p", pid.to_string(), "--cuda", "--inject"]),
    );
    assert_eq!(
        line,
        format!(
            "xtrace: error: --inject into pid {pid} failed at mmap in the process: Cannot allocate \
             memory (os error 12)"
        )
    );
    set_limit(libc::RLIM_INFINITY);
    // Its read made anew, no mapping left, and stage 0 cleared from libc's padding.
    assert_untouched(&mut app);
    assert_eq!(code_mappings(pid), code);
    assert!(libc_code_as_in_file(pid));
    // With room again, the injection goes through, the filter in place.
    let (out, _) = inject_round(&mut app, 2, "gpu-inject-filtered");
    assert_eq!(per_name(&device_slices(&out)), expected(2));
    assert_eq!(thread_names(pid), ["gpuapp", "xtrace-gpu"]);
    app.send("quit");
    assert!(app.wait().success());
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn killing_xtrace_at_each_injection_step_leaves_the_process_running() {
    if !require_bpf() {
        return;
    }
    for step in [
        "seized", "staged", "entered", "mapped", "written", "started", "reported",
    ] {
        let mut app = uninjected_app();
        let code = code_mappings(app.pid());
        let mut xtrace = Xtrace::spawn_with_env(
            args!["-p", app.pid().to_string(), "--cuda", "--inject"],
            &[("XTRACE_TEST_INJECT_PAUSE", step)],
        );
        assert_eq!(
            xtrace.wait_stderr("xtrace: test: "),
            format!("xtrace: test: --inject paused at {step}")
        );
        xtrace.signal(libc::SIGKILL);
        xtrace.wait_exit();
        // Its interrupted read goes on: the next command is read and run.
        app.send("work 2");
        assert_eq!(app.next_line(), "done 2", "after a kill at {step}");
        if step == "started" || step == "reported" {
            // The thread ran the trampoline on its own: the library is loaded and started.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !thread_names(app.pid()).contains(&"xtrace-gpu".to_owned()) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no watcher after a kill at {step}"
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert_eq!(injected_inodes(app.pid()).len(), 1);
        } else {
            assert!(injected_inodes(app.pid()).is_empty(), "at {step}");
            assert_eq!(thread_names(app.pid()), ["gpuapp"], "at {step}");
            // Stage 0's mmap was never made, or stage 0 undid it.
            assert_eq!(code_mappings(app.pid()), code, "at {step}");
        }
        // Stage 0 stays in libc's padding once written: xtrace clears it only after the start.
        assert_eq!(
            libc_code_as_in_file(app.pid()),
            step == "seized" || step == "reported",
            "at {step}"
        );
        app.send("work 1");
        assert_eq!(app.next_line(), "done 1", "after a kill at {step}");
        if step == "written" {
            // The stage left there is taken again, and cleared this time.
            let (out, _) = inject_round(&mut app, 1, "gpu-inject-after-kill");
            assert_eq!(per_name(&device_slices(&out)), expected(1));
            assert!(libc_code_as_in_file(app.pid()));
        }
        app.send("quit");
        assert!(app.wait().success(), "after a kill at {step}");
    }
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_computing_or_sleeping_thread_is_injected_at_its_next_system_call_made_once() {
    if !require_bpf() {
        return;
    }
    // Computing: seized outside any system call, it is taken at its next one, the write of
    // "spun", which it then makes once.
    let mut app = uninjected_app();
    let pid = app.pid();
    app.send("spin");
    assert_eq!(app.next_line(), "spinning");
    let tmp = TempDir::new("inject-computing");
    let out_dir = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args!["-p", pid.to_string(), "--cuda", "--inject", "-o", &out_dir]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: kill has no memory-safety preconditions; the fixture is not reaped yet.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGUSR1) }, 0);
    xtrace.wait_attached();
    assert_eq!(app.next_line(), "spun");
    app.send("work 1");
    assert_eq!(app.next_line(), "done 1");
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    // The one round of work came after the attach: its three launches were traced.
    assert_eq!(Outputs::read(&out_dir).spans_named("cuLaunchKernel").len(), 3);
    assert_eq!(injected_inodes(pid).len(), 1);
    app.send("quit");
    assert!(app.wait().success());
    // Sleeping (clock_nanosleep, which the kernel restarts through restart_syscall): the sleep
    // goes on to its end, once.
    let mut app = uninjected_app();
    let pid = app.pid();
    let started = std::time::Instant::now();
    app.send("sleep 1500");
    app.send("work 1");
    std::thread::sleep(std::time::Duration::from_millis(300));
    // In clock_nanosleep (230) when xtrace starts.
    let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).expect("its system call");
    assert!(syscall.starts_with("230 "), "{syscall}");
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        pid.to_string(),
        "--cuda",
        "--inject",
        "-o",
        tmp.join("slept")
    ]);
    xtrace.wait_attached();
    assert_eq!(app.next_line(), "done 1");
    let slept = started.elapsed();
    assert!(
        slept >= std::time::Duration::from_millis(1500) && slept < std::time::Duration::from_millis(4000),
        "{slept:?}"
    );
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    assert_eq!(thread_names(pid), ["gpuapp", "xtrace-gpu"]);
    app.send("quit");
    assert!(app.wait().success());
}

/// A main thread that only computes has no safe point; another thread, waiting in `read`, is
/// taken instead once the main thread's half of the wait is over, and the process gets its device
/// timeline all the same. The waiting thread waits on, and the main thread never stopped
/// computing.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_waiting_thread_is_taken_when_the_main_thread_only_computes() {
    if !require_bpf() {
        return;
    }
    let (mut app, waiter) = app_with_waiter();
    let pid = app.pid();
    app.send("spin");
    assert_eq!(app.next_line(), "spinning");
    let tmp = TempDir::new("inject-waiter");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args!["-p", pid.to_string(), "--cuda", "--inject", "-o", &out_dir]);
    xtrace.wait_attached();
    // SAFETY: kill has no memory-safety preconditions; the fixture is not reaped yet.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGUSR1) }, 0);
    assert_eq!(app.next_line(), "spun");
    let (out, finished) = finish_round(&mut app, xtrace, (&before, &out_dir), &[("work 2", "done 2")]);
    assert_injected_by(&finished.stderr, pid, waiter);
    assert_eq!(per_name(&device_slices(&out)), expected(2));
    assert_eq!(thread_names(pid), ["gpuapp", "waiter", "xtrace-gpu"]);
    // In read (0) again.
    let syscall =
        std::fs::read_to_string(format!("/proc/{pid}/task/{waiter}/syscall")).expect("its system call");
    assert!(syscall.starts_with("0 "), "{syscall}");
    app.send("quit");
    assert!(app.wait().success());
}
