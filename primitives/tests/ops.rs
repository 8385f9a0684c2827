//! Property tests of gather/scatter, compaction and merge-path: CPU twin == naive reference ==
//! CUDA (where a GPU is present, outputs poisoned first), on sizes 0, 1, odd and several
//! tiles, duplicate and clustered maps, extreme keys, giant runs and no matches; typed errors
//! for bad maps and ranges; large GPU-only runs against the CPU twin.

#[cfg(feature = "cuda")]
use joinkit_cuda::Backend;
use joinkit_cuda::hash::hash64;
use joinkit_cuda::{CpuBackend, Element, Error, Key};
use joinkit_primitives::{Bounds, Compact, Gather, MergePath};
use proptest::prelude::*;

mod common;
#[cfg(feature = "cuda")]
use common::poisoned;
use common::{gpu, runner};

/// A map of `len` indices into `0..src_len` (src_len > 0) of one of the shapes gathers meet:
/// random with duplicates, identity, i/2 (clustered), shuffles inside small windows, all
/// equal, the extremes 0 and src_len - 1.
fn make_map<I: Key>(kind: u8, len: usize, src_len: usize, seed: u64) -> Vec<I> {
    let s = src_len as u64;
    (0..len as u64)
        .map(|i| {
            let h = hash64(i, seed);
            let v = match kind {
                0 => h % s,
                1 => i % s,
                2 => (i / 2).min(s - 1),
                3 => (i ^ (h & 63)).min(s - 1),
                4 => hash64(0, seed) % s,
                _ => (s - 1) * (h & 1),
            };
            I::from_u64(v)
        })
        .collect()
}

fn gather_case<T: Element + Arbitrary>() -> impl Strategy<Value = (Vec<T>, usize, u8, u64)> {
    (
        proptest::collection::vec(any::<T>(), 0..3000),
        prop_oneof![Just(0usize), Just(1), 0usize..7000],
        0u8..6,
        any::<u64>(),
    )
}

fn check_gather<T: Element + Arbitrary, I: Key>(test: &str) {
    let gpu = gpu(test);
    let cpu = CpuBackend::new();
    runner()
        .run(&gather_case::<T>(), |(src, len, kind, seed)| {
            let len = if src.is_empty() { 0 } else { len };
            let map: Vec<I> = make_map(kind, len, src.len(), seed);
            let want: Vec<T> = map.iter().map(|i| src[i.to_u64() as usize]).collect();
            prop_assert_eq!(&cpu.gather(&src, &map, Bounds::Check).unwrap(), &want);
            // Ten columns: more than one multi-column launch on CUDA.
            let cols: Vec<Vec<T>> = (0..10u64)
                .map(|c| src.iter().map(|v| T::from_bits(v.to_bits() ^ c)).collect())
                .collect();
            let want_cols: Vec<Vec<T>> = cols
                .iter()
                .map(|c| map.iter().map(|i| c[i.to_u64() as usize]).collect())
                .collect();
            let mut outs: Vec<Vec<T>> = vec![vec![T::default(); len]; cols.len()];
            let srcs: Vec<&Vec<T>> = cols.iter().collect();
            let mut out_refs: Vec<&mut Vec<T>> = outs.iter_mut().collect();
            cpu.gather_columns_into(&srcs, &map, &mut out_refs, Bounds::Check)
                .unwrap();
            prop_assert_eq!(&outs, &want_cols);
            #[cfg(feature = "cuda")]
            if let Some(g) = &gpu {
                use joinkit_primitives::cuda::{self, BoundsCheck};
                let (ds, dm) = (g.upload(&src).unwrap(), g.upload(&map).unwrap());
                for bounds in [Bounds::Check, Bounds::Trust] {
                    let mut out = poisoned::<T>(g, len);
                    g.gather_into(&ds, &dm, &mut out, bounds).unwrap();
                    prop_assert_eq!(&g.download(&out).unwrap(), &want);
                }
                let dcols: Vec<_> = cols.iter().map(|c| g.upload(c).unwrap()).collect();
                let mut douts: Vec<_> = (0..cols.len()).map(|_| poisoned::<T>(g, len)).collect();
                let srcs: Vec<_> = dcols.iter().collect();
                let mut out_refs: Vec<_> = douts.iter_mut().collect();
                g.gather_columns_into(&srcs, &dm, &mut out_refs, Bounds::Check)
                    .unwrap();
                let got: Vec<Vec<T>> = douts.iter().map(|d| g.download(d).unwrap()).collect();
                prop_assert_eq!(&got, &want_cols);
                // The view level, at offset 0 and at an odd offset (no 16-byte vectors).
                let mut check = BoundsCheck::new(g).unwrap();
                for skip in [0, 1] {
                    if len < skip {
                        continue;
                    }
                    let mut out = poisoned::<T>(g, len);
                    let dmv = dm.view();
                    let mv = dmv.slice(skip..);
                    let mut ov = out.view_mut();
                    let mut ov = ov.slice_mut(skip..);
                    cuda::gather_columns(
                        g,
                        &[ds.view()],
                        &mv,
                        std::slice::from_mut(&mut ov),
                        &mut check,
                    )
                    .unwrap();
                    prop_assert_eq!(&g.download(&out).unwrap()[skip..], &want[skip..]);
                }
                prop_assert_eq!(check.take(g).unwrap(), None);
            }
            #[cfg(not(feature = "cuda"))]
            let _ = &gpu;
            Ok(())
        })
        .unwrap();
}

#[test]
fn gather_u32_by_u32() {
    check_gather::<u32, u32>("gather_u32_by_u32");
}
#[test]
fn gather_u32_by_u64() {
    check_gather::<u32, u64>("gather_u32_by_u64");
}
#[test]
fn gather_i64_by_u32() {
    check_gather::<i64, u32>("gather_i64_by_u32");
}
#[test]
fn gather_u64_by_u64() {
    check_gather::<u64, u64>("gather_u64_by_u64");
}

/// A permutation of `0..n` (Fisher-Yates on a hash stream).
fn permutation(n: usize, seed: u64) -> Vec<u64> {
    let mut p: Vec<u64> = (0..n as u64).collect();
    for i in (1..n).rev() {
        p.swap(i, (hash64(i as u64, seed) % (i as u64 + 1)) as usize);
    }
    p
}

fn check_scatter<T: Element + Arbitrary, I: Key>(test: &str) {
    let gpu = gpu(test);
    let cpu = CpuBackend::new();
    let case = (
        proptest::collection::vec(any::<T>(), 0..5000),
        0usize..50,
        any::<u64>(),
    );
    runner()
        .run(&case, |(src, extra, seed)| {
            // An injective map into an output with `extra` untouched slots.
            let out_len = src.len() + extra;
            let perm = permutation(out_len, seed);
            let map: Vec<I> = perm[..src.len()].iter().map(|&i| I::from_u64(i)).collect();
            let poison = T::from_bits(joinkit_cuda::testing::POISON_U64);
            let mut want = vec![poison; out_len];
            for (v, i) in src.iter().zip(&map) {
                want[i.to_u64() as usize] = *v;
            }
            let mut out = vec![poison; out_len];
            cpu.scatter_into(&src, &map, &mut out, Bounds::Check)
                .unwrap();
            prop_assert_eq!(&out, &want);
            // Gather is scatter's inverse on the same map.
            prop_assert_eq!(&cpu.gather(&out, &map, Bounds::Check).unwrap(), &src);
            #[cfg(feature = "cuda")]
            if let Some(g) = &gpu {
                let (ds, dm) = (g.upload(&src).unwrap(), g.upload(&map).unwrap());
                let mut dout = poisoned::<T>(g, out_len);
                g.scatter_into(&ds, &dm, &mut dout, Bounds::Check).unwrap();
                prop_assert_eq!(&g.download(&dout).unwrap(), &want);
            }
            #[cfg(not(feature = "cuda"))]
            let _ = &gpu;
            Ok(())
        })
        .unwrap();
}

#[test]
fn scatter_u32_by_u32() {
    check_scatter::<u32, u32>("scatter_u32_by_u32");
}
#[test]
fn scatter_u64_by_u64() {
    check_scatter::<u64, u64>("scatter_u64_by_u64");
}
#[test]
fn scatter_i32_by_u64() {
    check_scatter::<i32, u64>("scatter_i32_by_u64");
}

/// Out-of-range maps: the first bad entry, as a typed error, on both backends.
fn bad_maps<B: Gather>(b: &B) {
    let src = b.upload(&[10u32, 11, 12]).unwrap();
    // Entries 4001 (index 7) and 4100 (u64::MAX) are bad; 4001 comes first, past several
    // tiles' worth of good entries.
    let mut map = vec![1u64; 5000];
    map[4001] = 7;
    map[4100] = u64::MAX;
    map[3] = 1;
    let m = b.upload(&map).unwrap();
    let want = Error::IndexOutOfRange {
        what: "gather map",
        index: 7,
        len: 3,
    };
    assert_eq!(b.gather(&src, &m, Bounds::Check).err(), Some(want.clone()));
    let mut outs = [b.alloc::<u32>(5000).unwrap(), b.alloc::<u32>(5000).unwrap()];
    let [o1, o2] = &mut outs;
    assert_eq!(
        b.gather_columns_into(&[&src, &src], &m, &mut [o1, o2], Bounds::Check)
            .err(),
        Some(want)
    );
    // An empty source: every index is out of range.
    let empty = b.upload::<u32>(&[]).unwrap();
    let one = b.upload(&[0u32]).unwrap();
    assert_eq!(
        b.gather(&empty, &one, Bounds::Check).err(),
        Some(Error::IndexOutOfRange {
            what: "gather map",
            index: 0,
            len: 0
        })
    );
    // Scatter into three slots.
    let src = b.upload(&[1u32, 2, 3, 4]).unwrap();
    let m = b.upload(&[0u32, 3, 1, 2]).unwrap();
    let mut out = b.upload(&[0u32; 3]).unwrap();
    assert_eq!(
        b.scatter_into(&src, &m, &mut out, Bounds::Check).err(),
        Some(Error::IndexOutOfRange {
            what: "scatter map",
            index: 3,
            len: 3
        })
    );
    let mut out = b.alloc::<u32>(2).unwrap();
    assert!(matches!(
        b.gather_into(&src, &m, &mut out, Bounds::Check),
        Err(Error::LengthMismatch { .. })
    ));
}

#[test]
fn out_of_range_maps_are_typed_errors() {
    bad_maps(&CpuBackend::new());
    if let Some(g) = gpu("out_of_range_maps_are_typed_errors") {
        bad_maps(&g);
        #[cfg(feature = "cuda")]
        trusted_bad_maps(&g);
    }
}

/// `Bounds::Trust` on CUDA: debug builds check as `Bounds::Check` does; release builds record
/// nothing (no status word), yet bad entries are never dereferenced or written, the call
/// succeeds, and the good rows are right.
#[cfg(feature = "cuda")]
fn trusted_bad_maps(g: &joinkit_cuda::CudaBackend) {
    let checked = |r: Result<(), Error>| {
        if cfg!(debug_assertions) {
            assert!(matches!(r, Err(Error::IndexOutOfRange { .. })), "{r:?}");
            false
        } else {
            r.unwrap();
            true
        }
    };
    let src = g.upload(&[10u32, 11, 12]).unwrap();
    let map: Vec<u64> = (0..5000u64)
        .map(|i| if i % 7 == 3 { u64::MAX - i } else { i % 3 })
        .collect();
    let m = g.upload(&map).unwrap();
    let mut out = poisoned::<u32>(g, map.len());
    if checked(g.gather_into(&src, &m, &mut out, Bounds::Trust)) {
        let got = g.download(&out).unwrap();
        for (i, (&k, &v)) in map.iter().zip(&got).enumerate() {
            if k < 3 {
                assert_eq!(v, 10 + k as u32, "row {i}");
            }
        }
    }
    let src = g.upload(&[1u32, 2, 3, 4]).unwrap();
    let m = g.upload(&[0u32, 3, 1, 9]).unwrap();
    let mut out = g.upload(&[0u32; 3]).unwrap();
    if checked(g.scatter_into(&src, &m, &mut out, Bounds::Trust)) {
        assert_eq!(g.download(&out).unwrap(), vec![1, 3, 0]);
    }
}

/// Flags of the shapes compaction meets: random density, none, all, arbitrary non-zero values.
fn flags_case() -> impl Strategy<Value = Vec<u32>> {
    let n = prop_oneof![Just(0usize), Just(1), 0usize..9000];
    (n, 0u8..5, any::<u64>()).prop_map(|(n, kind, seed)| {
        (0..n as u64)
            .map(|i| {
                let h = hash64(i, seed);
                match kind {
                    0 => 0,
                    1 => 1,
                    2 => u32::from(h.is_multiple_of(16)),
                    3 => [0, u32::MAX, 1 << 31][(h % 3) as usize],
                    _ => h as u32,
                }
            })
            .collect()
    })
}

fn check_compact<T: Element>(test: &str, columns: usize) {
    let gpu = gpu(test);
    let cpu = CpuBackend::new();
    runner()
        .run(&flags_case(), |flags| {
            let cols: Vec<Vec<T>> = (0..columns as u64)
                .map(|c| {
                    (0..flags.len() as u64)
                        .map(|i| T::from_bits(hash64(i, c)))
                        .collect()
                })
                .collect();
            let keep: Vec<usize> = (0..flags.len()).filter(|&i| flags[i] != 0).collect();
            let want: Vec<Vec<T>> = cols
                .iter()
                .map(|c| keep.iter().map(|&i| c[i]).collect())
                .collect();
            let ids32: Vec<u32> = keep.iter().map(|&i| i as u32).collect();
            let ids64: Vec<u64> = keep.iter().map(|&i| i as u64).collect();
            let refs: Vec<&Vec<T>> = cols.iter().collect();
            prop_assert_eq!(&cpu.compact(&refs, &flags).unwrap(), &want);
            prop_assert_eq!(&cpu.flagged_indices::<u32>(&flags).unwrap(), &ids32);
            prop_assert_eq!(&cpu.flagged_indices::<u64>(&flags).unwrap(), &ids64);
            prop_assert_eq!(cpu.count_flagged(&flags).unwrap(), keep.len() as u64);
            #[cfg(feature = "cuda")]
            if let Some(g) = &gpu {
                let df = g.upload(&flags).unwrap();
                let dcols: Vec<_> = cols.iter().map(|c| g.upload(c).unwrap()).collect();
                let refs: Vec<_> = dcols.iter().collect();
                let got: Vec<Vec<T>> = g
                    .compact(&refs, &df)
                    .unwrap()
                    .iter()
                    .map(|d| g.download(d).unwrap())
                    .collect();
                prop_assert_eq!(&got, &want);
                let i32s = g.flagged_indices::<u32>(&df).unwrap();
                prop_assert_eq!(&g.download(&i32s).unwrap(), &ids32);
                let i64s = g.flagged_indices::<u64>(&df).unwrap();
                prop_assert_eq!(&g.download(&i64s).unwrap(), &ids64);
                prop_assert_eq!(g.count_flagged(&df).unwrap(), keep.len() as u64);
                // CUB's byte-flag select on the first column.
                if let Some(c0) = cols.first() {
                    let bytes: Vec<u8> = flags.iter().map(|&f| u8::from(f != 0)).collect();
                    let db = g.stream().clone_htod(&bytes).unwrap();
                    let dc = g.upload(c0).unwrap();
                    let mut out = poisoned::<T>(g, c0.len());
                    let mut count = poisoned::<u64>(g, 1);
                    let mut scratch = joinkit_cuda::Scratch::new();
                    joinkit_primitives::cuda::select_flagged_u8(
                        g,
                        &dc.view(),
                        &db.slice(..),
                        &mut out.view_mut(),
                        &mut count.view_mut(),
                        &mut scratch,
                    )
                    .unwrap();
                    prop_assert_eq!(g.download(&count).unwrap()[0], keep.len() as u64);
                    prop_assert_eq!(&g.download(&out).unwrap()[..keep.len()], &want[0][..]);
                }
            }
            #[cfg(not(feature = "cuda"))]
            let _ = &gpu;
            Ok(())
        })
        .unwrap();
}

#[test]
fn compact_two_u64_columns() {
    check_compact::<u64>("compact_two_u64_columns", 2);
}
#[test]
fn compact_nine_u32_columns() {
    check_compact::<u32>("compact_nine_u32_columns", 9);
}
#[test]
fn compact_no_columns() {
    check_compact::<i32>("compact_no_columns", 0);
}

/// Sorted `b` and unsorted `a` with shared keys, duplicates, extremes, giant runs and
/// (sometimes) no matches at all.
fn merge_case<K: Key + Arbitrary>() -> impl Strategy<Value = (Vec<K>, Vec<K>)> {
    let small = (0u64..6).prop_map(K::from_u64);
    let key = prop_oneof![small, Just(K::from_u64(0)), Just(K::MAX), any::<K>(),];
    let side = prop_oneof![
        proptest::collection::vec(key, 0..400),
        (1usize..300).prop_map(|n| vec![K::from_u64(5); n]),
    ];
    (side.clone(), side, any::<bool>()).prop_map(|(a, mut b, disjoint)| {
        if disjoint {
            // No key of b equals a key of a.
            b.retain(|k| !a.contains(k));
        }
        b.sort();
        (a, b)
    })
}

fn naive_pairs<I: Key>(lower: &[I], upper: &[I]) -> (Vec<I>, Vec<I>) {
    let mut pa = Vec::new();
    let mut pb = Vec::new();
    for (i, (l, u)) in lower.iter().zip(upper).enumerate() {
        for j in l.to_u64()..u.to_u64() {
            pa.push(I::from_u64(i as u64));
            pb.push(I::from_u64(j));
        }
    }
    (pa, pb)
}

fn check_merge<K: Key + Arbitrary, I: Key>(test: &str) {
    let gpu = gpu(test);
    let cpu = CpuBackend::new();
    runner()
        .run(&merge_case::<K>(), |(a, b)| {
            let lower: Vec<I> = a
                .iter()
                .map(|k| I::from_u64(b.iter().filter(|x| *x < k).count() as u64))
                .collect();
            let upper: Vec<I> = a
                .iter()
                .map(|k| I::from_u64(b.iter().filter(|x| *x <= k).count() as u64))
                .collect();
            let got = cpu.sorted_bounds::<K, I>(&a, &b).unwrap();
            prop_assert_eq!(&got, &(lower.clone(), upper.clone()));
            let want = naive_pairs(&lower, &upper);
            let total = want.0.len() as u64;
            prop_assert_eq!(cpu.range_total(&lower, &upper).unwrap(), total);
            prop_assert_eq!(&cpu.expand_ranges(&lower, &upper).unwrap(), &want);
            #[cfg(feature = "cuda")]
            if let Some(g) = &gpu {
                let (da, db) = (g.upload(&a).unwrap(), g.upload(&b).unwrap());
                let (dl, du) = g.sorted_bounds::<K, I>(&da, &db).unwrap();
                prop_assert_eq!(&g.download(&dl).unwrap(), &lower);
                prop_assert_eq!(&g.download(&du).unwrap(), &upper);
                prop_assert_eq!(g.range_total(&dl, &du).unwrap(), total);
                let (pa, pb) = g.expand_ranges(&dl, &du).unwrap();
                prop_assert_eq!(&g.download(&pa).unwrap(), &want.0);
                prop_assert_eq!(&g.download(&pb).unwrap(), &want.1);
                // Into larger poisoned outputs: the tail is left alone.
                let cap = want.0.len() + 3;
                let (mut oa, mut ob) = (poisoned::<I>(g, cap), poisoned::<I>(g, cap));
                prop_assert_eq!(
                    g.expand_ranges_into(&dl, &du, &mut oa, &mut ob).unwrap(),
                    total
                );
                let poison = I::from_bits(joinkit_cuda::testing::POISON_U64);
                let mut wa = want.0.clone();
                wa.extend([poison; 3]);
                prop_assert_eq!(&g.download(&oa).unwrap(), &wa);
            }
            #[cfg(not(feature = "cuda"))]
            let _ = &gpu;
            Ok(())
        })
        .unwrap();
}

#[test]
fn merge_path_u32_keys_u32_ids() {
    check_merge::<u32, u32>("merge_path_u32_keys_u32_ids");
}
#[test]
fn merge_path_u64_keys_u32_ids() {
    check_merge::<u64, u32>("merge_path_u64_keys_u32_ids");
}
#[test]
fn merge_path_u64_keys_u64_ids() {
    check_merge::<u64, u64>("merge_path_u64_keys_u64_ids");
}

/// Random ranges (many empty) expand the same on both backends; bad ranges and small outputs
/// are typed errors.
fn expand_errors<B: MergePath>(b: &B) {
    let lower = b.upload(&[0u32, 5, 2]).unwrap();
    let upper = b.upload(&[3u32, 4, 2]).unwrap();
    assert!(matches!(
        b.range_total(&lower, &upper),
        Err(Error::InvalidArgument(_))
    ));
    let upper = b.upload(&[3u32, 9, 2]).unwrap();
    assert_eq!(b.range_total(&lower, &upper).unwrap(), 7);
    let (mut oa, mut ob) = (b.alloc::<u32>(6).unwrap(), b.alloc::<u32>(9).unwrap());
    assert_eq!(
        b.expand_ranges_into(&lower, &upper, &mut oa, &mut ob).err(),
        Some(Error::OutputTooLarge {
            needed: 7,
            capacity: 6
        })
    );
    let short = b.upload(&[0u32]).unwrap();
    assert!(matches!(
        b.range_total(&short, &upper),
        Err(Error::LengthMismatch { .. })
    ));
}

#[test]
fn bad_ranges_are_typed_errors() {
    expand_errors(&CpuBackend::new());
    if let Some(g) = gpu("bad_ranges_are_typed_errors") {
        expand_errors(&g);
    }
}

#[test]
fn expansion_of_random_ranges_matches() {
    let gpu = gpu("expansion_of_random_ranges_matches");
    let cpu = CpuBackend::new();
    let case = proptest::collection::vec(
        (0u64..1000, prop_oneof![Just(0u64), 0u64..40, 0u64..3000]),
        0..300,
    );
    runner()
        .run(&case, |ranges| {
            let lower: Vec<u64> = ranges.iter().map(|r| r.0).collect();
            let upper: Vec<u64> = ranges.iter().map(|r| r.0 + r.1).collect();
            let want = naive_pairs(&lower, &upper);
            prop_assert_eq!(&cpu.expand_ranges(&lower, &upper).unwrap(), &want);
            #[cfg(feature = "cuda")]
            if let Some(g) = &gpu {
                let (dl, du) = (g.upload(&lower).unwrap(), g.upload(&upper).unwrap());
                let (pa, pb) = g.expand_ranges(&dl, &du).unwrap();
                prop_assert_eq!(&g.download(&pa).unwrap(), &want.0);
                prop_assert_eq!(&g.download(&pb).unwrap(), &want.1);
            }
            #[cfg(not(feature = "cuda"))]
            let _ = &gpu;
            Ok(())
        })
        .unwrap();
}

/// Large GPU-only runs against the CPU twin (skipped without a GPU).
#[cfg(feature = "cuda")]
mod large {
    use super::*;

    const N: usize = 1 << 24;

    #[test]
    fn large_gather_and_scatter() {
        let Some(g) = gpu("large_gather_and_scatter") else {
            return;
        };
        let cpu = CpuBackend::new();
        let mut src = g.alloc::<u64>(N).unwrap();
        g.fill_random(&mut src, 3, u64::MAX).unwrap();
        let hsrc = g.download(&src).unwrap();
        let perm: Vec<u32> = permutation(N, 9).into_iter().map(|x| x as u32).collect();
        for map in [
            perm.clone(),
            (0..N as u32).map(|i| i / 2).collect(),
            (0..N as u32)
                .map(|i| i ^ (hash64(u64::from(i), 4) as u32 & 1023))
                .collect(),
        ] {
            let dm = g.upload(&map).unwrap();
            let got = g.gather(&src, &dm, Bounds::Check).unwrap();
            assert!(g.download(&got).unwrap() == cpu.gather(&hsrc, &map, Bounds::Check).unwrap());
        }
        let dm = g.upload(&perm).unwrap();
        let mut out = poisoned::<u64>(&g, N);
        g.scatter_into(&src, &dm, &mut out, Bounds::Check).unwrap();
        let mut want = vec![0u64; N];
        cpu.scatter_into(&hsrc, &perm, &mut want, Bounds::Check)
            .unwrap();
        assert!(g.download(&out).unwrap() == want);
    }

    #[test]
    fn large_compaction() {
        let Some(g) = gpu("large_compaction") else {
            return;
        };
        let mut flags = g.alloc::<u32>(N + 5).unwrap();
        g.fill_random(&mut flags, 8, 1).unwrap();
        let mut col = g.alloc::<u64>(N + 5).unwrap();
        g.iota(&mut col, 7).unwrap();
        let hf = g.download(&flags).unwrap();
        let hc = g.download(&col).unwrap();
        let cpu = CpuBackend::new();
        let got = g.compact(&[&col], &flags).unwrap();
        assert!(g.download(&got[0]).unwrap() == cpu.compact(&[&hc], &hf).unwrap()[0]);
        let ids = g.flagged_indices::<u32>(&flags).unwrap();
        assert!(g.download(&ids).unwrap() == cpu.flagged_indices::<u32>(&hf).unwrap());
    }

    #[test]
    fn large_merge_path_with_a_giant_run() {
        let Some(g) = gpu("large_merge_path_with_a_giant_run") else {
            return;
        };
        // b: 2^22 keys, half of them one key (a giant run); a: 4096 keys hitting the run
        // plus random ones: the run alone gives 8 * 2^21 = 2^24 pairs.
        let nb = 1usize << 22;
        let mut b: Vec<u64> = (0..nb as u64).map(|i| hash64(i, 1) % (1 << 40)).collect();
        for x in b.iter_mut().take(nb / 2) {
            *x = 777;
        }
        b.sort_unstable();
        let mut a: Vec<u64> = (0..(1u64 << 20))
            .map(|i| hash64(i, 2) % (1 << 40))
            .collect();
        a.extend([777u64; 8]);
        a.sort_unstable();
        let cpu = CpuBackend::new();
        let (da, db) = (g.upload(&a).unwrap(), g.upload(&b).unwrap());
        let (dl, du) = g.sorted_bounds::<u64, u32>(&da, &db).unwrap();
        let (hl, hu) = cpu.sorted_bounds::<u64, u32>(&a, &b).unwrap();
        assert!(g.download(&dl).unwrap() == hl && g.download(&du).unwrap() == hu);
        let (pa, pb) = g.expand_ranges(&dl, &du).unwrap();
        let want = cpu.expand_ranges(&hl, &hu).unwrap();
        assert!(want.0.len() >= 8 * nb / 2);
        assert!(g.download(&pa).unwrap() == want.0);
        assert!(g.download(&pb).unwrap() == want.1);
    }
}
