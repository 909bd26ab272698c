//! The `cuda` section's lines in the readable summary (the section itself is the CUDA family's:
//! `pipeline::family::cuda_summary`).
use crate::{model::duration::human, pipeline::family::cuda_summary::CudaSummary};

impl CudaSummary {
    /// Lines for the readable summary.
    pub fn table(&self) -> String {
        let launches: u64 = self.launches.iter().map(|l| l.count).sum();
        let mut out = format!(
            "\nCUDA: {launches} kernel launches ({} kernels), {} graph launches, {} blocked in {} synchronizations\n",
            self.launches.len(),
            self.graph_launches,
            human(self.sync_blocked_ns),
            self.sync_calls
        );
        for l in self.launches.iter().take(10) {
            out += &format!("  {:>8}  {}\n", l.count, l.kernel);
            for row in super::summary_text::call_site_rows(&l.call_sites).lines() {
                out += &format!("          {row}\n");
            }
        }
        for c in &self.memcpy {
            out += &format!("  memcpy {:<7} {} calls, {} bytes\n", c.kind, c.calls, c.bytes);
        }
        if self.memset_calls > 0 {
            out += &format!(
                "  memset  {} calls, {} bytes\n",
                self.memset_calls, self.memset_bytes
            );
        }
        for (what, list) in [
            ("device memory", &self.memory),
            ("pinned host memory", &self.pinned_host),
        ] {
            for m in list {
                out += &format!(
                    "  pid {}: peak {what} {} bytes, {} bytes in {} allocations still live\n",
                    m.pid,
                    m.peak_bytes,
                    m.live_bytes,
                    m.live.len()
                );
            }
        }
        for (function, n) in &self.errors {
            out += &format!("  {function} returned an error {n} times\n");
        }
        out
    }
}
