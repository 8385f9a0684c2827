//! One error type for every joinkit crate: bad input is reported, never panicked on.

/// Result with joinkit's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in joinkit, on either backend.
///
/// The CPU and CUDA backends return the same variant for the same bad input, so property tests
/// can compare errors as well as outputs.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Two inputs that must have the same length do not.
    #[error("length mismatch in {what}: {left} vs {right}")]
    LengthMismatch {
        /// Which inputs (for example `"keys vs values"`).
        what: &'static str,
        /// Length of the first.
        left: usize,
        /// Length of the second.
        right: usize,
    },
    /// A key bit range is empty, reversed or reaches past the key's width.
    #[error("bit range {begin}..{end} is not inside a {width}-bit key")]
    BitRange {
        /// First bit (inclusive).
        begin: u32,
        /// Last bit (exclusive).
        end: u32,
        /// Width of the key type in bits.
        width: u32,
    },
    /// An input that must hold at least one element (or bin, or sample) holds none.
    #[error("empty input: {0}")]
    EmptyInput(&'static str),
    /// An index (gather map, row id) points outside the column it indexes.
    #[error("index {index} out of range for {what} of length {len}")]
    IndexOutOfRange {
        /// What was indexed.
        what: &'static str,
        /// The offending index.
        index: u64,
        /// The column length.
        len: usize,
    },
    /// A size computation would overflow `usize` (or the kernel's 64-bit counters).
    #[error("size overflow: {0}")]
    SizeOverflow(&'static str),
    /// A device allocation larger than what the device has free.
    #[error(
        "out of device memory: requested {requested} bytes, {free} free of {total} on the device"
    )]
    OutOfDeviceMemory {
        /// Bytes asked for.
        requested: usize,
        /// Bytes free when the request failed.
        free: usize,
        /// Device memory in all.
        total: usize,
    },
    /// A hash table cannot take more rows (its load factor is too high for the data).
    #[error("hash table full: {rows} rows do not fit {capacity} slots")]
    TableFull {
        /// Slots in the table.
        capacity: usize,
        /// Rows asked to insert.
        rows: usize,
    },
    /// A side promised to have unique keys (a primary key) holds a key twice.
    #[error("duplicate key on the {side} side, which was declared unique")]
    DuplicateKey {
        /// Which input (`"build"`, `"left"`, ...).
        side: &'static str,
    },
    /// An output would not fit the buffer or budget given for it.
    #[error("output of {needed} elements does not fit {capacity}")]
    OutputTooLarge {
        /// Elements the output needs.
        needed: u64,
        /// Elements available.
        capacity: u64,
    },
    /// A join's output would take more bytes than the memory budget the caller gave it
    /// (`joinkit::JoinOptions::memory_budget`). Counted before the output is allocated; a
    /// chunked join (`joinkit::join_columns_chunked`, `joinkit::join_rows_chunked`) yields the
    /// same output in pieces within the budget.
    #[error(
        "join output of {rows} rows needs {bytes} bytes, over the memory budget of {budget} \
         bytes; a chunked join (joinkit::join_columns_chunked, join_rows_chunked) yields an \
         output in pieces within any budget that holds one row"
    )]
    OutputOverBudget {
        /// Output rows (1 when a chunked join's budget does not hold a single row).
        rows: u64,
        /// Bytes those rows need.
        bytes: u64,
        /// The budget in bytes.
        budget: u64,
    },
    /// Work asked to run on the device alone needs more device memory than the caller allows
    /// it (`joinkit::HybridOptions::gpu_memory`, with the device-only split of the hybrid
    /// GPU/CPU join): counted from the work's size before it runs.
    #[error(
        "a partition pair needs about {needed} bytes of device memory, over the budget of \
         {budget} bytes; let the CPU take such pairs or allow more device memory"
    )]
    DeviceBudget {
        /// Bytes the work is estimated to need on the device.
        needed: u64,
        /// The device memory allowed, in bytes.
        budget: u64,
    },
    /// Encoded data is truncated or corrupt (with what was wrong).
    #[error("corrupt or truncated encoded data: {0}")]
    Corrupt(String),
    /// An argument outside what the operation supports (with the reason).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No CUDA device could be used (no driver, no device, bad `JOINKIT_DEVICE`).
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// The CUDA driver reported an error.
    #[error("CUDA driver error during {op}: {message}")]
    Driver {
        /// What was being done.
        op: &'static str,
        /// The driver's description of the error.
        message: String,
    },
    /// A communication library call failed, or the library cannot be used (NCCL missing or
    /// too old, a bad launcher environment).
    #[error("communication error during {op}: {message}")]
    Communication {
        /// What was being done.
        op: &'static str,
        /// What went wrong, and for a missing library what to install.
        message: String,
    },
    /// Another rank of a communicator failed (its error reached this rank) or left before a
    /// collective every rank must join.
    #[error("rank {rank} failed or left during {op}")]
    PeerFailed {
        /// The first rank that failed.
        rank: usize,
        /// The collective or phase.
        op: &'static str,
    },
    /// A collective waited on its peers longer than the communicator's time limit: a rank
    /// stopped responding.
    #[error("{op} timed out after {millis} ms waiting for another rank")]
    Timeout {
        /// The collective.
        op: &'static str,
        /// The limit that ran out, in milliseconds.
        millis: u64,
    },
    /// The ranks of a communicator were given inputs that do not go together (key widths,
    /// column types, join kinds, world sizes).
    #[error("ranks disagree: {0}")]
    RanksDisagree(String),
    /// A CUDA runtime call (CUB through `cub-sys`) returned an error code.
    #[error("CUDA runtime error {code} during {op}")]
    Runtime {
        /// What was being done.
        op: &'static str,
        /// The `cudaError_t` value.
        code: i32,
    },
}

impl Error {
    /// Checks that two lengths agree.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when they differ.
    pub fn check_len(what: &'static str, left: usize, right: usize) -> Result<()> {
        if left == right {
            Ok(())
        } else {
            Err(Error::LengthMismatch { what, left, right })
        }
    }

    /// Checks a bit range `begin..end` against a key of `width` bits: non-empty and inside.
    ///
    /// # Errors
    /// [`Error::BitRange`] otherwise.
    pub fn check_bits(bits: &std::ops::Range<u32>, width: u32) -> Result<()> {
        if bits.start < bits.end && bits.end <= width {
            Ok(())
        } else {
            Err(Error::BitRange {
                begin: bits.start,
                end: bits.end,
                width,
            })
        }
    }

    /// `count * size_of::<T>()` in bytes, or [`Error::SizeOverflow`].
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] when the product does not fit `usize`.
    pub fn bytes_of<T>(count: usize) -> Result<usize> {
        count
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::SizeOverflow("buffer size in bytes"))
    }
}
