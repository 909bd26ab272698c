//! xtrace's tool library, `libxtrace_tool.so`, shipped next to the xtrace binary. A process loads
//! it as NVTX3's injection library (`NVTX_INJECTION64_PATH`), as ITT's collector
//! (`INTEL_LIBITTNOTIFY64`) and as CUDA's injection library (`CUDA_INJECTION64_PATH`, the GPU
//! device timeline: [`injection`]), or links it for the `xtrace_range_*` API. Every range, mark and
//! thread name ends in a USDT probe of provider `xtrace` ([`usdt`]), so a range costs a semaphore
//! check until xtrace attaches — even to a process started long before.
pub mod api;
mod clock;
mod cupti;
mod device;
pub mod injection;
pub mod itt;
mod names;
pub mod nvtx;
mod open;
mod records;
mod text;
pub mod usdt;
