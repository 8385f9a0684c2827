//! One process per GPU, started by a launcher: reads this process's rank from the launcher's
//! environment and joins the NCCL world with NCCL's own bootstrap.
//!
//! | launcher | rank | world | local rank | ranks on this node |
//! | --- | --- | --- | --- | --- |
//! | torchrun (or any that sets the same) | `RANK` | `WORLD_SIZE` | `LOCAL_RANK` | `LOCAL_WORLD_SIZE` |
//! | SLURM (`srun`) | `SLURM_PROCID` | `SLURM_NTASKS` | `SLURM_LOCALID` | `SLURM_NTASKS_PER_NODE`, else the first count of `SLURM_TASKS_PER_NODE` |
//!
//! The ranks find each other through `NCCL_COMM_ID=host:port`, set alike on every rank: with
//! it, every rank's `ncclGetUniqueId` returns the same token and rank 0 runs NCCL's bootstrap
//! root on that address when it joins (NCCL's `bootstrap.cc` and `init.cc`), so nothing of ours
//! has to carry the token. Under torchrun, `host` is `MASTER_ADDR`, and the port must differ from
//! `MASTER_PORT` (torchrun's own store listens there): [`Launch::suggested_comm_id`] gives
//! `MASTER_ADDR:MASTER_PORT+1`.

use joinkit_cuda::{CudaBackend, Error, Result};

use crate::CommConfig;
use crate::nccl::{NcclComm, UniqueId};

/// The variable NCCL reads its bootstrap address from.
pub const COMM_ID_ENV: &str = "NCCL_COMM_ID";

/// Where this process sits in a launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// This process's rank, `0..world_size`.
    pub rank: usize,
    /// Ranks in the launch.
    pub world_size: usize,
    /// This process's index among the ranks of its node (and its GPU, unless the launcher
    /// shows each process one GPU).
    pub local_rank: usize,
    /// Ranks on this node (the two-level shuffle's group size).
    pub local_world_size: usize,
    /// Which launcher's variables were read: `"torchrun"` or `"slurm"`.
    pub launcher: &'static str,
    /// `MASTER_ADDR:MASTER_PORT`, when the launcher set them.
    pub master: Option<(String, u16)>,
}

/// A launcher variable that is set but not a number, or numbers that do not fit together.
fn bad(message: String) -> Error {
    Error::Communication {
        op: "reading the launcher's environment",
        message,
    }
}

impl Launch {
    /// The launch this process belongs to, from its environment; `None` when no launcher's
    /// variables are set.
    ///
    /// # Errors
    /// [`Error::Communication`] for variables that are not numbers or do not fit together (a
    /// rank past the world size).
    pub fn from_env() -> Result<Option<Self>> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// As [`Launch::from_env`], reading variables through `var`.
    ///
    /// # Errors
    /// As [`Launch::from_env`].
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        let number = |name: &str| -> Result<Option<usize>> {
            var(name)
                .map(|v| {
                    v.trim()
                        .parse::<usize>()
                        .map_err(|_| bad(format!("{name}={v:?} is not a count")))
                })
                .transpose()
        };
        let (launcher, rank, world, local_rank, local_world) =
            match (number("RANK")?, number("WORLD_SIZE")?) {
                (Some(rank), Some(world)) => (
                    "torchrun",
                    rank,
                    world,
                    number("LOCAL_RANK")?.unwrap_or(rank),
                    number("LOCAL_WORLD_SIZE")?,
                ),
                _ => match (number("SLURM_PROCID")?, number("SLURM_NTASKS")?) {
                    (Some(rank), Some(world)) => {
                        // SLURM_TASKS_PER_NODE reads like "4(x2),3": the first node's count.
                        let first_count = var("SLURM_TASKS_PER_NODE").and_then(|v| {
                            let digits: String =
                                v.chars().take_while(char::is_ascii_digit).collect();
                            digits.parse().ok()
                        });
                        (
                            "slurm",
                            rank,
                            world,
                            number("SLURM_LOCALID")?.unwrap_or(rank),
                            number("SLURM_NTASKS_PER_NODE")?.or(first_count),
                        )
                    }
                    _ => return Ok(None),
                },
            };
        let local_world = local_world.unwrap_or(world);
        if world == 0 || rank >= world || local_rank >= local_world || local_world > world {
            return Err(bad(format!(
                "{launcher}: rank {rank} of {world}, local rank {local_rank} of {local_world}"
            )));
        }
        let master = match (var("MASTER_ADDR"), var("MASTER_PORT")) {
            (Some(addr), Some(port)) => {
                let port = port
                    .trim()
                    .parse::<u16>()
                    .map_err(|_| bad(format!("MASTER_PORT={port:?} is not a port")))?;
                Some((addr, port))
            }
            _ => None,
        };
        Ok(Some(Self {
            rank,
            world_size: world,
            local_rank,
            local_world_size: local_world,
            launcher,
            master,
        }))
    }

    /// A value for `NCCL_COMM_ID` when it is not set: `MASTER_ADDR:MASTER_PORT+1`.
    pub fn suggested_comm_id(&self) -> Option<String> {
        let (addr, port) = self.master.as_ref()?;
        let port = port.checked_add(1)?;
        Some(if addr.contains(':') {
            format!("[{addr}]:{port}")
        } else {
            format!("{addr}:{port}")
        })
    }

    /// The GPU this rank drives: its local rank, or the one GPU the launcher shows the process
    /// (`CUDA_VISIBLE_DEVICES` set per task).
    ///
    /// # Errors
    /// [`Error::NoDevice`] when there is no GPU, or fewer than the local ranks.
    pub fn backend(&self) -> Result<CudaBackend> {
        let visible = joinkit_cuda::device_count()?;
        CudaBackend::new(if visible == 1 { 0 } else { self.local_rank })
    }

    /// This rank's NCCL communicator, every rank of the launch joining through
    /// `NCCL_COMM_ID`; returns once all have joined (or the time limit passes).
    ///
    /// # Errors
    /// [`Error::Communication`] when `NCCL_COMM_ID` is not set (the message suggests a value)
    /// or NCCL fails; as [`NcclComm::init_rank`].
    pub fn nccl_comm(&self, backend: &CudaBackend, config: CommConfig) -> Result<NcclComm> {
        if std::env::var_os(COMM_ID_ENV).is_none() {
            let example = self
                .suggested_comm_id()
                .unwrap_or_else(|| "<rank 0's host>:<free port>".into());
            return Err(Error::Communication {
                op: "joining the launch",
                message: format!(
                    "{COMM_ID_ENV} is not set: set it alike on every rank to rank 0's host and a \
                     free port, e.g. {COMM_ID_ENV}={example}"
                ),
            });
        }
        let id = UniqueId::new()?;
        NcclComm::init_rank(backend, self.world_size, self.rank, &id, config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(vars: &[(&str, &str)]) -> Result<Option<Launch>> {
        Launch::from_vars(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_string())
        })
    }

    #[test]
    fn no_launcher_is_none() {
        assert_eq!(launch(&[("PATH", "/bin")]).unwrap(), None);
    }

    /// Rank, world size, local rank, local world size and launcher.
    fn placed(l: &Launch) -> (usize, usize, usize, usize, &'static str) {
        (
            l.rank,
            l.world_size,
            l.local_rank,
            l.local_world_size,
            l.launcher,
        )
    }

    #[test]
    fn torchrun_variables() {
        let l = launch(&[
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(placed(&l), (5, 8, 1, 4, "torchrun"));
        assert_eq!(l.suggested_comm_id().as_deref(), Some("node0:29501"));
    }

    #[test]
    fn slurm_variables_with_the_tasks_per_node_pattern() {
        let l = launch(&[
            ("SLURM_PROCID", "6"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "2"),
            ("SLURM_TASKS_PER_NODE", "4(x2)"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(placed(&l), (6, 8, 2, 4, "slurm"));
        assert_eq!(l.suggested_comm_id(), None);
    }

    #[test]
    fn torchrun_wins_over_slurm_and_one_node_is_the_default() {
        let l = launch(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("MASTER_ADDR", "fe80::1"),
            ("MASTER_PORT", "1000"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((l.rank, l.local_world_size, l.launcher), (0, 2, "torchrun"));
        assert_eq!(l.suggested_comm_id().as_deref(), Some("[fe80::1]:1001"));
    }

    #[test]
    fn bad_variables_are_errors() {
        for vars in [
            &[("RANK", "x"), ("WORLD_SIZE", "2")][..],
            &[("RANK", "2"), ("WORLD_SIZE", "2")],
            &[("RANK", "0"), ("WORLD_SIZE", "0")],
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "4"),
                ("LOCAL_RANK", "3"),
                ("LOCAL_WORLD_SIZE", "2"),
            ],
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "99999"),
            ],
        ] {
            assert!(
                matches!(launch(vars), Err(Error::Communication { .. })),
                "{vars:?}"
            );
        }
    }
}
