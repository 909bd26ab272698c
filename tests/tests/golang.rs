//! Go code (the `gocalls` fixture, gocalls.go, built with `go build`). The Go runtime walks
//! goroutine stacks (stack growth, garbage collection, preemption) and aborts the process at a
//! return address it cannot place, such as a return probe's trampoline; so in Go code xtrace ends
//! spans at the functions' own `ret` instructions, and reads arguments from Go's register ABI.

use std::ffi::OsString;

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{gocalls, gocgo, Fixture},
    output::{u64_field, Outputs},
    require_bpf,
    run::{listed_symbols, run_error, symbol_offset, trace_fixture_with, Xtrace},
    TempDir,
};

/// Traces a fresh `gocalls MODE` to its exit with `flags`; returns the outputs and xtrace's stderr.
fn trace(mode: &str, flags: &[&str], label: &str) -> (Outputs, Vec<String>) {
    let mut fixture = Fixture::spawn(gocalls(), &[mode]);
    fixture.wait_ready();
    let tmp = TempDir::new(label);
    let out = tmp.join("out");
    let flags: Vec<OsString> = flags.iter().map(OsString::from).collect();
    let finished = trace_fixture_with(&mut fixture, flags, &[], &out);
    (Outputs::read(&out), finished.stderr)
}

/// A span's integer argument or return value.
fn value(span: &xtrace_tests::output::Span, key: &str) -> i64 {
    span.args[key]
        .as_i64()
        .unwrap_or_else(|| panic!("{key}: {span:?}"))
}

/// `outer(i)` for i = 0..6 calls `add(i, 10)` and `add(2i, 10)`: every span exact, with its
/// arguments from rax and rbx (System V's rdi and rsi hold something else), and no entry left
/// unmatched. `outer`'s entry probe moves past Go's stack check (`cmp 0x10(%r14),%rsp`, which only
/// reads the stack pointer) onto its `jbe`.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn go_functions_are_traced_with_their_arguments_and_end_at_their_rets() {
    if !require_bpf() {
        return;
    }
    let (out, stderr) = trace(
        "calls",
        &["-u", "main.add(i64, i64) -> i64", "-u", "main.outer(i64) -> i64"],
        "go-calls",
    );
    let fixture = gocalls().display().to_string();
    let notice = format!(
        "xtrace: warning: {fixture} is Go code: 2 traced function(s) end at their own ret and \
         tail-call instructions, as the Go runtime aborts a process whose goroutine stack holds a \
         return probe's address (slower than return probes)"
    );
    assert!(stderr.contains(&notice), "{stderr:#?}");
    assert_eq!(out.probe_count("main.outer"), 7);
    assert_eq!(out.probe_count("main.add"), 14);
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);

    let mut outer = out.spans_named("main.outer");
    outer.sort_by_key(|s| s.start_ns());
    let got: Vec<(i64, i64)> = outer
        .iter()
        .map(|s| (value(s, "arg0"), value(s, "ret")))
        .collect();
    let want: Vec<(i64, i64)> = (0..7).map(|i| (i, 3 * i + 20)).collect();
    assert_eq!(got, want);

    let mut add = out.spans_named("main.add");
    add.sort_by_key(|s| s.start_ns());
    let got: Vec<(i64, i64, i64)> = add
        .iter()
        .map(|s| (value(s, "arg0"), value(s, "arg1"), value(s, "ret")))
        .collect();
    let want: Vec<(i64, i64, i64)> = (0..7)
        .flat_map(|i| [(i, 10, i + 10), (2 * i, 10, 2 * i + 10)])
        .collect();
    assert_eq!(got, want);
    for span in &add {
        assert_eq!(span.depth, 1, "{span:?}");
        assert!(span.args.get("exit").is_none(), "a ret: {span:?}");
    }

    let probed = out.probe("main.outer")["offset"].as_str().expect("offset");
    let probed = u64::from_str_radix(probed.trim_start_matches("0x"), 16).expect("hex offset");
    assert_eq!(probed - symbol_offset(gocalls(), "main.outer"), 4, "onto the jbe");
}

/// `down(2000)` calls `big(d)` at each depth d of its recursion, and `big`'s stack check (`lea
/// -0x380(%rsp),%r12; cmp 0x10(%r14),%r12; jbe`) fails each time the stack runs out: `big` grows
/// the stack and starts again from its first instruction (so does a call the runtime asks to
/// yield, at any time). xtrace probes the check's `jbe` and counts only the hits that fall
/// through: 2000 calls, none unmatched. Probed on its first instruction (`--entry symbol`), each
/// restart is an entry that never returns.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_go_function_that_restarts_to_grow_its_stack_is_one_call() {
    if !require_bpf() {
        return;
    }
    let (out, _) = trace("restart", &["-u", "main.big(i64) -> i64"], "go-restart");
    let mut big = out.spans_named("main.big");
    assert_eq!(big.len(), 2000);
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);
    big.sort_by_key(|s| s.start_ns());
    let got: Vec<(i64, i64)> = big.iter().map(|s| (value(s, "arg0"), value(s, "ret"))).collect();
    let want: Vec<(i64, i64)> = (1..=2000).rev().map(|d| (d, d + 1)).collect();
    assert_eq!(got, want);
    assert!(big.iter().all(|s| s.depth == 0), "down is untraced");
    let probed = out.probe("main.big")["offset"].as_str().expect("offset");
    let probed = u64::from_str_radix(probed.trim_start_matches("0x"), 16).expect("hex offset");
    assert_eq!(probed - symbol_offset(gocalls(), "main.big"), 12, "onto the jbe");

    let (out, _) = trace(
        "restart",
        &["--entry", "symbol", "-u", "main.big(i64) -> i64"],
        "go-restart-symbol",
    );
    assert_eq!(out.probe_count("main.big"), 2000);
    let restarts = u64_field(&out.summary, "unmatched_entries");
    assert!(restarts > 0, "the fixture restarts big: {restarts}");
}

/// Goroutines park inside their traced calls and their threads run others meanwhile, which make
/// traced calls too; a goroutine may resume on another thread. Open calls are kept per goroutine:
/// every call is a span with its own arguments and return value, `add` one level under its
/// `parked`, none unmatched. (Kept per thread, all 20 `parked` calls were lost.)
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn goroutines_that_park_inside_traced_calls_keep_their_own_calls() {
    if !require_bpf() {
        return;
    }
    let (out, _) = trace(
        "park",
        &["-u", "main.parked(i64) -> i64", "-u", "main.add(i64, i64) -> i64"],
        "go-park",
    );
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);
    let mut parked: Vec<(i64, i64, u64)> = out
        .spans_named("main.parked")
        .iter()
        .map(|s| (value(s, "arg0"), value(s, "ret"), s.depth))
        .collect();
    parked.sort_unstable();
    let want: Vec<(i64, i64, u64)> = (0..20).map(|i| (i, 2 * i + 10, 0)).collect();
    assert_eq!(parked, want);
    let mut add: Vec<(i64, i64, i64, u64)> = out
        .spans_named("main.add")
        .iter()
        .map(|s| (value(s, "arg0"), value(s, "arg1"), value(s, "ret"), s.depth))
        .collect();
    add.sort_unstable();
    let want: Vec<(i64, i64, i64, u64)> = (0..20).map(|i| (i, 10, i + 10, 1)).collect();
    assert_eq!(add, want);
}

/// Go strings are a pointer and a length, with no NUL after their bytes (the bytes of the next
/// constant follow): a `str` argument reads as many bytes as the register after it says, and a
/// `-> str` result as many as `rbx`, its second word; cut at 63 bytes like C strings.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn go_strings_are_read_by_their_length() {
    if !require_bpf() {
        return;
    }
    let (out, _) = trace(
        "strings",
        &[
            "-u",
            "main.greet(str, i64, i64) -> i64",
            "-u",
            "main.label(i64) -> str",
            "-u",
            "main.between(i64, str, i64, i64) -> i64",
        ],
        "go-strings",
    );
    let string = |s: &xtrace_tests::output::Span, key: &str| s.args[key].as_str().map(str::to_owned);
    let mut greet = out.spans_named("main.greet");
    greet.sort_by_key(|s| s.start_ns());
    let got: Vec<(Option<String>, i64, i64, i64)> = greet
        .iter()
        .map(|s| {
            (
                string(s, "arg0"),
                value(s, "arg1"),
                value(s, "arg2"),
                value(s, "ret"),
            )
        })
        .collect();
    let cut = |c: &str| Some(c.repeat(63));
    assert_eq!(
        got,
        [
            (Some("hi".into()), 2, 0, 2),
            (Some(String::new()), 0, 1, 1),
            (cut("w"), 70, 2, 72)
        ]
    );
    let mut label = out.spans_named("main.label");
    label.sort_by_key(|s| s.start_ns());
    let got: Vec<(i64, Option<String>)> = label
        .iter()
        .map(|s| (value(s, "arg0"), string(s, "ret")))
        .collect();
    assert_eq!(
        got,
        [(0, Some("alpha".into())), (1, Some(String::new())), (2, cut("l"))]
    );
    // A string in the second argument: its pointer in rbx, its length in rcx (arg2), then the
    // int in rdi.
    let mut between = out.spans_named("main.between");
    between.sort_by_key(|s| s.start_ns());
    let got: Vec<(i64, Option<String>, i64, i64, i64)> = between
        .iter()
        .map(|s| {
            (
                value(s, "arg0"),
                string(s, "arg1"),
                value(s, "arg2"),
                value(s, "arg3"),
                value(s, "ret"),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (1000, Some("hi".into()), 2, 7, 1009),
            (1001, Some(String::new()), 0, 7, 1008),
            (1002, cut("w"), 70, 7, 1079)
        ]
    );
}

/// CPU samples in a Go leaf without a frame of its own keep its caller: `go build` writes the
/// CFI zlib-compressed (`.debug_frame`, `SHF_COMPRESSED`, no `.eh_frame`), which is inflated for
/// the unwinder. (A frame-pointer walk skips the caller: the leaf has pushed no frame pointer.)
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn samples_in_a_go_leaf_keep_its_caller() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(gocalls(), &["spin"]);
    fixture.wait_ready();
    let tmp = TempDir::new("go-spin");
    let out = tmp.join("out");
    trace_fixture_with(&mut fixture, args!["-F", "999"], &[], &out);
    let folded = Outputs::read_profiled(&out).folded();
    let in_leaf = |suffix: &str| -> u64 {
        folded
            .iter()
            .filter(|(stack, _)| stack.ends_with(suffix))
            .map(|(_, n)| n)
            .sum()
    };
    let (all, under_alpha) = (
        in_leaf(";main.spinLeaf"),
        in_leaf(";main.main;main.alpha;main.spinLeaf"),
    );
    assert!(all >= 200, "{all} samples in spinLeaf: {folded:?}");
    assert!(
        under_alpha * 100 >= all * 95,
        "{under_alpha} of {all}: {folded:?}"
    );
}

/// In a cgo program, the C function takes its argument in System V's `rdi`, the Go function in
/// Go's `rax`: each is read from its own ABI, and each call is a span at depth 0 (the C call runs
/// on the thread's own stack, paired per thread; the Go call per goroutine).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn c_code_of_a_cgo_program_takes_system_v_arguments() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spawn(gocgo(), &[]);
    fixture.wait_ready();
    let tmp = TempDir::new("go-cgo");
    let out = tmp.join("out");
    let flags = args!["-u", "main.gtriple(i64) -> i64", "-u", "c_triple(i64) -> i64"];
    trace_fixture_with(&mut fixture, flags, &[], &out);
    let out = Outputs::read(&out);
    for name in ["main.gtriple", "c_triple"] {
        let mut spans = out.spans_named(name);
        spans.sort_by_key(|s| s.start_ns());
        let got: Vec<(i64, i64, u64)> = spans
            .iter()
            .map(|s| (value(s, "arg0"), value(s, "ret"), s.depth))
            .collect();
        let want: Vec<(i64, i64, u64)> = (0..5).map(|i| (i, 3 * i + 1, 0)).collect();
        assert_eq!(got, want, "{name}");
    }
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);
}

/// A Go program that exits with 20 goroutines parked inside traced calls: their calls never
/// return and are counted in `unmatched_entries`, as a thread's calls are when it exits, and the
/// kernel's table of goroutines is emptied of them.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn goroutines_left_inside_traced_calls_at_exit_are_unmatched() {
    if !require_bpf() {
        return;
    }
    let (out, _) = trace("parkexit", &["-u", "main.parked(i64) -> i64"], "go-parkexit");
    assert_eq!(out.probe_count("main.parked"), 0);
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 20);
}

/// A Go program that execs itself from inside traced calls, twice: the last program's main
/// goroutine lies where the first two's did, but its calls are not nested under their calls that
/// never returned (open calls are kept per program too: its exec count).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_go_program_after_exec_keeps_none_of_the_old_programs_calls() {
    if !require_bpf() {
        return;
    }
    let (out, _) = trace(
        "exec",
        &["-u", "main.gen(i64)", "-u", "main.add(i64, i64) -> i64"],
        "go-exec",
    );
    assert_eq!(out.probe_count("main.gen"), 0);
    let add = out.spans_named("main.add");
    assert_eq!(add.len(), 1);
    assert_eq!((value(&add[0], "ret"), add[0].depth), (12, 0));
}

/// The same, but the last program outlives the capture: the two gen calls its exec ended are
/// unmatched entries when the capture ends, not only once the process exits.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn calls_an_exec_ended_are_unmatched_while_the_new_program_runs() {
    if !require_bpf() {
        return;
    }
    let stay = [("GOCALLS_STAY", std::path::Path::new("1"))];
    let mut fixture = Fixture::spawn_with_env(gocalls(), &["exec"], &stay);
    fixture.wait_ready();
    let before = Attachments::snapshot();
    let tmp = TempDir::new("go-exec-stay");
    let out = tmp.join("out");
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "main.gen(i64)",
        "-u",
        "main.add(i64, i64) -> i64",
        "-o",
        &out
    ]);
    xtrace.wait_attached();
    fixture.send("go");
    assert_eq!(fixture.next_line(), "sum 12");
    xtrace.signal(libc::SIGINT);
    xtrace.wait().assert_success();
    before.assert_none_left();
    assert!(fixture.is_running());
    fixture.go();
    assert!(fixture.wait().success());
    let out = Outputs::read(&out);
    assert_eq!(out.probe_count("main.gen"), 0);
    assert_eq!(out.spans_named("main.add").len(), 1);
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 2);
}

/// With `--min-duration`, the 40,000 short `add` calls inside one long `many` call send their
/// arguments but (unless the machine stalls one) no span: each ends the one before it in its goroutine, and `many` keeps its own
/// argument (its goroutine's depth rule, not the oldest dropped past 32,768 waiting).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_long_go_call_keeps_its_arguments_under_min_duration() {
    if !require_bpf() {
        return;
    }
    let (out, _) = trace(
        "many",
        &[
            "-u",
            "main.many(i64) -> i64",
            "-u",
            "main.add(i64, i64) -> i64",
            "--min-duration",
            "5ms",
        ],
        "go-many",
    );
    let many = out.spans_named("main.many");
    assert_eq!(many.len(), 1);
    assert_eq!(
        (value(&many[0], "arg0"), value(&many[0], "ret")),
        (40_000, 800_380_000)
    );
    assert_eq!(out.probe_count("main.add"), 40_000);
    // An add the scheduler stopped for 5 ms (a busy machine) is a span, with its own arguments.
    for add in out.spans_named("main.add") {
        assert!(add.dur >= 5_000.0, "{add:?}");
        let (a, b, ret) = (value(&add, "arg0"), value(&add, "arg1"), value(&add, "ret"));
        assert!((0..40_000).contains(&a) && b == 10 && ret == a + 10, "{add:?}");
    }
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);
}

/// `grower` calls a deep recursion that grows (moves) the goroutine's stack while `grower` is open.
/// Under the default `--exits auto` the process lives on, and the first call, whose frame moved
/// under it, is a span like the other six: its goroutine keeps its frame as an offset from the
/// stack's top. With `--exits uretprobe`, which xtrace warns about, the Go runtime finds the
/// trampoline and aborts the process: the fixture really does walk a traced frame.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_go_stack_that_moves_under_a_traced_call_does_not_abort_the_process() {
    if !require_bpf() {
        return;
    }
    let (out, _) = trace("grow", &["-u", "main.grower -> i64"], "go-grow");
    let mut spans = out.spans_named("main.grower");
    spans.sort_by_key(|s| s.start_ns());
    let rets: Vec<i64> = spans.iter().map(|s| value(s, "ret")).collect();
    assert_eq!(rets, vec![1, 2, 3, 4, 5, 6, 7], "{spans:?}");
    assert_eq!(u64_field(&out.summary, "unmatched_entries"), 0);
    // The first call grew the stack: 300 frames of 600 bytes, and the move, inside it.
    assert!(spans[0].dur > spans[1].dur * 5.0, "{spans:?}");

    // The runtime's fatal error without its goroutine dump.
    let quiet = [("GOTRACEBACK", std::path::Path::new("none"))];
    let mut fixture = Fixture::spawn_with_env(gocalls(), &["grow"], &quiet);
    fixture.wait_ready();
    let before = Attachments::snapshot();
    let tmp = TempDir::new("go-grow-uretprobe");
    let mut xtrace = Xtrace::spawn(args![
        "-p",
        fixture.pid().to_string(),
        "--exits",
        "uretprobe",
        "-u",
        "main.grower",
        "-o",
        tmp.join("out")
    ]);
    xtrace.wait_attached();
    fixture.go();
    let status = fixture.wait();
    assert_eq!(status.code(), Some(2), "the Go runtime's fatal error: {status}");
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    let fixture = gocalls().display().to_string();
    let warning = format!(
        "xtrace: warning: {fixture} is Go code: with --exits uretprobe, the Go runtime aborts the \
         process (\"unexpected return pc\") when it walks a goroutine's stack inside a traced call \
         (stack growth, garbage collection, preemption), because return probes replace return \
         addresses"
    );
    assert!(finished.stderr.contains(&warning), "{:#?}", finished.stderr);
}

/// A Go function with no `ret` (it panics) has no exit to probe, and a return probe is no option:
/// named, it is refused with one line, and `list symbols` shows `-` for its probe.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_go_function_without_probeable_exits_is_refused() {
    if !require_bpf() {
        return;
    }
    let fixture = gocalls().to_str().expect("UTF-8 path").to_owned();
    let line = run_error(args!["-u", "main.fails", "--", &fixture, "calls"]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: {fixture}: cannot trace `main.fails`: it is Go code and has no exit \
             instruction that can be probed (no ret, or one uprobes refuse), while a return probe \
             would make the Go runtime abort the process; trace a function that calls it"
        )
    );

    let rows = listed_symbols(args![&fixture, "main.f*"]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][3..], ["-", "main.fails"]);
}

/// A Go method's name holds a `*` (`main.(*T).M`): it names that method, not every one the glob
/// it reads as would match (`main.(*ST).M` too, before).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_go_pointer_method_is_named_exactly() {
    if !require_bpf() {
        return;
    }
    let (out, _) = trace("methods", &["-u", "main.(*T).M"], "go-methods");
    assert_eq!(out.probe_count("main.(*T).M"), 2);
    assert_eq!(out.summary["probes"].as_array().map(Vec::len), Some(1));
    // A glob that names no function exactly is still a glob.
    let (out, _) = trace("methods", &["-u", "main.(*S*).M"], "go-methods-glob");
    assert_eq!(out.probe_count("main.(*ST).M"), 3);
    assert_eq!(out.summary["probes"].as_array().map(Vec::len), Some(1));
}
