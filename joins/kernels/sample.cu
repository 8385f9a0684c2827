// Duplicate statistics of a key sample, for Auto's plan (twin: src/sample.rs). A cluster of
// blocks a group (8 on sm_90 and later, where one block on one SM was the plan's critical path:
// 11-14 us for 2048-4096 keys, ncu, H200, each thread a long chain of dependent instructions;
// one block on older GPUs): each block gathers an eighth of the group's keys from spread
// positions of the column, and each key is counted in the shared-memory hash table of the block
// its hash names (distributed shared memory), so every distinct key is counted whole by one
// block. In one launch, what the host would otherwise download and sort: the group's equal pairs
// sum c (c - 1) over its keys' counts c, and its largest count. A table, not a sort: one pass of
// shared-memory atomics where a block radix sort of the group took 8 (4-byte keys) or 16
// (8-byte) passes (H200, ncu, 2048 samples of 4-byte keys and 4096 of 8-byte: 18.5 and 33.4 us
// sorted, 9.0 and 19.4 counted). The keys stay in shared memory beside the tables (dynamic shared
// memory, sample_shared_bytes in src/sample.rs), so comparing with a slot's key never leaves the
// cluster. The host reads a group's words as soon as they are posted (CudaBackend::posted_words),
// which lets one launch sample and empty NPHJ-chained's heads (sample_and_empty_heads). A
// cluster's blocks run at once by construction, so its barriers cannot wait for SMs that other
// work holds (a grid-wide one could).
#include <stdint.h>
#include <cooperative_groups.h>
#include <cub/block/block_reduce.cuh>
#include "joinkit/device.cuh"
#include "joinkit/hash.cuh"
#include "joinkit/hashtable.cuh"

// Blocks a group counts with (src/sample.rs reads it from the kernel's cluster width).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define JOINKIT_SAMPLE_CLUSTER 8
#define JOINKIT_SAMPLE_CLUSTER_DIMS __cluster_dims__(JOINKIT_SAMPLE_CLUSTER, 1, 1)
#else
#define JOINKIT_SAMPLE_CLUSTER 1
#define JOINKIT_SAMPLE_CLUSTER_DIMS
#endif

namespace {

constexpr int kSampleThreads = 1024;
constexpr uint32_t kSampleRows = 4096;  // a group's keys (SAMPLE_GROUP_ROWS in src/sample.rs)
constexpr uint32_t kClusterRows = kSampleRows / JOINKIT_SAMPLE_CLUSTER;  // a block's share
constexpr int kSampleItems = (kClusterRows + kSampleThreads - 1) / kSampleThreads;
constexpr uint64_t kSampleSeed = 0x5a3;
// A slot holds the sample that first brought its key (the low kSampleOwnerBits) and the key's
// count above them; all ones: empty. A block's table has a group's keys of slots (it can never
// fill: every probe loop ends) and at least four times its expected share of them.
constexpr uint32_t kSampleSlots =
    kSampleRows * (JOINKIT_SAMPLE_CLUSTER >= 4 ? 1 : 4 / JOINKIT_SAMPLE_CLUSTER);
constexpr uint32_t kSampleOwnerBits = 12;
constexpr uint32_t kSampleEmpty = ~0u;
static_assert(kSampleRows <= (1u << kSampleOwnerBits), "owners fit their bits");
static_assert((kSampleSlots & (kSampleSlots - 1)) == 0, "a power of two of slots");
static_assert(kSampleSlots % (4 * kSampleThreads) == 0, "the count reads 4 slots a load");

// The group's blocks: a thread block cluster on sm_90 and later, one block before.
struct Cluster {
  static __device__ __forceinline__ uint32_t rank() {
#if JOINKIT_SAMPLE_CLUSTER > 1
    return cooperative_groups::this_cluster().block_rank();
#else
    return 0;
#endif
  }
  static __device__ __forceinline__ void sync() {
#if JOINKIT_SAMPLE_CLUSTER > 1
    cooperative_groups::this_cluster().sync();
#else
    __syncthreads();
#endif
  }
  // `p` (this block's shared memory) in the shared memory of block `r` of the cluster.
  template <typename T>
  static __device__ __forceinline__ T* at(T* p, uint32_t r) {
#if JOINKIT_SAMPLE_CLUSTER > 1
    return cooperative_groups::this_cluster().map_shared_rank(p, r);
#else
    (void)r;
    return p;
#endif
  }
};

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
// whole column); cluster g counts them, block r gathering the group's samples p = r + i C
// (C blocks a cluster) into its own keys[i]. The first block writes out[3g .. 3g + 3) = (rows,
// pairs, largest count) into the host's mapped words and posts them with the host's ticket at
// out[3 groups + g] (CudaBackend::posted_words), and where `pairs_copy` is not null, the pairs
// there too, in device memory.
template <typename K>
__device__ void sample_runs(const K* keys, uint64_t n, uint64_t samples, uint64_t groups,
                            uint64_t* out, uint64_t ticket, uint64_t* pairs_copy) {
  using Reduce = cub::BlockReduce<PairsTop, kSampleThreads>;
  __shared__ typename Reduce::TempStorage reduce;
  // The first block's: the group's sums (a 32-bit maximum: the 64-bit one is not atomic on
  // another block's shared memory).
  __shared__ unsigned long long group_pairs;
  __shared__ unsigned int group_top;
  extern __shared__ __align__(16) unsigned char sample_shared[];
  K* gathered = reinterpret_cast<K*>(sample_shared);  // this block's share of the keys
  uint32_t* slots = reinterpret_cast<uint32_t*>(gathered + kClusterRows);
  constexpr uint32_t size = JOINKIT_SAMPLE_CLUSTER;
  const uint32_t rank = Cluster::rank();
  const uint64_t g = blockIdx.x / size;
  const uint32_t rows = static_cast<uint32_t>((samples - g + groups - 1) / groups);
  uint4* quads = reinterpret_cast<uint4*>(slots);  // 4 slots a load or store
  for (uint32_t q = threadIdx.x; q < kSampleSlots / 4; q += kSampleThreads)
    quads[q] = make_uint4(kSampleEmpty, kSampleEmpty, kSampleEmpty, kSampleEmpty);
  if (threadIdx.x == 0) {
    group_pairs = 0;
    group_top = 0;
  }
  const Strides strides(n, samples);
  // Sample p = rank + i size of the group, for this thread's i.
  const auto sample_of = [&](int item) {
    return rank + (threadIdx.x + item * kSampleThreads) * size;
  };
  K k[kSampleItems];
#pragma unroll
  for (int i = 0; i < kSampleItems; ++i) {
    const uint32_t p = sample_of(i);
    if (p < rows) k[i] = keys[strides.row(g + groups * p)];
  }
#pragma unroll
  for (int i = 0; i < kSampleItems; ++i) {
    if (sample_of(i) < rows) gathered[threadIdx.x + i * kSampleThreads] = k[i];
  }
  // Every block's table emptied and keys gathered before any block counts.
  Cluster::sync();
  // Linear probing from each key's hash in the table of the block the hash names; a taken
  // slot's key is its owner's, in the gathering block's keys.
#pragma unroll
  for (int i = 0; i < kSampleItems; ++i) {
    const uint32_t p = sample_of(i);
    if (p >= rows) continue;
    const uint64_t h = joinkit::hash64(k[i], kSampleSeed);
    uint32_t* table = Cluster::at(slots, static_cast<uint32_t>(h >> 32) & (size - 1));
    for (uint32_t s = static_cast<uint32_t>(h);; ++s) {
      uint32_t* slot = &table[s & (kSampleSlots - 1)];
      const uint32_t was = atomicCAS(slot, kSampleEmpty, (1u << kSampleOwnerBits) | p);
      if (was == kSampleEmpty) break;
      const uint32_t owner = was & ((1u << kSampleOwnerBits) - 1);
      if (*Cluster::at(&gathered[owner / size], owner % size) == k[i]) {
        atomicAdd(slot, 1u << kSampleOwnerBits);
        break;
      }
    }
  }
  // Every key counted before any block reads its table.
  Cluster::sync();
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
    atomicAdd(Cluster::at(&group_pairs, 0), static_cast<unsigned long long>(counted.pairs));
    atomicMax(Cluster::at(&group_top, 0), static_cast<unsigned int>(counted.top));
  }
  // Every block's counts in the first block's sums.
  Cluster::sync();
  if (rank == 0 && threadIdx.x == 0) {
    volatile uint64_t* words = out + 3 * g;
    words[0] = rows;
    words[1] = group_pairs;
    words[2] = group_top;
    if (pairs_copy != nullptr) *pairs_copy = group_pairs;
    joinkit::post_ticket(out + 3 * groups + g, ticket);
  }
}

// Auto's plan (src/sample.rs, sample_runs_and_chained_table): the first cluster samples the keys
// (one group) and posts them while the other blocks empty the heads of NPHJ-chained's table
// (joinkit-hashtable's chained_table_unemptied); the plan waits for one launch, not two (the
// heads' fill, then the sample: 4 us of host time each on the H200 machines). No grid-wide
// synchronization: a launch that needs every block resident can wait forever for SMs held by
// another rank's kernels on a shared GPU (a cooperative version hung the distributed tests
// whose ranks share one GPU).
template <typename K>
__device__ void sample_and_empty_heads(const joinkit::ht::RawTable& raw, uint64_t samples,
                                       uint64_t* out, uint64_t ticket, uint64_t* pairs_copy) {
  constexpr uint32_t size = JOINKIT_SAMPLE_CLUSTER;
  if (blockIdx.x < size) {
    const K* keys = reinterpret_cast<const K*>(raw.keys);
    sample_runs<K>(keys, raw.rows, samples, 1, out, ticket, pairs_copy);
    return;
  }
  uint32_t* heads = reinterpret_cast<uint32_t*>(raw.slots);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x - size) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x - size) * blockDim.x + threadIdx.x;
       i < raw.capacity; i += stride)
    heads[i] = joinkit::ht::kEmptyRow;
}

// The launch queued right behind the sample, so that the join the plan picks needs no launch of
// its own to start: each block reads the sample's equal pairs (the sample's copy in device
// memory; reads of the host's mapped words, one a block, took 0.25 ms on an H200) and, where they
// are at most `most_pairs` (the most with which the plan picks NPHJ-chained), builds the table;
// where they exceed it, numbers the rows 0.. of `left_ids` and `right_ids` (null: none to number),
// the row ids SMJ-OM sorts with its keys, which then launches no numbering of its own.
template <typename K>
__device__ void push_chained_or_number_rows(const joinkit::ht::RawTable& raw,
                                            const uint64_t* pairs, uint64_t most_pairs,
                                            uint32_t* left_ids, uint64_t left_rows,
                                            uint32_t* right_ids, uint64_t right_rows) {
  __shared__ bool skip;
  if (threadIdx.x == 0) skip = *pairs > most_pairs;
  __syncthreads();
  if (skip) {
    if (left_ids == nullptr) return;
    const uint64_t rows = left_rows > right_rows ? left_rows : right_rows;
    for (uint64_t i = joinkit::global_thread_id(); i < rows; i += joinkit::grid_stride()) {
      if (i < left_rows) left_ids[i] = static_cast<uint32_t>(i);
      if (i < right_rows) right_ids[i] = static_cast<uint32_t>(i);
    }
    return;
  }
  const joinkit::ht::ChainedTable<K> table(raw);
  for (uint64_t i = joinkit::global_thread_id(); i < table.rows; i += joinkit::grid_stride())
    table.insert(table.keys[i], static_cast<uint32_t>(i));
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kSampleThreads) JOINKIT_SAMPLE_CLUSTER_DIMS
    sample_runs_u32(const uint32_t* keys, uint64_t n, uint64_t samples, uint64_t groups,
                    uint64_t* out, uint64_t ticket) {
  sample_runs<uint32_t>(keys, n, samples, groups, out, ticket, nullptr);
}

extern "C" __global__ void __launch_bounds__(kSampleThreads) JOINKIT_SAMPLE_CLUSTER_DIMS
    sample_runs_u64(const uint64_t* keys, uint64_t n, uint64_t samples, uint64_t groups,
                    uint64_t* out, uint64_t ticket) {
  sample_runs<uint64_t>(keys, n, samples, groups, out, ticket, nullptr);
}

extern "C" __global__ void __launch_bounds__(kSampleThreads) JOINKIT_SAMPLE_CLUSTER_DIMS
    sample_and_empty_heads_u32(joinkit::ht::RawTable raw, uint64_t samples, uint64_t* out,
                               uint64_t ticket, uint64_t* pairs_copy) {
  sample_and_empty_heads<uint32_t>(raw, samples, out, ticket, pairs_copy);
}

extern "C" __global__ void __launch_bounds__(kSampleThreads) JOINKIT_SAMPLE_CLUSTER_DIMS
    sample_and_empty_heads_u64(joinkit::ht::RawTable raw, uint64_t samples, uint64_t* out,
                               uint64_t ticket, uint64_t* pairs_copy) {
  sample_and_empty_heads<uint64_t>(raw, samples, out, ticket, pairs_copy);
}

extern "C" __global__ void __launch_bounds__(kSampleThreads)
    push_chained_or_number_rows_u32(joinkit::ht::RawTable raw, const uint64_t* pairs,
                                    uint64_t most_pairs, uint32_t* left_ids, uint64_t left_rows,
                                    uint32_t* right_ids, uint64_t right_rows) {
  push_chained_or_number_rows<uint32_t>(raw, pairs, most_pairs, left_ids, left_rows, right_ids,
                                        right_rows);
}

extern "C" __global__ void __launch_bounds__(kSampleThreads)
    push_chained_or_number_rows_u64(joinkit::ht::RawTable raw, const uint64_t* pairs,
                                    uint64_t most_pairs, uint32_t* left_ids, uint64_t left_rows,
                                    uint32_t* right_ids, uint64_t right_rows) {
  push_chained_or_number_rows<uint64_t>(raw, pairs, most_pairs, left_ids, left_rows, right_ids,
                                        right_rows);
}
