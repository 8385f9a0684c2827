//! The partitioned probe (a right side partitioned once, probed by left chunks partitioned
//! alike), on both backends: every chunking of the left side gives, together, the reference
//! inner join, for 4- and 8-byte keys, duplicates, extreme keys, empty sides, keys that all
//! land in one partition (the mixed-keys path), and each payload shape the match carries (one
//! `u64` column, two `u32` interleaved, two `u64`); other joins are typed errors.

mod common;

use common::{all_unique, keys, runner};
use joinkit::reference::join_pairs;
use joinkit::{Column, CpuBackend, Error, JoinBackend, JoinKind, JoinOptions, PartitionedProbe};
use joinkit::{Materialized, Table};
use joinkit_cuda::{Backend, Key};
use proptest::prelude::*;

/// Payload shapes the match carries, each naming a row by its index `i`.
#[derive(Debug, Clone, Copy)]
enum Shape {
    OneU64,
    TwoU32,
    TwoU64,
}

const SHAPES: [Shape; 3] = [Shape::OneU64, Shape::TwoU32, Shape::TwoU64];

/// `keys` with payloads naming each row by `first + i` (a second column: its complement).
fn table<B: Backend, K: Key>(b: &B, keys: &[K], first: u64, shape: Shape) -> Table<B, K> {
    let ids: Vec<u64> = (first..first + keys.len() as u64).collect();
    let payloads = match shape {
        Shape::OneU64 => vec![Column::U64(b.upload(&ids).unwrap())],
        Shape::TwoU32 => {
            let lo: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
            let hi: Vec<u32> = ids.iter().map(|&i| !(i as u32)).collect();
            vec![
                Column::U32(b.upload(&lo).unwrap()),
                Column::U32(b.upload(&hi).unwrap()),
            ]
        }
        Shape::TwoU64 => {
            let hi: Vec<u64> = ids.iter().map(|&i| !i).collect();
            vec![
                Column::U64(b.upload(&ids).unwrap()),
                Column::U64(b.upload(&hi).unwrap()),
            ]
        }
    };
    Table::new(b.upload(keys).unwrap(), payloads).unwrap()
}

/// An output's (left row, right row) pairs, checking each second column against its first.
fn pairs<B: Backend>(b: &B, out: &Materialized<B>) -> Vec<(u32, u32)> {
    let side = |cols: &[Column<B>]| -> Vec<u32> {
        let bits: Vec<Vec<u64>> = cols.iter().map(|c| common::download_bits(b, c)).collect();
        for c in &bits {
            assert_eq!(c.len() as u64, out.rows, "column length vs rows");
        }
        match &bits[..] {
            [ids] => ids.iter().map(|&i| i as u32).collect(),
            [ids, other] => ids
                .iter()
                .zip(other)
                .map(|(&i, &o)| {
                    assert!(o == !i || o == u64::from(!(i as u32)), "{i} beside {o}");
                    i as u32
                })
                .collect(),
            _ => panic!("{} columns", bits.len()),
        }
    };
    let (l, r) = (side(&out.left), side(&out.right));
    l.into_iter().zip(r).collect()
}

fn check<B: JoinBackend, K: Key>(
    b: &B,
    (l, r): (&[K], &[K]),
    chunk: usize,
    what: &str,
) -> Result<(), TestCaseError> {
    let mut want = join_pairs(l, r, JoinKind::Inner);
    want.sort_unstable();
    for shape in SHAPES {
        for unique in [false, true] {
            if unique && !all_unique(r) {
                continue;
            }
            let why = format!("{what} {shape:?} unique {unique} chunk {chunk}");
            let opts = JoinOptions::new(JoinKind::Inner).right_unique(unique);
            let right = table(b, r, 0, shape);
            let probe = PartitionedProbe::build(b, &right, &opts).unwrap();
            prop_assert_eq!(probe.build_stats().right_rows, r.len(), "{}", why);
            let mut got = Vec::new();
            for (i, part) in l.chunks(chunk).enumerate() {
                let left = table(b, part, (i * chunk) as u64, shape);
                let (out, st) = probe.probe_columns(&left).unwrap();
                prop_assert_eq!(st.output_rows, out.rows, "{}", why);
                got.extend(pairs(b, &out));
            }
            got.sort_unstable();
            prop_assert_eq!(&got, &want, "{}", why);
        }
    }
    Ok(())
}

fn check_keys<K: Key + Arbitrary>(test: &str) {
    let gpu = joinkit_cuda::testing::gpu_or_skip(test);
    runner(16)
        .run(&(keys::<K>(), keys::<K>(), 1usize..400), |(l, r, chunk)| {
            check(&CpuBackend::new(), (&l, &r), chunk, "cpu")?;
            if let Some(g) = &gpu {
                check(g, (&l, &r), chunk, "cuda")?;
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn partitioned_probe_chunks_equal_the_join_u32() {
    check_keys::<u32>("partitioned_probe_chunks_equal_the_join_u32");
}

#[test]
fn partitioned_probe_chunks_equal_the_join_u64() {
    check_keys::<u64>("partitioned_probe_chunks_equal_the_join_u64");
}

/// Keys that are all multiples of 2^20 share their low bits, so the first partition puts them
/// in one partition and the right side is partitioned again on mixed keys; each chunk must be
/// mixed alike.
#[test]
fn keys_in_one_partition_are_mixed_on_both_sides() {
    let gpu = joinkit_cuda::testing::gpu_or_skip("keys_in_one_partition_are_mixed_on_both_sides");
    let r: Vec<u64> = (0..40_000u64).map(|i| i << 20).collect();
    let l: Vec<u64> = (0..60_000u64).map(|i| (i * 7 % 50_000) << 20).collect();
    check(&CpuBackend::new(), (&l, &r), 7_000, "cpu").unwrap();
    if let Some(g) = &gpu {
        check(g, (&l, &r), 7_000, "cuda").unwrap();
    }
}

#[test]
fn other_joins_are_typed_errors() {
    let cpu = CpuBackend::new();
    let right = table(&cpu, &[1u64, 2], 0, Shape::OneU64);
    for kind in [JoinKind::LeftSemi, JoinKind::LeftAnti, JoinKind::LeftOuter] {
        assert!(matches!(
            PartitionedProbe::build(&cpu, &right, &JoinOptions::new(kind)),
            Err(Error::InvalidArgument(_))
        ));
    }
    let opts = JoinOptions::new(JoinKind::Inner);
    let bare = Table::new(cpu.upload(&[1u64, 2]).unwrap(), vec![]).unwrap();
    assert!(matches!(
        PartitionedProbe::build(&cpu, &bare, &opts),
        Err(Error::InvalidArgument(_))
    ));
    let probe = PartitionedProbe::build(&cpu, &right, &opts).unwrap();
    assert!(matches!(
        probe.probe_columns(&bare),
        Err(Error::InvalidArgument(_))
    ));
    assert!(PartitionedProbe::<CpuBackend, u64>::supports(
        &opts,
        &right.payloads,
        &right.payloads
    ));
}
