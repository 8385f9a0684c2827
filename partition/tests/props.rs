//! Property tests: outputs are partitions of the input (a permutation: nothing lost or
//! duplicated, payloads follow their keys, every row in its partition, offsets right), radix is
//! stable and equals a naive stable reference, and CUDA (where a GPU is present) equals the CPU
//! twin exactly for radix and as multisets per partition for hash and bucket-chain. Sizes 0, 1,
//! odd; all-equal keys; keys at 0 and MAX; bit ranges at the edges and split into passes.

use std::ops::Range;

use joinkit_cuda::{Backend, CpuBackend, Element, Error, Key, hash};
use joinkit_partition::{
    BucketChainPartition, Column, FlatPartitions, HashPartition, LowWords, LowWordsPartition,
    MAX_LOW_WORDS_FANOUT, MemberRun, Partitioned, Partitioner, RadixPartition, RowIds, RowNames,
    bucket_pool_buckets, hash_partition_of, member_words,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

type Gpu = Option<joinkit_cuda::testing::TestGpu>;

/// The GPU for a test, or `None` (printed; a failure when `JOINKIT_REQUIRE_GPU` is set).
fn gpu(test: &str) -> Gpu {
    joinkit_cuda::testing::gpu_or_skip(test)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Keys with the shapes that break partitioners: random, few distinct, all equal, extremes.
fn keys<K: Key + Arbitrary>() -> impl Strategy<Value = Vec<K>> {
    let extreme = prop_oneof![Just(K::from_u64(0)), Just(K::MAX), any::<K>()];
    prop_oneof![
        proptest::collection::vec(any::<K>(), 0..3000),
        proptest::collection::vec((0u64..4).prop_map(K::from_u64), 0..3000),
        (any::<K>(), 0usize..2000).prop_map(|(k, n)| vec![k; n]),
        proptest::collection::vec(extreme, 0..500),
        proptest::collection::vec(any::<K>(), 0..3),
    ]
}

/// Radix bit ranges: the edges, one pass, two and three passes (the 24-bit limit, with its
/// 2^24 offsets, has a test of its own: it is slow in debug builds).
fn radix_bits<K: Key>() -> impl Strategy<Value = Range<u32>> {
    let w = K::BITS;
    prop_oneof![
        Just(0..1),
        Just(w - 1..w),
        Just(0..8),
        Just(0..17),
        Just(w - 17..w),
        Just(w - 12..w),
        (0..w)
            .prop_flat_map(move |b| (Just(b), b + 1..=(b + 16).min(w)))
            .prop_map(|(a, b)| a..b)
    ]
}

fn row_ids() -> impl Strategy<Value = RowIds> {
    prop_oneof![Just(RowIds::U32), Just(RowIds::U64)]
}

/// Two payload columns of different widths, derived from the row index.
fn payloads(n: usize) -> (Vec<u32>, Vec<i64>) {
    (
        (0..n as u32).map(|i| i.wrapping_mul(3) ^ 0x5555).collect(),
        (0..n as u64).map(|i| hash::hash64(i, 9) as i64).collect(),
    )
}

/// A column on the host as zero-extended bit patterns.
fn bits<B: Backend>(b: &B, c: &Column<B>) -> Vec<u64> {
    joinkit_cuda::each_column!(c, x => b.download(x).unwrap().into_iter().map(Element::to_bits).collect())
}

/// The two test payloads as columns on `b`.
fn payload_cols<B: Backend>(b: &B, pa: &[u32], pb: &[i64]) -> Vec<Column<B>> {
    vec![
        Column::U32(b.upload(pa).unwrap()),
        Column::I64(b.upload(pb).unwrap()),
    ]
}

/// A partition result on the host: keys, payload bits, row ids, offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Host<K> {
    keys: Vec<K>,
    payloads: Vec<Vec<u64>>,
    row_ids: Vec<u64>,
    offsets: Vec<u64>,
}

fn host<B: Backend, K: Key>(b: &B, p: &Partitioned<B, K>) -> Host<K> {
    Host {
        keys: b.download(&p.keys).unwrap(),
        payloads: p.payloads.iter().map(|c| bits(b, c)).collect(),
        row_ids: p.row_ids.as_ref().map_or_else(Vec::new, |r| bits(b, r)),
        offsets: b.download(&p.offsets).unwrap(),
    }
}

fn flat_host<K: Key>(f: FlatPartitions<K>) -> Host<K> {
    Host {
        keys: f.keys,
        payloads: f.payloads,
        row_ids: f.row_ids.unwrap(),
        offsets: f.offsets,
    }
}

/// Checks that `out` is a partition of the input by `part_of`: offsets right, row ids a
/// permutation, keys and payloads at their row's values, every row in its partition, and, if
/// `stable`, input order within each partition.
fn check_partition<K: Key>(
    keys: &[K],
    pa: &[u32],
    pb: &[i64],
    fanout: usize,
    part_of: impl Fn(K) -> usize,
    out: &Host<K>,
    stable: bool,
) -> Result<(), TestCaseError> {
    let n = keys.len();
    prop_assert_eq!(out.offsets.len(), fanout + 1);
    prop_assert_eq!(out.offsets[0], 0);
    prop_assert_eq!(out.offsets[fanout], n as u64);
    prop_assert!(out.offsets.windows(2).all(|w| w[0] <= w[1]));
    prop_assert_eq!(out.keys.len(), n);
    prop_assert_eq!(out.row_ids.len(), n);
    let mut seen = vec![false; n];
    for j in 0..n {
        let r = out.row_ids[j] as usize;
        prop_assert!(r < n && !seen[r], "row id {} out of range or repeated", r);
        seen[r] = true;
        prop_assert_eq!(out.keys[j], keys[r]);
        prop_assert_eq!(out.payloads[0][j], pa[r].to_bits());
        prop_assert_eq!(out.payloads[1][j], pb[r].to_bits());
        let p = part_of(keys[r]);
        prop_assert!(p < fanout, "partition {} past the fan-out", p);
        let (lo, hi) = (out.offsets[p] as usize, out.offsets[p + 1] as usize);
        prop_assert!(
            lo <= j && j < hi,
            "row {} (partition {}) at {} outside {}..{}",
            r,
            p,
            j,
            lo,
            hi
        );
        if stable && j > lo {
            prop_assert!(out.row_ids[j - 1] < out.row_ids[j], "not stable at {}", j);
        }
    }
    Ok(())
}

/// Per-partition multisets of (key, payload bits, row id).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn multisets<K: Key>(h: &Host<K>) -> Vec<Vec<(u64, u64, u64, u64)>> {
    h.offsets
        .windows(2)
        .map(|w| {
            let mut v: Vec<_> = (w[0] as usize..w[1] as usize)
                .map(|j| {
                    (
                        h.keys[j].to_u64(),
                        h.payloads[0][j],
                        h.payloads[1][j],
                        h.row_ids[j],
                    )
                })
                .collect();
            v.sort_unstable();
            v
        })
        .collect()
}

/// Per-partition multisets of (key, the first `columns` payloads' bits, row id).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn projected<K: Key>(h: &Host<K>, columns: usize) -> Vec<Vec<(u64, Vec<u64>, u64)>> {
    h.offsets
        .windows(2)
        .map(|w| {
            let mut v: Vec<_> = (w[0] as usize..w[1] as usize)
                .map(|j| {
                    let cols = h.payloads[..columns].iter().map(|p| p[j]).collect();
                    (h.keys[j].to_u64(), cols, h.row_ids[j])
                })
                .collect();
            v.sort_unstable();
            v
        })
        .collect()
}

fn naive_radix<K: Key>(keys: &[K], bits: &Range<u32>) -> (Vec<K>, Vec<u64>) {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| (keys[i].digit(bits.start, bits.end), i));
    (
        order.iter().map(|&i| keys[i]).collect(),
        order.iter().map(|&i| i as u64).collect(),
    )
}

fn check_radix<K: Key + Arbitrary>(test: &str) {
    let gpu = gpu(test);
    runner()
        .run(
            &(keys::<K>(), radix_bits::<K>(), row_ids()),
            |(k, bits, ids)| {
                let (pa, pb) = payloads(k.len());
                let cpu = CpuBackend::new();
                let cols = payload_cols(&cpu, &pa, &pb);
                let got = host(
                    &cpu,
                    &cpu.radix_partition(&k, &cols, bits.clone(), ids).unwrap(),
                );
                let fanout = 1usize << (bits.end - bits.start);
                let part_of = |x: K| x.digit(bits.start, bits.end) as usize;
                check_partition(&k, &pa, &pb, fanout, part_of, &got, true)?;
                let (want_keys, want_rows) = naive_radix(&k, &bits);
                prop_assert_eq!(&got.keys, &want_keys);
                prop_assert_eq!(&got.row_ids, &want_rows);
                // Without row ids: the same columns.
                let plain = cpu
                    .radix_partition(&k, &cols, bits.clone(), RowIds::None)
                    .unwrap();
                prop_assert!(plain.row_ids.is_none());
                prop_assert_eq!(&plain.keys, &got.keys);
                #[cfg(feature = "cuda")]
                if let Some(g) = &gpu {
                    let dev = gpu_views::radix(g, &k, &pa, &pb, &[0, 1], bits.clone(), ids);
                    prop_assert_eq!(&dev, &got, "CUDA differs from the CPU twin");
                    let again = host(g, &gpu_owned_radix(g, &k, &pa, &pb, bits.clone(), ids));
                    prop_assert_eq!(&again, &got, "CUDA not deterministic across runs");
                }
                #[cfg(not(feature = "cuda"))]
                let _ = &gpu;
                Ok(())
            },
        )
        .unwrap();
}

#[cfg(feature = "cuda")]
fn gpu_owned_radix<K: Key>(
    g: &joinkit_cuda::CudaBackend,
    k: &[K],
    pa: &[u32],
    pb: &[i64],
    bits: Range<u32>,
    ids: RowIds,
) -> Partitioned<joinkit_cuda::CudaBackend, K> {
    let dk = g.upload(k).unwrap();
    g.radix_partition(&dk, &payload_cols(g, pa, pb), bits, ids)
        .unwrap()
}

#[test]
fn radix_widest_range_in_three_passes() {
    let gpu = gpu("radix_widest_range_in_three_passes");
    let k: Vec<u64> = (0..2001u64)
        .map(|i| hash::hash64(i, 1) | if i % 7 == 0 { u64::MAX } else { 0 })
        .collect();
    let (pa, pb) = payloads(k.len());
    let cpu = CpuBackend::new();
    let cols = payload_cols(&cpu, &pa, &pb);
    for bits in [0..24, 40..64] {
        let got = host(
            &cpu,
            &cpu.radix_partition(&k, &cols, bits.clone(), RowIds::U32)
                .unwrap(),
        );
        let part_of = |x: u64| x.digit(bits.start, bits.end) as usize;
        check_partition(&k, &pa, &pb, 1 << 24, part_of, &got, true).unwrap();
        #[cfg(feature = "cuda")]
        if let Some(g) = &gpu {
            let dev = gpu_views::radix(g, &k, &pa, &pb, &[0, 1], bits.clone(), RowIds::U32);
            assert!(dev == got, "CUDA differs from the CPU twin on {bits:?}");
        }
    }
    #[cfg(not(feature = "cuda"))]
    let _ = &gpu;
}

#[test]
fn radix_u32() {
    check_radix::<u32>("radix_u32");
}
#[test]
fn radix_u64() {
    check_radix::<u64>("radix_u64");
}

/// Keys with at most one column (alone, with one 4- or 8-byte payload, or with 4- or 8-byte row
/// ids) take CUDA's radix-sort path rather than the multi-column scatter: the same columns and
/// offsets as the CPU twin, whose keys and row ids equal the naive stable reference.
fn check_radix_one_column<K: Key + Arbitrary>(test: &str) {
    let gpu = gpu(test);
    let shapes: [(&[usize], RowIds); 5] = [
        (&[], RowIds::None),
        (&[0], RowIds::None),
        (&[1], RowIds::None),
        (&[], RowIds::U32),
        (&[], RowIds::U64),
    ];
    runner()
        .run(
            &(keys::<K>(), radix_bits::<K>(), 0..shapes.len()),
            |(k, bits, shape)| {
                let (which, ids) = shapes[shape];
                let (pa, pb) = payloads(k.len());
                let cpu = CpuBackend::new();
                let mut all = payload_cols(&cpu, &pa, &pb);
                let cols: Vec<_> = which.iter().rev().map(|&i| all.remove(i)).collect();
                let want = host(
                    &cpu,
                    &cpu.radix_partition(&k, &cols, bits.clone(), ids).unwrap(),
                );
                let (want_keys, want_rows) = naive_radix(&k, &bits);
                prop_assert_eq!(&want.keys, &want_keys);
                if ids != RowIds::None {
                    prop_assert_eq!(&want.row_ids, &want_rows);
                }
                #[cfg(feature = "cuda")]
                if let Some(g) = &gpu {
                    let dev = gpu_views::radix(g, &k, &pa, &pb, which, bits.clone(), ids);
                    prop_assert_eq!(&dev, &want, "CUDA differs from the CPU twin");
                }
                #[cfg(not(feature = "cuda"))]
                let _ = &gpu;
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn radix_one_column_u32() {
    check_radix_one_column::<u32>("radix_one_column_u32");
}

#[test]
fn radix_one_column_u64() {
    check_radix_one_column::<u64>("radix_one_column_u64");
}

fn check_hash<K: Key + Arbitrary>(test: &str) {
    let gpu = gpu(test);
    let fanout = prop_oneof![
        Just(1usize),
        Just(2),
        Just(3),
        Just(4),
        Just(16),
        Just(17),
        Just(256),
        Just(257),
        Just(512),
        Just(1000),
        Just(1024),
        1usize..1025
    ];
    runner()
        .run(
            &(keys::<K>(), fanout, any::<u32>(), row_ids()),
            |(k, fanout, seed, ids)| {
                let (pa, pb) = payloads(k.len());
                let cpu = CpuBackend::new();
                let cols = payload_cols(&cpu, &pa, &pb);
                let got = host(
                    &cpu,
                    &cpu.hash_partition(&k, &cols, fanout, seed, ids).unwrap(),
                );
                let part_of = |x: K| hash_partition_of(x, seed, fanout as u32);
                check_partition(&k, &pa, &pb, fanout, part_of, &got, false)?;
                #[cfg(feature = "cuda")]
                if let Some(g) = &gpu {
                    let dev = gpu_views::hash(g, &k, &pa, &pb, &[0, 1], fanout, seed, ids);
                    check_partition(&k, &pa, &pb, fanout, part_of, &dev, false)?;
                    prop_assert_eq!(&dev.offsets, &got.offsets);
                    prop_assert_eq!(multisets(&dev), multisets(&got));
                    // Narrow rows, the key alone or with the 4-byte column (read rows of at
                    // most 8 bytes: the small fan-out class's scatter up to a fan-out of 16).
                    for which in [&[][..], &[0]] {
                        let dev = gpu_views::hash(g, &k, &pa, &pb, which, fanout, seed, ids);
                        prop_assert_eq!(&dev.offsets, &got.offsets);
                        prop_assert_eq!(projected(&dev, which.len()), projected(&got, which.len()));
                    }
                }
                #[cfg(not(feature = "cuda"))]
                let _ = &gpu;
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn hash_u32() {
    check_hash::<u32>("hash_u32");
}
#[test]
fn hash_u64() {
    check_hash::<u64>("hash_u64");
}

/// A partition into low words checked against the naive stable one: offsets, each partition's
/// low words in input order, the rows named as asked (their ids; or each partition's
/// membership bitmap, whose set bits give the ids back), and the window's flag against every
/// key.
fn check_low_words<B: LowWordsPartition>(
    b: &B,
    keys: &[u64],
    (fanout, seed): (usize, u32),
    window: u64,
    names: RowNames,
    out: &LowWords<B>,
) -> Result<(), TestCaseError> {
    let low = |k: u64| k as u32;
    let offsets = &out.offsets;
    prop_assert_eq!(offsets.len(), fanout + 1);
    let got_keys = b.download(&out.keys).unwrap();
    let got_ids = out.row_ids.as_ref().map(|i| b.download(i).unwrap());
    let got_members = out.members.as_ref().map(|m| b.download(m).unwrap());
    prop_assert_eq!(got_ids.is_some(), matches!(names, RowNames::Ids { .. }));
    prop_assert_eq!(got_members.is_some(), names == RowNames::Members);
    let words = member_words(keys.len());
    if let Some(m) = &got_members {
        prop_assert_eq!(m.len(), fanout * words);
    }
    for p in 0..fanout {
        let rows: Vec<usize> = (0..keys.len())
            .filter(|&i| hash_partition_of(low(keys[i]), seed, fanout as u32) == p)
            .collect();
        let range = offsets[p] as usize..offsets[p + 1] as usize;
        prop_assert_eq!(range.len(), rows.len(), "partition {}", p);
        let want: Vec<u32> = rows.iter().map(|&i| low(keys[i])).collect();
        prop_assert_eq!(&got_keys[range.clone()], &want[..], "partition {} keys", p);
        if let (Some(ids), RowNames::Ids { from }) = (&got_ids, names) {
            let want: Vec<u32> = rows.iter().map(|&i| from + i as u32).collect();
            prop_assert_eq!(&ids[range.clone()], &want[..], "partition {} ids", p);
        }
        if let Some(m) = &got_members {
            let bitmap = &m[p * words..(p + 1) * words];
            let mut want = vec![0u32; words];
            for &i in &rows {
                want[i / 32] |= 1 << (i % 32);
            }
            prop_assert_eq!(bitmap, &want[..], "partition {} bitmap", p);
            let run = [MemberRun { words, first_id: 9 }];
            let ids = b
                .member_row_ids(&b.upload(bitmap).unwrap(), &run, rows.len())
                .unwrap();
            let want: Vec<u32> = rows.iter().map(|&i| 9 + i as u32).collect();
            prop_assert_eq!(b.download(&ids).unwrap(), want, "partition {} ids", p);
        }
    }
    let inside = keys.iter().all(|&k| k.wrapping_sub(window) >> 32 == 0);
    prop_assert_eq!(out.within_window, inside);
    Ok(())
}

/// The partition into low words on both backends: keys of every shape, windows at the least
/// key (every key inside where they span under 2^32), at a random place and at the top of the
/// key space, fan-outs 1 to 16, rows unnamed, named by ids from 0 and from a high base, or by
/// membership bitmaps.
#[test]
fn low_words_partition_the_low_words_and_check_the_window() {
    let gpu = gpu("low_words_partition_the_low_words_and_check_the_window");
    let narrow_keys = (
        any::<u64>(),
        proptest::collection::vec(0u64..1 << 32, 0..3000),
    )
        .prop_map(|(base, v)| v.into_iter().map(|x| base.wrapping_add(x)).collect());
    let keys = prop_oneof![keys::<u64>(), narrow_keys];
    let window = prop_oneof![
        Just(None),
        Just(Some(u64::MAX - 5)),
        any::<u64>().prop_map(Some)
    ];
    let fanout = prop_oneof![
        Just(1usize),
        Just(2),
        Just(3),
        Just(MAX_LOW_WORDS_FANOUT),
        1usize..17
    ];
    let from = prop_oneof![Just(0u32), Just(1 << 31), any::<u32>().prop_map(|x| x >> 4)];
    let names = prop_oneof![
        Just(RowNames::None),
        Just(RowNames::Members),
        from.prop_map(|from| RowNames::Ids { from }),
    ];
    runner()
        .run(
            &(keys, window, fanout, any::<u32>(), names),
            |(k, window, fanout, seed, names)| {
                let window = window.unwrap_or_else(|| k.iter().copied().min().unwrap_or(0));
                let cpu = CpuBackend::new();
                let by = (fanout, seed);
                let out = cpu.hash_partition_low_words(&k, by, window, names).unwrap();
                check_low_words(&cpu, &k, by, window, names, &out)?;
                #[cfg(feature = "cuda")]
                if let Some(g) = &gpu {
                    let dk = g.upload(&k).unwrap();
                    let out = g.hash_partition_low_words(&dk, by, window, names).unwrap();
                    check_low_words(g, &k, by, window, names, &out)?;
                }
                #[cfg(not(feature = "cuda"))]
                let _ = &gpu;
                Ok(())
            },
        )
        .unwrap();
}

/// Row ids from membership bitmaps of up to 16 senders laid end to end (empty ones, one word,
/// words past a tile), against the set bits counted naively, on both backends (on CUDA also
/// into a poisoned output and into one shorter than the set bits).
#[test]
fn member_row_ids_are_the_set_bits_of_each_run_in_turn() {
    let gpu = gpu("member_row_ids_are_the_set_bits_of_each_run_in_turn");
    let word = prop_oneof![
        Just(0u32),
        Just(u32::MAX),
        Just(1),
        Just(1 << 31),
        any::<u32>()
    ];
    let run = (
        proptest::collection::vec(word, 0..3000),
        prop_oneof![Just(0u32), any::<u32>().prop_map(|x| x >> 2)],
    );
    runner()
        .run(
            &proptest::collection::vec(run, 0..=MAX_LOW_WORDS_FANOUT),
            |runs| {
                let members: Vec<u32> = runs.iter().flat_map(|(w, _)| w.iter().copied()).collect();
                let table: Vec<MemberRun> = (runs.iter())
                    .map(|(w, first_id)| MemberRun {
                        words: w.len(),
                        first_id: *first_id,
                    })
                    .collect();
                let mut want = Vec::new();
                for (words, first) in &runs {
                    for (w, &bits) in words.iter().enumerate() {
                        for b in 0..32 {
                            if bits >> b & 1 == 1 {
                                want.push(first.wrapping_add((w * 32 + b) as u32));
                            }
                        }
                    }
                }
                let cpu = CpuBackend::new();
                let got = cpu.member_row_ids(&members, &table, want.len()).unwrap();
                prop_assert_eq!(&got, &want);
                #[cfg(feature = "cuda")]
                if let Some(g) = &gpu {
                    let dm = g.upload(&members).unwrap();
                    let mut out = g.member_row_ids(&dm, &table, want.len()).unwrap();
                    prop_assert_eq!(g.download(&out).unwrap(), want.clone());
                    // Through the view-level entry point, into a given output.
                    let into = |out: &mut joinkit_cuda::DeviceBuffer<u32>| {
                        joinkit_partition::cuda::member_row_ids(
                            g,
                            &dm.view(),
                            &table,
                            &mut out.view_mut(),
                            &mut joinkit_cuda::Scratch::new(),
                        )
                        .unwrap()
                    };
                    // Poisoned first: every id written.
                    g.fill(&mut out, u32::MAX).unwrap();
                    into(&mut out);
                    prop_assert_eq!(g.download(&out).unwrap(), want.clone());
                    // An output shorter than the set bits takes their first ids.
                    let mut short = g.alloc::<u32>(want.len() / 2).unwrap();
                    into(&mut short);
                    prop_assert_eq!(g.download(&short).unwrap(), want[..want.len() / 2].to_vec());
                }
                #[cfg(not(feature = "cuda"))]
                let _ = &gpu;
                Ok(())
            },
        )
        .unwrap();
}

/// Bad arguments to the partition into low words and to the ids of its bitmaps: typed errors
/// on both backends.
fn low_words_errors<B: LowWordsPartition>(b: &B) {
    let wide = b.upload(&[1u64, 2, 3]).unwrap();
    let narrow = b.upload(&[1u32, 2, 3]).unwrap();
    let ids = |from| RowNames::Ids { from };
    assert!(matches!(
        b.hash_partition_low_words(&narrow, (2, 0), 0, ids(0)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        b.hash_partition_low_words(&wide, (0, 0), 0, RowNames::Members),
        Err(Error::EmptyInput(_))
    ));
    assert!(matches!(
        b.hash_partition_low_words(&wide, (MAX_LOW_WORDS_FANOUT + 1, 0), 0, ids(0)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        b.hash_partition_low_words(&wide, (2, 0), 0, ids(u32::MAX - 1)),
        Err(Error::SizeOverflow(_))
    ));
    // The last ids that fit.
    let out = b
        .hash_partition_low_words(&wide, (2, 0), 0, ids(u32::MAX - 2))
        .unwrap();
    let mut got = b.download(out.row_ids.as_ref().unwrap()).unwrap();
    got.sort_unstable();
    assert_eq!(got, [u32::MAX - 2, u32::MAX - 1, u32::MAX]);
    let bitmap = b.upload(&[0b101u32, 1]).unwrap();
    let run = |words| MemberRun { words, first_id: 0 };
    assert!(matches!(
        b.member_row_ids(&bitmap, &[run(1)], 2),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        b.member_row_ids(&bitmap, &[run(1), run(1), run(0)].repeat(6), 3),
        Err(Error::InvalidArgument(_))
    ));
    let got = b.member_row_ids(&bitmap, &[run(1), run(1)], 3).unwrap();
    assert_eq!(b.download(&got).unwrap(), [0, 2, 0]);
}

#[test]
fn low_words_bad_input_is_a_typed_error() {
    let cpu = CpuBackend::new();
    low_words_errors(&cpu);
    // The CPU counts the bits it finds against the rows it was told of.
    let one = MemberRun {
        words: 1,
        first_id: 0,
    };
    assert!(matches!(
        cpu.member_row_ids(&vec![0b11], &[one], 3),
        Err(Error::Corrupt(_))
    ));
    #[cfg(feature = "cuda")]
    if let Some(g) = gpu("low_words_bad_input_is_a_typed_error") {
        low_words_errors(&g);
    }
}

fn partitioner<K: Key>() -> impl Strategy<Value = Partitioner> {
    let w = K::BITS;
    prop_oneof![
        Just(Partitioner::Radix(0..1)),
        Just(Partitioner::Radix(w - 1..w)),
        Just(Partitioner::Radix(0..10)),
        (0..w - 8).prop_map(|b| Partitioner::Radix(b..b + 8)),
        (1usize..=1024, any::<u32>()).prop_map(|(fanout, seed)| Partitioner::Hash { fanout, seed }),
    ]
}

fn check_bucket<K: Key + Arbitrary>(test: &str) {
    let gpu = gpu(test);
    let cap = prop_oneof![
        Just(1usize),
        Just(3),
        Just(16),
        Just(100),
        Just(4096),
        1usize..5000
    ];
    runner()
        .run(
            &(keys::<K>(), partitioner::<K>(), cap, row_ids()),
            |(k, by, cap, ids)| {
                let (pa, pb) = payloads(k.len());
                let cpu = CpuBackend::new();
                let cols = payload_cols(&cpu, &pa, &pb);
                let fanout = by.fanout::<K>().unwrap();
                let chains = cpu
                    .bucket_chain_partition(&k, &cols, &by, cap, ids)
                    .unwrap();
                prop_assert_eq!(chains.fanout(), fanout);
                #[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
                let cpu_used = chains.used[0];
                let got = flat_host(chains.flatten(&cpu).unwrap());
                let part_of = |x: K| by.partition_of(x).unwrap();
                check_partition(&k, &pa, &pb, fanout, part_of, &got, false)?;
                #[cfg(feature = "cuda")]
                if let Some(g) = &gpu {
                    let dk = g.upload(&k).unwrap();
                    let cols = payload_cols(g, &pa, &pb);
                    let chains = g.bucket_chain_partition(&dk, &cols, &by, cap, ids).unwrap();
                    let dev = flat_host(chains.flatten(g).unwrap());
                    check_partition(&k, &pa, &pb, fanout, part_of, &dev, false)?;
                    prop_assert_eq!(&dev.offsets, &got.offsets);
                    prop_assert_eq!(multisets(&dev), multisets(&got));
                    let used = g.download(&chains.used).unwrap()[0];
                    prop_assert_eq!(used, cpu_used, "buckets taken");
                }
                #[cfg(not(feature = "cuda"))]
                let _ = &gpu;
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn bucket_chain_u32() {
    check_bucket::<u32>("bucket_chain_u32");
}
#[test]
fn bucket_chain_u64() {
    check_bucket::<u64>("bucket_chain_u64");
}

/// Bad input gets the same typed error from both backends.
fn errors_on<B: RadixPartition + HashPartition + BucketChainPartition>(b: &B) {
    let k = b.upload(&[1u32, 2, 3]).unwrap();
    let short = b.upload(&[1u64, 2]).unwrap();
    let good = || b.upload(&[1u64, 2, 3]).unwrap();
    let mismatch = [Column::U64(good()), Column::U64(short)];
    let ok = [Column::U64(good())];
    let is_len = |e: Error| {
        matches!(
            e,
            Error::LengthMismatch {
                left: 3,
                right: 2,
                ..
            }
        )
    };
    assert!(is_len(
        b.radix_partition(&k, &mismatch, 0..8, RowIds::None)
            .unwrap_err()
    ));
    assert!(is_len(
        b.hash_partition(&k, &mismatch, 4, 0, RowIds::None)
            .unwrap_err()
    ));
    let by = Partitioner::Hash { fanout: 4, seed: 0 };
    assert!(is_len(
        b.bucket_chain_partition(&k, &mismatch, &by, 8, RowIds::None)
            .err()
            .unwrap()
    ));
    for bits in [0..33, 32..33, 5..5, Range { start: 9, end: 3 }] {
        let e = b
            .radix_partition(&k, &ok, bits.clone(), RowIds::None)
            .unwrap_err();
        assert!(
            matches!(e, Error::BitRange { width: 32, .. }),
            "{bits:?}: {e:?}"
        );
        let e = b.bucket_chain_partition(&k, &ok, &Partitioner::Radix(bits), 8, RowIds::None);
        assert!(matches!(e.err().unwrap(), Error::BitRange { .. }));
    }
    let e = b.radix_partition(&k, &ok, 0..25, RowIds::None).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    let e = b.hash_partition(&k, &ok, 0, 0, RowIds::None).unwrap_err();
    assert!(matches!(e, Error::EmptyInput(_)), "{e:?}");
    let e = b
        .hash_partition(&k, &ok, 1025, 0, RowIds::None)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    let zero = Partitioner::Hash { fanout: 0, seed: 0 };
    let e = b
        .bucket_chain_partition(&k, &ok, &zero, 8, RowIds::None)
        .err()
        .unwrap();
    assert!(matches!(e, Error::EmptyInput(_)), "{e:?}");
    let e = b.bucket_chain_partition(&k, &ok, &Partitioner::Radix(0..11), 8, RowIds::None);
    assert!(matches!(e.err().unwrap(), Error::InvalidArgument(_)));
    let e = b
        .bucket_chain_partition(&k, &ok, &by, 0, RowIds::None)
        .err()
        .unwrap();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    let many: Vec<Column<B>> = (0..16).map(|_| Column::U64(good())).collect();
    let e = b
        .bucket_chain_partition(&k, &many, &by, 8, RowIds::U32)
        .err()
        .unwrap();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    // 16 columns without row ids is fine.
    assert!(
        b.bucket_chain_partition(&k, &many, &by, 8, RowIds::None)
            .is_ok()
    );
}

/// Pool sizes near `usize::MAX` are an error, not an overflow of the bucket count.
#[test]
fn pool_size_of_huge_inputs_is_an_error() {
    for (rows, fanout, cap) in [(usize::MAX, usize::MAX, 1), (usize::MAX, 1024, 1 << 24)] {
        assert!(matches!(
            bucket_pool_buckets(rows, fanout, cap),
            Err(Error::SizeOverflow(_))
        ));
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    errors_on(&CpuBackend::new());
    #[cfg(feature = "cuda")]
    if let Some(g) = gpu("bad_input_is_a_typed_error") {
        errors_on(&g);
    }
}

#[test]
fn many_payload_columns_follow_their_keys() {
    // More than one scatter launch's worth of columns (16) on the GPU; mixed widths.
    let keys: Vec<u64> = (0..5000u64).map(|i| hash::hash64(i, 3)).collect();
    let cols32: Vec<Vec<u32>> = (0..10)
        .map(|c| (0..5000u32).map(|i| i * 31 + c).collect())
        .collect();
    let cols64: Vec<Vec<u64>> = (0..10)
        .map(|c| (0..5000u64).map(|i| i << 20 | c).collect())
        .collect();
    let check = |p: Vec<Vec<u64>>, ids: Vec<u64>| {
        for (c, col) in p.iter().enumerate() {
            for (j, &v) in col.iter().enumerate() {
                let r = ids[j];
                let want = if c % 2 == 0 {
                    u64::from(cols32[c / 2][r as usize])
                } else {
                    cols64[c / 2][r as usize]
                };
                assert_eq!(v, want, "column {c} row {j}");
            }
        }
    };
    // Keys follow their row ids, and every partition's range holds exactly its keys.
    let grouped = |out: &[u64], offsets: &[u64], ids: &[u64], part_of: &dyn Fn(u64) -> usize| {
        assert_eq!(offsets.first(), Some(&0));
        assert_eq!(offsets.last(), Some(&(keys.len() as u64)));
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
        for (p, w) in offsets.windows(2).enumerate() {
            for j in w[0] as usize..w[1] as usize {
                assert_eq!(out[j], keys[ids[j] as usize], "key at {j}");
                assert_eq!(part_of(out[j]), p, "partition of the key at {j}");
            }
        }
    };
    let radix = |k: u64| k.digit(3, 19) as usize;
    let cpu = CpuBackend::new();
    let refs: Vec<Column<CpuBackend>> = (0..20)
        .map(|c| {
            if c % 2 == 0 {
                Column::U32(cols32[c / 2].clone())
            } else {
                Column::U64(cols64[c / 2].clone())
            }
        })
        .collect();
    let p = cpu
        .radix_partition(&keys, &refs, 3..19, RowIds::U64)
        .unwrap();
    let ids = bits(&cpu, p.row_ids.as_ref().unwrap());
    grouped(&p.keys, &p.offsets, &ids, &radix);
    check(
        p.payloads.iter().map(|c| bits(&cpu, c)).collect(),
        ids.clone(),
    );
    #[cfg(feature = "cuda")]
    if let Some(g) = gpu("many_payload_columns_follow_their_keys") {
        let dk = g.upload(&keys).unwrap();
        let refs: Vec<Column<joinkit_cuda::CudaBackend>> = (0..20)
            .map(|c| {
                if c % 2 == 0 {
                    Column::U32(g.upload(&cols32[c / 2]).unwrap())
                } else {
                    Column::U64(g.upload(&cols64[c / 2]).unwrap())
                }
            })
            .collect();
        let q = g.radix_partition(&dk, &refs, 3..19, RowIds::U64).unwrap();
        let gids = bits(&g, q.row_ids.as_ref().unwrap());
        assert_eq!(gids, ids);
        let (qk, qo) = (
            g.download(&q.keys).unwrap(),
            g.download(&q.offsets).unwrap(),
        );
        grouped(&qk, &qo, &gids, &radix);
        check(q.payloads.iter().map(|c| bits(&g, c)).collect(), gids);
        // 77: the one-pass kernel; 1024: a radix partition of the hashed keys.
        for fanout in [77, 1024] {
            let h = g
                .hash_partition(&dk, &refs, fanout, 5, RowIds::U32)
                .unwrap();
            let hids = bits(&g, h.row_ids.as_ref().unwrap());
            let (hk, ho) = (
                g.download(&h.keys).unwrap(),
                g.download(&h.offsets).unwrap(),
            );
            grouped(&hk, &ho, &hids, &|k| hash_partition_of(k, 5, fanout as u32));
            check(h.payloads.iter().map(|c| bits(&g, c)).collect(), hids);
        }
    }
}

#[test]
fn payload_columns_keep_their_type() {
    let cpu = CpuBackend::new();
    let k = vec![3u32, 1, 2];
    let (a, b) = (vec![-1i32, -2, -3], vec![7u64, 8, 9]);
    let p = cpu
        .radix_partition(&k, &[Column::I32(a), Column::U64(b)], 0..2, RowIds::None)
        .unwrap();
    assert!(matches!(&p.payloads[0], Column::I32(v) if *v == vec![-2, -3, -1]));
    assert!(matches!(&p.payloads[1], Column::U64(v) if *v == vec![8, 9, 7]));
    assert_eq!(p.payloads[0].width(), 4);
    assert_eq!(p.offsets, vec![0, 0, 1, 2, 3]);
}

/// View-level runs with poisoned outputs, so a slot the kernel fails to write shows.
#[cfg(feature = "cuda")]
mod gpu_views {
    use super::*;
    use joinkit_cuda::{CudaBackend, Scratch, testing::POISON_U64};
    use joinkit_partition::cuda::{self, ColumnIn, ColumnOut};

    fn poisoned<T: Element>(g: &CudaBackend, n: usize) -> joinkit_cuda::DeviceBuffer<T> {
        let mut b = g.alloc::<T>(n).unwrap();
        g.fill(&mut b, T::from_bits(POISON_U64)).unwrap();
        b
    }

    /// Runs `call` on poisoned outputs with the payloads `which` (indices into `[pa, pb]`).
    #[allow(clippy::too_many_arguments)]
    fn run<K: Key>(
        g: &CudaBackend,
        k: &[K],
        pa: &[u32],
        pb: &[i64],
        which: &[usize],
        ids: RowIds,
        fanout: usize,
        call: impl FnOnce(
            &joinkit_cuda::cudarc::driver::CudaView<'_, K>,
            &mut joinkit_cuda::cudarc::driver::CudaViewMut<'_, K>,
            &[(ColumnIn<'_>, ColumnOut<'_>)],
            Option<ColumnOut<'_>>,
            &mut joinkit_cuda::cudarc::driver::CudaViewMut<'_, u64>,
            &mut Scratch,
        ) -> joinkit_cuda::Result<()>,
    ) -> Host<K> {
        let n = k.len();
        let (dk, da, db) = (
            g.upload(k).unwrap(),
            g.upload(pa).unwrap(),
            g.upload(pb).unwrap(),
        );
        let mut ok = poisoned::<K>(g, n);
        let mut oa = poisoned::<u32>(g, n);
        let mut ob = poisoned::<i64>(g, n);
        let mut ids32 = poisoned::<u32>(g, n);
        let mut ids64 = poisoned::<u64>(g, n);
        let mut off = poisoned::<u64>(g, fanout + 1);
        let mut scratch = Scratch::new();
        {
            let mut pairs = [
                Some((ColumnIn::from_buffer(&da), ColumnOut::from_buffer(&mut oa))),
                Some((ColumnIn::from_buffer(&db), ColumnOut::from_buffer(&mut ob))),
            ];
            let pairs: Vec<_> = which.iter().filter_map(|&i| pairs[i].take()).collect();
            let id_out = match ids {
                RowIds::U32 => Some(ColumnOut::from_buffer(&mut ids32)),
                RowIds::U64 => Some(ColumnOut::from_buffer(&mut ids64)),
                RowIds::None => None,
            };
            call(
                &dk.view(),
                &mut ok.view_mut(),
                &pairs,
                id_out,
                &mut off.view_mut(),
                &mut scratch,
            )
            .unwrap();
        }
        let payloads: [Vec<u64>; 2] = [
            g.download(&oa)
                .unwrap()
                .into_iter()
                .map(Element::to_bits)
                .collect(),
            g.download(&ob)
                .unwrap()
                .into_iter()
                .map(Element::to_bits)
                .collect(),
        ];
        Host {
            keys: g.download(&ok).unwrap(),
            payloads: which.iter().map(|&i| payloads[i].clone()).collect(),
            row_ids: match ids {
                RowIds::U32 => g
                    .download(&ids32)
                    .unwrap()
                    .into_iter()
                    .map(u64::from)
                    .collect(),
                RowIds::U64 => g.download(&ids64).unwrap(),
                RowIds::None => Vec::new(),
            },
            offsets: g.download(&off).unwrap(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn radix<K: Key>(
        g: &CudaBackend,
        k: &[K],
        pa: &[u32],
        pb: &[i64],
        which: &[usize],
        bits: Range<u32>,
        ids: RowIds,
    ) -> Host<K> {
        let fanout = 1usize << (bits.end - bits.start);
        run(
            g,
            k,
            pa,
            pb,
            which,
            ids,
            fanout,
            |ki, ko, pairs, id, off, s| cuda::radix_partition(g, ki, ko, pairs, id, off, bits, s),
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn hash<K: Key>(
        g: &CudaBackend,
        k: &[K],
        pa: &[u32],
        pb: &[i64],
        which: &[usize],
        fanout: usize,
        seed: u32,
        ids: RowIds,
    ) -> Host<K> {
        run(
            g,
            k,
            pa,
            pb,
            which,
            ids,
            fanout,
            |ki, ko, pairs, id, off, s| {
                cuda::hash_partition(g, ki, ko, pairs, id, off, fanout, seed, s)
            },
        )
    }
}

/// Large GPU-only runs (2^24 rows): uniform and skewed keys, each operation once.
#[cfg(feature = "cuda")]
mod large {
    use super::*;
    use joinkit_cuda::CudaBackend;

    const N: usize = 1 << 24;

    /// Power-law keys: key = hash(i) >> (hash(i) % 32 extra bits), so small keys repeat a lot.
    fn skewed(n: usize) -> Vec<u32> {
        (0..n as u64)
            .map(|i| {
                let h = hash::hash64(i, 11);
                ((h as u32) >> ((h >> 32) % 32)) as u32
            })
            .collect()
    }

    fn uniform<K: Key>(n: usize) -> Vec<K> {
        (0..n as u64)
            .map(|i| K::from_u64(hash::hash64(i, 5)))
            .collect()
    }

    fn gpu_host<K: Key>(g: &CudaBackend, p: &Partitioned<CudaBackend, K>) -> Host<K> {
        host(g, p)
    }

    fn partition_all<K: Key>(
        g: &CudaBackend,
        k: &[K],
        op: impl Fn(&CudaBackend, &joinkit_cuda::DeviceBuffer<K>, &[Column<CudaBackend>]) -> Host<K>,
    ) -> (Host<K>, Vec<u32>, Vec<i64>) {
        let (pa, pb) = payloads(k.len());
        let dk = g.upload(k).unwrap();
        (op(g, &dk, &payload_cols(g, &pa, &pb)), pa, pb)
    }

    #[test]
    fn radix_large_equals_cpu() {
        let Some(g) = gpu("radix_large_equals_cpu") else {
            return;
        };
        for (keys, bits) in [
            (uniform::<u32>(N), 0..8),
            (skewed(N), 0..8),
            (uniform::<u32>(N), 4..20),
        ] {
            let (dev, pa, pb) = partition_all(&g, &keys, |g, dk, cols| {
                gpu_host(
                    g,
                    &g.radix_partition(dk, cols, bits.clone(), RowIds::U32)
                        .unwrap(),
                )
            });
            let cpu = CpuBackend::new();
            let want = host(
                &cpu,
                &cpu.radix_partition(
                    &keys,
                    &payload_cols(&cpu, &pa, &pb),
                    bits.clone(),
                    RowIds::U32,
                )
                .unwrap(),
            );
            assert!(
                dev == want,
                "radix {bits:?} on 2^24 keys differs from the CPU twin"
            );
        }
        let keys = uniform::<u64>(N);
        let (dev, pa, pb) = partition_all(&g, &keys, |g, dk, cols| {
            gpu_host(
                g,
                &g.radix_partition(dk, cols, 40..64, RowIds::U64).unwrap(),
            )
        });
        let cpu = CpuBackend::new();
        let want = host(
            &cpu,
            &cpu.radix_partition(&keys, &payload_cols(&cpu, &pa, &pb), 40..64, RowIds::U64)
                .unwrap(),
        );
        assert!(
            dev == want,
            "radix 40..64 on 2^24 u64 keys differs from the CPU twin"
        );
    }

    #[test]
    fn hash_large_is_a_partition() {
        let Some(g) = gpu("hash_large_is_a_partition") else {
            return;
        };
        // Small fan-outs with both columns (rows too wide for the small class; it has its own
        // test below), an odd size leaving a partial tile.
        for (keys, fanout) in [
            (uniform::<u32>(N), 1024usize),
            (skewed(N), 512),
            (skewed(N), 1000),
            (skewed(N), 256),
            (uniform::<u32>(N + 3), 4),
            (skewed(N), 3),
            (skewed(N - 1), 16),
        ] {
            let (dev, pa, pb) = partition_all(&g, &keys, |g, dk, cols| {
                gpu_host(
                    g,
                    &g.hash_partition(dk, cols, fanout, 17, RowIds::U32).unwrap(),
                )
            });
            let part_of = |x: u32| hash_partition_of(x, 17, fanout as u32);
            check_partition(&keys, &pa, &pb, fanout, part_of, &dev, false).unwrap();
        }
    }

    /// Small fan-outs (the distributed join's partition by rank) with row ids only and with a
    /// 4-byte column too, 4- and 8-byte keys (the small class's scatter, but for 8-byte keys
    /// with the column: the 256-counter one), against the CPU twin's partitions.
    #[test]
    fn hash_small_fanout_equals_cpu() {
        let Some(g) = gpu("hash_small_fanout_equals_cpu") else {
            return;
        };
        small_fanout_equals_cpu::<u32>(&g);
        small_fanout_equals_cpu::<u64>(&g);
    }

    fn small_fanout_equals_cpu<K: Key>(g: &CudaBackend) {
        let cpu = CpuBackend::new();
        let cases = [(N + 5, 4usize), (N, 2), (3 * 4096 + 1, 16), (N / 2, 7)];
        for ((n, fanout), with_column) in cases.into_iter().flat_map(|c| [(c, false), (c, true)]) {
            let keys = uniform::<K>(n);
            let ids: Vec<u32> = (0..n as u32)
                .map(|i| i.wrapping_mul(2_654_435_761))
                .collect();
            let column = with_column.then(|| ids.clone());
            let dev_cols: Vec<_> = column
                .iter()
                .map(|v| Column::U32(g.upload(v).unwrap()))
                .collect();
            let cpu_cols: Vec<_> = column.iter().map(|v| Column::U32(v.clone())).collect();
            let dev = g
                .hash_partition(&g.upload(&keys).unwrap(), &dev_cols, fanout, 9, RowIds::U32)
                .unwrap();
            let want = cpu
                .hash_partition(&keys, &cpu_cols, fanout, 9, RowIds::U32)
                .unwrap();
            let (dev, want) = (host(g, &dev), host(&cpu, &want));
            assert_eq!(dev.offsets, want.offsets, "offsets, fan-out {fanout}");
            let columns = usize::from(with_column);
            assert_eq!(
                projected(&dev, columns),
                projected(&want, columns),
                "fan-out {fanout}, column {with_column}"
            );
            for p in 0..fanout {
                for j in dev.offsets[p] as usize..dev.offsets[p + 1] as usize {
                    let (k, r) = (dev.keys[j], dev.row_ids[j] as usize);
                    assert_eq!(hash_partition_of(k, 9, fanout as u32), p);
                    assert_eq!(k, keys[r]);
                    if with_column {
                        assert_eq!(dev.payloads[0][j], u64::from(ids[r]));
                    }
                }
            }
        }
    }

    /// The partition into low words over many tiles and chunks: the rows of Gao's shape (dense
    /// keys above 2^32, so the low words differ from the keys), one key past the window in the
    /// last partial tile or none, equal to the CPU twin's (the partition is stable): keys and
    /// ids, keys and membership bitmaps, and the ids those give back.
    #[test]
    fn low_words_large_equals_cpu() {
        let Some(g) = gpu("low_words_large_equals_cpu") else {
            return;
        };
        let cpu = CpuBackend::new();
        let base = 5u64 << 32;
        let cases = [
            (N + 5, 2usize, false),
            (N + 5, 2, true),
            (N - 3, 16, false),
            (N + 7, 3, false),
        ];
        for (n, fanout, outlier) in cases {
            let mut keys: Vec<u64> = uniform::<u32>(n)
                .into_iter()
                .map(|k| base + u64::from(k))
                .collect();
            if outlier {
                keys[n - 2] = base - 1;
            }
            let by = (fanout, 3);
            let dk = g.upload(&keys).unwrap();
            for names in [RowNames::Ids { from: 7 }, RowNames::Members] {
                let dev = g.hash_partition_low_words(&dk, by, base, names).unwrap();
                let want = cpu
                    .hash_partition_low_words(&keys, by, base, names)
                    .unwrap();
                let case = format!("{n} rows, fan-out {fanout}, {names:?}");
                assert_eq!(dev.within_window, !outlier, "{case}");
                assert_eq!(want.within_window, !outlier, "{case}");
                assert_eq!(dev.offsets, want.offsets, "{case}");
                assert!(g.download(&dev.keys).unwrap() == want.keys, "{case}");
                let ids = dev.row_ids.as_ref().map(|i| g.download(i).unwrap());
                assert!(ids == want.row_ids, "{case}");
                let members = dev.members.as_ref().map(|m| g.download(m).unwrap());
                assert!(members == want.members, "{case}");
                if let Some(want_members) = &want.members {
                    // Into poisoned outputs through the view-level entry point: every word and
                    // key written.
                    let mut keys_out = g.alloc::<u32>(n).unwrap();
                    g.fill(&mut keys_out, u32::MAX).unwrap();
                    let mut bitmaps = g.alloc::<u32>(want_members.len()).unwrap();
                    g.fill(&mut bitmaps, u32::MAX).unwrap();
                    let mut offsets = g.alloc::<u64>(fanout + 1).unwrap();
                    let mut outside = g.upload(&[0u32]).unwrap();
                    joinkit_partition::cuda::hash_partition_low_words(
                        &g,
                        &dk.view(),
                        &mut keys_out.view_mut(),
                        joinkit_partition::cuda::RowNamesOut::Members(bitmaps.view_mut()),
                        &mut offsets.view_mut(),
                        by,
                        (base, &mut outside.view_mut()),
                        None,
                        &mut joinkit_cuda::Scratch::new(),
                    )
                    .unwrap();
                    assert!(g.download(&bitmaps).unwrap() == *want_members, "{case}");
                    assert!(g.download(&keys_out).unwrap() == want.keys, "{case}");
                }
                if let Some(m) = &dev.members {
                    // Partition 1's rows named again from its bitmap, as a receiver does.
                    let words = member_words(n);
                    let rows = (want.offsets[2] - want.offsets[1]) as usize;
                    let mut one = g.alloc::<u32>(words).unwrap();
                    g.copy_range_into(m, words..2 * words, &mut one, 0).unwrap();
                    let run = [MemberRun { words, first_id: 0 }];
                    let got = g.member_row_ids(&one, &run, rows).unwrap();
                    let want_ids: Vec<u32> = (0..n as u32)
                        .filter(|&i| {
                            hash_partition_of(keys[i as usize] as u32, 3, fanout as u32) == 1
                        })
                        .collect();
                    assert!(g.download(&got).unwrap() == want_ids, "{case}");
                }
            }
        }
    }

    #[test]
    fn bucket_chain_large_is_a_partition() {
        let Some(g) = gpu("bucket_chain_large_is_a_partition") else {
            return;
        };
        let cases = [
            (uniform::<u32>(N), Partitioner::Radix(0..8), 4096usize),
            (
                skewed(N),
                Partitioner::Hash {
                    fanout: 1000,
                    seed: 3,
                },
                2048,
            ),
            (vec![42u32; N], Partitioner::Radix(0..10), 1000),
        ];
        for (keys, by, cap) in cases {
            let (dev, pa, pb) = partition_all(&g, &keys, |g, dk, cols| {
                let chains = g
                    .bucket_chain_partition(dk, cols, &by, cap, RowIds::U32)
                    .unwrap();
                flat_host(chains.flatten(g).unwrap())
            });
            let fanout = by.fanout::<u32>().unwrap();
            let part_of = |x| by.partition_of(x).unwrap();
            check_partition(&keys, &pa, &pb, fanout, part_of, &dev, false).unwrap();
        }
    }
}
