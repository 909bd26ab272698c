//! One read of one GPU through NVML: the device counters (utilization, memory, power,
//! temperature, SM clock, PCIe), the traced processes' device memory and utilization
//! (`nvmlDeviceGetProcessUtilization`, SM, memory, encoder and decoder per pid since the last
//! read), and on GPUs with GPM (Hopper and later) SM occupancy, tensor-core activity and DRAM
//! bandwidth from the two newest GPM samples. Each metric is one counter track; what a GPU does
//! not support is left out.
use nvml_wrapper::{
    enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor},
    enums::{device::UsedGpuMemory, gpm::GpmMetricId},
    gpm::{gpm_metrics_get, GpmSample},
    Device, Nvml,
};
use serde::Serialize;

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
    /// Whether GPM metrics were read (the GPU supports GPM).
    pub gpm: bool,
}

/// summary.json's view of one GPU.
#[derive(Clone, Debug, Serialize)]
pub struct GpuSummary {
    pub index: u32,
    pub name: String,
    /// Times the GPU was read.
    pub samples: u64,
    /// Whether the GPU reported GPM metrics (Hopper and later).
    pub gpm: bool,
    /// Highest readings over the capture (null when NVML does not report that metric).
    pub max_gpu_utilization_pct: Option<f64>,
    pub max_memory_used_bytes: Option<f64>,
    pub max_power_w: Option<f64>,
    /// Highest device memory NVML reported for any traced process on this GPU.
    pub max_traced_process_memory_bytes: Option<f64>,
    /// Highest SM utilization NVML reported for any traced process on this GPU.
    pub max_traced_process_sm_utilization_pct: Option<f64>,
    /// GPM: highest SM occupancy, tensor-core activity and DRAM bandwidth utilization.
    pub max_sm_occupancy_pct: Option<f64>,
    pub max_tensor_active_pct: Option<f64>,
    pub max_dram_bandwidth_pct: Option<f64>,
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
            gpm: self.gpm,
            max_gpu_utilization_pct: self.max(UTILIZATION, Some("gpu")),
            max_memory_used_bytes: self.max(MEMORY, None),
            max_power_w: self.max(POWER, None),
            max_traced_process_memory_bytes: self.max(PROCESS_MEMORY, None),
            max_traced_process_sm_utilization_pct: self.max(PROCESS_SM, None),
            max_sm_occupancy_pct: self.max(SM_OCCUPANCY, None),
            max_tensor_active_pct: self.max(TENSOR_ACTIVE, None),
            max_dram_bandwidth_pct: self.max(DRAM_BANDWIDTH, None),
        }
    }
}

pub const UTILIZATION: &str = "utilization (%)";
pub const MEMORY: &str = "memory used (bytes)";
pub const POWER: &str = "power (W)";
pub const TEMPERATURE: &str = "temperature (C)";
pub const SM_CLOCK: &str = "SM clock (MHz)";
pub const PCIE: &str = "PCIe (KB/s)";
pub const PROCESS_MEMORY: &str = "traced processes' memory (bytes)";
pub const PROCESS_SM: &str = "traced processes' SM utilization (%)";
pub const PROCESS_MEMORY_UTIL: &str = "traced processes' memory utilization (%)";
pub const PROCESS_ENCODER: &str = "traced processes' encoder utilization (%)";
pub const PROCESS_DECODER: &str = "traced processes' decoder utilization (%)";
pub const SM_OCCUPANCY: &str = "SM occupancy (%)";
pub const TENSOR_ACTIVE: &str = "tensor-core activity (%)";
pub const DRAM_BANDWIDTH: &str = "DRAM bandwidth (%)";

/// The tracks whose series are fixed, with their series (the others have one per `pid N`).
pub const FIXED_SERIES: [(&str, &[&str]); 9] = [
    (UTILIZATION, &["gpu", "memory"]),
    (MEMORY, &["used"]),
    (POWER, &["power"]),
    (TEMPERATURE, &["gpu"]),
    (SM_CLOCK, &["sm"]),
    (PCIE, &["tx", "rx"]),
    (SM_OCCUPANCY, &["occupancy"]),
    (TENSOR_ACTIVE, &["tensor"]),
    (DRAM_BANDWIDTH, &["dram"]),
];

/// The tracks with one series per traced process (`pid N`).
pub const PROCESS_TRACKS: [&str; 5] = [
    PROCESS_MEMORY,
    PROCESS_SM,
    PROCESS_MEMORY_UTIL,
    PROCESS_ENCODER,
    PROCESS_DECODER,
];

/// The shortest time between two GPM samples compared: NVML's GPM documentation asks for more
/// than 100 ms, its counters' refresh.
const GPM_MIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The GPM metrics read, with their tracks and series.
const GPM_METRICS: [(GpmMetricId, &str, &str); 3] = [
    (GpmMetricId::SmOccupancy, SM_OCCUPANCY, "occupancy"),
    (GpmMetricId::AnyTensorUtil, TENSOR_ACTIVE, "tensor"),
    (GpmMetricId::DramBwUtil, DRAM_BANDWIDTH, "dram"),
];

/// The readings of one moment, gathered track by track.
struct Batch {
    ts_ns: u64,
    readings: Vec<Reading>,
}

impl Batch {
    /// Adds `track` with the series that have a value (none: the track is left out).
    fn add<'s>(&mut self, track: &'static str, values: impl IntoIterator<Item = (&'s str, Option<f64>)>) {
        let values: Vec<(String, f64)> = values
            .into_iter()
            .filter_map(|(name, v)| v.map(|v| (name.to_string(), v)))
            .collect();
        if !values.is_empty() {
            self.readings.push(Reading {
                ts_ns: self.ts_ns,
                track,
                values,
            });
        }
    }
}

/// One GPU and what reading it needs to remember between reads.
pub struct DeviceReader<'nvml> {
    nvml: &'nvml Nvml,
    device: Device<'nvml>,
    /// The newest process utilization sample seen (NVML's CPU timestamp, µs).
    last_seen_us: u64,
    /// The previous GPM sample; None when the GPU has no GPM.
    gpm: Option<GpmState<'nvml>>,
}

enum GpmState<'nvml> {
    /// Supported, no sample taken yet.
    Ready,
    /// The previous sample and when it was taken.
    Previous(GpmSample<'nvml>, std::time::Instant),
}

impl<'nvml> DeviceReader<'nvml> {
    /// Reads `device`'s GPM support once: without it (before Hopper, or a driver without GPM),
    /// one debug line and no GPM tracks.
    pub fn new(nvml: &'nvml Nvml, index: u32, device: Device<'nvml>) -> Self {
        let gpm = match device.gpm_support() {
            Ok(true) => Some(GpmState::Ready),
            Ok(false) => {
                log::debug!("GPU {index}: no GPM (Hopper and later have it): no GPM metrics");
                None
            }
            Err(e) => {
                log::debug!("GPU {index}: GPM support unknown ({e}): no GPM metrics");
                None
            }
        };
        DeviceReader {
            nvml,
            device,
            last_seen_us: 0,
            gpm,
        }
    }

    pub fn name(&self) -> String {
        self.device.name().unwrap_or_else(|_| "NVIDIA GPU".into())
    }

    pub fn has_gpm(&self) -> bool {
        self.gpm.is_some()
    }

    /// Every metric NVML gives now, with the memory and utilization of `pids` (all: empty).
    pub fn read(&mut self, pids: &[u32]) -> Vec<Reading> {
        let mut batch = Batch {
            ts_ns: crate::clock::monotonic_ns(),
            readings: Vec::new(),
        };
        self.device_counters(&mut batch);
        self.process_memory(&mut batch, pids);
        self.process_utilization(&mut batch, pids);
        self.gpm(&mut batch);
        batch.readings
    }

    fn device_counters(&self, batch: &mut Batch) {
        let device = &self.device;
        let utilization = device.utilization_rates().ok();
        batch.add(
            UTILIZATION,
            [
                ("gpu", utilization.as_ref().map(|u| f64::from(u.gpu))),
                ("memory", utilization.as_ref().map(|u| f64::from(u.memory))),
            ],
        );
        batch.add(
            MEMORY,
            [("used", device.memory_info().ok().map(|m| m.used as f64))],
        );
        let power = device.power_usage().ok().map(|mw| f64::from(mw) / 1000.0);
        batch.add(POWER, [("power", power)]);
        let temperature = device.temperature(TemperatureSensor::Gpu).ok().map(f64::from);
        batch.add(TEMPERATURE, [("gpu", temperature)]);
        batch.add(
            SM_CLOCK,
            [("sm", device.clock_info(Clock::SM).ok().map(f64::from))],
        );
        let pcie = |counter| device.pcie_throughput(counter).ok().map(f64::from);
        batch.add(
            PCIE,
            [
                ("tx", pcie(PcieUtilCounter::Send)),
                ("rx", pcie(PcieUtilCounter::Receive)),
            ],
        );
    }

    fn process_memory(&self, batch: &mut Batch, pids: &[u32]) {
        let processes = self.device.running_compute_processes().unwrap_or_default();
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
        batch.add(PROCESS_MEMORY, traced.iter().map(|(n, v)| (n.as_str(), *v)));
    }

    /// Each traced process's newest utilization sample since the last read (NVML answers
    /// "not found" when there is none: nothing is added).
    fn process_utilization(&mut self, batch: &mut Batch, pids: &[u32]) {
        let Ok(samples) = self.device.process_utilization_stats(self.last_seen_us) else {
            return;
        };
        let mut newest: std::collections::BTreeMap<u32, &_> = Default::default();
        for s in samples
            .iter()
            .filter(|s| pids.is_empty() || pids.contains(&s.pid))
        {
            let kept = newest.entry(s.pid).or_insert(s);
            if s.timestamp > kept.timestamp {
                *kept = s;
            }
        }
        self.last_seen_us = samples
            .iter()
            .map(|s| s.timestamp)
            .fold(self.last_seen_us, u64::max);
        let series = |value: fn(&nvml_wrapper::struct_wrappers::device::ProcessUtilizationSample) -> u32| {
            newest
                .iter()
                .map(|(pid, s)| (format!("pid {pid}"), Some(f64::from(value(s)))))
                .collect::<Vec<_>>()
        };
        for (track, values) in [
            (PROCESS_SM, series(|s| s.sm_util)),
            (PROCESS_MEMORY_UTIL, series(|s| s.mem_util)),
            (PROCESS_ENCODER, series(|s| s.enc_util)),
            (PROCESS_DECODER, series(|s| s.dec_util)),
        ] {
            batch.add(track, values.iter().map(|(n, v)| (n.as_str(), *v)));
        }
    }

    /// The GPM metrics between the previous sample and one taken now (none at the first, nor
    /// within [`GPM_MIN_INTERVAL`] of the previous sample: NVML refreshes its counters no faster).
    fn gpm(&mut self, batch: &mut Batch) {
        let Some(state) = self.gpm.take() else {
            return;
        };
        if let GpmState::Previous(_, at) = &state {
            if at.elapsed() < GPM_MIN_INTERVAL {
                self.gpm = Some(state);
                return;
            }
        }
        let sample = match self.device.gpm_sample() {
            Ok(sample) => sample,
            Err(e) => {
                log::debug!("GPM sample failed ({e}): GPM metrics off for this GPU");
                return;
            }
        };
        if let GpmState::Previous(previous, _) = &state {
            let ids: Vec<GpmMetricId> = GPM_METRICS.iter().map(|(id, ..)| *id).collect();
            if let Ok(results) = gpm_metrics_get(self.nvml, previous, &sample, &ids) {
                for ((_, track, series), result) in GPM_METRICS.iter().zip(results) {
                    batch.add(track, [(*series, result.ok().map(|r| r.value))]);
                }
            }
        }
        self.gpm = Some(GpmState::Previous(sample, std::time::Instant::now()));
    }
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
            gpm: true,
            readings: vec![
                reading(UTILIZATION, &[("gpu", 40.0), ("memory", 90.0)]),
                reading(UTILIZATION, &[("gpu", 75.0), ("memory", 10.0)]),
                reading(POWER, &[("power", 300.5)]),
                reading(PROCESS_SM, &[("pid 7", 12.0), ("pid 8", 30.0)]),
                reading(SM_OCCUPANCY, &[("occupancy", 41.0)]),
                reading(SM_OCCUPANCY, &[("occupancy", 40.0)]),
            ],
        };
        let s = series.summary();
        assert_eq!(s.max_gpu_utilization_pct, Some(75.0));
        assert_eq!(s.max_power_w, Some(300.5));
        assert_eq!(s.max_memory_used_bytes, None);
        assert_eq!(s.max_traced_process_sm_utilization_pct, Some(30.0));
        assert_eq!(s.max_sm_occupancy_pct, Some(41.0));
        assert_eq!(s.max_dram_bandwidth_pct, None);
    }
}
