//! bpftrace beside xtrace's attach rows (`cargo xtask bench --kernel`): the same fixture, the same
//! functions, the same hooks (a uprobe and a uretprobe on each, counted), so the attach time and
//! the time from Ctrl-C to bpftrace's exit (it removes its uprobes before it exits) compare with
//! xtrace's attach, exit and background removal.
use std::{
    fs,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::{
    attach::FUNCTIONS,
    bpftrace::map_count,
    prep::Env,
    report::{fmt_count, fmt_ns, Report, Row},
    runs::WORKLOAD_TIMEOUT,
    tracer::{tail, Stdout, Tracer},
    workload::Workload,
    Config,
};

/// What one bpftrace run took.
struct Once {
    attach: Duration,
    /// From SIGINT to its exit; None past the limit.
    exit: Option<Duration>,
}

/// The script: count entries and returns of f0..f(n-1) of `bin`.
fn script(bin: &Path, n: usize) -> String {
    let probes = |kind: &str| {
        (0..n)
            .map(|i| format!("{kind}:{}:f{i}", bin.display()))
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "{} {{ @entries = count(); }} {} {{ @returns = count(); }}",
        probes("uprobe"),
        probes("uretprobe")
    )
}

fn once(env: &Env, bpftrace: &Path, bin: &Path, n: usize, limit: Duration) -> Result<Once> {
    // A file, not `-e`: 2,000 probe names can pass the kernel's 128 KiB limit on one argument.
    let file = env.tmp.join("attach.bt");
    fs::write(&file, script(bin, n)).with_context(|| format!("could not write {}", file.display()))?;
    let mut work = Workload::spawn(bin, &[])?;
    // bpftrace holds descriptors for each probe: more than the usual limit of 1,024 for 1,000
    // functions, so the shell raises it first, as far as it may.
    let mut cmd = Command::new("sh");
    let raise = "ulimit -n 65536 2>/dev/null || ulimit -n \"$(ulimit -Hn)\"; exec \"$0\" \"$@\"";
    cmd.args(["-c", raise]).arg(bpftrace).arg(&file);
    // bpftrace refuses more than 512 probes unless told it may attach more.
    cmd.env("__BPFTRACE_NOTIFY_PROBES_ATTACHED", "1")
        .env("BPFTRACE_MAX_PROBES", (2 * n).max(512).to_string());
    let started = Instant::now();
    let mut tracer = Tracer::spawn("bpftrace", cmd, Stdout::Lines)?;
    tracer.wait_for("__BPFTRACE_NOTIFY_PROBES_ATTACHED", limit)?;
    let attach = started.elapsed();
    work.go()?;
    work.finish(WORKLOAD_TIMEOUT)?;
    tracer.interrupt()?;
    let finished = tracer.wait(limit)?;
    let exit = finished.status.map(|_| finished.waited);
    if exit.is_some() {
        let (entries, returns) = (
            map_count(&finished.lines, "entries"),
            map_count(&finished.lines, "returns"),
        );
        if entries != Some(n as u64) || returns != Some(n as u64) {
            bail!(
                "bpftrace counted {entries:?} entries and {returns:?} returns of {n} calls: {}",
                tail(&finished.lines)
            );
        }
    }
    Ok(Once { attach, exit })
}

/// One run per size (bpftrace removes its uprobes one by one before it exits, which takes
/// minutes for 1,000 functions on kernels before 6.6): attach and exit rows.
pub fn run(env: &Env, bin: &Path, cfg: &Config, limit: Duration, report: &mut Report) {
    let bpftrace = match &env.bpftrace {
        Ok(path) => path.clone(),
        Err(why) => {
            report.row(Row::new("attach.bpftrace", "bpftrace attach and exit", "n/a").note(why));
            return;
        }
    };
    let sizes: &[usize] = if cfg.quick {
        &[10, 100]
    } else {
        &[10, 100, FUNCTIONS]
    };
    let mut raw = Vec::new();
    for &n in sizes {
        eprintln!("bench: bpftrace attach/exit {n} functions");
        let functions = fmt_count(n as u64);
        match once(env, &bpftrace, bin, n, limit) {
            Ok(Once { attach, exit }) => {
                raw.push(json!({"functions": n, "attach_ns": attach.as_nanos() as u64,
                    "exit_ns": exit.map(|e| e.as_nanos() as u64)}));
                let ns = attach.as_nanos() as f64;
                report.row(
                    Row::new(
                        &format!("attach.bpftrace_attach_{n}"),
                        format!("bpftrace attach {functions} functions ({} uprobes)", 2 * n),
                        fmt_ns(ns),
                    )
                    .ratio(format!("{}/function", fmt_ns(ns / n as f64)))
                    .data(json!({"ns": ns, "functions": n})),
                );
                let what = format!("bpftrace exits after Ctrl-C, {functions} functions");
                let id = format!("attach.bpftrace_exit_{n}");
                report.row(match exit {
                    Some(exit) => {
                        let ns = exit.as_nanos() as f64;
                        Row::new(&id, what, fmt_ns(ns))
                            .ratio(format!("{}/function", fmt_ns(ns / n as f64)))
                            .data(json!({"ns": ns, "functions": n}))
                    }
                    None => Row::new(&id, what, format!("> {} s", limit.as_secs()))
                        .note("bpftrace had not exited at the limit; killed"),
                });
            }
            Err(e) => {
                raw.push(json!({"functions": n, "error": format!("{e:#}")}));
                let id = format!("attach.bpftrace_attach_{n}");
                let what = format!("bpftrace attach {functions} functions");
                report.row(Row::new(&id, what, "error").note(format!("{e:#}")));
            }
        }
    }
    report.raw("attach_bpftrace", Value::Array(raw));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_probes_entry_and_return_of_each_function() {
        assert_eq!(
            script(Path::new("/b/funcs"), 2),
            "uprobe:/b/funcs:f0,uprobe:/b/funcs:f1 { @entries = count(); } \
             uretprobe:/b/funcs:f0,uretprobe:/b/funcs:f1 { @returns = count(); }"
        );
        let lines = ["Attaching 4 probes...", "", "@entries: 2", "@returns: 2"].map(String::from);
        assert_eq!(map_count(&lines, "entries"), Some(2));
        assert_eq!(map_count(&lines, "missing"), None);
    }
}
