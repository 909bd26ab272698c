//! `--inject` beside a thread inside the dynamic loader: fixture `gpuapp` (started without
//! `CUDA_INJECTION64_PATH`, see gpu_inject.rs) with a thread named `loading` in a `dlopen` of
//! `libslowinit.so` (slowinit.c), whose constructor waits for the main thread or computes, that
//! thread holding the loader's lock meanwhile. The main thread is passed over: its `dlopen` would
//! wait for the lock, and the constructor for the main thread, for good. With `loader-later` the
//! thread goes into its `dlopen` only once xtrace (a debug build, paused by
//! `XTRACE_TEST_INJECT_PAUSE` until `XTRACE_TEST_INJECT_RESUME`'s file exists) has sent the main
//! thread into the trampoline, which then finds the lock taken.

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    gpu::{
        assert_injected_by, attach_round, device_slices, expected, finish_round, per_name, stdin_app,
        thread_names,
    },
    require_bpf,
    run::{expect_user_error, Xtrace},
    TempDir,
};

/// gpuapp on stdin with its `loading` thread started by `command` (`loader-busy` or
/// `loader-spin`) and inside libslowinit.so's constructor; that thread's id.
fn app_loading(command: &str) -> (Fixture, u32) {
    let mut app = stdin_app(&[]);
    app.send(&format!("{command} {}", fixtures().libslowinit.display()));
    let line = app.next_line();
    let loading = line
        .strip_prefix("constructing ")
        .and_then(|tid| tid.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    (app, loading)
}

/// The end of a test whose `xtrace`, writing into `out_dir`, is attached to `app` by injection
/// through thread `by`: two rounds of work traced exactly, the `loading` thread gone, and `app`
/// quitting.
fn two_rounds_injected_by(
    mut app: Fixture,
    xtrace: Xtrace,
    (before, out_dir): (&Attachments, &std::path::Path),
    by: u32,
) {
    let (out, finished) = finish_round(&mut app, xtrace, (before, out_dir), &[("work 2", "done 2")]);
    assert_injected_by(&finished.stderr, app.pid(), by);
    assert_eq!(per_name(&device_slices(&out)), expected(2));
    assert_eq!(thread_names(app.pid()), ["gpuapp", "xtrace-gpu"]);
    app.send("quit");
    assert!(app.wait().success());
}

/// The constructor waits in `read` for a byte the main thread writes when told: the `loading`
/// thread, which holds the lock (a `dlopen` from a constructor goes on: the lock is recursive),
/// is the one taken, at its `read`. Released, its `dlopen` returns, and the device timeline works.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn the_thread_inside_the_loader_is_the_one_taken() {
    if !require_bpf() {
        return;
    }
    let (mut app, loading) = app_loading("loader-busy");
    let pid = app.pid();
    let tmp = TempDir::new("inject-loading");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args!["-p", pid.to_string(), "--cuda", "--inject", "-o", &out_dir]);
    xtrace.wait_attached();
    app.send("release-loader");
    assert_eq!(app.next_line(), "loaded");
    two_rounds_injected_by(app, xtrace, (&before, &out_dir), loading);
}

/// The constructor computes for 3 s: the main thread is passed over at once, the `loading` thread
/// makes no system call, so xtrace refuses, naming the thread in the loader, and leaves the
/// process as it was; once the library is loaded, `--inject` works.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_loader_busy_all_along_is_refused_and_the_process_left_as_it_was() {
    if !require_bpf() {
        return;
    }
    let (mut app, loading) = app_loading("loader-spin");
    let pid = app.pid();
    let before = Attachments::snapshot();
    let line = expect_user_error(
        &before,
        Xtrace::spawn(args!["-p", pid.to_string(), "--cuda", "--inject"]),
    );
    let prefix = format!(
        "xtrace: error: --inject: thread {loading} of pid {pid} was inside the dynamic loader (loading \
         a library) whenever a thread could be taken, within "
    );
    assert!(line.starts_with(&prefix), "{line}");
    assert!(
        line.ends_with(
            " ms: xtrace's library loaded then could wait for it for good; each thread was left as it \
             was; try again once the process has loaded its libraries"
        ),
        "{line}"
    );
    assert_eq!(app.next_line(), "loaded");
    assert!(!thread_names(pid).contains(&"xtrace-gpu".to_string()));
    let (out, _) = attach_round(&mut app, 1, "inject-after-loading", &["--inject"]);
    assert_eq!(per_name(&device_slices(&out)), expected(1));
    app.send("quit");
    assert!(app.wait().success());
}

/// gpuapp on stdin with its `loading` thread waiting to go into its `dlopen` (`loader-later`):
/// the paths that write into its two pipes through /proc while the main thread is held: the one
/// that sends it into the `dlopen`, and the one that lets the constructor return.
fn app_loading_later() -> (Fixture, String, String) {
    let mut app = stdin_app(&[]);
    app.send(&format!("loader-later {}", fixtures().libslowinit.display()));
    let line = app.next_line();
    let fds: Vec<&str> = line
        .strip_prefix("later ")
        .unwrap_or_else(|| panic!("{line}"))
        .split(' ')
        .collect();
    let pid = app.pid();
    let path = |fd: &str| format!("/proc/{pid}/fd/{fd}");
    (app, path(fds[0]), path(fds[1]))
}

/// Writes one byte into the pipe whose /proc/PID/fd path is `path`.
fn write_byte(path: &str) {
    std::fs::write(path, "x").unwrap_or_else(|e| panic!("writing {path}: {e}"));
}

/// `xtrace --inject` into `pid`, paused once the thread is sent into the trampoline, until the
/// returned file exists; the safe point was found with the loader free.
fn inject_paused_at_start(pid: u32, tmp: &TempDir) -> (Xtrace, std::path::PathBuf) {
    let resume = tmp.join("resume");
    let out_dir = tmp.join("out");
    let mut xtrace = Xtrace::spawn_with_env(
        args!["-p", pid.to_string(), "--cuda", "--inject", "-o", &out_dir],
        &[
            ("XTRACE_TEST_INJECT_PAUSE", "started"),
            ("XTRACE_TEST_INJECT_RESUME", resume.to_str().unwrap()),
        ],
    );
    assert_eq!(
        xtrace.wait_stderr("xtrace: test: "),
        "xtrace: test: --inject paused at started"
    );
    (xtrace, resume)
}

/// The `loading` thread sent into its `dlopen` through `go`: its id, from its constructor.
fn enter_loader(app: &mut Fixture, go: &str) -> u32 {
    write_byte(go);
    let line = app.next_line();
    line.strip_prefix("constructing ")
        .and_then(|tid| tid.parse().ok())
        .unwrap_or_else(|| panic!("{line}"))
}

/// Waits (5 s at most) until thread `tid` of `pid` is in system call `nr`.
fn wait_in_call(pid: u32, tid: u32, nr: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let file = format!("/proc/{pid}/task/{tid}/syscall");
    loop {
        let call = std::fs::read_to_string(&file).unwrap_or_default();
        if call.split(' ').next() == Some(&nr.to_string()) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "thread {tid} is in {call}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The loader taken by the `loading` thread after the safe point was found with it free, just
/// before the main thread runs the trampoline: the trampoline waits for the lock, in
/// `clock_nanosleep` (230) between its tries, rather than in the `dlopen`; once the constructor
/// returns, it loads the library.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_loader_taken_after_the_safe_point_is_waited_for() {
    if !require_bpf() {
        return;
    }
    let (mut app, go, release) = app_loading_later();
    let pid = app.pid();
    let tmp = TempDir::new("inject-loader-later");
    let before = Attachments::snapshot();
    let (mut xtrace, resume) = inject_paused_at_start(pid, &tmp);
    enter_loader(&mut app, &go);
    std::fs::write(&resume, "").unwrap();
    wait_in_call(pid, pid, 230);
    write_byte(&release);
    assert_eq!(app.next_line(), "loaded");
    xtrace.wait_attached();
    two_rounds_injected_by(app, xtrace, (&before, &tmp.join("out")), pid);
}

/// As above, the constructor waiting for the main thread, which the trampoline holds: after
/// half a second of tries the trampoline gives up and the thread goes back to its `read`, so the
/// process goes on; xtrace refuses, naming the thread in the loader. The next `--inject` works.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_loader_waiting_for_the_taken_thread_makes_the_trampoline_give_up() {
    if !require_bpf() {
        return;
    }
    let (mut app, go, _release) = app_loading_later();
    let pid = app.pid();
    let tmp = TempDir::new("inject-loader-waits");
    let before = Attachments::snapshot();
    let (xtrace, resume) = inject_paused_at_start(pid, &tmp);
    let loading = enter_loader(&mut app, &go);
    std::fs::write(&resume, "").unwrap();
    let finished = xtrace.wait();
    before.assert_none_left();
    assert_eq!(finished.status.code(), Some(2), "{:?}", finished.stderr);
    assert_eq!(finished.stderr.len(), 2, "{:?}", finished.stderr);
    let line = &finished.stderr[1];
    let prefix =
        format!("xtrace: error: --inject: thread {loading} of pid {pid} was inside the dynamic loader");
    assert!(line.starts_with(&prefix), "{line}");
    assert!(
        line.ends_with("try again once the process has loaded its libraries"),
        "{line}"
    );
    // The main thread reads commands again: nothing was loaded.
    app.send("release-loader");
    assert_eq!(app.next_line(), "loaded");
    assert!(!thread_names(pid).contains(&"xtrace-gpu".to_string()));
    assert!(!std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .contains("memfd:libxtrace_tool.so"));
    let (out, finished) = attach_round(&mut app, 1, "inject-loader-waited", &["--inject"]);
    assert_injected_by(&finished.stderr, pid, pid);
    assert_eq!(per_name(&device_slices(&out)), expected(1));
    app.send("quit");
    assert!(app.wait().success());
}
