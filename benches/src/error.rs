//! joinkit-bench's errors: each prints as one line that names what was wrong.

use std::path::PathBuf;

/// Result with [`BenchError`].
pub(crate) type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Everything the command line reports instead of panicking.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    /// From joinkit: bad sizes or arguments, the device, the join itself.
    #[error(transparent)]
    Joinkit(#[from] joinkit_cuda::Error),
    /// A file could not be opened, read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A file's content is not usable: not Parquet or Arrow IPC, corrupt, a missing column, a
    /// column type joinkit does not join.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Ranks of a distributed run failed: each failed rank's error.
    #[error("{0}")]
    Ranks(String),
    /// Options that do not fit together (or a sweep that names no option).
    #[error("{0}")]
    Usage(String),
    /// The tables could not be printed: standard output is closed or full (the run's files
    /// are written first).
    #[error("standard output: {0}")]
    Stdout(std::io::Error),
}
