//! Plain data every layer may use, depending on none of them: `summary` has the pieces of the
//! summary schema filled in below `export` (loss counts, the format version), `duration` writes
//! durations for people, `folded` writes a folded stack's line, `address` finds the range that holds an address, `text` decodes the
//! strings the kernel programs read, `pending` keeps entry records until their spans arrive,
//! `cuda_api` lists the CUDA functions `--cuda` traces, `mpi_api` the MPI functions `--mpi` traces, `nccl_api` the
//! NCCL collectives `merge` knows by their NVTX ranges, `rank` reads a process's rank in a
//! distributed job from its environment.
pub mod address;
pub mod cuda_api;
pub mod duration;
pub mod folded;
pub mod mpi_api;
pub mod nccl_api;
pub mod pending;
pub mod rank;
pub mod summary;
pub mod text;
pub mod wait;
