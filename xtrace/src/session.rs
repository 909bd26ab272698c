//! One recording from start to stop: validate input, attach, read until a stop condition, detach,
//! and write the outputs. Every stop path (duration, SIGINT, SIGTERM, SIGHUP, targets exited) ends
//! with complete outputs; every error path drops the kernel attachments (they are fd-based).
use std::{
    io::{BufWriter, Write},
    os::fd::OwnedFd,
    path::PathBuf,
    time::{Duration, Instant},
};

use aya::maps::{MapData, PerCpuArray, RingBuf};
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{signal, SignalKind},
};
use xtrace_common::probe::DEFAULT_RING_BYTES;

use crate::{
    bpf,
    cli::RecordArgs,
    error::{Error, Result},
    export::{
        chrome::ChromeWriter,
        summary::{CommandSummary, ProbeSummary, Summary, TargetSummary},
    },
    output,
    pipeline::{reader::RingReader, Pipeline},
    privilege,
    probes::{
        spec::UprobeSpec,
        uprobe::{self, Scope},
    },
    target::{resolve_command, Launch, Process},
};

/// What a finished recording hands back to the CLI.
pub struct Recording {
    pub summary: Summary,
    pub output: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Duration,
    Interrupted,
    Terminated,
    HungUp,
    TargetsExited,
}

impl Stop {
    fn reason(self) -> &'static str {
        match self {
            Stop::Duration => "duration",
            Stop::Interrupted => "interrupted",
            Stop::Terminated => "terminated",
            Stop::HungUp => "hangup",
            Stop::TargetsExited => "targets_exited",
        }
    }
}

/// Records until a stop condition; `attached` is told once every probe is in place.
pub async fn record(args: &RecordArgs, attached: impl FnOnce(&str)) -> Result<Recording> {
    privilege::check()?;
    let specs = args
        .uprobe
        .iter()
        .map(|s| UprobeSpec::parse(s))
        .collect::<Result<Vec<_>>>()?;
    let mut processes = Vec::new();
    let mut launch = None;
    let plan = if args.command.is_empty() {
        let mut pids = args.pid.clone();
        pids.dedup();
        for pid in pids {
            processes.push(Process::open(pid)?);
        }
        uprobe::plan(&specs, &processes.iter().map(Scope::Process).collect::<Vec<_>>())?
    } else {
        let program = resolve_command(&args.command[0])?;
        let plan = uprobe::plan(&specs, &[Scope::Command(&program)])?;
        // The output directory must be usable before a command is started on the user's behalf.
        output::prepare(args.output.as_deref())?;
        launch = Some(Launch::start(&program, &args.command)?);
        plan
    };
    let out = output::prepare(args.output.as_deref())?;
    let out_err = |path: &str| {
        let path = out.join(path);
        move |source| Error::Output { path, source }
    };

    let target_pids: Vec<u32> = match &launch {
        Some(l) => vec![l.process.pid],
        None => processes.iter().map(|p| p.pid).collect(),
    };
    let mut ebpf = bpf::load(DEFAULT_RING_BYTES)?;
    let uprobes = uprobe::attach(&mut ebpf, &plan, &target_pids)?;
    let ring = RingBuf::try_from(bpf::take_map(&mut ebpf, "EVENTS")?).map_err(|source| Error::Map {
        name: "EVENTS",
        source,
    })?;
    let counters: PerCpuArray<MapData, u64> = PerCpuArray::try_from(bpf::take_map(&mut ebpf, "COUNTERS")?)
        .map_err(|source| Error::Map {
            name: "COUNTERS",
            source,
        })?;
    let mut reader = RingReader::new(ring)?;
    let names: Vec<(&str, &str)> = plan.probes.iter().map(|p| (p.name.as_str(), p.kind)).collect();
    let trace_file = output::create(&out, "trace.json")?;
    let trace = ChromeWriter::new(BufWriter::with_capacity(1 << 20, trace_file), &names)
        .map_err(out_err("trace.json"))?;
    let mut exit_status = None;
    if let Some(l) = launch.as_mut() {
        l.release()?;
        exit_status = l.take_exit();
    }
    let target_processes: Vec<&Process> = match &launch {
        Some(l) => vec![&l.process],
        None => processes.iter().collect(),
    };
    let pidfds = target_processes
        .iter()
        .map(|p| p.pidfd.try_clone())
        .collect::<std::io::Result<Vec<OwnedFd>>>()
        .map_err(|e| Error::io("watching the traced processes", e))?;
    let what = match &launch {
        Some(l) => format!("`{}` (pid {})", l.argv.join(" "), l.process.pid),
        None => {
            let pids: Vec<String> = target_pids.iter().map(u32::to_string).collect();
            format!("pid {}", pids.join(", "))
        }
    };
    attached(&format!(
        "attached {} probe{} ({uprobes} uprobes) to {what}; Ctrl-C to stop",
        plan.probes.len(),
        if plan.probes.len() == 1 { "" } else { "s" }
    ));

    let started = Instant::now();
    let mut pipeline = Pipeline::new(plan.probes.clone(), trace);
    let mut comms: Vec<(u32, Option<String>)> = Vec::new();
    for p in &target_processes {
        comms.push((p.pid, p.comm()));
    }
    let stop = run(&mut reader, &mut pipeline, args.duration, pidfds).await;
    let duration = started.elapsed();
    // Detach first so nothing new arrives, then read what is left.
    uprobe::detach(&mut ebpf);
    drop(ebpf);
    let stop = stop?;
    let drained = reader.drain(|bytes| pipeline.record(bytes));
    drained.map_err(out_err("trace.json"))?;
    let lost = bpf::read_lost(&counters)?;

    let command = match (&launch, exit_status) {
        (Some(l), Some(exit)) => Some(finish_command(l, exit).await),
        _ => None,
    };
    // Launched commands exec'd after we first read their name; read it again now that it ran.
    for (pid, comm) in comms.iter_mut() {
        if let Some(name) = pipeline.names.threads.get(&(*pid, *pid)).cloned().flatten() {
            *comm = Some(name);
        }
    }
    let mut trace = pipeline.trace;
    for (pid, comm) in &comms {
        trace
            .process_name(*pid, comm.as_deref().unwrap_or("?"))
            .map_err(out_err("trace.json"))?;
    }
    for ((pid, tid), name) in &pipeline.names.threads {
        if !comms.iter().any(|(p, _)| p == pid) {
            let comm = crate::target::thread_comm(*pid, *pid).unwrap_or_else(|| format!("pid {pid}"));
            trace.process_name(*pid, &comm).map_err(out_err("trace.json"))?;
            comms.push((*pid, Some(comm)));
        }
        if let Some(name) = name {
            trace
                .thread_name(*pid, *tid, name)
                .map_err(out_err("trace.json"))?;
        }
    }
    trace.finish().map_err(out_err("trace.json"))?;

    let mut probes: Vec<ProbeSummary> = plan
        .probes
        .iter()
        .zip(pipeline.stats.iter_mut())
        .map(|(p, s)| ProbeSummary {
            name: p.name.clone(),
            kind: p.kind,
            target: p.target.clone(),
            stats: s.distribution(),
        })
        .collect();
    probes.sort_by(|a, b| b.stats.total_ns.cmp(&a.stats.total_ns).then(a.name.cmp(&b.name)));
    let summary = Summary {
        duration_ns: duration.as_nanos() as u64,
        stop_reason: stop.reason(),
        lost_events: lost.total(),
        lost,
        probes,
        command,
        targets: comms
            .iter()
            .filter(|(pid, _)| target_pids.contains(pid))
            .map(|(pid, comm)| TargetSummary {
                pid: *pid,
                comm: comm.clone().unwrap_or_default(),
            })
            .collect(),
    };
    write_file(&out, "summary.json", summary.to_json().as_bytes())?;
    write_file(&out, "summary.txt", summary.table().as_bytes())?;
    Ok(Recording { summary, output: out })
}

fn write_file(dir: &std::path::Path, name: &str, bytes: &[u8]) -> Result<()> {
    let mut file = output::create(dir, name)?;
    file.write_all(bytes).map_err(|source| Error::Output {
        path: dir.join(name),
        source,
    })
}

/// Reads records until a stop condition.
async fn run<W: Write>(
    reader: &mut RingReader,
    pipeline: &mut Pipeline<W>,
    duration: Option<Duration>,
    pidfds: Vec<OwnedFd>,
) -> Result<Stop> {
    let sig = |kind| signal(kind).map_err(|e| Error::io("installing signal handlers", e));
    let (mut int, mut term, mut hup) = (
        sig(SignalKind::interrupt())?,
        sig(SignalKind::terminate())?,
        sig(SignalKind::hangup())?,
    );
    let watched = pidfds
        .into_iter()
        // SAFETY: each OwnedFd is an open pidfd owned by its AsyncFd until the AsyncFd is dropped.
        .map(|fd| unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::io(
                "watching the traced processes",
                std::io::Error::other(e.to_string()),
            )
        })?;
    let all_exited = async {
        // A pidfd becomes readable when its process has exited.
        for fd in &watched {
            let _ = fd.readable().await;
        }
    };
    tokio::pin!(all_exited);
    let deadline = tokio::time::sleep(duration.unwrap_or(Duration::MAX / 4));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = reader.wait() => {
                reader.drain(|bytes| pipeline.record(bytes)).map_err(|e| Error::io("writing trace.json", e))?;
            }
            _ = int.recv() => return Ok(Stop::Interrupted),
            _ = term.recv() => return Ok(Stop::Terminated),
            _ = hup.recv() => return Ok(Stop::HungUp),
            _ = &mut deadline, if duration.is_some() => return Ok(Stop::Duration),
            _ = &mut all_exited => return Ok(Stop::TargetsExited),
        }
    }
}

/// The launched command's exit; a command still running gets SIGTERM, then SIGKILL after 2 s.
async fn finish_command(
    launch: &Launch,
    mut exit: tokio::sync::oneshot::Receiver<std::io::Result<std::process::ExitStatus>>,
) -> CommandSummary {
    use std::os::unix::process::ExitStatusExt;
    let pid = launch.process.pid;
    let mut status = exit.try_recv().ok();
    if status.is_none() {
        // SAFETY: plain kill(2); the child is unreaped (its waiter has not reported), so the pid is ours.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        status = match tokio::time::timeout(Duration::from_secs(2), &mut exit).await {
            Ok(result) => result.ok(),
            Err(_) => {
                // SAFETY: as above.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                exit.await.ok()
            }
        };
    }
    let status = status.and_then(|r| r.ok());
    CommandSummary {
        argv: launch.argv.clone(),
        pid,
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
    }
}
