//! Property tests: round trips on the CPU twin and (where a GPU is present) on CUDA and across
//! them, with the encoded words equal; every scheme shape, all four types, random / sorted /
//! constant / alternating / extreme / run / small-range / empty columns; truncated and
//! byte-flipped streams give the same typed error on both backends, never a panic.

use joinkit_codec::{
    Codec, CodecOptions, HEADER_WORDS, Layer, Scheme, SelectorConfig, inspect, words_from_bytes,
    words_to_bytes,
};
use joinkit_cuda::{Backend, CpuBackend, Element, Error};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

type Gpu = Option<joinkit_cuda::testing::TestGpu>;

/// The GPU for a test, or `None` (printed; a failure when `JOINKIT_REQUIRE_GPU` is set).
fn gpu(test: &str) -> Gpu {
    joinkit_cuda::testing::gpu_or_skip(test)
}

/// Decodes on the GPU into an output poisoned first (view-level API).
#[cfg(feature = "cuda")]
fn gpu_decode_poisoned<T: Element>(
    g: &joinkit_cuda::CudaBackend,
    words: &[u64],
) -> Result<Vec<T>, Error> {
    use joinkit_codec::cuda::{finish_decompress, plan_decompress};
    let w = g.upload(words)?;
    let plan = plan_decompress::<T>(g, &w.view(), std::slice::from_ref(&(0..words.len())), true)?;
    let mut out = g.alloc::<T>(plan.values())?;
    g.fill(&mut out, T::from_bits(joinkit_cuda::testing::POISON_U64))?;
    finish_decompress(g, &w.view(), &plan, &mut out.view_mut())?;
    g.download(&out)
}
#[cfg(not(feature = "cuda"))]
fn gpu_decode_poisoned<T: Element>(g: &CpuBackend, words: &[u64]) -> Result<Vec<T>, Error> {
    g.decompress(&words.to_vec())
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    Random,
    Sorted,
    Descending,
}

/// Bit patterns of the shapes that matter, then ordered as `T` where the shape says so.
fn column<T: Element + Ord>() -> impl Strategy<Value = Vec<T>> {
    let extremes = prop_oneof![
        Just(0u64),
        Just(u64::MAX),
        Just(1u64 << 63),
        Just((1u64 << 63) - 1),
        Just(1u64 << 31),
        Just(u64::from(u32::MAX)),
        any::<u64>(),
    ];
    let raw = prop_oneof![
        proptest::collection::vec(any::<u64>(), 0..2000),
        (any::<u64>(), 0usize..2000).prop_map(|(v, n)| vec![v; n]),
        (any::<u64>(), any::<u64>(), 0usize..2000)
            .prop_map(|(a, b, n)| (0..n).map(|i| if i % 2 == 0 { a } else { b }).collect()),
        proptest::collection::vec(extremes, 0..600),
        (
            any::<u64>(),
            proptest::collection::vec((0u64..8, 1usize..8), 0..500)
        )
            .prop_map(|(mut k, runs)| {
                let mut v = Vec::new();
                for (gap, rep) in runs {
                    k = k.wrapping_add(gap);
                    v.extend(std::iter::repeat_n(k, rep));
                }
                v
            }),
        (any::<u64>(), proptest::collection::vec(0u64..16, 0..2000))
            .prop_map(|(b, v)| v.into_iter().map(|x| b.wrapping_add(x)).collect()),
        Just(Vec::new()),
    ];
    let shape = prop_oneof![
        3 => Just(Shape::Random),
        1 => Just(Shape::Sorted),
        1 => Just(Shape::Descending)
    ];
    (raw, shape).prop_map(|(bits, shape)| {
        let mut v: Vec<T> = bits.into_iter().map(T::from_bits).collect();
        match shape {
            Shape::Random => {}
            Shape::Sorted => v.sort(),
            Shape::Descending => v.sort_by(|a, b| b.cmp(a)),
        }
        v
    })
}

fn scheme() -> impl Strategy<Value = Scheme> {
    let layer = prop_oneof![Just(Layer::Rle), Just(Layer::Delta)];
    prop_oneof![
        proptest::sample::select(Scheme::candidates()),
        proptest::collection::vec(layer, 0..=5).prop_map(|l| Scheme::new(&l).unwrap()),
    ]
}

fn options() -> impl Strategy<Value = CodecOptions> {
    prop_oneof![Just(256u32), Just(512), Just(1024), Just(4096), Just(8192)]
        .prop_map(|chunk_values| CodecOptions { chunk_values })
}

/// Buffer bounds over `n` values: `k` random cut points (empty buffers included).
fn bounds(n: usize, cuts: &[usize]) -> Vec<usize> {
    let mut b: Vec<usize> = cuts
        .iter()
        .map(|c| if n == 0 { 0 } else { c % (n + 1) })
        .collect();
    b.push(0);
    b.push(n);
    b.sort_unstable();
    b
}

fn check_round_trip<T: Element + Ord>(test: &str) {
    let gpu = gpu(test);
    let cpu = CpuBackend::new();
    let strategy = (
        column::<T>(),
        scheme(),
        options(),
        proptest::collection::vec(any::<usize>(), 0..6),
    );
    runner(48)
        .run(&strategy, |(data, scheme, opts, cuts)| {
            let enc = cpu.compress(&data, &scheme, &opts).unwrap();
            let info = inspect(&enc).unwrap();
            prop_assert_eq!(info.values, data.len() as u64);
            prop_assert_eq!(info.value_type, T::NAME);
            // Never larger than raw plus headers (header, offsets, two words per chunk).
            let raw_words = (data.len() * (T::BITS as usize / 8)).div_ceil(8);
            prop_assert!(
                enc.len() as u64
                    <= raw_words as u64 + info.directory_words() + 2 * info.chunks + info.chunks
            );
            prop_assert_eq!(cpu.decompress::<T>(&enc).unwrap(), data.clone());
            prop_assert_eq!(
                words_from_bytes(&words_to_bytes(&enc)).unwrap(),
                enc.clone()
            );

            let b = bounds(data.len(), &cuts);
            let (many, ranges) = cpu.compress_many(&data, &b, &scheme, &opts).unwrap();
            for (k, r) in ranges.iter().enumerate() {
                let alone = cpu
                    .compress(&data[b[k]..b[k + 1]].to_vec(), &scheme, &opts)
                    .unwrap();
                prop_assert_eq!(&many[r.clone()], &alone[..]);
            }
            let (dec, got_bounds) = cpu.decompress_many::<T>(&many, &ranges).unwrap();
            prop_assert_eq!(&dec, &data);
            prop_assert_eq!(&got_bounds, &b);
            let mut into = vec![T::default(); data.len()];
            prop_assert_eq!(
                &cpu.decompress_many_into(&many, &ranges, &mut into).unwrap(),
                &b
            );
            prop_assert_eq!(&into, &data);

            if let Some(g) = &gpu {
                let d = g.upload(&data).unwrap();
                let genc = g.compress(&d, &scheme, &opts).unwrap();
                prop_assert_eq!(g.download(&genc).unwrap(), enc.clone());
                // CPU-encoded decoded on the GPU (and the GPU's own, which is the same words).
                prop_assert_eq!(gpu_decode_poisoned::<T>(g, &enc).unwrap(), data.clone());
                let (gmany, granges) = g.compress_many(&d, &b, &scheme, &opts).unwrap();
                prop_assert_eq!(g.download(&gmany).unwrap(), many.clone());
                prop_assert_eq!(&granges, &ranges);
                let (gdec, gb) = g.decompress_many::<T>(&gmany, &ranges).unwrap();
                prop_assert_eq!(g.download(&gdec).unwrap(), data.clone());
                prop_assert_eq!(&gb, &b);
                let mut gout = g.alloc::<T>(data.len()).unwrap();
                g.fill(&mut gout, T::from_bits(joinkit_cuda::testing::POISON_U64))
                    .unwrap();
                prop_assert_eq!(
                    g.decompress_many_into(&gmany, &ranges, &mut gout).unwrap(),
                    b
                );
                prop_assert_eq!(g.download(&gout).unwrap(), data.clone());
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn round_trip_u32() {
    check_round_trip::<u32>("round_trip_u32");
}
#[test]
fn round_trip_u64() {
    check_round_trip::<u64>("round_trip_u64");
}
#[test]
fn round_trip_i32() {
    check_round_trip::<i32>("round_trip_i32");
}
#[test]
fn round_trip_i64() {
    check_round_trip::<i64>("round_trip_i64");
}

/// Every default candidate on every fixed shape, both backends.
#[test]
fn every_scheme_on_fixed_shapes() {
    let gpu = gpu("every_scheme_on_fixed_shapes");
    let cpu = CpuBackend::new();
    let n = 3001u64;
    let shapes: Vec<Vec<u64>> = vec![
        (0..n).map(|i| joinkit_cuda::hash::hash64(i, 7)).collect(),
        (0..n).map(|i| i * 3).collect(),
        vec![42; n as usize],
        (0..n)
            .map(|i| if i % 2 == 0 { 0 } else { u64::MAX })
            .collect(),
        (0..n)
            .map(|i| if i % 3 == 0 { u64::MAX } else { 0 })
            .collect(),
        (0..n).map(|i| (n - i) / 5).collect(),
        Vec::new(),
        vec![7],
    ];
    for bits in &shapes {
        for scheme in Scheme::candidates() {
            let opts = CodecOptions { chunk_values: 1024 };
            macro_rules! check {
                ($t:ty) => {{
                    let data: Vec<$t> = bits.iter().map(|&b| <$t>::from_bits(b)).collect();
                    let enc = cpu.compress(&data, &scheme, &opts).unwrap();
                    assert_eq!(cpu.decompress::<$t>(&enc).unwrap(), data, "{scheme}");
                    if let Some(g) = &gpu {
                        let genc = g
                            .compress(&g.upload(&data).unwrap(), &scheme, &opts)
                            .unwrap();
                        assert_eq!(g.download(&genc).unwrap(), enc, "{scheme}");
                        let dec = g.decompress::<$t>(&genc).unwrap();
                        assert_eq!(g.download(&dec).unwrap(), data, "{scheme}");
                    }
                }};
            }
            check!(u32);
            check!(u64);
            check!(i32);
            check!(i64);
        }
    }
}

/// Compressible sample data for corruption tests: runs of sorted keys plus a random tail, so
/// streams have cascaded and raw chunks.
fn sample<T: Element>(n: usize, seed: u64) -> Vec<T> {
    (0..n as u64)
        .map(|i| {
            if i < n as u64 * 2 / 3 {
                T::from_bits(i / 3 * 2)
            } else {
                T::from_bits(joinkit_cuda::hash::hash64(i, seed))
            }
        })
        .collect()
}

type Decoded<T> = Result<Vec<T>, Error>;

fn decode_both<T: Element>(gpu: &Gpu, words: &[u64]) -> (Decoded<T>, Option<Decoded<T>>) {
    let cpu = CpuBackend::new().decompress::<T>(&words.to_vec());
    let dev = gpu.as_ref().map(|g| {
        let w = g.upload(words).unwrap();
        g.decompress::<T>(&w).map(|b| g.download(&b).unwrap())
    });
    (cpu, dev)
}

fn check_corruption<T: Element>(test: &str) {
    let gpu = gpu(test);
    let cpu = CpuBackend::new();
    let strategy = (
        0usize..3000,
        scheme(),
        any::<u64>(),
        any::<usize>(),
        1u8..=255,
        any::<bool>(),
    );
    runner(48)
        .run(&strategy, |(n, scheme, seed, at, xor, truncate)| {
            let data = sample::<T>(n, seed);
            // Mostly small chunks (many per stream); sometimes the 4096 and 8192 decode kernels.
            let opts = CodecOptions {
                chunk_values: [256, 256, 4096, 8192][seed as usize % 4],
            };
            let mut enc = cpu.compress(&data, &scheme, &opts).unwrap();
            if truncate {
                enc.truncate(at % enc.len());
            } else {
                let mut bytes = words_to_bytes(&enc);
                let i = at % bytes.len();
                bytes[i] ^= xor;
                enc = words_from_bytes(&bytes).unwrap();
            }
            let (c, g) = decode_both::<T>(&gpu, &enc);
            prop_assert!(
                matches!(c, Err(Error::Corrupt(_))),
                "CPU gave {:?}",
                c.map(|v| v.len())
            );
            if let Some(g) = g {
                prop_assert_eq!(g.map(|v| v.len()), c.map(|v| v.len()));
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn corruption_u32() {
    check_corruption::<u32>("corruption_u32");
}
#[test]
fn corruption_u64() {
    check_corruption::<u64>("corruption_u64");
}
#[test]
fn corruption_i32() {
    check_corruption::<i32>("corruption_i32");
}
#[test]
fn corruption_i64() {
    check_corruption::<i64>("corruption_i64");
}

/// Offsets are checked chunk by chunk before any output is allocated: a chunk shorter than the
/// shortest valid one (3 words) is an offset fault, and with several bad offsets the first bad
/// chunk is the one named, on both backends.
#[test]
fn short_chunks_and_bad_offsets_name_the_first_chunk() {
    let cpu = CpuBackend::new();
    let data: Vec<u32> = (0..1024u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let opts = CodecOptions { chunk_values: 256 };
    let enc = cpu.compress(&data, &Scheme::bitpack(), &opts).unwrap();
    let chunks = inspect(&enc).unwrap().chunks as usize;
    assert_eq!(chunks, 4);
    let mut short = enc.clone();
    short[HEADER_WORDS + 1] = short[HEADER_WORDS] + 2;
    let mut two_bad = enc.clone();
    two_bad[HEADER_WORDS + 1] = two_bad[HEADER_WORDS];
    two_bad[HEADER_WORDS + chunks] += 1;
    let g = gpu("short_chunks_and_bad_offsets_name_the_first_chunk");
    for words in [&short, &two_bad] {
        let expect = |r: Result<Vec<u32>, Error>| match r {
            Err(Error::Corrupt(m)) => assert!(m.starts_with("chunk 0: offset"), "{m}"),
            other => panic!("expected chunk 0's offset fault, got {other:?}"),
        };
        expect(cpu.decompress::<u32>(words));
        if let Some(g) = &g {
            expect(gpu_decode_poisoned::<u32>(g, words));
        }
    }
}

/// Corrupting one stream of many names that buffer, on both backends alike.
#[test]
fn corruption_many() {
    let gpu = gpu("corruption_many");
    let cpu = CpuBackend::new();
    runner(32)
        .run(
            &(any::<usize>(), 1u8..=255, any::<bool>()),
            |(at, xor, shorten)| {
                let data = sample::<u64>(5000, 3);
                let b = vec![0, 1000, 1000, 3500, 5000];
                let opts = CodecOptions { chunk_values: 512 };
                let scheme: Scheme = "rle+delta+bp".parse().unwrap();
                let (mut enc, mut ranges) = cpu.compress_many(&data, &b, &scheme, &opts).unwrap();
                let i = at % enc.len();
                if shorten {
                    let k = ranges.iter().position(|r| r.contains(&i)).unwrap();
                    ranges[k].end = i.max(ranges[k].start);
                } else {
                    enc[i] ^= u64::from(xor) << (8 * (at % 8));
                }
                let c = cpu.decompress_many::<u64>(&enc, &ranges);
                prop_assert!(matches!(c, Err(Error::Corrupt(_))));
                if let Some(g) = &gpu {
                    let w = g.upload(&enc).unwrap();
                    let d = g.decompress_many::<u64>(&w, &ranges).map(|(_, b)| b);
                    prop_assert_eq!(d, c.map(|(_, b)| b));
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn bad_arguments() {
    let cpu = CpuBackend::new();
    let data: Vec<u32> = (0..100).collect();
    let s = Scheme::bitpack();
    let bad = CodecOptions { chunk_values: 300 };
    assert!(matches!(
        cpu.compress(&data, &s, &bad),
        Err(Error::InvalidArgument(_))
    ));
    let ok = CodecOptions::default();
    for b in [vec![], vec![1, 100], vec![0, 50, 40, 100], vec![0, 99]] {
        assert!(matches!(
            cpu.compress_many(&data, &b, &s, &ok),
            Err(Error::InvalidArgument(_))
        ));
    }
    let enc = cpu.compress(&data, &s, &ok).unwrap();
    assert!(matches!(
        cpu.decompress::<i32>(&enc),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        cpu.decompress::<u64>(&enc),
        Err(Error::InvalidArgument(_))
    ));
    let out_of = vec![0..1, 0..enc.len() + 1];
    assert!(matches!(
        cpu.decompress_many::<u32>(&enc, &out_of),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(words_from_bytes(&[0; 12]), Err(Error::Corrupt(_))));
    assert!(matches!(
        inspect(&enc[..HEADER_WORDS - 1]),
        Err(Error::Corrupt(_))
    ));
    assert!(Scheme::new(&[Layer::Rle; 9]).is_err());
    assert!("rle+bp+delta".parse::<Scheme>().is_err());
    assert!(matches!(
        cpu.select_scheme(
            &data,
            &SelectorConfig {
                samples: 0,
                ..Default::default()
            }
        ),
        Err(Error::InvalidArgument(_))
    ));
    // Mixed chunk sizes in one fused decode.
    let a = cpu
        .compress(&data, &s, &CodecOptions { chunk_values: 256 })
        .unwrap();
    let b = cpu
        .compress(&data, &s, &CodecOptions { chunk_values: 512 })
        .unwrap();
    let both: Vec<u64> = a.iter().chain(&b).copied().collect();
    let ranges = [0..a.len(), a.len()..both.len()];
    assert!(matches!(
        cpu.decompress_many::<u32>(&both, &ranges),
        Err(Error::InvalidArgument(_))
    ));
}

/// The sampled selector's reference: every window compressed alone on the CPU (the public
/// stream path), its chunk words counted from the stream (less header and offset table), the
/// candidates' ratios from those, and the documented pick (best ratio; within the tolerance,
/// the cheapest decode, then the better ratio).
fn selection_reference<T: Element>(
    data: &[T],
    cfg: &SelectorConfig,
) -> (Scheme, Vec<(Scheme, f64)>) {
    let (n, s, w) = (data.len(), cfg.samples, cfg.sample_values);
    let windows: Vec<std::ops::Range<usize>> = if s * w >= n {
        std::iter::once(0..n).collect()
    } else if s == 1 {
        std::iter::once(0..w).collect()
    } else {
        (0..s)
            .map(|i| (n - w) * i / (s - 1))
            .map(|start| start..start + w)
            .collect()
    };
    let cpu = CpuBackend::new();
    let raw_bytes = (n.min(s * w) * (T::BITS as usize / 8)) as f64;
    let candidates: Vec<(Scheme, f64)> = (cfg.candidates.iter())
        .map(|scheme| {
            let words: u64 = (windows.iter())
                .map(|r| {
                    let enc = cpu
                        .compress(&data[r.clone()].to_vec(), scheme, &cfg.options)
                        .unwrap();
                    let info = inspect(&enc).unwrap();
                    enc.len() as u64 - info.directory_words()
                })
                .sum();
            (scheme.clone(), raw_bytes / (words * 8) as f64)
        })
        .collect();
    let cost = |s: &Scheme| -> u32 {
        (s.layers().iter())
            .map(|l| if *l == Layer::Rle { 2 } else { 1 })
            .sum()
    };
    let best = candidates.iter().map(|c| c.1).fold(0.0, f64::max);
    let pick = (candidates.iter())
        .filter(|c| c.1 >= best * (1.0 - cfg.tolerance))
        .min_by(|a, b| cost(&a.0).cmp(&cost(&b.0)).then(b.1.total_cmp(&a.1)))
        .unwrap();
    (pick.0.clone(), candidates)
}

/// The selector on both backends equals the reference (the GPU encodes the sampled windows on
/// the device, the CPU on the host) on every column shape, window layout and chunking.
fn check_selector<T: Element + Ord>(test: &str) {
    let gpu = gpu(test);
    let cpu = CpuBackend::new();
    let candidates = prop_oneof![
        Just(Scheme::candidates()),
        proptest::collection::vec(scheme(), 1..5),
    ];
    let config = (1usize..20, 1usize..3000, 0.0f64..0.3, candidates, options()).prop_map(
        |(samples, sample_values, tolerance, candidates, options)| SelectorConfig {
            samples,
            sample_values,
            tolerance,
            candidates,
            options,
        },
    );
    runner(40)
        .run(&(column::<T>(), config), |(data, cfg)| {
            let sel = cpu.select_scheme(&data, &cfg).unwrap();
            if data.is_empty() {
                prop_assert_eq!(sel.sampled_values, 0);
                prop_assert!(sel.candidates.is_empty());
            } else {
                let (scheme, candidates) = selection_reference(&data, &cfg);
                prop_assert_eq!(&sel.scheme, &scheme);
                prop_assert_eq!(&sel.candidates, &candidates);
            }
            if let Some(g) = &gpu {
                let d = g.upload(&data).unwrap();
                prop_assert_eq!(g.select_scheme(&d, &cfg).unwrap(), sel);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn selector_u32() {
    check_selector::<u32>("selector_u32");
}
#[test]
fn selector_u64() {
    check_selector::<u64>("selector_u64");
}
#[test]
fn selector_i32() {
    check_selector::<i32>("selector_i32");
}
#[test]
fn selector_i64() {
    check_selector::<i64>("selector_i64");
}

#[test]
fn selector_picks_sensible_schemes() {
    let gpu = gpu("selector_picks_sensible_schemes");
    let cpu = CpuBackend::new();
    let cfg = SelectorConfig {
        samples: 4,
        sample_values: 1024,
        ..Default::default()
    };
    // l_orderkey-like: sorted keys, 1-7 repeats, gaps.
    let mut keys = Vec::new();
    let mut k = 1u64;
    for i in 0..20_000u64 {
        let rep = 1 + joinkit_cuda::hash::hash64(i, 1) % 7;
        keys.extend(std::iter::repeat_n(k, rep as usize));
        k += 1 + joinkit_cuda::hash::hash64(i, 2) % 4;
    }
    let sel = cpu.select_scheme(&keys, &cfg).unwrap();
    assert!(sel.scheme.layers().contains(&Layer::Delta), "{sel}");
    assert!(sel.estimated_ratio > 8.0, "{sel}");
    assert!(sel.to_string().contains("estimated ratio"));
    let random: Vec<u64> = (0..50_000)
        .map(|i| joinkit_cuda::hash::hash64(i, 5))
        .collect();
    let sel_r = cpu.select_scheme(&random, &cfg).unwrap();
    assert_eq!(sel_r.scheme, Scheme::bitpack(), "{sel_r}");
    let constant = vec![9u32; 30_000];
    let sel_c = cpu.select_scheme(&constant, &cfg).unwrap();
    assert!(sel_c.estimated_ratio > 100.0, "{sel_c}");
    assert_eq!(
        cpu.select_scheme::<u32>(&Vec::new(), &cfg)
            .unwrap()
            .sampled_values,
        0
    );
    if let Some(g) = &gpu {
        let d = g.upload(&keys).unwrap();
        assert_eq!(g.select_scheme(&d, &cfg).unwrap(), sel);
    }
}

/// Large deterministic GPU-only checks: 2^24 l_orderkey-like keys and random i32, one stream
/// and the fused many-buffer path, decoded on the GPU and compared with the input; the GPU's
/// words equal the CPU's on a 2^20 prefix.
#[cfg(feature = "cuda")]
#[test]
fn large_gpu() {
    let Some(g) = gpu("large_gpu") else { return };
    let n = 1usize << 24;
    let mut keys = Vec::with_capacity(n);
    let mut k = 1u64;
    let mut i = 0u64;
    while keys.len() < n {
        let rep = 1 + joinkit_cuda::hash::hash64(i, 1) % 7;
        for _ in 0..rep {
            keys.push(k);
        }
        k += 1 + joinkit_cuda::hash::hash64(i, 2) % 4;
        i += 1;
    }
    keys.truncate(n);
    let opts = CodecOptions::default();
    let d = g.upload(&keys).unwrap();
    let sel = g.select_scheme(&d, &SelectorConfig::default()).unwrap();
    let enc = g.compress(&d, &sel.scheme, &opts).unwrap();
    let dec = g.decompress::<u64>(&enc).unwrap();
    assert!(g.download(&dec).unwrap() == keys, "{sel}");
    let prefix = &keys[..1 << 20];
    let cpu = CpuBackend::new();
    let cenc = cpu.compress(&prefix.to_vec(), &sel.scheme, &opts).unwrap();
    let genc = g
        .compress(&g.upload(prefix).unwrap(), &sel.scheme, &opts)
        .unwrap();
    assert!(g.download(&genc).unwrap() == cenc);

    let b: Vec<usize> = (0..=1024)
        .map(|j| j * n / 1024 - (j % 3) * (j > 0 && j < 1024) as usize)
        .collect();
    let (many, ranges) = g.compress_many(&d, &b, &sel.scheme, &opts).unwrap();
    let (dec, bounds) = g.decompress_many::<u64>(&many, &ranges).unwrap();
    assert_eq!(bounds, b);
    assert!(g.download(&dec).unwrap() == keys);

    let mut r = g.alloc::<i32>(n).unwrap();
    g.fill_random(&mut r, 9, 0xffff_ffff).unwrap();
    for s in ["bp", "delta+bp", "rle+delta+rle+bp"] {
        let s: Scheme = s.parse().unwrap();
        let enc = g.compress(&r, &s, &opts).unwrap();
        let dec = g.decompress::<i32>(&enc).unwrap();
        assert!(g.download(&dec).unwrap() == g.download(&r).unwrap(), "{s}");
    }
}

/// Column shapes for the decode paths (bit patterns): RLE runs spanning many warps, short runs
/// with gaps (l_orderkey-like), mixed run lengths, one constant run, descending steps near the
/// top of the range, and random values (raw chunks).
#[cfg(feature = "cuda")]
fn decode_shapes(n: usize) -> Vec<Vec<u64>> {
    let h = |i: u64, s: u64| joinkit_cuda::hash::hash64(i, s);
    let runs = |max_len: u64, max_gap: u64, start: u64, down: bool| {
        let mut v = Vec::with_capacity(n);
        let (mut k, mut i) = (start, 0u64);
        while v.len() < n {
            let rep = 1 + h(i, 11) % max_len;
            v.extend(std::iter::repeat_n(k, rep as usize));
            let gap = 1 + h(i, 12) % max_gap;
            k = if down {
                k.wrapping_sub(gap)
            } else {
                k.wrapping_add(gap)
            };
            i += 1;
        }
        v.truncate(n);
        v
    };
    let mut mixed = Vec::with_capacity(n);
    let mut i = 0u64;
    while mixed.len() < n {
        let rep = if i.is_multiple_of(4) {
            1 + h(i, 13) % 2000
        } else {
            1
        };
        mixed.extend(std::iter::repeat_n(h(i, 14) % 5, rep as usize));
        i += 1;
    }
    mixed.truncate(n);
    vec![
        runs(3000, 1000, 5, false),
        runs(7, 4, 1, false),
        mixed,
        vec![0x8000_0000_0000_0001; n],
        runs(3, 3, u64::MAX - 7, true),
        (0..n as u64).map(|i| h(i, 15)).collect(),
    ]
}

/// GPU only: every decode path (bitpacking only, RLE and Delta as the first, middle and last
/// decoded layer, RLE after RLE, runs spanning many warps, one run per chunk) at every kernel
/// shape (chunks of 256 to 8192 values), all four types, one stream and many buffers at odd
/// output offsets, decoded into poisoned outputs; the GPU's words equal the CPU's.
#[cfg(feature = "cuda")]
#[test]
fn decode_paths_gpu() {
    let Some(g) = gpu("decode_paths_gpu") else {
        return;
    };
    let cpu = CpuBackend::new();
    let n = 20_011;
    let schemes = [
        "bp",
        "rle+bp",
        "delta+bp",
        "rle+delta+bp",
        "delta+rle+bp",
        "rle+rle+bp",
        "delta+delta+bp",
        "rle+delta+rle+bp",
        "delta+rle+delta+rle+bp",
        "rle+rle+rle+delta+bp",
    ];
    let b = vec![0, 1, 4097, 4097, 9000, n];
    for bits in decode_shapes(n) {
        for cv in [256u32, 1024, 4096, 8192] {
            let opts = CodecOptions { chunk_values: cv };
            for s in schemes {
                let scheme: Scheme = s.parse().unwrap();
                macro_rules! check {
                    ($t:ty) => {{
                        let data: Vec<$t> = bits.iter().map(|&x| <$t>::from_bits(x)).collect();
                        let what = format!("{s}, {}, chunks of {cv}", <$t>::NAME);
                        let enc = cpu.compress(&data, &scheme, &opts).unwrap();
                        let d = g.upload(&data).unwrap();
                        let genc = g.compress(&d, &scheme, &opts).unwrap();
                        assert!(g.download(&genc).unwrap() == enc, "{what}");
                        assert!(
                            gpu_decode_poisoned::<$t>(&g, &enc).unwrap() == data,
                            "{what}"
                        );
                        let (many, ranges) = cpu.compress_many(&data, &b, &scheme, &opts).unwrap();
                        let gm = g.upload(&many).unwrap();
                        let mut out = g.alloc::<$t>(n).unwrap();
                        g.fill(&mut out, <$t>::from_bits(joinkit_cuda::testing::POISON_U64))
                            .unwrap();
                        assert_eq!(
                            g.decompress_many_into(&gm, &ranges, &mut out).unwrap(),
                            b,
                            "{what}"
                        );
                        assert!(g.download(&out).unwrap() == data, "{what}");
                    }};
                }
                check!(u32);
                check!(u64);
                check!(i32);
                check!(i64);
            }
        }
    }
}

/// Streams of different schemes decoded by one many-stream call: the warp decoder takes the
/// cascades' chunks and leaves the others (one layer or none, raw) to the block decoder, within
/// one call; every buffer must come back whole.
#[cfg(feature = "cuda")]
#[test]
fn mixed_schemes_many_gpu() {
    let Some(g) = gpu("mixed_schemes_many_gpu") else {
        return;
    };
    let cpu = CpuBackend::new();
    let n = 20_011;
    let schemes = [
        "rle+delta+rle+bp",
        "bp",
        "rle+bp",
        "rle+delta+bp",
        "delta+bp",
    ];
    let b = [0, 1, 4097, 4097, 9000, 15_000, n];
    for bits in decode_shapes(n) {
        for cv in [256u32, 4096] {
            let opts = CodecOptions { chunk_values: cv };
            let data: Vec<u64> = bits.clone();
            let (mut words, mut ranges) = (Vec::new(), Vec::new());
            for k in 0..b.len() - 1 {
                let scheme: Scheme = schemes[k % schemes.len()].parse().unwrap();
                let enc = cpu
                    .compress(&data[b[k]..b[k + 1]].to_vec(), &scheme, &opts)
                    .unwrap();
                ranges.push(words.len()..words.len() + enc.len());
                words.extend(enc);
            }
            let (want, bounds) = cpu.decompress_many::<u64>(&words, &ranges).unwrap();
            assert_eq!(
                (&want, bounds.as_slice()),
                (&data, &b[..]),
                "CPU, chunks of {cv}"
            );
            let gw = g.upload(&words).unwrap();
            let mut out = g.alloc::<u64>(n).unwrap();
            g.fill(&mut out, joinkit_cuda::testing::POISON_U64).unwrap();
            assert_eq!(g.decompress_many_into(&gw, &ranges, &mut out).unwrap(), b);
            assert!(g.download(&out).unwrap() == data, "chunks of {cv}");
        }
    }
}

/// The sum of FORMAT.md's checksum over `words`, word `skip` (the checksum's own) left out.
fn checksum_sum(words: &[u64], skip: Option<usize>) -> u64 {
    words
        .iter()
        .enumerate()
        .filter(|&(i, _)| Some(i) != skip)
        .fold(0u64, |s, (i, &x)| {
            s.wrapping_add(joinkit_cuda::hash::fmix64(
                x.wrapping_add((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            ))
        })
}

/// Re-seals chunk `c` (words `a..b` of `words`) with the checksum of FORMAT.md, so a change to
/// its fields reaches the decoders' later checks.
fn reseal_chunk(words: &mut [u64], a: usize, b: usize, c: u64) {
    use joinkit_cuda::hash::{fmix64, hash64};
    let sum = checksum_sum(&words[a..b], Some(1));
    words[a + 1] = fmix64(sum ^ hash64(c, (b - a) as u64));
}

/// Re-seals the header (its last word is the checksum of the others) the same way.
fn reseal_header(words: &mut [u64]) {
    use joinkit_cuda::hash::{fmix64, hash64};
    let sum = checksum_sum(&words[..HEADER_WORDS - 1], None);
    words[HEADER_WORDS - 1] = fmix64(sum ^ hash64(u64::MAX, HEADER_WORDS as u64 - 1));
}

/// Run lengths that do not add up (in a chunk whose checksum is valid): both decoders report
/// the same error (the first such chunk), lengths near 2^32 included.
#[test]
fn run_sums_checked() {
    let gpu = gpu("run_sums_checked");
    let mut faults = 0;
    for cv in [256u32, 4096, 8192] {
        let n = 3 * cv as usize + 17;
        let data: Vec<u64> = (0..n as u64).map(|i| i / 3 * 5 + i / 97).collect();
        for s in ["rle+bp", "rle+delta+rle+bp", "rle+rle+bp", "delta+rle+bp"] {
            let scheme: Scheme = s.parse().unwrap();
            let nl = scheme.layers().len();
            let enc = CpuBackend::new()
                .compress(&data, &scheme, &CodecOptions { chunk_values: cv })
                .unwrap();
            let chunks = (n as u64).div_ceil(u64::from(cv));
            for c in [0u64, 1, chunks - 1] {
                let (a, b) = (
                    enc[HEADER_WORDS + c as usize] as usize,
                    enc[HEADER_WORDS + c as usize + 1] as usize,
                );
                if (enc[a] >> 32) & 0xff != 1 || b - a <= 3 + nl {
                    continue; // raw chunk, or no packed run lengths to change
                }
                for tweak in [1u64, 1 << 31, 1 << 63, u64::MAX] {
                    let mut w = enc.clone();
                    w[a + 3 + nl] ^= tweak;
                    reseal_chunk(&mut w, a, b, c);
                    let (cpu, dev) = decode_both::<u64>(&gpu, &w);
                    let what = format!("{s}, chunks of {cv}, chunk {c}, tweak {tweak:#x}");
                    // (a flip in the padding bits of a chunk's last word decodes fine)
                    faults += usize::from(matches!(cpu, Err(Error::Corrupt(_))));
                    if let Some(dev) = dev {
                        assert_eq!(format!("{dev:?}"), format!("{cpu:?}"), "{what}");
                    }
                }
            }
        }
    }
    assert!(faults > 100, "{faults}");
}

/// A header (with a valid checksum) claiming far more values than its stream can hold is
/// named for what it is, on both backends, not as a length mismatch of equal lengths ("header
/// says 19 words, the stream holds 19"), and nothing is allocated for the claimed values.
#[test]
fn huge_value_count_in_a_sealed_header() {
    let gpu = gpu("huge_value_count_in_a_sealed_header");
    let data = vec![7u32; 300];
    let scheme: Scheme = "rle+bp".parse().unwrap();
    let enc = CpuBackend::new()
        .compress(&data, &scheme, &CodecOptions { chunk_values: 256 })
        .unwrap();
    for values in [1u64 << 60, u64::MAX] {
        let mut w = enc.clone();
        w[2] = values;
        w[4] = values.div_ceil(256);
        reseal_header(&mut w);
        let (cpu, dev) = decode_both::<u32>(&gpu, &w);
        match &cpu {
            Err(Error::Corrupt(m)) => assert!(m.contains(&format!("{values} values")), "{m}"),
            other => panic!("expected a corrupt header, got {other:?}"),
        }
        assert!(matches!(inspect(&w), Err(Error::Corrupt(_))));
        if let Some(dev) = dev {
            assert_eq!(format!("{dev:?}"), format!("{cpu:?}"));
        }
    }
}
