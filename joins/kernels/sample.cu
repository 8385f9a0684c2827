// Duplicate statistics of a key sample, for Auto's plan (twin: src/sample.rs). One block a
// group: it gathers its keys from spread positions of the column and counts them in a
// shared-memory hash table, in one launch, what the host would otherwise download and sort:
// the group's equal pairs sum c (c - 1) over its keys' counts c, and its largest count. A
// table, not a sort: one pass of shared-memory atomics where a block radix sort of the group
// took 8 (4-byte keys) or 16 (8-byte) passes (H200, ncu, 2048 samples of 4-byte keys and 4096
// of 8-byte: 18.5 and 33.4 us sorted, 9.0 and 19.4 counted), most of a plan.
// The group's keys stay in shared memory beside the table (dynamic shared memory,
// sample_shared_bytes in src/sample.rs), so comparing with a slot's key never leaves the SM.
// The host reads a group's words as soon as its block posts them (CudaBackend::posted_words),
// which lets one launch sample and build NPHJ-chained's table (sample_and_build_chained).
#include <stdint.h>
#include <cub/block/block_reduce.cuh>
#include "joinkit/device.cuh"
#include "joinkit/hash.cuh"
#include "joinkit/hashtable.cuh"

namespace {

// 32 warps of up to 4 keys. Every warp runs the whole block's code, one SM for the group:
// its time is the warps' instructions (ncu, H200, 4096 samples: 1.8 a cycle; 53 000 of them
// and 21.0-21.3 us when each key's probes waited for the warp's slowest lane at load 1/2 and
// two 64-bit divisions placed each sample, 37 700 and 14.1-14.6 us without; 2048 samples
// 26 800, 11.0-11.4 us).
constexpr int kSampleThreads = 1024;
constexpr int kSampleItems = 4;  // 4096 keys a group (SAMPLE_GROUP_ROWS in src/sample.rs)
constexpr uint64_t kSampleSeed = 0x5a3;
// Four times the group's keys (load at most 1/4: short probe sequences). A slot holds the
// sample that first brought its key (the low kSampleOwnerBits) and the key's count above them;
// all ones: empty.
constexpr uint32_t kSampleSlots = 4 * kSampleThreads * kSampleItems;
constexpr uint32_t kSampleOwnerBits = 12;
constexpr uint32_t kSampleEmpty = ~0u;
static_assert(kSampleThreads * kSampleItems <= (1u << kSampleOwnerBits), "owners fit their bits");
static_assert((kSampleSlots & (kSampleSlots - 1)) == 0, "a power of two of slots");
static_assert(kSampleSlots % (4 * kSampleThreads) == 0, "the count reads 4 slots a load");

// A group's equal pairs and largest count, reduced over the block in one pass.
struct PairsTop {
  uint64_t pairs, top;
};
struct SumPairsMaxTop {
  __device__ __forceinline__ PairsTop operator()(const PairsTop& a, const PairsTop& b) const {
    return {a.pairs + b.pairs, a.top > b.top ? a.top : b.top};
  }
};

// The strides of `samples` spread over `n` rows, n = q samples + r: stride j starts at
// floor(j n / samples) = j q + floor(j r / samples), where j r < samples^2 <= 2^38 is exact in a
// double, and a double's quotient is at most one off (corrected): no 64-bit division a sample
// (each one a long call; two a sample were a third of the block's instructions).
struct Strides {
  uint64_t q, r, samples;
  double inverse;
  __device__ __forceinline__ Strides(uint64_t n, uint64_t samples_)
      : q(n / samples_), r(n % samples_), samples(samples_), inverse(1.0 / samples_) {}
  __device__ __forceinline__ uint64_t start(uint64_t j) const {
    const uint64_t x = j * r;
    uint64_t t = static_cast<uint64_t>(static_cast<double>(x) * inverse);
    if (t * samples > x) {
      --t;
    } else if ((t + 1) * samples <= x) {
      ++t;
    }
    return j * q + t;
  }
  // Sample j's row: a hashed offset inside stride j (the hash scaled by a multiply).
  __device__ __forceinline__ uint64_t row(uint64_t j) const {
    const uint64_t lo = start(j);
    return lo + __umul64hi(joinkit::hash64(j, kSampleSeed), start(j + 1) - lo);
  }
};

// Group g takes samples j = g, g + groups, g + 2 groups, ... (so each group is spread over the
// whole column), writes out[3g .. 3g + 3) = (rows, pairs, largest count) into the host's mapped
// words and posts them with the host's ticket at out[3 groups + g] (CudaBackend::posted_words).
template <typename K>
__device__ void sample_runs(const K* keys, uint64_t n, uint64_t samples, uint64_t groups,
                            uint64_t g, uint64_t* out, uint64_t ticket) {
  using Reduce = cub::BlockReduce<PairsTop, kSampleThreads>;
  __shared__ typename Reduce::TempStorage reduce;
  extern __shared__ __align__(16) unsigned char sample_shared[];
  K* sampled = reinterpret_cast<K*>(sample_shared);  // the group's keys, by sample
  uint32_t* slots = reinterpret_cast<uint32_t*>(sampled + kSampleThreads * kSampleItems);
  const uint32_t rows = static_cast<uint32_t>((samples - g + groups - 1) / groups);
  uint4* quads = reinterpret_cast<uint4*>(slots);  // 4 slots a load or store
  for (uint32_t q = threadIdx.x; q < kSampleSlots / 4; q += kSampleThreads)
    quads[q] = make_uint4(kSampleEmpty, kSampleEmpty, kSampleEmpty, kSampleEmpty);
  const Strides strides(n, samples);
  K k[kSampleItems];
#pragma unroll
  for (int i = 0; i < kSampleItems; ++i) {
    const uint32_t p = threadIdx.x + i * kSampleThreads;
    if (p < rows) k[i] = keys[strides.row(g + groups * p)];
  }
#pragma unroll
  for (int i = 0; i < kSampleItems; ++i) {
    const uint32_t p = threadIdx.x + i * kSampleThreads;
    if (p < rows) sampled[p] = k[i];
  }
  __syncthreads();
  // Linear probing from each key's hash; a taken slot's key is its owner's. A lane goes on to
  // its next key as soon as one is counted, so a warp waits for its slowest lane once.
  uint32_t p = threadIdx.x;
  K key{};
  uint32_t s = 0;
  if (p < rows) {
    key = sampled[p];
    s = static_cast<uint32_t>(joinkit::hash64(key, kSampleSeed));
  }
  while (p < rows) {
    uint32_t* slot = &slots[s & (kSampleSlots - 1)];
    const uint32_t was = atomicCAS(slot, kSampleEmpty, (1u << kSampleOwnerBits) | p);
    bool counted = was == kSampleEmpty;
    if (!counted && sampled[was & ((1u << kSampleOwnerBits) - 1)] == key) {
      atomicAdd(slot, 1u << kSampleOwnerBits);
      counted = true;
    }
    if (!counted) {
      ++s;
      continue;
    }
    p += kSampleThreads;
    if (p < rows) {
      key = sampled[p];
      s = static_cast<uint32_t>(joinkit::hash64(key, kSampleSeed));
    }
  }
  __syncthreads();
  PairsTop counted{0, 0};
  for (uint32_t q = threadIdx.x; q < kSampleSlots / 4; q += kSampleThreads) {
    const uint4 four = quads[q];
    const uint32_t taken[4] = {four.x, four.y, four.z, four.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (taken[i] == kSampleEmpty) continue;
      const uint64_t c = taken[i] >> kSampleOwnerBits;
      counted.pairs += c * (c - 1);
      counted.top = c > counted.top ? c : counted.top;
    }
  }
  counted = Reduce(reduce).Reduce(counted, SumPairsMaxTop());
  if (threadIdx.x == 0) {
    volatile uint64_t* words = out + 3 * g;
    words[0] = rows;
    words[1] = counted.pairs;
    words[2] = counted.top;
    joinkit::post_ticket(out + 3 * groups + g, ticket);
  }
}

// Auto's plan in one launch (src/sample.rs, sample_runs_and_chained_table): block 0 samples the
// keys (one group) and posts them while the other blocks push the same keys on the chains of
// NPHJ-chained's table, whose heads were emptied before the launch (joinkit-hashtable's
// chained_table_to_build). The sample, the heads' fill and the build were three launches, 4.6 us
// of host time each on the H200 machines. No grid-wide synchronization: a launch that needs
// every block resident can wait forever for SMs held by another rank's kernels on a shared GPU
// (a cooperative version hung the distributed tests whose ranks share one GPU).
template <typename K>
__device__ void sample_and_build_chained(const joinkit::ht::RawTable& raw, uint64_t samples,
                                         uint64_t* out, uint64_t ticket) {
  const joinkit::ht::ChainedTable<K> table(raw);
  if (blockIdx.x == 0) {
    sample_runs<K>(table.keys, table.rows, samples, 1, 0, out, ticket);
    return;
  }
  const uint64_t stride = static_cast<uint64_t>(gridDim.x - 1) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x - 1) * blockDim.x + threadIdx.x;
       i < table.rows; i += stride)
    table.insert(table.keys[i], static_cast<uint32_t>(i));
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kSampleThreads)
    sample_runs_u32(const uint32_t* keys, uint64_t n, uint64_t samples, uint64_t groups,
                    uint64_t* out, uint64_t ticket) {
  sample_runs<uint32_t>(keys, n, samples, groups, blockIdx.x, out, ticket);
}

extern "C" __global__ void __launch_bounds__(kSampleThreads)
    sample_runs_u64(const uint64_t* keys, uint64_t n, uint64_t samples, uint64_t groups,
                    uint64_t* out, uint64_t ticket) {
  sample_runs<uint64_t>(keys, n, samples, groups, blockIdx.x, out, ticket);
}

extern "C" __global__ void __launch_bounds__(kSampleThreads)
    sample_and_build_chained_u32(joinkit::ht::RawTable raw, uint64_t samples, uint64_t* out,
                                 uint64_t ticket) {
  sample_and_build_chained<uint32_t>(raw, samples, out, ticket);
}

extern "C" __global__ void __launch_bounds__(kSampleThreads)
    sample_and_build_chained_u64(joinkit::ht::RawTable raw, uint64_t samples, uint64_t* out,
                                 uint64_t ticket) {
  sample_and_build_chained<uint64_t>(raw, samples, out, ticket);
}
