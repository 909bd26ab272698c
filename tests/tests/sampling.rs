//! CPU sampling on the real kernel. Fixture `profile` (tests/fixtures/profile.c): `split` spends
//! 75% of its time in hot_a and 25% in hot_b (by the clock, at any optimisation level),
//! `syscalls` lives mostly in the kernel, `jit` runs generated code named in /tmp/perf-PID.map.
//! `profile_rs` (tests/fixtures/profile_rs.rs) is the split as a Rust release build.

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    profile::{assert_split, profile_command},
    require_bpf,
    run::{run_error, Xtrace},
    TempDir,
};

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn split_shares_with_and_without_frame_pointers() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-fp");
    let out = profile_command(args!["-F", "999"], &fixtures().profile, &["split", "1000"], &tmp);
    assert_split(&out, "frame pointers", ["hot_a", "hot_b"]);
    // With frame pointers the whole user stack is walked: main calls split calls hot_a.
    let folded = out.folded();
    let line = folded
        .iter()
        .find(|(stack, _)| stack.ends_with(";split;hot_a"))
        .unwrap_or_else(|| panic!("no main→split→hot_a stack in {folded:?}"));
    assert!(
        line.0.starts_with("profile;"),
        "the process name is the root frame: {}",
        line.0
    );
    assert!(line.0.contains(";main;split;hot_a"), "{}", line.0);
    let total: u64 = folded.iter().map(|(_, n)| n).sum();
    assert_eq!(
        total,
        out.summary["samples"].as_u64().unwrap(),
        "stacks.folded holds every sample"
    );
    let svg = std::fs::read_to_string(out.dir.join("flamegraph.svg")).expect("flamegraph.svg");
    assert!(svg.contains("<svg") && svg.contains("hot_a") && svg.contains("samples at 999 Hz"));

    let tmp = TempDir::new("sample-nofp");
    let out = profile_command(
        args!["-F", "999"],
        &fixtures().profile_nofp,
        &["split", "1000"],
        &tmp,
    );
    assert_split(&out, "-O2 -fomit-frame-pointer", ["hot_a", "hot_b"]);
    // Without frame pointers the stacks are unwound from the copied user stack and the CFI: whole,
    // down to _start.
    assert_unwound(&out, "profile-nofp;_start;", ";main;split;hot_");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn traced_functions_keep_their_callers_in_unwound_stacks() {
    if !require_bpf() {
        return;
    }
    // Return probes on main and on both hot functions put the kernel's trampoline in the place of
    // their return addresses, where the CFI unwinder would stop: each entry's address is put back.
    let tmp = TempDir::new("sample-uretprobe");
    let out = profile_command(
        args![
            "-F",
            "999",
            "-u",
            "main",
            "-u",
            "hot_a",
            "-u",
            "hot_b",
            "--exits",
            "uretprobe"
        ],
        &fixtures().profile_nofp,
        &["split", "1000"],
        &tmp,
    );
    assert_unwound(&out, "profile-nofp;_start;", ";main;split;hot_");
    assert_eq!(out.spans_named("main").len(), 1);
    let rounds = out.spans_named("hot_a").len();
    assert!(rounds >= 1000, "{rounds} rounds of 40..760 µs in 1 s");
    assert_eq!(out.spans_named("hot_b").len(), rounds, "hot_b follows each hot_a");
}

/// Every sample in the split's hot functions (but for 1 in 100: a sample can land where no CFI
/// row applies, such as a PLT stub) has its whole user stack: the process name and `root` first,
/// then `chain` down to the hot function. No stack was cut short, but for samples taken in the
/// return probes' trampoline itself, as a traced call returns (`[uprobes]`, with no callers):
/// exactly those are counted truncated, and they are rare.
fn assert_unwound(out: &Outputs, root: &str, chain: &str) {
    let folded = out.folded();
    let hot: Vec<&(String, u64)> = folded
        .iter()
        .filter(|(stack, _)| stack.contains("hot_"))
        .collect();
    let total: u64 = hot.iter().map(|(_, n)| n).sum();
    let whole: u64 = hot
        .iter()
        .filter(|(stack, _)| stack.starts_with(root) && stack.contains(chain))
        .map(|(_, n)| n)
        .sum();
    assert!(total >= 800, "samples in the hot functions: {total}");
    assert!(
        whole * 100 >= total * 99,
        "{whole} of {total} hot stacks start with {root:?} and hold {chain:?}: {hot:?}"
    );
    let in_trampoline: u64 = folded
        .iter()
        .filter(|(stack, _)| stack.split(';').any(|f| f == "[uprobes]"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(out.summary["truncated_stacks"], in_trampoline, "{folded:?}");
    assert!(in_trampoline * 100 <= total, "{in_trampoline} of {total}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn rust_release_build_unwinds_without_frame_pointers() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-rust");
    let out = profile_command(args!["-F", "999"], &fixtures().profile_rs, &["1000"], &tmp);
    assert_split(
        &out,
        "Rust -C opt-level=3",
        ["profile_rs::hot_a", "profile_rs::hot_b"],
    );
    assert_unwound(
        &out,
        "profile_rs;_start;",
        ";profile_rs::main;profile_rs::split;profile_rs::hot_",
    );

    // 256 bytes of stack reach split's frame but not _start's: the inner frames are kept and the
    // stacks are counted as truncated.
    let tmp = TempDir::new("sample-rust-short");
    let out = profile_command(
        args!["-F", "999", "--user-stack", "256"],
        &fixtures().profile_rs,
        &["300"],
        &tmp,
    );
    let samples = out.summary["samples"].as_u64().unwrap();
    let truncated = out.summary["truncated_stacks"].as_u64().unwrap();
    assert!(
        samples >= 200 && truncated * 100 >= samples * 95,
        "{truncated} of {samples} stacks truncated"
    );
    let folded = out.folded();
    let inner: u64 = folded
        .iter()
        .filter(|(stack, _)| {
            stack.contains(";profile_rs::split;profile_rs::hot_") && !stack.contains("_start")
        })
        .map(|(_, n)| n)
        .sum();
    assert!(inner * 100 >= samples * 90, "{inner} of {samples}: {folded:?}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn pid_without_probes_samples_at_99_hz_and_symbolizes_after_exit() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().profile, &["split", "1500"]);
    fixture.wait_ready();
    let tmp = TempDir::new("sample-pid");
    let out = tmp.join("out");
    let before = Attachments::snapshot();
    let mut xtrace = Xtrace::spawn(args!["-p", fixture.pid().to_string(), "-o", &out]);
    let attached = xtrace.wait_attached();
    assert!(
        attached.contains("the sampler") && attached.contains("at 99 Hz"),
        "{attached}"
    );
    fixture.go();
    assert!(fixture.wait().success());
    // xtrace stops when the process exits and symbolizes it afterwards, from the maps it kept.
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    let out = Outputs::read_profiled(&out);
    assert_eq!(out.stop_reason(), "targets_exited");
    assert_eq!(out.summary["sample_frequency_hz"], 99);
    let samples = out.summary["samples"].as_u64().unwrap();
    assert!(
        (100..=200).contains(&samples),
        "~150 samples at 99 Hz for 1.5 s, got {samples}"
    );
    let (a, b) = out.split_shares(["hot_a", "hot_b"]);
    assert!(
        a > 55.0 && b > 10.0,
        "hot_a {a:.1}%, hot_b {b:.1}% of the split's samples"
    );
    assert!(
        finished.stdout.contains("hot_a"),
        "the terminal summary lists the top functions"
    );
    // Every sample is also an instant event on its thread's track, named by its innermost frame.
    let timeline = out.timeline_samples();
    assert_eq!(timeline.len() as u64, samples);
    assert_eq!(out.summary["timeline_samples"], samples);
    assert!(timeline
        .iter()
        .all(|e| e["ph"] == "i" && e["pid"] == fixture.pid() && e["tid"] == fixture.pid()));
    let on_a = timeline.iter().filter(|e| e["name"] == "hot_a").count() as u64;
    assert_eq!(on_a, out.summary["hot_functions"][0]["self"].as_u64().unwrap());
    let stack = timeline.iter().find(|e| e["name"] == "hot_a").unwrap()["args"]["stack"]
        .as_str()
        .unwrap();
    assert!(stack.ends_with("main;split;hot_a"), "{stack}");
    assert_eq!(out.summary["targets"][0]["exited"], true);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn threads_that_exit_keep_the_names_their_samples_carry() {
    if !require_bpf() {
        return;
    }
    // 20 threads one after another, each naming itself and living ~10 ms: most are gone before
    // their first sample is read, so /proc cannot name them; the samples do.
    let tmp = TempDir::new("sample-threads");
    let out = profile_command(args!["-F", "999"], &fixtures().profile, &["threads", "200"], &tmp);
    // Each spins ~10 ms of its own CPU time: ~10 samples at 999 Hz.
    let spun: Vec<(u64, String)> = out
        .metadata("thread_name")
        .iter()
        .filter(|e| e["tid"] != e["pid"])
        .map(|e| {
            (
                e["tid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut names: Vec<&str> = spun.iter().map(|(_, name)| name.as_str()).collect();
    names.sort_by_key(|name| {
        name.trim_start_matches("spin-")
            .parse::<u32>()
            .unwrap_or(u32::MAX)
    });
    let expected: Vec<String> = (0..20).map(|i| format!("spin-{i}")).collect();
    assert_eq!(names, expected);
    // Every sample is on a named thread.
    let tids: std::collections::HashSet<u64> = spun.iter().map(|(tid, _)| *tid).collect();
    let timeline = out.timeline_samples();
    let main = timeline[0]["pid"].clone();
    assert!(timeline
        .iter()
        .filter(|e| e["tid"] != main)
        .all(|e| tids.contains(&e["tid"].as_u64().unwrap())));
}

/// Samples of a hot traced function keep its callers while the kernel handles its probes:
/// `tiny_step` (profile-nofp, no frame pointers) starts with a RIP-relative `mov` the kernel
/// single-steps in its `[uprobes]` page, and it returns through the return probes' trampoline
/// there. In the breakpoint's trap, in the step and in the trampoline, the thread's registers are
/// put back where the program is, so whole stacks (`main;probed_loop;...`) hold nearly every
/// sample. (Before, 53 of 499 did.)
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn samples_in_a_traced_functions_probes_keep_their_callers() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-probed");
    let flags = args!["-F", "999", "-u", "tiny_step"];
    let out = profile_command(flags, &fixtures().profile_nofp, &["probed", "500"], &tmp);
    assert!(out.probe_count("tiny_step") > 10_000);
    let folded = out.folded();
    let total: u64 = folded.iter().map(|(_, n)| n).sum();
    let whole: u64 = folded
        .iter()
        .filter(|(stack, _)| stack.contains(";main;probed_loop"))
        .map(|(_, n)| n)
        .sum();
    assert!(total >= 300, "{total} samples");
    assert!(whole * 100 >= total * 90, "{whole} of {total} whole: {folded:?}");
    let truncated = u64_field(&out.summary, "truncated_stacks");
    assert!(truncated * 100 <= total * 10, "{truncated} of {total} truncated");
    // Samples taken while the probes' programs ran are in those programs, named as perf names
    // them (`bpf_prog_<tag>_span_enter`), not after the kernel image's last symbol, which is data
    // (`__stop_runtime_ptr_USER_PTR_MAX`): the programs are gone from kallsyms when frames are
    // named.
    let frames = || folded.iter().flat_map(|(stack, _)| stack.split(';'));
    assert!(
        !frames().any(|f| f.starts_with("__stop_") || f.starts_with("__start_")),
        "{folded:?}"
    );
    let in_programs: u64 = folded
        .iter()
        .filter(|(stack, _)| {
            stack.split(';').any(|f| {
                f.strip_prefix("bpf_prog_")
                    .and_then(|rest| rest.split_once('_'))
                    .is_some_and(|(tag, name)| {
                        tag.len() == 16 && name.starts_with("span_") && name.ends_with("_[k]")
                    })
            })
        })
        .map(|(_, n)| n)
        .sum();
    assert!(in_programs > 0, "{folded:?}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_pid_that_exits_mid_capture_is_noted() {
    if !require_bpf() {
        return;
    }
    let mut short = Fixture::spawn(&fixtures().profile, &["split", "300"]);
    short.wait_ready();
    let long = Fixture::spin();
    let tmp = TempDir::new("sample-gone");
    let out = tmp.join("out");
    let pids = (short.pid().to_string(), long.pid().to_string());
    let mut xtrace = Xtrace::spawn(args!["-p", &pids.0, "-p", &pids.1, "-d", "1.5", "-o", &out]);
    xtrace.wait_attached();
    short.go();
    assert!(short.wait().success());
    let finished = xtrace.wait();
    finished.assert_success();
    let out = Outputs::read_profiled(&out);
    assert_eq!(out.stop_reason(), "duration");
    let exited: Vec<(u64, bool)> = out.summary["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["pid"].as_u64().unwrap(), t["exited"].as_bool().unwrap()))
        .collect();
    let mut expected = vec![(u64::from(short.pid()), true), (u64::from(long.pid()), false)];
    expected.sort_unstable();
    assert_eq!(exited, expected);
    let line = format!("pid {} (profile) exited during the capture", short.pid());
    assert!(finished.stdout.contains(&line), "{}", finished.stdout);
    // Its samples were symbolized after it had gone.
    assert!(out.self_share("hot_a") > 0.0);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn kernel_frames_of_a_syscall_heavy_process() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-kernel");
    let out = profile_command(
        args!["-F", "999"],
        &fixtures().profile,
        &["syscalls", "800"],
        &tmp,
    );
    let folded = out.folded();
    let total: u64 = folded.iter().map(|(_, n)| n).sum();
    let in_kernel: u64 = folded
        .iter()
        .filter(|(stack, _)| stack.ends_with("_[k]"))
        .map(|(_, n)| n)
        .sum();
    assert!(
        in_kernel * 100 >= total * 30,
        "{in_kernel} of {total} samples end in a kernel frame"
    );
    // Kernel frames sit on top of the user stack that made the system call (libc's frameless
    // syscall wrappers hide their caller from a frame-pointer walk, so main is what is seen).
    assert!(
        folded.iter().any(|(stack, _)| stack.starts_with("profile;")
            && stack.contains(";main;")
            && stack.contains("do_syscall_64_[k]")),
        "{folded:?}"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn bad_frequencies_are_refused() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().profile, &["split", "100"]);
    fixture.wait_ready();
    let pid = fixture.pid().to_string();
    let line = run_error(args!["-p", &pid, "-F", "0"]);
    assert!(line.contains("-F") || line.contains("freq"), "{line}");
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let line = run_error(args!["-p", &pid, "-F", (max + 1).to_string()]);
    assert!(line.contains(&format!("sampling limit of {max} Hz")), "{line}");
}

/// A thread that never runs while sampled (blocked at the fixture's barrier) has no samples: the
/// capture says 0, stacks.folded is empty, the flamegraph says so, and the summary lists no
/// function.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_capture_without_samples_writes_empty_profiles() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(&fixtures().spans, &["threads", "2", "1"]);
    let tids = fixture.wait_ready_tids();
    let tmp = TempDir::new("no-samples");
    let out = tmp.join("out");
    let finished = Xtrace::spawn(args![
        "-p",
        fixture.pid().to_string(),
        "--tid",
        tids[0].to_string(),
        "-F",
        "999",
        "-d",
        "0.5",
        "-o",
        &out
    ])
    .wait();
    finished.assert_success();
    fixture.go();
    assert!(fixture.wait().success());
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["samples"], 0);
    assert_eq!(std::fs::read(out.join("stacks.folded")).unwrap(), b"");
    let svg = std::fs::read_to_string(out.join("flamegraph.svg")).unwrap();
    assert!(svg.contains(">no samples<"), "{svg}");
    let table = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(table.contains("0 samples at 999 Hz"), "{table}");
    assert!(!table.contains("FUNCTION"), "{table}");
}

/// Samples in a signal handler keep the code the signal interrupted below it: the unwind goes
/// from the handler's return into glibc's signal-return trampoline to the registers the kernel
/// saved in the signal frame (`profile signal`: handler_work runs from a SIGPROF above
/// signal_loop). Before, a build with frame pointers lost signal_loop silently, and one without
/// them stopped at the trampoline.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn samples_in_a_signal_handler_keep_the_interrupted_code_below_it() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-signal");
    let out = profile_command(args!["-F", "999"], &fixtures().profile, &["signal", "600"], &tmp);
    let below =
        |caller: &str| out.samples_where(|s| s.split(';').any(|f| f == "handler_work") && s.contains(caller));
    let total = below("");
    assert!(total >= 50, "{total} samples in the handler: {:?}", out.folded());
    assert!(
        below(";main;signal_loop;") * 100 >= total * 95,
        "{total} in the handler: {:?}",
        out.folded()
    );
    // The interrupted instruction itself: most often in signal_leaf, the loop's body (a walk by
    // frame pointers from the handler goes to its caller, skipping it).
    assert!(
        below(";signal_loop;signal_leaf;") * 2 >= total,
        "{total} in the handler: {:?}",
        out.folded()
    );
}

/// The instruction a signal interrupted is named from its own address, not from the byte before
/// it as a return address is: a fault on load_first's first instruction shows load_first under
/// the handler (before_load, the function before it, did before), then the signal-return
/// trampoline (glibc's `__restore_rt` where libc's symbols name it), then the handler.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_fault_on_a_functions_first_instruction_names_that_function() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-fault");
    let out = profile_command(args!["-F", "999"], &fixtures().profile, &["fault", "500"], &tmp);
    let in_handler = out.samples_where(|s| s.contains(";on_sigsegv"));
    let named = out.samples_where(|s| {
        let frames: Vec<&str> = s.split(';').collect();
        frames
            .windows(4)
            .any(|w| w[0] == "fault_loop" && w[1] == "load_first" && w[3] == "on_sigsegv")
    });
    assert!(in_handler >= 100, "{:?}", out.folded());
    assert_eq!(named, in_handler, "{:?}", out.folded());
    assert_eq!(out.samples_where(|s| s.contains("before_load")), 0);
}
