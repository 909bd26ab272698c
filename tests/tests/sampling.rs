//! CPU sampling on the real kernel. Fixture `profile` (tests/fixtures/profile.c): `split` spends
//! 75% of its time in hot_a and 25% in hot_b (by the clock, at any optimisation level),
//! `syscalls` lives mostly in the kernel, `jit` runs generated code named in /tmp/perf-PID.map.
//! `profile_rs` (tests/fixtures/profile_rs.rs) is the split as a Rust release build.

use std::{ffi::OsString, path::Path};

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{run_error, symbol_offset, Xtrace},
    TempDir,
};

/// `xtrace FLAGS -o OUT -- PROGRAM ARGS` to its end (stdin is /dev/null, so the fixture does not
/// wait for a go line); returns the outputs. The command ended by itself, and the summary says so
/// (it said `ended_by_xtrace` in 4 of 20 such runs when the stop came before its waiter had
/// reported its exit).
fn profile_command(flags: Vec<OsString>, program: &Path, program_args: &[&str], tmp: &TempDir) -> Outputs {
    let out = tmp.join("out");
    let before = Attachments::snapshot();
    let mut all = flags;
    all.extend(args!["-o", &out, "--", program]);
    all.extend(program_args.iter().map(OsString::from));
    let finished = Xtrace::spawn(all).wait();
    finished.assert_success();
    before.assert_none_left();
    let out = Outputs::read_profiled(&out);
    let command = &out.summary["command"];
    assert_eq!(command["ended_by_xtrace"], false, "{command}");
    assert_eq!(command["exit_code"], 0, "{command}");
    assert_eq!(out.summary["targets"][0]["exited"], true);
    out
}

fn assert_split(out: &Outputs, build: &str, [hot_a, hot_b]: [&str; 2]) {
    let samples = out.summary["samples"].as_u64().unwrap();
    assert!(
        (800..=1200).contains(&samples),
        "{build}: ~1000 samples at 999 Hz for 1 s, got {samples}"
    );
    let (a, b) = out.split_shares([hot_a, hot_b]);
    assert!(
        (a - 75.0).abs() <= 5.0,
        "{build}: {hot_a} {a:.1}%, {hot_b} {b:.1}% of the split's samples, expected 75/25 ± 5"
    );
    // Most samples are named by the hot function itself, not only by a frame further out.
    let named = out.self_share(hot_a) + out.self_share(hot_b);
    assert!(
        named >= 80.0,
        "{build}: {hot_a} and {hot_b} are the innermost frame of {named:.1}% of samples, expected ≥ 80"
    );
    assert_eq!(out.summary["sample_frequency_hz"], 999);
}

#[test]
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

/// A PLT stub has no symbol of its own: it is named for the function its GOT slot holds, as perf
/// does, not for the symbol before it (`_init`).
/// C functions named `f` and `St` are named so in samples, as in spans, not `float` and `std`
/// (what a C++ demangler makes of them as type codes): both frames, under main, in the folded
/// stacks, the profile and the flamegraph.
#[test]
fn short_c_names_are_not_read_as_cxx_type_codes() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-names");
    let out = profile_command(
        args!["-F", "999", "-u", "f", "-u", "St"],
        &fixtures().profile,
        &["names", "400"],
        &tmp,
    );
    let folded = out.folded();
    let leaf = |name: &str| -> u64 {
        folded
            .iter()
            .filter(|(stack, _)| stack.ends_with(&format!(";main;{name}")))
            .map(|(_, n)| n)
            .sum()
    };
    assert!(leaf("f") > 50 && leaf("St") > 50, "{folded:?}");
    for wrong in ["float", "std"] {
        assert!(
            folded
                .iter()
                .all(|(stack, _)| !stack.split(';').any(|f| f == wrong)),
            "{wrong}: {folded:?}"
        );
    }
    assert_eq!(out.probe_count("f"), 1);
    assert_eq!(out.probe_count("St"), 1);
    let svg = std::fs::read_to_string(tmp.join("out/flamegraph.svg")).expect("flamegraph.svg");
    assert!(
        svg.contains(">St ") || svg.contains("<title>St "),
        "St in the flamegraph"
    );
    assert!(
        !svg.contains("<title>float ") && !svg.contains("<title>std "),
        "{svg}"
    );
}

/// Samples of a hot traced function keep its callers while the kernel handles its probes:
/// `tiny_step` (profile-nofp, no frame pointers) starts with a RIP-relative `mov` the kernel
/// single-steps in its `[uprobes]` page, and it returns through the return probes' trampoline
/// there. In the breakpoint's trap, in the step and in the trampoline, the thread's registers are
/// put back where the program is, so whole stacks (`main;probed_loop;...`) hold nearly every
/// sample. (Before, 53 of 499 did.)
#[test]
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
fn plt_stubs_are_named_for_their_function() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-plt");
    let out = profile_command(args!["-F", "999"], &fixtures().profile, &["libc", "1000"], &tmp);
    let folded = out.folded();
    let in_stub: u64 = folded
        .iter()
        .filter(|(stack, _)| stack.ends_with(";main;libc_calls;rand_r@plt"))
        .map(|(_, n)| n)
        .sum();
    assert!(in_stub > 0, "no sample in rand_r's stub: {folded:?}");
    assert!(
        folded
            .iter()
            .all(|(stack, _)| !stack.split(';').any(|f| f == "_init")),
        "{folded:?}"
    );
}

#[test]
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

/// A `--pid` process whose executable was deleted, or replaced on disk by another program renamed
/// over it (a package upgrade), is named from the file it runs (read through /proc/PID/map_files),
/// never from the file now at its path: `spans`, whose `work` and `main` are elsewhere.
#[test]
fn a_deleted_or_replaced_executable_is_named_from_the_file_it_runs() {
    if !require_bpf() {
        return;
    }
    for replaced in [false, true] {
        let tmp = TempDir::new("sample-replaced");
        let app = tmp.join("app");
        std::fs::copy(&fixtures().profile, &app).unwrap();
        let mut fixture = Fixture::spawn(&app, &["split", "2000"]);
        fixture.wait_ready();
        fixture.go();
        if replaced {
            let other = tmp.join("other");
            std::fs::copy(&fixtures().spans, &other).unwrap();
            std::fs::rename(&other, &app).unwrap();
        } else {
            std::fs::remove_file(&app).unwrap();
        }
        let out = tmp.join("out");
        let pid = fixture.pid().to_string();
        let xtrace = Xtrace::spawn(args!["-p", &pid, "-F", "199", "-d", "0.6", "-o", &out]);
        xtrace.wait().assert_success();
        let out = Outputs::read_profiled(&out);
        let folded = out.folded();
        assert!(out.self_share("hot_a") > 30.0, "replaced: {replaced}: {folded:?}");
        assert!(out.self_share("hot_b") > 5.0, "replaced: {replaced}: {folded:?}");
        let in_main = folded
            .iter()
            .filter(|(stack, _)| stack.contains(";main;split;hot_"))
            .count();
        assert!(in_main > 0, "callers named: {folded:?}");
        assert!(
            folded
                .iter()
                .all(|(stack, _)| !stack.split(';').any(|f| f == "work")),
            "named from the other program: {folded:?}"
        );
    }
}

/// A plugin unloaded and another loaded in its place (the same address) does not name the first
/// one's samples, nor does the first loaded again name the second's: `plugins` spends a quarter
/// each in plugin_a, plugin_b, plugin_a, plugin_b. Before, every sample took the name of the
/// library mapped last at that address.
#[test]
fn plugins_loaded_in_turn_at_one_address_name_their_own_samples() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-plugins");
    let out = profile_command(args!["-F", "999"], &fixtures().profile, &["plugins", "800"], &tmp);
    let folded = out.folded();
    let count = |name: &str| -> u64 {
        folded
            .iter()
            .filter(|(stack, _)| stack.split(';').any(|f| f == name))
            .map(|(_, n)| n)
            .sum()
    };
    let (a, b) = (count("plugin_a"), count("plugin_b"));
    assert!(a + b >= 600, "{a} + {b} samples in the plugins: {folded:?}");
    assert!(
        a * 100 >= (a + b) * 35 && b * 100 >= (a + b) * 35,
        "plugin_a {a}, plugin_b {b}: each about half"
    );
    // On the timeline, the four 200 ms rounds are a, b, a, b.
    let mut rounds: Vec<&str> = Vec::new();
    for sample in out.timeline_samples() {
        let stack = sample["args"]["stack"].as_str().unwrap_or("");
        let name = ["plugin_a", "plugin_b"].into_iter().find(|n| stack.contains(n));
        if let Some(name) = name {
            if rounds.last() != Some(&name) {
                rounds.push(name);
            }
        }
    }
    assert_eq!(rounds, ["plugin_a", "plugin_b", "plugin_a", "plugin_b"]);
}

#[test]
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
fn jit_code_named_from_the_perf_map() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-jit");
    let out = profile_command(args!["-F", "999"], &fixtures().profile, &["jit", "500"], &tmp);
    let share = out.self_share("jitted_spin");
    assert!(
        share > 80.0,
        "jitted_spin has {share:.1}% of samples: {}",
        out.summary["hot_functions"]
    );
}

/// Debug sections compressed with zlib (`-gz=zlib`, as distributions ship debug files) are read;
/// and a file whose debug sections cannot be read (marked zstd-compressed here, which xtrace's
/// symbolizer does not decompress) is named from its symbol table instead: either way the split's
/// functions are named, and no frame of the file is a bare module+offset.
#[test]
fn compressed_debug_sections_keep_frame_names() {
    if !require_bpf() {
        return;
    }
    let zlib = &fixtures().profile_gz;
    let tmp = TempDir::new("sample-zlib");
    let out = profile_command(args!["-F", "999"], zlib, &["split", "1000"], &tmp);
    assert_split(&out, "-gz=zlib", ["hot_a", "hot_b"]);
    assert_no_offsets(&out, "profile-gz+0x");

    let tmp = TempDir::new("sample-zstd");
    let unreadable = tmp.join("profile-zstd");
    let mut elf = std::fs::read(zlib).expect("reading profile-gz");
    assert!(
        mark_compressed_sections_zstd(&mut elf) >= 3,
        "-gz=zlib compressed the DWARF"
    );
    std::fs::write(&unreadable, elf).unwrap();
    std::fs::set_permissions(&unreadable, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = profile_command(args!["-F", "999"], &unreadable, &["split", "1000"], &tmp);
    assert_split(&out, "debug sections marked zstd", ["hot_a", "hot_b"]);
    assert_no_offsets(&out, "profile-zstd+0x");
}

fn assert_no_offsets(out: &Outputs, module_offset: &str) {
    let folded = out.folded();
    let unnamed: Vec<&(String, u64)> = folded
        .iter()
        .filter(|(stack, _)| stack.contains(module_offset))
        .collect();
    assert!(unnamed.is_empty(), "unnamed frames: {unnamed:?}");
}

/// Rewrites the `ch_type` of every SHF_COMPRESSED section of a 64-bit little-endian ELF image to
/// ELFCOMPRESS_ZSTD; returns how many sections it marked.
fn mark_compressed_sections_zstd(elf: &mut [u8]) -> usize {
    const SHF_COMPRESSED: u64 = 0x800;
    const ELFCOMPRESS_ZSTD: u32 = 2;
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap()) as usize;
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    assert_eq!(&elf[..6], b"\x7fELF\x02\x01", "a 64-bit little-endian ELF");
    let (shoff, shentsize, shnum) = (u64_at(elf, 0x28) as usize, u16_at(elf, 0x3a), u16_at(elf, 0x3c));
    let mut marked = 0;
    for i in 0..shnum {
        let header = shoff + i * shentsize;
        let (flags, offset) = (u64_at(elf, header + 8), u64_at(elf, header + 24) as usize);
        if flags & SHF_COMPRESSED != 0 {
            elf[offset..offset + 4].copy_from_slice(&ELFCOMPRESS_ZSTD.to_le_bytes());
            marked += 1;
        }
    }
    marked
}

/// Without symbols, frames are module+offset, and every sample in a function is one frame, at the
/// start of the function its unwind entry (.eh_frame) covers: the split's shares come out as with
/// symbols.
#[test]
fn stripped_binary_frames_are_module_offsets_of_their_functions() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-stripped");
    let stripped = tmp.join("profile-stripped");
    let status = std::process::Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&fixtures().profile)
        .status()
        .expect("running strip (binutils)");
    assert!(status.success());
    let name = |symbol| {
        format!(
            "profile-stripped+{:#x}",
            symbol_offset(&fixtures().profile, symbol)
        )
    };
    let (hot_a, hot_b) = (name("hot_a"), name("hot_b"));
    let out = profile_command(args!["-F", "999"], &stripped, &["split", "1000"], &tmp);
    assert_split(&out, "stripped", [&hot_a, &hot_b]);
    let main = name("main");
    let through_main: u64 = out
        .folded()
        .iter()
        .filter(|(stack, _)| stack.split(';').any(|frame| frame == main))
        .map(|(_, n)| n)
        .sum();
    let samples = out.summary["samples"].as_u64().unwrap();
    assert!(
        through_main * 100 >= samples * 99,
        "{through_main} of {samples} samples under {main}"
    );
}

#[test]
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

/// Samples taken before an exec keep the name their process had then: a shell that counts for a
/// while and then execs `profile split` roots its own samples at `sh` and the program's at
/// `profile` (all were rooted at `profile`, the process's last name, before).
#[test]
fn samples_before_an_exec_keep_the_old_programs_name() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-exec-name");
    let script = format!(
        "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec {} split 300",
        fixtures().profile.display()
    );
    let out = profile_command(args!["-F", "999"], Path::new("sh"), &["-c", &script], &tmp);
    let frames = |stack: &str| stack.split(';').map(str::to_owned).collect::<Vec<_>>();
    let under = |root: &str, frame: &str| {
        out.samples_where(|s| {
            let f = frames(s);
            f[0] == root && (frame.is_empty() || f.iter().any(|x| x == frame))
        })
    };
    assert!(under("sh", "") >= 30, "{:?}", out.folded());
    assert!(under("profile", "hot_a") >= 50, "{:?}", out.folded());
    assert_eq!(
        under("sh", "hot_a") + under("sh", "split"),
        0,
        "{:?}",
        out.folded()
    );
    // Samples of the command before its exec (xtrace's launcher code, in user mode or in the
    // kernel in the exec) are left out, as `perf record -- CMD` counts from the exec.
    let launcher = out.samples_where(|s| s.contains("xtrace::"));
    assert_eq!(launcher, 0, "{:?}", out.folded());
}

/// Two C++ functions of one DWARF name (`burn` in an anonymous namespace and in
/// `img::(anonymous namespace)`, which GCC's debug info gives no linkage name) are named apart
/// by their symbols' linkage names: each has its own half of the samples (one `burn` had all).
#[test]
fn cpp_functions_of_one_debug_name_are_named_apart() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("sample-cpp-anonymous");
    let out = profile_command(args!["-F", "999"], &fixtures().matrix, &["spin", "600"], &tmp);
    let leaf = |name: &str| out.samples_where(|s| s.rsplit(';').next() == Some(name));
    let (plain, img) = (
        leaf("(anonymous namespace)::burn(double)"),
        leaf("img::(anonymous namespace)::burn(double)"),
    );
    assert!(
        plain >= 100 && img >= 100,
        "{plain} and {img}: {:?}",
        out.folded()
    );
    assert_eq!(leaf("burn"), 0, "{:?}", out.folded());
}

/// Samples in a signal handler keep the code the signal interrupted below it: the unwind goes
/// from the handler's return into glibc's signal-return trampoline to the registers the kernel
/// saved in the signal frame (`profile signal`: handler_work runs from a SIGPROF above
/// signal_loop). Before, a build with frame pointers lost signal_loop silently, and one without
/// them stopped at the trampoline.
#[test]
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
