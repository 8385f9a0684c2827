// Runtime kernels every backend user needs: fills (test poisoning), iota (row ids) and
// reproducible pseudo-random data (a hash of the index, so the CPU twin in src/cpu.rs
// produces the same values without sharing state).
#include <stdint.h>
#include "joinkit/device.cuh"
#include "joinkit/hash.cuh"

namespace {

template <typename T>
__device__ void fill(T* out, uint64_t n, T value) {
  for (uint64_t i = joinkit::global_thread_id(); i < n; i += joinkit::grid_stride()) out[i] = value;
}

template <typename T>
__device__ void iota(T* out, uint64_t n, T start) {
  for (uint64_t i = joinkit::global_thread_id(); i < n; i += joinkit::grid_stride())
    out[i] = start + static_cast<T>(i);
}

__device__ __forceinline__ uint32_t random_at(uint64_t i, uint64_t seed, uint32_t) {
  return static_cast<uint32_t>(joinkit::hash64(i, seed));
}
__device__ __forceinline__ uint64_t random_at(uint64_t i, uint64_t seed, uint64_t) {
  return joinkit::hash64(i, seed);
}

// out[i] = hash64(i, seed) masked to `mask` (truncated to 32 bits for u32).
template <typename T>
__device__ void random_bits(T* out, uint64_t n, uint64_t seed, T mask) {
  for (uint64_t i = joinkit::global_thread_id(); i < n; i += joinkit::grid_stride())
    out[i] = random_at(i, seed, T{}) & mask;
}

}  // namespace

extern "C" __global__ void fill_u32(uint32_t* out, uint64_t n, uint32_t v) { fill(out, n, v); }
extern "C" __global__ void fill_u64(uint64_t* out, uint64_t n, uint64_t v) { fill(out, n, v); }
extern "C" __global__ void iota_u32(uint32_t* out, uint64_t n, uint32_t s) { iota(out, n, s); }
extern "C" __global__ void iota_u64(uint64_t* out, uint64_t n, uint64_t s) { iota(out, n, s); }
extern "C" __global__ void random_bits_u32(uint32_t* out, uint64_t n, uint64_t seed, uint32_t m) {
  random_bits(out, n, seed, m);
}
extern "C" __global__ void random_bits_u64(uint64_t* out, uint64_t n, uint64_t seed, uint64_t m) {
  random_bits(out, n, seed, m);
}

// Two ids a step where both buffers are aligned (an 8-byte load, a 16-byte store): the joins
// widen packed ids this way where their match does not (JoinOptions::unpack_ids), and a
// distributed join after gathering its output on rank 0.
extern "C" __global__ void unpack_ids(uint64_t* out, uint64_t n, const uint32_t* packed,
                                      uint32_t low_bits) {
  const bool aligned = ((reinterpret_cast<uintptr_t>(out) & 15) |
                        (reinterpret_cast<uintptr_t>(packed) & 7)) == 0;
  const uint64_t pairs = aligned ? n / 2 : 0;
  const uint2* in2 = reinterpret_cast<const uint2*>(packed);
  ulonglong2* out2 = reinterpret_cast<ulonglong2*>(out);
  for (uint64_t q = joinkit::global_thread_id(); q < pairs; q += joinkit::grid_stride()) {
    const uint2 v = in2[q];
    out2[q] =
        make_ulonglong2(joinkit::unpack_id(v.x, low_bits), joinkit::unpack_id(v.y, low_bits));
  }
  for (uint64_t i = 2 * pairs + joinkit::global_thread_id(); i < n; i += joinkit::grid_stride())
    out[i] = joinkit::unpack_id(packed[i], low_bits);
}

// One element stored into a page-locked host word by the GPU itself, then posted with the
// host's ticket in the next word (CudaBackend::read_element, posted_words). A store over the
// link, not a copy-engine transfer, so a read-back never waits behind bulk copies that other
// streams have queued in the same direction.
extern "C" __global__ void read_element_u32(const uint32_t* src, uint64_t i, uint64_t* host,
                                            uint64_t ticket) {
  *reinterpret_cast<volatile uint64_t*>(host) = src[i];
  joinkit::post_ticket(host + 1, ticket);
}
extern "C" __global__ void read_element_u64(const uint64_t* src, uint64_t i, uint64_t* host,
                                            uint64_t ticket) {
  *reinterpret_cast<volatile uint64_t*>(host) = src[i];
  joinkit::post_ticket(host + 1, ticket);
}
