//! Where entry probes go (`--entry`): on the `entries` fixture (see entries.c: functions in
//! assembly, each called 7 times with x = 0..6, every one starting with an instruction the
//! kernel single-steps), a probe moves onto the first instruction the kernel emulates only where
//! nothing a span shows changes. Each function's entry offset in summary.json is asserted
//! exactly, and so are its span count, arguments and return values: a probe moved into a loop
//! would count extra entries, one moved past a write to its argument would show the new value.

use std::ffi::OsString;

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{listed_symbols, run_error, symbol_offset, trace_fixture_with, Xtrace},
    TempDir,
};

const CALLS: u64 = 7;

/// Traces a fresh `entries` fixture to its exit with `flags`.
fn trace(flags: &[&str], label: &str) -> Outputs {
    trace_program(&fixtures().entries, flags, label)
}

/// Traces a fresh run of `program` (the `entries` fixture or a copy) to its exit with `flags`.
fn trace_program(program: &std::path::Path, flags: &[&str], label: &str) -> Outputs {
    let mut fixture = Fixture::spawn(program, &[]);
    fixture.wait_ready();
    let tmp = TempDir::new(label);
    let out = tmp.join("out");
    let flags: Vec<OsString> = flags.iter().map(OsString::from).collect();
    trace_fixture_with(&mut fixture, flags, &[], &out);
    Outputs::read(&out)
}

/// How far past its symbol `name`'s entry probe is, by summary.json.
fn moved_by(out: &Outputs, name: &str) -> u64 {
    let probed = out.probe(name)["offset"].as_str().expect("offset");
    let probed = u64::from_str_radix(probed.trim_start_matches("0x"), 16).expect("hex offset");
    probed - symbol_offset(&fixtures().entries, name)
}

/// `name`'s spans as (arg0 or None, ret), in call order.
fn values(out: &Outputs, name: &str) -> Vec<(Option<u64>, u64)> {
    let mut spans = out.spans_named(name);
    spans.sort_by_key(|s| s.start_ns());
    spans
        .iter()
        .map(|s| {
            let arg = s.args.get("arg0").map(|a| a.as_u64().expect("u64 arg0"));
            (
                arg,
                s.args["ret"].as_u64().unwrap_or_else(|| panic!("ret: {s:?}")),
            )
        })
        .collect()
}

fn expect(f: impl Fn(u64) -> u64, with_arg: bool) -> Vec<(Option<u64>, u64)> {
    (0..CALLS).map(|x| (with_arg.then_some(x), f(x))).collect()
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn entry_probes_move_only_where_nothing_a_span_shows_changes() {
    if !require_bpf() {
        return;
    }
    let out = trace(
        &[
            "-u",
            "moved(u64) -> u64",
            "-u",
            "writes_arg(u64) -> u64",
            "-u",
            "redzone -> u64",
            "-u",
            "tail -> u64",
            "-u",
            "loops -> u64",
            "-u",
            "stack -> u64",
            "-u",
            "switchy -> u64",
            "-u",
            "syscall_first",
            "-u",
            "nop5_first -> u64",
            "-u",
            "nop5_only -> u64",
            "-u",
            "labelled(u64) -> u64",
            "-u",
            "cet_loop -> u64",
        ],
        "entries",
    );
    // Moved onto the first emulated instruction: a push, or the tail call's jmp.
    assert_eq!(moved_by(&out, "moved"), 7);
    assert_eq!(
        moved_by(&out, "redzone"),
        10,
        "a write below the stack pointer is no obstacle"
    );
    assert_eq!(moved_by(&out, "tail"), 3);
    // Never onto a 5-byte nop, whose probe a forked child would die at (the fixture's child calls
    // both; it and so the fixture exit 0): past it, onto the push, or onto the lea after it.
    assert_eq!(moved_by(&out, "nop5_first"), 8);
    assert_eq!(moved_by(&out, "nop5_only"), 5);
    // Kept: its captured argument is written before the push; the jb jumps back into the
    // instructions before it; sub writes the stack pointer; an indirect jump could land anywhere;
    // a syscall is no plain instruction.
    // And labelled: a symbol names an instruction it would move past (labelled_alt, where main
    // enters it too). cet_loop starts with endbr64 and is probed on it, not after it: its jg
    // jumps back to the instruction after it.
    for name in [
        "writes_arg",
        "loops",
        "stack",
        "switchy",
        "syscall_first",
        "labelled",
        "cet_loop",
    ] {
        assert_eq!(moved_by(&out, name), 0, "{name}");
    }
    for name in [
        "moved",
        "writes_arg",
        "redzone",
        "tail",
        "loops",
        "stack",
        "switchy",
        "syscall_first",
        "nop5_first",
        "nop5_only",
        "labelled",
        "cet_loop",
    ] {
        assert_eq!(out.probe_count(name), CALLS, "{name}");
        assert_eq!(out.spans_named(name).len() as u64, CALLS, "{name}");
    }
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);
    assert_eq!(values(&out, "moved"), expect(|x| x + 1, true));
    assert_eq!(values(&out, "writes_arg"), expect(|x| x + 2, true));
    assert_eq!(values(&out, "redzone"), expect(|x| x, false));
    assert_eq!(values(&out, "tail"), expect(|x| 2 * x, false));
    assert_eq!(values(&out, "loops"), expect(|x| x.max(1), false));
    assert_eq!(values(&out, "stack"), expect(|x| x, false));
    assert_eq!(values(&out, "nop5_first"), expect(|x| x, false));
    assert_eq!(values(&out, "nop5_only"), expect(|x| x + 1, false));
    assert_eq!(values(&out, "labelled"), expect(|x| x + 1, true));
    assert_eq!(
        values(&out, "cet_loop"),
        expect(|x| if x == 0 { u64::MAX } else { 0 }, false)
    );
    assert_eq!(
        values(&out, "switchy"),
        expect(|x| if x <= 1 { x + 10 } else { x }, false)
    );
}

/// Without its argument captured, `writes_arg` moves too; with `--exits ret`, `tail`'s jmp is its
/// exit, so its entry stays; `--entry symbol` keeps every entry on the first instruction.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn captures_exit_probes_and_entry_symbol_keep_entries() {
    if !require_bpf() {
        return;
    }
    let out = trace(
        &[
            "--exits",
            "ret",
            "-u",
            "writes_arg",
            "-u",
            "tail -> u64",
            "-u",
            "moved",
        ],
        "entries-ret",
    );
    assert_eq!(moved_by(&out, "writes_arg"), 7);
    assert_eq!(moved_by(&out, "tail"), 0);
    assert_eq!(moved_by(&out, "moved"), 7);
    for name in ["writes_arg", "tail", "moved"] {
        assert_eq!(out.probe_count(name), CALLS, "{name}");
    }
    // A span that ends at a tail call has no return value.
    for span in out.spans_named("tail") {
        assert_eq!(span.args["exit"], "tail call", "{span:?}");
    }

    let out = trace(
        &["--entry", "symbol", "-u", "moved", "-u", "tail"],
        "entries-symbol",
    );
    assert_eq!(moved_by(&out, "moved"), 0);
    assert_eq!(moved_by(&out, "tail"), 0);
    assert_eq!(out.probe_count("moved"), CALLS);
    assert_eq!(out.probe_count("tail"), CALLS);
}

/// `xtrace list symbols` shows where each entry probe goes (PROBE), as a trace places it.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn list_symbols_shows_the_probe_offset() {
    if !require_bpf() {
        return;
    }
    let entries = fixtures().entries.as_os_str().to_owned();
    for (flags, moved, loops) in [(&[][..], 7, 0), (&["--entry", "symbol"][..], 0, 0)] {
        let mut args: Vec<OsString> = flags.iter().map(OsString::from).collect();
        args.extend([entries.clone(), "*o*".into()]);
        let rows = listed_symbols(args);
        let probe = |name: &str| {
            let row = rows
                .iter()
                .find(|r| r[4] == name)
                .unwrap_or_else(|| panic!("{name}: {rows:?}"));
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex");
            hex(&row[3]) - hex(&row[0])
        };
        assert_eq!(probe("moved"), moved, "{flags:?}");
        assert_eq!(probe("loops"), loops, "{flags:?}");
        assert_eq!(probe("cet_loop"), 0, "on its endbr64, {flags:?}");
    }
    // A GLOB with value types places the probe as a trace with them does: writes_arg's first
    // instruction writes its captured argument, so its probe stays there.
    for (glob, offset) in [("writes_arg", 7), ("writes_arg(i64)", 0)] {
        let rows = listed_symbols(vec![entries.clone(), glob.into()]);
        assert_eq!(rows.len(), 1, "{rows:?}");
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex");
        assert_eq!(hex(&rows[0][3]) - hex(&rows[0][0]), offset, "{glob}");
    }
}

/// The kernel's uprobes take a VEX-encoded instruction whose opcode byte is a jump's (`vpcmpeqb`,
/// 0x74: `je`) for that jump and skip it: probed there, vector_entry returned garbage. Named, it
/// is refused; vector_moved, whose `vpcmpeqb` is followed by a `nop`, is probed on the `nop` and
/// computes what it does untraced (the fixture exits 3 on a wrong result).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn vector_instruction_the_kernel_would_skip() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("unprobeable-vector");
    let program = &fixtures().unprobeable;
    let line = run_error(args!["-u", "vector_entry", "-o", tmp.join("out"), "--", program]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: {}: cannot probe `vector_entry`: its `vpcmpeqb` (c5 f9 74 c8) has a VEX \
             prefix and the opcode byte 0x74 of a jump, call or nop, which the kernel's uprobes \
             emulate as one instead of running the instruction (the traced program would compute \
             wrong results); trace a function that calls it",
            program.display()
        )
    );
    let refused = run_error(args![
        "--entry",
        "symbol",
        "-u",
        "vector_moved",
        "-o",
        tmp.join("out"),
        "--",
        program
    ]);
    assert!(
        refused.contains("cannot probe `vector_moved`: its `vpcmpeqb`"),
        "{refused}"
    );

    let out = tmp.join("moved");
    let before = Attachments::snapshot();
    let finished = Xtrace::spawn(args!["-u", "vector_moved", "-o", &out, "--", program]).wait();
    finished.assert_success();
    before.assert_none_left();
    let outputs = Outputs::read(&out);
    assert_eq!(
        u64_field(&outputs.summary["command"], "exit_code"),
        0,
        "the traced vector functions computed their results: {:?}",
        finished.stderr
    );
    assert_eq!(outputs.probe_count("vector_moved"), 5);
    let symbol = symbol_offset(program, "vector_moved");
    assert_eq!(
        outputs.probe("vector_moved")["offset"],
        serde_json::json!(format!("{:#x}", symbol + 4)),
        "on the nop after the 4-byte vpcmpeqb"
    );
}

/// Sets the size in section header `name` of the ELF64 file `bytes` to `size`.
fn set_section_size(bytes: &mut [u8], name: &[u8], size: u64) {
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize;
    let (headers, count, names) = (u64_at(bytes, 0x28), u16_at(bytes, 0x3c), u16_at(bytes, 0x3e));
    let header = |i: usize| headers + 64 * i;
    let strings = u64_at(bytes, header(names) + 24);
    for i in 0..count {
        let at = strings + u32::from_le_bytes(bytes[header(i)..header(i) + 4].try_into().unwrap()) as usize;
        if bytes[at..].starts_with(name) && bytes[at + name.len()] == 0 {
            bytes[header(i) + 32..header(i) + 40].copy_from_slice(&size.to_le_bytes());
            return;
        }
    }
    panic!("no section {}", String::from_utf8_lossy(name));
}

/// A file whose `.text` header claims 2^64 - 1 bytes (the loader reads no section header, so it
/// runs): its code is not swept, so no entry probe moves past its first instructions, cet_loop's
/// stays on its `endbr64` (its own code loops back past it), and every call is counted once. It
/// used to abort xtrace (release builds asked for 2^61 bytes to sweep it; debug builds overflowed).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_damaged_code_section_header_moves_no_probe() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("entries-damaged");
    let program = tmp.join("entries");
    let mut bytes = std::fs::read(&fixtures().entries).unwrap();
    set_section_size(&mut bytes, b".text", u64::MAX);
    std::fs::write(&program, bytes).unwrap();
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = trace_program(
        &program,
        &["-u", "moved -> u64", "-u", "cet_loop -> u64"],
        "damaged",
    );
    assert_eq!(moved_by(&out, "moved"), 0);
    assert_eq!(moved_by(&out, "cet_loop"), 0);
    assert_eq!(values(&out, "moved"), expect(|x| x + 1, false));
    assert_eq!(
        values(&out, "cet_loop"),
        expect(|x| if x == 0 { u64::MAX } else { 0 }, false)
    );
}
