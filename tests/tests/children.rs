//! CPU sampling follows the processes a sampled process starts, on the real kernel. Fixture
//! `profile children MS` (tests/fixtures/profile.c) starts two children one after the other and
//! spins in neither itself: the first, forked, runs the 75/25 split for MS/2 ms; the second execs
//! `profile split MS/2`. `profile forks MS` starts 40 such children, alternately forked and exec'd,
//! each living about MS ms. Both print each child's pid and then "children exited", and wait for
//! one more line before they exit.

use xtrace_tests::{
    args,
    bpf::{map_u32_keys, Attachments},
    fixtures::{fixtures, Fixture},
    output::Outputs,
    require_bpf,
    run::Xtrace,
    TempDir,
};

/// Runs `profile MODE` under `xtrace -F 999 -p PID FLAGS`; returns the outputs, the children's pids
/// and the pids in xtrace's sampled-process table once every child had exited.
fn sample_children(mode: &[&str], flags: &[&str], tmp: &TempDir) -> (Outputs, Vec<u32>, Vec<u32>) {
    let (out, (children, _), table) = sample_children_cpu(mode, flags, tmp);
    (out, children, table)
}

/// [`sample_children`], with each child's CPU time (ms) as the fixture measured it.
#[allow(clippy::type_complexity)]
fn sample_children_cpu(
    mode: &[&str],
    flags: &[&str],
    tmp: &TempDir,
) -> (Outputs, (Vec<u32>, Vec<(u32, f64)>), Vec<u32>) {
    let mut fixture = Fixture::spawn(&fixtures().profile, mode);
    fixture.wait_ready();
    let out = tmp.join("out");
    let before = Attachments::snapshot();
    let mut all = args!["-F", "999", "-p", fixture.pid().to_string(), "-o", &out];
    all.extend(flags.iter().map(Into::into));
    let mut xtrace = Xtrace::spawn(all);
    xtrace.wait_attached();
    fixture.send("go");
    let children = fixture.children_and_cpu_until_exited();
    let table = map_u32_keys(xtrace.pid(), "SAMPLE_PIDS");
    fixture.go();
    assert!(fixture.wait().success());
    let finished = xtrace.wait();
    finished.assert_success();
    before.assert_none_left();
    (Outputs::read_profiled(&out), children, table)
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn children_are_sampled_and_leave_the_table_when_they_exit() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("children");
    let (out, (children, cpu), table) = sample_children_cpu(&["children", "1000"], &[], &tmp);
    assert_eq!(children.len(), 2, "the fixture starts two children");
    let parent = out.summary["targets"][0]["pid"].as_u64().unwrap() as u32;
    // The children left the table at their exit; the parent is still in it.
    assert_eq!(
        table,
        vec![parent],
        "sampled-process table after the children exited"
    );
    assert_eq!(out.summary["followed_processes"], 2);
    assert_eq!(out.summary["processes_not_followed"], 0);
    // Each child ran the split for 500 ms of wall time, on the CPU for all of it on an idle
    // machine: a sample per ms of its CPU time at 999 Hz, within 20% and 10 samples; the parent
    // only waited.
    let by_pid = out.samples_by_pid();
    for child in &children {
        let n = by_pid.iter().find(|(pid, _)| pid == child).map_or(0, |(_, n)| *n) as f64;
        let ms = cpu
            .iter()
            .find(|(pid, _)| pid == child)
            .map(|(_, ms)| *ms)
            .expect("its cpu line");
        assert!(ms > 100.0, "child {child} had {ms} ms of CPU in 500 ms");
        assert!(
            (n - ms * 0.999).abs() <= ms * 0.2 + 10.0,
            "child {child}: {n} samples for {ms} ms of CPU: {by_pid:?}"
        );
    }
    let others: u64 = by_pid
        .iter()
        .filter(|(pid, _)| !children.contains(pid))
        .map(|(_, n)| n)
        .sum();
    assert!(others <= 20, "{others} samples outside the children: {by_pid:?}");
    // Both children symbolized: the forked one in the parent's program, under `children`; the
    // exec'd one in its own (the same file, mapped anew), from its own `main`.
    let folded = out.folded();
    let timeline = out.timeline_samples();
    let hot_a_stack = |child: u32| {
        let sample = timeline
            .iter()
            .find(|e| e["pid"] == child && e["name"] == "hot_a");
        sample.unwrap_or_else(|| panic!("no hot_a sample of child {child}"))["args"]["stack"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let forked = hot_a_stack(children[0]);
    assert!(forked.ends_with(";main;children;split;hot_a"), "{forked}");
    let execed = hot_a_stack(children[1]);
    assert!(
        execed.ends_with(";main;split;hot_a") && !execed.contains("children"),
        "{execed}"
    );
    assert!(
        folded.iter().all(|(stack, _)| stack.starts_with("profile;")),
        "every stack's root is the process name: {folded:?}"
    );
}

/// With `-u hot_a`, the forked child runs hot_a's breakpoint too (it has a copy of the parent's
/// memory), and the kernel swaps its return address for the trampoline, but the child's calls
/// are not traced: its samples in hot_a show `[uprobes]` in place of `split` (the fixture keeps
/// frame pointers, so the walk goes on to `main`) and are counted in truncated_stacks, exactly,
/// with the samples that land in the kernel's handling of hot_a's breakpoint while it emulates the
/// `push` (the stack pointer moved, the instruction pointer not yet) or between, where the
/// registers are no place in the program: those stacks stop at hot_a, cut short too.
/// The exec'd child maps the program anew, without the probes: its stacks are whole.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_forked_childs_stacks_through_the_trampoline_are_counted_truncated() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("children-traced");
    let (out, children, _) = sample_children(&["children", "600"], &["-u", "hot_a"], &tmp);
    assert_eq!(out.probe_count("hot_a"), 0, "the children's calls are not traced");
    let folded = out.folded();
    let count = |cut: &dyn Fn(&str) -> bool| -> u64 {
        folded
            .iter()
            .filter(|(stack, _)| cut(stack))
            .map(|(_, n)| n)
            .sum()
    };
    let through_trampoline = count(&|stack| stack.split(';').any(|f| f == "[uprobes]"));
    let in_the_trap = count(&|stack| stack.starts_with("profile;hot_a;asm_exc_int3_[k];"));
    assert!(through_trampoline > 0, "{folded:?}");
    assert_eq!(
        out.summary["truncated_stacks"],
        through_trampoline + in_the_trap,
        "{folded:?}"
    );
    let timeline = out.timeline_samples();
    let execed = timeline
        .iter()
        .find(|e| e["pid"] == children[1] && e["name"] == "hot_a")
        .expect("a hot_a sample of the exec'd child");
    let stack = execed["args"]["stack"].as_str().unwrap();
    assert!(stack.ends_with(";main;split;hot_a"), "{stack}");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn no_inherit_samples_the_target_only() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("children-no-inherit");
    let (out, children, table) = sample_children(&["children", "1000"], &["--no-inherit"], &tmp);
    assert_eq!(children.len(), 2);
    let parent = out.summary["targets"][0]["pid"].as_u64().unwrap() as u32;
    assert_eq!(table, vec![parent]);
    assert_eq!(out.summary["followed_processes"], serde_json::Value::Null);
    assert_eq!(out.summary["processes_not_followed"], serde_json::Value::Null);
    let by_pid = out.samples_by_pid();
    assert!(
        by_pid.iter().all(|(pid, _)| *pid == parent),
        "only the target is sampled: {by_pid:?}"
    );
    let samples = out.summary["samples"].as_u64().unwrap();
    assert!(samples <= 20, "the target only waits: {samples} samples");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn children_that_live_milliseconds_are_symbolized() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("children-forks");
    let (out, children, table) = sample_children(&["forks", "5"], &[], &tmp);
    assert_eq!(children.len(), 40, "the fixture starts 40 children");
    let parent = out.summary["targets"][0]["pid"].as_u64().unwrap() as u32;
    assert_eq!(table, vec![parent]);
    assert_eq!(out.summary["followed_processes"], 40);
    assert_eq!(out.summary["processes_not_followed"], 0);
    assert_eq!(out.summary["lost_mapping_records"], 0);
    // Each child is gone within milliseconds, before its /proc/PID/maps could be read: every frame
    // of every sample is named from the side band's fork, exec and mapping records, the forked
    // children's in their parent's program, the exec'd ones' in their own.
    out.assert_forks_symbolized(&children);
    // Its own samples too (those in its exec, in xtrace's launcher code, are left out).
    out.assert_symbolized(parent);
}
