// Merge-path pieces for sort-merge joins: vectorized lower/upper bounds of the keys of A in a
// sorted B, and the load-balanced expansion of per-row ranges [lower, upper) into all
// (a_index, b_index) pairs of an M:N join.
//
// Expansion is balanced over the *output* index space: a partition kernel finds, for every
// tile of kTile outputs, the A row holding its first output (one binary search per tile, all
// tiles in parallel); in the expansion kernel each thread takes kItems consecutive outputs,
// gallops from its tile's first row to its own, then walks. One giant run (a key repeated
// 10^8 times in both inputs) spreads over every thread like any other distribution.
#include "common.cuh"

namespace {

using namespace jkp;

template <typename K, typename I>
__device__ void bounds(const K* a, uint64_t na, const K* b, uint64_t nb, I* lower, I* upper) {
  for (uint64_t i = joinkit::global_thread_id(); i < na; i += joinkit::grid_stride()) {
    const K key = a[i];
    uint64_t lo = 0, hi = nb;
    while (lo < hi) {
      uint64_t mid = lo + (hi - lo) / 2;
      if (b[mid] < key) lo = mid + 1; else hi = mid;
    }
    lower[i] = static_cast<I>(lo);
    // Upper bound: gallop from the lower bound (cost grows with the log of the run length),
    // then binary search. Invariant: b[j] <= key for every j < lo.
    uint64_t step = 1;
    hi = nb;
    while (true) {
      uint64_t probe = lo + step - 1;
      if (probe >= nb) break;
      if (b[probe] <= key) { lo = probe + 1; step *= 2; } else { hi = probe; break; }
    }
    while (lo < hi) {
      uint64_t mid = lo + (hi - lo) / 2;
      if (b[mid] <= key) lo = mid + 1; else hi = mid;
    }
    upper[i] = static_cast<I>(lo);
  }
}

// counts[i] = upper[i] - lower[i] (0 and a recorded bad row when upper < lower); counts[n] = 0
// so that the exclusive scan leaves the total there.
template <typename I>
__device__ void range_counts(const I* lower, const I* upper, uint64_t n, uint64_t* counts,
                             uint64_t* status) {
  for (uint64_t i = joinkit::global_thread_id(); i <= n; i += joinkit::grid_stride()) {
    uint64_t c = 0;
    if (i < n) {
      const uint64_t l = lower[i], u = upper[i];
      if (u >= l) c = u - l; else record_bad(status, i);
    }
    counts[i] = c;
  }
}

// The largest row r in [lo, hi] with offsets[r] <= k, given offsets[lo] <= k: gallop, then
// binary search.
__device__ __forceinline__ uint64_t row_from(const uint64_t* offsets, uint64_t lo, uint64_t hi, uint64_t k) {
  uint64_t step = 1;
  while (true) {
    uint64_t probe = lo + step;
    if (probe > hi) break;
    if (offsets[probe] <= k) { lo = probe; step *= 2; } else { hi = probe - 1; break; }
  }
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo + 1) / 2;
    if (offsets[mid] <= k) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// tile_rows[t] = the row of output t * kTile, for t < tiles; tile_rows[tiles] = n - 1.
__device__ void expand_partition(const uint64_t* offsets, uint64_t n, uint64_t tiles, uint64_t* tile_rows) {
  for (uint64_t t = joinkit::global_thread_id(); t <= tiles; t += joinkit::grid_stride()) {
    if (t == tiles) { tile_rows[t] = n - 1; continue; }
    const uint64_t k = t * kTile;
    uint64_t lo = 0, hi = n - 1;
    while (lo < hi) {
      uint64_t mid = lo + (hi - lo + 1) / 2;
      if (offsets[mid] <= k) lo = mid; else hi = mid - 1;
    }
    tile_rows[t] = lo;
  }
}

template <typename I>
__device__ void expand(const I* lower, const uint64_t* offsets, uint64_t n, uint64_t total,
                       const uint64_t* tile_rows, bool aligned, I* a_out, I* b_out) {
  // A caller's total past the real one would walk rows past n - 1: clamp it.
  total = min(total, offsets[n]);
  const uint64_t tiles = (total + kTile - 1) / kTile;
  for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const uint64_t tile = t * kTile;
    const uint64_t first = tile + threadIdx.x * kItems;
    const uint64_t r1 = tile_rows[t + 1];
    I a[kItems], b[kItems];
    uint64_t r = tile_rows[t];
    if (first < total) r = row_from(offsets, r, r1, first);
    uint64_t next = offsets[r + 1];  // offsets has n + 1 entries, and r <= n - 1
    uint64_t start = offsets[r];
    uint64_t base = lower[r];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const uint64_t k = first + j;
      if (k < total && k >= next) {
        r = row_from(offsets, r + 1, r1, k);
        next = offsets[r + 1];
        start = offsets[r];
        base = lower[r];
      }
      a[j] = static_cast<I>(r);
      b[j] = static_cast<I>(base + (k - start));
    }
    if (aligned && tile + kTile <= total) {
      store4(a_out + first, a);
      store4(a_out + first + kVec, a + kVec);
      store4(b_out + first, b);
      store4(b_out + first + kVec, b + kVec);
    } else {
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        if (first + j < total) {
          a_out[first + j] = a[j];
          b_out[first + j] = b[j];
        }
      }
    }
  }
}

}  // namespace

#define BOUNDS(KN, K, IN, I)                                                                   \
  extern "C" __global__ void bounds_##KN##_##IN(const K* a, uint64_t na, const K* b,          \
                                                uint64_t nb, I* lower, I* upper) {            \
    bounds<K, I>(a, na, b, nb, lower, upper);                                                  \
  }
BOUNDS(u32, uint32_t, u32, uint32_t)
BOUNDS(u32, uint32_t, u64, uint64_t)
BOUNDS(u64, uint64_t, u32, uint32_t)
BOUNDS(u64, uint64_t, u64, uint64_t)
#undef BOUNDS

extern "C" __global__ void expand_partition_u64(const uint64_t* offsets, uint64_t n, uint64_t tiles,
                                                uint64_t* tile_rows) {
  expand_partition(offsets, n, tiles, tile_rows);
}

#define EXPAND(IN, I)                                                                          \
  extern "C" __global__ void range_counts_##IN(const I* lower, const I* upper, uint64_t n,    \
                                               uint64_t* counts, uint64_t* status) {          \
    range_counts<I>(lower, upper, n, counts, status);                                          \
  }                                                                                            \
  extern "C" __global__ void __launch_bounds__(jkp::kBlock)                                   \
      expand_##IN(const I* lower, const uint64_t* offsets, uint64_t n, uint64_t total,        \
                  const uint64_t* tile_rows, int aligned, I* a_out, I* b_out) {               \
    expand<I>(lower, offsets, n, total, tile_rows, aligned != 0, a_out, b_out);                \
  }
EXPAND(u32, uint32_t)
EXPAND(u64, uint64_t)
#undef EXPAND
