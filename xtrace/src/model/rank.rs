//! A process's place in a distributed job, as its launcher put it in its environment: torchrun
//! (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`), Open MPI's `mpirun` (`OMPI_COMM_WORLD_RANK`, ...),
//! Slurm's `srun` (`SLURM_PROCID`, ...) and MPICH's Hydra (`PMI_RANK`, `PMI_SIZE`). Read from
//! `/proc/PID/environ` for a running process, or from xtrace's own environment for the command it
//! launches (`srun xtrace -- python train.py` gives xtrace the task's variables).
use serde::Serialize;

/// One launcher's variables: its name, then the rank's, the local rank's and the job size's.
struct Launcher {
    name: &'static str,
    rank: &'static str,
    local_rank: &'static str,
    world_size: &'static str,
}

/// In the order they are tried: torchrun's variables first, as torchrun run under `srun` or
/// `mpirun` sets its own (the rank PyTorch uses) beside the outer launcher's.
const LAUNCHERS: [Launcher; 4] = [
    Launcher {
        name: "torchrun",
        rank: "RANK",
        local_rank: "LOCAL_RANK",
        world_size: "WORLD_SIZE",
    },
    Launcher {
        name: "open-mpi",
        rank: "OMPI_COMM_WORLD_RANK",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        world_size: "OMPI_COMM_WORLD_SIZE",
    },
    Launcher {
        name: "slurm",
        rank: "SLURM_PROCID",
        local_rank: "SLURM_LOCALID",
        world_size: "SLURM_NTASKS",
    },
    Launcher {
        name: "mpich",
        rank: "PMI_RANK",
        local_rank: "MPI_LOCALRANKID",
        world_size: "PMI_SIZE",
    },
];

/// The variables that give a rank, for messages.
pub const RANK_VARIABLES: &str = "RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMI_RANK";

/// A process's rank in its job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rank {
    pub rank: u32,
    /// Its rank among the job's processes on its host; null when the launcher does not say.
    pub local_rank: Option<u32>,
    /// The job's processes in all; null when the launcher does not say.
    pub world_size: Option<u32>,
    /// Whose variables gave it: `torchrun`, `open-mpi`, `slurm` or `mpich`.
    pub launcher: &'static str,
}

impl Rank {
    /// The rank an environment gives (`NAME=VALUE` entries, as /proc/PID/environ holds them,
    /// NUL-separated), from the first launcher whose rank variable is a number.
    pub fn from_environ<'a>(entries: impl Iterator<Item = &'a [u8]> + Clone) -> Option<Rank> {
        let get = |name: &str| -> Option<u32> {
            entries.clone().find_map(|entry| {
                let value = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
                std::str::from_utf8(value).ok()?.parse().ok()
            })
        };
        LAUNCHERS.iter().find_map(|l| {
            Some(Rank {
                rank: get(l.rank)?,
                local_rank: get(l.local_rank),
                world_size: get(l.world_size),
                launcher: l.name,
            })
        })
    }

    /// The rank of a process's environment as /proc/PID/environ holds it.
    pub fn from_environ_file(environ: &[u8]) -> Option<Rank> {
        Rank::from_environ(environ.split(|b| *b == 0))
    }

    /// How a process track names it: `rank 3 of 8`, or `rank 3`.
    pub fn label(&self) -> String {
        match self.world_size {
            Some(size) => format!("rank {} of {size}", self.rank),
            None => format!("rank {}", self.rank),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(environ: &str) -> Option<Rank> {
        Rank::from_environ_file(environ.replace(' ', "\0").as_bytes())
    }

    #[test]
    fn each_launchers_variables_give_the_rank() {
        let torchrun = rank("PATH=/bin RANK=3 LOCAL_RANK=1 WORLD_SIZE=8").unwrap();
        assert_eq!(
            torchrun,
            Rank {
                rank: 3,
                local_rank: Some(1),
                world_size: Some(8),
                launcher: "torchrun"
            }
        );
        assert_eq!(torchrun.label(), "rank 3 of 8");
        let ompi = rank("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1").unwrap();
        assert_eq!((ompi.rank, ompi.local_rank, ompi.world_size), (1, None, Some(2)));
        assert_eq!(ompi.launcher, "open-mpi");
        let slurm = rank("SLURM_PROCID=0 SLURM_LOCALID=0").unwrap();
        assert_eq!(
            (slurm.rank, slurm.launcher, slurm.label()),
            (0, "slurm", "rank 0".into())
        );
        assert_eq!(rank("PMI_RANK=5 PMI_SIZE=6").unwrap().label(), "rank 5 of 6");
    }

    #[test]
    fn torchrun_under_another_launcher_wins_and_non_numbers_are_passed_over() {
        let both = rank("SLURM_PROCID=7 RANK=2").unwrap();
        assert_eq!((both.rank, both.launcher), (2, "torchrun"));
        let odd = rank("RANK=first SLURM_PROCID=4").unwrap();
        assert_eq!((odd.rank, odd.launcher), (4, "slurm"));
        // A longer name that starts with a rank variable's is another variable.
        assert_eq!(rank("RANKING=1 MY_RANK=2"), None);
        assert_eq!(rank(""), None);
    }
}
