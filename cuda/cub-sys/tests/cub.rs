//! Every cub-sys function against a CPU twin, on sizes 0, 1, odd and 2^24. Inputs are generated
//! on the device by a joinkit fatbin kernel (`fill_random`) and consumed by CUB on the same
//! stream with no synchronization in between, so each test also shows the two mix on a stream.

#![cfg(feature = "cuda")]
// SAFETY (for every `unsafe` call of this file): each device buffer passed to a cub-sys function
// was allocated for the element count and type the call names, and lives past the call's
// completion (downloads synchronize before buffers drop).
#![allow(clippy::undocumented_unsafe_blocks)]

use std::ffi::c_void;

use joinkit_cuda::{Backend, CudaBackend, DeviceBuffer, Element, Key, Scratch, hash, testing};

const SIZES: [usize; 4] = [0, 1, 1001, 1 << 24];

struct Gpu {
    b: CudaBackend,
    scratch: Scratch,
}

impl Gpu {
    fn get(test: &str) -> Option<Gpu> {
        testing::cuda_or_skip(test).map(|b| Gpu {
            b,
            scratch: Scratch::new(),
        })
    }

    fn stream(&self) -> cub_sys::cudaStream_t {
        self.b.stream().cu_stream() as cub_sys::cudaStream_t
    }

    /// CUB's two-phase protocol: size query, then the call with scratch of that size.
    fn run(&mut self, mut call: impl FnMut(*mut c_void, *mut usize) -> cub_sys::cubsys_status) {
        self.b.bind_to_thread().unwrap();
        let mut bytes = 0usize;
        assert_eq!(
            call(std::ptr::null_mut(), &mut bytes),
            cub_sys::CUDA_SUCCESS
        );
        let temp = self.scratch.reserve(&self.b, bytes).unwrap();
        assert_eq!(call(temp as *mut c_void, &mut bytes), cub_sys::CUDA_SUCCESS);
    }

    /// A device column of `hash64(i, seed) & mask` and its host twin.
    fn random<T: Element>(&self, n: usize, seed: u64, mask: u64) -> (DeviceBuffer<T>, Vec<T>) {
        let mut d = self.b.alloc::<T>(n).unwrap();
        self.b.fill_random(&mut d, seed, mask).unwrap();
        let h = (0..n as u64)
            .map(|i| T::from_bits(hash::hash64(i, seed) & mask))
            .collect();
        (d, h)
    }

    /// An output buffer poisoned first, so unwritten elements show.
    fn output<T: Element>(&self, n: usize) -> DeviceBuffer<T> {
        let mut d = self.b.alloc::<T>(n).unwrap();
        self.b
            .fill(&mut d, T::from_bits(testing::POISON_U64))
            .unwrap();
        d
    }
}

fn ptr<T: Element>(b: &DeviceBuffer<T>) -> u64 {
    b.device_ptr()
}

fn stable_sort_by_digit<K: Key, V: Copy>(
    keys: &[K],
    vals: &[V],
    b0: u32,
    b1: u32,
) -> (Vec<K>, Vec<V>) {
    let mut pairs: Vec<(K, V)> = keys.iter().copied().zip(vals.iter().copied()).collect();
    pairs.sort_by_key(|p| p.0.digit(b0, b1));
    pairs.into_iter().unzip()
}

macro_rules! sort_pairs_test {
    ($name:ident, $k:ty, $v:ty, $f:path) => {
        #[test]
        fn $name() {
            let Some(mut g) = Gpu::get(stringify!($name)) else {
                return;
            };
            let w = <$k>::BITS;
            for n in SIZES {
                for (b0, b1) in [(0, w), (0, 8), (5, 17), (w - 8, w)] {
                    if n == 1 << 24 && (b0, b1) != (0, w) && (b0, b1) != (5, 17) {
                        continue;
                    }
                    // Few distinct digits (mask) so stability is exercised.
                    let (keys, hk) = g.random::<$k>(n, 11, u64::MAX);
                    let mut vals = g.b.alloc::<$v>(n).unwrap();
                    g.b.iota(&mut vals, 0).unwrap();
                    let hv: Vec<$v> = (0..n as u64).map(|i| i as $v).collect();
                    let (ko, vo) = (g.output::<$k>(n), g.output::<$v>(n));
                    let s = g.stream();
                    g.run(|t, b| unsafe {
                        $f(
                            t,
                            b,
                            ptr(&keys) as _,
                            ptr(&ko) as _,
                            ptr(&vals) as _,
                            ptr(&vo) as _,
                            n as u64,
                            b0 as i32,
                            b1 as i32,
                            s,
                        )
                    });
                    let (wk, wv) = stable_sort_by_digit(&hk, &hv, b0, b1);
                    assert!(
                        g.b.download(&ko).unwrap() == wk,
                        "keys n={n} bits={b0}..{b1}"
                    );
                    assert!(
                        g.b.download(&vo).unwrap() == wv,
                        "values n={n} bits={b0}..{b1}"
                    );
                }
            }
        }
    };
}

sort_pairs_test!(
    sort_pairs_u32_u32,
    u32,
    u32,
    cub_sys::cubsys_sort_pairs_uint32_uint32
);
sort_pairs_test!(
    sort_pairs_u32_u64,
    u32,
    u64,
    cub_sys::cubsys_sort_pairs_uint32_uint64
);
sort_pairs_test!(
    sort_pairs_u64_u32,
    u64,
    u32,
    cub_sys::cubsys_sort_pairs_uint64_uint32
);
sort_pairs_test!(
    sort_pairs_u64_u64,
    u64,
    u64,
    cub_sys::cubsys_sort_pairs_uint64_uint64
);

macro_rules! sort_keys_test {
    ($name:ident, $k:ty, $f:path) => {
        #[test]
        fn $name() {
            let Some(mut g) = Gpu::get(stringify!($name)) else {
                return;
            };
            let w = <$k>::BITS;
            for n in SIZES {
                for (b0, b1) in [(0, w), (3, 11)] {
                    let (keys, hk) = g.random::<$k>(n, 5, u64::MAX);
                    let ko = g.output::<$k>(n);
                    let s = g.stream();
                    g.run(|t, b| unsafe {
                        $f(
                            t,
                            b,
                            ptr(&keys) as _,
                            ptr(&ko) as _,
                            n as u64,
                            b0 as i32,
                            b1 as i32,
                            s,
                        )
                    });
                    let (want, _) = stable_sort_by_digit(&hk, &vec![(); n], b0, b1);
                    assert!(g.b.download(&ko).unwrap() == want, "n={n} bits={b0}..{b1}");
                }
            }
        }
    };
}

sort_keys_test!(sort_keys_u32, u32, cub_sys::cubsys_sort_keys_uint32);
sort_keys_test!(sort_keys_u64, u64, cub_sys::cubsys_sort_keys_uint64);

macro_rules! scan_test {
    ($name:ident, $t:ty, $f:path) => {
        #[test]
        fn $name() {
            let Some(mut g) = Gpu::get(stringify!($name)) else {
                return;
            };
            for n in SIZES {
                // Large values so 32-bit sums wrap, as they do on the device.
                let (input, h) = g.random::<$t>(n, 3, u64::MAX >> 2);
                let out = g.output::<$t>(n);
                let s = g.stream();
                g.run(|t, b| unsafe { $f(t, b, ptr(&input) as _, ptr(&out) as _, n as u64, s) });
                let mut acc: $t = 0;
                let want: Vec<$t> = h
                    .iter()
                    .map(|&x| {
                        let r = acc;
                        acc = acc.wrapping_add(x);
                        r
                    })
                    .collect();
                assert!(g.b.download(&out).unwrap() == want, "n={n}");
            }
        }
    };
}

scan_test!(exclusive_sum_u32, u32, cub_sys::cubsys_exclusive_sum_uint32);
scan_test!(exclusive_sum_u64, u64, cub_sys::cubsys_exclusive_sum_uint64);

macro_rules! histogram_test {
    ($name:ident, $t:ty, $f:path) => {
        #[test]
        fn $name() {
            let Some(mut g) = Gpu::get(stringify!($name)) else {
                return;
            };
            let (bins, lo, hi) = (100usize, 1000 as $t, 51000 as $t);
            for n in SIZES {
                // Samples in [0, 65536): some fall below and above the range.
                let (samples, h) = g.random::<$t>(n, 8, 0xFFFF);
                let out = g.output::<u32>(bins);
                let s = g.stream();
                g.run(|t, b| unsafe {
                    $f(
                        t,
                        b,
                        ptr(&samples) as _,
                        ptr(&out) as _,
                        bins as i32 + 1,
                        lo,
                        hi,
                        n as u64,
                        s,
                    )
                });
                let mut want = vec![0u32; bins];
                for &x in &h {
                    if x >= lo && x < hi {
                        want[((x - lo) as usize * bins) / (hi - lo) as usize] += 1;
                    }
                }
                assert!(g.b.download(&out).unwrap() == want, "n={n}");
            }
        }
    };
}

histogram_test!(
    histogram_even_u32,
    u32,
    cub_sys::cubsys_histogram_even_uint32
);
histogram_test!(
    histogram_even_u64,
    u64,
    cub_sys::cubsys_histogram_even_uint64
);

/// A host copy of a `u8` flag column lives in a u32 device buffer (u8 is no joinkit element):
/// the flags are written as bytes through an upload of packed words.
fn upload_flags(g: &Gpu, flags: &[u8]) -> DeviceBuffer<u32> {
    let mut words = vec![0u32; flags.len().div_ceil(4).max(1)];
    pack_flags(flags, &mut words);
    g.b.upload(&words).unwrap()
}

fn pack_flags(src: &[u8], dst: &mut [u32]) {
    for (i, &f) in src.iter().enumerate() {
        dst[i / 4] |= u32::from(f) << (8 * (i % 4));
    }
}

macro_rules! select_test {
    ($name:ident, $t:ty, $f:path) => {
        #[test]
        fn $name() {
            let Some(mut g) = Gpu::get(stringify!($name)) else {
                return;
            };
            for n in SIZES {
                let (input, h) = g.random::<$t>(n, 21, u64::MAX);
                let flags: Vec<u8> = (0..n as u64)
                    .map(|i| (hash::hash64(i, 4) % 3 == 0) as u8)
                    .collect();
                let dflags = upload_flags(&g, &flags);
                let out = g.output::<$t>(n);
                let count = g.output::<u64>(1);
                let s = g.stream();
                g.run(|t, b| unsafe {
                    $f(
                        t,
                        b,
                        ptr(&input) as _,
                        ptr(&dflags) as _,
                        ptr(&out) as _,
                        ptr(&count) as _,
                        n as u64,
                        s,
                    )
                });
                let want: Vec<$t> = h
                    .iter()
                    .zip(&flags)
                    .filter(|p| *p.1 != 0)
                    .map(|p| *p.0)
                    .collect();
                let got_n = g.b.download(&count).unwrap()[0] as usize;
                assert_eq!(got_n, want.len(), "n={n}");
                assert!(g.b.download(&out).unwrap()[..got_n] == want[..], "n={n}");
            }
        }
    };
}

select_test!(
    select_flagged_u32,
    u32,
    cub_sys::cubsys_select_flagged_uint32
);
select_test!(
    select_flagged_u64,
    u64,
    cub_sys::cubsys_select_flagged_uint64
);

macro_rules! rle_test {
    ($name:ident, $t:ty, $f:path) => {
        #[test]
        fn $name() {
            let Some(mut g) = Gpu::get(stringify!($name)) else {
                return;
            };
            for n in SIZES {
                // Runs: values in [0, 4) repeat often; sorting the low bits would not matter.
                let (input, h) = g.random::<$t>(n, 2, 3);
                let (uniq, counts) = (g.output::<$t>(n), g.output::<u32>(n));
                let runs = g.output::<u64>(1);
                let s = g.stream();
                g.run(|t, b| unsafe {
                    $f(
                        t,
                        b,
                        ptr(&input) as _,
                        ptr(&uniq) as _,
                        ptr(&counts) as _,
                        ptr(&runs) as _,
                        n as u64,
                        s,
                    )
                });
                let mut want: Vec<($t, u32)> = Vec::new();
                for &x in &h {
                    match want.last_mut() {
                        Some((v, c)) if *v == x => *c += 1,
                        _ => want.push((x, 1)),
                    }
                }
                let r = g.b.download(&runs).unwrap()[0] as usize;
                assert_eq!(r, want.len(), "n={n}");
                let (wu, wc): (Vec<$t>, Vec<u32>) = want.into_iter().unzip();
                assert!(g.b.download(&uniq).unwrap()[..r] == wu[..], "n={n}");
                assert!(g.b.download(&counts).unwrap()[..r] == wc[..], "n={n}");
            }
            // Counts past CUB's 32-bit item count are refused, not truncated.
            let s = g.stream();
            let mut bytes = 0usize;
            let status = unsafe {
                $f(
                    std::ptr::null_mut(),
                    &mut bytes,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    1u64 << 31,
                    s,
                )
            };
            assert_eq!(status, cub_sys::CUDA_ERROR_INVALID_VALUE);
        }
    };
}

rle_test!(
    run_length_encode_u32,
    u32,
    cub_sys::cubsys_run_length_encode_uint32
);
rle_test!(
    run_length_encode_u64,
    u64,
    cub_sys::cubsys_run_length_encode_uint64
);
