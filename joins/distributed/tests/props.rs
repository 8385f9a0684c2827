//! The distributed joins against the single-node reference: N in-process ranks (threads) on the
//! CPU backend, and on one GPU shared by N CUDA ranks where a GPU is present, for every kind,
//! key width, output form, local algorithm, placement, shuffle and skew handling, over inputs
//! spread over the ranks in every way (empty ranks, all rows on one rank, duplicates on both
//! sides, one heavy key).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use joinkit::reference::join_pairs;
use joinkit::{Algorithm, Column, JoinKind, JoinOptions, NULL_ROW, Table};
use joinkit_comm::{CommConfig, Communicator, LocalWorld};
use joinkit_cuda::hash::hash64;
use joinkit_cuda::{Backend, CpuBackend, Element, Error, Key};
use joinkit_distributed::{
    Compression, DistributedBackend, DistributedOptions, DistributedStats, Placement, Shuffle,
    Skew, Span, distributed_join_columns, distributed_join_rows, global_row,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// One drawn case: global inputs, how their rows are spread over the ranks, and the options.
#[derive(Debug, Clone)]
struct Case<K> {
    left: Vec<K>,
    right: Vec<K>,
    /// Rank of each left row, then of each right row.
    left_ranks: Vec<usize>,
    right_ranks: Vec<usize>,
    ranks: usize,
    kind: JoinKind,
    algorithm: Algorithm,
    placement: Placement,
    shuffle: Shuffle,
    skew: Skew,
    /// Materialized columns (`true`) or global row ids.
    columns: bool,
    gather_to_root: bool,
    compress: Compression,
    /// Chunks of the pipelined probe shuffle (1: blocking).
    chunks: usize,
    /// Row ids sent as membership bitmaps where the partition by rank narrows the keys.
    id_bitmaps: bool,
    /// The right keys deduplicated and promised unique (`JoinOptions::right_unique`).
    right_unique: bool,
}

/// Keys with duplicates on both sides, no matches, one heavy key, the extremes.
fn keys<K: Key + Arbitrary>() -> impl Strategy<Value = Vec<K>> {
    prop_oneof![
        proptest::collection::vec((0u64..48).prop_map(K::from_u64), 0..300),
        proptest::collection::vec(any::<K>(), 0..200),
        // One key holds most rows (a heavy key), the rest spread.
        (0usize..300, 0u64..1000).prop_map(|(n, salt)| {
            (0..n as u64)
                .map(|i| {
                    let h = hash64(i, salt);
                    K::from_u64(if h % 10 < 6 { 7 } else { h % 200 })
                })
                .collect()
        }),
        proptest::collection::vec(prop_oneof![Just(K::from_u64(0)), Just(K::MAX)], 0..60),
    ]
}

/// The rank of each of `n` rows: random, all on one rank, or round robin (ranks beyond the
/// rows hold none).
fn spread(n: usize, ranks: usize) -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        proptest::collection::vec(0..ranks, n),
        (0..ranks).prop_map(move |r| vec![r; n]),
        Just((0..n).map(|i| i % ranks).collect()),
    ]
}

/// Off, on, and automatic with a link configured slow (compressing), fast (not) or measured.
fn compression() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::Off),
        Just(Compression::On),
        Just(Compression::Auto {
            break_even_gbps: 300.0,
            link_gbps: Some(0.5),
        }),
        Just(Compression::Auto {
            break_even_gbps: 300.0,
            link_gbps: Some(1e6),
        }),
        Just(Compression::auto()),
    ]
}

fn case<K: Key + Arbitrary>() -> impl Strategy<Value = Case<K>> {
    let layout = prop_oneof![
        Just((1usize, Shuffle::OneLevel)),
        Just((2, Shuffle::OneLevel)),
        Just((3, Shuffle::OneLevel)),
        Just((4, Shuffle::OneLevel)),
        Just((7, Shuffle::OneLevel)),
        Just((4, Shuffle::TwoLevel { ranks_per_node: 2 })),
        Just((6, Shuffle::TwoLevel { ranks_per_node: 3 })),
        Just((6, Shuffle::TwoLevel { ranks_per_node: 2 })),
    ];
    let algorithm = proptest::sample::select(
        Algorithm::CONCRETE
            .into_iter()
            .chain([Algorithm::Auto])
            .collect::<Vec<_>>(),
    );
    (
        keys::<K>(),
        keys::<K>(),
        layout,
        proptest::sample::select(JoinKind::ALL.to_vec()),
        algorithm,
        proptest::sample::select(vec![
            Placement::Partitioned,
            Placement::Replicated,
            Placement::Auto,
        ]),
        prop_oneof![Just(Skew::Off), Just(Skew::Replicate { load: 0.25 })],
        any::<bool>(),
        any::<bool>(),
        (compression(), 1usize..=7, any::<bool>(), any::<bool>()),
    )
        .prop_flat_map(
            |(
                left,
                right,
                (ranks, shuffle),
                kind,
                algorithm,
                placement,
                skew,
                columns,
                root,
                (compress, chunks, id_bitmaps, right_unique),
            )| {
                let mut right = right;
                if right_unique {
                    let mut seen = std::collections::HashSet::new();
                    right.retain(|k| seen.insert(*k));
                }
                let (l, r) = (left.len(), right.len());
                (spread(l, ranks), spread(r, ranks)).prop_map(move |(left_ranks, right_ranks)| {
                    Case {
                        left: left.clone(),
                        right: right.clone(),
                        left_ranks,
                        right_ranks,
                        ranks,
                        kind,
                        algorithm,
                        placement,
                        shuffle,
                        skew,
                        columns,
                        gather_to_root: root,
                        compress,
                        chunks,
                        id_bitmaps,
                        right_unique,
                    }
                })
            },
        )
}

/// Each rank's (global index, key) rows in input order, and each global row's id.
fn rank_rows<K: Key>(
    keys: &[K],
    ranks_of: &[usize],
    ranks: usize,
) -> (Vec<Vec<(usize, K)>>, Vec<u64>) {
    let mut per_rank = vec![Vec::new(); ranks];
    let mut ids = Vec::with_capacity(keys.len());
    for (i, (&k, &r)) in keys.iter().zip(ranks_of).enumerate() {
        ids.push(global_row(r, per_rank[r].len() as u32));
        per_rank[r].push((i, k));
    }
    (per_rank, ids)
}

/// A row's payloads, from its global index: a u64 and an i32 (left) or a u32 (right).
fn payload(i: usize, salt: u64) -> (u64, u64) {
    (
        hash64(i as u64, salt),
        u64::from(hash64(i as u64, salt + 1) as u32),
    )
}

/// A rank's table: keys, and for column outputs the payloads of its rows.
fn table<B: Backend, K: Key>(b: &B, rows: &[(usize, K)], salt: u64, left: bool) -> Table<B, K> {
    let keys: Vec<K> = rows.iter().map(|r| r.1).collect();
    let p0: Vec<u64> = rows.iter().map(|r| payload(r.0, salt).0).collect();
    let p1: Vec<u64> = rows.iter().map(|r| payload(r.0, salt).1).collect();
    let second = if left {
        Column::I32(
            b.upload(&p1.iter().map(|&v| v as u32 as i32).collect::<Vec<_>>())
                .unwrap(),
        )
    } else {
        Column::U32(
            b.upload(&p1.iter().map(|&v| v as u32).collect::<Vec<_>>())
                .unwrap(),
        )
    };
    Table::new(
        b.upload(&keys).unwrap(),
        vec![Column::U64(b.upload(&p0).unwrap()), second],
    )
    .unwrap()
}

fn bits<B: Backend>(b: &B, c: &Column<B>) -> Vec<u64> {
    joinkit_cuda::each_column!(c, c => b.download(c).unwrap().into_iter().map(Element::to_bits).collect())
}

/// What the reference says every rank's outputs together hold, as sorted rows: global ids
/// (left, right or `u64::MAX` for none), or payload bits with a validity word.
fn expected<K: Key>(c: &Case<K>, left_ids: &[u64], right_ids: &[u64]) -> Vec<Vec<u64>> {
    let mut rows: Vec<Vec<u64>> = join_pairs(&c.left, &c.right, c.kind)
        .into_iter()
        .map(|(li, ri)| {
            let (li, matched) = (li as usize, ri != NULL_ROW);
            if c.columns {
                let (a, b) = payload(li, 10);
                let mut row = vec![a, b & 0xffff_ffff];
                if c.kind.has_right_rows() {
                    if matched {
                        let (x, y) = payload(ri as usize, 20);
                        row.extend([x, y & 0xffff_ffff, 1]);
                    } else {
                        row.extend([0, 0, 0]);
                    }
                }
                row
            } else {
                let right = if matched {
                    right_ids[ri as usize]
                } else {
                    u64::MAX
                };
                vec![left_ids[li], right]
            }
        })
        .collect();
    rows.sort_unstable();
    rows
}

/// The options case `c` runs with.
fn options<K>(c: &Case<K>) -> DistributedOptions {
    let join = JoinOptions::new(c.kind).algorithm(c.algorithm);
    DistributedOptions::new(join.right_unique(c.right_unique))
        .placement(c.placement)
        .shuffle(c.shuffle)
        .skew(c.skew)
        .gather_to_root(c.gather_to_root)
        .compress(c.compress)
        .pipeline_chunks(c.chunks)
        .id_bitmaps(c.id_bitmaps)
}

/// One rank's part of case `c`: its output as rows (as [`expected`] writes them) and its
/// statistics.
fn rank_output<C, K>(
    c: &Case<K>,
    comm: &C,
    b: &C::Backend,
    left_rows: &[(usize, K)],
    right_rows: &[(usize, K)],
) -> joinkit_cuda::Result<(Vec<Vec<u64>>, DistributedStats)>
where
    C: Communicator,
    C::Backend: DistributedBackend,
    K: Key,
{
    let opts = options(c);
    let (rows, stats) = if c.columns {
        let left = table(b, left_rows, 10, true);
        let right = table(b, right_rows, 20, false);
        let (out, stats) = distributed_join_columns(comm, b, left, right, &opts)?;
        let cols: Vec<Vec<u64>> = out
            .left
            .iter()
            .chain(&out.right)
            .map(|c| bits(b, c))
            .collect();
        let valid = out.right_valid.as_ref().map(|v| b.download(v).unwrap());
        let rows: Vec<Vec<u64>> = (0..out.rows as usize)
            .map(|i| {
                let mut row: Vec<u64> = cols.iter().map(|c| c[i]).collect();
                if c.kind.has_right_rows() {
                    row.push(valid.as_ref().map_or(1, |v| u64::from(v[i])));
                }
                row
            })
            .collect();
        (rows, stats)
    } else {
        let keys = |rows: &[(usize, K)]| b.upload(&rows.iter().map(|r| r.1).collect::<Vec<_>>());
        let (left, right) = (keys(left_rows)?, keys(right_rows)?);
        let (out, stats) = distributed_join_rows(comm, b, left, right, &opts)?;
        let l = b.download(&out.left)?;
        assert_eq!(l.len() as u64, out.rows);
        let rr = match &out.right {
            Some(x) => b.download(x)?,
            None => vec![u64::MAX; l.len()],
        };
        let valid = match &out.right_valid {
            Some(v) => b.download(v)?,
            None => vec![1; l.len()],
        };
        let rows = l
            .into_iter()
            .zip(rr)
            .zip(valid)
            .map(|((a, x), v)| vec![a, if v == 0 { u64::MAX } else { x }])
            .collect();
        (rows, stats)
    };
    if c.gather_to_root && comm.rank() != 0 {
        assert!(
            rows.is_empty(),
            "rank {} kept rows after the gather",
            comm.rank()
        );
    }
    Ok((rows, stats))
}

/// Runs case `c` on `ranks` in-process ranks, each on a backend `open` gives it; returns the
/// sorted rows of all ranks' outputs and every rank's statistics.
fn run_case<B, K>(
    c: &Case<K>,
    open: &(dyn Fn() -> B + Sync),
) -> (Vec<Vec<u64>>, Vec<DistributedStats>)
where
    B: DistributedBackend,
    K: Key,
{
    let (left_rows, _) = rank_rows(&c.left, &c.left_ranks, c.ranks);
    let (right_rows, _) = rank_rows(&c.right, &c.right_ranks, c.ranks);
    let world = LocalWorld::new(c.ranks, CommConfig::default()).unwrap();
    let outputs = world.run(|comm| {
        let b = open();
        let r = comm.rank();
        rank_output(c, &comm, &b, &left_rows[r], &right_rows[r])
    });
    let mut all = Vec::new();
    let mut stats = Vec::new();
    for (r, o) in outputs.into_iter().enumerate() {
        let (rows, s) = o.unwrap_or_else(|e| panic!("rank {r} of {c:?}: {e}"));
        all.extend(rows);
        stats.push(s);
    }
    all.sort_unstable();
    (all, stats)
}

/// Runs case `c` and checks it against the reference; returns every rank's statistics.
fn check_case<B: DistributedBackend, K: Key>(
    c: &Case<K>,
    open: &(dyn Fn() -> B + Sync),
) -> Vec<DistributedStats> {
    let (_, left_ids) = rank_rows(&c.left, &c.left_ranks, c.ranks);
    let (_, right_ids) = rank_rows(&c.right, &c.right_ranks, c.ranks);
    let (got, stats) = run_case(c, open);
    let want = expected(c, &left_ids, &right_ids);
    assert_eq!(got, want, "{c:?}");
    let global = want.len() as u64;
    for s in &stats {
        assert_eq!(s.global_output_rows, global, "global output rows, {c:?}");
        assert_eq!(s.global_input_rows, (c.left.len() + c.right.len()) as u64);
        assert_eq!(s.ranks, c.ranks);
        check_timeline(s);
    }
    stats
}

/// A join's timeline against its phases (phases are timed on their streams without waiting
/// for them and read at the end): no span ends before it starts; outside a pipeline, each
/// phase's spans add up to its time, and the compute lane's spans (one stream's work, in
/// queue order) do not overlap.
fn check_timeline(s: &DistributedStats) {
    // CUDA events resolve about half a microsecond.
    const SLACK_MS: f64 = 0.01;
    for t in &s.timeline {
        assert!(t.start_ms >= 0.0 && t.end_ms >= t.start_ms, "{t:?}");
    }
    if s.pipeline.is_some() {
        return;
    }
    for &(name, ms) in &s.phases {
        let spans: f64 = (s.timeline.iter().filter(|t| t.what == name))
            .map(Span::ms)
            .sum();
        assert!(
            (spans - ms).abs() <= SLACK_MS,
            "{name}: spans of {spans} ms, the phase {ms} ms"
        );
    }
    let mut compute: Vec<&Span> = (s.timeline.iter())
        .filter(|t| t.lane == "compute")
        .collect();
    compute.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    for pair in compute.windows(2) {
        assert!(
            pair[1].start_ms >= pair[0].end_ms - SLACK_MS,
            "{:?} overlaps {:?}",
            pair[0],
            pair[1]
        );
    }
}

/// Cases of the rows path whose partition by rank narrows the 8-byte keys and names the rows
/// ([`joinkit_partition::LowWordsPartition`]; by ids or membership bitmaps): blocking,
/// partitioned, one-level; every kind, algorithm and skew setting; keys moved above 2^32 so that
/// their low words differ from them.
fn low_word_case() -> impl Strategy<Value = Case<u64>> {
    case::<u64>().prop_map(|mut c| {
        let base = 5u64 << 32;
        for k in c.left.iter_mut().chain(c.right.iter_mut()) {
            *k = base + *k % (1 << 31);
        }
        c.columns = false;
        c.chunks = 1;
        c.placement = Placement::Partitioned;
        c.shuffle = Shuffle::OneLevel;
        c
    })
}

/// Checks a case of [`low_word_case`] on backends from `open`: the reference's rows, keys
/// narrowed by the partition by rank on every rank wherever no heavy key sent the join the
/// tables' way, and there the row ids sent as membership bitmaps where the case asks (the right
/// side's where the output has right rows).
fn check_low_word_case<B: DistributedBackend>(c: &Case<u64>, open: &(dyn Fn() -> B + Sync)) {
    for s in check_case(c, open) {
        if c.ranks > 1 {
            assert!(s.narrowed_keys, "{c:?}");
            assert!(s.narrowed_by_partition || s.heavy_keys > 0, "{c:?}");
        }
        if s.narrowed_by_partition {
            let named = |side| {
                (s.traffic.iter())
                    .any(|t| t.side == side && t.scheme.as_deref() == Some("membership bitmap"))
            };
            assert_eq!(named("left"), c.id_bitmaps, "{c:?}");
            assert_eq!(
                named("right"),
                c.id_bitmaps && c.kind.has_right_rows(),
                "{c:?}"
            );
        }
    }
}

/// Two ranks of 20000 rows a side, keys within 2^20 values above 2^40, but for one key 2^36
/// above them at a row the narrowing's look skips (`outlier`: on the left or the right side,
/// or none): the join goes the tables' way with 8-byte keys where there is one, and equals the
/// reference either way.
fn check_a_key_the_look_missed<B: DistributedBackend>(
    outlier: Option<bool>,
    algorithm: Algorithm,
    open: &(dyn Fn() -> B + Sync),
) {
    let n = 40_000usize;
    let key = |i: usize, salt: u64| (1u64 << 40) + hash64(i as u64, salt) % (1 << 20);
    let mut left: Vec<u64> = (0..n).map(|i| key(i, 1)).collect();
    let mut right: Vec<u64> = (0..n).map(|i| key(i, 2)).collect();
    match outlier {
        Some(true) => left[1] = (1 << 40) + (1 << 36),
        Some(false) => right[n / 2 + 1] = (1 << 40) + (1 << 36),
        None => {}
    }
    let c = Case {
        left_ranks: (0..n).map(|i| usize::from(i >= n / 2)).collect(),
        right_ranks: (0..n).map(|i| usize::from(i >= n / 2)).collect(),
        left,
        right,
        ranks: 2,
        kind: JoinKind::Inner,
        algorithm,
        placement: Placement::Partitioned,
        shuffle: Shuffle::OneLevel,
        skew: Skew::Off,
        columns: false,
        gather_to_root: false,
        compress: Compression::Off,
        chunks: 1,
        id_bitmaps: true,
        right_unique: false,
    };
    for s in check_case(&c, open) {
        let narrowed = outlier.is_none();
        assert_eq!(s.narrowed_by_partition, narrowed, "outlier {outlier:?}");
        assert_eq!(s.narrowed_keys, narrowed, "outlier {outlier:?}");
    }
}

/// `cases` of [`low_word_case`] and the key the look missed on either side or none, on
/// backends from `open`. `Auto` picks NPHJ-chained locally for the latter: on a GPU its plan's
/// posted words once read a word of the sample as the next read-back's ticket
/// (`CudaBackend::posted_words`).
fn check_rows_narrowed_by_the_partition<B: DistributedBackend>(
    open: &(dyn Fn() -> B + Sync),
    cases: u32,
) {
    runner(cases)
        .run(&low_word_case(), |c| {
            check_low_word_case(&c, open);
            Ok(())
        })
        .unwrap();
    for outlier in [None, Some(true), Some(false)] {
        check_a_key_the_look_missed(outlier, Algorithm::Auto, open);
    }
}

#[test]
fn distributed_rows_narrowed_by_the_partition_by_rank_equal_the_reference_on_the_cpu() {
    check_rows_narrowed_by_the_partition(&|| CpuBackend::new(), 96);
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

#[test]
fn distributed_joins_equal_the_reference_on_the_cpu() {
    let open = || CpuBackend::new();
    runner(160)
        .run(&case::<u32>(), |c| {
            check_case(&c, &open);
            Ok(())
        })
        .unwrap();
    runner(96)
        .run(&case::<u64>(), |c| {
            check_case(&c, &open);
            Ok(())
        })
        .unwrap();
}

#[test]
fn distributed_joins_equal_the_reference_with_gpu_ranks_sharing_one_gpu() {
    // Every rank opens the device with a stream of its own.
    let Some(open) =
        common::gpu_ranks("distributed_joins_equal_the_reference_with_gpu_ranks_sharing_one_gpu")
    else {
        return;
    };
    runner(48)
        .run(&case::<u32>(), |c| {
            check_case(&c, &open);
            Ok(())
        })
        .unwrap();
    runner(32)
        .run(&case::<u64>(), |c| {
            check_case(&c, &open);
            Ok(())
        })
        .unwrap();
}

/// [`low_word_case`]s and the key the look missed with CUDA ranks sharing one GPU: the
/// partition by rank's kernels that narrow the keys and write the row ids.
#[test]
fn distributed_rows_narrowed_by_the_partition_by_rank_equal_the_reference_on_gpu_ranks() {
    let Some(open) = common::gpu_ranks(
        "distributed_rows_narrowed_by_the_partition_by_rank_equal_the_reference_on_gpu_ranks",
    ) else {
        return;
    };
    check_rows_narrowed_by_the_partition(&open, 32);
}

/// The same cases through a real NCCL communicator of one rank (`ncclCommInitRank`, grouped
/// send and receive to itself) on the GPU: the distributed layer over NCCL equals the
/// reference. One communicator serves every case, as a program would keep it.
#[cfg(feature = "cuda")]
#[test]
fn distributed_joins_equal_the_reference_over_nccl_with_one_rank() {
    use joinkit_comm::nccl::{NcclComm, UniqueId};
    let Some(gpu) = joinkit_cuda::testing::cuda_or_skip(
        "distributed_joins_equal_the_reference_over_nccl_with_one_rank",
    ) else {
        return;
    };
    let id = UniqueId::new().expect("NCCL is present where a GPU is");
    let comm = NcclComm::init_rank(&gpu, 1, 0, &id, CommConfig::default()).unwrap();
    let one_rank = |c: Case<u64>| Case {
        left_ranks: vec![0; c.left.len()],
        right_ranks: vec![0; c.right.len()],
        ranks: 1,
        shuffle: Shuffle::OneLevel,
        ..c
    };
    runner(24)
        .run(&case::<u64>().prop_map(one_rank), |c| {
            let (left_rows, left_ids) = rank_rows(&c.left, &c.left_ranks, 1);
            let (right_rows, right_ids) = rank_rows(&c.right, &c.right_ranks, 1);
            let (mut got, stats) = rank_output(&c, &comm, &gpu, &left_rows[0], &right_rows[0])
                .unwrap_or_else(|e| panic!("{c:?}: {e}"));
            got.sort_unstable();
            let want = expected(&c, &left_ids, &right_ids);
            assert_eq!(got, want, "{c:?}");
            assert_eq!(stats.global_output_rows, want.len() as u64);
            Ok(())
        })
        .unwrap();
}

/// The cases on every GPU of the host, one NCCL rank each (`NcclComm::init_all`), one- and
/// two-level shuffles (two "nodes" of half the GPUs; of one GPU each with two); skipped below
/// two GPUs.
#[cfg(feature = "cuda")]
#[test]
fn distributed_joins_equal_the_reference_over_nccl_on_every_gpu() {
    use joinkit_comm::nccl::NcclComm;
    let Some(backends) = joinkit_cuda::testing::gpus_or_skip(
        "distributed_joins_equal_the_reference_over_nccl_on_every_gpu",
        2,
    ) else {
        return;
    };
    let comms = NcclComm::init_all(&backends, CommConfig::default()).unwrap();
    joins_on_gpu_ranks(&backends, comms);
}

/// The same over the copy-engine communicator: every GPU of the host a rank, or, on one GPU,
/// four ranks sharing it.
#[cfg(feature = "cuda")]
#[test]
fn distributed_joins_equal_the_reference_over_copy_engines() {
    use joinkit_comm::peer::PeerComm;
    let test = "distributed_joins_equal_the_reference_over_copy_engines";
    let Some(gpu) = joinkit_cuda::testing::cuda_or_skip(test) else {
        return;
    };
    let gpus = joinkit_cuda::device_count().unwrap_or(1);
    let ordinals: Vec<usize> = if gpus >= 2 {
        (0..gpus).collect()
    } else {
        vec![gpu.info().ordinal; 4]
    };
    let backends: Vec<_> = (ordinals.into_iter())
        .map(|g| joinkit_cuda::CudaBackend::new(g).unwrap())
        .collect();
    let comms = PeerComm::init_all(&backends, CommConfig::default()).unwrap();
    joins_on_gpu_ranks(&backends, comms);
}

/// The cases on GPU ranks, `comms[r]` on `backends[r]`, one- and two-level shuffles (two
/// "nodes" of half the ranks). The communicators serve every case, each moved to its rank's
/// thread and back.
#[cfg(feature = "cuda")]
fn joins_on_gpu_ranks<C: Communicator<Backend = joinkit_cuda::CudaBackend>>(
    backends: &[joinkit_cuda::CudaBackend],
    comms: Vec<C>,
) {
    let gpus = backends.len();
    let comms = std::sync::Mutex::new(Some(comms));
    let on_every_gpu = (case::<u64>(), any::<bool>()).prop_map(move |(c, two_level)| Case {
        left_ranks: c.left_ranks.iter().map(|r| r % gpus).collect(),
        right_ranks: c.right_ranks.iter().map(|r| r % gpus).collect(),
        ranks: gpus,
        shuffle: if two_level && gpus.is_multiple_of(2) {
            Shuffle::TwoLevel {
                ranks_per_node: gpus / 2,
            }
        } else {
            Shuffle::OneLevel
        },
        ..c
    });
    runner(24)
        .run(&on_every_gpu, |c| {
            let (left_rows, left_ids) = rank_rows(&c.left, &c.left_ranks, gpus);
            let (right_rows, right_ids) = rank_rows(&c.right, &c.right_ranks, gpus);
            let taken = comms
                .lock()
                .unwrap()
                .take()
                .expect("communicators returned");
            let (back, outputs): (Vec<C>, Vec<_>) = std::thread::scope(|s| {
                let handles: Vec<_> = taken
                    .into_iter()
                    .zip(backends)
                    .map(|(comm, b)| {
                        let (c, lr, rr) = (&c, &left_rows, &right_rows);
                        s.spawn(move || {
                            b.bind_to_thread().unwrap();
                            let r = comm.rank();
                            let out = rank_output(c, &comm, b, &lr[r], &rr[r]);
                            (comm, out)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).unzip()
            });
            *comms.lock().unwrap() = Some(back);
            let mut got = Vec::new();
            for (r, o) in outputs.into_iter().enumerate() {
                let (rows, stats) = o.unwrap_or_else(|e| panic!("rank {r} of {c:?}: {e}"));
                assert_eq!(stats.ranks, gpus);
                got.extend(rows);
            }
            got.sort_unstable();
            assert_eq!(got, expected(&c, &left_ids, &right_ids), "{c:?}");
            Ok(())
        })
        .unwrap();
}

/// A heavy key (40 % of the left side, on every rank) is found, and with it handled the local
/// joins' inputs are balanced where without it one rank gets the key's rows from everywhere.
#[test]
fn a_heavy_key_is_replicated_and_balances_the_ranks() {
    let ranks = 4;
    let n = 4000usize;
    let left: Vec<u32> = (0..n as u64)
        .map(|i| {
            if hash64(i, 1) % 10 < 4 {
                12345
            } else {
                (hash64(i, 2) % 1000) as u32
            }
        })
        .collect();
    let right: Vec<u32> = (0..1000).collect();
    let spread: Vec<usize> = (0..n).map(|i| i % ranks).collect();
    let right_spread: Vec<usize> = (0..1000).map(|i| i % ranks).collect();
    let mut imbalance = Vec::new();
    for skew in [Skew::Off, Skew::Replicate { load: 0.25 }] {
        let c = Case {
            left: left.clone(),
            right: right.clone(),
            left_ranks: spread.clone(),
            right_ranks: right_spread.clone(),
            ranks,
            kind: JoinKind::Inner,
            algorithm: Algorithm::Auto,
            placement: Placement::Partitioned,
            shuffle: Shuffle::OneLevel,
            skew,
            columns: true,
            gather_to_root: false,
            compress: Compression::Off,
            chunks: 1,
            id_bitmaps: false,
            right_unique: false,
        };
        check_case(&c, &|| CpuBackend::new());
        let (_, stats) = run_case(&c, &|| CpuBackend::new());
        let heavy = stats[0].heavy_keys;
        assert_eq!(heavy, usize::from(skew != Skew::Off), "{skew:?}");
        imbalance.push(stats[0].imbalance);
    }
    assert!(imbalance[0] > 1.5, "without skew handling: {imbalance:?}");
    assert!(imbalance[1] < 1.2, "with skew handling: {imbalance:?}");
}

/// Rank 2 never joins: the others end with an error within the communicator's time limit, and
/// rank 2 is released only once they have.
#[test]
fn a_rank_that_stops_responding_is_an_error_on_the_others() {
    let world =
        LocalWorld::new(3, CommConfig::default().timeout(Duration::from_millis(300))).unwrap();
    let others_done = AtomicBool::new(false);
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let start = Instant::now();
    let results = world.run(|comm| {
        let cpu = CpuBackend::new();
        if comm.rank() == 2 {
            // Hangs (holding its communicator) until the others have given up, at most 60 s.
            while !others_done.load(Ordering::Acquire) && start.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            return Ok(others_done.load(Ordering::Acquire));
        }
        let keys = cpu.upload(&[1u32, 2, 3])?;
        let opts = DistributedOptions::new(JoinOptions::new(JoinKind::Inner));
        let r = distributed_join_rows(&comm, &cpu, keys.clone(), keys, &opts).map(|_| false);
        if finished.fetch_add(1, Ordering::AcqRel) == 1 {
            others_done.store(true, Ordering::Release);
        }
        r
    });
    assert!(
        results[2].as_ref().is_ok_and(|&released| released),
        "{:?}",
        results[2]
    );
    for r in &results[..2] {
        assert!(
            matches!(r, Err(Error::Timeout { .. } | Error::PeerFailed { .. })),
            "{r:?}"
        );
    }
}

/// A rank that returns early (its communicator dropped) is [`Error::PeerFailed`] on the others.
#[test]
fn a_rank_that_leaves_is_an_error_on_the_others() {
    let world = LocalWorld::new(4, CommConfig::default()).unwrap();
    let results = world.run(|comm| {
        if comm.rank() == 1 {
            return Ok(());
        }
        let cpu = CpuBackend::new();
        let keys = cpu.upload(&[1u64, 2])?;
        let opts = DistributedOptions::new(JoinOptions::new(JoinKind::LeftOuter));
        distributed_join_rows(&comm, &cpu, keys.clone(), keys, &opts).map(drop)
    });
    for (r, res) in results.iter().enumerate() {
        if r != 1 {
            assert!(
                matches!(res, Err(Error::PeerFailed { rank: 1, .. })),
                "rank {r}: {res:?}"
            );
        }
    }
}

/// Bad input on one rank is its own error there and [`Error::PeerFailed`] on the others;
/// ranks that disagree on options or column types are [`Error::RanksDisagree`] everywhere.
#[test]
fn bad_input_on_one_rank_and_disagreeing_ranks_are_errors_everywhere() {
    let world = LocalWorld::new(3, CommConfig::default()).unwrap();
    let results = world.run(|comm| {
        let cpu = CpuBackend::new();
        let n = if comm.rank() == 2 { 2 } else { 3 };
        let left = Table::new(cpu.upload(&[1u32, 2, 3])?, vec![])?;
        let mut right = Table::new(
            cpu.upload(&[1u32, 2, 3])?,
            vec![Column::U32(cpu.upload(&[7u32; 3])?)],
        )?;
        // The fields are public: rank 2 breaks its right table's column length.
        right.payloads[0] = Column::U32(cpu.upload(&vec![7u32; n])?);
        let opts = DistributedOptions::new(JoinOptions::new(JoinKind::Inner));
        distributed_join_columns(&comm, &cpu, left, right, &opts).map(drop)
    });
    assert!(
        matches!(results[2], Err(Error::LengthMismatch { .. })),
        "{:?}",
        results[2]
    );
    for r in &results[..2] {
        assert!(matches!(r, Err(Error::PeerFailed { rank: 2, .. })), "{r:?}");
    }

    let results = world.run(|comm| {
        let cpu = CpuBackend::new();
        let kind = if comm.rank() == 0 {
            JoinKind::LeftSemi
        } else {
            JoinKind::Inner
        };
        let keys = cpu.upload(&[1u32, 2])?;
        let opts = DistributedOptions::new(JoinOptions::new(kind));
        distributed_join_rows(&comm, &cpu, keys.clone(), keys, &opts).map(drop)
    });
    for r in &results {
        assert!(matches!(r, Err(Error::RanksDisagree(_))), "{r:?}");
    }

    let results = world.run(|comm| {
        let cpu = CpuBackend::new();
        let col = if comm.rank() == 1 {
            Column::U64(cpu.upload(&[5u64, 6])?)
        } else {
            Column::U32(cpu.upload(&[5u32, 6])?)
        };
        let left = Table::new(cpu.upload(&[1u32, 2])?, vec![col])?;
        let right = Table::new(cpu.upload(&[1u32, 2])?, vec![])?;
        let opts = DistributedOptions::new(JoinOptions::new(JoinKind::Inner));
        distributed_join_columns(&comm, &cpu, left, right, &opts).map(drop)
    });
    for r in &results {
        assert!(matches!(r, Err(Error::RanksDisagree(_))), "{r:?}");
    }
}

/// A right key twice, on two ranks, under the uniqueness promise: the rank the shuffle brings
/// both rows to says [`Error::DuplicateKey`], the others [`Error::PeerFailed`]; with the right
/// side replicated every rank sees both rows. No rank returns an output.
#[test]
fn a_broken_uniqueness_promise_is_an_error_on_every_rank() {
    let world = LocalWorld::new(3, CommConfig::default()).unwrap();
    for placement in [Placement::Partitioned, Placement::Replicated] {
        let results = world.run(|comm| {
            let cpu = CpuBackend::new();
            let rank = comm.rank() as u32;
            let left = cpu.upload(&[1u32, 2, 3, 40 + rank])?;
            // Key 9 on ranks 0 and 2; every other right key once.
            let right = match rank {
                1 => vec![1u32, 2],
                _ => vec![9, 10 + rank],
            };
            let join = JoinOptions::new(JoinKind::Inner).right_unique(true);
            let opts = DistributedOptions::new(join).placement(placement);
            distributed_join_rows(&comm, &cpu, left, cpu.upload(&right)?, &opts).map(drop)
        });
        let duplicate = results
            .iter()
            .filter(|r| matches!(r, Err(Error::DuplicateKey { side: "right" })));
        assert!(duplicate.count() >= 1, "{placement:?}: {results:?}");
        for r in &results {
            let failed = matches!(
                r,
                Err(Error::DuplicateKey { .. } | Error::PeerFailed { .. })
            );
            assert!(failed, "{placement:?}: {r:?}");
        }
    }
}

/// A two-level layout whose nodes do not divide the ranks is a typed error on every rank.
#[test]
fn a_two_level_shuffle_needs_equal_nodes() {
    let world = LocalWorld::new(5, CommConfig::default()).unwrap();
    let results = world.run(|comm| {
        let cpu = CpuBackend::new();
        let keys = cpu.upload(&[1u32, 2])?;
        let opts = DistributedOptions::new(JoinOptions::new(JoinKind::Inner))
            .placement(Placement::Partitioned)
            .shuffle(Shuffle::TwoLevel { ranks_per_node: 2 });
        distributed_join_rows(&comm, &cpu, keys.clone(), keys, &opts).map(drop)
    });
    for r in &results {
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    }
}

/// Rank 0 gathering an output over the budget refuses on every rank before moving it.
#[test]
fn gathering_over_the_budget_is_refused() {
    let world = LocalWorld::new(2, CommConfig::default()).unwrap();
    let results = world.run(|comm| {
        let cpu = CpuBackend::new();
        let keys = cpu.upload(&vec![3u32; 100])?;
        let opts =
            DistributedOptions::new(JoinOptions::new(JoinKind::Inner).memory_budget(1 << 20))
                .gather_to_root(true);
        // 200 x 200 = 40000 pairs of two 8-byte ids: 640000 bytes fit 1 MiB; 400 x 400 would not.
        distributed_join_rows(&comm, &cpu, keys.clone(), keys, &opts).map(|r| r.0.rows)
    });
    assert_eq!(results[0].as_ref().ok(), Some(&40_000));
    assert_eq!(results[1].as_ref().ok(), Some(&0));
    let results = world.run(|comm| {
        let cpu = CpuBackend::new();
        // 300 x 300 pairs over two ranks: with the key heavy, each rank joins its 150 left
        // rows with all 300 right ones (720000 bytes, within the budget), but the 1.44 MB
        // of both ranks would not fit rank 0's.
        let keys = cpu.upload(&vec![3u32; 150])?;
        let opts =
            DistributedOptions::new(JoinOptions::new(JoinKind::Inner).memory_budget(1 << 20))
                .placement(Placement::Partitioned)
                .skew(Skew::Replicate { load: 0.25 })
                .gather_to_root(true);
        distributed_join_rows(&comm, &cpu, keys.clone(), keys, &opts).map(drop)
    });
    for r in &results {
        assert!(matches!(r, Err(Error::OutputOverBudget { .. })), "{r:?}");
    }
}
