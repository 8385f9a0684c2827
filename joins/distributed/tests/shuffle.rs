//! The compressed and the pipelined shuffle on fixed shapes: what crosses the links (raw for
//! incompressible keys, encoded for sorted ones, never inside a node), the same output as the
//! blocking uncompressed join, a link measured once per communicator, per-chunk timelines, a
//! chunk count of 0 refused, 8-byte keys narrowed only where every rank's keys allow it, and
//! compressed slices damaged on one rank failing every rank.

mod common;

use std::any::{Any, TypeId};
use std::sync::atomic::{AtomicBool, Ordering};

use joinkit::{Algorithm, JoinKind, JoinOptions, Table};
use joinkit_comm::{CommConfig, Communicator, LinkRates, LocalWorld, Received};
use joinkit_cuda::hash::hash64;
use joinkit_cuda::{Backend, Column, CpuBackend, Element, Error};
use joinkit_distributed::{
    Compression, DistributedBackend, DistributedOptions, DistributedStats, Level, MIN_RATIO,
    Placement, Shuffle, Skew, distributed_join_columns,
};

/// Rank `r`'s share of `keys` (every `ranks`-th row from `r`), as a table with the keys again
/// as a `u64` payload column, so the output says which rows met.
fn share<B: Backend>(b: &B, keys: &[u64], r: usize, ranks: usize) -> Table<B, u64> {
    share_with(b, keys, &|k| k, r, ranks)
}

/// [`share`] with the payload `payload(key)`.
fn share_with<B: Backend>(
    b: &B,
    keys: &[u64],
    payload: &(dyn Fn(u64) -> u64 + Sync),
    r: usize,
    ranks: usize,
) -> Table<B, u64> {
    let mine: Vec<u64> = keys.iter().skip(r).step_by(ranks).copied().collect();
    let payloads: Vec<u64> = mine.iter().map(|&k| payload(k)).collect();
    Table::new(
        b.upload(&mine).unwrap(),
        vec![Column::U64(b.upload(&payloads).unwrap())],
    )
    .unwrap()
}

/// Every rank's output rows (left payload, right payload) sorted, and every rank's statistics.
fn join<B: DistributedBackend>(
    ranks: usize,
    left: &[u64],
    right: &[u64],
    opts: &DistributedOptions,
    open: &(dyn Fn() -> B + Sync),
) -> (Vec<(u64, u64)>, Vec<DistributedStats>) {
    join_with(ranks, (left, right), &|k| k, opts, open)
}

/// [`join`] of tables whose payload is `payload(key)`.
fn join_with<B: DistributedBackend>(
    ranks: usize,
    (left, right): (&[u64], &[u64]),
    payload: &(dyn Fn(u64) -> u64 + Sync),
    opts: &DistributedOptions,
    open: &(dyn Fn() -> B + Sync),
) -> (Vec<(u64, u64)>, Vec<DistributedStats>) {
    let world = LocalWorld::new(ranks, CommConfig::default()).unwrap();
    let outputs = world.run(|comm| {
        let b = open();
        let (r, n) = (comm.rank(), comm.size());
        let (out, stats) = distributed_join_columns(
            &comm,
            &b,
            share_with(&b, left, payload, r, n),
            share_with(&b, right, payload, r, n),
            opts,
        )?;
        let col = |c: &Column<B>| match c {
            Column::U64(c) => b.download(c),
            _ => Err(Error::Corrupt("a payload changed type".into())),
        };
        let (l, rr) = (col(&out.left[0])?, col(&out.right[0])?);
        Ok((l.into_iter().zip(rr).collect::<Vec<_>>(), stats))
    });
    let mut rows = Vec::new();
    let mut stats = Vec::new();
    for (r, o) in outputs.into_iter().enumerate() {
        let (part, s) = o.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        rows.extend(part);
        stats.push(s);
    }
    rows.sort_unstable();
    (rows, stats)
}

/// Sorted keys with repeats, like TPC-H's l_orderkey (orders' keys are every fourth one).
fn lineitem_like(n: u64) -> Vec<u64> {
    (0..n).map(|i| i / 4 * 8 + 1).collect()
}

fn inner() -> DistributedOptions {
    DistributedOptions::new(JoinOptions::new(JoinKind::Inner))
        .placement(Placement::Partitioned)
        .shuffle(Shuffle::OneLevel)
}

/// Sorted keys are compressed (each column's traffic several times smaller), random 64-bit
/// keys are sent raw (their sampled ratio is below [`MIN_RATIO`]); both give the uncompressed
/// join's rows, on 1 to 5 ranks.
#[test]
fn compressible_columns_shrink_and_incompressible_ones_go_raw() {
    compression_round_trips(&|| CpuBackend::new());
}

fn compression_round_trips<B: DistributedBackend>(open: &(dyn Fn() -> B + Sync)) {
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Shape {
        Sorted,
        Random,
        /// Random 64-bit keys with every other row one key: compressed as a whole, so the
        /// random rows cross the codec (stored as raw chunks) and come back.
        HalfRandom,
    }
    let sorted = lineitem_like(40_000);
    let orders: Vec<u64> = sorted.iter().step_by(4).copied().collect();
    let random: Vec<u64> = (0..20_000).map(|i| hash64(i, 5)).collect();
    let random_right: Vec<u64> = random.iter().step_by(3).copied().collect();
    let half: Vec<u64> = (0..20_000)
        .map(|i| if i % 2 == 0 { 77 } else { hash64(i, 6) })
        .collect();
    let half_right: Vec<u64> = half
        .iter()
        .skip(1)
        .step_by(2)
        .copied()
        .chain([77])
        .collect();
    for ranks in 1..=5 {
        for (left, right, shape) in [
            (&sorted, &orders, Shape::Sorted),
            (&random, &random_right, Shape::Random),
            (&half, &half_right, Shape::HalfRandom),
        ] {
            // Skew handling off: the half-random side's one key stays a key like the others.
            let opts = inner().skew(Skew::Off);
            let (want, _) = join(ranks, left, right, &opts, open);
            let matches = if shape == Shape::Random {
                right.len()
            } else {
                left.len()
            };
            assert_eq!(want.len(), matches);
            let (got, stats) = join(ranks, left, right, &opts.compress(Compression::On), open);
            assert_eq!(got, want, "{ranks} ranks, {shape:?}");
            for s in &stats {
                if ranks == 1 {
                    assert!(s.traffic.is_empty());
                    continue;
                }
                assert_eq!(s.traffic.len(), 4, "two columns a side: {:?}", s.traffic);
                for t in &s.traffic {
                    assert_eq!(t.level, Level::AllToAll);
                    match shape {
                        Shape::Sorted => {
                            assert!(t.scheme.is_some(), "{t:?}");
                            // The keys move narrowed to 4 bytes: less left to shrink.
                            let least = if t.column == 0 { 1.5 } else { 2.0 };
                            assert!(t.ratio() > least, "{t:?}");
                            assert!(t.estimated_ratio >= MIN_RATIO, "{t:?}");
                        }
                        Shape::Random => {
                            assert_eq!(t.scheme, None, "{t:?}");
                            assert_eq!(t.raw_bytes, t.sent_bytes, "{t:?}");
                        }
                        // Its right side is all random.
                        Shape::HalfRandom => {
                            assert_eq!(t.scheme.is_some(), t.side == "left", "{t:?}")
                        }
                    }
                }
                let sent: u64 = s.traffic.iter().map(|t| t.sent_bytes).sum();
                assert_eq!(s.bytes_on_wire, sent);
            }
        }
    }
}

/// A table whose keys compress and whose payload does not (random 64-bit words): the keys
/// travel packed, the payload raw in a collective of its own, on every rank count; the
/// output equals the uncompressed join's.
#[test]
fn compressed_and_raw_columns_of_one_table_both_arrive() {
    let open = || CpuBackend::new();
    // Sorted unique keys (their deltas compress); a random word a key (no runs either).
    let left: Vec<u64> = (0..40_000).map(|i| i * 8 + 1).collect();
    let right: Vec<u64> = left.iter().step_by(4).copied().collect();
    let random = |k: u64| hash64(k, 9);
    let opts = inner().skew(Skew::Off);
    for ranks in 2..=5 {
        let (want, _) = join_with(ranks, (&left, &right), &random, &opts, &open);
        assert_eq!(want.len(), right.len());
        let on = opts.compress(Compression::On);
        let (got, stats) = join_with(ranks, (&left, &right), &random, &on, &open);
        assert_eq!(got, want, "{ranks} ranks");
        for s in &stats {
            assert_eq!(s.traffic.len(), 4, "two columns a side: {:?}", s.traffic);
            for t in &s.traffic {
                assert_eq!(t.scheme.is_some(), t.column == 0, "{t:?}");
                if t.column == 1 {
                    assert_eq!(t.raw_bytes, t.sent_bytes, "{t:?}");
                }
            }
        }
    }
}

/// The two-level shuffle compresses the step across nodes only.
#[test]
fn the_two_level_shuffle_compresses_across_nodes_only() {
    let open = || CpuBackend::new();
    let left = lineitem_like(30_000);
    let right: Vec<u64> = left.iter().step_by(4).copied().collect();
    let opts = inner().shuffle(Shuffle::TwoLevel { ranks_per_node: 2 });
    let (want, _) = join(4, &left, &right, &opts, &open);
    let (got, stats) = join(4, &left, &right, &opts.compress(Compression::On), &open);
    assert_eq!(got, want);
    for s in &stats {
        assert!(s.traffic.iter().any(|t| t.level == Level::AcrossNodes));
        assert!(s.traffic.iter().any(|t| t.level == Level::WithinNode));
        for t in &s.traffic {
            assert_eq!(t.scheme.is_some(), t.level == Level::AcrossNodes, "{t:?}");
        }
    }
}

/// Automatic compression follows the link: a slow configured link compresses, a fast one
/// (faster than the codec's round trip) does not and samples nothing, and a measured one
/// decides alike on every rank.
#[test]
fn automatic_compression_follows_the_link() {
    let open = || CpuBackend::new();
    let left = lineitem_like(20_000);
    let right: Vec<u64> = left.iter().step_by(4).copied().collect();
    let (want, _) = join(3, &left, &right, &inner(), &open);
    for (link, compressed) in [
        (Some(1.0), Some(true)),
        (Some(1e6), Some(false)),
        (None, None),
    ] {
        let auto = Compression::Auto {
            break_even_gbps: 300.0,
            link_gbps: link,
        };
        let (got, stats) = join(3, &left, &right, &inner().compress(auto), &open);
        assert_eq!(got, want, "{link:?}");
        let decisions: Vec<Vec<bool>> = stats
            .iter()
            .map(|s| s.traffic.iter().map(|t| t.scheme.is_some()).collect())
            .collect();
        assert!(decisions.windows(2).all(|w| w[0] == w[1]), "{decisions:?}");
        if let Some(c) = compressed {
            assert!(
                decisions[0].iter().all(|&d| d == c),
                "{link:?}: {decisions:?}"
            );
            // Sampled ratios where the link is slow; none sampled past the round trip.
            let sampled = stats[0].traffic.iter().any(|t| t.estimated_ratio > 1.0);
            assert_eq!(sampled, c, "{link:?}: {:?}", stats[0].traffic);
        }
        for s in &stats {
            assert_eq!(s.link_gbps.len(), 1, "{:?}", s.link_gbps);
            assert!(s.link_gbps[0].1 > 0.0);
            assert_eq!(s.links_measured, usize::from(link.is_none()));
        }
    }
}

/// A link is measured once per communicator: the second join of the same shape over the same
/// ranks decides from the first one's rate, measures nothing, and gives the same rows.
#[test]
fn a_measured_link_is_reused_by_the_next_join() {
    let left = lineitem_like(20_000);
    let right: Vec<u64> = left.iter().step_by(4).copied().collect();
    let opts = inner().compress(Compression::Auto {
        break_even_gbps: 300.0,
        link_gbps: None,
    });
    let world = LocalWorld::new(3, CommConfig::default()).unwrap();
    let results = world.run(|comm| {
        let b = CpuBackend::new();
        let (r, n) = (comm.rank(), comm.size());
        let mut runs = Vec::new();
        for _ in 0..2 {
            let (out, stats) = distributed_join_columns(
                &comm,
                &b,
                share(&b, &left, r, n),
                share(&b, &right, r, n),
                &opts,
            )?;
            runs.push((out.rows, stats.links_measured, stats.link_gbps));
        }
        Ok::<_, Error>(runs)
    });
    for (r, runs) in results.into_iter().enumerate() {
        let runs = runs.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        let [(rows_1, measured_1, rates_1), (rows_2, measured_2, rates_2)] = &runs[..] else {
            panic!("rank {r}: two joins, {} results", runs.len());
        };
        assert_eq!((*measured_1, *measured_2), (1, 0), "rank {r}");
        assert_eq!(rows_1, rows_2, "rank {r}");
        assert_eq!(rates_1.len(), 1, "rank {r}: {rates_1:?}");
        assert_eq!(rates_1, rates_2, "rank {r}");
    }
}

/// A pipeline of no chunk is a typed error on every rank.
#[test]
fn zero_chunks_are_refused() {
    let world = LocalWorld::new(3, CommConfig::default()).unwrap();
    let results = world.run(|comm| {
        let cpu = CpuBackend::new();
        let keys = [1u64, 2, 3];
        let (r, n) = (comm.rank(), comm.size());
        distributed_join_columns(
            &comm,
            &cpu,
            share(&cpu, &keys, r, n),
            share(&cpu, &keys, r, n),
            &inner().pipeline_chunks(0),
        )
        .map(drop)
    });
    for r in &results {
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    }
}

/// Pipelined joins equal the blocking one for 1 to 7 chunks (more chunks than rows too), with
/// the one- and the two-level shuffle, compressed or not, heavy keys kept in place, and report
/// every chunk's shuffle and probe on the timeline.
#[test]
fn pipelined_joins_equal_the_blocking_join() {
    pipelines_equal_blocking(&|| CpuBackend::new());
}

fn pipelines_equal_blocking<B: DistributedBackend>(open: &(dyn Fn() -> B + Sync)) {
    // 40 % of the left rows on one key (heavy), the rest sorted with repeats.
    let left: Vec<u64> = lineitem_like(6_000)
        .into_iter()
        .enumerate()
        .map(|(i, k)| if hash64(i as u64, 9) % 10 < 4 { 9 } else { k })
        .collect();
    let right: Vec<u64> = lineitem_like(6_000)
        .into_iter()
        .step_by(4)
        .chain([9])
        .collect();
    let tiny = [9u64, 1, 17];
    for (ranks, shuffle) in [
        (2, Shuffle::OneLevel),
        (3, Shuffle::OneLevel),
        (4, Shuffle::TwoLevel { ranks_per_node: 2 }),
    ] {
        for (left, right) in [(&left[..], &right[..]), (&tiny[..], &tiny[..])] {
            let blocking = inner().shuffle(shuffle);
            let (want, _) = join(ranks, left, right, &blocking, open);
            // Auto probes these small right sides with a hash table, PHJ-OM with the right
            // side partitioned once (PartitionedProbe).
            for (chunks, algorithm) in
                (1..=7).flat_map(|c| [(c, Algorithm::Auto), (c, Algorithm::PhjOm)])
            {
                for compress in [Compression::Off, Compression::On] {
                    let mut opts = blocking.pipeline_chunks(chunks).compress(compress);
                    opts.join = opts.join.algorithm(algorithm);
                    let (got, stats) = join(ranks, left, right, &opts, open);
                    assert_eq!(
                        got, want,
                        "{ranks} ranks, {shuffle:?}, {chunks} chunks, {algorithm}"
                    );
                    for s in &stats {
                        let Some(p) = &s.pipeline else {
                            assert_eq!(chunks, 1);
                            continue;
                        };
                        assert_eq!(p.chunks, chunks);
                        for (lane, what) in [("communication", "shuffle"), ("compute", "probe")] {
                            let mut seen: Vec<usize> = (s.timeline.iter())
                                .filter(|t| t.lane == lane && t.what == what)
                                .filter_map(|t| t.chunk)
                                .collect();
                            seen.sort_unstable();
                            assert_eq!(seen, (0..chunks).collect::<Vec<_>>(), "{lane}");
                        }
                        assert!(s.timeline.iter().all(|t| t.end_ms >= t.start_ms));
                        assert!(p.hidden_ms() >= 0.0 && p.wall_ms > 0.0);
                    }
                }
            }
        }
    }
}

/// Every kind through the pipeline, with payloads on both sides, equals the blocking join.
#[test]
fn every_kind_pipelined_equals_blocking() {
    let open = || CpuBackend::new();
    let left: Vec<u64> = (0..3_000).map(|i| hash64(i, 3) % 1_500).collect();
    let right: Vec<u64> = (0..1_000).map(|i| hash64(i, 4) % 2_000).collect();
    for kind in JoinKind::ALL {
        let blocking = DistributedOptions::new(JoinOptions::new(kind))
            .placement(Placement::Partitioned)
            .shuffle(Shuffle::OneLevel);
        let rows = |opts: &DistributedOptions| {
            let world = LocalWorld::new(3, CommConfig::default()).unwrap();
            let mut all: Vec<Vec<u64>> = Vec::new();
            for o in world.run(|comm| {
                let b = open();
                let (r, n) = (comm.rank(), comm.size());
                let (out, _) = distributed_join_columns(
                    &comm,
                    &b,
                    share(&b, &left, r, n),
                    share(&b, &right, r, n),
                    opts,
                )?;
                let cols: Vec<Vec<u64>> = (out.left.iter().chain(&out.right))
                    .map(|c| match c {
                        Column::U64(c) => b.download(c),
                        _ => Err(Error::Corrupt("type".into())),
                    })
                    .collect::<Result<_, _>>()?;
                let valid = out
                    .right_valid
                    .as_ref()
                    .map(|v| b.download(v))
                    .transpose()?;
                Ok((0..out.rows as usize)
                    .map(|i| {
                        let mut row: Vec<u64> = cols.iter().map(|c| c[i]).collect();
                        row.push(valid.as_ref().map_or(1, |v| u64::from(v[i])));
                        row
                    })
                    .collect::<Vec<_>>())
            }) {
                all.extend(o.unwrap());
            }
            all.sort_unstable();
            all
        };
        let want = rows(&blocking);
        assert!(!want.is_empty(), "{kind:?}");
        assert_eq!(rows(&blocking.pipeline_chunks(4)), want, "{kind:?}");
    }
}

/// An output over the budget on one rank is its own error there and [`Error::PeerFailed`]
/// on the others, never a hang: a chunk's own output over it (the probe lane fails
/// mid-pipeline), every chunk's within it but not their sum (as the blocking join refuses).
#[test]
fn an_output_over_the_budget_on_one_rank_is_an_error_everywhere() {
    // Key 7 meets 400 × 400 rows (2.56 MB of two u64 payloads) on the rank that owns it.
    let keys: Vec<u64> = (0..1_200).map(|i| if i % 3 == 0 { 7 } else { i }).collect();
    for (budget, chunks) in [(1 << 16, 3), (1 << 20, 7), (1 << 20, 1)] {
        let world = LocalWorld::new(3, CommConfig::default()).unwrap();
        let results = world.run(|comm| {
            let cpu = CpuBackend::new();
            let (r, n) = (comm.rank(), comm.size());
            let opts =
                DistributedOptions::new(JoinOptions::new(JoinKind::Inner).memory_budget(budget))
                    .placement(Placement::Partitioned)
                    .skew(Skew::Off)
                    .pipeline_chunks(chunks);
            let (left, right) = (share(&cpu, &keys, r, n), share(&cpu, &keys, r, n));
            distributed_join_columns(&comm, &cpu, left, right, &opts).map(drop)
        });
        let over = results
            .iter()
            .filter(|r| matches!(r, Err(Error::OutputOverBudget { .. })))
            .count();
        assert_eq!(over, 1, "budget {budget}, {chunks} chunks: {results:?}");
        for r in &results {
            assert!(
                matches!(
                    r,
                    Err(Error::OutputOverBudget { .. } | Error::PeerFailed { .. })
                ),
                "{r:?}"
            );
        }
    }
}

/// 8-byte keys move as their low 32 bits only where every rank's keys of both sides lie
/// within 2^32 values: keys 2^40 apart on different ranks (each rank's own range narrow) keep
/// their 8 bytes and do not meet; keys at the top of the range narrow and join; random keys
/// keep their 8 bytes. The joined rows are the reference's on 2 to 4 ranks.
#[test]
fn keys_narrow_only_where_every_ranks_keys_allow() {
    narrowing_is_decided_by_every_rank(&|| CpuBackend::new());
}

fn narrowing_is_decided_by_every_rank<B: DistributedBackend>(open: &(dyn Fn() -> B + Sync)) {
    let far = 1u64 << 40;
    let random: Vec<u64> = (0..3_000).map(|i| hash64(i, 8)).collect();
    let top: Vec<u64> = (0..3_000).map(|i| u64::MAX - i * 3).collect();
    for ranks in 2..=4 {
        // Rank r holds rows r, r + ranks, ...; every key of rank r is r * 2^40 + a small
        // number, on both sides. Right row i has left row i + 1's low word on another rank
        // (a false match if the keys were narrowed), and left rows 0 .. ranks meet their
        // copies on their own rank.
        let n = ranks as u64;
        let key = |rank: u64, low: u64| rank * far + low;
        let apart_left: Vec<u64> = (0..n * 4).map(|i| key(i % n, i)).collect();
        let apart_right: Vec<u64> = (0..n * 4)
            .map(|i| key(i % n, i + 1))
            .chain(apart_left[..ranks].iter().copied())
            .collect();
        for (left, right, narrowed) in [
            (&apart_left, &apart_right, false),
            (&top, &top[..1_000].to_vec(), true),
            (&random, &random[..1_000].to_vec(), false),
        ] {
            for opts in [inner(), inner().placement(Placement::Replicated)] {
                let (got, stats) = join(ranks, left, right, &opts, open);
                let mut want: Vec<(u64, u64)> = left
                    .iter()
                    .flat_map(|&l| right.iter().filter(move |&&r| r == l).map(move |&r| (l, r)))
                    .collect();
                want.sort_unstable();
                assert_eq!(got, want, "{ranks} ranks, keys {:?}…", &left[..4]);
                for s in &stats {
                    assert_eq!(s.narrowed_keys, narrowed, "{ranks} ranks");
                }
            }
        }
    }
}

/// The same on one GPU shared by in-process CUDA ranks (each with its stream, and a second
/// stream for the pipeline's communication): the codec's (damaged slices too), the pipeline's
/// and the narrowing's GPU paths.
#[test]
fn compressed_and_pipelined_shuffles_with_gpu_ranks_sharing_one_gpu() {
    let Some(open) =
        common::gpu_ranks("compressed_and_pipelined_shuffles_with_gpu_ranks_sharing_one_gpu")
    else {
        return;
    };
    compression_round_trips(&open);
    damaged_slices_fail_everywhere(&open);
    pipelines_equal_blocking(&open);
    narrowing_is_decided_by_every_rank(&open);
}

/// A communicator that damages the first `u64` buffer this rank receives (a compressed
/// table's packed slices, where every column compresses): word `word` of the first slice's
/// header goes up by one. Everything else passes through.
struct Damaging<C> {
    inner: C,
    word: usize,
    armed: AtomicBool,
}

impl<C: Communicator> Damaging<C> {
    /// What came in, damaged where this is the first `u64` buffer of an armed rank.
    fn received<T: Element>(
        &self,
        b: &C::Backend,
        (buf, counts): Received<C::Backend, T>,
    ) -> joinkit_cuda::Result<Received<C::Backend, T>> {
        if TypeId::of::<T>() != TypeId::of::<u64>() || !self.armed.swap(false, Ordering::Relaxed) {
            return Ok((buf, counts));
        }
        let mut host = b.download(&buf)?;
        if let Some(w) = (&mut host as &mut dyn Any).downcast_mut::<Vec<u64>>() {
            assert!(w.len() > self.word, "a packed slice has its header");
            w[self.word] += 1;
        }
        Ok((b.upload(&host)?, counts))
    }
}

impl<C: Communicator> Communicator for Damaging<C> {
    type Backend = C::Backend;

    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn config(&self) -> CommConfig {
        self.inner.config()
    }

    fn link_rates(&self) -> &LinkRates {
        self.inner.link_rates()
    }

    fn all_gather(&self, values: &[u64]) -> joinkit_cuda::Result<Vec<u64>> {
        self.inner.all_gather(values)
    }

    fn all_to_all_v<T: Element>(
        &self,
        b: &C::Backend,
        send: &<C::Backend as Backend>::Buf<T>,
        send_counts: &[usize],
    ) -> joinkit_cuda::Result<Received<C::Backend, T>> {
        self.received(b, self.inner.all_to_all_v(b, send, send_counts)?)
    }

    fn all_gather_v<T: Element>(
        &self,
        b: &C::Backend,
        send: &<C::Backend as Backend>::Buf<T>,
    ) -> joinkit_cuda::Result<Received<C::Backend, T>> {
        self.received(b, self.inner.all_gather_v(b, send)?)
    }

    fn split(&self, color: usize, key: usize) -> joinkit_cuda::Result<Self> {
        Ok(Damaging {
            inner: self.inner.split(color, key)?,
            word: self.word,
            armed: AtomicBool::new(false),
        })
    }
}

/// Compressed slices damaged in transit on one rank (the rows its header promises, so the
/// decoded rows differ; a column's words, so its ranges overrun the slice) are that rank's own
/// error ([`Error::Corrupt`], or [`Error::LengthMismatch`] from the decoder) and
/// [`Error::PeerFailed`] naming it on the others, never a hang or a wrong answer: shuffled
/// (all-to-all) and replicated (all-gather) tables, 2 to 4 ranks, the damaged rank first,
/// inside or last.
#[test]
fn a_compressed_slice_damaged_on_one_rank_is_an_error_everywhere() {
    damaged_slices_fail_everywhere(&|| CpuBackend::new());
}

fn damaged_slices_fail_everywhere<B: DistributedBackend>(open: &(dyn Fn() -> B + Sync)) {
    let left = lineitem_like(20_000);
    let right: Vec<u64> = left.iter().step_by(4).copied().collect();
    for placement in [Placement::Partitioned, Placement::Replicated] {
        let opts = inner()
            .placement(placement)
            .skew(Skew::Off)
            .compress(Compression::On);
        for (ranks, victim, word) in [(2, 0, 0), (2, 1, 1), (3, 1, 0), (4, 3, 1), (4, 2, 2)] {
            let world = LocalWorld::new(ranks, CommConfig::default()).unwrap();
            let results = world.run(|comm| {
                let b = open();
                let (r, n) = (comm.rank(), comm.size());
                let comm = Damaging {
                    inner: comm,
                    word,
                    armed: AtomicBool::new(r == victim),
                };
                let (l, rr) = (share(&b, &left, r, n), share(&b, &right, r, n));
                distributed_join_columns(&comm, &b, l, rr, &opts).map(drop)
            });
            let case = format!("{placement:?}, {ranks} ranks, rank {victim}, word {word}");
            for (r, result) in results.iter().enumerate() {
                if r == victim {
                    assert!(
                        matches!(
                            result,
                            Err(Error::Corrupt(_) | Error::LengthMismatch { .. })
                        ),
                        "{case}: {result:?}"
                    );
                } else {
                    assert!(
                        matches!(result, Err(Error::PeerFailed { rank, .. }) if *rank == victim),
                        "{case}: rank {r}: {result:?}"
                    );
                }
            }
        }
    }
}
