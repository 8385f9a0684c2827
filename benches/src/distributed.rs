//! `joinkit-bench distributed`: joins spread over ranks (joinkit-distributed), with the raw
//! all-to-all bandwidth measured in the same run.
//!
//! Ranks: threads of this process over the in-process communicator (`--comm local`, on the
//! CPU or on one GPU that every rank shares with a stream of its own), or NCCL ranks
//! (`--comm nccl`): one per GPU of `--gpus` in this process, or, when a launcher started this
//! process (torchrun-style `RANK`/`WORLD_SIZE`, or SLURM), this process's one rank, or
//! copy-engine ranks (`--comm peer`): one per GPU of `--gpus` in this process, buffers pushed
//! into the peers' memory by the GPUs' copy engines (`joinkit_comm::peer::PeerComm`).
//!
//! The workload is generated whole (seeded, so every process of a launch generates the same)
//! and each rank takes its contiguous share of both sides: |R| unique keys (shuffled `0..|R|`)
//! and |S| foreign keys (match ratio, Zipf, or one heavy key), or TPC-H orders ⋈ lineitem.
//! `--per-rank` makes the sizes per rank (weak scaling). Gao et al.'s shape is the default:
//! 8-byte keys, and the output as 8-byte global row ids; `--payloads N` carries N payload
//! columns of the key's width a side instead (Wu's shapes).
//!
//! Reported per run, as the slowest rank saw it: total time, phases (plan, partition,
//! shuffle, local join, gather), (|R| + |S|) / time over all ranks, bytes each rank sent, the
//! shuffle's GB/s against the raw all-to-all's, the local join inputs' imbalance, peak device
//! memory.

use clap::Args;
use joinkit::{Algorithm, JoinKind, JoinOptions, Table};
use joinkit_comm::{CommConfig, Communicator, LocalWorld, ReduceOp};
use joinkit_cuda::{Backend, Buffer, Column, Device, Error, Key};
use joinkit_datagen as datagen;
use joinkit_distributed::{
    Compression, DEFAULT_BREAK_EVEN_GBPS, DistributedBackend, DistributedOptions, DistributedStats,
    Placement, Shuffle, Skew, Span, distributed_join_columns, distributed_join_rows,
};

use crate::error::{BenchError, Result};
use crate::join::{parse_algorithm, parse_kind};
use crate::measure::{Ctx, KeyBits, Runs, parse_columns, parse_scale_factor, parse_size};
use crate::plot::{Bar, PlotSpec};
use crate::report::Row;

/// Options of `distributed`.
#[derive(Args, Debug)]
pub(crate) struct DistributedArgs {
    /// Communicator: `local` (ranks as threads of this process on --device: the CPU, or one GPU
    /// that every rank shares), `nccl` (one GPU per rank: --gpus in this process, or this
    /// process's rank when a launcher set RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS) or
    /// `peer` (one GPU per rank of --gpus in this process, buffers pushed by the copy engines).
    /// Default: `peer` when --gpus names GPUs (`nccl` where they lack peer access), else
    /// `local`.
    #[arg(long, value_enum)]
    comm: Option<CommKind>,
    /// In-process ranks (--comm local), 1 to 1024.
    #[arg(long, default_value_t = 4, value_parser = parse_ranks)]
    ranks: usize,
    /// GPUs this process drives, one NCCL rank each (--comm nccl without a launcher):
    /// ordinals, comma separated (0,1,2,3).
    #[arg(long, value_delimiter = ',')]
    gpus: Vec<usize>,
    /// Rows of R, the unique-key (build) side, over all ranks (per rank with --per-rank);
    /// default 2^27 on a GPU, 2^20 on a CPU.
    #[arg(long, value_parser = parse_size)]
    r: Option<usize>,
    /// Rows of S, the probe side; default 2 × |R|.
    #[arg(long, value_parser = parse_size)]
    s: Option<usize>,
    /// --r and --s count rows per rank (weak scaling) instead of over all ranks.
    #[arg(long)]
    per_rank: bool,
    /// Promise the joins that R's keys are unique, as every workload here makes them
    /// (JoinOptions::right_unique: each rank's local join checks its keys; PHJ-OM on a GPU then
    /// matches in one pass). Off by default: the series before it ran without the promise.
    #[arg(long)]
    right_unique: bool,
    /// Key width in bits: 32 or 64 (Gao's: 64).
    #[arg(long, value_enum, default_value = "64")]
    key_bits: KeyBits,
    /// Payload columns of the key's width per side, materialized (0: the output is global row
    /// ids, 8 bytes a side: Gao's row-id payloads), at most 1024.
    #[arg(long, default_value_t = 0, value_parser = parse_columns)]
    payloads: usize,
    /// Join kind: inner, left-semi, left-anti or left-outer.
    #[arg(long, default_value = "inner", value_parser = parse_kind)]
    kind: JoinKind,
    /// The local joins' algorithm (SMJ-UM, SMJ-OM, NPHJ-open, NPHJ-chained, PHJ-UM, PHJ-OM,
    /// auto).
    #[arg(long, default_value = "auto", value_parser = parse_algorithm)]
    algorithm: Algorithm,
    /// Fraction of S rows whose key is in R.
    #[arg(long, default_value_t = 1.0)]
    match_ratio: f64,
    /// Zipf exponent of S's keys over R (overrides --match-ratio).
    #[arg(long)]
    zipf: Option<f64>,
    /// Share of S's rows (0 to 1) given one key of R: one heavy key.
    #[arg(long)]
    heavy: Option<f64>,
    /// R's keys spread over the 32-bit range by a pseudo-random bijection, S's following them,
    /// instead of R being `0..|R|`: each rank's keys then look alike at any rank count. Dense
    /// keys are a kind case on one rank (a radix partition of `0..|R|` holds an arithmetic
    /// progression, which the match's multiply-shift table spreads without a collision) that
    /// the hashed share each of several ranks holds is not.
    #[arg(long, conflicts_with = "tpch")]
    spread_keys: bool,
    /// Join TPC-H orders ⋈ lineitem on the order key at this scale factor instead.
    #[arg(long, value_parser = parse_scale_factor)]
    tpch: Option<f64>,
    /// Build side placement: partitioned, replicated or auto.
    #[arg(long, default_value = "auto", value_parser = parse_placement)]
    placement: Placement,
    /// Shuffle: one-level, two-level (nodes of --ranks-per-node) or auto.
    #[arg(long, value_enum, default_value = "auto")]
    shuffle: ShuffleKind,
    /// Ranks per node for the two-level shuffle (default: LOCAL_WORLD_SIZE or
    /// SLURM_NTASKS_PER_NODE under a launcher, else all ranks on one node).
    #[arg(long)]
    ranks_per_node: Option<usize>,
    /// Heavy-key handling: keys with this share of one rank's fair load of S keep their S
    /// rows in place and have their R rows replicated (0: off).
    #[arg(long, default_value_t = 0.25)]
    skew_load: f64,
    /// Bytes each rank holds for the raw all-to-all measured after the join (spread evenly
    /// over the ranks), as 2^30 or 1073741824; default: as many as the join's shuffle sent (the
    /// most one rank sent to the others). Swept with a small join, it gives the all-to-all's
    /// bandwidth by message size.
    #[arg(long, value_parser = parse_size)]
    a2a_bytes: Option<usize>,
    /// Chunks the probe side (S) is shuffled in with the partitioned placement, each probed
    /// while the next moves (the pipelined shuffle); 1 shuffles it whole, then joins.
    #[arg(long, default_value_t = 1, value_parser = parse_chunks)]
    pipeline_chunks: usize,
    /// Send the row ids as membership bitmaps, a bit a row for each rank, where the partition
    /// by rank narrows the keys (DistributedOptions::id_bitmaps).
    #[arg(long)]
    id_bitmaps: bool,
    /// Compression of the shuffled columns (the cascaded codec): off, on (every column that
    /// compresses), or auto (where the link is slower than the column's break-even).
    #[arg(long, value_enum, default_value = "off")]
    compress: CompressKind,
    /// For --compress auto: the link's rate in GB/s a rank sends (default: measured once per
    /// communicator, by the first join: its warm-up run).
    #[arg(long)]
    link_gbps: Option<f64>,
    /// Draw the median run's timeline (each rank's communication and compute lanes: phases,
    /// and each chunk's shuffle and probe) into this SVG file.
    #[arg(long)]
    timeline: Option<std::path::PathBuf>,
    /// The longest a collective waits for a peer, in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
    /// Seed of the generated keys.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// The plot of a distributed sweep: throughput against the rank count.
pub(crate) const PLOT: PlotSpec = PlotSpec {
    table: "distributed",
    x: "ranks",
    x_label: "ranks",
    y: &["M tuples/s"],
    y_label: "(|R| + |S|) / time over all ranks (M tuples/s)",
    series: &["placement", "shuffle"],
};

/// Which communicator the ranks use.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommKind {
    Local,
    Nccl,
    Peer,
}

/// `--compress`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompressKind {
    Off,
    On,
    Auto,
}

fn parse_chunks(s: &str) -> std::result::Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("pipeline chunks are 1 or more".into()),
    }
}

fn parse_ranks(s: &str) -> std::result::Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err("ranks are 1 to 1024".into()),
    }
}

/// Placements by their command-line names.
const PLACEMENTS: [(&str, Placement); 3] = [
    ("partitioned", Placement::Partitioned),
    ("replicated", Placement::Replicated),
    ("auto", Placement::Auto),
];

fn parse_placement(s: &str) -> std::result::Result<Placement, String> {
    PLACEMENTS
        .iter()
        .find(|p| p.0 == s.trim())
        .map(|p| p.1)
        .ok_or_else(|| format!("{s:?}: use partitioned, replicated or auto"))
}

fn placement_name(placement: Placement) -> &'static str {
    PLACEMENTS
        .iter()
        .find(|p| p.1 == placement)
        .map_or("?", |p| p.0)
}

/// `--shuffle` before the node size is known.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShuffleKind {
    OneLevel,
    TwoLevel,
    Auto,
}

fn shuffle_name(s: Shuffle) -> String {
    match s {
        Shuffle::OneLevel => "one-level".into(),
        Shuffle::TwoLevel { ranks_per_node } => format!("two-level ({ranks_per_node}/node)"),
        Shuffle::Auto => "auto".into(),
    }
}

/// The generated inputs of every rank: both sides whole, each rank taking its share.
struct Workload<K> {
    right: Vec<K>,
    left: Vec<K>,
    text: String,
}

impl<K: Key> Workload<K> {
    fn generate(args: &DistributedArgs, ranks: usize, gpu: bool) -> Result<Self> {
        let scale = if args.per_rank { ranks } else { 1 };
        if let Some(sf) = args.tpch {
            let o = datagen::tpch::column(datagen::tpch::Column::OOrderkey, sf)?;
            let l = datagen::tpch::column(datagen::tpch::Column::LOrderkey, sf)?;
            let keys = |c: Vec<u64>| -> Result<Vec<K>> {
                if K::BITS < 64 && c.iter().any(|&k| k > u64::from(u32::MAX)) {
                    return Err(BenchError::Usage(
                        "TPC-H order keys at this scale need --key-bits 64".into(),
                    ));
                }
                Ok(c.into_iter().map(K::from_u64).collect())
            };
            return Ok(Self {
                text: format!(
                    "TPC-H SF {sf}: orders ({}) ⋈ lineitem ({})",
                    o.len(),
                    l.len()
                ),
                right: keys(o)?,
                left: keys(l)?,
            });
        }
        let nr = args
            .r
            .unwrap_or(if gpu { 1 << 27 } else { 1 << 20 })
            .checked_mul(scale)
            .ok_or(Error::SizeOverflow("rows over all ranks"))?;
        let ns = match args.s {
            Some(s) => s.checked_mul(scale),
            None => nr.checked_mul(2),
        }
        .ok_or(Error::SizeOverflow("rows over all ranks"))?;
        let mut right = datagen::unique_keys::<K>(nr, args.seed)?;
        let (mut left, mut shape) = match args.zipf {
            Some(theta) => (
                datagen::zipf_foreign_keys::<K>(nr, ns, theta, args.seed + 1)?,
                format!("Zipf {theta}"),
            ),
            None => (
                datagen::foreign_keys::<K>(nr, ns, args.match_ratio, args.seed + 1)?,
                format!("match ratio {}", args.match_ratio),
            ),
        };
        if let Some(share) = args.heavy {
            if !(0.0..=1.0).contains(&share) || nr == 0 {
                return Err(BenchError::Usage(
                    "--heavy: a share in [0, 1] of S, with R not empty".into(),
                ));
            }
            // Every row whose hash falls under the share takes R's first key.
            let cut = (share * u64::MAX as f64) as u64;
            let heavy = right[0];
            for (i, k) in left.iter_mut().enumerate() {
                if joinkit_cuda::hash::hash64(i as u64, args.seed + 2) < cut {
                    *k = heavy;
                }
            }
            shape = format!("{shape}, one key on {:.0} % of S", share * 100.0);
        }
        if args.spread_keys {
            datagen::spread_keys(&mut right, args.seed.wrapping_add(3));
            datagen::spread_keys(&mut left, args.seed.wrapping_add(3));
            shape = format!("{shape}, keys spread over 32 bits");
        }
        Ok(Self {
            text: format!("|R| = {nr}, |S| = {ns}, {shape}"),
            right,
            left,
        })
    }

    /// Rank `rank`'s share of `keys`: a contiguous slice.
    fn share(keys: &[K], rank: usize, ranks: usize) -> &[K] {
        let n = keys.len();
        &keys[rank * n / ranks..(rank + 1) * n / ranks]
    }
}

/// What the slowest rank saw in one run, and rank 0's statistics.
struct RunResult {
    total_ms: f64,
    /// Each phase's largest time over the ranks.
    phases: Vec<(&'static str, f64)>,
    bytes_sent_max: u64,
    bytes_sent_sum: u64,
    /// Bytes of shuffled columns over the links, all ranks: raw, and as sent.
    wire_raw_sum: u64,
    wire_sent_sum: u64,
    peak_bytes: Option<u64>,
    stats: DistributedStats,
    /// Every rank's timeline, in rank order (on rank 0; empty on the others).
    timelines: Vec<Vec<Span>>,
}

/// What one rank measured (rank 0's is reported).
struct RankResult {
    runs: Vec<RunResult>,
    /// The raw all-to-all: milliseconds (slowest rank) and bytes each rank sent to others.
    all_to_all: Option<(f64, u64)>,
}

/// Largest `v` over the ranks (times and sizes are non-negative, so their bits order alike).
fn max_f64<C: Communicator>(comm: &C, v: &[f64]) -> joinkit_cuda::Result<Vec<f64>> {
    let bits: Vec<u64> = v.iter().map(|x| x.to_bits()).collect();
    Ok(comm
        .all_reduce(&bits, ReduceOp::Max)?
        .into_iter()
        .map(f64::from_bits)
        .collect())
}

const PHASES: [&str; 7] = [
    "narrow",
    "plan",
    "partition",
    "shuffle",
    "local join",
    "pipelined probe",
    "gather",
];

/// Names of the timeline's spans, for carrying them as numbers.
const SPAN_NAMES: [&str; 9] = [
    "plan",
    "partition",
    "shuffle",
    "local join",
    "gather",
    "build",
    "probe",
    "pipelined probe",
    "narrow",
];

/// Every rank's timeline on rank 0 (the others get none): each span as five words, padded to
/// the longest rank's.
fn gather_timelines<C: Communicator>(
    comm: &C,
    spans: &[Span],
) -> joinkit_cuda::Result<Vec<Vec<Span>>> {
    const WORDS: usize = 5;
    let longest = comm.all_reduce(&[spans.len() as u64], ReduceOp::Max)?[0] as usize;
    let mut words = vec![u64::MAX; longest * WORDS];
    for (w, s) in words.chunks_mut(WORDS).zip(spans) {
        w[0] = u64::from(s.lane == "compute");
        w[1] = SPAN_NAMES.iter().position(|&n| n == s.what).unwrap_or(0) as u64;
        w[2] = s.chunk.map_or(u64::MAX - 1, |c| c as u64);
        w[3] = s.start_ms.to_bits();
        w[4] = s.end_ms.to_bits();
    }
    let all = comm.all_gather(&words)?;
    if comm.rank() != 0 {
        return Ok(Vec::new());
    }
    Ok(all
        .chunks(words.len().max(1))
        .take(comm.size())
        .map(|rank| {
            rank.chunks(WORDS)
                .filter(|w| w.len() == WORDS && w[0] != u64::MAX)
                .map(|w| Span {
                    lane: if w[0] == 1 {
                        "compute"
                    } else {
                        "communication"
                    },
                    what: SPAN_NAMES[(w[1] as usize).min(SPAN_NAMES.len() - 1)],
                    chunk: (w[2] != u64::MAX - 1).then_some(w[2] as usize),
                    start_ms: f64::from_bits(w[3]),
                    end_ms: f64::from_bits(w[4]),
                })
                .collect()
        })
        .collect())
}

/// One rank's part of the benchmark: the join, `runs` times, on fresh copies of its inputs,
/// then the raw all-to-all of as many bytes as the join's shuffle sent.
fn rank_bench<C, K>(
    comm: &C,
    b: &C::Backend,
    work: &Workload<K>,
    args: &DistributedArgs,
    opts: &DistributedOptions,
    runs: Runs,
) -> joinkit_cuda::Result<RankResult>
where
    C: Communicator,
    C::Backend: DistributedBackend,
    K: Key,
{
    let (rank, ranks) = (comm.rank(), comm.size());
    let left = Workload::share(&work.left, rank, ranks);
    let right = Workload::share(&work.right, rank, ranks);
    let payloads = |keys: &[K], salt: u64| -> joinkit_cuda::Result<Vec<Column<C::Backend>>> {
        crate::join::payload_columns(b, keys, args.payloads, salt)
    };
    let inputs = comm.agree(
        "uploading the inputs",
        (|| {
            Ok((
                Table::new(b.upload(left)?, payloads(left, 200)?)?,
                Table::new(b.upload(right)?, payloads(right, 100)?)?,
            ))
        })(),
    )?;
    let copy = |t: &Table<C::Backend, K>| -> joinkit_cuda::Result<Table<C::Backend, K>> {
        let mut keys = b.alloc::<K>(t.keys.len())?;
        b.copy(&t.keys, &mut keys)?;
        let cols = t
            .payloads
            .iter()
            .map(|c| {
                Ok(joinkit_cuda::map_column!(c, c, T => {
                    let mut o = b.alloc::<T>(c.len())?;
                    b.copy(c, &mut o)?;
                    o
                }))
            })
            .collect::<joinkit_cuda::Result<Vec<_>>>()?;
        Table::new(keys, cols)
    };
    let mut results = Vec::new();
    for i in 0..runs.warmup + runs.repeat {
        let (l, r) = comm.agree(
            "copying the inputs",
            (|| Ok((copy(&inputs.0)?, copy(&inputs.1)?)))(),
        )?;
        b.synchronize()?;
        b.reset_peak_memory();
        comm.barrier()?;
        let (stats, ms) = b.timed(|| {
            if args.payloads == 0 {
                let (out, stats) = distributed_join_rows(comm, b, l.keys, r.keys, opts)?;
                drop(out);
                Ok(stats)
            } else {
                let (out, stats) = distributed_join_columns(comm, b, l, r, opts)?;
                drop(out);
                Ok(stats)
            }
        })?;
        let peak = b.memory().map(|m| m.peak_bytes as u64);
        let mut mine = vec![ms];
        mine.extend(PHASES.iter().map(|p| stats.phase(p)));
        let slowest = max_f64(comm, &mine)?;
        let sent = comm.all_reduce(&[stats.bytes_sent], ReduceOp::Max)?[0];
        let sent_sum = comm.all_reduce(&[stats.bytes_sent], ReduceOp::Sum)?[0];
        let wire = comm.all_reduce(
            &[
                stats.traffic.iter().map(|t| t.raw_bytes).sum(),
                stats.traffic.iter().map(|t| t.sent_bytes).sum(),
            ],
            ReduceOp::Sum,
        )?;
        let timelines = gather_timelines(comm, &stats.timeline)?;
        let peak_max = comm.all_reduce(&[peak.unwrap_or(0)], ReduceOp::Max)?[0];
        if i >= runs.warmup {
            results.push(RunResult {
                total_ms: slowest[0],
                phases: PHASES
                    .iter()
                    .copied()
                    .zip(slowest[1..].iter().copied())
                    .collect(),
                bytes_sent_max: sent,
                bytes_sent_sum: sent_sum,
                wire_raw_sum: wire[0],
                wire_sent_sum: wire[1],
                peak_bytes: peak.map(|_| peak_max),
                stats,
                timelines,
            });
        }
    }
    // The raw all-to-all moves as many bytes as the join's shuffle sent (the most one rank
    // sent to the others, the same on every rank), split evenly over the ranks; an even number
    // of words a rank, so every segment starts 16-byte aligned (NCCL moves misaligned ones at
    // half the rate: 169 against 316 GB/s on 4 H200s, 2.4 GB a rank).
    let all_to_all = if ranks > 1 {
        let sent = results.last().map_or(0, |r| r.bytes_sent_max) as usize;
        let words = match args.a2a_bytes {
            Some(bytes) => bytes.div_ceil(8),
            None => (sent * ranks)
                .div_ceil(8 * (ranks - 1))
                .next_multiple_of(2 * ranks),
        }
        .max(ranks);
        let mut send = b.alloc::<u64>(words)?;
        b.fill_random(&mut send, 7, u64::MAX)?;
        let counts: Vec<usize> = (0..ranks)
            .map(|p| (p + 1) * words / ranks - p * words / ranks)
            .collect();
        let away = ((words - counts[rank]) * 8) as u64;
        let mut times = Vec::new();
        for i in 0..runs.warmup + runs.repeat {
            comm.barrier()?;
            let (_, ms) = b.timed(|| comm.all_to_all_v(b, &send, &counts).map(drop))?;
            if i >= runs.warmup {
                times.push(max_f64(comm, &[ms])?[0]);
            }
        }
        times.sort_by(f64::total_cmp);
        Some((times[times.len() / 2], away))
    } else {
        None
    };
    Ok(RankResult {
        runs: results,
        all_to_all,
    })
}

pub(crate) fn run(device: &Device, args: &DistributedArgs, ctx: &mut Ctx) -> Result<()> {
    match args.key_bits {
        KeyBits::U32 => run_keys::<u32>(device, args, ctx),
        KeyBits::U64 => run_keys::<u64>(device, args, ctx),
    }
}

/// The options every rank runs with.
fn options(args: &DistributedArgs, ranks_per_node: Option<usize>) -> DistributedOptions {
    let shuffle = match (args.shuffle, ranks_per_node) {
        (ShuffleKind::OneLevel, _) => Shuffle::OneLevel,
        (ShuffleKind::TwoLevel, Some(n)) => Shuffle::TwoLevel { ranks_per_node: n },
        (ShuffleKind::TwoLevel, None) => Shuffle::OneLevel,
        (ShuffleKind::Auto, _) => Shuffle::Auto,
    };
    let join = JoinOptions::new(args.kind).algorithm(args.algorithm);
    let mut opts = DistributedOptions::new(join.right_unique(args.right_unique))
        .placement(args.placement)
        .shuffle(shuffle)
        .skew(if args.skew_load > 0.0 {
            Skew::Replicate {
                load: args.skew_load,
            }
        } else {
            Skew::Off
        });
    if let Some(n) = ranks_per_node {
        opts = opts.ranks_per_node(n);
    }
    opts.pipeline_chunks(args.pipeline_chunks)
        .id_bitmaps(args.id_bitmaps)
        .compress(match args.compress {
            CompressKind::Off => Compression::Off,
            CompressKind::On => Compression::On,
            CompressKind::Auto => Compression::Auto {
                break_even_gbps: DEFAULT_BREAK_EVEN_GBPS,
                link_gbps: args.link_gbps,
            },
        })
}

fn run_keys<K: Key>(device: &Device, args: &DistributedArgs, ctx: &mut Ctx) -> Result<()> {
    if args.shuffle == ShuffleKind::TwoLevel && args.ranks_per_node.is_none() {
        return Err(BenchError::Usage(
            "--shuffle two-level needs --ranks-per-node (ranks of one node)".into(),
        ));
    }
    let config = CommConfig::default().timeout(std::time::Duration::from_millis(args.timeout_ms));
    let runs = ctx.runs(5);
    let comm = args.comm.unwrap_or(if args.gpus.is_empty() {
        CommKind::Local
    } else {
        CommKind::Peer
    });
    let (result, ranks, comm_name, gpu, text) = match comm {
        CommKind::Local => {
            let ranks = args.ranks;
            let gpu = !matches!(device, Device::Cpu(_));
            let work = Workload::<K>::generate(args, ranks, gpu)?;
            let opts = options(args, args.ranks_per_node);
            let world = LocalWorld::new(ranks, config)?;
            let outcomes = match device {
                Device::Cpu(_) => world.run(|comm| {
                    let b = joinkit_cuda::CpuBackend::new();
                    rank_bench(&comm, &b, &work, args, &opts, runs)
                }),
                #[cfg(feature = "cuda")]
                Device::Cuda(g) => {
                    let ordinal = g.info().ordinal;
                    world.run(|comm| {
                        let b = joinkit_cuda::CudaBackend::new(ordinal)?;
                        rank_bench(&comm, &b, &work, args, &opts, runs)
                    })
                }
            };
            let first = first_or_every_error(outcomes)?;
            (first, ranks, "in-process", gpu, work.text)
        }
        #[cfg(feature = "cuda")]
        CommKind::Nccl => nccl::run::<K>(args, config, runs)?,
        #[cfg(feature = "cuda")]
        CommKind::Peer => nccl::run_peer::<K>(args, config, runs)?,
        #[cfg(not(feature = "cuda"))]
        CommKind::Nccl | CommKind::Peer => {
            return Err(BenchError::Usage(
                "--comm nccl and --comm peer need a build with the cuda feature".into(),
            ));
        }
    };
    report(ctx, args, &result, ranks, comm_name, gpu, &text)
}

/// Rank 0's result, or every failed rank's error: the first rank's error alone is often a
/// time-out waiting for a peer whose own error says what went wrong.
fn first_or_every_error(outcomes: Vec<joinkit_cuda::Result<RankResult>>) -> Result<RankResult> {
    let errors: Vec<String> = outcomes
        .iter()
        .enumerate()
        .filter_map(|(r, o)| o.as_ref().err().map(|e| format!("rank {r}: {e}")))
        .collect();
    if !errors.is_empty() {
        return Err(BenchError::Ranks(errors.join("; ")));
    }
    outcomes
        .into_iter()
        .next()
        .ok_or(BenchError::Ranks("no ranks ran".into()))?
        .map_err(Into::into)
}

/// Rows of rank 0's results: the median run by total time.
fn report(
    ctx: &mut Ctx,
    args: &DistributedArgs,
    result: &RankResult,
    ranks: usize,
    comm: &str,
    gpu: bool,
    workload: &str,
) -> Result<()> {
    let mut runs: Vec<&RunResult> = result.runs.iter().collect();
    runs.sort_by(|a, c| a.total_ms.total_cmp(&c.total_ms));
    let Some(m) = runs.get(runs.len() / 2) else {
        return Ok(());
    };
    let st = &m.stats;
    ctx.report.note(format!("workload: {workload}"));
    ctx.report.note(
        "times are the slowest rank's; shuffle GB/s: the most bytes one rank sent over its \
         shuffle time; a2a GB/s: the same for a plain all-to-all of as many bytes in this run \
         (or of --a2a-bytes a rank)",
    );
    // Phases a run did not have (no shuffle on one rank, no gather) are left empty.
    let ran = |name: &str| {
        m.phases
            .iter()
            .find(|p| p.0 == name && st.phase(name) > 0.0)
            .map(|p| p.1)
    };
    let phase = |name: &str| ran(name).unwrap_or(0.0);
    let shuffle_ms = phase("shuffle");
    let gbs = |bytes: u64, ms: f64| {
        if ms > 0.0 {
            bytes as f64 / (ms * 1e6)
        } else {
            0.0
        }
    };
    let row = Row::new("distributed")
        .with("ranks", ranks)
        .with("comm", comm)
        .with("placement", placement_name(st.placement))
        .with("shuffle", shuffle_name(st.shuffle))
        .with("kind", crate::join::kind_name(args.kind))
        .with("pipeline chunks", args.pipeline_chunks)
        .with("id bitmaps", if args.id_bitmaps { "on" } else { "off" })
        .with("right unique", if args.right_unique { "on" } else { "off" })
        .with("compress", format!("{:?}", args.compress).to_lowercase())
        .with("total ms", m.total_ms)
        .with_opt("narrow ms", ran("narrow"))
        .with("plan ms", phase("plan"))
        .with_opt("partition ms", ran("partition"))
        .with_opt("shuffle ms", ran("shuffle"))
        .with("local join ms", phase("local join"))
        .with_opt("pipelined probe ms", ran("pipelined probe"))
        .with_opt(
            "shuffle hidden ms",
            st.pipeline.as_ref().map(|p| p.hidden_ms()),
        )
        .with_opt("gather ms", ran("gather"))
        .with(
            "M tuples/s",
            st.global_input_rows as f64 / (m.total_ms * 1e3).max(f64::MIN_POSITIVE),
        )
        .with("shuffle GB/s", gbs(m.bytes_sent_max, shuffle_ms))
        .with_opt(
            "a2a GB/s",
            result.all_to_all.map(|(ms, bytes)| gbs(bytes, ms)),
        )
        .with("wire GB", m.wire_sent_sum as f64 / 1e9)
        .with(
            "wire ratio",
            if m.wire_sent_sum > 0 {
                m.wire_raw_sum as f64 / m.wire_sent_sum as f64
            } else {
                1.0
            },
        )
        .with("imbalance", st.imbalance)
        .with("heavy keys", st.heavy_keys)
        .with("out rows", st.global_output_rows)
        .with_opt(
            "peak MiB",
            m.peak_bytes.map(|p| p as f64 / (1 << 20) as f64),
        )
        .detail(
            "a2a ms",
            result
                .all_to_all
                .map_or(String::new(), |(ms, _)| format!("{ms:.3}")),
        )
        .detail("GB sent", m.bytes_sent_sum as f64 / 1e9)
        .detail("rank 0 columns", columns_text(st))
        .detail(
            "link GB/s",
            st.link_gbps
                .iter()
                .map(|(l, r)| format!("{} {r:.2}", l.name()))
                .collect::<Vec<_>>()
                .join(", "),
        )
        .detail(
            "rank 0 pipeline",
            st.pipeline.as_ref().map_or(String::new(), |p| {
                format!(
                    "{} chunks: wall {:.3} ms, shuffle {:.3} ms, compute {:.3} ms",
                    p.chunks, p.wall_ms, p.shuffle_ms, p.compute_ms
                )
            }),
        )
        .detail("local algorithm", st.local.algorithm.name())
        .detail(
            "rank 0 local phases",
            format!(
                "plan {:.3} / transform {:.3} / match {:.3} / materialize {:.3} ms{}",
                st.local.phase_ms("plan"),
                st.local.phase_ms("transform"),
                st.local.phase_ms("match"),
                st.local.phase_ms("materialize"),
                if st.narrowed_by_partition {
                    ", keys narrowed by the partition by rank"
                } else if st.narrowed_keys {
                    ", keys narrowed before the shuffle"
                } else if st.local.narrowed_keys {
                    ", keys narrowed"
                } else {
                    ""
                }
            ),
        )
        .detail(
            "rank 0 local rows",
            format!("{} + {}", st.local_rows.0, st.local_rows.1),
        )
        .detail("device", if gpu { "gpu" } else { "cpu" })
        .detail(
            "key-bits",
            match args.key_bits {
                KeyBits::U32 => 32usize,
                KeyBits::U64 => 64,
            },
        )
        .detail("payloads", args.payloads)
        .detail("workload", workload);
    ctx.report.row(row);
    match &args.timeline {
        Some(path) if !m.timelines.is_empty() => {
            let title = format!(
                "{workload}: {ranks} ranks, {} chunks, compress {:?}, {:.1} ms",
                args.pipeline_chunks, args.compress, m.total_ms
            );
            const LANES: [&str; 2] = ["communication", "compute"];
            let rows: Vec<String> = (0..m.timelines.len())
                .flat_map(|r| LANES.map(|l| format!("rank {r} {l}")))
                .collect();
            let bars: Vec<Bar<'_>> = (m.timelines.iter().enumerate())
                .flat_map(|(r, spans)| {
                    spans.iter().map(move |s| Bar {
                        row: r * LANES.len() + usize::from(s.lane == LANES[1]),
                        what: s.what,
                        start_ms: s.start_ms,
                        end_ms: s.end_ms,
                    })
                })
                .collect();
            crate::plot::timeline(path, &title, "ms since the join began", &rows, &bars)?;
            ctx.report
                .note(format!("timeline of the median run: {}", path.display()));
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Rank 0's shuffled columns: side, column, level, scheme (or raw), ratio sent and sampled.
fn columns_text(st: &DistributedStats) -> String {
    st.traffic
        .iter()
        .map(|t| {
            format!(
                "{} {} {}: {} {:.2}x (sampled {:.2}x)",
                t.side,
                if t.column == 0 {
                    "key".to_string()
                } else {
                    format!("col {}", t.column)
                },
                t.level.name(),
                t.scheme.as_deref().unwrap_or("raw"),
                t.ratio(),
                t.estimated_ratio
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// NCCL ranks: this process's one rank under a launcher, or one per GPU of `--gpus`.
#[cfg(feature = "cuda")]
mod nccl {
    use joinkit_comm::launch::Launch;
    use joinkit_comm::nccl::NcclComm;
    use joinkit_comm::peer::PeerComm;
    use joinkit_comm::{CommConfig, Communicator};
    use joinkit_cuda::{CudaBackend, Error, Key};

    use super::{DistributedArgs, RankResult, Workload, options, rank_bench};
    use crate::error::{BenchError, Result};
    use crate::measure::Runs;

    /// This process's first rank's results (every rank's report holds the slowest rank's
    /// phases; under a launcher each process writes its own, `launcher::rank_out_dir`), the
    /// rank count, the communicator's name, and the workload's text.
    pub(super) fn run<K: Key>(
        args: &DistributedArgs,
        config: CommConfig,
        runs: Runs,
    ) -> Result<(RankResult, usize, &'static str, bool, String)> {
        if let Some(launch) = Launch::from_env()? {
            let backend = launch.backend()?;
            let comm = launch.nccl_comm(&backend, config)?;
            let ranks = comm.size();
            let work = Workload::<K>::generate(args, ranks, true)?;
            let per_node = args.ranks_per_node.or(Some(launch.local_world_size));
            let result = rank_bench(&comm, &backend, &work, args, &options(args, per_node), runs)?;
            return Ok((result, ranks, "nccl (one process a rank)", true, work.text));
        }
        if args.gpus.is_empty() {
            return Err(BenchError::Usage(
                "--comm nccl: name the GPUs (--gpus 0,1,2,3) or start one process per GPU with a \
                 launcher (RANK/WORLD_SIZE/LOCAL_RANK, or SLURM)"
                    .into(),
            ));
        }
        let backends = open(&args.gpus)?;
        let comms = NcclComm::init_all(&backends, config)?;
        on_each_gpu::<K, _>(
            args,
            &backends,
            comms,
            runs,
            "nccl (one process, every GPU)",
        )
    }

    /// `--comm peer`: one rank per GPU of `--gpus`, buffers pushed by the copy engines.
    pub(super) fn run_peer<K: Key>(
        args: &DistributedArgs,
        config: CommConfig,
        runs: Runs,
    ) -> Result<(RankResult, usize, &'static str, bool, String)> {
        if args.gpus.is_empty() {
            return Err(BenchError::Usage(
                "--comm peer: name the GPUs (--gpus 0,1,2,3)".into(),
            ));
        }
        let backends = open(&args.gpus)?;
        // Without --comm, GPUs that cannot map each other's memory go over NCCL.
        if args.comm.is_none() && PeerComm::lacking_peer_access(&backends)?.is_some() {
            let comms = NcclComm::init_all(&backends, config)?;
            let name = "nccl (one process, every GPU; no peer access)";
            return on_each_gpu::<K, _>(args, &backends, comms, runs, name);
        }
        let comms = PeerComm::init_all(&backends, config)?;
        on_each_gpu::<K, _>(
            args,
            &backends,
            comms,
            runs,
            "copy engines (one process, every GPU)",
        )
    }

    fn open(gpus: &[usize]) -> Result<Vec<CudaBackend>> {
        Ok(gpus
            .iter()
            .map(|&g| CudaBackend::new(g))
            .collect::<joinkit_cuda::Result<Vec<_>>>()?)
    }

    /// Runs the bench on every rank of `comms` (rank r on `backends[r]`), a thread each.
    fn on_each_gpu<K: Key, C: Communicator<Backend = CudaBackend>>(
        args: &DistributedArgs,
        backends: &[CudaBackend],
        comms: Vec<C>,
        runs: Runs,
        name: &'static str,
    ) -> Result<(RankResult, usize, &'static str, bool, String)> {
        let ranks = comms.len();
        let work = Workload::<K>::generate(args, ranks, true)?;
        let opts = options(args, args.ranks_per_node);
        let (work, opts) = (&work, &opts);
        let outcomes: Vec<joinkit_cuda::Result<RankResult>> = std::thread::scope(|s| {
            let handles: Vec<_> = comms
                .into_iter()
                .zip(backends)
                .map(|(comm, b)| {
                    s.spawn(move || {
                        b.bind_to_thread()?;
                        rank_bench(&comm, b, work, args, opts, runs)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::InvalidArgument("a rank's thread panicked".into()))
                    })
                })
                .collect()
        });
        let first = super::first_or_every_error(outcomes)?;
        Ok((first, ranks, name, true, work.text.clone()))
    }
}
