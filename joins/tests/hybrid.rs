//! The hybrid GPU/CPU join equals `join_columns` on the CPU and the naive reference (as
//! multisets) for every kind, narrow and wide payloads, skewed and duplicated keys, empty and
//! odd sizes, extreme keys, under budgets that put no pair, some pairs and every pair on the
//! device, with either split; budgets too small for a pair run the CPU join or fail typed.
//! The "device" is the CPU backend here and, in the `gpu_` tests, CUDA device 0 (skipped
//! visibly without one; a failure with `JOINKIT_REQUIRE_GPU=1`), whose device memory is
//! poisoned first and whose measured peak of every pair is checked against its estimate.

mod common;

use common::{Shape, keys, rows_of, shaped_expected, shaped_table};
use joinkit::{
    Algorithm, Backend, CpuBackend, Error, Fallback, HybridOptions, HybridSplit, HybridStats,
    JoinBackend, JoinKind, JoinOptions, Table, Worker, hybrid_join, join_columns,
};
use joinkit_cuda::testing::{POISON_U64, gpu_or_skip};
use joinkit_cuda::{DeviceKind, Key};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// A host table of `shape` (salt 10 left, 20 right, as `shaped_expected` has them).
fn host<K: Key>(keys: &[K], salt: u64, shape: Shape) -> Table<CpuBackend, K> {
    shaped_table(&CpuBackend::new(), keys, salt, shape)
}

/// The output rows of a hybrid join on a poisoned device, sorted, with its statistics.
fn hybrid_rows<D: JoinBackend, K: Key>(
    device: &D,
    (l, r): (&[K], &[K]),
    shape: [Shape; 2],
    opts: &HybridOptions,
) -> Result<(Vec<Vec<u64>>, HybridStats), Error> {
    poison(device);
    let (lt, rt) = (host(l, 10, shape[0]), host(r, 20, shape[1]));
    let (out, st) = hybrid_join(device, &lt, &rt, opts)?;
    let mut rows = rows_of(&CpuBackend::new(), &out);
    rows.sort_unstable();
    Ok((rows, st))
}

/// What every run's statistics must say: rows add up, every device pair fitted the budget
/// by its estimate, and its measured peak (where the device counts it) within the estimate.
fn check_stats(st: &HybridStats, opts: &HybridOptions, rows: usize) -> Result<(), TestCaseError> {
    prop_assert_eq!(st.output_rows, rows as u64);
    prop_assert_eq!(st.device.output_rows + st.cpu.output_rows, rows as u64);
    prop_assert_eq!(
        st.device.pairs + st.cpu.pairs,
        st.pairs.iter().filter(|p| !p.refused).count()
    );
    for p in st
        .pairs
        .iter()
        .filter(|p| p.worker == Worker::Device && !p.refused)
    {
        prop_assert!(
            p.estimate_bytes <= opts.gpu_memory,
            "{p:?} over {}",
            opts.gpu_memory
        );
        if let Some(peak) = p.peak_bytes {
            prop_assert!(
                peak <= p.estimate_bytes,
                "measured peak over the estimate: {p:?}"
            );
        }
    }
    if let Some(peak) = st.peak_device_bytes {
        prop_assert!(peak <= opts.gpu_memory);
    }
    Ok(())
}

/// Dirties a GPU's free memory with [`POISON_U64`] so a pair's output that the join fails
/// to write shows: freed allocations go back to the pool (no buffer cache), where the next
/// ones come from.
fn poison<D: Backend>(device: &D) {
    if device.kind() == DeviceKind::Cpu {
        return;
    }
    #[cfg(feature = "cuda")]
    if let Some(gpu) = (device as &dyn std::any::Any).downcast_ref::<joinkit_cuda::CudaBackend>() {
        gpu.set_buffer_cache_limit(0);
    }
    let mut junk = device.alloc::<u64>(8 << 20).unwrap();
    device.fill(&mut junk, POISON_U64).unwrap();
    drop(junk);
    device.synchronize().unwrap();
}

/// One case: `l ⋈ r` of `shape` with `kind` and `algorithm`, the right side as drawn and
/// deduplicated under `right_unique`, `parts` partitions, under budgets of 0, too small for a
/// pair, enough for every pair and for some, with each split; against the reference and the
/// CPU's `join_columns`.
fn check_case<D: JoinBackend, K: Key>(
    device: &D,
    (l, r): (&[K], &[K]),
    shape: [Shape; 2],
    algorithm: Algorithm,
    parts: Option<usize>,
) -> Result<(), TestCaseError> {
    let mut seen = std::collections::HashSet::new();
    let r_pk: Vec<K> = r.iter().copied().filter(|k| seen.insert(*k)).collect();
    for (r, unique) in [(r, false), (&r_pk[..], true)] {
        for kind in JoinKind::ALL {
            let join = JoinOptions::new(kind)
                .algorithm(algorithm)
                .right_unique(unique);
            let expected = shaped_expected(l, r, kind, shape);
            let (lt, rt) = (host(l, 10, shape[0]), host(r, 20, shape[1]));
            let (plain, _) = join_columns(&CpuBackend::new(), &lt, &rt, &join).unwrap();
            let mut plain = rows_of(&CpuBackend::new(), &plain);
            plain.sort_unstable();
            prop_assert_eq!(&plain, &expected);
            let with = |budget: u64, split: HybridSplit| {
                let mut o = HybridOptions::new(join, budget).split(split);
                o.partitions = parts;
                o
            };
            let run = |opts: &HybridOptions| -> Result<HybridStats, TestCaseError> {
                let (rows, st) = hybrid_rows(device, (l, r), shape, opts)
                    .map_err(|e| TestCaseError::fail(format!("{opts:?}: {e}")))?;
                prop_assert_eq!(&rows, &expected, "{:?}", opts);
                check_stats(&st, opts, rows.len())?;
                Ok(st)
            };

            // No device memory: the plain CPU join, or a typed error on the device alone.
            let none = run(&with(0, HybridSplit::Shared))?;
            prop_assert_eq!(none.fallback, Some(Fallback::NoDeviceMemory));
            prop_assert_eq!(none.device.pairs, 0);
            let tiny = run(&with(1000, HybridSplit::FitFirst))?;
            let over = matches!(tiny.fallback, Some(Fallback::PairOverBudget { .. }));
            prop_assert!(over, "{:?}", tiny.fallback);
            let refused = hybrid_rows(device, (l, r), shape, &with(1000, HybridSplit::DeviceOnly));
            let typed = matches!(refused, Err(Error::DeviceBudget { budget: 1000, .. }));
            prop_assert!(typed, "{:?}", refused.map(|r| r.1));

            // Every pair fits: all on the device with the placement by size.
            let all = run(&with(u64::MAX, HybridSplit::FitFirst))?;
            prop_assert_eq!(all.fallback, None);
            prop_assert_eq!(all.cpu.pairs, 0);
            prop_assert_eq!(all.refused, 0);
            run(&with(u64::MAX, HybridSplit::DeviceOnly))?;
            run(&with(u64::MAX, HybridSplit::Shared))?;

            // Some pairs fit: a budget of the median pair's estimate, the pairs kept.
            let mut sizes: Vec<u64> = all.pairs.iter().map(|p| p.estimate_bytes).collect();
            sizes.sort_unstable();
            if let Some(&median) = sizes.get(sizes.len() / 2) {
                let fixed = with(median, HybridSplit::FitFirst).partitions(all.partitions);
                let some = run(&fixed)?;
                prop_assert!(some.device.pairs >= 1, "{some:?}");
                if sizes.last() > Some(&median) {
                    prop_assert!(some.cpu.pairs >= 1, "{some:?}");
                }
                run(&with(median, HybridSplit::Shared))?;
            }
        }
    }
    Ok(())
}

/// Payload shapes: narrow (one column a side) and wide, 4 and 8 bytes, mixed.
fn shapes() -> impl Strategy<Value = [Shape; 2]> {
    let one = || proptest::sample::select(Shape::ALL.to_vec());
    (one(), one()).prop_map(|(a, b)| [a, b])
}

fn algorithms() -> impl Strategy<Value = Algorithm> {
    proptest::sample::select(
        Algorithm::CONCRETE
            .into_iter()
            .chain([Algorithm::Auto])
            .collect::<Vec<_>>(),
    )
}

/// Partitions: chosen from the budget, one (a single pair), or a few (empty partitions).
fn partitions() -> impl Strategy<Value = Option<usize>> {
    prop_oneof![Just(None), Just(Some(1)), (2usize..12).prop_map(Some)]
}

/// The property test on `device` with `K` keys: 32 cases on the CPU, 16 on a GPU.
fn run_props<D: JoinBackend, K: Key + Arbitrary>(device: &D) {
    let cases = if device.kind() == DeviceKind::Cpu {
        32
    } else {
        16
    };
    common::runner(cases)
        .run(
            &(
                keys::<K>(),
                keys::<K>(),
                shapes(),
                algorithms(),
                partitions(),
            ),
            |(l, r, shape, algorithm, parts)| check_case(device, (&l, &r), shape, algorithm, parts),
        )
        .unwrap();
}

fn props_u32_keys<D: JoinBackend>(device: &D) {
    run_props::<_, u32>(device);
}

fn props_u64_keys<D: JoinBackend>(device: &D) {
    run_props::<_, u64>(device);
}

/// An M:N pair whose output outgrows the room its budget leaves: the device counts it,
/// refuses it and the CPU joins it; on the device alone that is a typed error.
fn check_output_over_room<D: JoinBackend>(device: &D) {
    let (l, r) = (vec![7u32; 300], vec![7u32; 200]);
    let shape = [Shape::U32, Shape::U64];
    let expected = shaped_expected(&l, &r, JoinKind::Inner, shape);
    let join = JoinOptions::new(JoinKind::Inner);
    // One pair holding every row, sized for as many output rows as its larger side.
    let probe = HybridOptions::new(join, u64::MAX).partitions(1);
    let (_, st) = hybrid_rows(device, (&l, &r), shape, &probe).unwrap();
    assert_eq!(st.pairs.len(), 1);
    let (need, over) = (st.pairs[0].need_bytes, st.pairs[0].estimate_bytes);
    assert!(need < over);
    for split in [HybridSplit::Shared, HybridSplit::FitFirst] {
        let opts = HybridOptions::new(join, need).partitions(1).split(split);
        let (rows, st) = hybrid_rows(device, (&l, &r), shape, &opts).unwrap();
        assert_eq!(rows, expected);
        assert_eq!(st.refused, 1, "{st:?}");
        assert_eq!((st.device.pairs, st.cpu.pairs), (0, 1));
        assert_eq!(st.cpu.output_rows, 60_000);
    }
    let only = HybridOptions::new(join, need)
        .partitions(1)
        .split(HybridSplit::DeviceOnly);
    assert_eq!(
        hybrid_rows(device, (&l, &r), shape, &only).err(),
        Some(Error::DeviceBudget {
            needed: over,
            budget: need
        })
    );
}

/// A heavy key: its pair is too large for the budget that the other pairs fit, so the CPU
/// joins it while the device joins the rest.
fn check_heavy_key<D: JoinBackend>(device: &D) {
    let mut r: Vec<u64> = (0..2000).collect();
    r.extend(std::iter::repeat_n(u64::MAX, 3000));
    let l: Vec<u64> = (0..4000).map(|i| i % 2500).chain([u64::MAX, 0]).collect();
    let shape = [Shape::TwoU64, Shape::U32U64];
    for kind in JoinKind::ALL {
        let join = JoinOptions::new(kind);
        let all = HybridOptions::new(join, u64::MAX)
            .partitions(16)
            .split(HybridSplit::FitFirst);
        let (_, st) = hybrid_rows(device, (&l, &r), shape, &all).unwrap();
        let mut sizes: Vec<u64> = st.pairs.iter().map(|p| p.need_bytes).collect();
        sizes.sort_unstable();
        // Every pair but the heaviest fits.
        let budget = sizes[sizes.len() - 2];
        assert!(budget < sizes[sizes.len() - 1]);
        let opts = HybridOptions::new(join, budget)
            .partitions(16)
            .split(HybridSplit::FitFirst);
        let (rows, st) = hybrid_rows(device, (&l, &r), shape, &opts).unwrap();
        assert_eq!(rows, shaped_expected(&l, &r, kind, shape));
        assert_eq!(st.cpu.pairs, 1, "{st:?}");
        let heavy = st.pairs.iter().find(|p| p.worker == Worker::Cpu).unwrap();
        assert!(heavy.right_rows >= 3000, "{heavy:?}");
        assert!(st.device.pairs >= 10, "{st:?}");
        assert!(st.link_bytes >= st.device.input_bytes + st.device.output_bytes);
    }
}

/// A broken `right_unique` promise is the join's typed error wherever the pair runs; bad
/// partition counts are typed errors.
#[test]
fn bad_inputs_are_typed_errors() {
    let cpu = CpuBackend::new();
    let (l, r) = (vec![1u32, 2, 3], vec![5u32, 2, 9, 2]);
    let join = JoinOptions::new(JoinKind::Inner).right_unique(true);
    for budget in [0, 1000, u64::MAX] {
        for split in HybridSplit::ALL {
            let opts = HybridOptions::new(join, budget).split(split);
            let got = hybrid_rows(&cpu, (&l, &r), [Shape::U32; 2], &opts).err();
            let want = match (budget, split) {
                (0 | 1000, HybridSplit::DeviceOnly) => "DeviceBudget",
                _ => "DuplicateKey",
            };
            assert!(format!("{got:?}").contains(want), "{opts:?}: {got:?}");
        }
    }
    for parts in [0, 1025] {
        let opts = HybridOptions::new(JoinOptions::new(JoinKind::Inner), 1 << 30).partitions(parts);
        assert!(matches!(
            hybrid_rows(&cpu, (&l, &r), [Shape::U32; 2], &opts),
            Err(Error::InvalidArgument(_))
        ));
    }
    let mut short = host(&l, 10, Shape::U32);
    short.payloads = vec![joinkit::Column::U32(vec![1])];
    let opts = HybridOptions::new(JoinOptions::new(JoinKind::Inner), 1 << 30);
    assert!(matches!(
        hybrid_join(&cpu, &short, &host(&r, 20, Shape::U32), &opts),
        Err(Error::LengthMismatch { .. })
    ));
}

/// Tables past the CPU backend's parallel threshold (copies and concatenation split over
/// threads), under a budget that puts some pairs on the device, every kind.
fn check_large_tables<D: JoinBackend>(device: &D) {
    let l: Vec<u32> = (0..1u32 << 17)
        .map(|i| i.wrapping_mul(2_654_435_761) % 90_000)
        .collect();
    let r: Vec<u32> = (0..1u32 << 16)
        .map(|i| i.wrapping_mul(40_503) % 70_000)
        .collect();
    let shape = [Shape::TwoU64, Shape::U32];
    for kind in JoinKind::ALL {
        let join = JoinOptions::new(kind);
        let all = HybridOptions::new(join, u64::MAX).split(HybridSplit::FitFirst);
        let (_, st) = hybrid_rows(device, (&l, &r), shape, &all).unwrap();
        let mut sizes: Vec<u64> = st.pairs.iter().map(|p| p.need_bytes).collect();
        sizes.sort_unstable();
        let budget = sizes[sizes.len() / 2];
        for split in [HybridSplit::Shared, HybridSplit::FitFirst] {
            let opts = HybridOptions::new(join, budget)
                .partitions(st.partitions)
                .split(split);
            let (rows, st) = hybrid_rows(device, (&l, &r), shape, &opts).unwrap();
            assert_eq!(rows, shaped_expected(&l, &r, kind, shape), "{opts:?}");
            assert!(st.device.pairs >= 1 && st.cpu.pairs >= 1, "{st:?}");
        }
    }
}

/// A test with the CPU backend standing in for the device, and its `gpu_` twin on CUDA
/// device 0.
macro_rules! device_tests {
    ($($cpu:ident, $gpu:ident: $check:ident;)*) => {$(
        #[test]
        fn $cpu() {
            $check(&CpuBackend::new());
        }

        #[test]
        fn $gpu() {
            if let Some(g) = gpu_or_skip(stringify!($gpu)) {
                $check(&g);
            }
        }
    )*};
}

device_tests! {
    every_kind_and_budget_u32_keys, gpu_every_kind_and_budget_u32_keys: props_u32_keys;
    every_kind_and_budget_u64_keys, gpu_every_kind_and_budget_u64_keys: props_u64_keys;
    an_output_over_the_room_left_goes_to_the_cpu,
        gpu_an_output_over_the_room_left_goes_to_the_cpu: check_output_over_room;
    a_heavy_key_s_pair_goes_to_the_cpu, gpu_a_heavy_key_s_pair_goes_to_the_cpu: check_heavy_key;
    large_tables_are_shared_by_both, gpu_large_tables_are_shared_by_both: check_large_tables;
}
