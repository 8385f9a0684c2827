//! Property tests: the CPU twin equals a HashMap-based reference, and the CUDA implementation
//! (where a GPU is present) equals it too, for every table kind, probing policy and key width;
//! on unique and duplicate keys, hit rates 0/50/100 %, keys at 0 and MAX (the empty-slot
//! sentinel), all-equal keys, and empty build or probe sides. Counts equal retrieved sizes,
//! chunked retrieves equal unchunked ones, and full tables are typed errors.

use std::collections::HashMap;

use joinkit_cuda::{CpuBackend, DeviceKind, Error, Key};
use joinkit_hashtable::{
    BuildOrder, HashTable, HashTables, NOT_FOUND, Probing, RandomAccessFloors, TableConfig,
    TableKind,
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

const POISON: u32 = joinkit_cuda::testing::POISON_U64 as u32;

/// Every table configuration: 3 kinds x 2 probing policies (chaining ignores probing), open
/// addressing built in input and in clustered order.
fn configs() -> Vec<TableConfig> {
    let mut v = Vec::new();
    for kind in [TableKind::KeyValue, TableKind::HashRow] {
        for probing in [Probing::Linear, Probing::Double] {
            for lf in [0.5, 0.9] {
                for order in [BuildOrder::Input, BuildOrder::Clustered] {
                    let c = TableConfig::new(kind).probing(probing).load_factor(lf);
                    v.push(c.build_order(order));
                }
            }
        }
    }
    v.push(TableConfig::chained());
    v.push(TableConfig::chained().load_factor(4.0));
    v
}

/// Build keys of the shapes that break tables; `unique` dedups them (for KeyValue tables).
fn build_keys<K: Key + Arbitrary>() -> impl Strategy<Value = Vec<K>> {
    let extreme = prop_oneof![Just(K::from_u64(0)), Just(K::MAX), any::<K>()];
    prop_oneof![
        proptest::collection::vec(any::<K>(), 0..2000),
        proptest::collection::vec((0u64..50).prop_map(K::from_u64), 0..2000),
        (any::<K>(), 0usize..300).prop_map(|(k, n)| vec![k; n]),
        proptest::collection::vec(extreme, 0..200),
        Just(Vec::new()),
    ]
}

/// Probe keys: a `hit` share drawn from the build keys (0, 50 or 100 %), the rest random
/// (misses, mostly), plus the extremes.
fn probe_keys<K: Key + Arbitrary>(build: &[K]) -> impl Strategy<Value = Vec<K>> + use<K> {
    let build = build.to_vec();
    (
        prop_oneof![Just(0u32), Just(50), Just(100)],
        proptest::collection::vec((any::<u32>(), any::<usize>(), any::<K>()), 0..2500),
        any::<bool>(),
    )
        .prop_map(move |(hit, draws, extremes)| {
            let mut v: Vec<K> = draws
                .into_iter()
                .map(|(coin, i, random)| {
                    if !build.is_empty() && coin % 100 < hit {
                        build[i % build.len()]
                    } else {
                        random
                    }
                })
                .collect();
            if extremes {
                v.extend([K::MAX, K::from_u64(0), K::MAX]);
            }
            v
        })
}

/// The reference: every (probe row, build row) pair with equal keys, sorted.
fn reference<K: Key>(build: &[K], probe: &[K]) -> (Vec<u32>, Vec<(u32, u32)>) {
    let mut map: HashMap<K, Vec<u32>> = HashMap::new();
    for (i, &k) in build.iter().enumerate() {
        map.entry(k).or_default().push(i as u32);
    }
    let mut counts = Vec::with_capacity(probe.len());
    let mut pairs = Vec::new();
    for (r, k) in probe.iter().enumerate() {
        let rows = map.get(k).map_or(&[][..], Vec::as_slice);
        counts.push(rows.len() as u32);
        pairs.extend(rows.iter().map(|&b| (r as u32, b)));
    }
    (counts, pairs)
}

fn dedup<K: Key>(keys: &[K]) -> Vec<K> {
    let mut seen = std::collections::HashSet::new();
    keys.iter().copied().filter(|k| seen.insert(*k)).collect()
}

/// Checks one table on one backend against the reference: counts, retrieve (grouped by probe
/// row, ascending), chunked retrieve == unchunked, contains, find, mark_matched.
fn check_backend<B: HashTables, K: Key>(
    b: &B,
    build: &[K],
    probe: &[K],
    config: &TableConfig,
    chunk: usize,
) -> Result<(), TestCaseError> {
    let (want_counts, want_pairs) = reference(build, probe);
    let keys = b.upload(build).unwrap();
    let probe_buf = b.upload(probe).unwrap();
    let table: HashTable<'_, B, K> = b.build_table(&keys, config).unwrap();
    prop_assert!(u64::from(table.max_probe()) <= table.capacity() as u64);
    // The order the build used: clustered only where asked, on a GPU, for open addressing.
    let clustered = b.kind() != DeviceKind::Cpu
        && config.kind() != TableKind::Chained
        && config.build_order_policy() == BuildOrder::Clustered
        && !build.is_empty();
    let used = if clustered {
        BuildOrder::Clustered
    } else {
        BuildOrder::Input
    };
    prop_assert_eq!(table.build_order(), used);

    let matches = b.probe_count(&table, &probe_buf).unwrap();
    prop_assert_eq!(b.download(matches.counts()).unwrap(), want_counts.clone());
    prop_assert_eq!(matches.total(), want_pairs.len() as u64);

    // Unchunked, into poisoned outputs one longer than needed (the extra entry is untouched).
    let n = want_pairs.len();
    let mut out_p = b.alloc::<u32>(n + 1).unwrap();
    let mut out_b = b.alloc::<u32>(n + 1).unwrap();
    b.fill(&mut out_p, POISON).unwrap();
    b.fill(&mut out_b, POISON).unwrap();
    let written = b
        .probe_retrieve(&table, &probe_buf, &matches, &mut out_p, &mut out_b)
        .unwrap();
    prop_assert_eq!(written, n as u64);
    let (p, bb) = (b.download(&out_p).unwrap(), b.download(&out_b).unwrap());
    prop_assert_eq!(p[n], POISON);
    prop_assert_eq!(bb[n], POISON);
    let got: Vec<(u32, u32)> = p[..n]
        .iter()
        .copied()
        .zip(bb[..n].iter().copied())
        .collect();
    prop_assert!(
        got.windows(2).all(|w| w[0].0 <= w[1].0),
        "grouped by probe row"
    );
    let mut sorted = got.clone();
    sorted.sort_unstable();
    prop_assert_eq!(&sorted, &want_pairs);

    // Chunked: the same sequence.
    let mut chunked = Vec::with_capacity(n);
    let mut cp = b.alloc::<u32>(chunk).unwrap();
    let mut cb = b.alloc::<u32>(chunk).unwrap();
    let mut cursor = 0u64;
    while cursor < matches.total() {
        b.fill(&mut cp, POISON).unwrap();
        b.fill(&mut cb, POISON).unwrap();
        let w = b
            .probe_retrieve_chunk(&table, &probe_buf, &matches, cursor, &mut cp, &mut cb)
            .unwrap();
        prop_assert!(w > 0 && w as usize <= chunk);
        let (hp, hb) = (b.download(&cp).unwrap(), b.download(&cb).unwrap());
        chunked.extend(
            hp[..w as usize]
                .iter()
                .copied()
                .zip(hb[..w as usize].iter().copied()),
        );
        cursor += w;
    }
    prop_assert_eq!(&chunked, &got);
    let end = b
        .probe_retrieve_chunk(&table, &probe_buf, &matches, cursor, &mut cp, &mut cb)
        .unwrap();
    prop_assert_eq!(end, 0);

    // contains / find / mark_matched.
    let contains = b
        .download(&b.contains(&table, &probe_buf).unwrap())
        .unwrap();
    let want_contains: Vec<u32> = want_counts.iter().map(|&c| u32::from(c > 0)).collect();
    prop_assert_eq!(contains, want_contains);
    let found = b.download(&b.find(&table, &probe_buf).unwrap()).unwrap();
    for (r, &f) in found.iter().enumerate() {
        if want_counts[r] == 0 {
            prop_assert_eq!(f, NOT_FOUND);
        } else {
            prop_assert!((f as usize) < build.len() && build[f as usize] == probe[r]);
        }
    }
    let mut flags = b.alloc::<u32>(build.len()).unwrap();
    b.fill(&mut flags, 0).unwrap();
    b.mark_matched(&table, &probe_buf, &mut flags).unwrap();
    let mut want_flags = vec![0u32; build.len()];
    for &(_, row) in &want_pairs {
        want_flags[row as usize] = 1;
    }
    prop_assert_eq!(b.download(&flags).unwrap(), want_flags);
    Ok(())
}

fn check_tables<K: Key + Arbitrary>(test: &str) {
    let gpu = gpu(test);
    let case = build_keys::<K>()
        .prop_flat_map(|build| (Just(build.clone()), probe_keys::<K>(&build)))
        .prop_flat_map(|(build, probe)| {
            (Just(build), Just(probe), 0..configs().len(), 1usize..700)
        });
    // The CPU twin checks one configuration per case (it builds every order alike); the GPU,
    // where the orders differ, checks them all.
    let unique_if = |config: &TableConfig, build: &[K]| {
        if config.kind() == TableKind::KeyValue {
            dedup(build)
        } else {
            build.to_vec()
        }
    };
    runner()
        .run(&case, |(build, probe, ci, chunk)| {
            let config = configs()[ci];
            let keys = unique_if(&config, &build);
            check_backend(&CpuBackend::new(), &keys, &probe, &config, chunk)?;
            if let Some(g) = &gpu {
                for config in configs() {
                    check_backend(g, &unique_if(&config, &build), &probe, &config, chunk)?;
                }
            }
            Ok(())
        })
        .unwrap();
}

/// A key-value table keeping the first of duplicate keys: one slot a distinct key, whatever
/// its rows; `contains` and `find` answer as the reference, counts see one row a key; both
/// backends, both build orders on the GPU.
#[test]
fn key_value_tables_keep_the_first_duplicate() {
    fn check<B: HashTables>(b: &B, order: BuildOrder) {
        // 3 keys of 1000 rows each, K::MAX (the sentinel's own slot) among them.
        let build: Vec<u32> = (0..3000u32)
            .map(|i| [5, u32::MAX, 9][i as usize % 3])
            .collect();
        let probe: Vec<u32> = vec![9, 4, u32::MAX, 5, 5, 0];
        let config = TableConfig::key_value()
            .keep_first_duplicate()
            .build_order(order);
        let keys = b.upload(&build).unwrap();
        let table = b.build_table(&keys, &config).unwrap();
        let probe_buf = b.upload(&probe).unwrap();
        let contains = b
            .download(&b.contains(&table, &probe_buf).unwrap())
            .unwrap();
        assert_eq!(contains, [1, 0, 1, 1, 1, 0], "{order:?}");
        let found = b.download(&b.find(&table, &probe_buf).unwrap()).unwrap();
        for (f, p) in found.iter().zip(&probe) {
            if build.contains(p) {
                assert_eq!(build[*f as usize], *p);
            } else {
                assert_eq!(*f, NOT_FOUND);
            }
        }
        let counts = b.probe_count(&table, &probe_buf).unwrap();
        assert_eq!(b.download(counts.counts()).unwrap(), [1, 0, 1, 1, 1, 0]);
        // Without the flag the same keys are refused.
        assert!(matches!(
            b.build_table(&keys, &TableConfig::key_value().build_order(order)),
            Err(Error::DuplicateKey { side: "build" })
        ));
    }
    check(&CpuBackend::new(), BuildOrder::Input);
    if let Some(g) = gpu("key_value_tables_keep_the_first_duplicate") {
        check(&g, BuildOrder::Input);
        check(&g, BuildOrder::Clustered);
    }
}

/// Clustered builds over several tiles (the last one partial) and a table found full by the
/// kernel across several blocks, in both orders, for every open-addressing configuration.
#[test]
fn clustered_tiles_gpu() {
    let Some(g) = gpu("clustered_tiles_gpu") else {
        return;
    };
    clustered_tiles_on::<u32>(&g);
    clustered_tiles_on::<u64>(&g);
}

fn clustered_tiles_on<K: Key>(b: &impl HashTables) {
    let n = 3 * 4096 + 17;
    // Distinct keys (an odd multiplier is a bijection), the last row the sentinel value.
    let key = |i: u64| K::from_u64(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut build: Vec<K> = (0..n as u64).map(key).collect();
    build[n - 1] = K::MAX;
    let keys = b.upload(&build).unwrap();
    let mut probe = build.clone();
    probe.extend((0..64).map(|i| key(n as u64 + i)));
    let probe_buf = b.upload(&probe).unwrap();
    for config in configs()
        .into_iter()
        .filter(|c| c.kind() != TableKind::Chained)
    {
        let table = b.build_table(&keys, &config).unwrap();
        let found = b.download(&b.find(&table, &probe_buf).unwrap()).unwrap();
        let want: Vec<u32> = (0..n as u32)
            .chain(std::iter::repeat_n(NOT_FOUND, 64))
            .collect();
        assert_eq!(found, want, "{config:?}");
    }
    // 9001 distinct keys, none the sentinel, into 9000 slots (+ the sentinel slot): only the
    // kernel can tell the table is full.
    let over: Vec<K> = (0..9001u64).map(|i| key(i + 1)).collect();
    let over = b.upload(&over).unwrap();
    for order in [BuildOrder::Input, BuildOrder::Clustered] {
        let c = TableConfig::key_value().capacity(9000).build_order(order);
        assert!(
            matches!(
                b.build_table(&over, &c),
                Err(Error::TableFull {
                    capacity: 9000,
                    rows: 9001
                })
            ),
            "{order:?}"
        );
    }
}

#[test]
fn tables_u32() {
    check_tables::<u32>("tables_u32");
}

#[test]
fn tables_u64() {
    check_tables::<u64>("tables_u64");
}

fn errors_on<B: HashTables>(b: &B) {
    // More rows than an explicit capacity: TableFull, before any work.
    let keys = b.upload(&(0..100u32).collect::<Vec<_>>()).unwrap();
    for kind in [TableKind::KeyValue, TableKind::HashRow] {
        for probing in [Probing::Linear, Probing::Double] {
            let c = TableConfig::new(kind).probing(probing).capacity(10);
            assert!(
                matches!(
                    b.build_table(&keys, &c),
                    Err(Error::TableFull { rows: 100, .. })
                ),
                "{kind:?} {probing:?}"
            );
        }
    }
    // Exactly full (load factor 1) works, including the sentinel key beside the full slots.
    let mut exact: Vec<u32> = (0..64u32).collect();
    exact.push(u32::MAX);
    let exact = b.upload(&exact).unwrap();
    let c = TableConfig::key_value().capacity(64);
    let t = b.build_table(&exact, &c).unwrap();
    let probe = b.upload(&[5u32, 1000, u32::MAX, 63]).unwrap();
    assert_eq!(
        b.download(&b.find(&t, &probe).unwrap()).unwrap(),
        vec![5, NOT_FOUND, 64, 63]
    );
    // Distinct keys beyond the slots, detected during the build: 65 distinct non-sentinel keys
    // into 64 slots (+ the sentinel slot).
    let over = b.upload(&(0..65u32).collect::<Vec<_>>()).unwrap();
    assert!(matches!(
        b.build_table(&over, &c),
        Err(Error::TableFull {
            capacity: 64,
            rows: 65
        })
    ));
    let clustered = c.build_order(BuildOrder::Clustered);
    assert!(matches!(
        b.build_table(&over, &clustered),
        Err(Error::TableFull {
            capacity: 64,
            rows: 65
        })
    ));
    // Duplicates in a unique-key table; the sentinel key twice too.
    for dup in [vec![1u32, 2, 1], vec![u32::MAX, 3, u32::MAX]] {
        let d = b.upload(&dup).unwrap();
        for order in [BuildOrder::Input, BuildOrder::Clustered] {
            assert_eq!(
                b.build_table(&d, &TableConfig::key_value().build_order(order))
                    .err(),
                Some(Error::DuplicateKey { side: "build" })
            );
        }
    }
    // Bad load factors.
    for lf in [0.0, -1.0, 1.01, f64::NAN] {
        let c = TableConfig::hash_row().load_factor(lf);
        assert!(matches!(
            b.build_table(&keys, &c),
            Err(Error::InvalidArgument(_))
        ));
    }
    // Retrieve argument errors.
    let t = b.build_table(&keys, &TableConfig::hash_row()).unwrap();
    let probe = b.upload(&[1u32, 2, 3]).unwrap();
    let m = b.probe_count(&t, &probe).unwrap();
    let (mut p2, mut b2) = (b.alloc::<u32>(2).unwrap(), b.alloc::<u32>(2).unwrap());
    assert_eq!(
        b.probe_retrieve(&t, &probe, &m, &mut p2, &mut b2).err(),
        Some(Error::OutputTooLarge {
            needed: 3,
            capacity: 2
        })
    );
    assert!(matches!(
        b.probe_retrieve_chunk(&t, &probe, &m, 4, &mut p2, &mut b2),
        Err(Error::IndexOutOfRange { index: 4, .. })
    ));
    let mut b3 = b.alloc::<u32>(3).unwrap();
    assert!(matches!(
        b.probe_retrieve_chunk(&t, &probe, &m, 0, &mut p2, &mut b3),
        Err(Error::LengthMismatch { .. })
    ));
    let other = b.upload(&[1u32, 2]).unwrap();
    assert!(matches!(
        b.probe_retrieve_chunk(&t, &other, &m, 0, &mut p2, &mut b2),
        Err(Error::LengthMismatch { .. })
    ));
    let mut flags = b.alloc::<u32>(3).unwrap();
    assert!(matches!(
        b.mark_matched(&t, &probe, &mut flags),
        Err(Error::LengthMismatch { .. })
    ));
}

#[test]
fn errors_are_typed() {
    errors_on(&CpuBackend::new());
    if let Some(g) = gpu("errors_are_typed") {
        errors_on(&g);
    }
}

/// The floors write and read the slots the reference says.
fn floors_on<B: RandomAccessFloors>(b: &B) {
    let keys: Vec<u64> = (0..5000u64).map(|i| i * 7919).collect();
    let kb = b.upload(&keys).unwrap();
    let mut table = b.alloc::<u64>(1 << 14).unwrap();
    b.fill(&mut table, 0).unwrap();
    b.floor_random_write(&kb, &mut table, 3).unwrap();
    let mut out = b.alloc::<u32>(keys.len()).unwrap();
    b.floor_random_read(&kb, &table, &mut out, 3).unwrap();
    let t = b.download(&table).unwrap();
    let o = b.download(&out).unwrap();
    assert!(t.iter().filter(|&&w| w != 0).count() > 4000);
    // Each key reads the word of its own first slot (as a table of that many slots places it).
    let m = t.len() as u64;
    for (i, &k) in keys.iter().enumerate() {
        let slot = ((u64::from(joinkit_cuda::hash::hash64(k, 3) as u32) * m) >> 32) as usize;
        assert_eq!(o[i], t[slot] as u32, "key {i}");
    }
    let empty = b.upload::<u64>(&[]).unwrap();
    assert!(matches!(
        b.floor_random_write(&kb, &mut b.alloc::<u64>(0).unwrap(), 1),
        Err(Error::EmptyInput(_))
    ));
    b.floor_random_write(&empty, &mut table, 1).unwrap();
}

#[test]
fn floors() {
    floors_on(&CpuBackend::new());
    if let Some(g) = gpu("floors") {
        floors_on(&g);
    }
}

/// Small tables probed by many rows, which CUDA's `mark_matched` filters through a shared-memory
/// bitmap of the build keys: every configuration and both key widths against the CPU twin,
/// with duplicate build keys for the multi-match kinds and the sentinel key among them. GPU
/// only.
#[test]
fn mark_small_tables_gpu() {
    let Some(g) = gpu("mark_small_tables_gpu") else {
        return;
    };
    mark_small_on::<u32>(&g);
    mark_small_on::<u64>(&g);
}

fn mark_small_on<K: Key>(g: &impl HashTables) {
    let cpu = CpuBackend::new();
    for rows in [1usize, 37, 3000, 4096] {
        for config in configs() {
            let unique = config.kind() == TableKind::KeyValue;
            let build: Vec<K> = (0..rows as u64)
                .map(|i| match i {
                    0 => K::MAX,
                    _ if unique => K::from_u64(i * 7),
                    _ => K::from_u64((i % 500) * 7),
                })
                .collect();
            // About a third of the probes hit (keys are multiples of 7), the rest miss.
            let probe: Vec<K> = (0..(1u64 << 18))
                .map(|j| K::from_u64(joinkit_cuda::hash::hash64(j, 3) % (rows as u64 * 21)))
                .chain([K::MAX])
                .collect();
            let want = marks(&cpu, &build, &probe, &config);
            assert!(want.contains(&1), "{config:?}: some rows match");
            assert_eq!(
                marks(g, &build, &probe, &config),
                want,
                "{config:?}, {rows} rows"
            );
        }
    }
}

/// `mark_matched` flags of `build`'s rows probed by `probe`.
fn marks<B: HashTables, K: Key>(b: &B, build: &[K], probe: &[K], config: &TableConfig) -> Vec<u32> {
    let (kb, pb) = (b.upload(build).unwrap(), b.upload(probe).unwrap());
    let table = b.build_table(&kb, config).unwrap();
    let mut flags = b.alloc::<u32>(build.len()).unwrap();
    b.fill(&mut flags, 0).unwrap();
    b.mark_matched(&table, &pb, &mut flags).unwrap();
    b.download(&flags).unwrap()
}

/// One large deterministic run per table kind, on the GPU only: 2^24 unique build keys (a
/// bijection of the row id, MAX included), 2^24 probes with every other one a hit, and a
/// duplicate-key build with multiplicity 4 for the multi-match kinds.
#[test]
fn large_gpu() {
    let Some(g) = gpu("large_gpu") else { return };
    large_on(&g);
}

fn large_on<B: HashTables>(b: &B) {
    // 2^24 rows; HT_LARGE_LOG2 picks another size (for quick runs of the CPU twin).
    let log2: u32 = std::env::var("HT_LARGE_LOG2")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    let n: u32 = 1 << log2;
    // An odd multiplier is a bijection of u32; row `MAX_ROW` maps to u32::MAX (the sentinel).
    const MUL: u32 = 0x9e37_79b1;
    let inv = {
        // Inverse of MUL mod 2^32 by Newton's iteration.
        let mut x = MUL;
        for _ in 0..5 {
            x = x.wrapping_mul(2u32.wrapping_sub(MUL.wrapping_mul(x)));
        }
        x
    };
    let key_of = |i: u32| i.wrapping_mul(MUL);
    let build: Vec<u32> = (0..n)
        .map(|i| if i == 12345 { u32::MAX } else { key_of(i) })
        .collect();
    // Probe j: even j hits build row (j * 7) % n, odd j misses (row ids >= n are not built,
    // unless the bijection lands on MAX, which we keep out of misses).
    let want_row = |j: u32| {
        if j & 1 == 0 {
            Some(j.wrapping_mul(7) % n)
        } else {
            None
        }
    };
    let probe: Vec<u32> = (0..n)
        .map(|j| match want_row(j) {
            Some(r) => build[r as usize],
            None => {
                let k = key_of(n + j);
                if k == u32::MAX {
                    0x7777_7777u32.wrapping_mul(MUL)
                } else {
                    k
                }
            }
        })
        .collect();
    let keys = b.upload(&build).unwrap();
    let pb = b.upload(&probe).unwrap();
    for config in configs() {
        let table = b.build_table(&keys, &config).unwrap();
        let found = b.download(&b.find(&table, &pb).unwrap()).unwrap();
        for (j, &f) in found.iter().enumerate() {
            assert_eq!(
                f,
                want_row(j as u32).unwrap_or(NOT_FOUND),
                "{config:?} probe row {j}"
            );
        }
        let m = b.probe_count(&table, &pb).unwrap();
        assert_eq!(m.total(), u64::from(n / 2), "{config:?}");
        let (mut p, mut r) = (
            b.alloc::<u32>(n as usize / 2).unwrap(),
            b.alloc::<u32>(n as usize / 2).unwrap(),
        );
        b.fill(&mut p, POISON).unwrap();
        b.fill(&mut r, POISON).unwrap();
        b.probe_retrieve(&table, &pb, &m, &mut p, &mut r).unwrap();
        let (p, r) = (b.download(&p).unwrap(), b.download(&r).unwrap());
        for (i, (&pj, &br)) in p.iter().zip(&r).enumerate() {
            assert_eq!(pj, 2 * i as u32, "{config:?} output {i}");
            assert_eq!(br, want_row(pj).unwrap(), "{config:?} output {i}");
        }
        let mut flags = b.alloc::<u32>(n as usize).unwrap();
        b.fill(&mut flags, 0).unwrap();
        b.mark_matched(&table, &pb, &mut flags).unwrap();
        let marked = b
            .download(&flags)
            .unwrap()
            .iter()
            .map(|&f| u64::from(f))
            .sum::<u64>();
        let mut want = vec![false; n as usize];
        for j in (0..n).step_by(2) {
            want[want_row(j).unwrap() as usize] = true;
        }
        assert_eq!(
            marked,
            want.iter().filter(|&&w| w).count() as u64,
            "{config:?}"
        );
    }
    // Multiplicity 4 for the multi-match kinds: build key of row i is key_of(i / 4).
    let dup: Vec<u32> = (0..n).map(|i| key_of(i / 4)).collect();
    let keys = b.upload(&dup).unwrap();
    for config in configs()
        .into_iter()
        .filter(|c| c.kind() != TableKind::KeyValue)
    {
        let table = b.build_table(&keys, &config).unwrap();
        let m = b.probe_count(&table, &pb).unwrap();
        // A probe key hits (4 rows) when its preimage under the bijection is below n / 4.
        let want = probe
            .iter()
            .filter(|&&k| k.wrapping_mul(inv) < n / 4)
            .count() as u64
            * 4;
        assert_eq!(m.total(), want, "{config:?}");
        let chunk = 1 << 20;
        let (mut p, mut r) = (
            b.alloc::<u32>(chunk).unwrap(),
            b.alloc::<u32>(chunk).unwrap(),
        );
        let mut cursor = 0u64;
        let mut last = 0u32;
        while cursor < m.total() {
            let w = b
                .probe_retrieve_chunk(&table, &pb, &m, cursor, &mut p, &mut r)
                .unwrap();
            let (hp, hr) = (b.download(&p).unwrap(), b.download(&r).unwrap());
            for i in 0..w as usize {
                assert!(hp[i] >= last, "{config:?} grouped by probe row");
                last = hp[i];
                assert_eq!(dup[hr[i] as usize], probe[hp[i] as usize], "{config:?}");
            }
            cursor += w;
        }
    }
}

/// The large run on the CPU twin (slow in debug builds: `cargo test --release -- --ignored`).
#[test]
#[ignore = "large; run with --release --ignored"]
fn large_cpu() {
    large_on(&CpuBackend::new());
}
