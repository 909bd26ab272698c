//! GPU metrics (`--gpu-metrics`): a thread samples every NVIDIA GPU through NVML (nvml-wrapper,
//! which loads libnvidia-ml.so.1 at run time) — utilization, memory, power, temperature, SM clock,
//! PCIe throughput, and the device memory of the traced processes — stamped with CLOCK_MONOTONIC,
//! the clock of the eBPF records, so the counters line up with the spans in trace.json.
use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use nvml_wrapper::{
    enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor},
    enums::device::UsedGpuMemory,
    Device, Nvml,
};
use serde::Serialize;

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

/// One reading of one counter track: its name and the values of its series.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub ts_ns: u64,
    pub track: &'static str,
    pub values: Vec<(String, f64)>,
}

/// Everything read from one GPU.
#[derive(Clone, Debug, Default)]
pub struct DeviceSeries {
    pub index: u32,
    pub name: String,
    pub readings: Vec<Reading>,
    pub samples: u64,
}

/// summary.json's view of one GPU.
#[derive(Clone, Debug, Serialize)]
pub struct GpuSummary {
    pub index: u32,
    pub name: String,
    /// Times the GPU was read.
    pub samples: u64,
    /// Highest readings over the capture (null when NVML does not report that metric).
    pub max_gpu_utilization_pct: Option<f64>,
    pub max_memory_used_bytes: Option<f64>,
    pub max_power_w: Option<f64>,
    /// Highest device memory NVML reported for any traced process on this GPU.
    pub max_traced_process_memory_bytes: Option<f64>,
}

impl DeviceSeries {
    fn max(&self, track: &str, series: Option<&str>) -> Option<f64> {
        self.readings
            .iter()
            .filter(|r| r.track == track)
            .flat_map(|r| r.values.iter())
            .filter(|(name, _)| series.is_none_or(|s| s == name))
            .map(|(_, v)| *v)
            .reduce(f64::max)
    }

    pub fn summary(&self) -> GpuSummary {
        GpuSummary {
            index: self.index,
            name: self.name.clone(),
            samples: self.samples,
            max_gpu_utilization_pct: self.max(UTILIZATION, Some("gpu")),
            max_memory_used_bytes: self.max(MEMORY, None),
            max_power_w: self.max(POWER, None),
            max_traced_process_memory_bytes: self.max(PROCESS_MEMORY, None),
        }
    }
}

const UTILIZATION: &str = "utilization (%)";
const MEMORY: &str = "memory used (bytes)";
const POWER: &str = "power (W)";
const TEMPERATURE: &str = "temperature (C)";
const SM_CLOCK: &str = "SM clock (MHz)";
const PCIE: &str = "PCIe (KB/s)";
const PROCESS_MEMORY: &str = "traced processes' memory (bytes)";

/// Every metric NVML gives for `device` now; those it does not support are left out.
fn read(device: &Device, pids: &[u32]) -> Vec<Reading> {
    let ts_ns = crate::clock::monotonic_ns();
    let mut readings = Vec::new();
    let mut add = |track, values: Vec<(&str, Option<f64>)>| {
        let values: Vec<(String, f64)> = values
            .into_iter()
            .filter_map(|(name, v)| v.map(|v| (name.to_string(), v)))
            .collect();
        if !values.is_empty() {
            readings.push(Reading { ts_ns, track, values });
        }
    };
    let utilization = device.utilization_rates().ok();
    add(
        UTILIZATION,
        vec![
            ("gpu", utilization.as_ref().map(|u| f64::from(u.gpu))),
            ("memory", utilization.as_ref().map(|u| f64::from(u.memory))),
        ],
    );
    add(
        MEMORY,
        vec![("used", device.memory_info().ok().map(|m| m.used as f64))],
    );
    add(
        POWER,
        vec![(
            "power",
            device.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
        )],
    );
    add(
        TEMPERATURE,
        vec![(
            "gpu",
            device.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
        )],
    );
    add(
        SM_CLOCK,
        vec![("sm", device.clock_info(Clock::SM).ok().map(f64::from))],
    );
    add(
        PCIE,
        vec![
            (
                "tx",
                device.pcie_throughput(PcieUtilCounter::Send).ok().map(f64::from),
            ),
            (
                "rx",
                device
                    .pcie_throughput(PcieUtilCounter::Receive)
                    .ok()
                    .map(f64::from),
            ),
        ],
    );
    let processes = device.running_compute_processes().unwrap_or_default();
    let traced: Vec<(String, Option<f64>)> = processes
        .iter()
        .filter(|p| pids.is_empty() || pids.contains(&p.pid))
        .map(|p| {
            let bytes = match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes as f64),
                UsedGpuMemory::Unavailable => None,
            };
            (format!("pid {}", p.pid), bytes)
        })
        .collect();
    add(
        PROCESS_MEMORY,
        traced.iter().map(|(n, v)| (n.as_str(), *v)).collect(),
    );
    readings
}

/// The running sampler.
pub struct GpuMetrics {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<DeviceSeries>>,
}

impl GpuMetrics {
    /// Starts sampling every GPU each `period`, with the memory of `pids` (every process with -a:
    /// empty). Err: why not, for a one-line notice (no NVML, no permission, no GPU).
    pub fn start(period: Duration, pids: Vec<u32>) -> Result<GpuMetrics, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready, started) = mpsc::channel::<Result<(), String>>();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xtrace-nvml".into())
            .spawn(move || {
                let nvml = match Nvml::init() {
                    Ok(nvml) => nvml,
                    Err(e) => {
                        let _ = ready.send(Err(format!("NVML could not be loaded ({e}){STATIC_BUILD}")));
                        return Vec::new();
                    }
                };
                let count = match nvml.device_count() {
                    Ok(0) => {
                        let _ = ready.send(Err("NVML sees no GPU".into()));
                        return Vec::new();
                    }
                    Ok(count) => count,
                    Err(e) => {
                        let _ = ready.send(Err(format!("NVML cannot list GPUs ({e})")));
                        return Vec::new();
                    }
                };
                let devices: Vec<(u32, Device)> = (0..count)
                    .filter_map(|i| nvml.device_by_index(i).ok().map(|d| (i, d)))
                    .collect();
                let mut series: Vec<DeviceSeries> = devices
                    .iter()
                    .map(|(index, d)| DeviceSeries {
                        index: *index,
                        name: d.name().unwrap_or_else(|_| "NVIDIA GPU".into()),
                        ..Default::default()
                    })
                    .collect();
                let _ = ready.send(Ok(()));
                loop {
                    for ((_, device), s) in devices.iter().zip(series.iter_mut()) {
                        s.readings.extend(read(device, &pids));
                        s.samples += 1;
                    }
                    // Sleep in short steps so stopping is prompt.
                    let mut left = period;
                    while !left.is_zero() {
                        if flag.load(Ordering::Relaxed) {
                            return series;
                        }
                        let step = left.min(Duration::from_millis(20));
                        std::thread::sleep(step);
                        left -= step;
                    }
                }
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

/// The trace.json process id of GPU `index`'s counter tracks (outside the kernel's pid range).
pub fn track_pid(index: u32) -> u32 {
    0x7fff_0000 + index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_take_the_highest_reading_of_each_metric() {
        let reading = |track, values: &[(&str, f64)]| Reading {
            ts_ns: 1,
            track,
            values: values.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        };
        let series = DeviceSeries {
            index: 0,
            name: "GPU".into(),
            samples: 2,
            readings: vec![
                reading(UTILIZATION, &[("gpu", 40.0), ("memory", 90.0)]),
                reading(UTILIZATION, &[("gpu", 75.0), ("memory", 10.0)]),
                reading(POWER, &[("power", 300.5)]),
            ],
        };
        let s = series.summary();
        assert_eq!(s.max_gpu_utilization_pct, Some(75.0));
        assert_eq!(s.max_power_w, Some(300.5));
        assert_eq!(s.max_memory_used_bytes, None);
    }
}
