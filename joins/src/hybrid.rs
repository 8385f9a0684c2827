//! The hybrid GPU/CPU join (Thostrup et al., SIGMOD'23 §5): two tables in host memory joined
//! by the device and the CPU at once, when the device may not hold the build side.
//!
//! 1. **Over-partition** both sides on the CPU by a seeded hash of the key
//!    ([`HYBRID_SEED`], not [`crate::MIX_SEED`], so each pair's own join still finds its keys
//!    spread over its partitions), into enough partitions that an average pair needs at most
//!    half the device budget, [`MIN_PARTITIONS`] at least (so the two workers can share) and
//!    [`MAX_FANOUT`] at most.
//! 2. **Size each pair** ([`PairStats::estimate_bytes`]): its inputs, a scratch allowance per
//!    input row (sorted or partitioned copies of keys, row ids and payloads, hash tables:
//!    [`SCRATCH_ROW_IDS`] times key + row id, plus twice the payload bytes), and per output
//!    row twice the output row plus 16 bytes of row ids, plus 1 MiB of fixed scratch: a
//!    bound read off the algorithms, so an over-estimate (about 4× PHJ-OM's measured peak),
//!    which only makes pairs smaller. Where the output rows are
//!    bounded by the left rows (semi, anti, `right_unique`) the bound is counted; otherwise as
//!    many rows as the larger side are reserved, and the pair's join gets the rest of the
//!    budget as its [`JoinOptions::memory_budget`], so an output larger than that is refused
//!    ([`Error::OutputOverBudget`]) after counting, before it takes memory, and the pair goes to
//!    the CPU. A pair that needs more than the budget (a heavy key) is the CPU's.
//! 3. **Join the pairs on both at once**: this thread drives the device (upload the pair,
//!    [`join_columns`] there, download the output), a second thread joins pairs with
//!    [`join_columns`] on the CPU backend (rayon). They share one queue: pairs that fit the
//!    device, largest first, then those that do not; the device takes from the front, the CPU
//!    from the back. Why a queue and not a split computed up front: the two rates depend on
//!    the pair sizes, the join kind, the link and whatever else runs on the host, and a queue
//!    needs none of them to keep both busy until the end. What it must avoid is the CPU
//!    starting a pair in the last moments that the device would have finished sooner (or the
//!    only pair): so the CPU takes a pair that fits the device only once the device has
//!    finished one, and, once both have measured their rate (input bytes per ms of their own
//!    pairs), only if it would finish it before the device would finish all the pairs still
//!    queued ([`HybridSplit::Shared`]).
//! 4. **Concatenate** the pairs' outputs in partition order into host columns.
//!
//! Worst case: the plain CPU join. A budget of 0, or one whose average pair at the largest
//! fan-out does not fit, runs [`join_columns`] on the CPU on the whole tables without
//! partitioning ([`HybridStats::fallback`] says why), or is [`Error::DeviceBudget`] under
//! [`HybridSplit::DeviceOnly`].
//!
//! The budget counts the buffers a pair holds on the device ([`Backend::memory`]); memory a
//! backend keeps for reuse after they are freed (the CUDA backend's buffer cache and the
//! driver's pool) is not counted, as it is not by the joins' own peak.

use std::ops::Range;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use joinkit_cuda::{
    Backend, Column, CpuBackend, Element, Error, Key, Result, map_column, try_reserved,
};
use joinkit_partition::{HashPartition, MAX_FANOUT, Partitioned, RowIds};
use rayon::prelude::*;

use crate::join::{check_rows, row_bytes};
use crate::{
    JoinBackend, JoinKind, JoinOptions, Materialized, Table, join_columns, output_row_bytes,
};

/// Seed of the hybrid join's hash partition: neither [`crate::MIX_SEED`] (the partitioned
/// joins' key mixing) nor the distributed shuffle's, so the partitions of one do not fall
/// into a few partitions of the other.
pub const HYBRID_SEED: u32 = 0xbb67_ae85;

/// Fewest partitions the hybrid join cuts the tables into, however much device memory it may
/// use: enough pairs for the CPU to take its share while the device takes its own.
pub const MIN_PARTITIONS: usize = 64;

/// Copies of a row's key and row id a pair's join may hold at once, per input row: the
/// largest is PHJ-UM's bucket pool, whose buckets of twice the average partition rounded up
/// to a power of two (one a partition part full) reach about 5 rows' slots a row, beside the
/// mixed keys; sort-based and hash-table joins hold 2 to 4.
const SCRATCH_ROW_IDS: u64 = 6;

/// Device bytes a pair's join may allocate whatever its size (CUB's temporary storage, a
/// partition's offsets, one-element buffers for empty columns).
const PAIR_FIXED_BYTES: u64 = 1 << 20;

/// Device bytes of row ids held per output row while the output is assembled: the matched
/// (left, right) pair and its mapping back to row ids.
const OUTPUT_ID_BYTES: u64 = 16;

/// How the hybrid join shares the partition pairs between the device and the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HybridSplit {
    /// One queue: the device takes the pairs that fit from its front, the CPU the rest from
    /// its back and, while it would finish them before the device would, pairs that fit too.
    Shared,
    /// Every pair that fits the device budget runs there; the CPU takes only the others (the
    /// placement by size alone, for comparison).
    FitFirst,
    /// Every pair on the device; a pair that does not fit is [`Error::DeviceBudget`].
    DeviceOnly,
}

impl HybridSplit {
    /// Every split, for sweeps and tests.
    pub const ALL: [HybridSplit; 3] = [
        HybridSplit::Shared,
        HybridSplit::FitFirst,
        HybridSplit::DeviceOnly,
    ];

    /// The command line's name.
    pub fn name(self) -> &'static str {
        match self {
            HybridSplit::Shared => "shared",
            HybridSplit::FitFirst => "fit-first",
            HybridSplit::DeviceOnly => "device-only",
        }
    }

    /// Parses a name as [`HybridSplit::name`] writes it (case-insensitive).
    pub fn from_name(name: &str) -> Option<HybridSplit> {
        Self::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name.trim()))
    }
}

/// Options of [`hybrid_join`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HybridOptions {
    /// The join every pair runs (kind, algorithm, promises). Its `memory_budget`, if any,
    /// bounds each pair's output as it bounds one join's.
    pub join: JoinOptions,
    /// Most bytes of device memory a pair's join may hold at once (inputs, scratch, output).
    pub gpu_memory: u64,
    /// How pairs are shared between the device and the CPU.
    pub split: HybridSplit,
    /// Partitions to cut the tables into (1 ..= [`MAX_FANOUT`]); `None` chooses from the
    /// budget (see the module's docs).
    pub partitions: Option<usize>,
}

impl HybridOptions {
    /// `join` with `gpu_memory` bytes of device memory, the shared split, partitions chosen.
    pub fn new(join: JoinOptions, gpu_memory: u64) -> Self {
        Self {
            join,
            gpu_memory,
            split: HybridSplit::Shared,
            partitions: None,
        }
    }

    /// With the given split.
    pub fn split(mut self, split: HybridSplit) -> Self {
        self.split = split;
        self
    }

    /// Cutting the tables into `partitions` partitions.
    pub fn partitions(mut self, partitions: usize) -> Self {
        self.partitions = Some(partitions);
        self
    }
}

/// Where a pair ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Worker {
    /// The device backend (uploaded, joined, downloaded).
    Device,
    /// The CPU backend.
    Cpu,
}

/// Why a hybrid join ran as the plain CPU join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// The budget was 0.
    NoDeviceMemory,
    /// An average pair at the largest fan-out needs more than the budget.
    PairOverBudget {
        /// Device bytes the average pair needs.
        needed: u64,
    },
}

/// One pair's run (or the device's refused attempt at it).
#[derive(Debug, Clone, PartialEq)]
pub struct PairStats {
    /// The partition (0 for the whole join of a fallback).
    pub partition: usize,
    /// Where it ran.
    pub worker: Worker,
    /// Whether the device gave it up (its output over the budget's room, or the device out
    /// of memory): the CPU joined it after.
    pub refused: bool,
    /// Left rows.
    pub left_rows: u64,
    /// Right rows.
    pub right_rows: u64,
    /// Output rows (0 when refused).
    pub output_rows: u64,
    /// Bytes of its input columns (what went over the link for a device pair).
    pub input_bytes: u64,
    /// Bytes of its output columns (what came back for a device pair).
    pub output_bytes: u64,
    /// The device bytes the hybrid join counted for it before it ran (its output rows
    /// reserved or bounded): it fits the device when this is within the budget.
    pub need_bytes: u64,
    /// The device bytes the hybrid join counts for it with its output rows once known (a
    /// device pair's measured peak stays within this).
    pub estimate_bytes: u64,
    /// Most device bytes it held at once, where the backend counts them (device pairs).
    pub peak_bytes: Option<u64>,
    /// Start and end, in ms from the start of the hybrid join (a timeline).
    pub start_ms: f64,
    /// See `start_ms`.
    pub end_ms: f64,
}

/// What one worker did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerStats {
    /// Pairs joined (refused attempts not counted).
    pub pairs: usize,
    /// Left rows of those pairs.
    pub left_rows: u64,
    /// Right rows of those pairs.
    pub right_rows: u64,
    /// Output rows.
    pub output_rows: u64,
    /// Bytes of their input columns.
    pub input_bytes: u64,
    /// Bytes of their output columns.
    pub output_bytes: u64,
    /// Time spent on pairs, refused ones included (ms, wall clock).
    pub busy_ms: f64,
}

impl WorkerStats {
    fn add(&mut self, p: &PairStats) {
        self.busy_ms += p.end_ms - p.start_ms;
        if p.refused {
            return;
        }
        self.pairs += 1;
        self.left_rows += p.left_rows;
        self.right_rows += p.right_rows;
        self.output_rows += p.output_rows;
        self.input_bytes += p.input_bytes;
        self.output_bytes += p.output_bytes;
    }
}

/// What a hybrid join reports about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct HybridStats {
    /// The join kind.
    pub kind: JoinKind,
    /// Left rows.
    pub left_rows: usize,
    /// Right rows.
    pub right_rows: usize,
    /// Output rows.
    pub output_rows: u64,
    /// Partitions each side was cut into (0 when it fell back to the plain CPU join).
    pub partitions: usize,
    /// Why the whole join ran on the CPU without partitioning, if it did.
    pub fallback: Option<Fallback>,
    /// The device's pairs.
    pub device: WorkerStats,
    /// The CPU's pairs (or the whole join, on a fallback).
    pub cpu: WorkerStats,
    /// Pairs the device gave up to the CPU after trying them.
    pub refused: usize,
    /// Time partitioning both sides (ms).
    pub partition_ms: f64,
    /// Time concatenating the pairs' outputs (ms).
    pub assemble_ms: f64,
    /// The whole join, wall clock (ms).
    pub wall_ms: f64,
    /// Bytes copied to and from the device backend (over the host link for a GPU).
    pub link_bytes: u64,
    /// Most device bytes one pair held at once, where the backend counts them.
    pub peak_device_bytes: Option<u64>,
    /// Every pair's run in the order they started.
    pub pairs: Vec<PairStats>,
}

impl HybridStats {
    /// Takes the pairs' records (in the order they started) and sums them per worker.
    fn tally(&mut self, mut pairs: Vec<PairStats>) {
        pairs.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
        for p in &pairs {
            match p.worker {
                Worker::Device => {
                    self.device.add(p);
                    self.refused += usize::from(p.refused);
                    self.link_bytes = self
                        .link_bytes
                        .saturating_add(p.input_bytes)
                        .saturating_add(p.output_bytes);
                    if let Some(peak) = p.peak_bytes {
                        self.peak_device_bytes =
                            Some(self.peak_device_bytes.unwrap_or(0).max(peak));
                    }
                }
                Worker::Cpu => self.cpu.add(p),
            }
        }
        self.pairs = pairs;
    }

    /// The fraction of the input bytes joined on the device.
    pub fn device_share(&self) -> f64 {
        let all = self.device.input_bytes + self.cpu.input_bytes;
        if all == 0 {
            0.0
        } else {
            self.device.input_bytes as f64 / all as f64
        }
    }

    /// The papers' throughput over the wall time: (|R| + |S|) / time, in million tuples a
    /// second.
    pub fn mtuples_per_s(&self) -> f64 {
        (self.left_rows + self.right_rows) as f64 / (self.wall_ms * 1e-3) / 1e6
    }
}

/// The device bytes of a pair, from its rows (see the module's docs). Saturating: a size that
/// overflows counts as more than any budget.
#[derive(Debug, Clone, Copy)]
struct Footprint {
    kind: JoinKind,
    right_unique: bool,
    key: u64,
    left_payload: u64,
    right_payload: u64,
    output_row: u64,
}

impl Footprint {
    fn new<K: Key>(
        opts: &JoinOptions,
        left: &Table<CpuBackend, K>,
        right: &Table<CpuBackend, K>,
    ) -> Self {
        Self {
            kind: opts.kind,
            right_unique: opts.right_unique,
            key: (K::BITS / 8) as u64,
            left_payload: row_bytes(&left.payloads) as u64,
            right_payload: row_bytes(&right.payloads) as u64,
            output_row: output_row_bytes(opts.kind, &left.payloads, &right.payloads),
        }
    }

    /// Bytes of the input columns.
    fn input(&self, l: u64, r: u64) -> u64 {
        l.saturating_mul(self.key + self.left_payload)
            .saturating_add(r.saturating_mul(self.key + self.right_payload))
    }

    /// Inputs, their scratch and the fixed part: everything but the output.
    fn base(&self, l: u64, r: u64) -> u64 {
        let rows = l.saturating_add(r);
        let payloads = l
            .saturating_mul(self.left_payload)
            .saturating_add(r.saturating_mul(self.right_payload));
        self.input(l, r)
            .saturating_add(rows.saturating_mul(SCRATCH_ROW_IDS * (self.key + 4)))
            .saturating_add(payloads.saturating_mul(2))
            .saturating_add(PAIR_FIXED_BYTES)
    }

    /// Device bytes per output row.
    fn per_output_row(&self) -> u64 {
        2 * self.output_row + OUTPUT_ID_BYTES
    }

    /// Most output rows, where the rows bound them: one per left row at most for semi, anti
    /// and unique right keys; an inner join with no payload column has no output bytes for
    /// the join's budget to check, so all pairs count.
    fn output_bound(&self, l: u64, r: u64) -> Option<u64> {
        if !self.kind.has_right_rows() || self.right_unique {
            Some(l)
        } else if self.output_row == 0 {
            Some(l.saturating_mul(r))
        } else {
            None
        }
    }

    /// Output rows counted before the join: the bound, or as many as the larger side.
    fn reserved_rows(&self, l: u64, r: u64) -> u64 {
        self.output_bound(l, r).unwrap_or(l.max(r))
    }

    /// Device bytes of a pair with `output` rows out (at least the reserved rows).
    fn estimate(&self, l: u64, r: u64, output: u64) -> u64 {
        let rows = self.reserved_rows(l, r).max(output);
        self.base(l, r)
            .saturating_add(rows.saturating_mul(self.per_output_row()))
    }

    /// Device bytes a pair needs before its output is known.
    fn need(&self, l: u64, r: u64) -> u64 {
        self.estimate(l, r, 0)
    }

    /// The pair's join options on the device: where the output is not bounded by the rows,
    /// an output budget of what the device budget leaves after the base, in whole rows
    /// (smaller than the caller's own, if any). Also whether that budget is the device's.
    fn device_options(
        &self,
        opts: &JoinOptions,
        l: u64,
        r: u64,
        budget: u64,
    ) -> (JoinOptions, bool) {
        if self.output_bound(l, r).is_some() {
            return (*opts, false);
        }
        let rows = budget.saturating_sub(self.base(l, r)) / self.per_output_row();
        let bytes = rows.saturating_mul(self.output_row);
        match opts.memory_budget {
            Some(user) if user <= bytes => (*opts, false),
            _ => (opts.memory_budget(bytes), true),
        }
    }
}

/// Partitions a side is cut into: as asked, or enough that an average pair needs half the
/// budget, within [`MIN_PARTITIONS`] ..= [`MAX_FANOUT`].
fn fanout(fp: &Footprint, l: u64, r: u64, opts: &HybridOptions) -> Result<usize> {
    if let Some(p) = opts.partitions {
        if p == 0 || p > MAX_FANOUT {
            return Err(Error::InvalidArgument(format!(
                "a hybrid join takes 1 to {MAX_FANOUT} partitions, not {p}"
            )));
        }
        return Ok(p);
    }
    let variable = fp.need(l, r).saturating_sub(PAIR_FIXED_BYTES);
    let room = (opts.gpu_memory / 2)
        .saturating_sub(PAIR_FIXED_BYTES)
        .max(1);
    let wanted = usize::try_from(variable.div_ceil(room)).unwrap_or(MAX_FANOUT);
    Ok(wanted.clamp(MIN_PARTITIONS, MAX_FANOUT))
}

/// One pair to join: its partition, rows, and whether it fits the device.
#[derive(Debug, Clone)]
struct Pair {
    partition: usize,
    left: Range<usize>,
    right: Range<usize>,
    need: u64,
    input: u64,
    fits: bool,
}

impl Pair {
    fn rows(&self) -> (u64, u64) {
        (self.left.len() as u64, self.right.len() as u64)
    }
}

/// Joins two tables in host memory on `device` and the CPU at once, the device holding at
/// most `opts.gpu_memory` bytes for each partition pair (see the module's docs for how).
///
/// Output: host columns, the outputs of the partition pairs concatenated in partition
/// order, each in its own join's order: compare outputs as multisets. Left outer joins
/// carry `right_valid`.
///
/// ```
/// use joinkit::{Column, CpuBackend, HybridOptions, JoinKind, JoinOptions, Table, hybrid_join};
/// use joinkit_cuda::Backend;
/// let cpu = CpuBackend::new();
/// let table = |keys: Vec<u32>| {
///     let payload = Column::U32(keys.iter().map(|k| k * 10).collect());
///     Table::new(keys, vec![payload]).unwrap()
/// };
/// let (left, right) = (table((0..1000).collect()), table((500..600).collect()));
/// // The CPU backend stands in for the device here; 8 MiB for a pair.
/// let opts = HybridOptions::new(JoinOptions::new(JoinKind::Inner), 8 << 20);
/// let (out, stats) = hybrid_join(&cpu, &left, &right, &opts).unwrap();
/// assert_eq!(out.rows, 100);
/// assert_eq!(stats.device.output_rows + stats.cpu.output_rows, 100);
/// ```
///
/// # Errors
/// As [`join_columns`] (a broken `right_unique` promise is [`Error::DuplicateKey`] wherever
/// its pair runs); [`Error::InvalidArgument`] for a partition count outside 1 ..=
/// [`MAX_FANOUT`] or with [`JoinOptions::unpack_ids`]; [`Error::DeviceBudget`] under
/// [`HybridSplit::DeviceOnly`] when a pair does not fit the budget; host allocation errors
/// ([`Error::SizeOverflow`]).
pub fn hybrid_join<D: JoinBackend, K: Key>(
    device: &D,
    left: &Table<CpuBackend, K>,
    right: &Table<CpuBackend, K>,
    opts: &HybridOptions,
) -> Result<(Materialized<CpuBackend>, HybridStats)> {
    let started = Instant::now();
    opts.join.refuse_unpack_ids("the hybrid join")?;
    left.check()?;
    right.check()?;
    check_rows(left.len())?;
    check_rows(right.len())?;
    let cpu = CpuBackend::new();
    let fp = Footprint::new(&opts.join, left, right);
    let (l, r) = (left.len() as u64, right.len() as u64);
    let parts = fanout(&fp, l, r, opts)?;
    // Hopeless without partitioning: an average pair at the largest fan-out does not fit.
    let fanout_max = MAX_FANOUT as u64;
    let average = fp.need(l / fanout_max, r / fanout_max);
    let fallback = if opts.gpu_memory == 0 {
        Some(Fallback::NoDeviceMemory)
    } else if average > opts.gpu_memory {
        Some(Fallback::PairOverBudget { needed: average })
    } else {
        None
    };
    let mut stats = HybridStats {
        kind: opts.join.kind,
        left_rows: left.len(),
        right_rows: right.len(),
        output_rows: 0,
        partitions: 0,
        fallback,
        device: WorkerStats::default(),
        cpu: WorkerStats::default(),
        refused: 0,
        partition_ms: 0.0,
        assemble_ms: 0.0,
        wall_ms: 0.0,
        link_bytes: 0,
        peak_device_bytes: None,
        pairs: Vec::new(),
    };
    if fallback.is_some() {
        if opts.split == HybridSplit::DeviceOnly {
            return Err(Error::DeviceBudget {
                needed: average,
                budget: opts.gpu_memory,
            });
        }
        let (out, _) = join_columns(&cpu, left, right, &opts.join)?;
        let whole = PairStats {
            partition: 0,
            worker: Worker::Cpu,
            refused: false,
            left_rows: l,
            right_rows: r,
            output_rows: out.rows,
            input_bytes: fp.input(l, r),
            output_bytes: out.rows.saturating_mul(fp.output_row),
            need_bytes: fp.need(l, r),
            estimate_bytes: fp.estimate(l, r, out.rows),
            peak_bytes: None,
            start_ms: 0.0,
            end_ms: ms_since(started),
        };
        stats.tally(vec![whole]);
        stats.output_rows = out.rows;
        stats.wall_ms = ms_since(started);
        return Ok((out, stats));
    }

    let partitioned = Instant::now();
    let split = |t: &Table<CpuBackend, K>| {
        cpu.hash_partition(&t.keys, &t.payloads, parts, HYBRID_SEED, RowIds::None)
    };
    let (lp, rp) = (split(left)?, split(right)?);
    stats.partition_ms = ms_since(partitioned);
    stats.partitions = parts;
    let pairs = plan(&fp, &lp, &rp, opts)?;
    if opts.split == HybridSplit::DeviceOnly
        && let Some(p) = pairs.iter().find(|p| !p.fits)
    {
        return Err(Error::DeviceBudget {
            needed: p.need,
            budget: opts.gpu_memory,
        });
    }

    let queue = Queue::new(&pairs, opts.split);
    let run = Run {
        pairs: &pairs,
        left: &lp,
        right: &rp,
        fp: &fp,
        opts,
        queue: &queue,
        started,
    };
    let (device_done, cpu_done) = std::thread::scope(|s| {
        let cpu_worker = s.spawn(|| run.cpu_worker(&cpu));
        let device_done = run.device_worker(device);
        let cpu_done = cpu_worker.join().unwrap_or_else(|_| {
            Err(Error::Corrupt(
                "the hybrid join's CPU worker panicked".into(),
            ))
        });
        (device_done, cpu_done)
    });
    let mut done = device_done?;
    done.extend(cpu_done?);

    let assembled = Instant::now();
    let mut pieces: Vec<(usize, Materialized<CpuBackend>)> = Vec::with_capacity(done.len());
    let records = done
        .into_iter()
        .map(|(out, p)| {
            if let Some(m) = out {
                pieces.push((p.partition, m));
            }
            p
        })
        .collect();
    stats.tally(records);
    pieces.sort_by_key(|p| p.0);
    let out = assemble(
        opts.join.kind,
        left,
        right,
        pieces.into_iter().map(|p| p.1).collect(),
    )?;
    stats.assemble_ms = ms_since(assembled);
    stats.output_rows = out.rows;
    stats.wall_ms = ms_since(started);
    Ok((out, stats))
}

/// The pairs worth joining, sized: a pair without left rows has no output (kept only when
/// its right keys must be checked for duplicates).
fn plan<K: Key>(
    fp: &Footprint,
    lp: &Partitioned<CpuBackend, K>,
    rp: &Partitioned<CpuBackend, K>,
    opts: &HybridOptions,
) -> Result<Vec<Pair>> {
    let range = |offsets: &[u64], p: usize| -> Result<Range<usize>> {
        let at = |i: usize| -> Result<usize> {
            let o = offsets
                .get(i)
                .ok_or_else(|| Error::Corrupt("partition offsets too short".into()))?;
            usize::try_from(*o).map_err(|_| Error::SizeOverflow("partition offset"))
        };
        Ok(at(p)?..at(p + 1)?)
    };
    let parts = lp.offsets.len().saturating_sub(1);
    let mut pairs = Vec::with_capacity(parts);
    for partition in 0..parts {
        let (left, right) = (
            range(&lp.offsets, partition)?,
            range(&rp.offsets, partition)?,
        );
        if left.is_empty() && (right.is_empty() || !opts.join.right_unique) {
            continue;
        }
        let (l, r) = (left.len() as u64, right.len() as u64);
        let need = fp.need(l, r);
        pairs.push(Pair {
            partition,
            left,
            right,
            need,
            input: fp.input(l, r),
            fits: need <= opts.gpu_memory,
        });
    }
    Ok(pairs)
}

/// The shared queue of pairs (indices into the plan) and what the workers know of their
/// rates.
struct Queue {
    state: Mutex<QueueState>,
    changed: Condvar,
    split: HybridSplit,
}

struct QueueState {
    /// Pairs that fit, largest first, then those that do not.
    order: Vec<usize>,
    /// The device takes `order[front]`, the CPU `order[back - 1]`.
    front: usize,
    back: usize,
    /// Input bytes of the pairs that fit still in `order[front..back]`.
    queued_fit_bytes: u64,
    /// Pairs the device gave up, for the CPU.
    refused: Vec<usize>,
    /// The device takes no more pairs.
    device_done: bool,
    /// A worker failed: the other stops.
    failed: bool,
    /// Input bytes and ms of each worker's finished pairs: (device, CPU).
    rates: [(u64, f64); 2],
}

impl QueueState {
    fn rate(&self, w: Worker) -> Option<f64> {
        let (bytes, ms) = self.rates[w as usize];
        (bytes > 0 && ms > 0.0).then(|| bytes as f64 / ms)
    }
}

impl Queue {
    fn new(pairs: &[Pair], split: HybridSplit) -> Self {
        let mut order: Vec<usize> = (0..pairs.len()).collect();
        order.sort_by_key(|&i| (!pairs[i].fits, std::cmp::Reverse(pairs[i].need)));
        let queued_fit_bytes = pairs.iter().filter(|p| p.fits).map(|p| p.input).sum();
        Self {
            state: Mutex::new(QueueState {
                back: order.len(),
                order,
                front: 0,
                queued_fit_bytes,
                refused: Vec::new(),
                device_done: false,
                failed: false,
                rates: [(0, 0.0); 2],
            }),
            changed: Condvar::new(),
            split,
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The device's next pair: the front one, while it fits.
    fn next_for_device(&self, pairs: &[Pair]) -> Option<usize> {
        let mut s = self.lock();
        if s.failed || s.front >= s.back || !pairs[s.order[s.front]].fits {
            return None;
        }
        let i = s.order[s.front];
        s.front += 1;
        s.queued_fit_bytes = s.queued_fit_bytes.saturating_sub(pairs[i].input);
        Some(i)
    }

    /// The CPU's next pair: a refused one, the back one if it does not fit the device, or
    /// (shared split) once the device has a rate, if the CPU would finish it before the
    /// device finished all that is queued (its first such pair, the smallest, before it has
    /// a rate of its own); else it waits for the device to finish a pair, refuse one or end.
    fn next_for_cpu(&self, pairs: &[Pair]) -> Option<usize> {
        let mut s = self.lock();
        loop {
            if s.failed {
                return None;
            }
            if let Some(i) = s.refused.pop() {
                return Some(i);
            }
            if s.front < s.back {
                let i = s.order[s.back - 1];
                let p = &pairs[i];
                let take = !p.fits
                    || (self.split == HybridSplit::Shared && {
                        let rest = s.queued_fit_bytes.saturating_sub(p.input);
                        match (s.rate(Worker::Cpu), s.rate(Worker::Device)) {
                            (Some(cpu), Some(dev)) => p.input as f64 / cpu <= rest as f64 / dev,
                            (None, Some(_)) => true,
                            (_, None) => false,
                        }
                    });
                if take {
                    s.back -= 1;
                    if p.fits {
                        s.queued_fit_bytes = s.queued_fit_bytes.saturating_sub(p.input);
                    }
                    return Some(i);
                }
            }
            if s.device_done {
                return None;
            }
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Records a finished pair's input bytes and time (the CPU may be waiting for the
    /// device's rate).
    fn finished(&self, w: Worker, input: u64, ms: f64) {
        let mut s = self.lock();
        let r = &mut s.rates[w as usize];
        r.0 += input;
        r.1 += ms;
        drop(s);
        self.changed.notify_all();
    }

    /// Hands a pair the device gave up to the CPU.
    fn refuse(&self, i: usize) {
        self.lock().refused.push(i);
        self.changed.notify_all();
    }

    /// Tells the CPU that a worker failed.
    fn fail(&self) {
        self.lock().failed = true;
        self.changed.notify_all();
    }
}

/// Marks the device done when the device worker ends, however it ends (an error, a panic),
/// so the CPU never waits for it in vain.
struct DeviceDone<'q>(&'q Queue);

impl Drop for DeviceDone<'_> {
    fn drop(&mut self) {
        self.0.lock().device_done = true;
        self.0.changed.notify_all();
    }
}

/// A pair's output (none when refused) and its record.
type Done = (Option<Materialized<CpuBackend>>, PairStats);

/// What both workers share.
struct Run<'a, K: Key> {
    pairs: &'a [Pair],
    left: &'a Partitioned<CpuBackend, K>,
    right: &'a Partitioned<CpuBackend, K>,
    fp: &'a Footprint,
    opts: &'a HybridOptions,
    queue: &'a Queue,
    started: Instant,
}

impl<K: Key> Run<'_, K> {
    fn ms(&self) -> f64 {
        ms_since(self.started)
    }

    /// A pair's record before it runs.
    fn record(&self, pair: &Pair, worker: Worker) -> PairStats {
        let (l, r) = pair.rows();
        PairStats {
            partition: pair.partition,
            worker,
            refused: false,
            left_rows: l,
            right_rows: r,
            output_rows: 0,
            input_bytes: pair.input,
            output_bytes: 0,
            need_bytes: pair.need,
            estimate_bytes: pair.need,
            peak_bytes: None,
            start_ms: self.ms(),
            end_ms: 0.0,
        }
    }

    /// Completes a record with the pair's output.
    fn finish(&self, mut rec: PairStats, rows: u64) -> PairStats {
        rec.output_rows = rows;
        rec.output_bytes = rows.saturating_mul(self.fp.output_row);
        rec.estimate_bytes = self.fp.estimate(rec.left_rows, rec.right_rows, rows);
        rec.end_ms = self.ms();
        let w = rec.worker;
        self.queue
            .finished(w, rec.input_bytes, rec.end_ms - rec.start_ms);
        rec
    }

    /// A worker's loop: `next` pairs joined by `join` until none is left or one fails.
    fn work(
        &self,
        next: impl Fn() -> Option<usize>,
        mut join: impl FnMut(usize) -> Result<Done>,
    ) -> Result<Vec<Done>> {
        let mut done = Vec::new();
        while let Some(i) = next() {
            match join(i) {
                Ok(d) => done.push(d),
                Err(e) => {
                    self.queue.fail();
                    return Err(e);
                }
            }
        }
        Ok(done)
    }

    fn cpu_worker(&self, cpu: &CpuBackend) -> Result<Vec<Done>> {
        self.work(
            || self.queue.next_for_cpu(self.pairs),
            |i| {
                let pair = &self.pairs[i];
                let rec = self.record(pair, Worker::Cpu);
                let (l, r) = self.tables(cpu, pair)?;
                let (out, _) = join_columns(cpu, &l, &r, &self.opts.join)?;
                let rows = out.rows;
                Ok((Some(out), self.finish(rec, rows)))
            },
        )
    }

    fn device_worker<D: JoinBackend>(&self, device: &D) -> Result<Vec<Done>> {
        let _done = DeviceDone(self.queue);
        self.work(
            || self.queue.next_for_device(self.pairs),
            |i| self.device_pair(device, i),
        )
    }

    /// The pair's two tables on `b`, copied from the partitioned host columns.
    fn tables<B: Backend>(&self, b: &B, pair: &Pair) -> Result<(Table<B, K>, Table<B, K>)> {
        Ok((
            rows_of(b, self.left, &pair.left)?,
            rows_of(b, self.right, &pair.right)?,
        ))
    }

    /// Uploads, joins and downloads one pair on the device; refused (for the CPU) when its
    /// output needs more than the budget leaves or the device runs out of memory.
    fn device_pair<D: JoinBackend>(&self, device: &D, i: usize) -> Result<Done> {
        let pair = &self.pairs[i];
        let mut rec = self.record(pair, Worker::Device);
        let (l, r) = pair.rows();
        let budget = self.opts.gpu_memory;
        let (jopts, limited) = self.fp.device_options(&self.opts.join, l, r, budget);
        let held = device.memory().map(|m| m.current_bytes);
        device.reset_peak_memory();
        let joined = self
            .tables(device, pair)
            .and_then(|(lt, rt)| join_columns(device, &lt, &rt, &jopts));
        let refused_rows = match joined {
            Ok((out, _)) => {
                let peak = device.memory().map(|m| m.peak_bytes);
                rec.peak_bytes = peak.zip(held).map(|(p, h)| p.saturating_sub(h) as u64);
                let out = download(device, out)?;
                let rows = out.rows;
                return Ok((Some(out), self.finish(rec, rows)));
            }
            Err(Error::OutputOverBudget { rows, .. }) if limited => rows,
            Err(Error::OutOfDeviceMemory { .. }) if self.opts.split != HybridSplit::DeviceOnly => 0,
            Err(e) => return Err(e),
        };
        let needed = self.fp.estimate(l, r, refused_rows);
        if self.opts.split == HybridSplit::DeviceOnly {
            return Err(Error::DeviceBudget { needed, budget });
        }
        rec.refused = true;
        rec.estimate_bytes = needed;
        rec.end_ms = self.ms();
        self.queue.refuse(i);
        Ok((None, rec))
    }
}

/// Milliseconds since `t`.
fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Rows `rows` of a partitioned side as a table on `b`.
fn rows_of<B: Backend, K: Key>(
    b: &B,
    side: &Partitioned<CpuBackend, K>,
    rows: &Range<usize>,
) -> Result<Table<B, K>> {
    let bad = || Error::Corrupt("a partition's rows past its side".into());
    let keys = b.upload(side.keys.get(rows.clone()).ok_or_else(bad)?)?;
    let payloads = side
        .payloads
        .iter()
        .map(|c| Ok(map_column!(c, v, T => b.upload::<T>(v.get(rows.clone()).ok_or_else(bad)?)?)))
        .collect::<Result<Vec<_>>>()?;
    Table::new(keys, payloads)
}

/// A device output's columns on the host.
fn download<D: Backend>(device: &D, out: Materialized<D>) -> Result<Materialized<CpuBackend>> {
    let down = |cols: Vec<Column<D>>| -> Result<Vec<Column<CpuBackend>>> {
        cols.into_iter()
            .map(|c| Ok(map_column!(c, v, T => device.download_owned::<T>(v)?)))
            .collect()
    };
    Ok(Materialized {
        left: down(out.left)?,
        right: down(out.right)?,
        right_valid: out
            .right_valid
            .map(|v| device.download_owned(v))
            .transpose()?,
        rows: out.rows,
    })
}

/// The pairs' outputs, in the given order, as one output with the tables' column types.
fn assemble<K: Key>(
    kind: JoinKind,
    left: &Table<CpuBackend, K>,
    right: &Table<CpuBackend, K>,
    pieces: Vec<Materialized<CpuBackend>>,
) -> Result<Materialized<CpuBackend>> {
    let rows: u64 = pieces.iter().map(|m| m.rows).sum();
    let total = usize::try_from(rows).map_err(|_| Error::SizeOverflow("hybrid join output"))?;
    let right_cols: &[Column<CpuBackend>] = if kind.has_right_rows() {
        &right.payloads
    } else {
        &[]
    };
    // Every output column (left ones, then right ones) gathered from its pieces, in parallel.
    let jobs: Vec<(&Column<CpuBackend>, Vec<&Column<CpuBackend>>)> = left
        .payloads
        .iter()
        .enumerate()
        .map(|(c, t)| (t, pieces.iter().filter_map(|m| m.left.get(c)).collect()))
        .chain(
            right_cols
                .iter()
                .enumerate()
                .map(|(c, t)| (t, pieces.iter().filter_map(|m| m.right.get(c)).collect())),
        )
        .collect();
    let mut columns = jobs
        .into_par_iter()
        .map(|(template, parts)| concat(template, &parts, total))
        .collect::<Result<Vec<_>>>()?;
    let right_out = columns.split_off(left.payloads.len());
    let right_valid = if kind == JoinKind::LeftOuter {
        let parts = pieces
            .iter()
            .filter(|m| m.rows > 0)
            .map(|m| m.right_valid.as_deref())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::Corrupt("a left outer pair without validity".into()))?;
        Some(concat_parts(&parts, total)?)
    } else {
        None
    };
    Ok(Materialized {
        left: columns,
        right: right_out,
        right_valid,
        rows,
    })
}

/// `parts` (columns of `template`'s type) one after the other, `total` rows in all.
fn concat(
    template: &Column<CpuBackend>,
    parts: &[&Column<CpuBackend>],
    total: usize,
) -> Result<Column<CpuBackend>> {
    macro_rules! typed {
        ($variant:ident) => {{
            let slices = parts
                .iter()
                .map(|part| match part {
                    Column::$variant(v) => Ok(v.as_slice()),
                    _ => Err(Error::Corrupt(format!(
                        "a pair's output column {part:?} is not of its table's type {template:?}"
                    ))),
                })
                .collect::<Result<Vec<_>>>()?;
            Column::$variant(concat_parts(&slices, total)?)
        }};
    }
    Ok(match template {
        Column::U32(_) => typed!(U32),
        Column::I32(_) => typed!(I32),
        Column::U64(_) => typed!(U64),
        Column::I64(_) => typed!(I64),
    })
}

/// `parts` one after the other in one vector, copied in parallel, each part by one task
/// (`total`: their lengths' sum, checked).
fn concat_parts<T: Element>(parts: &[&[T]], total: usize) -> Result<Vec<T>> {
    if parts.iter().map(|p| p.len()).sum::<usize>() != total {
        return Err(Error::Corrupt(
            "a pair's output column of another length than its rows".into(),
        ));
    }
    let mut out = try_reserved::<T>(total)?;
    out.par_extend(rayon::iter::repeat_n(T::default(), total));
    let mut rest = out.as_mut_slice();
    let mut slots = Vec::with_capacity(parts.len());
    for part in parts {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(part.len());
        slots.push(head);
        rest = tail;
    }
    slots
        .into_par_iter()
        .zip(parts)
        .for_each(|(slot, part)| slot.copy_from_slice(part));
    Ok(out)
}
