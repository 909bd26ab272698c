//! Output formats written after a recording, one file each (trace.json is streamed while it runs:
//! `pipeline::chrome`): `summary` (summary.json and the table), `profile` (stacks.folded,
//! flamegraph.svg; `flight_profile` those of one flight recorder window), `offcpu` (offcpu.folded, offcpu.svg, the summary's off-CPU section), `cuda`
//! (the CUDA section of the summary), `span_flamegraph` (span-flamegraph.svg), `convert`
//! (trace.json to trace.perfetto-trace and back, through `replay` and `replay_perfetto`), `pprof` (profile.pb.gz), `callgrind` (KCachegrind),
//! `derived` (the span flamegraph and profile a recording writes last); `flamegraph` writes the
//! folded lines and inferno SVGs of the profile, the off-CPU time and the spans. Their stacks are
//! named by the in-capture symbolizer, `pipeline::symbolizer`.
pub mod callgrind;
pub mod convert;
pub mod cuda;
pub mod derived;
pub mod flamegraph;
pub mod flight_profile;
pub mod gpu_device;
pub mod locks;
pub mod merge;
pub mod merge_align;
pub mod mpi;
pub mod offcpu;
pub mod pprof;
pub mod profile;
pub mod replay;
pub mod replay_perfetto;
pub mod span_flamegraph;
pub mod summary;
mod summary_text;
pub mod table;
pub mod wallclock;
