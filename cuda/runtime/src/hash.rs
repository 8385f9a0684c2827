//! CPU twins of `include/joinkit/hash.cuh`: bit-identical, so a partition or hash table made on
//! one backend matches the other.

/// MurmurHash3's 32-bit finalizer.
#[inline]
pub fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// MurmurHash3's 64-bit finalizer.
#[inline]
pub fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// Seeded 32-bit hash of a 32-bit key (`joinkit::hash32`).
#[inline]
pub fn hash32(key: u32, seed: u32) -> u32 {
    fmix32(key ^ fmix32(seed ^ 0x9e37_79b9))
}

/// Seeded 64-bit hash of a 64-bit key (`joinkit::hash64`).
#[inline]
pub fn hash64(key: u64, seed: u64) -> u64 {
    fmix64(key ^ fmix64(seed ^ 0x9e37_79b9_7f4a_7c15))
}

/// Inverse of [`fmix32`] (`joinkit::unfmix32`): every step is invertible.
#[inline]
pub fn unfmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x7ed1_b41d); // 0xc2b2ae35^-1 mod 2^32
    h ^= (h >> 13) ^ (h >> 26);
    h = h.wrapping_mul(0xa5cb_9243); // 0x85ebca6b^-1 mod 2^32
    h ^ (h >> 16)
}

/// Inverse of [`fmix64`] (`joinkit::unfmix64`).
#[inline]
pub fn unfmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0x9cb4_b2f8_1293_37db); // 0xc4ceb9fe1a85ec53^-1 mod 2^64
    k ^= k >> 33;
    k = k.wrapping_mul(0x4f74_430c_22a5_4005); // 0xff51afd7ed558ccd^-1 mod 2^64
    k ^ (k >> 33)
}

/// The key whose [`hash32`] with `seed` is `h` (`joinkit::unhash32`): the seeded hash is a
/// bijection of the key.
#[inline]
pub fn unhash32(h: u32, seed: u32) -> u32 {
    unfmix32(h) ^ fmix32(seed ^ 0x9e37_79b9)
}

/// The key whose [`hash64`] with `seed` is `h` (`joinkit::unhash64`).
#[inline]
pub fn unhash64(h: u64, seed: u64) -> u64 {
    unfmix64(h) ^ fmix64(seed ^ 0x9e37_79b9_7f4a_7c15)
}

/// The 32-bit hash of a key of either width (`joinkit::hash_key`).
pub trait HashKey {
    /// Hash with a seed.
    fn hash_key(self, seed: u32) -> u32;
}

impl HashKey for u32 {
    #[inline]
    fn hash_key(self, seed: u32) -> u32 {
        hash32(self, seed)
    }
}

impl HashKey for u64 {
    #[inline]
    fn hash_key(self, seed: u32) -> u32 {
        hash64(self, u64::from(seed)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_hashes_invert() {
        let mut x = 0x0123_4567_89ab_cdefu64;
        for seed in [0u32, 1, 0x6a09_e667, u32::MAX] {
            for k in [0u64, 1, u64::MAX, u64::from(u32::MAX), 1 << 32] {
                assert_eq!(unhash64(hash64(k, u64::from(seed)), u64::from(seed)), k);
                assert_eq!(unhash32(hash32(k as u32, seed), seed), k as u32);
            }
            for _ in 0..10_000 {
                x = fmix64(x.wrapping_add(0x9e37_79b9_7f4a_7c15));
                assert_eq!(unhash64(hash64(x, u64::from(seed)), u64::from(seed)), x);
                assert_eq!(unhash32(hash32(x as u32, seed), seed), x as u32);
            }
        }
    }

    #[test]
    fn finalizers_match_reference_values() {
        // Values of MurmurHash3's fmix from the reference C++ implementation.
        assert_eq!(fmix32(0), 0);
        assert_eq!(fmix64(0), 0);
        assert_eq!(fmix32(1), 0x514e_28b7);
        assert_eq!(fmix64(1), 0xb456_bcfc_34c2_cb2c);
    }

    #[test]
    fn seeds_give_different_functions() {
        let same = (0..1000u32)
            .filter(|&k| hash32(k, 1) == hash32(k, 2))
            .count();
        assert!(same < 5);
    }
}
