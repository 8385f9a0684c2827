// Shared device helpers: grid-stride loops, warp and block reductions/scans, 64-bit atomics.
#pragma once
#include <stdint.h>

namespace joinkit {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpSize = 32;

// Index of this thread in the whole grid and the grid's stride, both 64-bit: inputs may hold more
// than 2^31 elements.
__device__ __forceinline__ uint64_t global_thread_id() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ uint64_t grid_stride() {
  return static_cast<uint64_t>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ unsigned lane_id() { return threadIdx.x & (kWarpSize - 1); }
__device__ __forceinline__ unsigned warp_id() { return threadIdx.x / kWarpSize; }

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int d = kWarpSize / 2; d > 0; d /= 2) v += __shfl_down_sync(kFullMask, v, d);
  return v;  // valid in lane 0
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int d = kWarpSize / 2; d > 0; d /= 2) {
    const T o = __shfl_down_sync(kFullMask, v, d);
    v = o > v ? o : v;
  }
  return v;  // valid in lane 0
}

// Inclusive scan across the warp (Hillis-Steele over shuffles).
template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T v) {
#pragma unroll
  for (int d = 1; d < kWarpSize; d *= 2) {
    T up = __shfl_up_sync(kFullMask, v, d);
    if (lane_id() >= static_cast<unsigned>(d)) v += up;
  }
  return v;
}

// Exclusive scan across the block; `smem` needs one T per warp. Returns this thread's exclusive
// prefix and writes the block total to `*total` for every thread. All threads must call it.
template <typename T>
__device__ __forceinline__ T block_exclusive_scan(T v, T* smem, T* total) {
  T incl = warp_inclusive_scan(v);
  if (lane_id() == kWarpSize - 1) smem[warp_id()] = incl;
  __syncthreads();
  const unsigned warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
  if (warp_id() == 0) {
    T w = lane_id() < warps ? smem[lane_id()] : T(0);
    T wi = warp_inclusive_scan(w);
    if (lane_id() < warps) smem[lane_id()] = wi - w;  // exclusive per-warp offsets
    if (lane_id() == warps - 1) smem[kWarpSize] = wi;  // needs kWarpSize + 1 slots
  }
  __syncthreads();
  T result = smem[warp_id()] + incl - v;
  *total = smem[kWarpSize];
  __syncthreads();
  return result;
}

// 64-bit atomics with the unsigned long long types the hardware offers.
__device__ __forceinline__ uint64_t atomic_add_u64(uint64_t* p, uint64_t v) {
  return atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}
__device__ __forceinline__ uint64_t atomic_cas_u64(uint64_t* p, uint64_t expect, uint64_t v) {
  return atomicCAS(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(expect),
                   static_cast<unsigned long long>(v));
}
__device__ __forceinline__ uint64_t atomic_exch_u64(uint64_t* p, uint64_t v) {
  return atomicExch(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// Posts words already stored into mapped host memory (CudaBackend::posted_words): a fence that
// makes them visible to the host first, then the host's ticket in this poster's ticket word.
// One thread a poster calls it, after its own stores of the words.
__device__ __forceinline__ void post_ticket(uint64_t* ticket_word, uint64_t ticket) {
  __threadfence_system();
  *reinterpret_cast<volatile uint64_t*>(ticket_word) = ticket;
}

// A packed 32-bit id `high << low_bits | low` widened to `high << 32 | low` (Backend::unpack_ids,
// JoinOptions::unpack_ids); `low_bits` is at most 32, and 32 leaves no high part.
__device__ __forceinline__ uint64_t unpack_id(uint32_t v, uint32_t low_bits) {
  const uint64_t high = low_bits >= 32 ? 0 : (v >> low_bits);
  const uint32_t mask = low_bits >= 32 ? 0xffffffffu : (1u << low_bits) - 1u;
  return (high << 32) | (v & mask);
}

}  // namespace joinkit
