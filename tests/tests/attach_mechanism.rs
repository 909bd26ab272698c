//! How uprobes are attached: uprobe_multi links (one per file, process and program) by default on
//! a kernel that has them (6.6+), perf-event uprobes on one that has not (Debian 12's 6.1, in the
//! kernel matrix) and when `XTRACE_UPROBE_ATTACH=perf_event`. Both record exactly the
//! same spans; summary.json says which was used and how many uprobes were placed. Fixture: `uselib`,
//! which calls `lib_work` exactly 7 times after `go`.

use xtrace_tests::{
    args,
    bpf::Attachments,
    fixtures::{fixtures, Fixture},
    kernel::kernel,
    output::{u64_field, Outputs},
    require_bpf,
    run::{expect_user_error, trace_fixture_with, Xtrace},
    TempDir,
};

/// Traces `uselib` with `env` and returns its outputs.
fn trace(env: &[(&str, &str)]) -> Outputs {
    let mut fixture = Fixture::spawn(&fixtures().uselib, &[]);
    fixture.wait_ready();
    let tmp = TempDir::new("mechanism");
    let out = tmp.join("out");
    trace_fixture_with(
        &mut fixture,
        args!["-u", "libxtfix:lib_work", "-u", "main"],
        env,
        &out,
    );
    Outputs::read(&out)
}

fn assert_spans(out: &Outputs, mechanism: &str) {
    assert_eq!(out.summary["attach_mechanism"], mechanism);
    // Two probes, an entry and a return uprobe each.
    assert_eq!(u64_field(&out.summary, "uprobes"), 4);
    assert_eq!(out.probe_count("lib_work"), 7);
    assert_eq!(out.spans_named("lib_work").len(), 7);
    // main was entered before attaching: its return is seen, its entry is not, so no span.
    assert_eq!(out.probe_count("main"), 0);
    assert_eq!(out.lost_events(), 0);
}

/// uprobe_multi where the kernel has it (as `xtrace check` finds), else perf-event uprobes,
/// chosen without being asked and with the same spans.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn uprobe_multi_by_default_where_the_kernel_has_it() {
    if !require_bpf() {
        return;
    }
    let expected = if kernel().uprobe_multi {
        "uprobe_multi"
    } else {
        "perf_event"
    };
    assert_spans(&trace(&[]), expected);
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn perf_event_when_asked() {
    if !require_bpf() {
        return;
    }
    assert_spans(&trace(&[("XTRACE_UPROBE_ATTACH", "perf_event")]), "perf_event");
}

/// `XTRACE_UPROBE_ATTACH=uprobe_multi` attaches with uprobe_multi links where the kernel has
/// them; where it has none (6.1), it is refused before anything is loaded, in one line that names
/// the kernel (exit 2).
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn uprobe_multi_when_asked_or_refused_naming_the_kernel() {
    if !require_bpf() {
        return;
    }
    let env = [("XTRACE_UPROBE_ATTACH", "uprobe_multi")];
    if kernel().uprobe_multi {
        assert_spans(&trace(&env), "uprobe_multi");
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = TempDir::new("mechanism-multi");
    let before = Attachments::snapshot();
    let args = args![
        "-p",
        fixture.pid().to_string(),
        "-u",
        "work",
        "-o",
        tmp.join("out")
    ];
    let line = expect_user_error(&before, Xtrace::spawn_with_env(args, &env));
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let expected = format!(
        "xtrace: error: XTRACE_UPROBE_ATTACH=uprobe_multi: this kernel (Linux {}) has no \
         uprobe_multi links, which Linux 6.6 brought; unset XTRACE_UPROBE_ATTACH",
        release.trim()
    );
    assert!(line.starts_with(&expected), "{line}");
    assert!(fixture.is_running());
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn unknown_mechanism_is_refused() {
    if !require_bpf() {
        return;
    }
    let mut fixture = Fixture::spin();
    let tmp = TempDir::new("mechanism-bad");
    let before = Attachments::snapshot();
    let line = expect_user_error(
        &before,
        Xtrace::spawn_with_env(
            args![
                "-p",
                fixture.pid().to_string(),
                "-u",
                "work",
                "-o",
                tmp.join("out")
            ],
            &[("XTRACE_UPROBE_ATTACH", "kprobe")],
        ),
    );
    assert!(
        line.contains("XTRACE_UPROBE_ATTACH=kprobe") && line.contains("uprobe_multi or perf_event"),
        "{line}"
    );
    assert!(fixture.is_running());
}

/// Children made with vfork and clone(CLONE_VM) share the target's memory, by which the kernel
/// filters perf-event uprobes (and uprobe_multi links before Linux 6.12): their calls reach the
/// programs, and are left out as the calls of any other process are. `calls sharedvm` calls quick
/// 10 times, then its 4 children 10 times each.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn children_that_share_the_targets_memory_are_not_traced() {
    if !require_bpf() {
        return;
    }
    for env in [&[][..], &[("XTRACE_UPROBE_ATTACH", "perf_event")][..]] {
        let mut fixture = Fixture::spawn(&fixtures().calls, &["sharedvm"]);
        fixture.wait_ready();
        let pid = u64::from(fixture.pid());
        let tmp = TempDir::new("mechanism-sharedvm");
        let out = tmp.join("out");
        trace_fixture_with(&mut fixture, args!["-u", "quick"], env, &out);
        let out = Outputs::read(&out);
        assert_eq!(out.probe_count("quick"), 10, "{env:?}");
        let spans = out.spans_named("quick");
        assert_eq!(spans.len(), 10, "{env:?}");
        assert!(spans.iter().all(|s| s.pid == pid), "{env:?}: {spans:?}");
    }
}
