//! The MPI functions `--mpi` traces: what kind of call each is, and where its count, datatype,
//! peer, tag and root arguments live under the x86-64 SysV calling convention (the 7th integer
//! argument and later are stack slots). The arguments are the standard's own (MPI 3.1), so one
//! table serves Open MPI and MPICH. Also the sizes of the predefined datatypes, by the symbol
//! Open MPI's handle points at and by MPICH's handle value, so a call's bytes are its count
//! times its datatype's size.
use xtrace_common::probe::args;

pub use super::cuda_api::Src;

/// What kind of call an MPI function is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// Point-to-point: a send or receive with one peer.
    PointToPoint,
    /// Every rank of the communicator takes part (`merge` finds stragglers among them).
    Collective,
    /// Waits for non-blocking calls to complete.
    Wait,
    /// Start-up, shut-down.
    Setup,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::PointToPoint => "point_to_point",
            Class::Collective => "collective",
            Class::Wait => "wait",
            Class::Setup => "setup",
        }
    }
}

/// One traced MPI function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function {
    pub name: &'static str,
    pub class: Class,
    /// The element count (the send side's, for calls that send and receive).
    pub count: Option<Src>,
    /// The count's datatype.
    pub datatype: Option<Src>,
    /// The destination or source rank of a point-to-point call.
    pub peer: Option<Src>,
    pub tag: Option<Src>,
    /// The root rank of a rooted collective.
    pub root: Option<Src>,
}

impl Function {
    /// The kernel's argument spec: every argument register, the stack slots the table names, and
    /// every call sent (the MPI summary counts each).
    pub fn spec(&self) -> u32 {
        let regs = (0..6).fold(0, |s, i| s | args::int(i));
        [self.count, self.datatype, self.peer, self.tag, self.root]
            .into_iter()
            .flatten()
            .fold(regs | args::ALWAYS_SENT, |s, src| match src {
                Src::Reg(_) => s,
                Src::Stack(j) => s | args::stack(j),
            })
    }
}

/// Argument register `i`.
fn reg(i: usize) -> Option<Src> {
    Some(Src::Reg(i))
}

const fn f(name: &'static str, class: Class) -> Function {
    Function {
        name,
        class,
        count: None,
        datatype: None,
        peer: None,
        tag: None,
        root: None,
    }
}

/// `(buf, count, datatype, peer, tag, comm, ...)`: sends and receives.
fn p2p(name: &'static str) -> Function {
    Function {
        count: reg(1),
        datatype: reg(2),
        peer: reg(3),
        tag: reg(4),
        ..f(name, Class::PointToPoint)
    }
}

/// `(sendbuf, recvbuf, count, datatype, op, ...)`: the reductions.
fn reduction(name: &'static str, root: Option<Src>) -> Function {
    Function {
        count: reg(2),
        datatype: reg(3),
        root,
        ..f(name, Class::Collective)
    }
}

/// `(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, ...)`: the gathers, scatters
/// and all-to-alls.
fn exchange(name: &'static str, root: Option<Src>) -> Function {
    Function {
        count: reg(1),
        datatype: reg(2),
        root,
        ..f(name, Class::Collective)
    }
}

/// Every function `--mpi` traces, in the order their probes are added.
pub fn functions() -> Vec<Function> {
    vec![
        p2p("MPI_Send"),
        p2p("MPI_Ssend"),
        p2p("MPI_Bsend"),
        p2p("MPI_Rsend"),
        p2p("MPI_Recv"),
        p2p("MPI_Isend"),
        p2p("MPI_Issend"),
        p2p("MPI_Irecv"),
        // (sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, ...): the send side.
        p2p("MPI_Sendrecv"),
        p2p("MPI_Sendrecv_replace"),
        Function {
            count: reg(0),
            ..f("MPI_Waitall", Class::Wait)
        },
        f("MPI_Wait", Class::Wait),
        f("MPI_Waitany", Class::Wait),
        f("MPI_Waitsome", Class::Wait),
        f("MPI_Barrier", Class::Collective),
        // (buffer, count, datatype, root, comm)
        Function {
            count: reg(1),
            datatype: reg(2),
            root: reg(3),
            ..f("MPI_Bcast", Class::Collective)
        },
        reduction("MPI_Allreduce", None),
        reduction("MPI_Reduce", reg(5)),
        // (sendbuf, recvbuf, recvcount, datatype, op, comm): each rank's share.
        reduction("MPI_Reduce_scatter_block", None),
        reduction("MPI_Scan", None),
        reduction("MPI_Exscan", None),
        exchange("MPI_Allgather", None),
        exchange("MPI_Allgatherv", None),
        exchange("MPI_Alltoall", None),
        exchange("MPI_Alltoallv", None),
        exchange("MPI_Gather", Some(Src::Stack(0))),
        exchange("MPI_Gatherv", Some(Src::Stack(1))),
        // MPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root):
        // no single send count; the root only.
        Function {
            root: Some(Src::Stack(1)),
            ..f("MPI_Scatterv", Class::Collective)
        },
        exchange("MPI_Scatter", Some(Src::Stack(0))),
        f("MPI_Init", Class::Setup),
        f("MPI_Init_thread", Class::Setup),
        f("MPI_Finalize", Class::Setup),
    ]
}

/// Whether every rank leaves a call of collective `name` at about one time: no rank can return
/// from it before all have entered (a broadcast's root, a reduction's senders can).
pub fn ends_together(name: &str) -> bool {
    matches!(
        name,
        "MPI_Barrier"
            | "MPI_Allreduce"
            | "MPI_Allgather"
            | "MPI_Allgatherv"
            | "MPI_Alltoall"
            | "MPI_Alltoallv"
            | "MPI_Reduce_scatter_block"
    )
}

/// The MPI name and size in bytes of the predefined datatype whose Open MPI object is the symbol
/// `symbol` (`MPI_INT` is `&ompi_mpi_int`).
pub fn open_mpi_datatype(symbol: &str) -> Option<(&'static str, u64)> {
    let name = symbol.strip_prefix("ompi_mpi_")?;
    OPEN_MPI_DATATYPES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, shown, size)| (*shown, *size))
}

/// Open MPI's predefined datatype objects (`ompi_mpi_` + name), their MPI names and sizes.
const OPEN_MPI_DATATYPES: &[(&str, &str, u64)] = &[
    ("char", "MPI_CHAR", 1),
    ("signed_char", "MPI_SIGNED_CHAR", 1),
    ("unsigned_char", "MPI_UNSIGNED_CHAR", 1),
    ("byte", "MPI_BYTE", 1),
    ("packed", "MPI_PACKED", 1),
    ("wchar", "MPI_WCHAR", 4),
    ("short", "MPI_SHORT", 2),
    ("unsigned_short", "MPI_UNSIGNED_SHORT", 2),
    ("int", "MPI_INT", 4),
    ("unsigned", "MPI_UNSIGNED", 4),
    ("long", "MPI_LONG", 8),
    ("unsigned_long", "MPI_UNSIGNED_LONG", 8),
    ("long_long_int", "MPI_LONG_LONG", 8),
    ("unsigned_long_long", "MPI_UNSIGNED_LONG_LONG", 8),
    ("float", "MPI_FLOAT", 4),
    ("double", "MPI_DOUBLE", 8),
    ("long_double", "MPI_LONG_DOUBLE", 16),
    ("int8_t", "MPI_INT8_T", 1),
    ("uint8_t", "MPI_UINT8_T", 1),
    ("int16_t", "MPI_INT16_T", 2),
    ("uint16_t", "MPI_UINT16_T", 2),
    ("int32_t", "MPI_INT32_T", 4),
    ("uint32_t", "MPI_UINT32_T", 4),
    ("int64_t", "MPI_INT64_T", 8),
    ("uint64_t", "MPI_UINT64_T", 8),
    ("c_bool", "MPI_C_BOOL", 1),
    ("c_float_complex", "MPI_C_FLOAT_COMPLEX", 8),
    ("c_double_complex", "MPI_C_DOUBLE_COMPLEX", 16),
    ("aint", "MPI_AINT", 8),
    ("offset", "MPI_OFFSET", 8),
    ("count", "MPI_COUNT", 8),
];

/// The size of an MPICH predefined datatype from its handle: a builtin datatype's handle
/// (`0x4c......`) holds its size in bits 8..16 (`MPI_INT` is `0x4c000405`).
pub fn mpich_datatype_size(handle: u64) -> Option<u64> {
    (handle >> 24 == 0x4c).then_some((handle >> 8) & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_mpi_symbols_and_mpich_handles_give_sizes() {
        assert_eq!(open_mpi_datatype("ompi_mpi_double"), Some(("MPI_DOUBLE", 8)));
        assert_eq!(open_mpi_datatype("ompi_mpi_int"), Some(("MPI_INT", 4)));
        assert_eq!(open_mpi_datatype("ompi_mpi_comm_world"), None);
        assert_eq!(open_mpi_datatype("mpi_double"), None);
        // MPICH's mpi.h: MPI_INT 0x4c000405, MPI_DOUBLE 0x4c00080b, MPI_CHAR 0x4c000101.
        assert_eq!(mpich_datatype_size(0x4c00_0405), Some(4));
        assert_eq!(mpich_datatype_size(0x4c00_080b), Some(8));
        assert_eq!(mpich_datatype_size(0x4c00_0101), Some(1));
        assert_eq!(mpich_datatype_size(0x7f12_3456_7890), None);
    }

    #[test]
    fn every_function_is_listed_once_and_its_stack_slots_are_read() {
        let all = functions();
        let mut names: Vec<&str> = all.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
        let gather = all.iter().find(|f| f.name == "MPI_Gather").map(Function::spec);
        assert_eq!(gather.map(|s| s & args::stack(0)), Some(args::stack(0)));
        let send = all.iter().find(|f| f.name == "MPI_Send").map(Function::spec);
        assert_eq!(send.map(|s| s & args::ALWAYS_SENT), Some(args::ALWAYS_SENT));
    }
}
