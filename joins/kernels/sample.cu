// Duplicate statistics of a key sample, for Auto's plan (twin: src/sample.rs). One block a
// group: it gathers its keys from spread positions of the column, sorts them in shared memory
// and counts, in one launch, what the host would otherwise download and sort: the group's
// equal pairs sum c (c - 1) over its keys' counts c, and its largest count.
#include <stdint.h>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include "joinkit/hash.cuh"

namespace {

constexpr int kSampleThreads = 512;
constexpr int kSampleItems = 8;  // 4096 keys a group (SAMPLE_GROUP_ROWS in src/sample.rs)
constexpr uint64_t kSampleSeed = 0x5a3;

struct SampleMax {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

// Sample j of `samples` spread over `n` rows: the hashed row of the j-th of as many strides.
__device__ __forceinline__ uint64_t sample_row(uint64_t j, uint64_t samples, uint64_t n) {
  const uint64_t lo = j * n / samples, hi = (j + 1) * n / samples;
  return lo + joinkit::hash64(j, kSampleSeed) % (hi - lo);
}

// Group g = blockIdx.x takes samples j = g, g + groups, g + 2 groups, ... (so each group is
// spread over the whole column) and writes out[3g .. 3g + 3) = (rows, pairs, largest count).
template <typename K>
__device__ void sample_runs(const K* keys, uint64_t n, uint64_t samples, uint64_t groups,
                            uint64_t* out) {
  using Sort = cub::BlockRadixSort<K, kSampleThreads, kSampleItems>;
  using Scan = cub::BlockScan<uint32_t, kSampleThreads>;
  using Reduce = cub::BlockReduce<uint64_t, kSampleThreads>;
  __shared__ union {
    typename Sort::TempStorage sort;
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } tmp;
  __shared__ K last_of[kSampleThreads];
  const uint64_t g = blockIdx.x;
  const uint32_t rows = static_cast<uint32_t>((samples - g + groups - 1) / groups);
  const uint32_t first = threadIdx.x * kSampleItems;
  // Padding sorts last (the largest key): the first `rows` sorted keys are the sample's.
  K k[kSampleItems];
  for (int i = 0; i < kSampleItems; ++i) {
    const uint32_t p = first + i;
    k[i] = p < rows ? keys[sample_row(g + groups * p, samples, n)] : ~K(0);
  }
  Sort(tmp.sort).Sort(k);
  last_of[threadIdx.x] = k[kSampleItems - 1];
  __syncthreads();
  // Each sorted position's run start (the largest head position at or before it).
  uint32_t start[kSampleItems];
  for (int i = 0; i < kSampleItems; ++i) {
    const uint32_t p = first + i;
    const K prev = i > 0 ? k[i - 1] : (threadIdx.x > 0 ? last_of[threadIdx.x - 1] : K(0));
    start[i] = p < rows && (p == 0 || prev != k[i]) ? p : 0u;
  }
  __syncthreads();  // the sort's storage is reused by the scan
  Scan(tmp.scan).InclusiveScan(start, start, SampleMax());
  // A run of c keys at offsets 0 .. c - 1 from its start adds 2 (0 + 1 + ... + c - 1) =
  // c (c - 1) pairs; its largest offset + 1 is c.
  uint64_t pairs = 0, top = 0;
  for (int i = 0; i < kSampleItems; ++i) {
    const uint32_t p = first + i;
    if (p < rows) {
      const uint64_t offset = p - start[i];
      pairs += 2 * offset;
      top = offset + 1 > top ? offset + 1 : top;
    }
  }
  __syncthreads();
  pairs = Reduce(tmp.reduce).Sum(pairs);
  __syncthreads();
  top = Reduce(tmp.reduce).Reduce(top, SampleMax());
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
