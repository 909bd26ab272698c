//! The CUDA family (`--cuda`): the CUDA API calls (their entry records, out-pointer values and
//! spans, rendered and added up by `cuda::calls`), each process's device and pinned host memory as
//! counter tracks, and the GPU device timeline's records (`pipeline::gpu`) with their flow arrows
//! from the launches. In summary.json, the `cuda` section (`cuda_summary`), the `gpu_device` one
//! (`gpu_summary`), and the entry records dropped.
use std::{collections::HashMap, io};

use xtrace_common::{event::SpanEvent, gpu::GpuEvent};

use super::{
    cuda_summary::CudaSummary,
    gpu_summary,
    summary::{Ending, Sections},
    Family, Shared,
};
use crate::{
    cuda::calls::Calls,
    model::cuda_api::Space,
    pipeline::{
        decode::Event,
        gpu::GpuDevice,
        writer::{EventKind, SpanOut},
    },
};

/// The trace.json counter track of a process's live CUDA device memory.
pub const CUDA_MEMORY_TRACK: &str = "CUDA device memory (bytes)";
/// The trace.json counter track of a process's live pinned host memory.
pub const CUDA_PINNED_TRACK: &str = "CUDA pinned host memory (bytes)";

/// The CUDA family's state.
pub struct CudaFamily {
    pub calls: Calls,
    /// `--cuda` with the `gpu_records` probe planned: the GPU device timeline.
    pub device: Option<GpuDevice>,
    /// The time of each process's last memory counter value, per memory space.
    counter_at: HashMap<(u32, Space), u64>,
}

impl Family for CudaFamily {
    fn owns(&self, event: &Event) -> bool {
        match event {
            Event::Span(span) => self.calls.owns(span.probe_id),
            Event::SpanStr(event) => self.calls.owns(event.span.probe_id),
            Event::Args(args) => self.calls.owns(args.probe_id),
            Event::Out(_) | Event::Gpu(_) => true,
            _ => false,
        }
    }

    fn record(&mut self, event: Event, shared: &mut Shared<'_>) -> io::Result<()> {
        match event {
            // A CUDA function returns no string.
            Event::Span(span) => self.span(&span, shared),
            Event::SpanStr(event) => self.span(&event.span, shared),
            Event::Args(args) => {
                self.calls.args(shared.images, &args);
                Ok(())
            }
            Event::Out(out) => {
                self.calls.out(&out);
                Ok(())
            }
            Event::Gpu(event) => self.device_record(&event, shared),
            _ => Ok(()),
        }
    }

    fn summarize(&self, ending: &Ending<'_>, sections: &mut Sections) {
        sections.args_unpaired += self.calls.dropped();
        if self.calls.traced() {
            let sites = ending.call_sites.map(|s| s.of_kernels());
            sections.cuda =
                Some(CudaSummary::new(&self.calls.totals).with_call_sites(sites.unwrap_or_default()));
        }
        sections.gpu_device = self
            .device
            .as_ref()
            .map(|gpu| gpu_summary::summary(gpu, ending.device_lost, ending.host_spans));
    }
}

impl CudaFamily {
    pub fn new(calls: Calls, device: Option<GpuDevice>) -> Self {
        CudaFamily {
            calls,
            device,
            counter_at: HashMap::new(),
        }
    }

    /// The span of a CUDA call, and the process's device memory counter when the call changed it.
    fn span(&mut self, span: &SpanEvent, shared: &mut Shared<'_>) -> io::Result<()> {
        let (pid, tid) = (span.header.pid, span.header.tid);
        let end_ns = span.header.ts_ns;
        let rendered = self.calls.span(
            shared.images,
            span.probe_id,
            pid,
            tid,
            (span.start_ns, end_ns),
            span.ret,
        );
        let kernel = self.calls.take_launched();
        let site = shared.call_site(span, end_ns.saturating_sub(span.start_ns), kernel.as_deref());
        let values = rendered.values + site.as_deref().unwrap_or_default();
        // Every CUDA call is sent (the CUDA summary counts each); one shorter than
        // `--min-duration` is left out of trace.json here, as the kernel leaves out others.
        let duration = end_ns.saturating_sub(span.start_ns);
        if duration < shared.min_duration_ns {
            if let Some(stats) = shared.stats.get_mut(span.probe_id as usize) {
                stats.short += 1;
            }
        } else {
            shared.emit(SpanOut {
                probe: span.probe_id as usize,
                pid,
                tid,
                start_ns: span.start_ns,
                kind: EventKind::span(duration, span.depth.into()),
                values: Some(values.into_boxed_str()),
                ..Default::default()
            })?;
        }
        match rendered.memory {
            // The counter follows the calls in the order their records came, which two CPUs can
            // swap by nanoseconds: its times never go back, so no viewer draws a change that
            // never happened.
            Some((space, bytes)) => {
                let at = self.counter_at.entry((pid, space)).or_default();
                *at = end_ns.max(*at);
                let at = *at;
                shared.emit(SpanOut {
                    probe: span.probe_id as usize,
                    pid,
                    tid: pid,
                    start_ns: at,
                    name: Some(
                        match space {
                            Space::Device => CUDA_MEMORY_TRACK,
                            Space::PinnedHost => CUDA_PINNED_TRACK,
                        }
                        .into(),
                    ),
                    kind: EventKind::Counter(bytes),
                    ..Default::default()
                })
            }
            None => Ok(()),
        }
    }

    /// One GPU device record: a slice on its GPU and stream's track (named the first time), after
    /// the start of the flow arrow from its launch when the launch was seen.
    fn device_record(&mut self, event: &GpuEvent, shared: &mut Shared<'_>) -> io::Result<()> {
        let window = (shared.window.started_at, shared.window.stopped_at);
        let Some(slice) = self.device.as_mut().and_then(|g| g.record(event, window)) else {
            return Ok(());
        };
        if let Some(name) = slice.track {
            shared.names.given(slice.span.pid, slice.span.tid, name);
        }
        if let Some(launch) = slice.launch {
            shared.emit(launch)?;
        }
        shared.emit(slice.span)
    }
}
