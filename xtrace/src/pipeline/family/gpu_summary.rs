//! The CUDA family's GPU device timeline section of summary.json (`gpu_device`: `--cuda` with the
//! tool library as CUDA's injection library): per GPU of each process its busy time (the union
//! of its kernels', copies' and memsets' device time) and its longest idle gaps (`gpu_gaps`, with
//! what the host threads did in them), the kernels with
//! the most device time, the queueing delay from launch call to device start, copies by direction
//! with their bandwidth, memsets, and device records lost, and which clock the device records came
//! on. `export::gpu_device` renders it in summary.txt.
use serde::Serialize;

use std::collections::HashMap;

use super::gpu_gaps::{self, Gap};
use crate::pipeline::{
    gpu::{GpuDevice, MovedRecords},
    host_spans::HostSpans,
    samples::stack_hash,
    stats::percentile,
    symbolizer::Frames,
};

/// How many kernels the summary lists, most device time first.
pub const TOP_KERNELS: usize = 20;

/// summary.json's `gpu_device`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GpuDeviceSummary {
    /// Per process and GPU, by process id then GPU.
    pub gpus: Vec<GpuBusy>,
    /// At most `TOP_KERNELS`, most total device time first.
    pub top_kernels: Vec<KernelTime>,
    /// By direction (`HtoD`, `DtoH`, `DtoD`, ...).
    pub copies: Vec<CopyTotal>,
    pub memsets: Transfers,
    /// Of the kernels, copies and memsets, those that ran as nodes of a CUDA graph (counted in
    /// the totals above too).
    pub graph_nodes: u64,
    /// Device records lost: dropped by CUPTI (no buffer for them), not sent by the kernel program
    /// (a batch past its limit, a full ring buffer), and received after the capture stopped.
    pub records_dropped: Dropped,
    /// What the tool library said (CUPTI refused the subscription, an unsupported libcupti, ...).
    pub notices: Vec<String>,
    /// 0, or the length up to which host spans may have been left out of the gaps' `host`
    /// (more than `host_spans::MAX_SPANS` were traced): such a span overlaps a gap by at most it.
    pub host_spans_left_out_up_to_ns: u64,
    /// From each kernel's launch call (its start) to the kernel's start on the device, over the
    /// kernels whose launch was seen, graph nodes left out (a node waits for the nodes before
    /// it).
    pub queue_delay: crate::pipeline::stats::Distribution,
    /// Which clock the device records came on.
    pub clock: DeviceClock,
    /// The CUPTI functions the tool library subscribed with: `cuptiSubscribe_v2 shared` where the
    /// process's libcupti has the per-subscriber activity functions (CUDA 13.2 on),
    /// `cuptiSubscribe_v2` where it has that function only (CUDA 13), else `cuptiSubscribe`.
    pub subscribed_with: Vec<&'static str>,
}

/// The device records' clock: `monotonic` when CUPTI timed them all with the CLOCK_MONOTONIC
/// callback the tool library gave it; `offset` when some came on CUPTI's own clock (a CUDA
/// context created before xtrace attached, on some CUPTI versions) and were moved by the offset the
/// tool library measured when it subscribed.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct DeviceClock {
    /// `monotonic` or `offset`.
    pub used: &'static str,
    /// Records moved by `offset_ns`.
    pub moved: u64,
    /// Added to CUPTI's own clock to make CLOCK_MONOTONIC (0 when nothing was moved).
    pub offset_ns: i64,
    /// What gave the first moved batch away: `ends after it was read`, `begins before its call`
    /// (a kernel, copy or memset before the call that made it), `recent only when moved` (clocks
    /// more than 1 s apart), or empty.
    pub why: &'static str,
}

impl DeviceClock {
    fn of(moved: MovedRecords) -> Self {
        use xtrace_common::gpu::clock_reason;
        DeviceClock {
            used: if moved.records > 0 { "offset" } else { "monotonic" },
            moved: moved.records,
            offset_ns: moved.offset_ns,
            why: match moved.reason {
                clock_reason::ENDS_IN_THE_FUTURE => "ends after it was read",
                clock_reason::BEFORE_ITS_LAUNCH => "begins before its call",
                clock_reason::RECENT => "recent only when moved",
                _ => "",
            },
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct GpuBusy {
    pub pid: u32,
    pub device: u32,
    /// Time at least one kernel, copy or memset ran.
    pub busy_ns: u64,
    /// From the first device record's start to the last one's end.
    pub span_ns: u64,
    /// `span_ns` less `busy_ns`: time between device work.
    pub idle_ns: u64,
    /// The longest stretches without device work, longest first, with what the host threads
    /// did in them.
    pub longest_gaps: Vec<Gap>,
    pub kernels: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct KernelTime {
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct CopyTotal {
    pub kind: &'static str,
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
    /// `bytes` over `total_ns`, in bytes per second (0 when no time was measured).
    pub bandwidth_bytes_per_s: u64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Transfers {
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Dropped {
    pub by_cupti: u64,
    pub by_kernel: u64,
    pub other_records_by_kernel: u64,
    pub after_stop: u64,
}

/// The tool library's records the kernel program could not send: device activities (kernels,
/// copies, memsets), and the others (launch records, names, notices, clock and session marks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceLost {
    pub activities: u64,
    pub other_records: u64,
}

/// Bytes per second of `bytes` moved in `ns`.
pub fn bandwidth(bytes: u64, ns: u64) -> u64 {
    match ns {
        0 => 0,
        ns => u64::try_from(u128::from(bytes) * 1_000_000_000 / u128::from(ns)).unwrap_or(u64::MAX),
    }
}

/// The section of `gpu`; `lost`: records the kernel program could not send; `host`: the host
/// spans, for what the threads did in the longest gaps.
pub fn summary(gpu: &GpuDevice, lost: DeviceLost, host: Option<&HostSpans>) -> GpuDeviceSummary {
    let gpus = gpu
        .busy
        .iter()
        .map(|(&(pid, device), intervals)| {
            let mut intervals = intervals.clone();
            let first = intervals.iter().map(|i| i.0).min().unwrap_or(0);
            let last = intervals.iter().map(|i| i.1).max().unwrap_or(0);
            let (busy_ns, gaps) = gpu_gaps::union_ns(&mut intervals);
            GpuBusy {
                pid,
                device,
                busy_ns,
                span_ns: last - first,
                idle_ns: (last - first).saturating_sub(busy_ns),
                longest_gaps: gpu_gaps::longest(pid, gaps, host),
                kernels: 0,
            }
        })
        .collect();
    let mut top_kernels: Vec<KernelTime> = gpu
        .kernels
        .iter()
        .map(|(name, durations)| {
            let mut sorted = durations.clone();
            sorted.sort_unstable();
            let total: u64 = sorted.iter().sum();
            KernelTime {
                name: name.clone(),
                count: sorted.len() as u64,
                total_ns: total,
                mean_ns: total / (sorted.len() as u64).max(1),
                p50_ns: percentile(&sorted, 50.0),
                p99_ns: percentile(&sorted, 99.0),
            }
        })
        .collect();
    top_kernels.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.name.cmp(&b.name)));
    top_kernels.truncate(TOP_KERNELS);
    let copies = gpu
        .copies
        .iter()
        .map(|(&kind, t)| CopyTotal {
            kind,
            count: t.count,
            bytes: t.bytes,
            total_ns: t.ns,
            bandwidth_bytes_per_s: bandwidth(t.bytes, t.ns),
        })
        .collect();
    let m = gpu.memsets;
    GpuDeviceSummary {
        gpus,
        top_kernels,
        copies,
        memsets: Transfers {
            count: m.count,
            bytes: m.bytes,
            total_ns: m.ns,
        },
        graph_nodes: gpu.graph_nodes,
        records_dropped: Dropped {
            by_cupti: gpu.dropped_by_cupti,
            by_kernel: lost.activities,
            other_records_by_kernel: lost.other_records,
            after_stop: gpu.after_stop,
        },
        notices: gpu.notices.clone(),
        host_spans_left_out_up_to_ns: host.map_or(0, HostSpans::forgotten_up_to_ns),
        queue_delay: gpu.queue_delay.distribution(),
        clock: DeviceClock::of(gpu.clock),
        subscribed_with: gpu.subscribed_with.iter().copied().collect(),
    }
    .with_kernel_counts(gpu)
}

impl GpuDeviceSummary {
    /// With CPU sampling: adds to each listed gap the samples of its process taken in it, from the
    /// samples on the timeline and their stacks' names.
    pub fn add_samples(&mut self, samples: &crate::pipeline::samples::Samples, frames: &Frames<'_>) {
        let leaves: HashMap<u64, &str> = frames
            .iter()
            .map(|(key, names)| (stack_hash(key), names.last().map_or("?", String::as_str)))
            .collect();
        for busy in &mut self.gpus {
            for gap in &mut busy.longest_gaps {
                gpu_gaps::add_samples(gap, busy.pid, &samples.timeline, &leaves);
            }
        }
    }

    /// Kernels per process and GPU are not kept per GPU by name; count them from the tracks.
    fn with_kernel_counts(mut self, gpu: &GpuDevice) -> Self {
        for busy in &mut self.gpus {
            busy.kernels = gpu.kernels_on.get(&(busy.pid, busy.device)).copied().unwrap_or(0);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bandwidth_is_bytes_over_time() {
        assert_eq!(super::bandwidth(3_000, 1_500), 2_000_000_000);
        assert_eq!(super::bandwidth(3_000, 0), 0);
    }
}
