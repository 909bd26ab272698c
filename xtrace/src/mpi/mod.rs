//! MPI calls (`--mpi`): planning a span probe on each MPI function of the target's MPI library
//! (`plan`), and rendering each call's span with what it moved (`calls`): its count, datatype,
//! bytes, peer, tag and root, added up per function.
pub mod calls;
pub mod plan;
