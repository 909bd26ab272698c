//! Perfetto's protobuf trace format (trace.perfetto-trace): `proto` holds the messages xtrace
//! writes, `intern` the interning of names, `stacks` that of samples' call stacks, `writer` the streaming writer the trace writer thread
//! drives instead of `chrome`'s with `--trace-format perfetto`.
pub mod fast_hash;
pub mod intern;
pub mod proto;
pub mod sequence;
pub mod stacks;
pub mod writer;

pub use stacks::{SampleFrame, KERNEL_MAPPING};
pub use writer::PerfettoWriter;
