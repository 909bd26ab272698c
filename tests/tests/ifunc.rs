//! GNU indirect functions (IFUNCs): glibc's `strlen`, `memcpy`, `strcmp` and most of libm are
//! resolvers that pick an implementation by CPU at load time. A probe on the symbol's address
//! records nothing but the dynamic linker's one call (bpftrace and perf probe do that); xtrace
//! probes the implementation the resolver picks. Fixtures: `calls ifunc` (strlen through a
//! function pointer 7 times, on a marker string) and libxtfix.so's `pick_ifunc`, an IFUNC of a
//! library xtrace does not load itself.

use serde_json::json;
use xtrace_tests::{
    args,
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::{listed_symbols, run_error, trace_fixture_to_exit, trace_new_fixture},
    TempDir,
};

const MARKER: &str = "ifunc-marker-0123456789";

/// The C library this test process runs with, and the file offset of the strlen code its calls
/// reach (what the dynamic linker's run of the resolver picked here, on this CPU).
fn own_strlen() -> (String, u64) {
    // SAFETY: dlsym with a NUL-terminated name.
    let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"strlen".as_ptr()) } as u64;
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (start, end) = fields[0].split_once('-').expect("range");
        let (start, end) = (
            u64::from_str_radix(start, 16).unwrap(),
            u64::from_str_radix(end, 16).unwrap(),
        );
        if (start..end).contains(&address) {
            let offset = u64::from_str_radix(fields[2], 16).unwrap();
            return (fields[5].to_owned(), address - start + offset);
        }
    }
    panic!("strlen at {address:#x} is in no mapping")
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn strlen_is_traced_where_its_resolver_points() {
    if !require_bpf() {
        return;
    }
    let (libc_path, implementation) = own_strlen();
    let rows = listed_symbols(args![&libc_path, "strlen"]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][0], format!("{implementation:#x}"), "{rows:?}");
    assert_eq!(rows[0][4], "strlen");

    let (out, finished) = trace_new_fixture(
        &fixtures().calls,
        &["ifunc"],
        &["libc:strlen(str) -> u64"],
        "ifunc-strlen",
    );
    finished.assert_success();
    assert_eq!(out.probe("strlen")["offset"], json!(rows[0][3]));
    assert_marker_calls(&out);
}

/// A process whose C library is another file than xtrace's (as in a container: here a copy, found
/// through LD_LIBRARY_PATH) has its strlen resolved from the slot the dynamic linker filled in it:
/// the same code as in xtrace's own copy.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn strlen_of_another_libc_file_is_read_from_the_process() {
    if !require_bpf() {
        return;
    }
    let (libc_path, _) = own_strlen();
    let tmp = TempDir::new("ifunc-other-libc");
    let dir = tmp.join("lib");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(std::path::Path::new(&libc_path).file_name().unwrap());
    std::fs::copy(&libc_path, &copy).unwrap();
    let system = listed_symbols(args![&libc_path, "strlen"]);

    let mut fixture = Fixture::spawn_with_env(&fixtures().calls, &["ifunc"], &[("LD_LIBRARY_PATH", &dir)]);
    fixture.wait_ready();
    let pid = fixture.pid().to_string();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(
        maps.contains(copy.to_str().unwrap()),
        "the fixture runs with the copy:\n{maps}"
    );
    let listed = listed_symbols(args!["--pid", &pid, "libc:strlen"]);
    assert_eq!(listed, system, "resolved in the process as in xtrace");
    let out_dir = tmp.join("out");
    trace_fixture_to_exit(&mut fixture, &["libc:strlen(str) -> u64"], &out_dir);
    let out = Outputs::read(&out_dir);
    assert_eq!(out.probe("strlen")["target"], json!(copy.to_str().unwrap()));
    assert_eq!(out.probe("strlen")["offset"], json!(system[0][3]));
    assert_marker_calls(&out);
}

/// A process that sees other CPU features than xtrace (GLIBC_TUNABLES masking AVX and AVX2) picks
/// another strlen (SSE2); traced with `--pid`, strlen is probed where the process's own slot
/// points, not where xtrace's copy of libc resolves it, and its 7 marker calls are exact.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_process_with_other_cpu_features_is_traced_at_its_own_choice() {
    if !require_bpf() {
        return;
    }
    let (libc_path, _) = own_strlen();
    let system = listed_symbols(args![&libc_path, "strlen"]);
    let masked = std::path::Path::new("glibc.cpu.hwcaps=-AVX2,-AVX512F,-AVX512VL,-AVX512BW,-AVX,-BMI2");
    let mut fixture = Fixture::spawn_with_env(&fixtures().calls, &["ifunc"], &[("GLIBC_TUNABLES", masked)]);
    fixture.wait_ready();
    let pid = fixture.pid().to_string();
    let listed = listed_symbols(args!["--pid", &pid, "libc:strlen"]);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_ne!(
        listed[0][0], system[0][0],
        "with AVX and AVX2 masked (this machine has them), glibc picks another strlen"
    );
    let tmp = TempDir::new("ifunc-tunables");
    let out_dir = tmp.join("out");
    trace_fixture_to_exit(&mut fixture, &["libc:strlen(str) -> u64"], &out_dir);
    let out = Outputs::read(&out_dir);
    assert_eq!(out.probe("strlen")["offset"], json!(listed[0][3]));
    assert_marker_calls(&out);
}

/// A static executable holds glibc's IFUNCs itself: the running process's IRELATIVE slots (in
/// `.rela.plt`, with no dynamic section) give strlen's code; a command about to be launched has
/// none yet, and its strlen is refused.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn strlen_of_a_static_executable_is_read_from_the_process() {
    if !require_bpf() {
        return;
    }
    let program = fixtures().calls_static.to_str().expect("UTF-8 path").to_owned();
    let unstarted = listed_symbols(args![&program, "strlen"]);
    assert_eq!(unstarted.len(), 1, "{unstarted:?}");
    assert_eq!(unstarted[0][3], "-", "{unstarted:?}");
    let line = run_error(args!["-u", "strlen", "--", &program, "ifunc"]);
    assert!(
        line.starts_with(&format!(
            "xtrace: error: {program}: cannot trace `strlen`: it is a GNU indirect function (IFUNC)"
        )),
        "{line}"
    );

    let mut fixture = Fixture::spawn(&fixtures().calls_static, &["ifunc"]);
    fixture.wait_ready();
    let pid = fixture.pid().to_string();
    let listed = listed_symbols(args!["--pid", &pid, "strlen"]);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_ne!(
        listed[0][0], unstarted[0][0],
        "the implementation, not the resolver"
    );
    assert_ne!(listed[0][3], "-", "{listed:?}");
    let tmp = TempDir::new("ifunc-static");
    let out_dir = tmp.join("out");
    trace_fixture_to_exit(&mut fixture, &["strlen(str) -> u64"], &out_dir);
    let out = Outputs::read(&out_dir);
    assert_eq!(out.probe("strlen")["offset"], json!(listed[0][3]));
    assert_marker_calls(&out);
}

/// glibc's `time` picks the kernel's vDSO, where no uprobe can go.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn an_ifunc_that_picks_the_vdso_is_refused() {
    if !require_bpf() {
        return;
    }
    let spans = fixtures().spans.to_str().expect("UTF-8 path").to_owned();
    let (libc_path, _) = own_strlen();
    let line = run_error(args![
        "-u",
        format!("{libc_path}:time"),
        "--",
        &spans,
        "exit",
        "0"
    ]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: {libc_path}: cannot trace `time`: it is a GNU indirect function \
             (IFUNC) whose resolver picks code outside this file (the kernel's vDSO), where uprobes \
             cannot go; trace a function that calls it"
        )
    );
}

/// The fixture's 7 strlen calls on its marker, told from libc's own by their argument, with their
/// exact arguments and results.
fn assert_marker_calls(out: &Outputs) {
    let mut ours: Vec<_> = out
        .spans_named("strlen")
        .into_iter()
        .filter(|s| {
            s.args["arg0"]
                .as_str()
                .is_some_and(|a| MARKER.ends_with(a) && a.len() >= 17)
        })
        .collect();
    ours.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    assert_eq!(ours.len(), 7, "{ours:?}");
    for (k, span) in ours.iter().enumerate() {
        assert_eq!(span.args["arg0"], json!(&MARKER[k..]), "call {k}");
        assert_eq!(span.args["ret"], json!(23 - k), "call {k}");
    }
    assert_eq!(out.lost_events(), 0);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn an_ifunc_of_a_library_xtrace_has_not_loaded_is_refused_by_name() {
    if !require_bpf() {
        return;
    }
    let lib = fixtures().libxtfix.to_str().expect("UTF-8 path").to_owned();
    let mut fixture = Fixture::spawn(&fixtures().uselib, &[]);
    fixture.wait_ready();
    let tmp = TempDir::new("ifunc-refused");
    let line = run_error(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        format!("{lib}:pick_ifunc"),
        "-o",
        tmp.join("out")
    ]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: {lib}: cannot trace `pick_ifunc`: it is a GNU indirect function (IFUNC), \
             whose code a resolver picks when the library is loaded; xtrace runs the resolvers only \
             of libraries it has loaded itself (libc, libm), and finds what the others picked only \
             in a traced process (--pid) whose library has a slot for it; trace the implementation \
             by its own name (`xtrace list symbols` lists the file's functions) or a function that \
             calls it"
        )
    );
    let rows = listed_symbols(args![&lib, "pick_ifunc"]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][3..], ["-", "pick_ifunc"]);
}

/// Traces libxtfix's functions that `glob` matches in a running `uselib` until it exits, checks
/// the warning that leaves the unresolved IFUNC `pick_ifunc` out, and returns the outputs.
fn uselib_leaving_pick_ifunc_out(glob: &str, tmp: &TempDir) -> Outputs {
    let lib = fixtures().libxtfix.to_str().expect("UTF-8 path").to_owned();
    let mut fixture = Fixture::spawn(&fixtures().uselib, &[]);
    fixture.wait_ready();
    let out_dir = tmp.join("out");
    let spec = format!("{lib}:{glob}");
    let finished = trace_fixture_to_exit(&mut fixture, &[&spec], &out_dir);
    let warning = format!(
        "xtrace: warning: {lib}: 1 matched function(s) are GNU indirect functions (IFUNCs) whose \
         code is unknown (a library xtrace has not loaded itself, with no slot for them filled in a \
         traced process), and they are not traced: pick_ifunc"
    );
    assert!(finished.stderr.contains(&warning), "{:#?}", finished.stderr);
    Outputs::read(&out_dir)
}

/// A glob leaves such an IFUNC out with a warning and traces the rest.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_glob_leaves_an_unresolved_ifunc_out() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ifunc-glob");
    let out = uselib_leaving_pick_ifunc_out("[lp]i*", &tmp);
    assert_eq!(out.probe_count("lib_work"), 7);
    assert_eq!(out.spans().len(), 7);
}

/// An IFUNC whose code is unknown stands at its resolver's address, and is no alias of it: a glob
/// that matches both leaves the IFUNC out and traces the resolver (which had been dropped as the
/// IFUNC's alias, and left out with it).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_glob_keeps_the_resolver_of_an_ifunc_it_leaves_out() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("ifunc-resolver-glob");
    let out = uselib_leaving_pick_ifunc_out("*pick*", &tmp);
    let mut probes: Vec<&str> = out.summary["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    probes.sort();
    // Both resolved before the capture (uselib had loaded the library), so neither ran in it.
    assert_eq!(probes, ["pick_plain", "resolve_pick"]);
    assert_eq!(out.spans().len(), 0);
}
