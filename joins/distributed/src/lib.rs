//! # joinkit-distributed
//!
//! Joins spread over the ranks of a [`Communicator`] (one per GPU, or CPU threads), as a layer
//! over joinkit's single-device joins: every rank holds a part of each input, the rows move so
//! that equal keys meet, and each rank joins what it holds with [`joinkit::join_columns`]
//! (any [`Algorithm`], [`Algorithm::Auto`] by default). The output stays distributed: each
//! rank returns its part, or rank 0 all of it ([`DistributedOptions::gather_to_root`]).
//!
//! | step | Gao & Sakharnykh (ADMS'21) | here |
//! | --- | --- | --- |
//! | partition | murmur3 hash partition of both sides into one partition per rank, buffered in shared memory | [`joinkit_partition::HashPartition`] with a seed of its own ([`SHUFFLE_SEED`], not the local join's [`joinkit::MIX_SEED`], so the local join's partitions stay balanced) |
//! | shuffle (Alg. 1) | all-to-all of the partitions | [`Communicator::all_to_all_v_columns`]: a table's columns at once, on a stream of their own beside the partitioning and the local join (below) |
//! | two-level shuffle (Alg. 2) | across nodes to the same local rank first, then within the node | [`Shuffle::TwoLevel`]: an all-to-all in which each rank sends only to its rail peers, then one within the node |
//! | local join | the best single-GPU join | [`joinkit::join_columns`] |
//! | compressed shuffle (§4–5) | cascaded compression of every shuffled buffer | [`Compression`]: per column, sampled scheme, one fused encode over the partition bounds, ranks agree on each column ([`ColumnTraffic`]) |
//!
//! The pipelined shuffle of Thostrup et al. (SIGMOD'23, §4),
//! [`DistributedOptions::pipeline_chunks`]: the build side shuffled and its table built first,
//! the probe side moved in chunks on a second stream ([`SideStream`]), each chunk probed while
//! the next is in flight ([`PipelineStats`], [`Span`] for a timeline).
//!
//! Without the pipeline, a partitioned inner join of carried payloads (no heavy keys) still
//! moves rows beside the computing: the right side is partitioned and sent first, on a second
//! stream, while the left side partitions; the left side is sent while the right side's
//! partitions for the local join are built ([`joinkit::PartitionedProbe`]). With a
//! communicator whose collectives return once the transfers are queued
//! (`joinkit_comm::peer::PeerComm`, copy engines) the transfers run under the kernels; with
//! NCCL, whose collectives wait for their transfers (and whose kernels would share the SMs),
//! the same steps run in turn. On that path, [`distributed_join_rows`] of 8-byte keys that a
//! look at a few thousand of them finds within 2^32 values hands the partition by rank the keys
//! themselves ([`joinkit_partition::LowWordsPartition`]): it writes their low 32 bits and the
//! 4-byte row ids while it groups them, where otherwise a pass makes the ids, one narrows the
//! keys and one groups them; it also checks every key against the window the look chose, and
//! where one falls outside (on any rank) the join goes the three passes' way, with 8-byte keys
//! ([`DistributedStats::narrowed_by_partition`]).
//!
//! From NVIDIA's multi-GPU join talk: a [`Placement::Replicated`] build side (all-gathered to
//! every rank, which builds it whole and probes its own rows: no probe shuffle) or a
//! [`Placement::Partitioned`] one (both sides shuffled), chosen by [`Placement::Auto`] from the
//! sizes. Skew, which none of the sources handles: keys heavy enough to overload their rank
//! ([`Skew`]) are found by sampling the left side; their left rows stay where they are and
//! their right rows are replicated to every rank.
//!
//! Every rank calls the same functions with the same options; inputs that do not go together
//! (key widths, column types, options) are [`Error::RanksDisagree`] on every rank, and an error
//! on one rank (bad input, out of memory) reaches the others as [`Error::PeerFailed`] at the
//! end of the phase, never a hang.
//!
//! ```
//! use joinkit::{JoinKind, JoinOptions};
//! use joinkit_comm::{Communicator, LocalWorld};
//! use joinkit_cuda::{Backend, CpuBackend};
//! use joinkit_distributed::{DistributedOptions, distributed_join_rows};
//!
//! // Three ranks as threads; rank r holds left keys r, r + 3 and right keys 0..6 once overall.
//! let world = LocalWorld::new(3, Default::default()).unwrap();
//! let outputs = world.run(|comm| {
//!     let cpu = CpuBackend::new();
//!     let r = comm.rank() as u32;
//!     let left = cpu.upload(&[r, r + 3])?;
//!     let right = cpu.upload(&[2 * r, 2 * r + 1])?;
//!     let opts = DistributedOptions::new(JoinOptions::new(JoinKind::Inner));
//!     let (rows, stats) = distributed_join_rows(&comm, &cpu, left, right, &opts)?;
//!     Ok((rows.rows, stats.global_output_rows))
//! });
//! let outputs: Vec<_> = outputs.into_iter().collect::<Result<_, _>>().unwrap();
//! // Six left rows, each matching one right row somewhere.
//! assert_eq!(outputs.iter().map(|o| o.0).sum::<u64>(), 6);
//! assert!(outputs.iter().all(|o| o.1 == 6));
//! ```

mod driver;
mod pipeline;
mod shuffle;
mod skew;
mod stats;
mod wire;

pub use driver::{DistributedBackend, distributed_join_columns, distributed_join_rows};
pub use joinkit::{Algorithm, JoinKind, JoinOptions, Materialized, Table};
pub use joinkit_comm::Communicator;
pub use joinkit_cuda::{Error, Result};
pub use pipeline::SideStream;
pub use shuffle::SHUFFLE_SEED;
pub use skew::heavy_threshold;
pub use stats::{DistributedStats, PipelineStats, Span};
pub use wire::{
    ColumnTraffic, DEFAULT_BREAK_EVEN_GBPS, Level, MIN_RATIO, break_even_gbps,
    codec_round_trip_gbps,
};

/// How rows travel to the rank that owns their key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shuffle {
    /// Every rank sends to every rank (Gao Alg. 1).
    OneLevel,
    /// Ranks are `nodes × ranks_per_node`, rank `node * ranks_per_node + local`. Rows first
    /// cross nodes to the rank of the same local index (one message per node pair and rail),
    /// then move within the node (Gao Alg. 2): fewer, larger messages over the slow links.
    TwoLevel {
        /// Ranks of one node (dividing the communicator's size).
        ranks_per_node: usize,
    },
    /// Two-level when the ranks span several nodes of several ranks each
    /// ([`DistributedOptions::ranks_per_node`], e.g. a launcher's `LOCAL_WORLD_SIZE`), else
    /// one-level. Gao et al. measured the two-level shuffle ahead from 2 nodes of 8 GPUs up;
    /// within one NVLink host it loses (1.09–1.29× slower on 4 H200s, docs/results), so it
    /// is taken only across nodes.
    Auto,
}

/// Where the build (right) side lives during the join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Both sides hash-partitioned over the ranks.
    Partitioned,
    /// The right side all-gathered to every rank; the left side stays where it is.
    Replicated,
    /// Replicated when it moves fewer bytes: every rank receiving the whole right side moves
    /// `R (W - 1)` rows against `(R + S) (W - 1) / W` for the shuffle of both sides, so
    /// replicated when `R (W - 1) < S` (summed over ranks; the talk's "small build side").
    Auto,
}

/// Heavy-key handling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Skew {
    /// Every key goes to its hash's rank.
    Off,
    /// Keys whose left rows (estimated from a sample of every rank) reach `load` of one rank's
    /// fair share (`load * left rows / ranks`) keep their left rows where they are and have
    /// their right rows replicated to every rank. Default `load`: 0.25.
    Replicate {
        /// The share of one rank's fair load from which a key counts as heavy.
        load: f64,
    },
}

/// Compression of the shuffled columns with the cascaded codec (Gao & Sakharnykh §4–5), per
/// link level: in the two-level shuffle only the step across nodes (inside a node's NVLink
/// domain the codec costs more than it saves), in the one-level shuffle and the all-gathers of
/// replicated rows all of it. A column whose sampled ratio (all ranks together) is below
/// [`MIN_RATIO`] is sent raw; the ranks agree on each column's decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Compression {
    /// Every column raw.
    Off,
    /// Every column that compresses (sampled ratio ≥ [`MIN_RATIO`]).
    On,
    /// A column compressed where its link is slower than the column's break-even
    /// ([`break_even_gbps`]): `break_even_gbps × (1 − 1/r)` for a sampled ratio `r`.
    Auto {
        /// The codec's round-trip rate in GB/s of raw bytes ([`codec_round_trip_gbps`] of its
        /// encode and decode rates): the break-even of a column that shrinks without bound.
        break_even_gbps: f64,
        /// The link's rate in GB/s a rank sends; `None`: measured by all-to-alls to the level's
        /// peers, once per communicator and set of peers (the joins after the first reuse it).
        link_gbps: Option<f64>,
    },
}

impl Compression {
    /// [`Compression::Auto`] with the GPU codec's measured round trip
    /// ([`DEFAULT_BREAK_EVEN_GBPS`]) and the link measured.
    pub fn auto() -> Self {
        Compression::Auto {
            break_even_gbps: DEFAULT_BREAK_EVEN_GBPS,
            link_gbps: None,
        }
    }
}

/// Options of a distributed join.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DistributedOptions {
    /// The local joins' options (kind, algorithm, promises, output budget). The budget also
    /// bounds what [`DistributedOptions::gather_to_root`] brings to rank 0.
    pub join: JoinOptions,
    /// One- or two-level shuffle.
    pub shuffle: Shuffle,
    /// Ranks per node, for [`Shuffle::Auto`] (`None`: one node).
    pub ranks_per_node: Option<usize>,
    /// Partitioned or replicated build side.
    pub placement: Placement,
    /// Heavy-key handling (partitioned placement only).
    pub skew: Skew,
    /// Bring every rank's output to rank 0 (the others return empty outputs).
    pub gather_to_root: bool,
    /// Compression of the shuffled columns.
    pub compress: Compression,
    /// Chunks the probe (left) side is shuffled in with the partitioned placement, each probed
    /// while the next is in flight (1: shuffle it whole, then join). See
    /// [`DistributedOptions::pipeline_chunks`].
    pub pipeline_chunks: usize,
    /// Row ids sent as membership bitmaps. See [`DistributedOptions::id_bitmaps`].
    pub id_bitmaps: bool,
}

impl DistributedOptions {
    /// One-level shuffle, automatic placement, heavy keys replicated at the default load,
    /// output left distributed.
    pub fn new(join: JoinOptions) -> Self {
        Self {
            join,
            shuffle: Shuffle::Auto,
            ranks_per_node: None,
            placement: Placement::Auto,
            skew: Skew::Replicate { load: 0.25 },
            gather_to_root: false,
            compress: Compression::Off,
            pipeline_chunks: 1,
            id_bitmaps: false,
        }
    }

    /// With this shuffle.
    pub fn shuffle(mut self, shuffle: Shuffle) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// With this many ranks per node (for [`Shuffle::Auto`]).
    pub fn ranks_per_node(mut self, ranks: usize) -> Self {
        self.ranks_per_node = Some(ranks);
        self
    }

    /// With this placement of the build side.
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// With this heavy-key handling.
    pub fn skew(mut self, skew: Skew) -> Self {
        self.skew = skew;
        self
    }

    /// Gathering the output on rank 0 or not.
    pub fn gather_to_root(mut self, gather: bool) -> Self {
        self.gather_to_root = gather;
        self
    }

    /// With this compression of the shuffled columns.
    pub fn compress(mut self, compress: Compression) -> Self {
        self.compress = compress;
        self
    }

    /// With the probe side shuffled in `chunks` chunks (the pipelined shuffle, Thostrup §4):
    /// the build side is shuffled and its hash table built first, then the probe side,
    /// partitioned once, moves a chunk at a time, each chunk probed while the next is in
    /// flight, so the received probe side is never held whole and the shuffle hides under the
    /// probe. 1 (the default) shuffles it whole, then joins. Only the partitioned placement
    /// shuffles the probe side: a replicated build side, or a single rank, ignores it. 0 is
    /// [`Error::InvalidArgument`] on every rank.
    pub fn pipeline_chunks(mut self, chunks: usize) -> Self {
        self.pipeline_chunks = chunks;
        self
    }

    /// Where [`distributed_join_rows`]' partition by rank narrows the keys and names the rows
    /// (`DistributedStats::narrowed_by_partition`), send each side's row ids to each rank as
    /// one bit a row of a membership bitmap (`joinkit_partition::RowNames::Members`) instead of
    /// a 4-byte id a row beside the key, the receivers rebuilding the ids on their compute
    /// stream before their local join. Only where the communicator's exchanges keep rank order
    /// ([`Communicator::any_order_is_rank_order`]: the copy engines', in-process ranks'; not
    /// NCCL's, which sends ids as ever). A rank sends 44 % fewer bytes at Gao's shape on 4
    /// ranks; it pays where the shuffle holds the local join up: on 4 H200s over NVLink 20.1 against
    /// 20.6 ms, on 2, where the join hides most of the shuffle, 18.5 against 17.9 (the
    /// rebuilding costs more than the wait it removes; docs/results/distributed.md). Off by
    /// default.
    ///
    /// [`Communicator::any_order_is_rank_order`]: joinkit_comm::Communicator::any_order_is_rank_order
    pub fn id_bitmaps(mut self, on: bool) -> Self {
        self.id_bitmaps = on;
        self
    }
}

/// A global row id: the rank that held the row in the input, and its row there, as
/// `rank << 32 | row`.
pub fn global_row(rank: usize, row: u32) -> u64 {
    ((rank as u64) << 32) | u64::from(row)
}

/// The rank and row of a global row id ([`global_row`]).
pub fn split_global_row(id: u64) -> (usize, u32) {
    ((id >> 32) as usize, id as u32)
}

/// A distributed join's output as global row ids ([`global_row`]): this rank's part.
pub struct GlobalRows<B: joinkit_cuda::Backend> {
    /// Left row of each output row.
    pub left: B::Buf<u64>,
    /// Right row of each output row (inner and left outer joins; `None` for semi and anti).
    /// For left outer joins, rows without a match hold 0 and are marked in `right_valid`.
    pub right: Option<B::Buf<u64>>,
    /// For left outer joins: 1 where `right` holds a match, 0 where it is null.
    pub right_valid: Option<B::Buf<u32>>,
    /// Output rows on this rank.
    pub rows: u64,
}
