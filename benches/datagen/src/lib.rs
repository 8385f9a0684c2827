//! # joinkit-datagen
//!
//! The workloads of the GPU-join papers, generated on the host, seeded and reproducible (the
//! same seed gives the same columns whatever the thread count), in parallel:
//!
//! - [`unique_keys`]: the keys `0..n` in a pseudo-random order (a primary-key column);
//! - [`repeated_keys`]: `d` keys each on `n / d` rows in a pseudo-random order (a build side of
//!   an M:N join);
//! - [`foreign_keys`]: a probe column whose keys hit the build side with a given match ratio;
//! - [`zipf_foreign_keys`]: a probe column skewed by a Zipf law over the build keys;
//! - [`spread_keys`]: any of these key columns spread over the 32-bit range (random to every
//!   hash, where `0..n` partitions into arithmetic progressions);
//! - [`payload`]: a payload column derived from a key column (so join outputs can be checked);
//! - [`tpch`]: key columns of TPC-H's `orders` and `lineitem` from the `tpchgen` crate.
//!
//! Bad arguments (keys that do not fit the key type, a match ratio outside `[0, 1]`, a Zipf
//! exponent that is negative or not finite, a TPC-H scale factor that is not a finite number
//! above 0) and columns the host cannot allocate are errors, not panics: the sizes often come
//! straight from a command line.
//!
//! Shuffles use a keyed Feistel permutation with cycle walking instead of a sequential
//! Fisher-Yates shuffle, so element `i` is computed on its own: generation is parallel and a
//! GPU kernel could produce the same column.
//!
//! ```
//! let r: Vec<u32> = joinkit_datagen::unique_keys(1000, 7)?;
//! let s: Vec<u32> = joinkit_datagen::foreign_keys(1000, 4000, 0.5, 8)?;
//! assert_eq!(r.len(), 1000);
//! let hits = s.iter().filter(|&&k| k < 1000).count();
//! assert!((1700..2300).contains(&hits));
//! # Ok::<(), joinkit_cuda::Error>(())
//! ```

pub mod tpch;

use joinkit_cuda::hash::hash64;
use joinkit_cuda::{Backend, CpuBackend, Element, Error, Key, Result};
use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::{Distribution, Zipf};
use rayon::prelude::*;

/// Elements generated per independently seeded chunk (fixes the output for a seed whatever the
/// thread count).
const CHUNK: usize = 1 << 16;

/// A pseudo-random permutation of `0..n`: `permute(i)` for `i < n` is a bijection onto `0..n`.
#[derive(Debug, Clone, Copy)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    seed: u64,
}

impl Permutation {
    /// The permutation of `0..n` chosen by `seed`.
    pub fn new(n: u64, seed: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        // A balanced Feistel network over 2 * half_bits >= bits bits (at least 2 per half).
        Self {
            n,
            half_bits: bits.div_ceil(2).max(2),
            seed,
        }
    }

    /// The image of `i`: a value in `0..n` for `i < n`. Any other `i` maps to itself, so the
    /// map is a bijection of all of `u64` and never cycle-walks forever (`n = 0` included).
    pub fn permute(&self, i: u64) -> u64 {
        if i >= self.n {
            return i;
        }
        let mask = (1u64 << self.half_bits) - 1;
        let mut x = i;
        // Cycle walking: the network permutes [0, 2^(2 half_bits)); values past n are fed back
        // until they land inside. Each step lands inside with probability > 1/4.
        loop {
            let (mut l, mut r) = (x >> self.half_bits, x & mask);
            for round in 0..4u64 {
                let f = hash64(r ^ (round << 56), self.seed) & mask;
                (l, r) = (r, l ^ f);
            }
            x = (l << self.half_bits) | r;
            if x < self.n {
                return x;
            }
        }
    }
}

/// A zeroed column of `n` elements, allocated as [`CpuBackend::alloc`] does: memory the host
/// cannot give is an error, not an abort.
fn zeroed<T: Element>(n: usize) -> Result<Vec<T>> {
    CpuBackend::new().alloc(n)
}

/// A column of `n` elements, element `i` from `f(rng, i)`, each chunk of [`CHUNK`] elements
/// with its own generator seeded from `seed`.
fn generate<T: Element>(
    n: usize,
    seed: u64,
    f: impl Fn(&mut StdRng, usize) -> T + Sync + Send,
) -> Result<Vec<T>> {
    let mut out = zeroed(n)?;
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut rng = StdRng::seed_from_u64(hash64(c as u64, seed));
            for (j, x) in chunk.iter_mut().enumerate() {
                *x = f(&mut rng, c * CHUNK + j);
            }
        });
    Ok(out)
}

/// Maps `keys` in place through a pseudo-random permutation of `0..2^32` chosen by `seed`;
/// keys past it stay. A bijection of the whole key space, so matches and misses between columns
/// mapped with one seed stay what they were, and keys below 2^32 stay there (they still narrow
/// to 4 bytes). Why: [`unique_keys`]' `0..n` is a kind case for a join partitioning on the
/// keys' low bits, whose partitions then hold arithmetic progressions that a multiply-shift
/// table spreads without collisions; spread keys look random to every hash at any size.
pub fn spread_keys<K: Key>(keys: &mut [K], seed: u64) {
    let p = Permutation::new(1 << 32, seed);
    keys.par_iter_mut()
        .for_each(|k| *k = K::from_u64(p.permute(k.to_u64())));
}

/// The keys `0..n` in a pseudo-random order chosen by `seed` (a primary-key column):
/// [`repeated_keys`] with as many keys as rows.
///
/// # Errors
/// [`Error::InvalidArgument`] if `n - 1` does not fit `K`; [`Error::SizeOverflow`] when the
/// host cannot allocate the column.
pub fn unique_keys<K: Key>(n: usize, seed: u64) -> Result<Vec<K>> {
    repeated_keys(n, n, seed)
}

/// `n` rows over the keys `0..distinct`, each key on `n / distinct` rows (rounded down or up),
/// in a pseudo-random order chosen by `seed`: the build side of an M:N join whose every key
/// repeats the same number of times. Row `i` holds `permute(i) mod distinct`, so with
/// `distinct == n` this is [`unique_keys`].
///
/// # Errors
/// [`Error::InvalidArgument`] if `distinct - 1` does not fit `K`, or `distinct` is 0 while
/// `n` is not; [`Error::SizeOverflow`] when the host cannot allocate the column.
pub fn repeated_keys<K: Key>(distinct: usize, n: usize, seed: u64) -> Result<Vec<K>> {
    if distinct == 0 && n > 0 {
        return Err(Error::InvalidArgument(format!(
            "{n} rows need at least one distinct key"
        )));
    }
    if distinct > 0 && (distinct as u64 - 1) > K::MAX.to_u64() {
        return Err(Error::InvalidArgument(format!(
            "{distinct} distinct keys do not fit {}-bit keys",
            K::BITS
        )));
    }
    let p = Permutation::new(n as u64, seed);
    let mut keys = zeroed(n)?;
    keys.par_iter_mut()
        .enumerate()
        .for_each(|(i, k)| *k = K::from_u64(p.permute(i as u64) % distinct as u64));
    Ok(keys)
}

/// `n_probe` keys against a build side holding the keys `0..n_build`: each key hits the build
/// side with probability `match_ratio` (a uniformly chosen build key) and otherwise is a key
/// `>= n_build` that matches nothing.
///
/// # Errors
/// [`Error::InvalidArgument`] if `match_ratio` is outside `[0, 1]` or `n_build` does not fit
/// `K` with room for misses; [`Error::SizeOverflow`] when the host cannot allocate the column.
pub fn foreign_keys<K: Key>(
    n_build: usize,
    n_probe: usize,
    match_ratio: f64,
    seed: u64,
) -> Result<Vec<K>> {
    if !(0.0..=1.0).contains(&match_ratio) {
        return Err(Error::InvalidArgument(format!(
            "match ratio {match_ratio} outside [0, 1]"
        )));
    }
    let nb = n_build as u64;
    if nb >= K::MAX.to_u64() {
        return Err(Error::InvalidArgument(format!(
            "{n_build} build keys leave no {}-bit key for misses",
            K::BITS
        )));
    }
    // The largest miss key past `nb`: an inclusive range, as `K::MAX - nb + 1` overflows a
    // 64-bit key with no build keys (the same draws as the exclusive range would give).
    let last_miss = K::MAX.to_u64() - nb;
    generate(n_probe, seed, |rng, _| {
        if nb > 0 && rng.random::<f64>() < match_ratio {
            K::from_u64(rng.random_range(0..nb))
        } else {
            K::from_u64(nb + rng.random_range(0..=last_miss))
        }
    })
}

/// `n_probe` keys drawn from the build keys `0..n_build` by a Zipf law of exponent `theta`
/// (0 = uniform; 1 and above = heavily skewed). Which key is the most frequent is chosen by
/// `seed` through a permutation, so skew is not tied to small key values.
///
/// # Errors
/// [`Error::InvalidArgument`] if `theta` is negative or not finite or `n_build - 1` does not
/// fit `K`; [`Error::EmptyInput`] if `n_build` is 0; [`Error::SizeOverflow`] when the host
/// cannot allocate the column.
pub fn zipf_foreign_keys<K: Key>(
    n_build: usize,
    n_probe: usize,
    theta: f64,
    seed: u64,
) -> Result<Vec<K>> {
    if n_build == 0 {
        return Err(Error::EmptyInput("Zipf keys need a build side"));
    }
    // Keys past K would wrap onto other build keys: a skew other than the one asked for.
    if (n_build as u64 - 1) > K::MAX.to_u64() {
        return Err(Error::InvalidArgument(format!(
            "{n_build} build keys do not fit {}-bit keys",
            K::BITS
        )));
    }
    // Zipf::new refuses negative and NaN exponents; an infinite one would never sample.
    let zipf = Some(theta)
        .filter(|t| t.is_finite())
        .and_then(|t| Zipf::new(n_build as f64, t).ok())
        .ok_or_else(|| {
            Error::InvalidArgument(format!("Zipf exponent {theta}: use a finite value >= 0"))
        })?;
    let rank_to_key = Permutation::new(n_build as u64, seed ^ 0x5eed);
    generate(n_probe, seed, |rng, _| {
        let rank = (zipf.sample(rng) as u64).clamp(1, n_build as u64) - 1;
        K::from_u64(rank_to_key.permute(rank))
    })
}

/// A payload column for `keys`: element `i` is a hash of the key and `column`, so the join
/// output's payloads can be checked against its keys and different columns differ.
///
/// # Errors
/// [`Error::SizeOverflow`] when the host cannot allocate the column.
pub fn payload<K: Key, T: Element>(keys: &[K], column: u64) -> Result<Vec<T>> {
    let mut out = zeroed(keys.len())?;
    payload_into(&mut out, keys, column);
    Ok(out)
}

/// [`payload`] written into `out` (as long as `keys`; extra elements of either are left
/// alone): for generators that fill memory they are handed (a streamed join's staging).
pub fn payload_into<K: Key, T: Element>(out: &mut [T], keys: &[K], column: u64) {
    out.par_iter_mut()
        .zip(keys)
        .for_each(|(p, k)| *p = T::from_bits(hash64(k.to_u64(), column)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_a_bijection() {
        for n in [1u64, 2, 3, 5, 1000, 4097] {
            let p = Permutation::new(n, 3);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let j = p.permute(i);
                assert!(!seen[j as usize], "n={n}: {j} twice");
                seen[j as usize] = true;
            }
        }
    }

    #[test]
    fn unique_keys_are_shuffled_and_reproducible() {
        let a: Vec<u64> = unique_keys(100_000, 1).unwrap();
        assert_eq!(a, unique_keys::<u64>(100_000, 1).unwrap());
        assert_ne!(a, unique_keys::<u64>(100_000, 2).unwrap());
        let mut s = a.clone();
        s.sort_unstable();
        assert!(s.iter().enumerate().all(|(i, &k)| k == i as u64));
        assert!(
            a.iter()
                .enumerate()
                .filter(|&(i, &k)| k == i as u64)
                .count()
                < 100
        );
        assert!(unique_keys::<u32>(0, 1).unwrap().is_empty());
    }

    #[test]
    fn repeated_keys_repeat_evenly() {
        let k: Vec<u32> = repeated_keys(1000, 64_001, 5).unwrap();
        let mut counts = vec![0u32; 1000];
        k.iter().for_each(|&x| counts[x as usize] += 1);
        assert_eq!(counts.iter().filter(|&&c| c == 65).count(), 1);
        assert!(counts.iter().all(|&c| c == 64 || c == 65));
        // Shuffled: not the same key on neighbouring rows.
        assert!(k.windows(2).filter(|w| w[0] == w[1]).count() < 200);
        assert_eq!(k, repeated_keys::<u32>(1000, 64_001, 5).unwrap());
        assert_eq!(
            repeated_keys::<u64>(500, 500, 3).unwrap(),
            unique_keys::<u64>(500, 3).unwrap()
        );
        assert!(repeated_keys::<u32>(0, 0, 1).unwrap().is_empty());
        assert!(matches!(
            repeated_keys::<u32>(0, 5, 1),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn foreign_keys_hit_at_the_match_ratio() {
        for ratio in [0.0, 0.25, 1.0] {
            let s: Vec<u32> = foreign_keys(5000, 200_000, ratio, 9).unwrap();
            let hits = s.iter().filter(|&&k| k < 5000).count() as f64 / 200_000.0;
            assert!(
                (hits - ratio).abs() < 0.01,
                "ratio {ratio}: hit rate {hits}"
            );
        }
        assert_eq!(
            foreign_keys::<u64>(10, 1000, 0.5, 4).unwrap(),
            foreign_keys::<u64>(10, 1000, 0.5, 4).unwrap()
        );
    }

    #[test]
    fn zipf_skews() {
        let s: Vec<u32> = zipf_foreign_keys(10_000, 100_000, 1.5, 2).unwrap();
        assert!(s.iter().all(|&k| k < 10_000));
        let mut counts = vec![0u32; 10_000];
        s.iter().for_each(|&k| counts[k as usize] += 1);
        let top = *counts.iter().max().unwrap() as f64 / 100_000.0;
        assert!(top > 0.3, "Zipf 1.5's top key holds {top}");
        let uniform: Vec<u32> = zipf_foreign_keys(10_000, 100_000, 0.0, 2).unwrap();
        let mut counts = vec![0u32; 10_000];
        uniform.iter().for_each(|&k| counts[k as usize] += 1);
        assert!(*counts.iter().max().unwrap() < 40);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let invalid = |r: Result<Vec<u32>>| matches!(r, Err(Error::InvalidArgument(_)));
        assert!(invalid(unique_keys(1 << 33, 1)));
        assert!(invalid(foreign_keys(u32::MAX as usize, 4, 1.0, 1)));
        assert!(invalid(foreign_keys(4, 4, 1.5, 1)));
        for theta in [f64::NAN, -1.0, f64::INFINITY] {
            assert!(invalid(zipf_foreign_keys(4, 4, theta, 1)), "{theta}");
        }
        assert!(matches!(
            zipf_foreign_keys::<u32>(0, 4, 1.0, 1),
            Err(Error::EmptyInput(_))
        ));
        // Ranks past u32 would wrap onto other keys.
        assert!(invalid(zipf_foreign_keys(1 << 33, 4, 1.0, 1)));
        // More than any host holds: an error, not an abort.
        assert!(matches!(
            unique_keys::<u64>(1 << 62, 1),
            Err(Error::SizeOverflow(_))
        ));
    }

    #[test]
    fn edges_neither_overflow_nor_loop() {
        // No build keys with 64-bit keys: every key a miss (its range once overflowed).
        let s: Vec<u64> = foreign_keys(0, 1000, 0.5, 3).unwrap();
        assert_eq!(s.len(), 1000);
        // The inclusive miss range draws what the exclusive one did: seeds keep their columns.
        assert_eq!(
            foreign_keys::<u32>(0, 4, 0.5, 1).unwrap(),
            [2702011998, 2311387231, 1095730369, 1202161444]
        );
        // Outside 0..n (an empty domain included) a permutation is the identity, not a hang.
        assert_eq!(Permutation::new(0, 1).permute(0), 0);
        assert_eq!(Permutation::new(5, 1).permute(9), 9);
    }

    #[test]
    fn payloads_follow_keys() {
        let k: Vec<u32> = vec![3, 3, 9];
        let p: Vec<u64> = payload(&k, 1).unwrap();
        assert_eq!(p[0], p[1]);
        assert_ne!(p[0], p[2]);
        assert_ne!(p, payload::<u32, u64>(&k, 2).unwrap());
    }

    #[test]
    fn spread_keys_keep_matches_and_misses() {
        let n = 1000;
        let mut right: Vec<u64> = unique_keys(n, 1).unwrap();
        let dense = right.clone();
        // Matches, misses below 2^32, misses past it, the largest key.
        let mut left: Vec<u64> = vec![0, 999, 500, 1000, u32::MAX.into(), 1 << 32, u64::MAX, 7];
        let before = left.clone();
        spread_keys(&mut right, 9);
        spread_keys(&mut left, 9);
        let mut sorted = right.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), n, "unique keys stay unique");
        assert!(sorted[n - 1] <= u32::MAX.into() && sorted[n - 1] - sorted[0] > 1 << 30);
        for (k, was) in left.iter().zip(&before) {
            let at = right.iter().position(|r| r == k);
            assert_eq!(at, dense.iter().position(|d| d == was), "key {was}");
        }
        assert_eq!(&left[5..7], &[1 << 32, u64::MAX], "keys past 2^32 stay");
        let mut narrow: Vec<u32> = vec![0, 1, u32::MAX];
        spread_keys(&mut narrow, 9);
        assert!(narrow[0] != narrow[1] && narrow[1] != narrow[2] && narrow[0] != narrow[2]);
    }
}
