//! The end of a recording: the launched command's exit, trace metadata (process and thread names),
//! the CPU profile (stacks.folded, flamegraph.svg) and the summary files.
use std::{collections::HashMap, time::Duration};

use super::{output_error, run::Stop};
use crate::{
    cuda::nvml::{track_pid, DeviceSeries},
    error::Result,
    export::{
        cuda::CudaSummary,
        profile,
        summary::{self, CommandSummary, Lost, ProbeSummary, RunInfo, Summary, TargetSummary},
    },
    launch::Launch,
    output::{self, Sink, TraceFile},
    pipeline::Pipeline,
    probes::uprobe::Plan,
    target::ProcessInfo,
};

type ExitReceiver = tokio::sync::oneshot::Receiver<std::io::Result<std::process::ExitStatus>>;

/// The launched command's exit; a command still running gets SIGTERM, then SIGKILL after 2 s. One
/// that has exited (its pidfd says so) is waited for, not signalled: its waiter may not have
/// reported yet.
pub async fn command(launch: &Launch, mut exit: ExitReceiver) -> CommandSummary {
    use std::os::unix::process::ExitStatusExt;
    let pid = launch.process.pid;
    let mut status = exit.try_recv().ok();
    let ended_by_xtrace = status.is_none() && !launch.process.has_exited();
    if ended_by_xtrace {
        let _ = launch.process.signal(libc::SIGTERM);
        status = match tokio::time::timeout(Duration::from_secs(2), &mut exit).await {
            Ok(result) => result.ok(),
            Err(_) => {
                let _ = launch.process.signal(libc::SIGKILL);
                exit.await.ok()
            }
        };
    } else if status.is_none() {
        status = exit.await.ok();
    }
    let status = status.and_then(|r| r.ok());
    CommandSummary {
        argv: launch.argv.clone(),
        pid,
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        ended_by_xtrace,
    }
}

/// How the CPU was sampled, when it was.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    pub hz: u64,
    /// Whether processes the sampled ones start are sampled too, and when the capture is read:
    /// how many were (`FOLLOWED_PROCESSES`), how many were not for want of room.
    pub followed: Option<(u64, u64)>,
}

/// Closes trace.json with its metadata and writes summary.json and summary.txt, then the outputs
/// derived from them (span-flamegraph.svg, profile.pb.gz); returns the summary and the names of
/// the derived files.
#[allow(clippy::too_many_arguments)]
pub fn write(
    out: &output::Dir,
    trace_file: &TraceFile,
    plan: &Plan,
    pipeline: Pipeline<Sink>,
    mut infos: Vec<(u32, ProcessInfo)>,
    targets: &[(u32, bool)],
    stop: Stop,
    (lost, unmatched_entries): (Lost, u64),
    command: Option<CommandSummary>,
    run: RunInfo,
    sampling: Option<Sampling>,
    icicle: bool,
    gpus: &[DeviceSeries],
) -> Result<(Summary, Vec<&'static str>)> {
    let trace_err = output_error(&trace_file.path);
    let Pipeline {
        stats,
        trace,
        names,
        values,
        usdt,
        samples,
        cuda,
        ranges,
        warnings,
        usdt_unpaired,
        undecodable,
        unknown_probe,
        ..
    } = pipeline;
    let mut trace = trace.finish().map_err(trace_err)?;
    for (pid, info) in &names.processes {
        if !infos.iter().any(|(p, _)| p == pid) {
            infos.push((*pid, info.clone()));
        }
    }
    for (pid, info) in infos.iter_mut() {
        info.comm = names.process_comm(*pid, info.comm.take());
    }
    for (pid, info) in &infos {
        trace.process_name(*pid, &info.label()).map_err(trace_err)?;
    }
    for (pid, tid) in names.threads.keys() {
        if let Some(name) = names.thread_label(*pid, *tid) {
            trace.thread_name(*pid, *tid, name).map_err(trace_err)?;
        }
    }
    let frames = sampling.map(|_| profile::frames(&samples));
    if let Some(frames) = &frames {
        profile::timeline(&mut trace, &samples, frames).map_err(trace_err)?;
    }
    for gpu in gpus {
        let pid = track_pid(gpu.index);
        trace
            .process_name(pid, &format!("GPU {}: {}", gpu.index, gpu.name))
            .map_err(trace_err)?;
        for r in &gpu.readings {
            trace
                .counter(pid, r.track, r.ts_ns, &r.values)
                .map_err(trace_err)?;
        }
    }
    let spans = trace.spans();
    trace.finish().map_err(trace_err)?.close().map_err(trace_err)?;
    output::complete(out, trace_file.name)?;

    let mut probes: Vec<ProbeSummary> = plan
        .probes
        .iter()
        .zip(stats.iter())
        .zip(values.summaries())
        // Probes kept for CUDA libraries that were never loaded.
        .filter(|((p, _), _)| p.is_placed())
        .map(|((p, s), values)| ProbeSummary {
            name: p.name.clone(),
            kind: p.kind,
            target: p.target.clone(),
            offset: matches!(p.kind, "uprobe" | "cuda" | "loader" | "nvtx")
                .then(|| format!("{:#x}", p.offset)),
            stats: s.distribution(),
            below_min_duration: run.min_duration_ns.map(|_| s.short),
            values,
        })
        .collect();
    probes.sort_by(|a, b| b.stats.total_ns.cmp(&a.stats.total_ns).then(a.name.cmp(&b.name)));
    let profile = match (sampling, &frames) {
        (Some(sampling), Some(frames)) => {
            let names: HashMap<u32, String> = infos
                .iter()
                .map(|(pid, info)| (*pid, info.comm.clone().unwrap_or_else(|| format!("pid {pid}"))))
                .collect();
            let mut profile = profile::write(out, &samples, frames, &names, sampling.hz, icicle)?;
            profile.followed_processes = sampling.followed.map(|(followed, _)| followed);
            profile.processes_not_followed = sampling.followed.map(|(_, not)| not);
            Some(profile)
        }
        _ => None,
    };
    let summary = Summary {
        format_version: summary::FORMAT_VERSION,
        run,
        stop_reason: stop.reason(),
        lost_events: lost.total(),
        decode_errors: undecodable + unknown_probe,
        lost,
        unmatched_entries,
        args_unpaired: values.dropped() + cuda.dropped(),
        usdt_unpaired: usdt_unpaired + usdt.still_open(),
        probes,
        command,
        targets: infos
            .iter()
            .filter_map(|(pid, info)| {
                let (_, exited) = targets.iter().find(|(p, _)| p == pid)?;
                Some(TargetSummary {
                    pid: *pid,
                    ns_pid: info.ns_pid,
                    comm: info.comm.clone().unwrap_or_default(),
                    exited: *exited,
                })
            })
            .collect(),
        profile,
        cuda: (!plan.cuda.is_empty()).then(|| CudaSummary::new(&cuda.totals)),
        gpus: gpus.iter().map(DeviceSeries::summary).collect(),
        ranges: plan.ranges.map(|_| ranges.summary()),
        ranges_unpaired: plan.ranges.map(|_| ranges.unpaired + ranges.still_open()),
        warn_over: warnings.summary(),
    };
    output::write(out, output::SUMMARY_JSON, summary.to_json().as_bytes())?;
    output::write(out, output::SUMMARY_TXT, summary.table().as_bytes())?;
    let derived = crate::export::derived::write(out, spans, icicle)?;
    Ok((summary, derived))
}
