//! What the probe families add to summary.json, asked through [`super::Family::summarize`] and
//! [`super::Family::probe_row`]: the sections they own ([`Sections`]: the CUDA and GPU device
//! sections, the ranges, the counts of halves left unpaired), and the parts of a probe's row
//! they own ([`ProbeRow`]: captured values, a USDT pair's halves). `export::summary` puts them in
//! their places in summary.json; `export` renders them.
use serde::Serialize;

use std::collections::HashMap;

use super::{
    cuda_summary::CudaSummary,
    gpu_summary::{DeviceLost, GpuDeviceSummary},
    offcpu_summary::OffCpuSummary,
    profile_summary::{Folded, ProfileSummary},
};
use crate::{
    image::Images,
    pipeline::{call_sites::CallSites, ranges::RangeSummary, symbolizer::Frames, values::ValueSummary},
    python::Python,
};

/// The summary.json sections the families fill in; each family adds its own, and adds to the
/// counts several share.
#[derive(Clone, Debug, Default)]
pub struct Sections {
    /// Argument records dropped because too many calls were waiting for their spans (functions
    /// and CUDA calls).
    pub args_unpaired: u64,
    /// Captured strings at a non-null address that could not be read.
    pub unreadable_strings: u64,
    /// USDT end hits with no begin open on their thread, and begins still open at the stop.
    pub usdt_unpaired: u64,
    /// With `--cuda`.
    pub cuda: Option<CudaSummary>,
    /// With `--mpi`.
    pub mpi: Option<super::mpi::MpiSummary>,
    /// With the GPU device timeline.
    pub gpu_device: Option<GpuDeviceSummary>,
    /// With ranges asked for: per range name, and the pops and ends left without their other half
    /// (with those still open).
    pub ranges: Option<(Vec<RangeSummary>, u64)>,
    /// With `--off-cpu`.
    pub off_cpu: Option<OffCpuSummary>,
    /// With CPU sampling: the `profile` section.
    pub profile: Option<ProfileSummary>,
    /// The folded stacks the profile was made of, for stacks.folded and flamegraph.svg (None
    /// with `--flight`: its windows have the stacks).
    pub folded: Option<Folded>,
}

/// What the families' sections need from outside their own state, once the recording is over.
#[derive(Clone, Copy, Default)]
pub struct Ending<'a> {
    /// `--stacks`: the traced calls' call sites.
    pub call_sites: Option<&'a CallSites>,
    /// The tool library's records the kernel program could not send.
    pub device_lost: DeviceLost,
    /// Off-CPU waits the kernel could not count.
    pub off_cpu_lost: u64,
    /// With CPU sampling.
    pub sampling: Option<SamplingEnding<'a>>,
    /// With the GPU device timeline: the host spans, for what the threads did in its idle gaps.
    pub host_spans: Option<&'a crate::pipeline::host_spans::HostSpans>,
}

/// What the sampling family's section needs once the recording is over.
#[derive(Clone, Copy)]
pub struct SamplingEnding<'a> {
    pub frequency_hz: u64,
    /// Processes started by sampled processes: how many were sampled, how many were not for want
    /// of room (None when none are followed).
    pub followed: Option<(u64, u64)>,
    pub images: &'a Images,
    pub python: &'a Python,
    /// The stacks' names (None with `--flight`: its windows have the stacks).
    pub frames: Option<&'a Frames<'a>>,
    /// The targets' names, for the root frame of a stack whose process named none.
    pub process_names: &'a HashMap<u32, String>,
}

/// The parts of one probe's summary.json row that a family owns.
#[derive(Clone, Debug, Default)]
pub struct ProbeRow {
    /// Captured arguments and return value (probes whose spec asks for them).
    pub values: Vec<ValueSummary>,
    /// A USDT pair's (kind `usdt_span`): its halves left without the other.
    pub pair: Option<PairSummary>,
}

/// What of a USDT begin/end pair made no span.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PairSummary {
    /// Begins still open when the capture stopped (on every thread; nested ones each count).
    pub open: u64,
    /// End hits with no begin open on their thread (begun before the capture, or on another thread).
    pub unmatched_ends: u64,
}
