//! Property tests: the CPU twin equals a naive reference, and the CUDA implementation (where a
//! GPU is present) equals the CPU twin, on random sizes (0, 1, odd), duplicates, all-equal
//! keys, keys at 0 and MAX, and random bit ranges including the edges; interleaving round
//! trips, also through unaligned views.

use std::ops::Range;

use joinkit_cuda::{Backend, CpuBackend, Element, Error, Key};
use joinkit_primitives::{Filter, Histogram, Interleave, Scan, Sort, SortedMatch};
use proptest::prelude::*;

mod common;
#[cfg(feature = "cuda")]
use common::poisoned;
use common::{gpu, runner};

/// Keys with the shapes that break sorts: random, few distinct, all equal, extremes.
fn keys<K: Key + Arbitrary>() -> impl Strategy<Value = Vec<K>> {
    let extreme = prop_oneof![Just(K::from_u64(0)), Just(K::MAX), any::<K>()];
    prop_oneof![
        proptest::collection::vec(any::<K>(), 0..3000),
        proptest::collection::vec((0u64..4).prop_map(K::from_u64), 0..3000),
        (any::<K>(), 0usize..2000).prop_map(|(k, n)| vec![k; n]),
        proptest::collection::vec(extreme, 0..500),
    ]
}

/// A non-empty bit range inside the key, edges included.
fn bits<K: Key>() -> impl Strategy<Value = Range<u32>> {
    let w = K::BITS;
    prop_oneof![
        Just(0..w),
        Just(0..1),
        Just(w - 1..w),
        (0..w)
            .prop_flat_map(move |b| (Just(b), b + 1..=w))
            .prop_map(|(a, b)| a..b)
    ]
}

fn naive_sort<K: Key, V: Copy>(k: &[K], v: &[V], bits: &Range<u32>) -> (Vec<K>, Vec<V>) {
    // Insertion by digit into buckets in input order: stable by construction.
    let mut order: Vec<usize> = (0..k.len()).collect();
    order.sort_by_key(|&i| (k[i].digit(bits.start, bits.end), i));
    (
        order.iter().map(|&i| k[i]).collect(),
        order.iter().map(|&i| v[i]).collect(),
    )
}

fn check_sort_pairs<K: Key + Arbitrary, V: Element>(test: &str) {
    let gpu = gpu(test);
    runner()
        .run(&(keys::<K>(), bits::<K>()), |(k, bits)| {
            let v: Vec<V> = (0..k.len() as u64).map(V::from_bits).collect();
            let want = naive_sort(&k, &v, &bits);
            let cpu = CpuBackend::new();
            let got = cpu.sort_pairs(&k, &v, bits.clone()).unwrap();
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(cpu.sort_keys(&k, bits.clone()).unwrap(), want.0.clone());
            if let Some(g) = &gpu {
                let (dk, dv) = (g.upload(&k).unwrap(), g.upload(&v).unwrap());
                let (sk, sv) = g.sort_pairs(&dk, &dv, bits.clone()).unwrap();
                prop_assert_eq!(g.download(&sk).unwrap(), want.0.clone());
                prop_assert_eq!(g.download(&sv).unwrap(), want.1.clone());
                let only = g.sort_keys(&dk, bits.clone()).unwrap();
                prop_assert_eq!(g.download(&only).unwrap(), want.0);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn sort_pairs_u32_u32() {
    check_sort_pairs::<u32, u32>("sort_pairs_u32_u32");
}
#[test]
fn sort_pairs_u32_u64() {
    check_sort_pairs::<u32, u64>("sort_pairs_u32_u64");
}
#[test]
fn sort_pairs_u64_u32() {
    check_sort_pairs::<u64, u32>("sort_pairs_u64_u32");
}
#[test]
fn sort_pairs_u64_i64() {
    check_sort_pairs::<u64, i64>("sort_pairs_u64_i64");
}

fn check_scan<T: Element + Arbitrary + joinkit_primitives::Summable>(test: &str) {
    let gpu = gpu(test);
    runner()
        .run(&proptest::collection::vec(any::<T>(), 0..40_000), |x| {
            let mut acc = T::default();
            let want: Vec<T> = x
                .iter()
                .map(|&v| {
                    let r = acc;
                    acc = acc.wrapping_add(v);
                    r
                })
                .collect();
            prop_assert_eq!(CpuBackend::new().exclusive_sum(&x).unwrap(), want.clone());
            if let Some(g) = &gpu {
                let d = g.upload(&x).unwrap();
                prop_assert_eq!(g.download(&g.exclusive_sum(&d).unwrap()).unwrap(), want);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn exclusive_sum_u32() {
    check_scan::<u32>("exclusive_sum_u32");
}
#[test]
fn exclusive_sum_u64() {
    check_scan::<u64>("exclusive_sum_u64");
}

fn check_histogram<K: Key + Arbitrary>(test: &str) {
    let gpu = gpu(test);
    let bound = || prop_oneof![any::<K>(), (0u64..1 << 20).prop_map(K::from_u64)];
    let case = (keys::<K>(), 1usize..600, bound(), bound())
        .prop_filter("non-empty range", |(_, _, a, b)| a != b);
    runner()
        .run(&case, |(k, bins, a, b)| {
            let (lo, hi) = if a < b { (a, b) } else { (b, a) };
            if hi.to_u64() - lo.to_u64() > u64::MAX / bins as u64 {
                // Refused alike on both backends (64-bit bin arithmetic would overflow).
                prop_assert!(matches!(
                    CpuBackend::new().histogram_even(&k, bins, lo, hi),
                    Err(Error::InvalidArgument(_))
                ));
                if let Some(g) = &gpu {
                    let d = g.upload(&k).unwrap();
                    prop_assert!(matches!(
                        g.histogram_even(&d, bins, lo, hi),
                        Err(Error::InvalidArgument(_))
                    ));
                }
                return Ok(());
            }
            let mut want = vec![0u32; bins];
            for x in &k {
                if *x >= lo && *x < hi {
                    let off = u128::from(x.to_u64() - lo.to_u64());
                    let bin = off * bins as u128 / u128::from(hi.to_u64() - lo.to_u64());
                    want[bin as usize] += 1;
                }
            }
            prop_assert_eq!(
                CpuBackend::new().histogram_even(&k, bins, lo, hi).unwrap(),
                want.clone()
            );
            if let Some(g) = &gpu {
                let d = g.upload(&k).unwrap();
                prop_assert_eq!(
                    g.download(&g.histogram_even(&d, bins, lo, hi).unwrap())
                        .unwrap(),
                    want
                );
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn histogram_even_u32() {
    check_histogram::<u32>("histogram_even_u32");
}
#[test]
fn histogram_even_u64() {
    check_histogram::<u64>("histogram_even_u64");
}

/// Many bins over many sample chunks: the CPU twin once gave every chunk its own copy of the
/// bins (2^31 bins over a few chunks aborted the process on a failed 8 GiB allocation); now
/// each worker counts into its own copy up to 2^20 bins and wider histograms into one shared
/// array, with the same counts.
#[test]
fn histogram_with_many_bins_and_chunks() {
    let gpu = gpu("histogram_with_many_bins_and_chunks");
    let k: Vec<u32> = (0..300_000u64)
        .map(|i| joinkit_cuda::hash::hash64(i, 3) as u32)
        .collect();
    // Both sides of the switch from per-worker copies to one shared array (2^20 bins).
    for bins in [1usize << 14, 999_983, 1 << 20, (1 << 20) + 1, 3_000_017] {
        let (lo, hi) = (1000u32, u32::MAX - 1000);
        let mut want = vec![0u32; bins];
        for &x in &k {
            if x >= lo && x < hi {
                let off = u128::from(x - lo) * bins as u128 / u128::from(hi - lo);
                want[off as usize] += 1;
            }
        }
        let got = CpuBackend::new().histogram_even(&k, bins, lo, hi).unwrap();
        assert!(got == want, "bins {bins}");
        if let Some(g) = &gpu {
            let d = g.upload(&k).unwrap();
            let got = g.download(&g.histogram_even(&d, bins, lo, hi).unwrap());
            assert!(got.unwrap() == want, "bins {bins} on the GPU");
        }
    }
}

/// Column pairs of sizes 0 to 8 (every remainder of the four-row vector path) or up to a few
/// thousand, with the extremes 0 and `u32::MAX` among random values.
fn halves() -> impl Strategy<Value = (Vec<u32>, Vec<u32>)> {
    let value = prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()];
    prop_oneof![0usize..9, 0usize..3000]
        .prop_flat_map(move |n| proptest::collection::vec((value.clone(), value.clone()), n))
        .prop_map(|pairs| pairs.into_iter().unzip())
}

#[test]
fn interleave_round_trips() {
    let gpu = gpu("interleave_round_trips");
    runner()
        .run(&halves(), |(lo, hi)| {
            let want: Vec<u64> = lo
                .iter()
                .zip(&hi)
                .map(|(&l, &h)| u64::from(h) * (1 << 32) + u64::from(l))
                .collect();
            let cpu = CpuBackend::new();
            let words = cpu.interleave(&lo, &hi).unwrap();
            prop_assert_eq!(&words, &want);
            prop_assert_eq!(cpu.deinterleave(&words).unwrap(), (lo.clone(), hi.clone()));
            if let Some(g) = &gpu {
                let (dl, dh) = (g.upload(&lo).unwrap(), g.upload(&hi).unwrap());
                let dw = g.interleave(&dl, &dh).unwrap();
                prop_assert_eq!(&g.download(&dw).unwrap(), &want);
                let (bl, bh) = g.deinterleave(&dw).unwrap();
                prop_assert_eq!(g.download(&bl).unwrap(), lo);
                prop_assert_eq!(g.download(&bh).unwrap(), hi);
            }
            Ok(())
        })
        .unwrap();
}

/// The view-level entries on views shifted by zero or one row each: one unaligned view takes
/// the scalar path. Poisoned rows outside the output views stay untouched.
#[cfg(feature = "cuda")]
#[test]
fn interleave_views_match_the_cpu_twin() {
    use joinkit_primitives::cuda;
    let Some(g) = gpu("interleave_views_match_the_cpu_twin") else {
        return;
    };
    let shifts = (0usize..2, 0usize..2, 0usize..2);
    runner()
        .run(&(halves(), shifts), |((lo, hi), (sl, sh, sw))| {
            let n = lo.len();
            let want = CpuBackend::new().interleave(&lo, &hi).unwrap();
            let shifted = |v: &[u32], s: usize| g.upload(&[&[7u32][..s], v].concat()).unwrap();
            let (dl, dh) = (shifted(&lo, sl), shifted(&hi, sh));
            let mut dw = poisoned::<u64>(&g, n + 1);
            cuda::interleave(
                &g,
                &dl.view().slice(sl..),
                &dh.view().slice(sh..),
                &mut dw.view_mut().slice_mut(sw..sw + n),
            )
            .unwrap();
            let padded = |v: &[u64], s: usize| {
                let poison = joinkit_cuda::testing::POISON_U64;
                [&[poison][..s], v, &[poison][s..]].concat()
            };
            prop_assert_eq!(g.download(&dw).unwrap(), padded(&want, sw));
            let (mut ol, mut oh) = (poisoned::<u32>(&g, n + 1), poisoned::<u32>(&g, n + 1));
            cuda::deinterleave(
                &g,
                &dw.view().slice(sw..sw + n),
                &mut ol.view_mut().slice_mut(sl..sl + n),
                &mut oh.view_mut().slice_mut(sh..sh + n),
            )
            .unwrap();
            let poison = u32::from_bits(joinkit_cuda::testing::POISON_U64);
            let padded = |v: &[u32], s: usize| [&[poison][..s], v, &[poison][s..]].concat();
            prop_assert_eq!(g.download(&ol).unwrap(), padded(&lo, sl));
            prop_assert_eq!(g.download(&oh).unwrap(), padded(&hi, sh));
            Ok(())
        })
        .unwrap();
}

fn mismatched_halves<B: Interleave>(b: &B) {
    let lo = b.upload(&[1u32, 2, 3]).unwrap();
    let hi = b.upload(&[1u32, 2]).unwrap();
    assert_eq!(
        b.interleave(&lo, &hi).err(),
        Some(Error::LengthMismatch {
            what: "interleave lo vs hi",
            left: 3,
            right: 2
        })
    );
}

#[test]
fn interleave_of_mismatched_halves_is_a_typed_error() {
    mismatched_halves(&CpuBackend::new());
    if let Some(g) = gpu("interleave_of_mismatched_halves_is_a_typed_error") {
        mismatched_halves(&g);
        #[cfg(feature = "cuda")]
        {
            use joinkit_primitives::cuda;
            let lo = g.upload(&[1u32, 2, 3]).unwrap();
            let mut words = g.alloc::<u64>(2).unwrap();
            assert_eq!(
                cuda::interleave(&g, &lo.view(), &lo.view(), &mut words.view_mut()).err(),
                Some(Error::LengthMismatch {
                    what: "interleave lo vs words",
                    left: 3,
                    right: 2
                })
            );
            let (mut l, mut h) = (g.alloc::<u32>(3).unwrap(), g.alloc::<u32>(2).unwrap());
            let (mut lv, mut hv) = (l.view_mut(), h.view_mut());
            assert_eq!(
                cuda::deinterleave(&g, &words.view(), &mut lv, &mut hv).err(),
                Some(Error::LengthMismatch {
                    what: "deinterleave words vs lo",
                    left: 2,
                    right: 3
                })
            );
        }
    }
}

/// Bad input gets the same typed error on both backends.
fn bad_input<B: Sort + Histogram>(b: &B) {
    let k = b.upload(&[1u32, 2, 3]).unwrap();
    let v = b.upload(&[1u64, 2]).unwrap();
    assert_eq!(
        b.sort_pairs(&k, &v, 0..32).err(),
        Some(Error::LengthMismatch {
            what: "sort_pairs keys vs values",
            left: 3,
            right: 2
        })
    );
    let v = b.upload(&[1u64, 2, 3]).unwrap();
    assert_eq!(
        b.sort_pairs(&k, &v, 0..33).err(),
        Some(Error::BitRange {
            begin: 0,
            end: 33,
            width: 32
        })
    );
    assert_eq!(
        b.sort_keys(&k, 7..7).err(),
        Some(Error::BitRange {
            begin: 7,
            end: 7,
            width: 32
        })
    );
    assert_eq!(
        b.histogram_even(&k, 0, 0u32, 10).err(),
        Some(Error::EmptyInput("histogram with zero bins"))
    );
    assert!(matches!(
        b.histogram_even(&k, 4, 10u32, 10),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn bad_input_is_a_typed_error() {
    bad_input(&CpuBackend::new());
    if let Some(g) = gpu("bad_input_is_a_typed_error") {
        bad_input(&g);
    }
}

/// Large inputs (2^24) on the GPU against the CPU twin; skipped without a GPU.
#[test]
fn large_sort_matches_the_cpu_twin() {
    let Some(g) = gpu("large_sort_matches_the_cpu_twin") else {
        return;
    };
    let n = 1usize << 24;
    let mut dk = g.alloc::<u64>(n).unwrap();
    g.fill_random(&mut dk, 77, u64::MAX).unwrap();
    let mut dv = g.alloc::<u32>(n).unwrap();
    g.iota(&mut dv, 0).unwrap();
    let (sk, sv) = g.sort_pairs(&dk, &dv, 13..45).unwrap();
    let cpu = CpuBackend::new();
    let (hk, hv) = (g.download(&dk).unwrap(), g.download(&dv).unwrap());
    let want = cpu.sort_pairs(&hk, &hv, 13..45).unwrap();
    assert!(g.download(&sk).unwrap() == want.0);
    assert!(g.download(&sv).unwrap() == want.1);
}

/// 2^24 + 3 rows on the GPU (many grid-stride rounds and a tail) against the CPU twin; skipped
/// without a GPU.
#[test]
fn large_interleave_matches_the_cpu_twin() {
    let Some(g) = gpu("large_interleave_matches_the_cpu_twin") else {
        return;
    };
    let n = (1usize << 24) + 3;
    let (mut lo, mut hi) = (g.alloc::<u32>(n).unwrap(), g.alloc::<u32>(n).unwrap());
    g.fill_random(&mut lo, 5, u64::MAX).unwrap();
    g.fill_random(&mut hi, 6, u64::MAX).unwrap();
    let words = g.interleave(&lo, &hi).unwrap();
    let (hl, hh) = (g.download(&lo).unwrap(), g.download(&hi).unwrap());
    let want = CpuBackend::new().interleave(&hl, &hh).unwrap();
    assert!(g.download(&words).unwrap() == want);
    let (bl, bh) = g.deinterleave(&words).unwrap();
    assert!(g.download(&bl).unwrap() == hl && g.download(&bh).unwrap() == hh);
}

/// The CPU radix sort over inputs large enough to split into parallel chunks.
#[test]
fn cpu_radix_sort_of_many_chunks_is_stable() {
    let n = 200_003usize;
    let k: Vec<u64> = (0..n as u64)
        .map(|i| (joinkit_cuda::hash::hash64(i, 5) % 1000) | ((u64::MAX << 60) * (i % 2)))
        .collect();
    let v: Vec<u32> = (0..n as u32).collect();
    for bits in [0..64, 3..17, 60..64] {
        let got = CpuBackend::new().sort_pairs(&k, &v, bits.clone()).unwrap();
        assert!(got == naive_sort(&k, &v, &bits));
    }
}

/// Filter flags equal the predicate written out, on both backends; the view-level entries
/// write exactly their output view (a poisoned row after it stays poisoned).
fn check_filter<T: Element + Ord + Arbitrary>(test: &str) {
    let gpu = gpu(test);
    let column = prop_oneof![
        proptest::collection::vec(any::<T>(), 0..3000),
        proptest::collection::vec((0u64..4).prop_map(T::from_bits), 0..3000),
    ];
    runner()
        .run(&(column, any::<T>(), any::<T>()), |(a, lo, hi)| {
            let b: Vec<T> = a.iter().rev().copied().collect();
            let in_range: Vec<u32> = a.iter().map(|v| u32::from(lo <= *v && *v < hi)).collect();
            let less: Vec<u32> = a.iter().zip(&b).map(|(x, y)| u32::from(x < y)).collect();
            let cpu = CpuBackend::new();
            prop_assert_eq!(&cpu.flag_range(&a, lo..hi).unwrap(), &in_range);
            prop_assert_eq!(&cpu.flag_less(&a, &b).unwrap(), &less);
            #[cfg(feature = "cuda")]
            if let Some(g) = &gpu {
                use joinkit_primitives::cuda;
                let (da, db) = (g.upload(&a).unwrap(), g.upload(&b).unwrap());
                prop_assert_eq!(
                    &g.download(&g.flag_range(&da, lo..hi).unwrap()).unwrap(),
                    &in_range
                );
                prop_assert_eq!(&g.download(&g.flag_less(&da, &db).unwrap()).unwrap(), &less);
                let n = a.len();
                let poison = joinkit_cuda::testing::POISON_U64 as u32;
                let mut out = poisoned::<u32>(g, n + 1);
                cuda::flag_range(g, &da.view(), lo..hi, &mut out.view_mut().slice_mut(..n))
                    .unwrap();
                prop_assert_eq!(
                    g.download(&out).unwrap(),
                    [&in_range[..], &[poison]].concat()
                );
                cuda::flag_less(
                    g,
                    &da.view(),
                    &db.view(),
                    &mut out.view_mut().slice_mut(..n),
                )
                .unwrap();
                prop_assert_eq!(g.download(&out).unwrap(), [&less[..], &[poison]].concat());
            }
            #[cfg(not(feature = "cuda"))]
            let _ = &gpu;
            Ok(())
        })
        .unwrap();
}

#[test]
fn filter_u64() {
    check_filter::<u64>("filter_u64");
}
#[test]
fn filter_i32() {
    check_filter::<i32>("filter_i32");
}
#[test]
fn filter_u32() {
    check_filter::<u32>("filter_u32");
}
#[test]
fn filter_i64() {
    check_filter::<i64>("filter_i64");
}

/// Co-clustered inputs: left keys sorted unique, right keys sorted with runs (1-7 rows a key,
/// as lineitem has), keys missing on either side, flags on neither, one or both sides, marks
/// starting from random values (they accumulate); sizes around the tile.
/// Left keys, right keys, left flags, right flags, starting marks.
type Clustered = (Vec<u64>, Vec<u64>, Vec<u32>, Vec<u32>, Vec<u32>);

fn clustered() -> impl Strategy<Value = Clustered> {
    let keys = proptest::collection::btree_set(
        prop_oneof![0u64..20_000, Just(u64::MAX), Just(0)],
        0..6000,
    );
    (keys, any::<u64>()).prop_map(|(keys, seed)| {
        let mut rng = seed;
        let mut next = move || {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            rng >> 33
        };
        let (mut left, mut right) = (Vec::new(), Vec::new());
        for k in keys {
            match next() % 4 {
                0 => left.push(k),
                1 => right.extend(std::iter::repeat_n(k, 1 + next() as usize % 7)),
                _ => {
                    left.push(k);
                    right.extend(std::iter::repeat_n(k, 1 + next() as usize % 7));
                }
            }
        }
        let lf = left.iter().map(|_| u32::from(next() % 3 != 0)).collect();
        let rf = right.iter().map(|_| u32::from(next() % 2 == 0)).collect();
        let marks = left.iter().map(|_| u32::from(next() % 5 == 0)).collect();
        (left, right, lf, rf, marks)
    })
}

#[test]
fn sorted_matches_equal_the_reference() {
    let gpu = gpu("sorted_matches_equal_the_reference");
    runner()
        .run(
            &(clustered(), any::<bool>(), any::<bool>()),
            |((left, right, lf, rf, marks), use_lf, use_rf)| {
                let (lfo, rfo) = (use_lf.then_some(&lf), use_rf.then_some(&rf));
                let found: std::collections::HashSet<u64> = right
                    .iter()
                    .zip(&rf)
                    .filter(|(_, f)| rfo.is_none() || **f != 0)
                    .map(|(k, _)| *k)
                    .collect();
                let want: Vec<u32> = (0..left.len())
                    .map(|i| {
                        let wanted = lfo.is_none() || lf[i] != 0;
                        if wanted && found.contains(&left[i]) {
                            1
                        } else {
                            marks[i]
                        }
                    })
                    .collect();
                let cpu = CpuBackend::new();
                let mut got = marks.clone();
                cpu.mark_sorted_matches(&left, lfo, &right, rfo, &mut got)
                    .unwrap();
                prop_assert_eq!(&got, &want);
                // The same rows counted by a predicate: first < second exactly where the flag
                // is set (signed: -1 < 0), or everywhere when the flags are not used.
                let first: Vec<i32> = rf.iter().map(|&f| -i32::from(f != 0 || !use_rf)).collect();
                let second = vec![0i32; right.len()];
                let mut got = marks.clone();
                cpu.mark_sorted_matches_where_less(&left, lfo, &right, &first, &second, &mut got)
                    .unwrap();
                prop_assert_eq!(&got, &want);
                if let Some(g) = &gpu {
                    let (dl, dr) = (g.upload(&left).unwrap(), g.upload(&right).unwrap());
                    let (dlf, drf) = (g.upload(&lf).unwrap(), g.upload(&rf).unwrap());
                    let mut dm = g.upload(&marks).unwrap();
                    g.mark_sorted_matches(
                        &dl,
                        use_lf.then_some(&dlf),
                        &dr,
                        use_rf.then_some(&drf),
                        &mut dm,
                    )
                    .unwrap();
                    prop_assert_eq!(g.download(&dm).unwrap(), want.clone());
                    let (d1, d2) = (g.upload(&first).unwrap(), g.upload(&second).unwrap());
                    let mut dm = g.upload(&marks).unwrap();
                    g.mark_sorted_matches_where_less(
                        &dl,
                        use_lf.then_some(&dlf),
                        &dr,
                        &d1,
                        &d2,
                        &mut dm,
                    )
                    .unwrap();
                    prop_assert_eq!(g.download(&dm).unwrap(), want.clone());
                    // u32 keys (the values fit): the same marks.
                    let narrow = |v: &[u64]| v.iter().map(|&k| k as u32).collect::<Vec<_>>();
                    if left.iter().chain(&right).all(|&k| k <= u64::from(u32::MAX)) {
                        let (nl, nr) = (
                            g.upload(&narrow(&left)).unwrap(),
                            g.upload(&narrow(&right)).unwrap(),
                        );
                        let mut dm = g.upload(&marks).unwrap();
                        g.mark_sorted_matches_where_less(
                            &nl,
                            use_lf.then_some(&dlf),
                            &nr,
                            &d1,
                            &d2,
                            &mut dm,
                        )
                        .unwrap();
                        prop_assert_eq!(g.download(&dm).unwrap(), want.clone());
                    }
                    // The right side in three chunks through one order check (a stream of
                    // chunks): marks accumulate to the same answer.
                    #[cfg(feature = "cuda")]
                    {
                        use joinkit_primitives::cuda;
                        let mut dm = g.upload(&marks).unwrap();
                        let mut check = cuda::OrderCheck::new(g).unwrap();
                        let m = right.len();
                        for part in [0..m / 3, m / 3..m / 2, m / 2..m] {
                            cuda::mark_sorted_matches_where_less(
                                g,
                                &dl.view(),
                                use_lf.then(|| dlf.view()).as_ref(),
                                &dr.view().slice(part.clone()),
                                (&d1.view().slice(part.clone()), &d2.view().slice(part)),
                                &mut dm.view_mut(),
                                &mut check,
                            )
                            .unwrap();
                        }
                        check.take(g).unwrap();
                        prop_assert_eq!(g.download(&dm).unwrap(), want);
                    }
                }
                Ok(())
            },
        )
        .unwrap();
}

/// Out-of-order sides are a typed error on both backends, wherever the disorder is (inside a
/// tile, across tiles, at the very end), never a wrong answer.
#[test]
fn unsorted_sides_are_errors() {
    let gpu = gpu("unsorted_sides_are_errors");
    let sorted: Vec<u64> = (0..10_000).map(|i| i * 3).collect();
    for at in [1usize, 2047, 2048, 5000, 9999] {
        let mut left = sorted.clone();
        left[at] = left[at - 1]; // a duplicate: not strictly ascending
        let mut right = sorted.clone();
        right.swap(at - 1, at);
        type Marker<'a> = &'a dyn Fn(&Vec<u64>, &Vec<u64>) -> Result<(), Error>;
        let run = |b: Marker<'_>| (b(&left, &sorted), b(&sorted, &right), b(&sorted, &sorted));
        let cpu = CpuBackend::new();
        let on_cpu = run(&|l, r| cpu.mark_sorted_matches(l, None, r, None, &mut vec![0; l.len()]));
        let dates = vec![0i32; sorted.len()];
        let on_cpu_less = run(&|l, r| {
            let mut marks = vec![0; l.len()];
            cpu.mark_sorted_matches_where_less(l, None, r, &dates, &dates, &mut marks)
        });
        assert_eq!(format!("{on_cpu_less:?}"), format!("{on_cpu:?}"), "{at}");
        assert!(
            matches!(on_cpu.0, Err(Error::InvalidArgument(ref m)) if m.contains("left")),
            "{at}"
        );
        assert!(
            matches!(on_cpu.1, Err(Error::InvalidArgument(ref m)) if m.contains("right")),
            "{at}"
        );
        assert!(on_cpu.2.is_ok());
        // No left rows: nothing to mark, nothing read, on both backends.
        let no_left: Vec<u64> = Vec::new();
        assert!(
            cpu.mark_sorted_matches(&no_left, None, &right, None, &mut vec![])
                .is_ok()
        );
        if let Some(g) = &gpu {
            let (dl, dr) = (g.upload(&no_left).unwrap(), g.upload(&right).unwrap());
            let mut marks = g.upload(&Vec::<u32>::new()).unwrap();
            assert!(
                g.mark_sorted_matches(&dl, None, &dr, None, &mut marks)
                    .is_ok()
            );
        }
        if let Some(g) = &gpu {
            let on_gpu = run(&|l, r| {
                let (dl, dr) = (g.upload(l).unwrap(), g.upload(r).unwrap());
                let mut marks = g.upload(&vec![0u32; l.len()]).unwrap();
                g.mark_sorted_matches(&dl, None, &dr, None, &mut marks)
            });
            assert_eq!(format!("{on_gpu:?}"), format!("{on_cpu:?}"), "{at}");
            let on_gpu_less = run(&|l, r| {
                let (dl, dr, dd) = (
                    g.upload(l).unwrap(),
                    g.upload(r).unwrap(),
                    g.upload(&dates).unwrap(),
                );
                let mut marks = g.upload(&vec![0u32; l.len()]).unwrap();
                g.mark_sorted_matches_where_less(&dl, None, &dr, &dd, &dd, &mut marks)
            });
            assert_eq!(format!("{on_gpu_less:?}"), format!("{on_cpu:?}"), "{at}");
        }
    }
}
