//! CUDA API tracing (`--cuda`) of the runtime and driver functions `model::cuda_api` lists:
//! `planner` is the family's planning: `plan` finds the libraries and plans probes, `late` attaches to
//! libraries loaded after the start, `calls` turns each call's records
//! into a rendered span and totals, `kernels` names launched kernels (`stub_handles`: from the
//! handles nvcc 13's host stubs keep), `nvml` samples GPU metrics (`nvml_read`: one read of one GPU), `device_plan` plans the GPU device timeline's probe.
pub mod calls;
pub mod device_plan;
pub mod kernels;
pub mod late;
pub mod nvml;
pub mod nvml_read;
pub mod plan;
pub mod planner;
pub mod stub_handles;
