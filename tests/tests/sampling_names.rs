//! How CPU samples' frames are named, on the real kernel: C and C++ names, PLT stubs, JIT code
//! from /tmp/perf-PID.map, stripped files and compressed debug sections, and files that change
//! under a process (deleted, replaced, plugins loaded in turn, exec). Fixture `profile`
//! (tests/fixtures/profile.c); its `split` spends 75% of its time in hot_a and 25% in hot_b.

use std::path::Path;

use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    profile::{assert_split, profile_command},
    require_bpf,
    run::{symbol_offset, Xtrace},
    TempDir,
};

/// A PLT stub has no symbol of its own: it is named for the function its GOT slot holds, as perf
/// does, not for the symbol before it (`_init`).
/// C functions named `f` and `St` are named so in samples, as in spans, not `float` and `std`
/// (what a C++ demangler makes of them as type codes): both frames, under main, in the folded
/// stacks, the profile and the flamegraph.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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

/// A `--pid` process whose executable was deleted, or replaced on disk by another program renamed
/// over it (a package upgrade), is named from the file it runs (read through /proc/PID/map_files),
/// never from the file now at its path: `spans`, whose `work` and `main` are elsewhere.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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

/// Samples taken before an exec keep the name their process had then: a shell that counts for a
/// while and then execs `profile split` roots its own samples at `sh` and the program's at
/// `profile` (all were rooted at `profile`, the process's last name, before).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
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
