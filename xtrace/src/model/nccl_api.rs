//! NCCL's collectives as a capture sees them: NCCL (built with NVTX, its default) marks each call
//! with an NVTX push/pop range in domain `NCCL` named after the function (`ncclAllReduce`, ...);
//! recent versions add an extended payload (message size, reduction operation, communicator),
//! which xtrace does not decode. A process started with the tool library records those ranges as spans of category
//! `NCCL`; `merge` takes the collectives' among them as it takes MPI collectives.

/// The NVTX domain NCCL's ranges are in: the spans' category.
pub const NVTX_DOMAIN: &str = "NCCL";

/// NCCL's collectives, by the name of their ranges: every rank of the communicator calls them.
/// Point to point (`ncclSend`, `ncclRecv`) and set-up (`ncclCommInitRank`, ...) are left out.
pub const COLLECTIVES: &[&str] = &[
    "ncclAllGather",
    "ncclAllReduce",
    "ncclAlltoAll",
    "ncclBroadcast",
    "ncclGather",
    "ncclReduce",
    "ncclReduceScatter",
    "ncclScatter",
];

/// Whether a span of category `cat` named `name` is one of NCCL's collectives.
pub fn is_collective(cat: &str, name: &str) -> bool {
    cat == NVTX_DOMAIN && COLLECTIVES.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_collectives_ranges_in_domain_nccl_are_collectives() {
        assert!(is_collective("NCCL", "ncclAllReduce"));
        assert!(is_collective("NCCL", "ncclReduceScatter"));
        // Point to point and set-up are not; nor a range of that name in another domain.
        assert!(!is_collective("NCCL", "ncclSend"));
        assert!(!is_collective("NCCL", "ncclCommInitRank"));
        assert!(!is_collective("nvtx", "ncclAllReduce"));
        assert!(!is_collective("uprobe", "ncclAllReduce"));
    }
}
