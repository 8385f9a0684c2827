//! Helpers shared by the join test binaries: inputs, and outputs as comparable rows.
#![allow(dead_code, unreachable_pub)]

use joinkit::reference::join_pairs;
use joinkit::{Backend, Column, JoinKind, Materialized, NULL_ROW, RowPairs, Table};
use joinkit_cuda::hash::hash64;
use joinkit_cuda::{Element, Key};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// `cases` cases, no failure files.
pub fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// The GPU for a test, or `None` (printed) where there is none.
#[cfg(feature = "cuda")]
pub fn gpu(test: &str) -> Option<joinkit_cuda::CudaBackend> {
    joinkit_cuda::testing::cuda_or_skip(test)
}

/// Runs `$check(&backend)` on the CPU backend, then on the GPU when there is one (`$test`
/// names the test in the skip message).
#[macro_export]
macro_rules! on_cpu_and_gpu {
    ($test:expr, $check:expr) => {{
        $check(&joinkit::CpuBackend::new());
        if let Some(g) = joinkit_cuda::testing::gpu_or_skip($test) {
            $check(&g);
        }
    }};
}

/// Key columns with the shapes that break joins: few distinct keys (duplicates), random keys
/// (mostly no match), all rows on one key, the extreme key values.
pub fn keys<K: Key + Arbitrary>() -> impl Strategy<Value = Vec<K>> {
    prop_oneof![
        proptest::collection::vec((0u64..64).prop_map(K::from_u64), 0..400),
        proptest::collection::vec(any::<K>(), 0..300),
        (0usize..200).prop_map(|n| vec![K::from_u64(7); n]),
        proptest::collection::vec(prop_oneof![Just(K::from_u64(0)), Just(K::MAX)], 0..100),
    ]
}

/// Whether every key of `keys` differs from every other (a right side that may be promised
/// unique).
pub fn all_unique<K: Key>(keys: &[K]) -> bool {
    let mut sorted = keys.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).all(|w| w[0] != w[1])
}

/// A row's payloads as a function of its key: a u64 and an i32 column.
fn payloads_of<K: Key>(k: K, salt: u64) -> [u64; 2] {
    [
        hash64(k.to_u64(), salt),
        u64::from(hash64(k.to_u64(), salt + 1) as i32 as u32),
    ]
}

/// A table whose payloads are functions of the key, of mixed widths and signedness (12 bytes a
/// row).
pub fn table<B: Backend, K: Key>(b: &B, keys: &[K], salt: u64) -> Table<B, K> {
    let p0: Vec<u64> = keys.iter().map(|&k| payloads_of(k, salt)[0]).collect();
    let p1: Vec<i32> = keys
        .iter()
        .map(|&k| payloads_of(k, salt)[1] as u32 as i32)
        .collect();
    Table::new(
        b.upload(keys).unwrap(),
        vec![
            Column::U64(b.upload(&p0).unwrap()),
            Column::I32(b.upload(&p1).unwrap()),
        ],
    )
    .unwrap()
}

pub fn download_bits<B: Backend>(b: &B, c: &Column<B>) -> Vec<u64> {
    joinkit_cuda::each_column!(c, c => b.download(c).unwrap().into_iter().map(Element::to_bits).collect())
}

/// A row-id output as (left row, right row) pairs in output order, [`NULL_ROW`] as the right
/// row of semi and anti joins (as [`join_pairs`] has them).
pub fn pairs_from<B: Backend>(b: &B, rows: &RowPairs<B>) -> Vec<(u32, u32)> {
    let left = b.download(&rows.left).unwrap();
    let right = match &rows.right {
        Some(r) => b.download(r).unwrap(),
        None => vec![NULL_ROW; left.len()],
    };
    assert_eq!(left.len(), right.len(), "row-id columns of one output");
    left.into_iter().zip(right).collect()
}

/// A materialized output's rows as (left payload bits..., right payload bits..., valid), in
/// output order; checks that every column has `out.rows` rows.
pub fn rows_of<B: Backend>(b: &B, out: &Materialized<B>) -> Vec<Vec<u64>> {
    let cols: Vec<Vec<u64>> = out
        .left
        .iter()
        .chain(&out.right)
        .map(|c| download_bits(b, c))
        .collect();
    let valid = out.right_valid.as_ref().map(|v| b.download(v).unwrap());
    for c in &cols {
        assert_eq!(c.len() as u64, out.rows, "column length vs rows");
    }
    if let Some(v) = &valid {
        assert_eq!(v.len() as u64, out.rows, "validity length vs rows");
    }
    (0..out.rows as usize)
        .map(|i| {
            let mut row: Vec<u64> = cols.iter().map(|c| c[i]).collect();
            row.push(valid.as_ref().map_or(1, |v| u64::from(v[i])));
            row
        })
        .collect()
}

/// The rows [`table`]s with salts 10 (left) and 20 (right) give for `kind`, sorted.
pub fn expected_rows<K: Key>(l: &[K], r: &[K], kind: JoinKind) -> Vec<Vec<u64>> {
    let mut rows: Vec<Vec<u64>> = join_pairs(l, r, kind)
        .into_iter()
        .map(|(li, ri)| {
            let mut row = payloads_of(l[li as usize], 10).to_vec();
            if kind.has_right_rows() {
                if ri == NULL_ROW {
                    row.extend([0, 0, 0]);
                } else {
                    row.extend(payloads_of(r[ri as usize], 20));
                    row.push(1);
                }
            } else {
                row.push(1);
            }
            row
        })
        .collect();
    rows.sort_unstable();
    rows
}

/// Payload columns of a side in the shapes PHJ-OM's inner join writes in its match (one u32,
/// one u64, two u32 interleaved through the partition) and one it gathers (u32 + u64).
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    U32,
    U64,
    TwoU32,
    TwoU64,
    U32U64,
}

impl Shape {
    pub const ALL: [Shape; 5] = [
        Shape::U32,
        Shape::U64,
        Shape::TwoU32,
        Shape::TwoU64,
        Shape::U32U64,
    ];

    /// Whether each column is 8 bytes wide.
    pub fn widths(self) -> &'static [bool] {
        match self {
            Shape::U32 => &[false],
            Shape::U64 => &[true],
            Shape::TwoU32 => &[false, false],
            Shape::TwoU64 => &[true, true],
            Shape::U32U64 => &[false, true],
        }
    }
}

/// Row `i`'s value in column `c` of a [`shaped_table`] with `salt`: 8 bytes when `wide`, else 4.
pub fn shaped_payload(i: u64, salt: u64, c: usize, wide: bool) -> u64 {
    let h = joinkit_cuda::hash::hash64(i, salt + c as u64);
    if wide { h } else { u64::from(h as u32) }
}

/// Keys and payload columns of `shape`.
pub fn shaped_table<B: Backend, K: Key>(b: &B, keys: &[K], salt: u64, shape: Shape) -> Table<B, K> {
    let columns = shape
        .widths()
        .iter()
        .enumerate()
        .map(|(c, &wide)| {
            let p: Vec<u64> = (0..keys.len() as u64)
                .map(|i| shaped_payload(i, salt, c, wide))
                .collect();
            if wide {
                Column::U64(b.upload(&p).unwrap())
            } else {
                let p: Vec<u32> = p.iter().map(|&v| v as u32).collect();
                Column::U32(b.upload(&p).unwrap())
            }
        })
        .collect();
    Table::new(b.upload(keys).unwrap(), columns).unwrap()
}

/// The rows [`shaped_table`]s with salts 10 and 20 give for `kind`, as [`rows_of`] has them,
/// sorted.
pub fn shaped_expected<K: Key>(
    l: &[K],
    r: &[K],
    kind: JoinKind,
    shape: [Shape; 2],
) -> Vec<Vec<u64>> {
    let side = |i: u32, salt, s: Shape| -> Vec<u64> {
        s.widths()
            .iter()
            .enumerate()
            .map(|(c, &w)| shaped_payload(u64::from(i), salt, c, w))
            .collect()
    };
    let mut rows: Vec<Vec<u64>> = join_pairs(l, r, kind)
        .into_iter()
        .map(|(li, ri)| {
            let mut row = side(li, 10, shape[0]);
            match (kind.has_right_rows(), ri == joinkit::NULL_ROW) {
                (false, _) => row.push(1),
                (true, true) => {
                    row.extend(vec![0; shape[1].widths().len()]);
                    row.push(0);
                }
                (true, false) => {
                    row.extend(side(ri, 20, shape[1]));
                    row.push(1);
                }
            }
            row
        })
        .collect();
    rows.sort_unstable();
    rows
}
