//! The recording loop: drain the ring buffer when the kernel signals or every poll interval, report
//! progress, publish to the live view, read the kernel's added-up off-CPU waits once a second, and
//! return on the first stop condition (-d, SIGINT, SIGTERM, SIGHUP, targets exited, the live
//! view's Stop button).
use std::{
    io::Write,
    os::fd::OwnedFd,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use aya::maps::{MapData, PerCpuArray};
use tokio::{
    io::{unix::AsyncFd, Interest},
    signal::unix::{signal, SignalKind},
};

use super::{output_error, Observer, Said};
use crate::{
    bpf,
    error::{Error, Result},
    output::TraceFile,
    pipeline::{reader::RingReader, Pipeline},
    target::Process,
};

/// How often the observer hears about progress.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(200);
/// How often the live view gets a new snapshot.
const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);
/// How often the kernel's added-up off-CPU waits are read for the threads' counters.
const OFF_CPU_READ_INTERVAL: Duration = Duration::from_secs(1);

/// What the live status line shows.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    pub elapsed: Duration,
    pub events: u64,
    /// Events per second over the last interval.
    pub rate: f64,
    pub lost: u64,
    /// The trace file's name (trace.json or trace.json.gz) and the bytes written to it so far.
    pub output: &'static str,
    pub output_bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    Duration,
    Interrupted,
    Terminated,
    HungUp,
    TargetsExited,
    /// The live view's Stop button.
    Page,
}

impl Stop {
    pub fn reason(self) -> &'static str {
        match self {
            Stop::Duration => "duration",
            Stop::Interrupted => "interrupted",
            Stop::Terminated => "terminated",
            Stop::HungUp => "hangup",
            Stop::TargetsExited => "targets_exited",
            Stop::Page => "stopped_from_page",
        }
    }
}

/// The stop signals, caught from before attaching, so that a signal that arrives while xtrace
/// attaches (or just after it said so) stops the recording cleanly instead of killing xtrace.
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    /// SIGUSR1, the flight recorder's trigger: caught with `--flight` only (else it ends xtrace,
    /// as it always did).
    usr1: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// The stop signals, and SIGUSR1 when `flight`.
    pub fn install(flight: bool) -> Result<Signals> {
        let sig = |kind| signal(kind).map_err(|e| Error::io("installing signal handlers", e));
        Ok(Signals {
            int: sig(SignalKind::interrupt())?,
            term: sig(SignalKind::terminate())?,
            hup: sig(SignalKind::hangup())?,
            usr1: flight.then(|| sig(SignalKind::user_defined1())).transpose()?,
        })
    }

    /// A stop signal that arrived since they were installed, by name and number, without
    /// waiting (it is taken).
    pub async fn arrived(&mut self) -> Option<(&'static str, i32)> {
        // The runtime hands a signal to its `Signal` when it polls its drivers, which it does when
        // a task yields.
        tokio::task::yield_now().await;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        [
            (&mut self.int, "SIGINT", libc::SIGINT),
            (&mut self.term, "SIGTERM", libc::SIGTERM),
            (&mut self.hup, "SIGHUP", libc::SIGHUP),
        ]
        .into_iter()
        .find_map(|(signal, name, number)| signal.poll_recv(&mut cx).is_ready().then_some((name, number)))
    }
}

/// What happened in a traced process that the session answers while recording.
#[derive(Clone, Copy, Debug)]
pub enum Change {
    /// Its `dlopen` returned.
    Loaded(u32),
    /// A thread other than its first ran exec.
    Exec(u32),
    /// Another pass of the loop (the ring buffer drained): for what the session waits on.
    Tick,
}

/// What the recording loop reads and watches.
pub struct Loop<'a, W: Write + Send + 'static> {
    pub signals: &'a mut Signals,
    pub reader: &'a mut RingReader,
    pub pipeline: &'a mut Pipeline<W>,
    /// The kernel's loss counters, for the live status.
    pub counters: &'a PerCpuArray<MapData, u64>,
    /// The targets: when all have exited, the recording stops.
    pub processes: &'a [&'a Process],
    /// `-d`, as a moment.
    pub deadline: Option<Instant>,
    pub trace_file: &'a TraceFile,
    /// `--live`: what publishes to the page.
    pub live: Option<&'a mut crate::live::Publisher>,
    /// `--flight`: its triggers and writing.
    pub flight: Option<&'a mut super::flight::Recorder>,
    /// `--off-cpu`: the kernel's added-up waits, read for the threads' short-wait counters, or
    /// the flight recorder's window.
    pub off_cpu: Option<&'a crate::probes::offcpu::Tables>,
}

/// Without `--flight`: once a second, the kernel's added-up off-CPU waits for the threads'
/// short-wait counters (`last`: when last read).
fn read_off_cpu<W: Write + Send + 'static>(
    pipeline: &mut Pipeline<W>,
    tables: &crate::probes::offcpu::Tables,
    last: &mut Instant,
) -> std::io::Result<()> {
    if last.elapsed() < OFF_CPU_READ_INTERVAL {
        return Ok(());
    }
    *last = Instant::now();
    pipeline.off_cpu_read(crate::clock::monotonic_ns(), &tables.totals(), false)
}

/// Returns when the live view's Stop button is pressed; never without a live view.
async fn stop_asked(shared: Option<&crate::live::Shared>) {
    match shared {
        Some(shared) => shared.stop_asked().await,
        None => std::future::pending().await,
    }
}

/// Hands the live view a snapshot of `pipeline` (never waiting for the page).
fn publish<W: Write + Send + 'static>(
    live: &mut crate::live::Publisher,
    pipeline: &mut Pipeline<W>,
    counters: &PerCpuArray<MapData, u64>,
) {
    let tick = crate::live::Tick {
        now_ns: crate::clock::monotonic_ns(),
        events: pipeline.events(),
        lost: bpf::read_lost(counters).map(|l| l.total()).unwrap_or(0),
        done: None,
    };
    if let Some(parts) = pipeline.live_parts() {
        live.publish(parts, tick);
    }
}

/// SIGUSR1 came: what came up to it goes into the flight recorder's window, and triggers it.
fn signalled<W: Write + Send + 'static>(
    reader: &mut RingReader,
    pipeline: &mut Pipeline<W>,
    flight: Option<&mut super::flight::Recorder>,
) -> std::io::Result<()> {
    reader.drain(|bytes| pipeline.record(bytes))?;
    if let Some(flight) = flight {
        flight.trigger(crate::clock::monotonic_ns(), "signal");
    }
    Ok(())
}

/// The next SIGUSR1, or never when it is not caught.
async fn usr1(signal: &mut Option<tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// The processes' pidfds, each readable once its process has exited.
fn watch(processes: &[&Process]) -> Result<Vec<AsyncFd<OwnedFd>>> {
    let pidfds = processes
        .iter()
        .map(|p| p.pidfd.try_clone())
        .collect::<std::io::Result<Vec<OwnedFd>>>()
        .map_err(|e| Error::io("watching the traced processes", e))?;
    pidfds
        .into_iter()
        // SAFETY: each OwnedFd is an open pidfd owned by its AsyncFd until the AsyncFd is dropped.
        .map(|fd| unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::io(
                "watching the traced processes",
                std::io::Error::other(e.to_string()),
            )
        })
}

/// Reads records until a stop condition: a signal, every target gone, or the deadline (-d).
/// `on_change` answers what happened in the traced processes, with lines for the user.
pub async fn run<W: Write + Send + 'static>(
    state: Loop<'_, W>,
    observer: &mut dyn Observer,
    on_change: &mut dyn FnMut(Change) -> Vec<Said>,
) -> Result<Stop> {
    let Loop {
        signals,
        reader,
        pipeline,
        counters,
        processes,
        deadline,
        trace_file,
        mut live,
        mut flight,
        off_cpu,
    } = state;
    let page = live.as_ref().map(|live| live.shared());
    let Signals {
        int,
        term,
        hup,
        usr1: user1,
    } = signals;
    let watched = watch(processes)?;
    let all_exited = async {
        // A pidfd becomes readable when its process has exited.
        for fd in &watched {
            let _ = fd.readable().await;
        }
    };
    tokio::pin!(all_exited);
    let timed = deadline.is_some();
    let deadline = match deadline {
        Some(at) => tokio::time::sleep_until(at.into()),
        None => tokio::time::sleep(Duration::MAX / 4),
    };
    tokio::pin!(deadline);
    let started = Instant::now();
    let (mut last_report, mut last_events, mut last_publish) = (started, 0, started);
    let mut last_off_cpu_read = started;
    let test_panic = cfg!(debug_assertions) && std::env::var_os("XTRACE_TEST_PANIC").is_some();
    loop {
        tokio::select! {
            _ = reader.wait() => {
                reader
                    .drain(|bytes| pipeline.record(bytes))
                    .and_then(|_| pipeline.flush())
                    .map_err(output_error(&trace_file.path))?;
                pipeline.poll_images();
                // A test hook in debug builds only: a panic once events arrive, for the lifecycle
                // tests that check a panic mid-capture leaves nothing attached.
                if test_panic && pipeline.events() > 0 {
                    panic!("XTRACE_TEST_PANIC is set");
                }
                for warning in pipeline.take_warnings() {
                    if let Some(live) = live.as_deref_mut() {
                        live.alert(&warning);
                    }
                    observer.warning(&warning);
                }
                // A traced process finished a dlopen: attach what it loaded (--cuda). A process
                // whose thread other than the first ran exec: attach its probes again.
                let loaded = pipeline.take_loaded().into_iter().map(Change::Loaded);
                let execs = pipeline.take_execs().into_iter().map(Change::Exec);
                for change in loaded.chain(execs).chain([Change::Tick]) {
                    for said in on_change(change) {
                        said.tell(observer);
                    }
                }
            }
            _ = usr1(user1) => {
                signalled(reader, pipeline, flight.as_deref_mut()).map_err(output_error(&trace_file.path))?;
            }
            _ = int.recv() => return Ok(Stop::Interrupted),
            _ = term.recv() => return Ok(Stop::Terminated),
            _ = hup.recv() => return Ok(Stop::HungUp),
            _ = &mut deadline, if timed => return Ok(Stop::Duration),
            _ = &mut all_exited, if !processes.is_empty() => return Ok(Stop::TargetsExited),
            _ = stop_asked(page.as_deref()) => return Ok(Stop::Page),
        }
        if let Some(live) = live.as_deref_mut() {
            if last_publish.elapsed() >= PUBLISH_INTERVAL {
                last_publish = Instant::now();
                publish(live, pipeline, counters);
            }
        }
        if let Some(flight) = flight.as_deref_mut() {
            for line in flight.tick(pipeline, crate::clock::monotonic_ns(), off_cpu) {
                observer.notice(&line);
            }
        } else if let Some(tables) = off_cpu {
            read_off_cpu(pipeline, tables, &mut last_off_cpu_read).map_err(output_error(&trace_file.path))?;
        }
        if last_report.elapsed() >= PROGRESS_INTERVAL {
            let now = Instant::now();
            let rate = (pipeline.events() - last_events) as f64 / (now - last_report).as_secs_f64();
            (last_report, last_events) = (now, pipeline.events());
            observer.progress(&Progress {
                elapsed: now - started,
                events: pipeline.events(),
                rate,
                lost: bpf::read_lost(counters).map(|l| l.total()).unwrap_or(0),
                output: trace_file.name,
                output_bytes: trace_file.bytes.load(Ordering::Relaxed),
            });
        }
    }
}
