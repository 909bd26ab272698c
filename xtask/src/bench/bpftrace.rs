//! A bpftrace run on the `hits` workload: `uprobe:HITS:SYMBOL { @c = count(); }` or a `printf` of
//! tid and nsecs per hit, its stdout streamed to a file (as xtrace streams trace.json). Attached is
//! when bpftrace says so on stderr (`__BPFTRACE_NOTIFY_PROBES_ATTACHED`, after every probe is
//! attached; "Attaching N probes..." comes before). Counts the events it saw and those it lost.
use std::{fs, process::Command};

use anyhow::{Context, Result};

use super::{
    prep::Env,
    runs::{RunOut, Tool, ATTACH_TIMEOUT, EXIT_TIMEOUT, WORKLOAD_TIMEOUT},
    tracer::{Stdout, Tracer},
    workload::Workload,
};

pub fn run(env: &Env, tool: Tool, symbol: &str, args: &[String]) -> Result<RunOut> {
    let bin = env.bpftrace.as_ref().map_err(|why| anyhow::anyhow!("{why}"))?;
    let action = if tool == Tool::BpftraceCount {
        "@c = count();"
    } else {
        r#"printf("%d %llu\n", tid, nsecs);"#
    };
    let script = format!("uprobe:{}:{symbol} {{ {action} }}", env.hits.display());
    let out_file = env.tmp.join("bpftrace.out");
    let mut cmd = Command::new(bin);
    // bpftrace prints this on stderr once every probe is attached ("Attaching N probes..." comes before).
    cmd.env("__BPFTRACE_NOTIFY_PROBES_ATTACHED", "1")
        .args(["-e", &script]);
    let mut tracer = Tracer::spawn("bpftrace", cmd, Stdout::File(out_file.clone()))?;
    tracer.wait_for("__BPFTRACE_NOTIFY_PROBES_ATTACHED", ATTACH_TIMEOUT)?;
    let mut work = Workload::spawn(&env.hits, args)?;
    work.go()?;
    let work = work.finish(WORKLOAD_TIMEOUT)?;
    tracer.interrupt()?;
    let finished = tracer.wait_ok(EXIT_TIMEOUT)?;
    let text =
        fs::read_to_string(&out_file).with_context(|| format!("could not read {}", out_file.display()))?;
    let _ = fs::remove_file(&out_file);
    let delivered = if tool == Tool::BpftraceCount {
        map_count(text.lines(), "c").unwrap_or(0)
    } else {
        let is_event = |l: &&str| {
            let mut fields = l.split(' ');
            fields.next().is_some_and(|f| f.parse::<i64>().is_ok())
                && fields.next().is_some_and(|f| f.parse::<i64>().is_ok())
        };
        text.lines().filter(is_event).count() as u64
    };
    // "Lost N events" (bpftrace's perf buffer overflowed), on stdout or stderr.
    let lost = text
        .lines()
        .chain(finished.lines.iter().map(String::as_str))
        .filter_map(|l| {
            l.trim()
                .strip_prefix("Lost ")?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    Ok(RunOut {
        work,
        delivered: Some(delivered),
        lost: Some(lost),
    })
}

/// The value bpftrace printed for count map `@name` at its exit (`@name: 42`), among `lines`.
pub fn map_count<S: AsRef<str>>(lines: impl IntoIterator<Item = S>, name: &str) -> Option<u64> {
    let prefix = format!("@{name}:");
    lines
        .into_iter()
        .find_map(|l| l.as_ref().strip_prefix(&prefix)?.trim().parse().ok())
}
