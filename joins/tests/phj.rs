//! The partitioned hash joins with tiny CPU pieces, so small random inputs exercise what large
//! ones do on a GPU: R partitions split into many build pieces (each joined with every probe
//! chunk of its partition), probe chunks, the self-join check of `right_unique` across pieces,
//! the mixed-key fallback (also with payload pairs carried through it), bucket chains with many
//! buckets; and the co-partition join trait on hand-made pieces. Everything equals the naive reference as a multiset.

use joinkit::reference::join_pairs;
use joinkit::{
    Algorithm, Backend, CoJoined, CoPartitionJoin, CoSide, CoWant, Column, CpuBackend, Error,
    JoinKind, JoinOptions, NULL_ROW, Pieces, join_columns, join_rows, set_cpu_phj_limits,
};
use joinkit_cuda::Key;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

mod common;

use common::{Shape, rows_of, runner, shaped_expected, shaped_table};

/// Key columns with the shapes that break partitioned joins: few distinct keys (hot keys far
/// above a piece), multiples of a power of two (one raw-bit partition), extremes.
fn keys<K: Key + Arbitrary>() -> impl Strategy<Value = Vec<K>> {
    prop_oneof![
        proptest::collection::vec((0u64..48).prop_map(K::from_u64), 0..300),
        proptest::collection::vec(any::<K>(), 0..200),
        (0usize..150).prop_map(|n| vec![K::from_u64(7); n]),
        proptest::collection::vec((0u64..64).prop_map(|k| K::from_u64(k << 12)), 0..200),
        proptest::collection::vec(
            prop_oneof![Just(K::from_u64(0)), Just(K::MAX), Just(K::from_u64(1))],
            0..80
        ),
    ]
}

fn pairs<K: Key>(l: &[K], r: &[K], opts: &JoinOptions) -> Result<Vec<(u32, u32)>, Error> {
    let b = CpuBackend::new();
    let (rows, stats) = join_rows(&b, &b.upload(l)?, &b.upload(r)?, opts)?;
    let right = rows
        .right
        .unwrap_or_else(|| vec![NULL_ROW; rows.left.len()]);
    assert_eq!(stats.algorithm, opts.algorithm);
    let mut p: Vec<(u32, u32)> = rows.left.into_iter().zip(right).collect();
    p.sort_unstable();
    Ok(p)
}

fn check<K: Key + Arbitrary>() {
    set_cpu_phj_limits(4, 8).unwrap();
    runner(48)
        .run(
            &(keys::<K>(), keys::<K>(), 2usize..6, 1usize..12),
            |(l, r, cap, chunk)| {
                set_cpu_phj_limits(cap, chunk).unwrap();
                let r_unique = common::all_unique(&r);
                for unique in [false, true].into_iter().filter(|&u| !u || r_unique) {
                    paired_payloads(&l, &r, unique)?;
                }
                for kind in JoinKind::ALL {
                    let want = join_pairs(&l, &r, kind);
                    for algorithm in [Algorithm::PhjUm, Algorithm::PhjOm] {
                        let opts = JoinOptions::new(kind).algorithm(algorithm);
                        prop_assert_eq!(
                            &pairs(&l, &r, &opts).unwrap(),
                            &want,
                            "{} {:?}",
                            algorithm,
                            kind
                        );
                        let got = pairs(&l, &r, &opts.right_unique(true));
                        if r_unique {
                            prop_assert_eq!(
                                &got.unwrap(),
                                &want,
                                "{} {:?} unique",
                                algorithm,
                                kind
                            );
                        } else {
                            prop_assert_eq!(
                                got.err(),
                                Some(Error::DuplicateKey { side: "right" }),
                                "{} {:?}",
                                algorithm,
                                kind
                            );
                        }
                    }
                }
                Ok(())
            },
        )
        .unwrap();
}

/// An inner PHJ-OM join of two payloads a side, carried through the partition (tiny pieces:
/// also through the mixed-key fallback): two u32 interleaved and split by the match, or two
/// u64, the second partitioned in its own pass; equals the reference's rows, with no
/// materialize phase (the CPU twin's gather by position of a second column is part of its
/// match).
fn paired_payloads<K: Key>(l: &[K], r: &[K], unique: bool) -> Result<(), TestCaseError> {
    let b = CpuBackend::new();
    let opts = JoinOptions::new(JoinKind::Inner)
        .algorithm(Algorithm::PhjOm)
        .right_unique(unique);
    for shape in [Shape::TwoU32, Shape::TwoU64] {
        let (lt, rt) = (
            shaped_table(&b, l, 10, shape),
            shaped_table(&b, r, 20, shape),
        );
        let (out, stats) = join_columns(&b, &lt, &rt, &opts).unwrap();
        prop_assert!(
            stats.phases.iter().all(|p| p.0 != "materialize"),
            "{:?}",
            stats.phases
        );
        let mut got = rows_of(&b, &out);
        got.sort_unstable();
        let want = shaped_expected(l, r, JoinKind::Inner, [shape; 2]);
        prop_assert_eq!(got, want, "{:?} unique {}", shape, unique);
    }
    Ok(())
}

#[test]
fn tiny_pieces_u32() {
    check::<u32>();
}

#[test]
fn tiny_pieces_u64() {
    check::<u64>();
}

/// A co-partition side naming its rows by `ids` (or by row when `None`), whole words, no
/// second column.
fn plain_side<'a>(
    keys: &'a Vec<u32>,
    pieces: &'a Pieces<CpuBackend>,
    ids: Option<&'a Column<CpuBackend>>,
) -> CoSide<'a, CpuBackend, u32> {
    CoSide::new(keys, pieces).with_ids(ids)
}

/// The (probe, build) id pairs of a join of u32 probe ids and u64 build ids, in output order.
fn id_pairs(joined: &CoJoined<CpuBackend>) -> Vec<(u32, u64)> {
    let Some(([Column::U32(pl)], [Column::U64(pr)])) =
        joined.pairs.as_ref().map(|(p, b)| (&p[..], &b[..]))
    else {
        panic!("pairs of the ids' widths expected");
    };
    pl.iter().copied().zip(pr.iter().copied()).collect()
}

/// [`id_pairs`], sorted.
fn sorted_id_pairs(joined: &CoJoined<CpuBackend>) -> Vec<(u32, u64)> {
    let mut got = id_pairs(joined);
    got.sort_unstable();
    got
}

/// The (probe id, build id) pairs of equal keys, partition by partition (each side's
/// partitions between its `offsets`), sorted: what a co-partition join finds.
fn nested_loop(
    (probe_offsets, build_offsets): (&[u64], &[u64]),
    (probe_keys, build_keys): (&[u32], &[u32]),
    (probe_ids, build_ids): (&[u32], &[u64]),
) -> Vec<(u32, u64)> {
    let mut want = Vec::new();
    for (p, r) in probe_offsets.windows(2).zip(build_offsets.windows(2)) {
        for i in p[0] as usize..p[1] as usize {
            for j in r[0] as usize..r[1] as usize {
                if probe_keys[i] == build_keys[j] {
                    want.push((probe_ids[i], build_ids[j]));
                }
            }
        }
    }
    want.sort_unstable();
    want
}

/// The join of `probe` and `build` (ids through maps: 4-byte probe ids, 8-byte build ids) with
/// the build ids as words of two halves, then with a second carried column beside each side's
/// ids: the pairs equal `want` both ways, each side's two columns row-aligned.
fn split_words_and_second_columns(
    b: &CpuBackend,
    (probe, build): (CoSide<'_, CpuBackend, u32>, CoSide<'_, CpuBackend, u32>),
    (probe_ids, build_ids): (&[u32], &[u64]),
    want: &[(u32, u64)],
) {
    let pairs = CoWant::default().with_pairs(true);
    let split = b
        .copartition_join(&probe, &build.with_split_words(true), pairs)
        .unwrap();
    let Some(([Column::U32(sl)], [Column::U32(lo), Column::U32(hi)])) =
        split.pairs.as_ref().map(|(p, b)| (&p[..], &b[..]))
    else {
        panic!("a u32 probe column and two u32 build halves expected");
    };
    let mut got: Vec<(u32, u64)> = (0..sl.len())
        .map(|i| (sl[i], u64::from(lo[i]) | u64::from(hi[i]) << 32))
        .collect();
    got.sort_unstable();
    assert_eq!(got, want);
    let probe_second = Column::U32(probe_ids.iter().map(|&i| i + 1000).collect());
    let build_second = Column::U64(build_ids.iter().map(|&i| !i).collect());
    let two = b
        .copartition_join(
            &probe.with_second(Some(&probe_second)),
            &build.with_second(Some(&build_second)),
            pairs,
        )
        .unwrap();
    let Some(([Column::U32(p1), Column::U32(p2)], [Column::U64(b1), Column::U64(b2)])) =
        two.pairs.as_ref().map(|(p, b)| (&p[..], &b[..]))
    else {
        panic!("two probe columns and two build columns of the ids' widths expected");
    };
    let mut got: Vec<(u32, u64)> = (0..p1.len())
        .map(|i| {
            assert_eq!((p2[i], b2[i]), (p1[i] + 1000, !b1[i]), "row {i}");
            (p1[i], b1[i])
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, want);
}

/// The trait on hand-made pieces: two partitions, build pieces of 2 rows, probe pieces of 3,
/// ids through maps (4-byte probe ids, 8-byte build ids), flags, split words and second
/// columns; pairs equal the per-partition nested loop. Signed ids are refused.
#[test]
fn copartition_join_on_hand_made_pieces() {
    let b = CpuBackend::new();
    // Partition 0: rows 0..5, partition 1: rows 5..7 (build); 0..4 and 4..9 (probe).
    let build_keys: Vec<u32> = vec![1, 2, 1, 3, 1, 9, 9];
    let probe_keys: Vec<u32> = vec![1, 4, 3, 1, 9, 9, 2, 9, 0];
    let (build_offsets, probe_offsets) = (vec![0, 5, 7], vec![0, 4, 9]);
    let bp = b.contiguous_pieces(&build_offsets, 2).unwrap();
    let pp = b.contiguous_pieces(&probe_offsets, 3).unwrap();
    assert_eq!(bp.offsets, vec![0, 3, 4]);
    assert_eq!(bp.len, vec![2, 2, 1, 2]);
    assert_eq!((bp.max_per_partition, bp.max_len, bp.rows), (3, 2, 7));
    let build_ids: Vec<u64> = (0..7).map(|i| (1 << 40) + 100 + i).collect();
    let probe_ids: Vec<u32> = (0..9).map(|i| 8 - i).collect();
    let (probe_col, build_col) = (
        Column::U32(probe_ids.clone()),
        Column::U64(build_ids.clone()),
    );
    let want_all = CoWant::default().with_pairs(true).with_flags(Some(9));
    let probe = plain_side(&probe_keys, &pp, Some(&probe_col));
    let build = plain_side(&build_keys, &bp, Some(&build_col));
    let out = b.copartition_join(&probe, &build, want_all).unwrap();
    let signed = Column::I32(vec![0i32; 7]);
    let refused = b.copartition_join(&probe, &build.with_ids(Some(&signed)), want_all);
    assert!(matches!(refused.err(), Some(Error::InvalidArgument(_))));
    let want = nested_loop(
        (&probe_offsets, &build_offsets),
        (&probe_keys, &build_keys),
        (&probe_ids, &build_ids),
    );
    assert_eq!(sorted_id_pairs(&out), want);
    split_words_and_second_columns(&b, (probe, build), (&probe_ids, &build_ids), &want);
    // Refused: flags of a probe side of payload words (split or with a second column: flags
    // index ids), splitting 4-byte ids, a second column shorter than the keys, of another type
    // than the ids, or beside split words.
    let probe_words = Column::U64(probe_ids.iter().map(|&i| u64::from(i)).collect());
    for ids in [&probe_words, &probe_col] {
        let split_probe = probe.with_ids(Some(ids)).with_split_words(true);
        let refused = b.copartition_join(&split_probe, &build, want_all);
        assert!(matches!(refused.err(), Some(Error::InvalidArgument(_))));
    }
    let no_flags = want_all.with_flags(None);
    // Second columns of each type, and one too short.
    let probe_second = Column::U32(vec![0; probe_keys.len()]);
    let build_second = Column::U64(vec![0; probe_keys.len()]);
    let short_second = Column::U32(vec![0; probe_keys.len() - 1]);
    let refused = b.copartition_join(&probe.with_second(Some(&short_second)), &build, no_flags);
    assert!(matches!(refused.err(), Some(Error::LengthMismatch { .. })));
    for (probe_side, want_it) in [
        (probe.with_second(Some(&probe_second)), want_all),
        (probe.with_second(Some(&build_second)), no_flags),
        (
            probe
                .with_ids(Some(&probe_words))
                .with_split_words(true)
                .with_second(Some(&probe_words)),
            no_flags,
        ),
    ] {
        let refused = b.copartition_join(&probe_side, &build, want_it);
        assert!(matches!(refused.err(), Some(Error::InvalidArgument(_))));
    }
    assert_eq!(out.total, want.len() as u64);
    // A limit on the pairs: one under the total gives the count and the flags, no pairs; the
    // total itself gives the pairs.
    let n = want.len() as u64;
    let capped = b
        .copartition_join(&probe, &build, want_all.with_max_pairs(Some(n - 1)))
        .unwrap();
    assert!(capped.pairs.is_none());
    assert_eq!((capped.total, &capped.flags), (n, &out.flags));
    let fits = b
        .copartition_join(&probe, &build, want_all.with_max_pairs(Some(n)))
        .unwrap();
    assert_eq!(fits.flags, out.flags);
    assert_eq!(sorted_id_pairs(&fits), want);
    let none = b
        .copartition_join(&probe, &build, want_all.with_max_pairs(Some(0)))
        .unwrap();
    assert!(none.pairs.is_none() && none.total == n);
    let mut flagged: Vec<u32> = (0..9u32)
        .filter(|&i| out.flags.as_ref().unwrap()[i as usize] == 1)
        .collect();
    flagged.sort_unstable();
    let mut expect: Vec<u32> = want.iter().map(|p| p.0).collect();
    expect.sort_unstable();
    expect.dedup();
    assert_eq!(flagged, expect);
    // The build side's duplicate key inside one piece (rows 0 and 2 are in different pieces;
    // rows 5 and 6 share one).
    let dup = b.copartition_join(
        &plain_side(&probe_keys, &pp, None),
        &plain_side(&build_keys, &bp, None),
        CoWant::default().with_pairs(true).with_unique_build(true),
    );
    assert_eq!(dup.err(), Some(Error::DuplicateKey { side: "build" }));
    // Still found when a limit under the probe rows makes the match count first.
    let dup = b.copartition_join(
        &plain_side(&probe_keys, &pp, None),
        &plain_side(&build_keys, &bp, None),
        CoWant::default()
            .with_pairs(true)
            .with_unique_build(true)
            .with_max_pairs(Some(1)),
    );
    assert_eq!(dup.err(), Some(Error::DuplicateKey { side: "build" }));
    // Mismatched fan-outs and oversized build pieces are typed errors.
    let other = b.contiguous_pieces(&vec![0, 9], 3).unwrap();
    let side = |pieces| plain_side(&probe_keys, pieces, None);
    assert!(matches!(
        b.copartition_join(&side(&other), &side(&bp), CoWant::default()),
        Err(Error::LengthMismatch { .. })
    ));
    let long = joinkit::MAX_BUILD_CAPACITY + 1;
    let long_keys = vec![5u32; long];
    let huge = b.contiguous_pieces(&vec![0, long as u64], long).unwrap();
    let huge_probe = b.contiguous_pieces(&vec![0, long as u64], 7).unwrap();
    let long_side = |pieces| plain_side(&long_keys, pieces, None);
    assert!(matches!(
        b.copartition_join(
            &long_side(&huge_probe),
            &long_side(&huge),
            CoWant::default()
        ),
        Err(Error::InvalidArgument(_))
    ));
    assert!(set_cpu_phj_limits(0, 8).is_err());
    assert!(set_cpu_phj_limits(long, 8).is_err());
    assert!(matches!(
        b.contiguous_pieces(&vec![3, 1], 2),
        Err(Error::Corrupt(_))
    ));
    assert!(matches!(
        b.contiguous_pieces(&Vec::new(), 2),
        Err(Error::InvalidArgument(_))
    ));
}

/// The CPU match's write pass: in the first partition every probe row matches every build row,
/// so a task's region (its probe rows) runs out inside an item and the rest is written from
/// that probe row on, over the next item of the same build piece (a pool of one thread: two
/// items a task); with ids and flags, split build words, and second columns, the pairs equal
/// the per-partition nested loop, and the flags mark the matched probe rows.
#[test]
fn copartition_join_writes_the_pairs_its_regions_cannot_hold() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    pool.install(|| {
        let b = CpuBackend::new();
        // Partition 0: 12 build rows of key 5 (pieces of 5, 5 and 2), 12 probe rows of 5 (4
        // pieces of 3): a task's first probe row fills 5 of its 6 rows; partition 1: build 7,
        // 8, probe 8, 9, 8.
        let build_keys: Vec<u32> = [vec![5; 12], vec![7, 8]].concat();
        let probe_keys: Vec<u32> = [vec![5; 12], vec![8, 9, 8]].concat();
        let (build_offsets, probe_offsets) = (vec![0, 12, 14], vec![0, 12, 15]);
        let bp = b.contiguous_pieces(&build_offsets, 5).unwrap();
        let pp = b.contiguous_pieces(&probe_offsets, 3).unwrap();
        let build_ids: Vec<u64> = (0..14).map(|i| (1 << 40) + 100 + i).collect();
        let probe_ids: Vec<u32> = (0..15).map(|i| 1000 + i).collect();
        let want = nested_loop(
            (&probe_offsets, &build_offsets),
            (&probe_keys, &build_keys),
            (&probe_ids, &build_ids),
        );
        assert_eq!(want.len(), 146);
        let (probe_col, build_col) = (
            Column::U32(probe_ids.clone()),
            Column::U64(build_ids.clone()),
        );
        let probe = plain_side(&probe_keys, &pp, Some(&probe_col));
        let build = plain_side(&build_keys, &bp, Some(&build_col));
        // Flags are indexed by probe id: room for every id.
        let want_all = CoWant::default().with_pairs(true).with_flags(Some(1015));
        let out = b.copartition_join(&probe, &build, want_all).unwrap();
        assert_eq!(out.total, 146);
        assert_eq!(sorted_id_pairs(&out), want);
        let flags = out.flags.as_ref().unwrap();
        let flagged: Vec<usize> = (0..flags.len()).filter(|&i| flags[i] == 1).collect();
        let matched: Vec<usize> = (1000..1012).chain([1012, 1014]).collect();
        assert_eq!(flagged, matched);
        split_words_and_second_columns(&b, (probe, build), (&probe_ids, &build_ids), &want);
        // A row that would still fit after one that did not goes to the write pass too, so the
        // pairs keep the walk's order: a region of 3 rows, the first row's 2 pairs fit, the
        // second's do not, the third's 1 would.
        let (offsets, keys) = (vec![0, 3], vec![5u32, 5, 6]);
        let pieces = b.contiguous_pieces(&offsets, 3).unwrap();
        let (ids, build_ids) = (Column::U32(vec![0, 1, 2]), Column::U64(vec![10, 11, 12]));
        let pairs_of = |probe, build| {
            b.copartition_join(&probe, &build, CoWant::default().with_pairs(true))
                .unwrap()
        };
        let out = pairs_of(
            plain_side(&keys, &pieces, Some(&ids)),
            plain_side(&keys, &pieces, Some(&build_ids)),
        );
        assert_eq!(
            id_pairs(&out),
            [(0, 11), (0, 10), (1, 11), (1, 10), (2, 12)]
        );
        // Regions past twice the probe side (10 build pieces meet a partition of 600 probe
        // rows): no region, every pair from the write pass.
        let (build_offsets, probe_offsets) = (vec![0, 20], vec![0, 600]);
        let build_keys = vec![5u32; 20];
        let probe_keys: Vec<u32> = (0..600).map(|i| if i % 60 == 0 { 5 } else { 6 }).collect();
        let bp = b.contiguous_pieces(&build_offsets, 2).unwrap();
        let pp = b.contiguous_pieces(&probe_offsets, 600).unwrap();
        let build_ids: Vec<u64> = (0..20).map(|i| 1 << 33 | i).collect();
        let probe_ids: Vec<u32> = (0..600).collect();
        let (probe_col, build_col) = (
            Column::U32(probe_ids.clone()),
            Column::U64(build_ids.clone()),
        );
        let out = pairs_of(
            plain_side(&probe_keys, &pp, Some(&probe_col)),
            plain_side(&build_keys, &bp, Some(&build_col)),
        );
        let want = nested_loop(
            (&probe_offsets, &build_offsets),
            (&probe_keys, &build_keys),
            (&probe_ids, &build_ids),
        );
        assert_eq!(want.len(), 200);
        assert_eq!(sorted_id_pairs(&out), want);
    });
}

/// PHJ-UM with more partitions than one bucket-chain pass offers takes the radix partition
/// instead (still GFUR); both equal the reference.
#[test]
fn phj_um_beyond_the_bucket_chain_fanout() {
    set_cpu_phj_limits(2, 3).unwrap();
    let r: Vec<u32> = (0..3000u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let l: Vec<u32> = (0..2500u32)
        .map(|i| (i * 7) % 3500)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    for kind in JoinKind::ALL {
        let want = join_pairs(&l, &r, kind);
        for algorithm in [Algorithm::PhjUm, Algorithm::PhjOm] {
            let opts = JoinOptions::new(kind)
                .algorithm(algorithm)
                .right_unique(true);
            assert_eq!(pairs(&l, &r, &opts).unwrap(), want, "{algorithm} {kind:?}");
        }
    }
}

/// Rows of `keys` grouped by partition `key % fanout`, in order: the keys so grouped and the
/// `fanout + 1` partition offsets.
fn by_key_mod(keys: &[u32], fanout: u32) -> (Vec<u32>, Vec<u64>) {
    let mut offsets = vec![0u64];
    let mut grouped = Vec::with_capacity(keys.len());
    for p in 0..fanout {
        grouped.extend(keys.iter().filter(|&&k| k % fanout == p));
        offsets.push(grouped.len() as u64);
    }
    (grouped, offsets)
}

/// The CPU match on a pool of 16 threads with fewer items than threads: a small build side in
/// 3 partitions of one piece each (the third without probe rows), 64 rows a key, and probe
/// pieces of whole partitions, which the match cuts into ranges of a few thousand rows (each
/// range building its piece's table again); also probe pieces too short to cut, and more
/// items than threads (nothing cut). With ids, flags (a left outer join's), a pair limit that
/// makes it count first, split words and second columns: the pairs equal the per-partition
/// nested loop, in the same order on every run; a unique build side checks its build-only
/// piece too.
#[test]
fn copartition_join_cuts_few_long_items_for_many_threads() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(16)
        .build()
        .unwrap();
    pool.install(|| {
        let b = CpuBackend::new();
        // Build keys 0..64 of 64 rows each, or 0..4096 once each; probe keys 3m and 3m + 1 for
        // m < 32 (none in the third partition; those of 64 and over meet only unique keys).
        let many: Vec<u32> = (0..4096).map(|i| i % 64).collect();
        let unique: Vec<u32> = (0..4096).collect();
        let probe_of = |n: u32| -> Vec<u32> { (0..n).map(|i| 3 * (i * 7 % 32) + i % 2).collect() };
        // (probe rows, probe piece rows): pieces of whole partitions (cut into ranges), too
        // short to cut, and 64 pieces (more items than threads).
        for (rows, piece) in [(1 << 15, 1 << 18), (4000, 1 << 18), (1 << 15, 512)] {
            let (probe_keys, probe_offsets) = by_key_mod(&probe_of(rows), 3);
            let pp = b.contiguous_pieces(&probe_offsets, piece).unwrap();
            let probe_ids: Vec<u32> = (0..rows).map(|i| i ^ 5).collect();
            let probe_col = Column::U32(probe_ids.clone());
            let probe = plain_side(&probe_keys, &pp, Some(&probe_col));
            for (keys, unique_build) in [(&many, false), (&unique, true)] {
                let (build_keys, build_offsets) = by_key_mod(keys, 3);
                let bp = b.contiguous_pieces(&build_offsets, 4096).unwrap();
                let build_ids: Vec<u64> = (0..4096).map(|i| (1 << 40) + i).collect();
                let build_col = Column::U64(build_ids.clone());
                let build = plain_side(&build_keys, &bp, Some(&build_col));
                let want = nested_loop(
                    (&probe_offsets, &build_offsets),
                    (&probe_keys, &build_keys),
                    (&probe_ids, &build_ids),
                );
                let n = want.len() as u64;
                let all = CoWant::default()
                    .with_pairs(true)
                    .with_flags(Some(rows as usize))
                    .with_unique_build(unique_build);
                let out = b.copartition_join(&probe, &build, all).unwrap();
                let case = format!("{rows} probe rows in pieces of {piece}, unique {unique_build}");
                assert_eq!(out.total, n, "{case}");
                assert_eq!(sorted_id_pairs(&out), want, "{case}");
                let again = b.copartition_join(&probe, &build, all).unwrap();
                assert_eq!(id_pairs(&again), id_pairs(&out), "{case}: order");
                let flags = out.flags.as_ref().unwrap();
                let flagged: Vec<u32> = (0..rows).filter(|&i| flags[i as usize] == 1).collect();
                let mut matched: Vec<u32> = want.iter().map(|p| p.0).collect();
                matched.sort_unstable();
                matched.dedup();
                assert_eq!(flagged, matched, "{case}");
                let counted = b
                    .copartition_join(&probe, &build, all.with_max_pairs(Some(n)))
                    .unwrap();
                assert_eq!(counted.flags, out.flags, "{case}");
                assert_eq!(sorted_id_pairs(&counted), want, "{case}: counted first");
                split_words_and_second_columns(&b, (probe, build), (&probe_ids, &build_ids), &want);
            }
            // 64 rows a key, or a duplicate only in the piece that meets no probe rows.
            let mut dup_keys = unique.clone();
            dup_keys[2] = 5;
            for keys in [&many, &dup_keys] {
                let (build_keys, build_offsets) = by_key_mod(keys, 3);
                let bp = b.contiguous_pieces(&build_offsets, 4096).unwrap();
                let dup = b.copartition_join(
                    &probe,
                    &plain_side(&build_keys, &bp, None),
                    CoWant::default().with_pairs(true).with_unique_build(true),
                );
                assert_eq!(dup.err(), Some(Error::DuplicateKey { side: "build" }));
            }
        }
    });
}
