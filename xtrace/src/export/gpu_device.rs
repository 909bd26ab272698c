//! The GPU device timeline's lines in summary.txt (`--cuda` with the tool library as CUDA's
//! injection library), with what the host threads did in each GPU's longest idle gap; the
//! `gpu_device` section itself is the CUDA family's (`pipeline::family::gpu_summary`).
use crate::{
    model::duration::human,
    pipeline::family::{gpu_gaps::Gap, gpu_summary::GpuDeviceSummary},
};

impl GpuDeviceSummary {
    /// summary.txt's lines.
    pub fn table(&self) -> String {
        let dropped = self.records_dropped;
        let graphs = match self.graph_nodes {
            0 => String::new(),
            n => format!(" ({n} as CUDA graph nodes)"),
        };
        let others = match dropped.other_records_by_kernel {
            0 => String::new(),
            n => format!(" (and {n} launch records, names or marks: raise --buffer-size)"),
        };
        let mut out = format!(
            "GPU device: {} kernels, {} copies, {} memsets{graphs}; {} records dropped{others}\n",
            self.top_kernels.iter().map(|k| k.count).sum::<u64>(),
            self.copies.iter().map(|c| c.count).sum::<u64>(),
            self.memsets.count,
            dropped.by_cupti + dropped.by_kernel,
        );
        let clock = &self.clock;
        if clock.moved > 0 {
            out += &format!(
                "  {} device records came on CUPTI's own clock ({}) and were moved by {:+.3} s\n",
                clock.moved,
                clock.why,
                clock.offset_ns as f64 / 1e9
            );
        }
        for g in &self.gpus {
            let gap = g.longest_gaps.first().map_or(String::new(), |gap| {
                format!(", longest idle gap {}", human(gap.dur_ns))
            });
            out += &format!(
                "  pid {} GPU {}: busy {} of {} ({} kernels){gap}\n",
                g.pid,
                g.device,
                human(g.busy_ns),
                human(g.span_ns),
                g.kernels
            );
            if let Some(gap) = g.longest_gaps.first() {
                out += &during(gap);
            }
        }
        let q = self.queue_delay;
        if q.count > 0 {
            out += &format!(
                "  launch to device start: p50 {}, p99 {}, max {} ({} kernels)\n",
                human(q.p50_ns),
                human(q.p99_ns),
                human(q.max_ns),
                q.count
            );
        }
        for k in &self.top_kernels {
            out += &format!(
                "  {:>8}  {:>9} total  {:>9} p50  {:>9} p99  {}\n",
                k.count,
                human(k.total_ns),
                human(k.p50_ns),
                human(k.p99_ns),
                k.name
            );
        }
        for c in &self.copies {
            out += &format!(
                "  memcpy {}  {} copies, {} bytes, {}, {:.2} GB/s\n",
                c.kind,
                c.count,
                c.bytes,
                human(c.total_ns),
                c.bandwidth_bytes_per_s as f64 / 1e9
            );
        }
        out
    }
}

/// The lines under a GPU's that say what its process's threads did in its longest idle gap: the
/// spans that covered most of it, and with CPU sampling the innermost frames sampled most in it.
fn during(gap: &Gap) -> String {
    let spans: Vec<String> = gap
        .host
        .iter()
        .take(HOST_SPANS_SHOWN)
        .map(|a| format!("{} {} (tid {})", a.name, human(a.overlap_ns), a.tid))
        .collect();
    let mut out = String::new();
    if !spans.is_empty() {
        out += &format!("    during it: {}\n", spans.join(", "));
    }
    if let Some(samples) = gap.samples.as_ref().filter(|s| s.count > 0) {
        let frames: Vec<String> = samples
            .hot_frames
            .iter()
            .take(HOST_SPANS_SHOWN)
            .map(|f| format!("{} {}", f.frame, f.samples))
            .collect();
        out += &format!(
            "    sampled in it: {} ({} samples)\n",
            frames.join(", "),
            samples.count
        );
    }
    out
}

/// Host spans (and sampled frames) summary.txt shows for a GPU's longest gap.
const HOST_SPANS_SHOWN: usize = 3;
