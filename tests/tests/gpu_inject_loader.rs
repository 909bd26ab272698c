//! `--inject` beside a thread inside the dynamic loader: fixture `gpuapp` (started without
//! `CUDA_INJECTION64_PATH`, see gpu_inject.rs) with a thread named `loading` in a `dlopen` of
//! `libslowinit.so` (slowinit.c), whose constructor waits for the main thread or computes, that
//! thread holding the loader's lock meanwhile. The main thread is passed over: its `dlopen` would
//! wait for the lock, and the constructor for the main thread, for good.

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    gpu::{assert_injected_by, device_slices, expected, per_name, stdin_app, thread_names},
    output::Outputs,
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
    app.send("wait-active");
    assert_eq!(app.next_line(), "active");
    app.send("work 2");
    assert_eq!(app.next_line(), "done 2");
    xtrace.signal(libc::SIGINT);
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    assert_injected_by(&finished.stderr, pid, loading);
    assert_eq!(per_name(&device_slices(&Outputs::read(&out_dir))), expected(2));
    assert_eq!(thread_names(pid), ["gpuapp", "xtrace-gpu"]);
    app.send("quit");
    assert!(app.wait().success());
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
    let tmp = TempDir::new("inject-after-loading");
    let out_dir = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args!["-p", pid.to_string(), "--cuda", "--inject", "-o", &out_dir]);
    xtrace.wait_attached();
    app.send("wait-active");
    assert_eq!(app.next_line(), "active");
    app.send("work 1");
    assert_eq!(app.next_line(), "done 1");
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    before.assert_none_left();
    assert_eq!(per_name(&device_slices(&Outputs::read(&out_dir))), expected(1));
    app.send("quit");
    assert!(app.wait().success());
}
