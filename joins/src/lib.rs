//! # joinkit
//!
//! The thin composition crate: relational joins over any [`joinkit_cuda::Backend`], written
//! once and run on the CPU (rayon) or CUDA from the same code, each algorithm as its paper's
//! steps over the primitives of `joinkit-primitives` and `joinkit-hashtable`.
//!
//! | algorithm | transform | match | materialize |
//! | --- | --- | --- | --- |
//! | SMJ-UM (GFUR) | sort keys with row ids | merge-path bounds + balanced range expansion | gather payloads from the inputs by row id |
//! | SMJ-OM (GFTR) | sort keys with row ids; payloads into sorted order, one column at a time | same | gather transformed payloads at clustered positions |
//! | NPHJ-open | build the global open-addressing table | count + retrieve | gather by row id |
//! | NPHJ-chained | build the lock-free chained table | count + retrieve | gather by row id |
//! | PHJ-UM (GFUR) | mix keys; bucket-chain partition of keys with row ids | hash join per co-partition (shared-memory tables) | gather payloads from the inputs by row id |
//! | PHJ-OM (GFTR) | mix keys; stable radix partition of keys with the first payload; further payloads partitioned one column at a time | same | gather partitioned payloads at clustered positions |
//!
//! The partitioned joins' match step is [`CoPartitionJoin`]; see its module for work items,
//! pieces and skew, and `phj.rs` for the radix bits, key mixing and GFTR choices.
//!
//! Kinds: inner, left semi, left anti, left outer; PK-FK, PK-PK (`right_unique`, checked) and
//! M:N. Outputs: row-id gather maps ([`join_rows`]) or payload columns ([`join_columns`]), with
//! [`JoinStats`] (per-phase times, peak device memory, the algorithm chosen).
//!
//! Sizes: output rows are counted (64-bit) before the output is allocated. With
//! [`JoinOptions::memory_budget`] an output over the budget is [`Error::OutputOverBudget`];
//! the chunked joins ([`join_columns_chunked`], [`join_rows_chunked`]: a non-partitioned hash
//! join, built and counted once) yield it instead in pieces that each fit the budget.
//!
//! Tables in host memory larger than the device allows ([`hybrid_join`], Thostrup et al. §5):
//! hash-partitioned on the CPU into pairs sized against a device memory budget, joined pair
//! by pair on the device and on the CPU at the same time, from one queue.
//!
//! Sequences of joins ([`join_sequence`], Wu et al. §5.2.7): a fact table joined with `k`
//! dimension tables, each foreign-key column materialized just before its join (or, as the
//! baseline, all up front), payloads gathered once at the end from the composed gather maps.
//!
//! ```
//! use joinkit::{JoinKind, JoinOptions, join_rows};
//! use joinkit_cuda::{Backend, CpuBackend};
//! let cpu = CpuBackend::new();
//! let left = cpu.upload(&[3u32, 1, 4, 1]).unwrap();
//! let right = cpu.upload(&[1u32, 5, 3]).unwrap();
//! let (rows, stats) = join_rows(&cpu, &left, &right, &JoinOptions::new(JoinKind::Inner)).unwrap();
//! let mut pairs: Vec<(u32, u32)> = rows.left.iter().copied().zip(rows.right.unwrap()).collect();
//! pairs.sort();
//! assert_eq!(pairs, vec![(0, 2), (1, 0), (3, 0)]);
//! assert_eq!(stats.output_rows, 3);
//! ```

mod choose;
mod chunk;
mod copart;
#[cfg(feature = "cuda")]
mod copart_cuda;
mod flags;
mod hybrid;
mod join;
mod phj;
mod probe;
pub mod reference;
mod sample;
mod sequence;
mod spec;
mod stats;
mod stream;
#[cfg(feature = "cuda")]
mod stream_cuda;

pub use choose::{
    ChoiceParams, ChoiceReason, JoinInputStats, MergeRule, SAMPLE_ROWS, choose, choose_unsampled,
    right_sample_rows, sample_stats,
};
pub use chunk::{
    ColumnChunks, RowChunks, join_columns_chunked, join_rows_chunked, output_row_bytes,
};
pub use copart::{
    CPU_BUILD_CAPACITY, CPU_PROBE_CHUNK, CoJoined, CoPartitionJoin, CoSide, CoWant,
    MAX_BUILD_CAPACITY, MIX_SEED, PairColumns, Pieces, set_cpu_phj_limits, within_u32,
};
pub use flags::MatchFlags;
pub use hybrid::{
    Fallback, HYBRID_SEED, HybridOptions, HybridSplit, HybridStats, MIN_PARTITIONS, PairStats,
    Worker, WorkerStats, hybrid_join,
};
pub use join::{JoinBackend, Materialized, RowPairs, Table, check_rows, join_columns, join_rows};
pub use joinkit_cuda::{Backend, Column, CpuBackend, Device, Error, Result};
pub use probe::{PartitionedProbe, ProbeTable};
pub use sample::{
    MAX_SAMPLES, RowIdsToNumber, SAMPLE_GROUP_ROWS, SampleAndTable, SampleGroup, SampleRuns,
    sample_row,
};
pub use sequence::{
    ColumnKey, DimensionJoin, FkMaterialization, SequenceOptions, SequenceOutput, SequenceStats,
    SequenceStep, join_sequence,
};
pub use spec::{Algorithm, JoinKind, JoinOptions, NULL_ROW};
pub use stats::{JoinStats, add_phase};
pub use stream::{
    ColumnType, HostColumn, HostColumnMut, HostTableSource, Lane, OutputChunk, ProbeSource, Span,
    StreamOptions, StreamStats, StreamedJoin, join_streamed,
};
#[cfg(feature = "cuda")]
pub use stream_cuda::{PinnedColumn, PinnedTable, join_streamed_pinned};

/// The crate's kernels (`kernels/*.cu`, one fatbin), shared by every launch in the crate: each
/// `kernel_module!` static embeds the image and is loaded on its own, so one per crate.
#[cfg(feature = "cuda")]
static KERNELS: joinkit_cuda::KernelModule = joinkit_cuda::kernel_module!();
