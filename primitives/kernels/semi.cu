// The semi join of co-clustered inputs (src/semi.rs is the CPU twin and the contract): left
// keys strictly ascending and unique, right keys ascending; each left row whose flag is set is
// marked when a flagged right row has its key.
//
// Two launches. `sorted_match_bounds` gives every tile of kTile left rows its right rows: tile
// b owns right rows [lower_bound(left[b * kTile]), lower_bound(left[(b + 1) * kTile])), the
// first tile from 0 and the last to the end, so the tiles cover the right side exactly once
// (one binary search in global memory a tile, all tiles at once). `sorted_match` then runs a
// block a tile: the tile's left keys and wanted-states go to shared memory, the block streams
// its right rows in order (coalesced), finds each one's left row by a binary search in shared
// memory, reads the right flag only for a row that found a wanted left row (a filtered left
// side leaves most right flags unread), and writes the marks of the found rows.
//
// Order is checked as it is read: each left row against the one before it, each right row
// against the one before it (every pair by exactly one block, as the tiles partition the right
// side), and the tiles' bounds against each other. A violation sets a bit of `status`.
#include "common.cuh"

namespace {

constexpr uint32_t kWanted = 1, kFound = 2;
constexpr uint32_t kLeftUnsorted = 1, kRightUnsorted = 2;

template <typename K>
__device__ __forceinline__ uint64_t lower_bound(const K* __restrict__ a, uint64_t n, K key) {
  uint64_t lo = 0, hi = n;
  while (lo < hi) {
    const uint64_t mid = (lo + hi) / 2;
    if (a[mid] < key) lo = mid + 1; else hi = mid;
  }
  return lo;
}

template <typename K>
__device__ void bounds(const K* __restrict__ left, uint64_t n, const K* __restrict__ right,
                       uint64_t m, uint64_t* __restrict__ out, uint64_t tiles) {
  for (uint64_t b = joinkit::global_thread_id(); b <= tiles; b += joinkit::grid_stride()) {
    out[b] = b == 0 ? 0 : b == tiles ? m : lower_bound(right, m, left[b * jkp::kTile]);
  }
}

template <typename K>
__device__ void match(const K* __restrict__ left, const uint32_t* __restrict__ left_flags,
                      uint64_t n, const K* __restrict__ right,
                      const uint32_t* __restrict__ right_flags, const uint64_t* __restrict__ tile_bounds,
                      uint32_t* __restrict__ marks, uint32_t* __restrict__ status) {
  __shared__ K keys[jkp::kTile];
  __shared__ uint32_t state[jkp::kTile];
  const uint64_t tile = blockIdx.x, first = tile * jkp::kTile;
  const uint64_t rest = n - first;
  const uint32_t len = rest < jkp::kTile ? static_cast<uint32_t>(rest) : jkp::kTile;
  for (uint32_t i = threadIdx.x; i < len; i += blockDim.x) {
    const K k = left[first + i];
    keys[i] = k;
    state[i] = left_flags == nullptr || left_flags[first + i] != 0 ? kWanted : 0u;
    if (first + i > 0 && !(left[first + i - 1] < k)) atomicOr(status, kLeftUnsorted);
  }
  const uint64_t lo = tile_bounds[tile], hi = tile_bounds[tile + 1];
  if (hi < lo && threadIdx.x == 0) atomicOr(status, kRightUnsorted);
  __syncthreads();
  for (uint64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
    const K r = right[j];
    if (j > 0 && right[j - 1] > r) atomicOr(status, kRightUnsorted);
    uint32_t a = 0, b = len;  // lower bound of r among the tile's keys
    while (a < b) {
      const uint32_t mid = (a + b) / 2;
      if (keys[mid] < r) a = mid + 1; else b = mid;
    }
    if (a < len && keys[a] == r && (state[a] & kWanted) &&
        (right_flags == nullptr || right_flags[j] != 0)) {
      atomicOr(&state[a], kFound);
    }
  }
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < len; i += blockDim.x) {
    if (state[i] & kFound) marks[first + i] = 1;
  }
}

}  // namespace

#define JKP_SORTED_MATCH(K, NAME)                                                              \
  extern "C" __global__ void __launch_bounds__(jkp::kBlock) sorted_match_bounds_##NAME(      \
      const K* left, uint64_t n, const K* right, uint64_t m, uint64_t* out, uint64_t tiles) {   \
    bounds<K>(left, n, right, m, out, tiles);                                                   \
  }                                                                                             \
  extern "C" __global__ void __launch_bounds__(jkp::kBlock) sorted_match_##NAME(             \
      const K* left, const uint32_t* left_flags, uint64_t n, const K* right,                    \
      const uint32_t* right_flags, const uint64_t* tile_bounds, uint32_t* marks,                \
      uint32_t* status) {                                                                       \
    match<K>(left, left_flags, n, right, right_flags, tile_bounds, marks, status);              \
  }

JKP_SORTED_MATCH(uint32_t, u32)
JKP_SORTED_MATCH(uint64_t, u64)
