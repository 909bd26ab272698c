//! The CUDA family's `cuda` section of summary.json: kernel launches (with their call sites
//! under `--stacks`), copies, memsets, device and pinned host memory per process,
//! synchronizations and errors, from what `cuda::calls` added up. `export::cuda` renders it.
use serde::Serialize;

use crate::{cuda::calls::Totals, model::cuda_api::Space};

#[derive(Clone, Debug, Serialize)]
pub struct KernelLaunches {
    pub kernel: String,
    pub count: u64,
    /// With `--stacks`: where its launches came from, the most time first (at most 5).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub call_sites: Vec<crate::pipeline::call_sites::CallSite>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Copies {
    /// HtoD, DtoH, DtoD, HtoH or default (direction inferred by CUDA from unified addresses).
    pub kind: &'static str,
    pub calls: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LiveAllocation {
    pub ptr: String,
    pub bytes: u64,
    pub tid: u32,
    pub function: &'static str,
    /// When it was allocated (CLOCK_MONOTONIC ns, as trace.json's clock).
    pub at_ns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcessMemory {
    pub pid: u32,
    /// Memory allocated by traced calls and not freed, at its highest and at the end.
    pub peak_bytes: u64,
    pub live_bytes: u64,
    pub allocations: u64,
    pub frees: u64,
    /// Frees of addresses no traced call allocated (allocated before the capture began).
    pub unknown_frees: u64,
    /// Allocations still live when the capture ended, largest first.
    pub live: Vec<LiveAllocation>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CudaSummary {
    /// Kernel launches per kernel name, most launched first.
    pub launches: Vec<KernelLaunches>,
    pub memcpy: Vec<Copies>,
    /// Calls to cudaMemset*, cuMemsetD* and the bytes they set.
    pub memset_calls: u64,
    pub memset_bytes: u64,
    /// Device memory per process.
    pub memory: Vec<ProcessMemory>,
    /// Page-locked host memory per process (cudaMallocHost, cudaHostAlloc, cuMemAllocHost_v2,
    /// cuMemHostAlloc; freed by cudaFreeHost, cuMemFreeHost).
    pub pinned_host: Vec<ProcessMemory>,
    /// Calls to cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize (and their
    /// driver forms) and the time the calling threads were blocked in them.
    pub sync_calls: u64,
    pub sync_blocked_ns: u64,
    pub graph_launches: u64,
    /// Calls that returned an error code, per function.
    pub errors: std::collections::BTreeMap<&'static str, u64>,
    /// Calls whose arguments were lost (ring buffer full): in the counts above only by their span.
    pub calls_without_args: u64,
}

/// Every process's memory of kind `space`.
fn per_process(totals: &Totals, space: Space) -> Vec<ProcessMemory> {
    totals
        .memory
        .iter()
        .filter(|((s, _), _)| *s == space)
        .map(|(&(_, pid), m)| ProcessMemory {
            pid,
            peak_bytes: m.peak,
            live_bytes: m.current,
            allocations: m.allocations,
            frees: m.frees,
            unknown_frees: m.unknown_frees,
            live: m
                .largest_first()
                .into_iter()
                .map(|(ptr, a)| LiveAllocation {
                    ptr: format!("{ptr:#x}"),
                    bytes: a.bytes,
                    tid: a.tid,
                    function: a.function,
                    at_ns: a.at_ns,
                })
                .collect(),
        })
        .collect()
}

impl CudaSummary {
    pub fn new(totals: &Totals) -> Self {
        let mut launches: Vec<KernelLaunches> = totals
            .launches
            .iter()
            .map(|(kernel, count)| KernelLaunches {
                kernel: kernel.clone(),
                count: *count,
                call_sites: Vec::new(),
            })
            .collect();
        launches.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.kernel.cmp(&b.kernel)));
        CudaSummary {
            launches,
            memcpy: totals
                .copies
                .iter()
                .map(|(d, (calls, bytes))| Copies {
                    kind: d.name(),
                    calls: *calls,
                    bytes: *bytes,
                })
                .collect(),
            memset_calls: totals.memsets.0,
            memset_bytes: totals.memsets.1,
            memory: per_process(totals, Space::Device),
            pinned_host: per_process(totals, Space::PinnedHost),
            sync_calls: totals.sync.0,
            sync_blocked_ns: totals.sync.1,
            graph_launches: totals.graph_launches,
            errors: totals.errors.clone(),
            calls_without_args: totals.without_args,
        }
    }

    /// Adds each kernel's launch call sites (`--stacks`), by kernel name.
    pub fn with_call_sites(
        mut self,
        sites: Vec<(String, Vec<crate::pipeline::call_sites::CallSite>)>,
    ) -> Self {
        for (kernel, sites) in sites {
            if let Some(launches) = self.launches.iter_mut().find(|l| l.kernel == kernel) {
                launches.call_sites = sites;
            }
        }
        self
    }
}
