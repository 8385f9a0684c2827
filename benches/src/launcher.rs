//! A process started by a launcher (torchrun, srun) as one rank of several.

use std::path::{Path, PathBuf};

/// Sets `NCCL_COMM_ID` to `MASTER_ADDR:MASTER_PORT+1` when a launcher set those and not it,
/// so `torchrun --no-python joinkit-bench distributed --comm nccl` needs nothing more. Called
/// first thing in `main`, while the process has one thread.
#[cfg(feature = "cuda")]
pub(crate) fn default_comm_id() {
    use joinkit_comm::launch::{COMM_ID_ENV, Launch};
    if std::env::var_os(COMM_ID_ENV).is_some() {
        return;
    }
    if let Some(id) = Launch::from_env()
        .ok()
        .flatten()
        .and_then(|l| l.suggested_comm_id())
    {
        // SAFETY: called at the start of `main`, before any other thread exists, so nothing
        // reads the environment concurrently.
        unsafe { std::env::set_var(COMM_ID_ENV, id) };
    }
}

/// Without the `cuda` feature there is no NCCL to bootstrap.
#[cfg(not(feature = "cuda"))]
pub(crate) fn default_comm_id() {}

/// Where this process writes its report: `out`, or `out/rank-N` for rank N > 0 of a launch,
/// so the ranks of one launch do not write over each other's files.
pub(crate) fn rank_out_dir(out: &Path) -> PathBuf {
    match launch_rank() {
        Some(rank) if rank > 0 => out.join(format!("rank-{rank}")),
        _ => out.to_path_buf(),
    }
}

#[cfg(feature = "cuda")]
fn launch_rank() -> Option<usize> {
    joinkit_comm::launch::Launch::from_env()
        .ok()
        .flatten()
        .map(|l| l.rank)
}

#[cfg(not(feature = "cuda"))]
fn launch_rank() -> Option<usize> {
    None
}
