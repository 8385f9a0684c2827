//! Every algorithm × kind, on both backends, equals the naive reference as a multiset: random
//! sizes including empty sides, duplicates on both sides, no matches, all rows on one key,
//! extreme key values; with the right side deduplicated, the same under `right_unique`; M:N
//! shapes of 1 … 1024 rows a key on either side. Auto's key samples equal their CPU twin, and
//! so do the chained tables built after them.
//! Materialized payloads are checked against the reference's pairs.

mod common;

#[cfg(feature = "cuda")]
use common::gpu;
use common::{
    Shape, expected_rows, keys, pairs_from, rows_of, shaped_expected, shaped_table, table,
};
use joinkit::reference::join_pairs;
use joinkit::{
    Algorithm, ChoiceParams, Column, CpuBackend, Error, JoinBackend, JoinKind, JoinOptions,
    MAX_SAMPLES, SAMPLE_GROUP_ROWS, SampleGroup, SampleRuns, Table, join_columns, join_rows,
};
use joinkit_cuda::Key;
use joinkit_cuda::hash::hash64;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

fn runner() -> proptest::test_runner::TestRunner {
    common::runner(32)
}

fn pairs_of<B: JoinBackend, K: Key>(
    b: &B,
    l: &[K],
    r: &[K],
    opts: &JoinOptions,
) -> Result<Vec<(u32, u32)>, Error> {
    let (dl, dr) = (b.upload(l)?, b.upload(r)?);
    let (rows, stats) = join_rows(b, &dl, &dr, opts)?;
    let mut p = pairs_from(b, &rows);
    assert_eq!(stats.output_rows, p.len() as u64);
    assert_ne!(stats.algorithm, Algorithm::Auto);
    p.sort_unstable();
    Ok(p)
}

/// Runs `check(right keys, kind, options)` for every kind and each of `algorithms`, with the
/// right keys as drawn, then deduplicated and promised unique (PK-FK: the partitioned joins'
/// one-pass match on CUDA).
fn each_case<K: Key>(
    r: &[K],
    algorithms: &[Algorithm],
    mut check: impl FnMut(&[K], JoinKind, JoinOptions) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let mut seen = std::collections::HashSet::new();
    let r_pk: Vec<K> = r.iter().copied().filter(|k| seen.insert(*k)).collect();
    for (r, unique) in [(r, false), (&r_pk[..], true)] {
        for kind in JoinKind::ALL {
            for &algorithm in algorithms {
                let opts = JoinOptions::new(kind)
                    .algorithm(algorithm)
                    .right_unique(unique);
                check(r, kind, opts)?;
            }
        }
    }
    Ok(())
}

/// Every concrete algorithm, then Auto.
fn every_algorithm_and_auto() -> Vec<Algorithm> {
    Algorithm::CONCRETE
        .into_iter()
        .chain([Algorithm::Auto])
        .collect()
}

/// Every algorithm (and Auto) and kind on `cases` pairs of key columns from `inputs`, the
/// right side as drawn and deduplicated ([`each_case`]), on both backends, against the
/// reference.
fn check_every_algorithm<K: Key>(
    test: &str,
    cases: u32,
    inputs: impl Strategy<Value = (Vec<K>, Vec<K>)>,
) {
    #[cfg(feature = "cuda")]
    let gpu = gpu(test);
    #[cfg(not(feature = "cuda"))]
    let _ = test;
    let algorithms = every_algorithm_and_auto();
    common::runner(cases)
        .run(&inputs, |(l, r)| {
            each_case(&r, &algorithms, |r, kind, opts| {
                let want = join_pairs(&l, r, kind);
                let got = pairs_of(&CpuBackend::new(), &l, r, &opts).unwrap();
                prop_assert_eq!(&got, &want, "cpu {:?}", opts);
                #[cfg(feature = "cuda")]
                if let Some(g) = &gpu {
                    let got = pairs_of(g, &l, r, &opts).unwrap();
                    prop_assert_eq!(&got, &want, "cuda {:?}", opts);
                }
                Ok(())
            })
        })
        .unwrap();
}

fn check_rows<K: Key + Arbitrary>(test: &str) {
    check_every_algorithm(test, 32, (keys::<K>(), keys::<K>()));
}

#[test]
fn every_algorithm_and_kind_u32() {
    check_rows::<u32>("every_algorithm_and_kind_u32");
}

#[test]
fn every_algorithm_and_kind_u64() {
    check_rows::<u64>("every_algorithm_and_kind_u64");
}

/// M:N shapes: a few keys with 1 … 1024 rows each on either side (at most 2^16 pairs), and
/// left rows that match nothing, in a shuffled order.
fn m_to_n<K: Key>() -> impl Strategy<Value = (Vec<K>, Vec<K>)> {
    let per_key = || proptest::sample::select(vec![1usize, 4, 16, 64, 256, 1024]);
    (per_key(), per_key(), 1usize..5, 0usize..50, any::<u64>()).prop_filter_map(
        "at most 2^16 pairs",
        |(left_per_key, right_per_key, keys, misses, seed)| {
            if keys * left_per_key * right_per_key > 1 << 16 {
                return None;
            }
            // Keys spread over the type's range (the top bits of a multiplicative hash).
            let key = |k: u64| K::from_u64(k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - K::BITS));
            let side = |per_key: usize, extra: &mut dyn Iterator<Item = K>| {
                let mut v: Vec<K> = (1..=keys as u64)
                    .flat_map(|k| std::iter::repeat_n(key(k), per_key))
                    .chain(extra)
                    .collect();
                v.sort_by_key(|k| hash64(k.to_u64(), seed));
                v
            };
            let left = side(left_per_key, &mut (0..misses as u64).map(|i| key(1000 + i)));
            let right = side(right_per_key, &mut std::iter::empty());
            Some((left, right))
        },
    )
}

/// Every algorithm and kind on M:N shapes, both backends, as the reference: the runs of equal
/// keys that make hash joins walk and Auto choose otherwise.
fn check_m_to_n<K: Key>(test: &str) {
    check_every_algorithm(test, 24, m_to_n::<K>());
}

#[test]
fn m_to_n_joins_match_the_reference_u32() {
    check_m_to_n::<u32>("m_to_n_joins_match_the_reference_u32");
}

#[test]
fn m_to_n_joins_match_the_reference_u64() {
    check_m_to_n::<u64>("m_to_n_joins_match_the_reference_u64");
}

/// Auto's reported plan on M:N inputs: the right side's sample sees its rows per key (exact
/// where every row is sampled), and the choice follows the kind and the rows per key. The
/// output is the reference's either way.
#[test]
fn auto_reports_how_it_chose_on_m_to_n_inputs() {
    use joinkit::ChoiceReason as Why;
    type Plan = (Algorithm, Option<Why>, Option<f64>);
    /// `right_rows` rows of `per_key` rows a key, and `left_rows` rows over the same keys.
    fn run<B: JoinBackend>(
        b: &B,
        (right_rows, per_key, left_rows): (u32, u32, u32),
        kind: JoinKind,
    ) -> Plan {
        let keys = right_rows / per_key;
        let right: Vec<u32> = (0..right_rows).map(|i| i % keys).collect();
        let left: Vec<u32> = (0..left_rows).map(|i| i % keys).collect();
        let (dl, dr) = (b.upload(&left).unwrap(), b.upload(&right).unwrap());
        let (rows, st) = join_rows(b, &dl, &dr, &JoinOptions::new(kind)).unwrap();
        let mut got = pairs_from(b, &rows);
        got.sort_unstable();
        assert_eq!(
            got,
            join_pairs(&left, &right, kind),
            "{kind:?} {per_key} a key"
        );
        (
            st.algorithm,
            st.reason,
            st.sampled.and_then(|s| s.right_rows_per_key),
        )
    }
    let cpu = CpuBackend::new();
    let small_side = |rows| ChoiceParams::for_backend(&cpu).small_side(rows);
    // 2^14 rows, 16 a key: no key skewed, the sample's rows per key near 16; PHJ-OM on any
    // pool. Of 4 a key, a small side on a pool of 3 threads or more, where the left outer join
    // runs NPHJ-chained.
    let (a, why, m) = run(&cpu, (1 << 14, 16, 2048), JoinKind::Inner);
    assert_eq!((a, why), (Algorithm::PhjOm, Some(Why::Partitioned)));
    assert!(m.is_some_and(|m| (10.0..24.0).contains(&m)), "{m:?}");
    let (a, why, _) = run(&cpu, (1 << 14, 16, 2048), JoinKind::LeftOuter);
    assert_eq!((a, why), (Algorithm::PhjOm, Some(Why::Partitioned)));
    let (a, why, m) = run(&cpu, (1 << 14, 4, 2048), JoinKind::LeftOuter);
    assert!(m.is_some_and(|m| (3.0..6.0).contains(&m)), "{m:?}");
    let expected = if small_side(1 << 14) {
        (Algorithm::NphjChained, Some(Why::SmallRightSide))
    } else {
        (Algorithm::PhjOm, Some(Why::Partitioned))
    };
    assert_eq!((a, why), expected);
    // Few distinct keys: the CPU's key-set table (NPHJ-open; NPHJ-chained on a GPU).
    let (a, why, _) = run(&cpu, (1 << 14, 16, 2048), JoinKind::LeftSemi);
    assert_eq!((a, why), (Algorithm::NphjOpen, Some(Why::FewDistinctKeys)));
    // 64 keys: the right side skewed (each key 1/64 of it), but a semi join on few keys does
    // not turn on the left side's skew, which is not sampled.
    let keys: Vec<u32> = (0..1u32 << 14).map(|i| i % 64).collect();
    let on_cpu = joinkit::Backend::upload(&cpu, &keys).unwrap();
    let (_, st) = join_rows(
        &cpu,
        &on_cpu,
        &on_cpu,
        &JoinOptions::new(JoinKind::LeftSemi),
    )
    .unwrap();
    let sampled = st.sampled.unwrap();
    assert_eq!(st.reason, Some(Why::FewDistinctKeys));
    assert!(sampled.right_top_key_share >= ChoiceParams::for_backend(&cpu).skew_share);
    assert_eq!(sampled.left_top_key_share, 0.0);
    // 1024 rows: every one sampled, so the rows per key are exact; 4 keys on both sides: a
    // small side on a pool of 3 threads or more (PHJ-OM, whose match cuts its few partitions'
    // probe rows over the threads), skewed (merged) on fewer.
    let (a, why, m) = run(&cpu, (1024, 256, 64), JoinKind::Inner);
    let expected = if small_side(1024) {
        (Algorithm::PhjOm, Some(Why::Partitioned))
    } else {
        (Algorithm::SmjOm, Some(Why::SkewedSides))
    };
    assert_eq!((a, why, m), (expected.0, expected.1, Some(256.0)));
    assert_eq!(run(&cpu, (4096, 1, 64), JoinKind::LeftOuter).2, Some(1.0));
    #[cfg(feature = "cuda")]
    if let Some(g) = gpu("auto_reports_how_it_chose_on_m_to_n_inputs") {
        // A small right side: NPHJ-chained below 12 sqrt(2^18 / 1024) = 192 rows a key,
        // SMJ-OM from there (every row sampled: exact); semi and anti joins NPHJ-chained.
        assert_eq!(
            run(&g, (1024, 256, 64), JoinKind::Inner),
            (Algorithm::SmjOm, Some(Why::ManyRowsPerKey), Some(256.0))
        );
        assert_eq!(
            run(&g, (1024, 8, 64), JoinKind::LeftOuter),
            (Algorithm::NphjChained, Some(Why::SmallRightSide), Some(8.0))
        );
        // Not sampled: nothing a sample shows would change it.
        assert_eq!(
            run(&g, (4096, 1024, 64), JoinKind::LeftAnti),
            (Algorithm::NphjChained, Some(Why::SmallRightSide), None)
        );
    }
}

/// A chained table built after a key sample holds every key's rows: its (distinct key's
/// index, build row) pairs, sorted, equal those of the keys themselves.
fn check_chained_table<B: JoinBackend, K: Key>(
    b: &B,
    keys: &[K],
    table: &joinkit_hashtable::HashTable<'_, B, K>,
) -> Result<(), TestCaseError> {
    let mut distinct = keys.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let (probe, build) = b.probe_pairs(table, &b.upload(&distinct).unwrap()).unwrap();
    let mut got: Vec<(u32, u32)> = b
        .download(&probe)
        .unwrap()
        .into_iter()
        .zip(b.download(&build).unwrap())
        .collect();
    got.sort_unstable();
    let mut want: Vec<(u32, u32)> = (0..keys.len())
        .map(|i| (distinct.binary_search(&keys[i]).unwrap() as u32, i as u32))
        .collect();
    want.sort_unstable();
    prop_assert_eq!(got, want);
    Ok(())
}

/// The key-sample kernel's groups equal its CPU twin's on every shape, extreme keys (its
/// table reserves no key value), a few keys of many rows each (one slot counting thousands)
/// and sample counts from 1 to several groups included; the sample with the chained table
/// built beside it (one launch on CUDA for one group) gives the same groups, and
/// its table holds every key's rows.
fn check_key_samples<K: Key + Arbitrary>(test: &str) {
    #[cfg(feature = "cuda")]
    let gpu = gpu(test);
    #[cfg(not(feature = "cuda"))]
    let _ = test;
    let keys = prop_oneof![
        keys::<K>(),
        (1u64..100, 1usize..20_000)
            .prop_map(|(d, n)| (0..n as u64).map(|i| K::from_u64(i % d)).collect()),
    ];
    common::runner(32)
        .run(&(keys, 0usize..20_000), |(keys, samples)| {
            let cpu = CpuBackend::new();
            let want = cpu.sample_runs(&keys, samples).unwrap();
            let sampled = samples.min(keys.len()) as u64;
            prop_assert_eq!(want.iter().map(|g| g.rows).sum::<u64>(), sampled);
            prop_assert!(want.iter().all(|g| g.rows <= SAMPLE_GROUP_ROWS as u64));
            prop_assert!(
                want.iter()
                    .all(|g| g.top <= g.rows && g.pairs <= g.rows * g.rows)
            );
            // The table built where the sample's pairs are at most a limit, and only there:
            // below, at and above the pairs the sample shows.
            let pairs: u64 = want.iter().map(|g| g.pairs).sum();
            let limits = [pairs.saturating_sub(1), pairs, pairs + 1, u64::MAX];
            check_sample_and_table(&cpu, &keys, samples, &want, limits)?;
            #[cfg(feature = "cuda")]
            if let Some(g) = &gpu {
                check_sample_and_table(g, &keys, samples, &want, limits)?;
                let on_gpu = joinkit::Backend::upload(g, &keys).unwrap();
                prop_assert_eq!(&g.sample_runs(&on_gpu, samples).unwrap(), &want);
            }
            Ok(())
        })
        .unwrap();
}

/// `b`'s sample of `keys` with the chained table at each of `limits` on its pairs: the groups
/// `want`, a table exactly where the sample's pairs are at most the limit, holding every key's
/// rows, and elsewhere two poisoned row-id columns of other lengths numbered `0..len`.
fn check_sample_and_table<B: JoinBackend + SampleRuns, K: Key>(
    b: &B,
    keys: &[K],
    samples: usize,
    want: &[SampleGroup],
    limits: [u64; 4],
) -> Result<(), TestCaseError> {
    let on_b = b.upload(keys).unwrap();
    let pairs: u64 = want.iter().map(|g| g.pairs).sum();
    let id_rows = [keys.len() + 1000, keys.len() / 3];
    for most_pairs in limits {
        let [mut left, mut right] = id_rows.map(|n| b.upload(&vec![u32::MAX; n]).unwrap());
        let (groups, table) = b
            .sample_runs_and_chained_table(
                &on_b,
                samples,
                most_pairs,
                Some((&mut left, &mut right)),
            )
            .unwrap();
        prop_assert_eq!(&groups[..], want);
        prop_assert_eq!(table.is_some(), pairs <= most_pairs);
        if let Some(table) = &table {
            check_chained_table(b, keys, table)?;
        } else {
            for (ids, n) in [(&left, id_rows[0]), (&right, id_rows[1])] {
                let numbered: Vec<u32> = (0..n as u32).collect();
                prop_assert_eq!(b.download(ids).unwrap(), numbered);
            }
        }
        // Without row ids to number, the same sample and table.
        let (groups, table) = b
            .sample_runs_and_chained_table(&on_b, samples, most_pairs, None)
            .unwrap();
        prop_assert_eq!(&groups[..], want);
        prop_assert_eq!(table.is_some(), pairs <= most_pairs);
    }
    Ok(())
}

#[test]
fn key_samples_match_the_cpu_twin_u32() {
    check_key_samples::<u32>("key_samples_match_the_cpu_twin_u32");
}

#[test]
fn key_samples_match_the_cpu_twin_u64() {
    check_key_samples::<u64>("key_samples_match_the_cpu_twin_u64");
}

/// Samples of many groups, where the kernel counts each group with fewer blocks (8 up to 16
/// groups, then 4, 2 and 1 at 128) so that every block's words fit: the same groups as the CPU
/// twin's, on a column of few and of many distinct keys.
#[test]
fn key_samples_of_many_groups_match_the_cpu_twin() {
    #[cfg(feature = "cuda")]
    let gpu = gpu("key_samples_of_many_groups_match_the_cpu_twin");
    let cpu = CpuBackend::new();
    let rows = MAX_SAMPLES + 12_345;
    for distinct in [3u64, 1000, rows as u64] {
        let keys: Vec<u64> = (0..rows as u64).map(|i| hash64(i, 7) % distinct).collect();
        for samples in [
            16 * SAMPLE_GROUP_ROWS,
            100_000,
            40 * SAMPLE_GROUP_ROWS,
            MAX_SAMPLES,
        ] {
            let want = cpu.sample_runs(&keys, samples).unwrap();
            assert_eq!(want.len(), samples.div_ceil(SAMPLE_GROUP_ROWS));
            assert_eq!(want.iter().map(|g| g.rows).sum::<u64>(), samples as u64);
            if distinct == 3 {
                assert!(want.iter().all(|g| g.pairs > 0 && g.top >= g.rows / 3));
            }
            #[cfg(feature = "cuda")]
            if let Some(g) = &gpu {
                let on_gpu = joinkit::Backend::upload(g, &keys).unwrap();
                assert_eq!(g.sample_runs(&on_gpu, samples).unwrap(), want);
            }
        }
    }
}

/// Output rows as (left payload bits..., right payload bits..., valid), sorted.
fn materialized_rows<B: JoinBackend>(
    b: &B,
    l: &[u32],
    r: &[u32],
    opts: &JoinOptions,
) -> Vec<Vec<u64>> {
    let (out, stats) = join_columns(b, &table(b, l, 10), &table(b, r, 20), opts).unwrap();
    assert_eq!(stats.output_rows, out.rows);
    let mut rows = rows_of(b, &out);
    rows.sort_unstable();
    rows
}

#[test]
fn materialized_payloads_match_the_reference() {
    #[cfg(feature = "cuda")]
    let gpu = gpu("materialized_payloads_match_the_reference");
    runner()
        .run(&(keys::<u32>(), keys::<u32>()), |(l, r)| {
            for kind in JoinKind::ALL {
                let want = expected_rows(&l, &r, kind);
                for algorithm in Algorithm::CONCRETE {
                    let opts = JoinOptions::new(kind).algorithm(algorithm);
                    prop_assert_eq!(
                        &materialized_rows(&CpuBackend::new(), &l, &r, &opts),
                        &want,
                        "cpu {} {:?}",
                        algorithm,
                        kind
                    );
                    #[cfg(feature = "cuda")]
                    if let Some(g) = &gpu {
                        prop_assert_eq!(
                            &materialized_rows(g, &l, &r, &opts),
                            &want,
                            "cuda {} {:?}",
                            algorithm,
                            kind
                        );
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Narrow and 2+2 shapes, drawn per side (one u32 or u64 payload, two u32, two u64, u32 + u64):
/// PHJ-OM's inner join writes the payloads in its match (no gather) where both sides have a
/// shape it carries whole; every algorithm and kind, right keys as drawn and deduplicated
/// under `right_unique`.
fn check_shaped<K: Key + Arbitrary>(test: &str) {
    #[cfg(feature = "cuda")]
    let gpu = gpu(test);
    #[cfg(not(feature = "cuda"))]
    let _ = test;
    let shape = proptest::sample::select(&Shape::ALL[..]);
    runner()
        .run(
            &(keys::<K>(), keys::<K>(), [shape.clone(), shape]),
            |(l, r, shape)| {
                each_case(&r, &Algorithm::CONCRETE, |r, kind, opts| {
                    let want = shaped_expected(&l, r, kind, shape);
                    let got = shaped_rows(&CpuBackend::new(), &l, r, &opts, shape);
                    prop_assert_eq!(&got, &want, "cpu {:?} {:?}", opts, shape);
                    #[cfg(feature = "cuda")]
                    if let Some(g) = &gpu {
                        let got = shaped_rows(g, &l, r, &opts, shape);
                        prop_assert_eq!(&got, &want, "cuda {:?} {:?}", opts, shape);
                    }
                    Ok(())
                })
            },
        )
        .unwrap();
}

#[test]
fn narrow_and_paired_payloads_match_the_reference() {
    check_shaped::<u32>("narrow_and_paired_payloads_match_the_reference");
}

#[test]
fn narrow_and_paired_payloads_of_u64_keys_match_the_reference() {
    check_shaped::<u64>("narrow_and_paired_payloads_of_u64_keys_match_the_reference");
}

fn shaped_rows<B: JoinBackend, K: Key>(
    b: &B,
    l: &[K],
    r: &[K],
    opts: &JoinOptions,
    shape: [Shape; 2],
) -> Vec<Vec<u64>> {
    let (out, stats) = join_columns(
        b,
        &shaped_table(b, l, 10, shape[0]),
        &shaped_table(b, r, 20, shape[1]),
        opts,
    )
    .unwrap();
    assert_eq!(stats.output_rows, out.rows);
    // PHJ-OM's inner joins of shapes it carries whole are written by the match: no gathers.
    let carried = opts.algorithm == Algorithm::PhjOm
        && opts.kind == JoinKind::Inner
        && !matches!(shape, [Shape::U32U64, _] | [_, Shape::U32U64]);
    let gathered = stats.phases.iter().any(|p| p.0 == "materialize");
    assert_eq!(gathered, !carried, "{opts:?} {shape:?}: {:?}", stats.phases);
    let mut rows = rows_of(b, &out);
    rows.sort_unstable();
    rows
}

/// The widening of [`JoinOptions::unpack_ids`], written out: `high << low_bits | low` to
/// `high << 32 | low`.
fn widened(v: u32, low_bits: u32) -> u64 {
    let v = u64::from(v);
    let low = v & ((1u64 << low_bits) - 1);
    ((v >> low_bits) << 32) | low
}

/// A side's payload columns for the widening tests: `u32` packed ids (widened by the join) and
/// `u64` words (kept as they are), as raw values.
#[derive(Debug, Clone)]
struct PackedSide {
    columns: Vec<(ColumnWidth, Vec<u64>)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ColumnWidth {
    U32,
    U64,
}

impl PackedSide {
    /// `rows` rows of the shape `shape` picks: one packed-id column (PHJ-OM's match widens it
    /// as it writes), two (carried as the halves of one word, widened after the match), or one
    /// beside a `u64` column.
    fn new(rows: usize, shape: u8, salt: u64) -> Self {
        let widths: &[ColumnWidth] = match shape % 3 {
            0 => &[ColumnWidth::U32],
            1 => &[ColumnWidth::U32, ColumnWidth::U32],
            _ => &[ColumnWidth::U32, ColumnWidth::U64],
        };
        let columns = (widths.iter().enumerate())
            .map(|(c, &w)| {
                let values = (0..rows as u64).map(|i| hash64(i, salt + c as u64));
                let values = match w {
                    ColumnWidth::U32 => values.map(|v| v & u64::from(u32::MAX)).collect(),
                    ColumnWidth::U64 => values.collect(),
                };
                (w, values)
            })
            .collect();
        Self { columns }
    }

    fn table<B: JoinBackend, K: Key>(&self, b: &B, keys: &[K]) -> Result<Table<B, K>, Error> {
        let column = |(w, v): &(ColumnWidth, Vec<u64>)| {
            Ok::<_, Error>(match w {
                ColumnWidth::U32 => {
                    Column::U32(b.upload(&v.iter().map(|&x| x as u32).collect::<Vec<_>>())?)
                }
                ColumnWidth::U64 => Column::U64(b.upload(v)?),
            })
        };
        let columns = self.columns.iter().map(column).collect::<Result<_, _>>()?;
        Table::new(b.upload(keys)?, columns)
    }

    /// Row `row`'s output words: packed ids widened, `u64` words as they are.
    fn row(&self, row: usize, low_bits: u32) -> impl Iterator<Item = u64> + '_ {
        self.columns.iter().map(move |(w, v)| match w {
            ColumnWidth::U32 => widened(v[row] as u32, low_bits),
            ColumnWidth::U64 => v[row],
        })
    }
}

/// Output rows (left words, right words, valid) of a join of packed-id sides, sorted; every
/// output column must be `u64`. PHJ-OM's inner joins of one packed-id column a side must write
/// them widened in their match (no pass after it).
fn unpacked_rows<B: JoinBackend, K: Key>(
    b: &B,
    (l, lp): (&[K], &PackedSide),
    (r, rp): (&[K], &PackedSide),
    opts: &JoinOptions,
) -> Result<Vec<Vec<u64>>, Error> {
    let (out, stats) = join_columns(b, &lp.table(b, l)?, &rp.table(b, r)?, opts)?;
    assert_eq!(stats.output_rows, out.rows);
    let all_wide = out.left.iter().chain(&out.right);
    assert!(
        all_wide.clone().all(|c| matches!(c, Column::U64(_))),
        "{opts:?}"
    );
    let one_each = lp.columns.len() == 1 && rp.columns.len() == 1;
    if stats.algorithm == Algorithm::PhjOm && opts.kind == JoinKind::Inner && one_each {
        let gathered = stats.phases.iter().any(|p| p.0 == "materialize");
        assert!(!gathered, "{opts:?}: {:?}", stats.phases);
    }
    let mut rows = rows_of(b, &out);
    rows.sort_unstable();
    Ok(rows)
}

/// The reference's rows of [`unpacked_rows`].
fn unpacked_expected<K: Key>(
    (l, lp): (&[K], &PackedSide),
    (r, rp): (&[K], &PackedSide),
    kind: JoinKind,
    low_bits: u32,
) -> Vec<Vec<u64>> {
    let mut rows: Vec<Vec<u64>> = join_pairs(l, r, kind)
        .into_iter()
        .map(|(li, ri)| {
            let mut row: Vec<u64> = lp.row(li as usize, low_bits).collect();
            match (kind.has_right_rows(), ri) {
                (false, _) => row.push(1),
                (true, joinkit::NULL_ROW) => row.extend(rp.columns.iter().map(|_| 0).chain([0])),
                (true, ri) => row.extend(rp.row(ri as usize, low_bits).chain([1])),
            }
            row
        })
        .collect();
    rows.sort_unstable();
    rows
}

/// Packed ids widened by the join ([`JoinOptions::unpack_ids`], every low-bit count 0 … 32),
/// one or two packed-id columns a side or one beside a `u64` column: every algorithm, Auto and
/// kind, right keys as drawn and deduplicated, both backends, equal to the reference's pairs.
fn check_unpacked<K: Key + Arbitrary>(test: &str) {
    #[cfg(feature = "cuda")]
    let gpu = gpu(test);
    #[cfg(not(feature = "cuda"))]
    let _ = test;
    let algorithms = every_algorithm_and_auto();
    let failed = |e: Error| TestCaseError::fail(e.to_string());
    runner()
        .run(
            &(keys::<K>(), keys::<K>(), 0u32..=32, any::<(u64, u8, u8)>()),
            |(l, r, low_bits, (salt, left_shape, right_shape))| {
                let lp = PackedSide::new(l.len(), left_shape, salt);
                each_case(&r, &algorithms, |r, kind, opts| {
                    let rp = PackedSide::new(r.len(), right_shape, salt ^ 0xff);
                    let opts = opts.unpack_ids(Some(low_bits));
                    let want = unpacked_expected((&l, &lp), (r, &rp), kind, low_bits);
                    let cpu = CpuBackend::new();
                    let got = unpacked_rows(&cpu, (&l, &lp), (r, &rp), &opts).map_err(failed)?;
                    prop_assert_eq!(&got, &want, "cpu {:?}", opts);
                    #[cfg(feature = "cuda")]
                    if let Some(g) = &gpu {
                        let got = unpacked_rows(g, (&l, &lp), (r, &rp), &opts).map_err(failed)?;
                        prop_assert_eq!(&got, &want, "cuda {:?}", opts);
                    }
                    Ok(())
                })
            },
        )
        .unwrap();
}

#[test]
fn unpacked_ids_match_the_reference_u32() {
    check_unpacked::<u32>("unpacked_ids_match_the_reference_u32");
}

#[test]
fn unpacked_ids_match_the_reference_u64() {
    check_unpacked::<u64>("unpacked_ids_match_the_reference_u64");
}

/// Whether `r` is the refusal of [`JoinOptions::unpack_ids`] or of its low bits.
fn refused_unpack<T>(r: Result<T, Error>) -> bool {
    matches!(r, Err(Error::InvalidArgument(m)) if m.contains("unpack"))
}

/// [`JoinOptions::unpack_ids`]: the budget counts the widened ids 8 bytes a row; the probes
/// widen as `join_columns` does; more than 32 low bits and the joins that do not take it are
/// typed errors.
fn unpack_ids_limits<B: JoinBackend>(b: &B) {
    let (l, r) = ([1u32, 2, 2, 5], [2u32, 2, 3]);
    let (lp, rp) = (PackedSide::new(4, 0, 1), PackedSide::new(3, 0, 2));
    let (left, right) = (lp.table(b, &l).unwrap(), rp.table(b, &r).unwrap());
    for algorithm in Algorithm::CONCRETE {
        let opts = JoinOptions::new(JoinKind::Inner)
            .algorithm(algorithm)
            .unpack_ids(Some(20));
        // 4 rows of two 8-byte ids.
        let fits = join_columns(b, &left, &right, &opts.memory_budget(64));
        assert_eq!(fits.unwrap().0.rows, 4, "{algorithm}");
        assert_eq!(
            join_columns(b, &left, &right, &opts.memory_budget(63)).err(),
            Some(Error::OutputOverBudget {
                rows: 4,
                bytes: 64,
                budget: 63
            }),
            "{algorithm}"
        );
        let too_wide = opts.unpack_ids(Some(33));
        assert!(
            refused_unpack(join_columns(b, &left, &right, &too_wide)),
            "{algorithm}"
        );
    }
    // The probes: a table (NPHJ) and a partitioned right side (PHJ-OM), widened like the join.
    let want = unpacked_expected((&l, &lp), (&r, &rp), JoinKind::Inner, 20);
    let opts = JoinOptions::new(JoinKind::Inner).unpack_ids(Some(20));
    for (algorithm, partitioned) in [(Algorithm::NphjOpen, false), (Algorithm::PhjOm, true)] {
        let opts = opts.algorithm(algorithm);
        let out = if partitioned {
            joinkit::PartitionedProbe::build(b, &right, &opts).and_then(|p| p.probe_columns(&left))
        } else {
            joinkit::ProbeTable::build(b, &right, &opts).and_then(|t| t.probe_columns(&left))
        };
        let (out, _) = out.unwrap();
        assert!(
            out.left
                .iter()
                .chain(&out.right)
                .all(|c| matches!(c, Column::U64(_)))
        );
        let mut got = rows_of(b, &out);
        got.sort_unstable();
        assert_eq!(got, want, "{algorithm}");
        let too_wide = opts.unpack_ids(Some(33));
        let refused = match partitioned {
            true => refused_unpack(joinkit::PartitionedProbe::build(b, &right, &too_wide)),
            false => refused_unpack(joinkit::ProbeTable::build(b, &right, &too_wide)),
        };
        assert!(refused, "{algorithm}");
    }
    let opts = opts.memory_budget(1 << 20);
    assert!(refused_unpack(joinkit::join_columns_chunked(
        b, &left, &right, &opts
    )));
    // The hybrid join's tables are in host memory.
    let cpu = CpuBackend::new();
    let (host_left, host_right) = (lp.table(&cpu, &l).unwrap(), rp.table(&cpu, &r).unwrap());
    let hybrid = joinkit::HybridOptions::new(opts, 1 << 20);
    assert!(refused_unpack(joinkit::hybrid_join(
        b,
        &host_left,
        &host_right,
        &hybrid
    )));
}

#[test]
fn unpack_ids_limits_are_typed_errors() {
    on_cpu_and_gpu!("unpack_ids_limits_are_typed_errors", unpack_ids_limits);
}

fn bad_input<B: JoinBackend>(b: &B) {
    // A PK side with a duplicate key, for every algorithm.
    let l = b.upload(&[1u32, 2, 3]).unwrap();
    let r = b.upload(&[2u32, 9, 2]).unwrap();
    for algorithm in Algorithm::CONCRETE {
        let opts = JoinOptions::new(JoinKind::Inner)
            .algorithm(algorithm)
            .right_unique(true);
        assert_eq!(
            join_rows(b, &l, &r, &opts).err(),
            Some(Error::DuplicateKey { side: "right" }),
            "{algorithm}"
        );
    }
    // Unique right keys pass the same check.
    let r = b.upload(&[2u32, 9, 3]).unwrap();
    let opts = JoinOptions::new(JoinKind::Inner)
        .algorithm(Algorithm::SmjUm)
        .right_unique(true);
    assert_eq!(join_rows(b, &l, &r, &opts).unwrap().1.output_rows, 2);
    // Payloads of another length than the keys.
    let short: Column<B> = Column::U32(b.upload(&[1u32]).unwrap());
    assert_eq!(
        Table::<B, u32>::new(b.upload(&[1u32, 2]).unwrap(), vec![short]).err(),
        Some(Error::LengthMismatch {
            what: "table keys vs payload",
            left: 2,
            right: 1
        })
    );
}

#[test]
fn bad_input_is_a_typed_error() {
    on_cpu_and_gpu!("bad_input_is_a_typed_error", bad_input);
}

/// The payloads written by the match at a size where the one-pass match hands out runs of
/// items from its counter (2^21 ⋈ 2^22, PK-FK): u64 keys with one u64 payload a side and with
/// two (the second carried by a pass of its own), u32 keys with two u32 payloads a side
/// (interleaved, split by the match), and the two-pass (M:N) match of the two-column shapes;
/// GPU == CPU.
#[cfg(feature = "cuda")]
#[test]
fn large_carried_payload_joins_match_the_cpu() {
    let Some(g) = gpu("large_carried_payload_joins_match_the_cpu") else {
        return;
    };
    let r: Vec<u64> = joinkit_datagen::unique_keys(1 << 21, 3).unwrap();
    let s: Vec<u64> = joinkit_datagen::foreign_keys(1 << 21, 1 << 22, 0.9, 4).unwrap();
    let pk_fk = JoinOptions::new(JoinKind::Inner)
        .algorithm(Algorithm::PhjOm)
        .right_unique(true);
    let shape = [Shape::U64, Shape::U64];
    let want = shaped_rows(&CpuBackend::new(), &s, &r, &pk_fk, shape);
    assert_eq!(shaped_rows(&g, &s, &r, &pk_fk, shape), want);
    let shape = [Shape::TwoU64, Shape::TwoU64];
    for opts in [pk_fk, pk_fk.right_unique(false)] {
        let want = shaped_rows(&CpuBackend::new(), &s, &r, &opts, shape);
        assert_eq!(shaped_rows(&g, &s, &r, &opts, shape), want, "{opts:?}");
    }
    let r: Vec<u32> = joinkit_datagen::unique_keys(1 << 21, 5).unwrap();
    let s: Vec<u32> = joinkit_datagen::foreign_keys(1 << 21, 1 << 22, 0.7, 6).unwrap();
    let shape = [Shape::TwoU32, Shape::TwoU32];
    for opts in [pk_fk, pk_fk.right_unique(false)] {
        let want = shaped_rows(&CpuBackend::new(), &s, &r, &opts, shape);
        assert_eq!(shaped_rows(&g, &s, &r, &opts, shape), want, "{opts:?}");
    }
}

/// Packed ids widened by PHJ-OM's match at a size where the one-pass match hands out runs of
/// items (2^21 ⋈ 2^22 PK-FK), and by its two-pass (M:N) match; u32 and u64 keys; GPU == CPU.
#[cfg(feature = "cuda")]
#[test]
fn large_unpacked_ids_match_the_cpu() {
    let Some(g) = gpu("large_unpacked_ids_match_the_cpu") else {
        return;
    };
    let pk_fk = JoinOptions::new(JoinKind::Inner)
        .algorithm(Algorithm::PhjOm)
        .right_unique(true)
        .unpack_ids(Some(27));
    let r: Vec<u64> = joinkit_datagen::unique_keys(1 << 21, 7).unwrap();
    let s: Vec<u64> = joinkit_datagen::foreign_keys(1 << 21, 1 << 22, 0.9, 8).unwrap();
    let (sp, rp) = (
        PackedSide::new(s.len(), 0, 9),
        PackedSide::new(r.len(), 0, 10),
    );
    for opts in [pk_fk, pk_fk.right_unique(false)] {
        let want = unpacked_rows(&CpuBackend::new(), (&s, &sp), (&r, &rp), &opts).unwrap();
        let got = unpacked_rows(&g, (&s, &sp), (&r, &rp), &opts).unwrap();
        assert_eq!(got.len(), want.len(), "{opts:?}");
        assert!(got == want, "{opts:?}");
    }
    let r: Vec<u32> = joinkit_datagen::unique_keys(1 << 21, 11).unwrap();
    let s: Vec<u32> = joinkit_datagen::foreign_keys(1 << 21, 1 << 22, 0.7, 12).unwrap();
    let (sp, rp) = (
        PackedSide::new(s.len(), 0, 13),
        PackedSide::new(r.len(), 0, 14),
    );
    for opts in [pk_fk, pk_fk.right_unique(false)] {
        let want = unpacked_rows(&CpuBackend::new(), (&s, &sp), (&r, &rp), &opts).unwrap();
        let got = unpacked_rows(&g, (&s, &sp), (&r, &rp), &opts).unwrap();
        assert_eq!(got.len(), want.len(), "{opts:?}");
        assert!(got == want, "{opts:?}");
    }
}

/// A paper-shaped workload at 2^22 ⋈ 2^23 on the GPU against the CPU backend.
#[cfg(feature = "cuda")]
#[test]
fn large_pk_fk_join_matches_the_cpu() {
    let Some(g) = gpu("large_pk_fk_join_matches_the_cpu") else {
        return;
    };
    let r: Vec<u32> = joinkit_datagen::unique_keys(1 << 22, 1).unwrap();
    let s: Vec<u32> = joinkit_datagen::foreign_keys(1 << 22, 1 << 23, 0.8, 2).unwrap();
    for algorithm in Algorithm::CONCRETE {
        let opts = JoinOptions::new(JoinKind::Inner)
            .algorithm(algorithm)
            .right_unique(true);
        let want = pairs_of(&CpuBackend::new(), &s, &r, &opts).unwrap();
        assert_eq!(pairs_of(&g, &s, &r, &opts).unwrap(), want, "{algorithm}");
    }
}

/// 8-byte keys that fit 2^32 values, high above 2^32 (unique R, S drawing from it), sizes off
/// the narrowing kernel's four keys a thread and any block: the partitioned joins narrow them
/// on the GPU across many blocks, and not once one key the range's sample skips lies 2^33
/// above; every kind equals the CPU as a multiset (the inner join's payloads written by the
/// match too).
#[cfg(feature = "cuda")]
#[test]
fn large_narrowed_joins_match_the_cpu() {
    let Some(g) = gpu("large_narrowed_joins_match_the_cpu") else {
        return;
    };
    // 32-bit keys (their misses reach u32::MAX) lifted by a base with high bits set.
    let lift = |keys: Vec<u32>| -> Vec<u64> {
        keys.into_iter()
            .map(|k| 0x0123_4567_0000_0000 + u64::from(k))
            .collect()
    };
    let r = lift(joinkit_datagen::unique_keys((1 << 21) + 3, 5).unwrap());
    let s = lift(joinkit_datagen::foreign_keys((1 << 21) + 3, (1 << 22) + 1, 0.7, 6).unwrap());
    // One key 2^33 above the rest, at a row the range's sample skips (row 1; the sample takes
    // rows i * n / 4096): only the pass over every key finds the range too wide.
    let mut spread = s.clone();
    spread[1] += 1 << 33;
    for (s, narrows) in [(&s, true), (&spread, false)] {
        for algorithm in [Algorithm::PhjOm, Algorithm::PhjUm] {
            for kind in JoinKind::ALL {
                let opts = JoinOptions::new(kind)
                    .algorithm(algorithm)
                    .right_unique(true);
                let (got, want) = (
                    narrowed_run(&g, s, &r, &opts),
                    narrowed_run(&CpuBackend::new(), s, &r, &opts),
                );
                let case = format!("{algorithm} {kind:?} narrows {narrows}");
                assert_eq!((got.narrowed, want.narrowed), (narrows, narrows), "{case}");
                assert_eq!(got.pairs, want.pairs, "{case}");
                assert_eq!(got.rows, want.rows, "{case}");
            }
        }
    }
}

/// The partitioned joins where a GPU splits work: R partitions far above a build piece (hot
/// keys repeated thousands of times, all rows on the largest key) joined with every probe
/// chunk of their partition, and Zipf-skewed S partitions cut into chunks; every kind, both
/// key widths, against the CPU backend as multisets; `right_unique` fails on the hot keys and
/// holds without them.
#[cfg(feature = "cuda")]
#[test]
fn large_skewed_partitioned_joins_match_the_cpu() {
    let Some(g) = gpu("large_skewed_partitioned_joins_match_the_cpu") else {
        return;
    };
    skewed::<u32>(&g);
    skewed::<u64>(&g);
}

#[cfg(feature = "cuda")]
fn skewed<K: Key>(g: &joinkit_cuda::CudaBackend) {
    use joinkit::CoPartitionJoin;
    let n = 1usize << 20;
    let hot: Vec<K> = [3u64, 1 << 20, 77_777, K::MAX.to_u64()]
        .map(K::from_u64)
        .to_vec();
    let copies = 2 * g.build_capacity::<K>() + 904;
    let r_unique: Vec<K> = joinkit_datagen::unique_keys(n, 11).unwrap();
    let mut r_hot = r_unique.clone();
    for (i, k) in r_hot.iter_mut().enumerate().take(hot.len() * copies) {
        *k = hot[i % hot.len()];
    }
    let mut s: Vec<K> = joinkit_datagen::zipf_foreign_keys(n, n, 1.0, 12).unwrap();
    for (i, k) in s.iter_mut().enumerate().step_by(4096) {
        *k = hot[(i / 4096) % hot.len()];
    }
    let all_max_r = vec![K::MAX; 6000];
    let all_max_s: Vec<K> = (0..3000u64)
        .map(|i| if i % 10 == 0 { K::MAX } else { K::from_u64(i) })
        .collect();
    let cpu = CpuBackend::new();
    for algorithm in [Algorithm::PhjUm, Algorithm::PhjOm] {
        for kind in JoinKind::ALL {
            let opts = JoinOptions::new(kind).algorithm(algorithm);
            for (l, r) in [(&s, &r_hot), (&s, &r_unique), (&all_max_s, &all_max_r)] {
                let want = pairs_of(&cpu, l, r, &opts).unwrap();
                let got = pairs_of(g, l, r, &opts).unwrap();
                assert_eq!(got.len(), want.len(), "{algorithm} {kind:?} {}", K::BITS);
                assert!(got == want, "{algorithm} {kind:?} {}", K::BITS);
            }
        }
        let unique = JoinOptions::new(JoinKind::Inner)
            .algorithm(algorithm)
            .right_unique(true);
        assert_eq!(
            pairs_of(g, &s, &r_hot, &unique).err(),
            Some(Error::DuplicateKey { side: "right" }),
            "{algorithm}"
        );
        assert_eq!(
            pairs_of(g, &s, &r_unique, &unique).unwrap(),
            pairs_of(&cpu, &s, &r_unique, &unique).unwrap(),
            "{algorithm}"
        );
    }
}

/// 8-byte keys around a random base, `base + x * 2^31 + y` with x up to a drawn 0, 1 or 2:
/// both sides span less than 2^32 when x stays below 2; with x 0 and 2 two keys share their low
/// 32 bits, which a narrowing that ignored the range would join. The partitioned joins narrow exactly
/// when both sides span at most 2^32 values (and the option allows), and every result equals the
/// reference: pairs (join_rows, every kind) and the payloads the match writes (join_columns,
/// inner, one u64 column a side), unique right keys or not.
#[test]
fn narrowed_keys_join_like_the_reference() {
    #[cfg(feature = "cuda")]
    let gpu = gpu("narrowed_keys_join_like_the_reference");
    let side = || proptest::collection::vec((0u64..3, 0u64..4), 0..250);
    let keys_of = |base: u64, most: u64, xy: &[(u64, u64)]| -> Vec<u64> {
        xy.iter()
            .map(|&(x, y)| base.wrapping_add(((x % (most + 1)) << 31) + y))
            .collect()
    };
    let base = prop_oneof![any::<u64>(), Just(0), Just(u64::MAX - (1 << 32) + 1)];
    let algorithms = [Algorithm::PhjOm, Algorithm::PhjUm, Algorithm::NphjOpen];
    runner()
        .run(&(base, 0u64..3, side(), side()), |(base, most, l, r)| {
            let (l, r) = (keys_of(base, most, &l), keys_of(base, most, &r));
            let both = l.iter().chain(&r);
            let span = both.clone().max().zip(both.min()).map_or(0, |(g, s)| g - s);
            each_case(&r, &algorithms, |r, kind, opts| {
                let want = join_pairs(&l, r, kind);
                for narrow in [true, false] {
                    let opts = opts.narrow_keys(narrow);
                    let narrows = narrow
                        && span <= u64::from(u32::MAX)
                        && opts.algorithm != Algorithm::NphjOpen;
                    let check = |run: NarrowedRun| {
                        prop_assert_eq!(&run.pairs, &want, "{:?}", opts);
                        prop_assert_eq!(run.narrowed, narrows, "{:?}", opts);
                        if kind == JoinKind::Inner {
                            let shape = [Shape::U64, Shape::U64];
                            prop_assert_eq!(&run.rows, &shaped_expected(&l, r, kind, shape));
                        }
                        Ok(())
                    };
                    check(narrowed_run(&CpuBackend::new(), &l, r, &opts))?;
                    #[cfg(feature = "cuda")]
                    if let Some(g) = &gpu {
                        check(narrowed_run(g, &l, r, &opts))?;
                    }
                }
                Ok(())
            })
        })
        .unwrap();
}

/// What [`narrowed_run`] saw.
struct NarrowedRun {
    /// `join_rows`' pairs, sorted.
    pairs: Vec<(u32, u32)>,
    /// Whether the join narrowed its keys.
    narrowed: bool,
    /// For an inner join, the rows of `join_columns` over one u64 payload column a side.
    rows: Vec<Vec<u64>>,
}

fn narrowed_run<B: JoinBackend>(b: &B, l: &[u64], r: &[u64], opts: &JoinOptions) -> NarrowedRun {
    let (rows, stats) = join_rows(b, &b.upload(l).unwrap(), &b.upload(r).unwrap(), opts).unwrap();
    let mut pairs = pairs_from(b, &rows);
    pairs.sort_unstable();
    let narrowed = stats.narrowed_keys;
    if opts.kind != JoinKind::Inner {
        return NarrowedRun {
            pairs,
            narrowed,
            rows: Vec::new(),
        };
    }
    let shape = [Shape::U64, Shape::U64];
    let columns = shaped_rows(b, l, r, opts, shape);
    let (_, col_stats) = join_columns(
        b,
        &shaped_table(b, l, 10, shape[0]),
        &shaped_table(b, r, 20, shape[1]),
        opts,
    )
    .unwrap();
    assert_eq!(col_stats.narrowed_keys, narrowed);
    NarrowedRun {
        pairs,
        narrowed,
        rows: columns,
    }
}
