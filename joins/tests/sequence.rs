//! Sequences of joins: a fact table joined with 0 to 4 dimensions, every algorithm, both
//! foreign-key materializations, both key widths, on both backends, equal to a naive host
//! reference (nested hash maps) as a multiset of output rows (fact row, every dimension's row,
//! every materialized value). Random sizes including an empty fact table and empty dimensions,
//! match ratios from 0 to 1, unique and repeated dimension keys, the largest key; bad inputs
//! as typed errors.

use std::collections::HashMap;

use joinkit::{
    Algorithm, Backend, Column, ColumnKey, CpuBackend, DimensionJoin, Error, FkMaterialization,
    JoinBackend, JoinKind, JoinOptions, SequenceOptions, Table, join_sequence,
};
use joinkit_cuda::hash::hash64;
use joinkit_cuda::{Element, each_column};
use proptest::prelude::*;

mod common;

#[cfg(feature = "cuda")]
use common::gpu;
use common::runner;

/// The shape of one generated sequence.
#[derive(Debug, Clone)]
struct Case {
    fact_rows: usize,
    /// Rows of each dimension (one per join).
    dim_rows: Vec<usize>,
    /// Fraction of fact rows whose foreign key is in the dimension, per join.
    ratios: Vec<f64>,
    /// Unique dimension keys (PK-FK, `right_unique`), else each key on about two rows.
    unique: bool,
    /// The first dimension row of each dimension holds the largest key.
    with_max: bool,
    seed: u64,
}

fn cases() -> impl Strategy<Value = Case> {
    (
        0usize..=4,
        prop_oneof![1 => Just(0usize), 1 => Just(1), 6 => 0usize..700],
        prop_oneof![3 => Just(true), 1 => Just(false)],
        any::<bool>(),
        any::<u64>(),
    )
        .prop_flat_map(|(k, fact_rows, unique, with_max, seed)| {
            let dim_rows = proptest::collection::vec(
                prop_oneof![1 => Just(0usize), 1 => Just(1), 8 => 1usize..300],
                k,
            );
            let ratios = proptest::collection::vec(
                prop_oneof![1 => Just(0.0), 2 => Just(1.0), 6 => 0.0f64..1.0],
                k,
            );
            (dim_rows, ratios).prop_map(move |(dim_rows, ratios)| Case {
                fact_rows,
                dim_rows,
                ratios,
                unique,
                with_max,
                seed,
            })
        })
}

/// A generated star: host columns and where they go.
struct Host<K> {
    /// Per join, the fact table's foreign keys for it.
    fks: Vec<Vec<K>>,
    /// Fact payloads: an `i32` (column 0) and a `u64` (the last column), functions of the row.
    fact_i32: Vec<i32>,
    fact_u64: Vec<u64>,
    /// Per dimension, its keys.
    dim_keys: Vec<Vec<K>>,
}

/// Spreads small key values over the key's width (distinct values stay distinct).
fn spread<K: ColumnKey>(v: u64) -> K {
    K::from_u64(if K::BITS == 64 { v << 40 } else { v })
}

fn host<K: ColumnKey>(c: &Case) -> Host<K> {
    let dim_keys: Vec<Vec<K>> = c
        .dim_rows
        .iter()
        .enumerate()
        .map(|(i, &m)| {
            // A permutation of the rows by hash: row j holds rank p.
            let mut order: Vec<usize> = (0..m).collect();
            order.sort_by_key(|&j| hash64(j as u64, c.seed ^ (i as u64 + 1)));
            let mut keys = vec![K::from_u64(0); m];
            for (p, &j) in order.iter().enumerate() {
                let v = if c.unique { p } else { p / 2 } as u64;
                keys[j] = if c.with_max && v == 0 {
                    K::MAX
                } else {
                    spread(2 * v)
                };
            }
            keys
        })
        .collect();
    let fks = dim_keys
        .iter()
        .zip(&c.ratios)
        .enumerate()
        .map(|(i, (keys, &ratio))| {
            (0..c.fact_rows as u64)
                .map(|f| {
                    let h = hash64(f, c.seed.wrapping_add(1000 * (i as u64 + 1)));
                    if !keys.is_empty() && (h % 1000) as f64 / 1000.0 < ratio {
                        keys[((h >> 20) % keys.len() as u64) as usize]
                    } else {
                        // Odd values match no dimension key.
                        spread(2 * ((h >> 20) % 1000) + 1)
                    }
                })
                .collect()
        })
        .collect();
    let n = c.fact_rows as u64;
    Host {
        fks,
        fact_i32: (0..n).map(|f| hash64(f, 1) as i32).collect(),
        fact_u64: (0..n).map(|f| hash64(f, 2)).collect(),
        dim_keys,
    }
}

/// The foreign-key column of join `i` of `k` (join `i` reads fact column `k - i`: columns and
/// joins in opposite orders).
fn fk_column(k: usize, i: usize) -> usize {
    k - i
}

/// Dimension `i`'s payloads at row `r`: `i % 3` columns (a `u64`, then an `i32`), as bits.
fn dim_payload_bits(i: usize, r: u64) -> Vec<u64> {
    [
        hash64(r, 100 + i as u64),
        u64::from(hash64(r, 200 + i as u64) as i32 as u32),
    ][..i % 3]
        .to_vec()
}

/// The fact columns: the `i32` payload, the foreign keys (join `i`'s at [`fk_column`]), the
/// `u64` payload.
fn fact_columns<B: Backend, K: ColumnKey>(b: &B, h: &Host<K>) -> Vec<Column<B>> {
    let k = h.fks.len();
    let mut cols = vec![Column::I32(b.upload(&h.fact_i32).unwrap())];
    cols.extend((1..=k).map(|c| K::column(b.upload(&h.fks[k - c]).unwrap())));
    cols.push(Column::U64(b.upload(&h.fact_u64).unwrap()));
    cols
}

fn dimensions<B: Backend, K: ColumnKey>(b: &B, h: &Host<K>) -> Vec<Table<B, K>> {
    h.dim_keys
        .iter()
        .enumerate()
        .map(|(i, keys)| {
            let rows = 0..keys.len() as u64;
            let u: Vec<u64> = rows.clone().map(|r| hash64(r, 100 + i as u64)).collect();
            let s: Vec<i32> = rows.map(|r| hash64(r, 200 + i as u64) as i32).collect();
            let mut cols = vec![
                Column::U64(b.upload(&u).unwrap()),
                Column::I32(b.upload(&s).unwrap()),
            ];
            cols.truncate(i % 3);
            Table::new(b.upload(keys).unwrap(), cols).unwrap()
        })
        .collect()
}

/// The fact columns materialized: the `u64` payload, then the `i32` one (not in column order).
fn materialized_fact_columns(k: usize) -> [usize; 2] {
    [k + 1, 0]
}

/// The reference: for every fact row, the cross product of its matches in each dimension in
/// order (nested hash maps), as rows of (fact row, dimension rows..., and with `materialize`
/// the materialized values: the fact columns of [`materialized_fact_columns`], then each
/// dimension's payloads), sorted.
fn reference<K: ColumnKey>(h: &Host<K>, materialize: bool) -> Vec<Vec<u64>> {
    let index: Vec<HashMap<K, Vec<u64>>> = h
        .dim_keys
        .iter()
        .map(|keys| {
            let mut m: HashMap<K, Vec<u64>> = HashMap::new();
            for (r, key) in keys.iter().enumerate() {
                m.entry(*key).or_default().push(r as u64);
            }
            m
        })
        .collect();
    let mut out = Vec::new();
    for f in 0..h.fact_u64.len() {
        let mut partial = vec![vec![f as u64]];
        for (fks, idx) in h.fks.iter().zip(&index) {
            let rs = idx.get(&fks[f]).map_or(&[][..], Vec::as_slice);
            partial = partial
                .into_iter()
                .flat_map(|p| {
                    rs.iter().map(move |&r| {
                        let mut q = p.clone();
                        q.push(r);
                        q
                    })
                })
                .collect();
        }
        for mut row in partial {
            if materialize {
                row.push(h.fact_u64[f]);
                row.push(h.fact_i32[f].to_bits());
                for i in 0..h.fks.len() {
                    row.extend(dim_payload_bits(i, row[1 + i]));
                }
            }
            out.push(row);
        }
    }
    out.sort_unstable();
    out
}

fn bits<B: Backend>(b: &B, c: &Column<B>) -> Vec<u64> {
    each_column!(c, c => b.download(c).unwrap().into_iter().map(Element::to_bits).collect())
}

/// Runs the sequence and returns its output rows as the reference writes them, sorted,
/// checking the output's and the statistics' shapes on the way.
fn sequence_rows<B: JoinBackend, K: ColumnKey>(
    b: &B,
    h: &Host<K>,
    opts: &SequenceOptions,
) -> Result<Vec<Vec<u64>>, Error> {
    let k = h.fks.len();
    let fact = fact_columns(b, h);
    let tables = dimensions(b, h);
    let dims: Vec<DimensionJoin<'_, B, K>> = tables
        .iter()
        .enumerate()
        .map(|(i, t)| DimensionJoin::new(fk_column(k, i), t))
        .collect();
    let (out, stats) = join_sequence(b, &fact, &dims, opts)?;
    let n = out.rows as usize;
    assert_eq!(stats.output_rows, out.rows);
    assert_eq!(stats.fact_rows, h.fact_u64.len());
    assert_eq!(stats.fk, opts.fk);
    assert!(stats.to_string().contains(opts.fk.name()));
    assert_eq!(stats.steps.len(), k);
    // Each join reads what the one before it returned.
    let mut rows = h.fact_u64.len() as u64;
    for (i, s) in stats.steps.iter().enumerate() {
        assert_eq!(s.fk_column, fk_column(k, i));
        assert_eq!(s.join.left_rows as u64, rows);
        assert_eq!(s.join.right_rows, h.dim_keys[i].len());
        assert_ne!(s.join.algorithm, Algorithm::Auto);
        rows = s.join.output_rows;
    }
    assert_eq!(rows, out.rows);
    assert_eq!(out.dimension_rows.len(), k);
    let mut cols: Vec<Vec<u64>> = std::iter::once(&out.fact_rows)
        .chain(&out.dimension_rows)
        .map(|m| b.download(m).unwrap().into_iter().map(u64::from).collect())
        .collect();
    match &opts.materialize {
        Some(chosen) => {
            assert_eq!(out.fact_payloads.len(), chosen.len());
            assert_eq!(out.dimension_payloads.len(), k);
            for (i, p) in out.dimension_payloads.iter().enumerate() {
                assert_eq!(p.len(), i % 3);
            }
            cols.extend(
                out.fact_payloads
                    .iter()
                    .chain(out.dimension_payloads.iter().flatten())
                    .map(|c| bits(b, c)),
            );
        }
        None => {
            assert!(out.fact_payloads.is_empty() && out.dimension_payloads.is_empty());
            assert_eq!(stats.materialize_ms, 0.0);
        }
    }
    for c in &cols {
        assert_eq!(c.len(), n);
    }
    let mut got: Vec<Vec<u64>> = (0..n)
        .map(|r| cols.iter().map(|c| c[r]).collect())
        .collect();
    got.sort_unstable();
    Ok(got)
}

/// Every algorithm with both foreign-key materializations, materializing payloads, and one
/// run of gather maps only.
fn options(k: usize, unique: bool) -> Vec<SequenceOptions> {
    let mut all = Vec::new();
    for algorithm in Algorithm::CONCRETE {
        for fk in FkMaterialization::ALL {
            all.push(
                SequenceOptions::new(algorithm)
                    .fk(fk)
                    .right_unique(unique)
                    .materialize(materialized_fact_columns(k)),
            );
        }
    }
    all.push(SequenceOptions::new(Algorithm::Auto).right_unique(unique));
    all
}

fn check_sequences<K: ColumnKey>(test: &str) {
    #[cfg(feature = "cuda")]
    let gpu = gpu(test);
    #[cfg(not(feature = "cuda"))]
    let _ = test;
    runner(48)
        .run(&cases(), |c| {
            let h = host::<K>(&c);
            let k = c.dim_rows.len();
            let (with, without) = (reference(&h, true), reference(&h, false));
            for opts in options(k, c.unique) {
                let want = if opts.materialize.is_some() {
                    &with
                } else {
                    &without
                };
                let got = sequence_rows(&CpuBackend::new(), &h, &opts).unwrap();
                prop_assert_eq!(&got, want, "cpu {:?}", opts);
                #[cfg(feature = "cuda")]
                if let Some(g) = &gpu {
                    let got = sequence_rows(g, &h, &opts).unwrap();
                    prop_assert_eq!(&got, want, "cuda {:?}", opts);
                }
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn sequences_match_the_reference_u32() {
    check_sequences::<u32>("sequences_match_the_reference_u32");
}

#[test]
fn sequences_match_the_reference_u64() {
    check_sequences::<u64>("sequences_match_the_reference_u64");
}

fn bad_input<B: JoinBackend>(b: &B) {
    let up = |v: &[u32]| Column::U32(b.upload(v).unwrap());
    let fact = vec![up(&[1, 2, 3]), up(&[7, 8, 9])];
    let dim = Table::<B, u32>::new(b.upload(&[3u32, 1]).unwrap(), Vec::new()).unwrap();
    let opts = SequenceOptions::new(Algorithm::SmjUm);
    let run = |fact: &[Column<B>], dims: &[DimensionJoin<'_, B, u32>], opts: &SequenceOptions| {
        join_sequence(b, fact, dims, opts).err()
    };
    // A foreign-key or materialized column past the fact columns.
    assert_eq!(
        run(&fact, &[DimensionJoin::new(2, &dim)], &opts),
        Some(Error::IndexOutOfRange {
            what: "fact columns",
            index: 2,
            len: 2
        })
    );
    assert_eq!(
        run(
            &fact,
            &[DimensionJoin::new(0, &dim)],
            &opts.clone().materialize([1, 5])
        ),
        Some(Error::IndexOutOfRange {
            what: "fact columns",
            index: 5,
            len: 2
        })
    );
    // Fact columns of different lengths.
    let ragged = vec![up(&[1, 2, 3]), up(&[7, 8])];
    assert_eq!(
        run(&ragged, &[DimensionJoin::new(0, &dim)], &opts),
        Some(Error::LengthMismatch {
            what: "fact columns",
            left: 3,
            right: 2
        })
    );
    // A dimension payload of another length than its keys (the fields are public).
    let bent = Table::<B, u32> {
        keys: b.upload(&[3u32, 1]).unwrap(),
        payloads: vec![up(&[5])],
    };
    assert_eq!(
        run(&fact, &[DimensionJoin::new(0, &bent)], &opts),
        Some(Error::LengthMismatch {
            what: "table keys vs payload",
            left: 2,
            right: 1
        })
    );
    // Foreign keys of another type than the dimension's keys.
    let wide = vec![
        Column::U64(b.upload(&[1u64, 2, 3]).unwrap()),
        Column::I32(b.upload(&[1i32, 2, 3]).unwrap()),
    ];
    for c in 0..2 {
        assert!(
            matches!(
                run(&wide, &[DimensionJoin::new(c, &dim)], &opts),
                Some(Error::InvalidArgument(_))
            ),
            "column {c}"
        );
    }
    let dim64 = Table::<B, u64>::new(b.upload(&[3u64, 1]).unwrap(), Vec::new()).unwrap();
    assert!(matches!(
        join_sequence(b, &fact, &[DimensionJoin::new(0, &dim64)], &opts).err(),
        Some(Error::InvalidArgument(_))
    ));
    // Not an inner join.
    let mut semi = opts.clone();
    semi.join = JoinOptions::new(JoinKind::LeftSemi);
    assert!(matches!(
        run(&fact, &[DimensionJoin::new(0, &dim)], &semi),
        Some(Error::InvalidArgument(_))
    ));
    // A dimension key twice under `right_unique`, in the first or a later join, for every
    // algorithm and both materializations; without the promise it joins.
    let dup = Table::<B, u32>::new(b.upload(&[9u32, 7, 9]).unwrap(), Vec::new()).unwrap();
    let fact = vec![up(&[1, 2, 3]), up(&[9, 7, 9])];
    for algorithm in Algorithm::CONCRETE {
        for fk in FkMaterialization::ALL {
            let opts = SequenceOptions::new(algorithm).fk(fk);
            for dims in [
                [DimensionJoin::new(1, &dup), DimensionJoin::new(0, &dim)],
                [DimensionJoin::new(0, &dim), DimensionJoin::new(1, &dup)],
            ] {
                assert_eq!(
                    run(&fact, &dims, &opts),
                    Some(Error::DuplicateKey { side: "right" }),
                    "{algorithm} {fk}"
                );
                let (out, _) =
                    join_sequence(b, &fact, &dims, &opts.clone().right_unique(false)).unwrap();
                // Fact rows 0 and 2 match the unique dimension, and key 9 twice in the other.
                assert_eq!(out.rows, 4, "{algorithm} {fk}");
            }
        }
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    on_cpu_and_gpu!("bad_input_is_a_typed_error", bad_input);
}

/// The paper's shape at 2^20 fact rows and 3 dimensions of 2^19 rows (match ratios 0.9, 0.6
/// and 0.3), both key widths, every algorithm and both materializations on the GPU: the gather
/// maps equal the host reference as multisets and every materialized value is its column's
/// value at the output row's ids.
#[cfg(feature = "cuda")]
#[test]
fn large_sequence_matches_the_reference() {
    let Some(g) = gpu("large_sequence_matches_the_reference") else {
        return;
    };
    large::<u32>(&g);
    large::<u64>(&g);
}

#[cfg(feature = "cuda")]
fn large<K: ColumnKey>(g: &joinkit_cuda::CudaBackend) {
    let c = Case {
        fact_rows: 1 << 20,
        dim_rows: vec![1 << 19; 3],
        ratios: vec![0.9, 0.6, 0.3],
        unique: true,
        with_max: true,
        seed: 5,
    };
    let h = host::<K>(&c);
    let want = reference(&h, true);
    assert!(want.len() > 100_000, "the workload drops too many rows");
    for opts in options(3, true) {
        let got = sequence_rows(g, &h, &opts).unwrap();
        if opts.materialize.is_some() {
            assert_eq!(got.len(), want.len(), "{opts:?} {}", K::BITS);
            assert!(got == want, "{opts:?} {}", K::BITS);
        } else {
            // Sorted rows have sorted prefixes: the gather maps alone.
            let maps: Vec<Vec<u64>> = want.iter().map(|r| r[..4].to_vec()).collect();
            assert!(got == maps, "{opts:?} {}", K::BITS);
        }
    }
}
