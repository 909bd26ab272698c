//! GPU metrics (`--gpu-metrics`): a thread samples every NVIDIA GPU through NVML (nvml-wrapper,
//! which loads libnvidia-ml.so.1 at run time) each period — what `nvml_read` reads: device
//! counters, the traced processes' memory and utilization, GPM metrics on Hopper and later —
//! stamped with CLOCK_MONOTONIC, the clock of the eBPF records, so the counters line up with the
//! spans in trace.json. With a live view, each round's readings are also handed to it through a
//! bounded [`GpuFeed`].
use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc, Mutex,
    },
    thread::JoinHandle,
    time::Duration,
};

use nvml_wrapper::Nvml;

use super::nvml_read::DeviceReader;
pub use super::nvml_read::{DeviceSeries, GpuSummary, Reading};

/// Why NVML cannot load in a static xtrace (the release's musl build): it has no dynamic loader
/// to open libnvidia-ml.so.1 with.
const STATIC_BUILD: &str = if cfg!(target_env = "musl") {
    "; this xtrace is the static release build, which cannot load NVML: build xtrace from source \
     (cargo xtask build --release) for --gpu-metrics"
} else {
    ""
};

/// Default sampling period.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(100);

/// Readings the live view has not taken yet, at most this many (a live view takes them every
/// second; past it, the oldest go).
const FEED_CAP: usize = 50_000;

/// The readings handed to the live view: the GPUs (index, name), then each round's readings.
#[derive(Clone, Default)]
pub struct GpuFeed(Arc<Mutex<FeedState>>);

#[derive(Default)]
struct FeedState {
    gpus: Vec<(u32, String)>,
    pending: VecDeque<(u32, Reading)>,
}

impl GpuFeed {
    pub(crate) fn started(&self, gpus: Vec<(u32, String)>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).gpus = gpus;
    }

    pub(crate) fn push(&self, index: u32, readings: &[Reading]) {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for r in readings {
            if state.pending.len() == FEED_CAP {
                state.pending.pop_front();
            }
            state.pending.push_back((index, r.clone()));
        }
    }

    /// The GPUs and the readings since the last call.
    pub fn take(&self) -> Taken {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let pending = std::mem::take(&mut state.pending);
        Taken {
            gpus: state.gpus.clone(),
            readings: pending.into(),
        }
    }
}

/// What [`GpuFeed::take`] takes.
pub struct Taken {
    /// Each GPU's index and name.
    pub gpus: Vec<(u32, String)>,
    /// The readings since the last take, with their GPU's index.
    pub readings: Vec<(u32, Reading)>,
}

/// The running sampler.
pub struct GpuMetrics {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<DeviceSeries>>,
}

impl GpuMetrics {
    /// Starts sampling every GPU each `period`, with the memory and utilization of `pids` (every
    /// process with -a: empty), handing each round to `feed` too when a live view shows it.
    /// Err: why not, for a one-line notice (no NVML, no permission, no GPU).
    pub fn start(period: Duration, pids: Vec<u32>, feed: Option<GpuFeed>) -> Result<GpuMetrics, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready, started) = mpsc::channel::<Result<(), String>>();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xtrace-nvml".into())
            .spawn(move || {
                let nvml = match open() {
                    Ok(nvml) => nvml,
                    Err(why) => {
                        let _ = ready.send(Err(why));
                        return Vec::new();
                    }
                };
                sample(
                    &nvml,
                    &Sampling {
                        period,
                        pids,
                        feed,
                        stop: flag,
                    },
                    ready,
                )
            })
            .map_err(|e| format!("cannot start the GPU metrics thread ({e})"))?;
        match started.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(())) => Ok(GpuMetrics { stop, thread }),
            Ok(Err(why)) => {
                let _ = thread.join();
                Err(why)
            }
            Err(_) => {
                stop.store(true, Ordering::Relaxed);
                Err("NVML did not answer within 5 s".into())
            }
        }
    }

    /// Stops sampling and returns what was read.
    pub fn stop(self) -> Vec<DeviceSeries> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// What the sampling thread was asked to do.
struct Sampling {
    period: Duration,
    pids: Vec<u32>,
    feed: Option<GpuFeed>,
    stop: Arc<AtomicBool>,
}

/// NVML, loaded and seeing at least one GPU; Err: why not.
fn open() -> Result<Nvml, String> {
    let nvml = Nvml::init().map_err(|e| format!("NVML could not be loaded ({e}){STATIC_BUILD}"))?;
    match nvml.device_count() {
        Ok(0) => Err("NVML sees no GPU".into()),
        Ok(_) => Ok(nvml),
        Err(e) => Err(format!("NVML cannot list GPUs ({e})")),
    }
}

/// Reads every GPU each period until told to stop; says it started on `ready` first.
fn sample(nvml: &Nvml, how: &Sampling, ready: mpsc::Sender<Result<(), String>>) -> Vec<DeviceSeries> {
    let count = nvml.device_count().unwrap_or(0);
    let mut readers: Vec<(u32, DeviceReader)> = (0..count)
        .filter_map(|i| {
            nvml.device_by_index(i)
                .ok()
                .map(|d| (i, DeviceReader::new(nvml, i, d)))
        })
        .collect();
    let mut series: Vec<DeviceSeries> = readers
        .iter()
        .map(|(index, reader)| DeviceSeries {
            index: *index,
            name: reader.name(),
            gpm: reader.has_gpm(),
            ..Default::default()
        })
        .collect();
    if let Some(feed) = &how.feed {
        feed.started(series.iter().map(|s| (s.index, s.name.clone())).collect());
    }
    let _ = ready.send(Ok(()));
    loop {
        for ((index, reader), s) in readers.iter_mut().zip(series.iter_mut()) {
            let readings = reader.read(&how.pids);
            if let Some(feed) = &how.feed {
                feed.push(*index, &readings);
            }
            s.readings.extend(readings);
            s.samples += 1;
        }
        // Sleep in short steps so stopping is prompt.
        let mut left = how.period;
        while !left.is_zero() {
            if how.stop.load(Ordering::Relaxed) {
                return series;
            }
            let step = left.min(Duration::from_millis(20));
            std::thread::sleep(step);
            left -= step;
        }
    }
}

/// The trace.json process id of GPU `index`'s counter tracks (outside the kernel's pid range).
pub fn track_pid(index: u32) -> u32 {
    0x7fff_0000 + index
}
