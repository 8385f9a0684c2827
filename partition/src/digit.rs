//! Which partition a key goes to, and the limits every backend checks the same way.

use std::ops::Range;

use joinkit_cuda::{Error, Key, Result, hash};

/// Most key bits one radix partition call splits on: 2^24 partitions (a 128 MiB offsets array).
/// A full-width order is a sort (`joinkit_primitives::Sort`), not a partition.
pub const MAX_RADIX_BITS: u32 = 24;

/// Bits one radix pass handles: wider ranges take `ceil(width / 8)` passes.
pub const RADIX_PASS_BITS: u32 = 8;

/// Largest fan-out of a hash partition or a bucket-chain partition (the kernels keep one
/// counter per partition in shared memory). Any fan-out from 1 up to this, power of two or not.
pub const MAX_FANOUT: usize = 1024;

/// How a bucket-chain partition (or anything else that takes one) maps keys to partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioner {
    /// Key bits `bits` (at most 10 bits, so at most [`MAX_FANOUT`] partitions).
    Radix(Range<u32>),
    /// [`hash_partition_of`] with this fan-out and seed.
    Hash {
        /// Number of partitions, 1 to [`MAX_FANOUT`].
        fanout: usize,
        /// Hash seed.
        seed: u32,
    },
}

impl Partitioner {
    /// Number of partitions, after checking the partitioner against key type `K`.
    ///
    /// # Errors
    /// [`Error::BitRange`] for bits outside the key; [`Error::InvalidArgument`] for more than
    /// [`MAX_FANOUT`] partitions; [`Error::EmptyInput`] for a hash fan-out of 0.
    pub fn fanout<K: Key>(&self) -> Result<usize> {
        match self {
            Partitioner::Radix(bits) => {
                let f = radix_fanout::<K>(bits)?;
                if f > MAX_FANOUT {
                    return Err(Error::InvalidArgument(format!(
                        "radix partitioner on {} bits: at most {MAX_FANOUT} partitions",
                        bits.end - bits.start
                    )));
                }
                Ok(f)
            }
            Partitioner::Hash { fanout, .. } => hash_fanout(*fanout),
        }
    }

    /// The partition of `key`, in `0..fanout`.
    ///
    /// # Errors
    /// As [`Partitioner::fanout`], which it calls every time: loops over many keys check once
    /// and go on unchecked inside the crate.
    pub fn partition_of<K: Key>(&self, key: K) -> Result<usize> {
        self.fanout::<K>()?;
        Ok(self.partition_of_unchecked(key))
    }

    /// [`Partitioner::partition_of`] for a partitioner that [`Partitioner::fanout`] accepted
    /// for `K` (a bad bit range overflows or shifts past the key otherwise).
    pub(crate) fn partition_of_unchecked<K: Key>(&self, key: K) -> usize {
        match self {
            Partitioner::Radix(bits) => key.digit(bits.start, bits.end) as usize,
            Partitioner::Hash { fanout, seed } => hash_partition_of(key, *seed, *fanout as u32),
        }
    }
}

/// The hash partition of a key: `(hash_key(key, seed) * fanout) >> 32` (murmur3's finalizer,
/// `joinkit::hash_key` in `hash.cuh`, mapped onto `[0, fanout)` by a multiply-shift, which is
/// uniform for any fan-out, power of two or not; for `fanout = 2^b` it is the hash's top `b`
/// bits). The CUDA kernels compute the same function.
pub fn hash_partition_of<K: Key>(key: K, seed: u32, fanout: u32) -> usize {
    let h = if K::BITS == 32 {
        hash::hash32(key.to_u64() as u32, seed)
    } else {
        hash::hash64(key.to_u64(), u64::from(seed)) as u32
    };
    ((u64::from(h) * u64::from(fanout)) >> 32) as usize
}

/// Fan-out of a radix partition on `bits`, after checking them.
pub(crate) fn radix_fanout<K: Key>(bits: &Range<u32>) -> Result<usize> {
    Error::check_bits(bits, K::BITS)?;
    let width = bits.end - bits.start;
    if width > MAX_RADIX_BITS {
        return Err(Error::InvalidArgument(format!(
            "radix partition on {width} bits: at most {MAX_RADIX_BITS} bits (2^{MAX_RADIX_BITS} \
             partitions) per call; sort for a full order"
        )));
    }
    Ok(1usize << width)
}

/// Checks a hash fan-out.
pub(crate) fn hash_fanout(fanout: usize) -> Result<usize> {
    if fanout == 0 {
        return Err(Error::EmptyInput("partition fan-out of 0"));
    }
    if fanout > MAX_FANOUT {
        return Err(Error::InvalidArgument(format!(
            "fan-out {fanout} above the maximum of {MAX_FANOUT}"
        )));
    }
    Ok(fanout)
}

/// Widths of the LSD passes of a radix partition on `width` bits: `ceil(width / 8)` passes of
/// near-equal width (the low bits first).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn pass_widths(width: u32) -> Vec<u32> {
    let passes = width.div_ceil(RADIX_PASS_BITS).max(1);
    (0..passes)
        .map(|p| width / passes + u32::from(p < width % passes))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_cover_the_width() {
        for w in 1..=MAX_RADIX_BITS {
            let p = pass_widths(w);
            assert_eq!(p.iter().sum::<u32>(), w);
            assert!(p.iter().all(|&x| (1..=RADIX_PASS_BITS).contains(&x)));
            assert_eq!(p.len() as u32, w.div_ceil(8));
        }
    }

    #[test]
    fn partition_of_refuses_what_fanout_refuses() {
        let bad = |r: Result<usize>| matches!(r, Err(Error::BitRange { .. }));
        let reversed = Range { start: 5, end: 3 };
        assert!(bad(Partitioner::Radix(reversed).partition_of(1u32)));
        assert!(bad(Partitioner::Radix(70..72).partition_of(1u64)));
        assert!(bad(Partitioner::Radix(30..33).partition_of(1u32)));
        assert!(matches!(
            Partitioner::Radix(0..11).partition_of(1u32),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            Partitioner::Hash { fanout: 0, seed: 1 }.partition_of(1u64),
            Err(Error::EmptyInput(_))
        ));
        assert_eq!(Partitioner::Radix(4..8).partition_of(0x35u32), Ok(3));
        assert_eq!(Partitioner::Radix(54..64).partition_of(u64::MAX), Ok(1023));
    }

    #[test]
    fn hash_partition_stays_in_range() {
        for f in [1u32, 2, 3, 255, 256, 1000, 1024] {
            for k in 0..2000u64 {
                assert!(hash_partition_of(k, 7, f) < f as usize);
                assert!(hash_partition_of(k as u32, 7, f) < f as usize);
            }
        }
    }
}
