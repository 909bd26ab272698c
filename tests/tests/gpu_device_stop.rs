//! The GPU device timeline at the stop, on the real kernel with the stand-in CUDA runtime, driver
//! and CUPTI (see gpu_device.rs): the tool library flushes CUPTI's buffers once a period (100 ms),
//! so when xtrace stops it asks each traced process for the records it still holds
//! (`xtrace:gpu_drain`) and waits for them before detaching, one second at most; the library then
//! switches CUPTI off, and finalizes it at the next CUDA call.

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{tool_library, Fixture},
    gpu::{
        attach_round, counts, device_slices, expected, one_call_then_counts, per_name, stdin_app,
        traced_steps,
    },
    output::Outputs,
    require_bpf,
    run::{Finished, Xtrace},
    TempDir,
};

/// gpuapp by pid under `xtrace --cuda` (with `env`), stopped right after `steps`
/// ([`traced_steps`]).
fn stop_after(label: &str, env: &[(&str, &str)], steps: &[(&str, &str)]) -> (Outputs, Finished, Fixture) {
    let tool = tool_library();
    let mut app = stdin_app(&[("CUDA_INJECTION64_PATH", tool.as_path())]);
    let (out, finished) = traced_steps(&mut app, label, (&["--cuda"], env), steps);
    (out, finished, app)
}

/// Work done just before the stop, its records still in the stand-in CUPTI's buffers, is all in
/// the trace, with uprobe_multi links and with perf-event uprobes (kernels before 6.6): each
/// raises the `gpu_drain` semaphore its own way. The library switched its records off before
/// xtrace detached: one disable per kind.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn the_records_still_in_cuptis_buffers_at_the_stop_reach_the_trace() {
    if !require_bpf() {
        return;
    }
    for (mechanism, rounds) in [("uprobe_multi", 3), ("perf_event", 4)] {
        let work = format!("work {rounds}");
        let done = format!("done {rounds}");
        let (out, finished, mut app) = stop_after(
            &format!("gpu-stop-{mechanism}"),
            &[("XTRACE_UPROBE_ATTACH", mechanism)],
            &[(&work, &done)],
        );
        assert_eq!(per_name(&device_slices(&out)), expected(rounds), "{mechanism}");
        assert!(
            !finished.stderr.iter().any(|l| l.contains("did not hand over")),
            "{:?}",
            finished.stderr
        );
        let gpu = &out.summary["gpu_device"];
        assert_eq!(gpu["records_dropped"]["after_stop"], 0, "{gpu}");
        app.send("counts");
        let c = counts(&app.next_line());
        assert_eq!(
            (c["cuptiActivityEnable"], c["cuptiActivityDisable"]),
            (3, 3),
            "{mechanism}: {c:?}"
        );
        app.send("quit");
        assert!(app.wait().success());
    }
}

/// A library that cannot answer (its watcher held inside a flush of the stand-in CUPTI) costs the
/// stop one second and one warning naming the process; the process runs on, and its library
/// switches CUPTI off once the flush ends.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_process_that_does_not_hand_over_its_last_records_gets_one_warning() {
    if !require_bpf() {
        return;
    }
    let started = std::time::Instant::now();
    let (_, finished, mut app) = stop_after(
        "gpu-stop-held",
        &[],
        &[("work 2", "done 2"), ("hold-flush", "held")],
    );
    let warnings: Vec<&String> = finished
        .stderr
        .iter()
        .filter(|l| l.contains("did not hand over"))
        .collect();
    assert_eq!(
        warnings,
        [&format!(
            "xtrace: warning: pid {} did not hand over its last GPU device records within 1000 ms of \
             the stop: up to the last 100 ms of its device timeline may be missing",
            app.pid()
        )],
        "{:?}",
        finished.stderr
    );
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));
    app.send("release-flush");
    app.send("sleep 300");
    let c = one_call_then_counts(&mut app);
    assert_eq!(
        (
            c["cuptiActivityDisable"],
            c["cuptiUnsubscribe"],
            c["cuptiFinalize"]
        ),
        (3, 1, 1),
        "{c:?}"
    );
    app.send("quit");
    assert!(app.wait().success());
}

/// A process that makes no CUDA call for 2 s after the stop stays subscribed with every kind off:
/// CUPTI finalizes only from an API-exit callback. The next attach uses that subscription (no
/// second subscribe) and says so once; its device timeline is whole, and the launch after it
/// finalizes CUPTI.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_subscription_left_parked_is_used_by_the_next_attach_with_a_notice() {
    if !require_bpf() {
        return;
    }
    let tool = tool_library();
    let mut app = stdin_app(&[("CUDA_INJECTION64_PATH", tool.as_path())]);
    let (first, finished) = attach_round(&mut app, 2, "gpu-parked-1", &[]);
    assert_eq!(per_name(&device_slices(&first)), expected(2));
    assert!(!finished.stderr.iter().any(|l| l.contains("stayed subscribed")));
    app.send("sleep 2500");
    app.send("counts");
    let c = counts(&app.next_line());
    let calls = |c: &std::collections::BTreeMap<String, u64>| {
        [
            "cuptiSubscribe_v2",
            "cuptiActivityDisable",
            "cuptiUnsubscribe",
            "cuptiFinalize",
        ]
        .map(|f| c[f])
    };
    assert_eq!(calls(&c), [1, 3, 0, 0], "{c:?}");
    let (second, finished) = attach_round(&mut app, 3, "gpu-parked-2", &[]);
    assert_eq!(per_name(&device_slices(&second)), expected(3));
    let notices: Vec<&String> = finished
        .stderr
        .iter()
        .filter(|l| l.contains("stayed subscribed"))
        .collect();
    assert_eq!(notices.len(), 1, "{:?}", finished.stderr);
    assert!(
        notices[0].ends_with(&format!(
            "pid {}: CUPTI had stayed subscribed since the last trace (no CUDA call came to \
             finalize it); its records were off meanwhile",
            app.pid()
        )),
        "{}",
        notices[0]
    );
    let c = one_call_then_counts(&mut app);
    assert_eq!(calls(&c), [1, 6, 1, 1], "{c:?}");
    app.send("quit");
    assert!(app.wait().success());
}

/// Two processes traced together (`-p A -p B`), each working right up to the stop: the stop waits
/// for each one's last records, and each process's slices are all there, in its own tracks.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn the_stop_waits_for_the_last_records_of_every_traced_process() {
    if !require_bpf() {
        return;
    }
    let tool = tool_library();
    let mut apps: [Fixture; 2] =
        std::array::from_fn(|_| stdin_app(&[("CUDA_INJECTION64_PATH", tool.as_path())]));
    let tmp = TempDir::new("gpu-stop-two");
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let (a, b) = (apps[0].pid().to_string(), apps[1].pid().to_string());
    let mut xtrace = Xtrace::spawn(args!["-p", a, "-p", b, "--cuda", "-o", &out_dir]);
    xtrace.wait_attached();
    for (app, rounds) in apps.iter_mut().zip([2, 3]) {
        app.send("wait-active");
        assert_eq!(app.next_line(), "active");
        app.send(&format!("work {rounds}"));
        assert_eq!(app.next_line(), format!("done {rounds}"));
    }
    xtrace.signal(libc::SIGINT);
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    assert!(
        !finished.stderr.iter().any(|l| l.contains("did not hand over")),
        "{:?}",
        finished.stderr
    );
    let slices = device_slices(&Outputs::read(&out_dir));
    for (app, rounds) in apps.iter_mut().zip([2, 3]) {
        let pid = u64::from(app.pid());
        let own: Vec<_> = slices.iter().filter(|s| s.pid == pid).cloned().collect();
        assert_eq!(per_name(&own), expected(rounds), "pid {pid}");
        app.send("quit");
        assert!(app.wait().success());
    }
}
