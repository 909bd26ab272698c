//! The CUDA family's GPU device timeline section of summary.json (`gpu_device`: `--cuda` with the
//! tool library as CUDA's injection library): per GPU of each process its busy time (the union
//! of its kernels', copies' and memsets' device time) and its longest idle gaps, the kernels with
//! the most device time, the queueing delay from launch call to device start, copies by direction
//! with their bandwidth, memsets, and device records lost, and which clock the device records came
//! on. `export::gpu_device` renders it in summary.txt.
use serde::Serialize;

use crate::pipeline::{
    gpu::{GpuDevice, MovedRecords},
    stats::percentile,
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
    /// From each kernel's launch call (its start) to the kernel's start on the device, over the
    /// kernels whose launch was seen, graph nodes left out (a node waits for the nodes before
    /// it).
    pub queue_delay: crate::pipeline::stats::Distribution,
    /// Which clock the device records came on.
    pub clock: DeviceClock,
    /// The CUPTI functions the tool library subscribed with: `cuptiSubscribe_v2` where the
    /// process's libcupti has it (CUDA 13), else `cuptiSubscribe`.
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
    /// What gave the first moved batch away: `ends after it was read`, `kernel before its launch`,
    /// `recent only when moved` (clocks more than 1 s apart), or empty.
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
                clock_reason::BEFORE_ITS_LAUNCH => "kernel before its launch",
                clock_reason::RECENT => "recent only when moved",
                _ => "",
            },
        }
    }
}

/// A stretch of time in which a GPU ran nothing of a process.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Gap {
    /// When it began (CLOCK_MONOTONIC ns, the trace's clock).
    pub start_ns: u64,
    pub dur_ns: u64,
}

/// Gaps listed per GPU, longest first.
pub const LONGEST_GAPS: usize = 5;

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
    /// The longest stretches without device work, longest first.
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
    pub after_stop: u64,
}

/// Total length of the union of `intervals`, and the gaps between its pieces, longest first.
fn union_ns(intervals: &mut [(u64, u64)]) -> (u64, Vec<Gap>) {
    intervals.sort_unstable();
    let mut total = 0;
    let mut gaps = Vec::new();
    let mut current: Option<(u64, u64)> = None;
    for &(start, end) in intervals.iter() {
        current = match current {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                total += e - s;
                gaps.push(Gap {
                    start_ns: e,
                    dur_ns: start - e,
                });
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    gaps.sort_by(|a, b| b.dur_ns.cmp(&a.dur_ns).then(a.start_ns.cmp(&b.start_ns)));
    (total + current.map_or(0, |(s, e)| e - s), gaps)
}

/// Bytes per second of `bytes` moved in `ns`.
fn bandwidth(bytes: u64, ns: u64) -> u64 {
    match ns {
        0 => 0,
        ns => u64::try_from(u128::from(bytes) * 1_000_000_000 / u128::from(ns)).unwrap_or(u64::MAX),
    }
}

/// The section of `gpu`; `by_kernel`: records the kernel program could not send.
pub fn summary(gpu: &GpuDevice, by_kernel: u64) -> GpuDeviceSummary {
    let gpus = gpu
        .busy
        .iter()
        .map(|(&(pid, device), intervals)| {
            let mut intervals = intervals.clone();
            let first = intervals.iter().map(|i| i.0).min().unwrap_or(0);
            let last = intervals.iter().map(|i| i.1).max().unwrap_or(0);
            let (busy_ns, mut gaps) = union_ns(&mut intervals);
            gaps.truncate(LONGEST_GAPS);
            GpuBusy {
                pid,
                device,
                busy_ns,
                span_ns: last - first,
                idle_ns: (last - first).saturating_sub(busy_ns),
                longest_gaps: gaps,
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
            by_kernel,
            after_stop: gpu.after_stop,
        },
        notices: gpu.notices.clone(),
        queue_delay: gpu.queue_delay.distribution(),
        clock: DeviceClock::of(gpu.clock),
        subscribed_with: gpu.subscribed_with.iter().copied().collect(),
    }
    .with_kernel_counts(gpu)
}

impl GpuDeviceSummary {
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
    /// Overlapping and touching intervals count once; gaps are not busy.
    #[test]
    fn busy_time_is_the_union_of_intervals() {
        let mut intervals = vec![(10, 20), (15, 30), (30, 35), (50, 60), (62, 70)];
        let (busy, gaps) = super::union_ns(&mut intervals);
        assert_eq!(busy, 25 + 10 + 8);
        let gaps: Vec<(u64, u64)> = gaps.iter().map(|g| (g.start_ns, g.dur_ns)).collect();
        assert_eq!(gaps, [(35, 15), (60, 2)]);
        assert_eq!(super::union_ns(&mut []), (0, vec![]));
        assert_eq!(super::bandwidth(3_000, 1_500), 2_000_000_000);
        assert_eq!(super::bandwidth(3_000, 0), 0);
    }
}
