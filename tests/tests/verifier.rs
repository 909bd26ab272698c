//! What the kernel's verifier spends on xtrace's programs. Older verifiers prune the paths of a
//! program far worse than this host's: Debian 12's 6.1 refused `span_enter` with argument reads
//! after 1,000,000 processed instructions, when 6.18 accepted it after 37,000. So the counts this
//! host's kernel gives are held under a bound that the program 6.1 refused exceeds, before a change
//! reaches an older kernel (the kernel matrix, `cargo xtask test --kernel`, runs the argument tests
//! on 6.1 itself).

use xtrace_tests::{
    args,
    bpf::verified_insns,
    fixtures::{fixtures, Fixture},
    kernel::kernel,
    require_bpf,
    run::Xtrace,
    TempDir,
};

/// The `calls` fixture's `argfn` with its string read long (`str:200`), which adds the long-string
/// reads to the entry program. What the verifier walks does not depend on which arguments a spec
/// reads (that is a map's value), only on whether any probe reads arguments, long strings, or
/// reads them sleepably.
const SPEC: &str = "argfn(u64, i32, str:200, i8, u16, i64) -> i32";

/// The most instructions this host's verifier (6.18) may process for the entry program, or the
/// exit program, of a probe with [`SPEC`]. It processes about 35,600 for `span_enter_s`, 32,400
/// for `span_enter` and 4,500 for `span_exit`; for the programs 6.1 refused, 56,400, 53,600 and
/// 5,100. On 6.1 the programs take about 40% more (docs/internals/kernel-notes.md), far from
/// its limit of 1,000,000.
const BOUND: u64 = 45_000;

/// The counts xtrace's programs took, traced with `env`, checked while it is attached.
fn counts_with(env: &[(&str, &str)], label: &str) -> std::collections::BTreeMap<String, u64> {
    let mut fixture = Fixture::spawn(&fixtures().calls, &["args"]);
    fixture.wait_ready();
    let tmp = TempDir::new(label);
    let out = tmp.join("out");
    let args = xtrace_tests::args!["-p", fixture.pid().to_string(), "-u", SPEC, "-o", &out];
    let mut xtrace = Xtrace::spawn_with_env(&args, env);
    xtrace.wait_attached();
    let counts = verified_insns(xtrace.pid());
    fixture.go();
    assert!(fixture.wait().success());
    xtrace.wait().assert_success();
    counts
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn argument_reading_programs_stay_within_the_instruction_bound() {
    if !require_bpf() {
        return;
    }
    let mut cases = vec![(&[("XTRACE_SLEEPABLE_STRINGS", "0")][..], "span_enter")];
    if kernel().sleepable_uprobes {
        cases.push((&[][..], "span_enter_s"));
    }
    for (env, entry) in cases {
        let counts = counts_with(env, entry);
        for name in [entry, "span_exit"] {
            let count = counts.get(name).copied();
            assert!(
                count.is_some_and(|c| c > 0 && c <= BOUND),
                "{name}: {count:?} verified instructions, bound {BOUND} ({env:?}); all: {counts:?}"
            );
        }
    }
}

/// Checks program `name`'s verified instructions, as `count(extra flags)` reads them, against
/// `bound` with its Python walk inlined, and that `--no-python`, which leaves the walk out, makes
/// it far smaller.
fn assert_python_walk_within(name: &str, bound: u64, count: impl Fn(&[&str]) -> Option<u64>) {
    let (with, without) = (count(&[]), count(&["--no-python"]));
    eprintln!("verifier: {name} {with:?} instructions with the Python walk, {without:?} without");
    let with = with.unwrap_or_else(|| panic!("{name} was not loaded"));
    assert!(with <= bound, "{name}: {with} verified instructions");
    assert!(
        without.is_some_and(|w| w < with / 4),
        "{name}: {without:?} without the walk, {with} with it"
    );
}

/// The most instructions this host's verifier may process for `off_cpu_return` with its Python
/// walk: about 87,500 on 6.18 (the sampler takes 89,500 with the same walk), 9,600 without it.
const OFF_CPU_RETURN_BOUND: u64 = 150_000;

/// `--off-cpu` loads `off_cpu_return` with the Python walk inlined, within its bound;
/// `--no-python` leaves the walk out, and the program is then far smaller.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn the_off_cpu_return_program_with_its_python_walk_stays_within_its_bound() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("verifier-offcpu");
    let count = |extra: &[&str]| {
        let mut argv = args!["--off-cpu", "-F", "1", "-o", tmp.join("out")];
        argv.extend(extra.iter().map(std::ffi::OsString::from));
        argv.extend(args!["--", "/bin/sleep", "1"]);
        let mut xtrace = Xtrace::spawn(argv);
        xtrace.wait_attached();
        let counts = verified_insns(xtrace.pid());
        xtrace.wait().assert_success();
        counts.get("off_cpu_return").copied()
    };
    assert_python_walk_within("off_cpu_return", OFF_CPU_RETURN_BOUND, count);
}

/// The most instructions this host's verifier may process for `call_stack` (`--stacks`) with its
/// Python walk: about 67,300 on 6.18 (180 with `--no-python`).
const CALL_STACK_BOUND: u64 = 100_000;

/// `--stacks` loads `call_stack` with the Python walk inlined, within its bound; `--no-python`
/// leaves the walk out.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn the_call_stack_program_with_its_python_walk_stays_within_its_bound() {
    if !require_bpf() {
        return;
    }
    let count = |extra: &[&str]| {
        let mut fixture = Fixture::spawn(&fixtures().uselib, &[]);
        fixture.wait_ready();
        let tmp = TempDir::new("verifier-stacks");
        let out = tmp.join("out");
        let mut argv = args![
            "-p",
            fixture.pid().to_string(),
            "-u",
            "libxtfix:lib_work",
            "--stacks"
        ];
        argv.extend(extra.iter().map(std::ffi::OsString::from));
        argv.extend(args!["-o", &out]);
        let mut xtrace = Xtrace::spawn(argv);
        xtrace.wait_attached();
        let counts = verified_insns(xtrace.pid());
        fixture.go();
        assert!(fixture.wait().success());
        xtrace.wait().assert_success();
        counts.get("call_stack").copied()
    };
    assert_python_walk_within("call_stack", CALL_STACK_BOUND, count);
}

/// The most instructions this host's verifier may process for `usdt_stack` (`--stacks` with
/// `-U`): the same Python walk as `call_stack`, so the same bound (about 66,300 on 6.18, 450
/// with `--no-python`).
const USDT_STACK_BOUND: u64 = CALL_STACK_BOUND;

/// `--stacks -U` loads `usdt_stack` with the Python walk inlined, within its bound; `--no-python`
/// leaves the walk out.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn the_usdt_stack_program_with_its_python_walk_stays_within_its_bound() {
    if !require_bpf() {
        return;
    }
    let count = |extra: &[&str]| {
        let mut fixture = Fixture::spawn(&fixtures().usdt_sites, &["run"]);
        fixture.wait_ready();
        let tmp = TempDir::new("verifier-usdt-stacks");
        let out = tmp.join("out");
        let mut argv = args!["-p", fixture.pid().to_string(), "-U", "xtsites:tick", "--stacks"];
        argv.extend(extra.iter().map(std::ffi::OsString::from));
        argv.extend(args!["-o", &out]);
        let mut xtrace = Xtrace::spawn(argv);
        xtrace.wait_attached();
        let counts = verified_insns(xtrace.pid());
        fixture.go();
        assert_eq!(fixture.next_line(), "fired");
        assert!(fixture.wait().success());
        xtrace.wait().assert_success();
        counts.get("usdt_stack").copied()
    };
    assert_python_walk_within("usdt_stack", USDT_STACK_BOUND, count);
}
