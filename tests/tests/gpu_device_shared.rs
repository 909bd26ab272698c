//! The GPU device timeline sharing CUPTI with another profiler, as CUPTI 13.2 on allows: the
//! stand-in libcupti (cupti.c, cupti_multi.c) in its multi-subscriber mode (`XTFAKE_CUPTI_MULTI=1`)
//! keeps each subscriber's kinds, callbacks and buffers apart, and fixture `gpuapp` is the other
//! profiler (`profile`: its own subscriber, with cuLaunchKernel callbacks and kernel records).

use std::path::Path;

use xtrace_tests::{
    args,
    fixtures::{tool_library, Fixture},
    gpu::{
        assert_linked_inside_the_capture, attach_round, counts, device_slices, expected, per_name, stdin_app,
    },
    output::Outputs,
    require_bpf,
    run::Xtrace,
    TempDir,
};

/// gpuapp on the stand-in CUDA with the tool library injected and the stand-in CUPTI in its
/// multi-subscriber mode, reading commands from stdin.
fn shared_app() -> Fixture {
    let tool = tool_library();
    stdin_app(&[
        ("CUDA_INJECTION64_PATH", tool.as_path()),
        ("XTFAKE_CUPTI_MULTI", Path::new("1")),
    ])
}

/// What the stand-in CUPTI's latest subscriber `name` made of it (`subscriber NAME ...`).
fn subscriber(app: &mut Fixture, name: &str) -> std::collections::BTreeMap<String, u64> {
    app.send(&format!("subscriber {name}"));
    let line = app.next_line();
    let rest = line
        .strip_prefix(&format!("subscriber {name} "))
        .unwrap_or_else(|| panic!("{line}"));
    counts(&format!("counts {rest}"))
}

/// The app's own subscriber's counts (`profiled callbacks=C kernels=K`).
fn profiled(app: &mut Fixture) -> (u64, u64) {
    app.send("profiled");
    let line = app.next_line();
    let c = counts(&line.replacen("profiled", "counts", 1));
    (c["callbacks"], c["kernels"])
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn sharing_cupti_with_the_apps_profiler_leaves_its_profile_whole() {
    if !require_bpf() {
        return;
    }
    let mut app = shared_app();
    app.send("profile");
    assert_eq!(app.next_line(), "profiling");
    app.send("work 2");
    assert_eq!(app.next_line(), "done 2");
    // The app's profiler: both callbacks of each of 3 launches a round, and each kernel's record.
    assert_eq!(profiled(&mut app), (2 * 3 * 2, 3 * 2));

    let (out, finished) = attach_round(&mut app, 4, "gpu-shared-1", &[]);
    let slices = device_slices(&out);
    assert_eq!(per_name(&slices), expected(4));
    // Within the clock offset's measurement: xtrace gives a shared CUPTI no timestamp callback,
    // so the records come on CUPTI's own clock and are moved.
    assert_linked_inside_the_capture(&out, &slices, 12, 1_000_000);
    let gpu = &out.summary["gpu_device"];
    assert_eq!(
        gpu["subscribed_with"],
        serde_json::json!(["cuptiSubscribe_v2 shared"])
    );
    assert_eq!(gpu["clock"]["used"], "offset", "{}", gpu["clock"]);
    let notices: Vec<&String> = finished.stderr.iter().filter(|l| l.contains("CUPTI")).collect();
    assert_eq!(notices.len(), 1, "{:?}", finished.stderr);
    assert!(
        notices[0].ends_with(": sharing CUPTI with CUPTI for app-profiler"),
        "{}",
        notices[0]
    );
    assert_eq!(gpu["notices"].as_array().map(Vec::len), Some(1));

    // xtrace's subscriber: its three kinds enabled and disabled through the per-subscriber
    // functions, its buffers registered once, then unsubscribed; CUPTI never finalized.
    app.send("sleep 300");
    let mine = subscriber(&mut app, "xtrace");
    assert_eq!(
        (
            mine["live"],
            mine["enable"],
            mine["disable"],
            mine["register"],
            mine["records"]
        ),
        (0, 3, 3, 1, 4 * 6),
        "{mine:?}"
    );
    app.send("counts");
    let c = counts(&app.next_line());
    assert_eq!(
        (
            c["cuptiSubscribe_v2"],
            c["cuptiUnsubscribe"],
            c["cuptiFinalize"],
            c["cuptiActivityEnable"],
            c["cuptiActivityRegisterTimestampCallback"]
        ),
        (2, 1, 0, 0, 0),
        "{c:?}"
    );
    // The app's profiler got every callback and record of the rounds before, during and after
    // xtrace's attach, and no more.
    app.send("work 1");
    assert_eq!(app.next_line(), "done 1");
    assert_eq!(profiled(&mut app), (2 * 3 * 7, 3 * 7));

    // A second attach subscribes beside the app's profiler again.
    let (out, _) = attach_round(&mut app, 3, "gpu-shared-2", &[]);
    let slices = device_slices(&out);
    assert_eq!(per_name(&slices), expected(3));
    assert_linked_inside_the_capture(&out, &slices, 9, 1_000_000);
    app.send("sleep 300");
    let mine = subscriber(&mut app, "xtrace");
    assert_eq!((mine["live"], mine["records"]), (0, 3 * 6), "{mine:?}");
    app.send("work 1");
    assert_eq!(app.next_line(), "done 1");
    app.send("counts");
    let c = counts(&app.next_line());
    assert_eq!(
        (c["cuptiSubscribe_v2"], c["cuptiUnsubscribe"], c["cuptiFinalize"]),
        (3, 2, 0),
        "{c:?}"
    );
    app.send("quit");
    // At exit, the app's profiler says what it got in all: 11 rounds.
    assert_eq!(
        app.next_line(),
        format!("profiled callbacks={} kernels={}", 2 * 3 * 11, 3 * 11)
    );
    assert!(app.wait().success());
}

/// A profiler that holds CUPTI without allowing others still keeps xtrace's timeline off, with
/// one warning naming it, even where the libcupti could share.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_profiler_holding_cupti_alone_still_keeps_the_timeline_off() {
    if !require_bpf() {
        return;
    }
    let mut app = shared_app();
    app.send("profile-exclusive");
    assert_eq!(app.next_line(), "profiling");
    let tmp = TempDir::new("gpu-shared-refused");
    let out_dir = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args!["-p", app.pid().to_string(), "--cuda", "-o", &out_dir]);
    xtrace.wait_attached();
    app.send("sleep 400");
    app.send("work 2");
    assert_eq!(app.next_line(), "done 2");
    app.send("sleep 300");
    app.send("counts");
    let c = counts(&app.next_line());
    xtrace.signal(libc::SIGINT);
    let finished = xtrace.wait();
    finished.assert_success();
    let warnings: Vec<&String> = finished
        .stderr
        .iter()
        .filter(|l| l.contains("GPU device timeline"))
        .collect();
    assert_eq!(warnings.len(), 1, "{:?}", finished.stderr);
    assert!(
        warnings[0].ends_with(
            ": GPU device timeline off: CUPTI refused the subscription \
             (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED): another profiler \
             (CUPTI for app-profiler) holds it; host-side tracing goes on"
        ),
        "{}",
        warnings[0]
    );
    let out = Outputs::read(&out_dir);
    assert!(device_slices(&out).is_empty());
    assert_eq!(out.spans_named("cuLaunchKernel").len(), 6);
    assert_eq!((c["cuptiSubscribe_v2"], c["cuptiFinalize"]), (2, 0), "{c:?}");
    app.send("quit");
    assert!(app.wait().success());
}

/// A notice the ring buffer has no room for is kept by the kernel program and shown all the same.
/// The tool library's subscription waits inside the stand-in CUPTI while xtrace, stopped, reads
/// nothing and the app's launches fill its 16 KiB ring; then the subscription goes on: its
/// `SUBSCRIBED` record finds no room (no `subscribed_with`, one other record lost), nor does the
/// notice sent with it; once xtrace goes on, the notice is shown, once.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_notice_the_ring_has_no_room_for_is_shown() {
    if !require_bpf() {
        return;
    }
    let mut app = shared_app();
    app.send("profile");
    assert_eq!(app.next_line(), "profiling");
    app.send("hold-subscribe");
    assert_eq!(app.next_line(), "holding");
    let tmp = TempDir::new("gpu-notice-kept");
    let out_dir = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        app.pid().to_string(),
        "--cuda",
        "--buffer-size",
        "16K",
        "-o",
        &out_dir
    ]);
    xtrace.wait_attached();
    app.send("subscribe-held");
    assert_eq!(app.next_line(), "held");
    xtrace.signal(libc::SIGSTOP);
    // 1000 launches, copies and memsets: their API spans fill the ring many times over.
    app.send("work 200");
    assert_eq!(app.next_line(), "done 200");
    app.send("release-subscribe");
    // The watcher's next flush comes after the activation has handed its records over.
    app.send("hold-flush");
    assert_eq!(app.next_line(), "held");
    app.send("release-flush");
    xtrace.signal(libc::SIGCONT);
    app.send("work 2");
    assert_eq!(app.next_line(), "done 2");
    xtrace.signal(libc::SIGINT);
    let finished = xtrace.wait();
    finished.assert_success();
    let notices: Vec<&String> = finished.stderr.iter().filter(|l| l.contains("CUPTI")).collect();
    assert_eq!(notices.len(), 1, "{:?}", finished.stderr);
    assert!(
        notices[0].ends_with(&format!(
            "pid {}: sharing CUPTI with CUPTI for app-profiler",
            app.pid()
        )),
        "{}",
        notices[0]
    );
    let out = Outputs::read(&out_dir);
    let gpu = &out.summary["gpu_device"];
    assert_eq!(gpu["subscribed_with"], serde_json::json!([]), "{gpu}");
    assert_eq!(gpu["notices"].as_array().map(Vec::len), Some(1), "{gpu}");
    let others = gpu["records_dropped"]["other_records_by_kernel"].as_u64();
    assert!(others >= Some(1), "{gpu}");
    app.send("quit");
    assert!(app.wait().success());
}
