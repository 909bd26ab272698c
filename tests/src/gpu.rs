//! Helpers of the GPU device timeline's tests (gpu_device*.rs, gpu_inject.rs): fixture `gpuapp`
//! on the stand-in CUDA runtime, driver and CUPTI, and a recording of its work by pid.
use std::{collections::BTreeMap, path::Path};

use crate::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::{Outputs, Span},
    run::{Finished, Xtrace},
    TempDir,
};

/// gpuapp's `--cupti LIBCUPTI` arguments.
pub fn cupti_args() -> [String; 2] {
    ["--cupti".into(), fixtures().libcupti.display().to_string()]
}

/// gpuapp with the stand-in CUPTI, CUDA initialized and reading commands from stdin, once ready;
/// `env` adds variables (the tool library's `CUDA_INJECTION64_PATH`, the CUPTI's modes).
pub fn stdin_app(env: &[(&str, &Path)]) -> Fixture {
    let [flag, lib] = cupti_args();
    let mut app = Fixture::spawn_with_env(&fixtures().gpuapp, &[&flag, &lib, "init", "stdin"], env);
    app.wait_ready();
    app
}

/// `xtrace --cuda FLAGS -o DIR -- gpuapp --cupti LIBCUPTI COMMANDS...`, xtrace's environment
/// plus `env`, run to its end and checked to succeed: its outputs (DIR in a temporary directory
/// named by `label`).
pub fn launched_app(label: &str, flags: &[&str], commands: &[&str], env: &[(&str, &str)]) -> Outputs {
    let tmp = TempDir::new(label);
    let out_dir = tmp.join("out");
    let [flag, lib] = cupti_args();
    let mut all = args!["--cuda"];
    all.extend(flags.iter().map(Into::into));
    all.extend(args![
        "-o",
        &out_dir,
        "--",
        fixtures().gpuapp.display().to_string(),
        flag,
        lib
    ]);
    all.extend(commands.iter().map(Into::into));
    Xtrace::spawn_with_env(all, env).wait().assert_success();
    Outputs::read(&out_dir)
}

/// Attaches to `app` by pid with `--cuda` and `flags`, runs `rounds` rounds of work while
/// attached, stops xtrace, and checks it succeeded and left nothing attached.
pub fn attach_round(app: &mut Fixture, rounds: u32, label: &str, flags: &[&str]) -> (Outputs, Finished) {
    let mut all = vec!["--cuda"];
    all.extend(flags);
    traced_round(app, (rounds, label), &all, &[])
}

/// As [`attach_round`], with `flags` only (no `--cuda` added), and once the device timeline is
/// on, each of `first` (a command, the line it answers) sent before the work.
pub fn traced_round(
    app: &mut Fixture,
    (rounds, label): (u32, &str),
    flags: &[&str],
    first: &[(&str, &str)],
) -> (Outputs, Finished) {
    let (work, done) = (format!("work {rounds}"), format!("done {rounds}"));
    let mut steps = first.to_vec();
    steps.push((&work, &done));
    traced_steps(app, label, (flags, &[]), &steps)
}

/// Attaches to `app` by pid with `flags` (xtrace's environment plus `env`); once the device
/// timeline is on, sends each of `steps` (a command, the line it answers), then stops xtrace at
/// once: the records still in the stand-in CUPTI's buffers (the tool library flushes them every
/// 100 ms) reach xtrace all the same, as it asks for them when it stops. Checks that xtrace
/// succeeded and left nothing attached (perf-event uprobes once their background removal ends).
pub fn traced_steps(
    app: &mut Fixture,
    label: &str,
    (flags, env): (&[&str], &[(&str, &str)]),
    steps: &[(&str, &str)],
) -> (Outputs, Finished) {
    let tmp = TempDir::new(label);
    let out_dir = tmp.join("out");
    let before = Attachments::snapshot();
    let mut all = args!["-p", app.pid().to_string()];
    all.extend(flags.iter().map(Into::into));
    all.extend(args!["-o", &out_dir]);
    let mut xtrace = Xtrace::spawn_with_env(all, env);
    xtrace.wait_attached();
    finish_round(app, xtrace, (&before, &out_dir), steps)
}

/// The end of [`traced_steps`] for an `xtrace` attached to `app` already, writing into `out_dir`,
/// the kernel's attachments `before` it started: waits for the device timeline, sends `steps`,
/// stops xtrace and checks it.
pub fn finish_round(
    app: &mut Fixture,
    xtrace: Xtrace,
    (before, out_dir): (&Attachments, &std::path::Path),
    steps: &[(&str, &str)],
) -> (Outputs, Finished) {
    app.send("wait-active");
    assert_eq!(app.next_line(), "active");
    for (command, answer) in steps {
        app.send(command);
        assert_eq!(app.next_line(), *answer, "after {command}");
    }
    xtrace.signal(libc::SIGINT);
    let finished = xtrace.wait();
    finished.assert_success();
    finished.wait_background_removal(crate::SAFETY_TIMEOUT);
    before.assert_none_left();
    (Outputs::read(out_dir), finished)
}

/// One CUDA call by `app` (whose API-exit callback finalizes CUPTI once a deactivation asked for
/// it), then the stand-in CUPTI's counts.
pub fn one_call_then_counts(app: &mut Fixture) -> BTreeMap<String, u64> {
    app.send("work 1");
    assert_eq!(app.next_line(), "done 1");
    app.send("sleep 200");
    app.send("counts");
    counts(&app.next_line())
}

/// The stand-in CUPTI's counts from a `counts ...` line: function (or `records`, `dropped`) →
/// count.
pub fn counts(line: &str) -> BTreeMap<String, u64> {
    let rest = line
        .strip_prefix("counts ")
        .unwrap_or_else(|| panic!("not a counts line: {line:?}"));
    rest.split_whitespace()
        .map(|pair| {
            let (name, n) = pair.split_once('=').expect("name=count");
            (name.to_owned(), n.parse().expect("a count"))
        })
        .collect()
}

/// The device slices of trace.json (category `gpu`), in time order.
pub fn device_slices(out: &Outputs) -> Vec<Span> {
    let mut slices: Vec<Span> = out.spans().into_iter().filter(|s| s.cat == "gpu").collect();
    slices.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    slices
}

/// How many device slices of each name.
pub fn per_name(slices: &[Span]) -> BTreeMap<String, usize> {
    let mut names = BTreeMap::new();
    for s in slices {
        *names.entry(s.name.clone()).or_default() += 1;
    }
    names
}

/// The device slices per name of `rounds` of gpuapp's `work`: each round launches vector_add
/// once and reduce_sum twice, copies each way once and sets memory once.
pub fn expected(rounds: usize) -> BTreeMap<String, usize> {
    [
        ("vector_add", rounds),
        ("reduce_sum", 2 * rounds),
        ("memcpy HtoD", rounds),
        ("memcpy DtoH", rounds),
        ("memset", rounds),
    ]
    .into_iter()
    .map(|(n, c)| (n.to_owned(), c))
    .collect()
}

/// Each of the `kernels` kernel slices among `slices` belongs to its own `cuLaunchKernel` call (the
/// stand-in driver runs a kernel inside its launch call, one launch after another, so the k-th
/// kernel to start is the k-th call's): it lies within that call to within `slack_ns`, in its
/// process, and names the call's thread as `launch_tid`; every device slice, copies and memsets
/// too, has one flow arrow from its call, names that thread, and lies inside the capture's traced
/// CUDA calls (to within `slack_ns`): none from before the attach or after the stop.
pub fn assert_linked_inside_the_capture(out: &Outputs, slices: &[Span], kernels: usize, slack_ns: i64) {
    let mut launches = out.spans_named("cuLaunchKernel");
    launches.sort_by_key(Span::start_ns);
    let mut device_kernels: Vec<&Span> = slices.iter().filter(|s| !s.name.starts_with("mem")).collect();
    device_kernels.sort_by_key(|s| s.start_ns());
    assert_eq!((launches.len(), device_kernels.len()), (kernels, kernels));
    for (kernel, launch) in device_kernels.iter().zip(&launches) {
        assert!(
            launch.start_ns() - slack_ns <= kernel.start_ns()
                && kernel.end_ns() <= launch.end_ns() + slack_ns,
            "{kernel:?} outside its launch {launch:?}"
        );
        assert_eq!(
            (kernel.pid, &kernel.args["launch_tid"]),
            (launch.pid, &launch.tid.into())
        );
    }
    let flows = |ph: &str| out.events.iter().filter(|e| e["ph"] == ph).count();
    assert_eq!((flows("s"), flows("f")), (slices.len(), slices.len()));
    let launcher: &serde_json::Value = &launches[0].tid.into();
    assert!(
        slices.iter().all(|s| &s.args["launch_tid"] == launcher),
        "{slices:?}"
    );
    let calls: Vec<Span> = out
        .spans()
        .into_iter()
        .filter(|s| s.cat != "gpu" && s.name.starts_with("cu"))
        .collect();
    let first = calls.iter().map(Span::start_ns).min().expect("CUDA calls");
    let last = calls.iter().map(Span::end_ns).max().expect("CUDA calls");
    for slice in slices {
        assert!(
            first - slack_ns <= slice.start_ns() && slice.end_ns() <= last + slack_ns,
            "{slice:?} outside the capture's CUDA calls {first}..{last} ns"
        );
    }
}

/// Checks that xtrace's `stderr` says once that `--inject` loaded its library into `pid`, by
/// thread `tid`.
pub fn assert_injected_by(stderr: &[String], pid: u32, tid: u32) {
    let loaded: Vec<&String> = stderr.iter().filter(|l| l.contains("--inject: loaded")).collect();
    assert_eq!(loaded.len(), 1, "{stderr:?}");
    assert!(
        loaded[0].starts_with(&format!(
            "xtrace: warning: --inject: loaded libxtrace_tool.so into pid {pid} (thread {tid} stopped "
        )),
        "{}",
        loaded[0]
    );
}

/// The names of process `pid`'s threads, sorted.
pub fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the fixture's tasks")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .collect();
    names.sort();
    names
}
