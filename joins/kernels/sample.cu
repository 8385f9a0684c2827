// Duplicate statistics of a key sample, for Auto's plan (twin: src/sample.rs). One block a
// group: it gathers its keys from spread positions of the column and counts them in a
// shared-memory hash table, in one launch, what the host would otherwise download and sort:
// the group's equal pairs sum c (c - 1) over its keys' counts c, and its largest count. A
// table, not a sort: one pass of shared-memory atomics where a block radix sort of the group
// took 8 (4-byte keys) or 16 (8-byte) passes (H200, ncu, 2048 samples of 4-byte keys and 4096
// of 8-byte: 18.5 and 33.4 us sorted, 9.0 and 19.4 counted), most of a plan.
// The group's keys stay in shared memory beside the table (dynamic shared memory,
// sample_shared_bytes in src/sample.rs), so comparing with a slot's key never leaves the SM.
#include <stdint.h>
#include <cub/block/block_reduce.cuh>
#include "joinkit/hash.cuh"

namespace {

// 32 warps of 4 keys: the block's time is each warp's chain of dependent steps (the sample
// positions' divisions, the probes), which 16 warps of 8 keys made twice as long.
constexpr int kSampleThreads = 1024;
constexpr int kSampleItems = 4;  // 4096 keys a group (SAMPLE_GROUP_ROWS in src/sample.rs)
constexpr uint64_t kSampleSeed = 0x5a3;
// Twice the group's keys (load at most 0.5). A slot holds the sample that first brought its
// key (the low kSampleOwnerBits) and the key's count above them; all ones: empty.
constexpr uint32_t kSampleSlots = 2 * kSampleThreads * kSampleItems;
constexpr uint32_t kSampleOwnerBits = 12;
constexpr uint32_t kSampleEmpty = ~0u;
static_assert(kSampleThreads * kSampleItems <= (1u << kSampleOwnerBits), "owners fit their bits");
static_assert((kSampleSlots & (kSampleSlots - 1)) == 0, "a power of two of slots");

struct SampleMax {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

// Sample j of `samples` spread over `n` rows: the hashed row of the j-th of as many strides
// (the hash scaled to the stride by a multiply, not a division).
__device__ __forceinline__ uint64_t sample_row(uint64_t j, uint64_t samples, uint64_t n) {
  const uint64_t lo = j * n / samples, hi = (j + 1) * n / samples;
  return lo + __umul64hi(joinkit::hash64(j, kSampleSeed), hi - lo);
}

// Group g = blockIdx.x takes samples j = g, g + groups, g + 2 groups, ... (so each group is
// spread over the whole column) and writes out[3g .. 3g + 3) = (rows, pairs, largest count).
template <typename K>
__device__ void sample_runs(const K* keys, uint64_t n, uint64_t samples, uint64_t groups,
                            uint64_t* out) {
  using Reduce = cub::BlockReduce<uint64_t, kSampleThreads>;
  __shared__ typename Reduce::TempStorage reduce;
  extern __shared__ __align__(16) unsigned char sample_shared[];
  K* sampled = reinterpret_cast<K*>(sample_shared);  // the group's keys, by sample
  uint32_t* slots = reinterpret_cast<uint32_t*>(sampled + kSampleThreads * kSampleItems);
  const uint64_t g = blockIdx.x;
  const uint32_t rows = static_cast<uint32_t>((samples - g + groups - 1) / groups);
  for (uint32_t s = threadIdx.x; s < kSampleSlots; s += kSampleThreads) slots[s] = kSampleEmpty;
  K k[kSampleItems];
  for (int i = 0; i < kSampleItems; ++i) {
    const uint32_t p = threadIdx.x + i * kSampleThreads;
    if (p < rows) k[i] = keys[sample_row(g + groups * p, samples, n)];
  }
  for (int i = 0; i < kSampleItems; ++i) {
    const uint32_t p = threadIdx.x + i * kSampleThreads;
    if (p < rows) sampled[p] = k[i];
  }
  __syncthreads();
  for (int i = 0; i < kSampleItems; ++i) {
    const uint32_t p = threadIdx.x + i * kSampleThreads;
    if (p >= rows) break;
    // Linear probing from the key's hash; a taken slot's key is its owner's.
    for (uint32_t s = static_cast<uint32_t>(joinkit::hash64(k[i], kSampleSeed));; ++s) {
      uint32_t* slot = &slots[s & (kSampleSlots - 1)];
      const uint32_t was = atomicCAS(slot, kSampleEmpty, (1u << kSampleOwnerBits) | p);
      if (was == kSampleEmpty) break;
      if (sampled[was & ((1u << kSampleOwnerBits) - 1)] == k[i]) {
        atomicAdd(slot, 1u << kSampleOwnerBits);
        break;
      }
    }
  }
  __syncthreads();
  uint64_t pairs = 0, top = 0;
  for (uint32_t s = threadIdx.x; s < kSampleSlots; s += kSampleThreads) {
    if (slots[s] == kSampleEmpty) continue;
    const uint64_t c = slots[s] >> kSampleOwnerBits;
    pairs += c * (c - 1);
    top = c > top ? c : top;
  }
  pairs = Reduce(reduce).Sum(pairs);
  __syncthreads();
  top = Reduce(reduce).Reduce(top, SampleMax());
  if (threadIdx.x == 0) {
    out[3 * g] = rows;
    out[3 * g + 1] = pairs;
    out[3 * g + 2] = top;
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kSampleThreads)
    sample_runs_u32(const uint32_t* keys, uint64_t n, uint64_t samples, uint64_t groups,
                    uint64_t* out) {
  sample_runs<uint32_t>(keys, n, samples, groups, out);
}

extern "C" __global__ void __launch_bounds__(kSampleThreads)
    sample_runs_u64(const uint64_t* keys, uint64_t n, uint64_t samples, uint64_t groups,
                    uint64_t* out) {
  sample_runs<uint64_t>(keys, n, samples, groups, out);
}
