//! What planning `--mpi` hands the pipeline (in `uprobe::Plan`): the MPI function of each probe,
//! and the predefined datatypes of each MPI library (`mpi::plan` fills it in).
use std::collections::BTreeMap;

use crate::{elf::ExecSegments, model::mpi_api::Function};

/// A predefined datatype: its MPI name and size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datatype {
    pub name: &'static str,
    pub size: u64,
}

/// An MPI library's predefined datatype objects, by their address in the file, and where its
/// code lies in it (which places the file in a process: its load bias).
#[derive(Clone, Debug, Default)]
pub struct Datatypes {
    pub exec: ExecSegments,
    pub by_address: BTreeMap<u64, Datatype>,
}

/// What the MPI family needs from the plan.
#[derive(Clone, Debug, Default)]
pub struct MpiPlan {
    /// The MPI function of each probe, by probe id.
    pub functions: BTreeMap<u32, Function>,
    /// Per MPI library (its file name, as a process maps it, symbolic links resolved): its
    /// predefined datatypes.
    pub datatypes: BTreeMap<String, Datatypes>,
}
