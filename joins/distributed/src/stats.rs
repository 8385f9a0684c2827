//! What a distributed join reports, per rank and over all ranks.

use joinkit::JoinStats;

use crate::{ColumnTraffic, Level, Placement, Shuffle};

/// One rank's account of a distributed join, with the figures every rank shares.
#[derive(Debug, Clone, PartialEq)]
pub struct DistributedStats {
    /// This rank.
    pub rank: usize,
    /// Ranks that joined.
    pub ranks: usize,
    /// The placement run ([`Placement::Auto`] resolved).
    pub placement: Placement,
    /// The shuffle run ([`Shuffle::Auto`] resolved).
    pub shuffle: Shuffle,
    /// Keys found heavy and handled by replication (0 without skew handling).
    pub heavy_keys: usize,
    /// This rank's phases in order with their times in milliseconds (the backend's timing:
    /// CUDA events around the work queued on the stream, or the wall clock): `narrow` (8-byte
    /// keys to their low 32 bits where every rank's keys allow it), `plan` (size exchange,
    /// heavy-key sample, compression decisions),
    /// `partition` (hash partition by destination, heavy rows split off), `shuffle` (counts,
    /// then rows; for a replicated side, the all-gather), `local join`, or for a pipelined
    /// probe side `pipelined probe` (its wall time, chunk shuffles and probes overlapped),
    /// `gather` (to rank 0).
    pub phases: Vec<(&'static str, f64)>,
    /// Whether the 8-byte keys moved and joined as their low 32 bits (every rank's keys of
    /// both sides within 2^32 values).
    pub narrowed_keys: bool,
    /// Whether the partition by rank narrowed them, writing the row ids as it went
    /// ([`joinkit_partition::LowWordsPartition`]), rather than a pass of their own.
    pub narrowed_by_partition: bool,
    /// Bytes of rows this rank sent to other ranks (keys and columns; a two-level shuffle
    /// moves some of them twice).
    pub bytes_sent: u64,
    /// Bytes this rank put on the links to other ranks, as sent (compressed columns as their
    /// encoded words), every level and side counted (a two-level shuffle's rows twice).
    pub bytes_on_wire: u64,
    /// Each shuffled column's traffic per side and link level: raw and sent bytes, the scheme
    /// and the sampled ratio its compression was decided from.
    pub traffic: Vec<ColumnTraffic>,
    /// The link rates [`crate::Compression::Auto`] decided from, per level (GB/s a rank
    /// sends: configured, or measured over the communicator); empty when none was needed.
    pub link_gbps: Vec<(Level, f64)>,
    /// Links this join measured (each a few all-to-alls): 0 where the rates were configured
    /// or the communicator had measured the same peers for an earlier join.
    pub links_measured: usize,
    /// Rows this rank held of the left and right inputs.
    pub input_rows: (usize, usize),
    /// Rows of the left and right sides this rank joined locally (after the shuffle).
    pub local_rows: (usize, usize),
    /// The local join's statistics.
    pub local: JoinStats,
    /// Output rows this rank returns.
    pub output_rows: u64,
    /// Output rows of all ranks together.
    pub global_output_rows: u64,
    /// Input rows of all ranks together, both sides (|R| + |S|, the throughput metric's
    /// numerator).
    pub global_input_rows: u64,
    /// The largest local join input (left + right rows) over the mean: 1.0 is perfect balance.
    pub imbalance: f64,
    /// The slowest rank's local join, in milliseconds.
    pub slowest_local_join_ms: f64,
    /// The pipelined shuffle's account, when it ran ([`crate::DistributedOptions::pipeline_chunks`]
    /// above 1 with the partitioned placement on several ranks).
    pub pipeline: Option<PipelineStats>,
    /// What this rank did when, on each lane, for a timeline: every phase, and in a pipelined
    /// run each chunk's shuffle and probe.
    pub timeline: Vec<Span>,
}

/// One stretch of work on one lane of a rank, in milliseconds since the join started. A phase
/// and a shuffle beside the computing are timed on their streams without waiting for them:
/// their spans are device time from a mark queued as the join begins, which the device
/// reaches once the work queued before the join is done. A pipeline's chunks are host time
/// from the join's start (the pipeline begins by waiting for the compute stream, so the two
/// agree where nothing was queued before the join).
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// `"communication"` (the thread and stream that move rows) or `"compute"` (the ones that
    /// partition, build and probe).
    pub lane: &'static str,
    /// The phase (`plan`, `partition`, `shuffle`, `local join`, `gather`) or, in a pipeline,
    /// `shuffle`, `build` or `probe`.
    pub what: &'static str,
    /// The pipeline chunk (`None` outside the pipeline, and for the heavy keys' rows probed where
    /// they are).
    pub chunk: Option<usize>,
    /// Start, milliseconds after the join began.
    pub start_ms: f64,
    /// End, milliseconds after the join began.
    pub end_ms: f64,
}

impl Span {
    /// Its length in milliseconds.
    pub fn ms(&self) -> f64 {
        self.end_ms - self.start_ms
    }
}

/// How far the pipelined shuffle hid the probe side's shuffle under the probe (this rank).
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineStats {
    /// Chunks the probe side moved in.
    pub chunks: usize,
    /// Wall time from the first chunk's shuffle to the last probe's end.
    pub wall_ms: f64,
    /// The chunks' shuffles added up (assembly, compression, all-to-all, decompression).
    pub shuffle_ms: f64,
    /// The build and the probes added up.
    pub compute_ms: f64,
}

impl PipelineStats {
    /// Shuffle time that ran under computation: the parts' sum over the wall time (0 when
    /// they ran one after another).
    pub fn hidden_ms(&self) -> f64 {
        (self.shuffle_ms + self.compute_ms - self.wall_ms).max(0.0)
    }
}

impl DistributedStats {
    /// Milliseconds of phase `name` (0 when it did not run).
    pub fn phase(&self, name: &str) -> f64 {
        self.phases
            .iter()
            .filter(|p| p.0 == name)
            .map(|p| p.1)
            .sum()
    }

    /// Milliseconds of every phase together.
    pub fn total_ms(&self) -> f64 {
        self.phases.iter().map(|p| p.1).sum()
    }
}
