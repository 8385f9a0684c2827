// Shared device hash functions. The CPU twins live in joinkit_cuda::hash (src/hash.rs); both
// must stay bit-identical, since partitions and hash tables built on one backend are compared
// with the other.
#pragma once
#include <stdint.h>

namespace joinkit {

// MurmurHash3 finalizers (Appleby): full avalanche, cheap, the usual choice for integer keys.
__host__ __device__ __forceinline__ uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

__host__ __device__ __forceinline__ uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

// Seeded hashes of one key: the seed is mixed in before the finalizer so different seeds give
// independent-looking functions (partition passes, double hashing).
__host__ __device__ __forceinline__ uint32_t hash32(uint32_t key, uint32_t seed) {
  return fmix32(key ^ fmix32(seed ^ 0x9e3779b9u));
}

__host__ __device__ __forceinline__ uint64_t hash64(uint64_t key, uint64_t seed) {
  return fmix64(key ^ fmix64(seed ^ 0x9e3779b97f4a7c15ull));
}

// Inverses of the finalizers and of the seeded hashes: every step is invertible (xor-shifts,
// odd multipliers), so a seeded hash is a bijection of the key, and whatever is partitioned by
// hashed keys can have its keys back.
__host__ __device__ __forceinline__ uint32_t unfmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x7ed1b41du;  // 0xc2b2ae35^-1 mod 2^32
  h ^= (h >> 13) ^ (h >> 26);
  h *= 0xa5cb9243u;  // 0x85ebca6b^-1 mod 2^32
  h ^= h >> 16;
  return h;
}

__host__ __device__ __forceinline__ uint64_t unfmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0x9cb4b2f8129337dbull;  // 0xc4ceb9fe1a85ec53^-1 mod 2^64
  k ^= k >> 33;
  k *= 0x4f74430c22a54005ull;  // 0xff51afd7ed558ccd^-1 mod 2^64
  k ^= k >> 33;
  return k;
}

__host__ __device__ __forceinline__ uint32_t unhash32(uint32_t h, uint32_t seed) {
  return unfmix32(h) ^ fmix32(seed ^ 0x9e3779b9u);
}

__host__ __device__ __forceinline__ uint64_t unhash64(uint64_t h, uint64_t seed) {
  return unfmix64(h) ^ fmix64(seed ^ 0x9e3779b97f4a7c15ull);
}

// One overload set so templates can hash either key width.
__host__ __device__ __forceinline__ uint32_t hash_key(uint32_t key, uint32_t seed) {
  return hash32(key, seed);
}
__host__ __device__ __forceinline__ uint32_t hash_key(uint64_t key, uint32_t seed) {
  return static_cast<uint32_t>(hash64(key, seed));
}

}  // namespace joinkit
