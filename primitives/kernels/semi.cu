// The semi join of co-clustered inputs (src/semi.rs is the CPU twin and the contract): left
// keys strictly ascending and unique, right keys ascending; each left row whose flag is set is
// marked when a right row that counts has its key. A right row counts when its flag is set
// (`sorted_match_*`) or when first[j] < second[j] (`sorted_match_less_*`, the predicate read
// only for rows that found a wanted left row: a selective left side leaves most of those
// columns unread).
//
// Two launches. `sorted_match_bounds` gives every tile of kTile left rows its right rows: tile
// b owns right rows [lower_bound(left[b * kTile]), lower_bound(left[(b + 1) * kTile])), the
// first tile from 0 and the last to the end, so the tiles cover the right side exactly once
// (one binary search in global memory a tile, all tiles at once). The match kernel then runs a
// block a tile: the tile's left keys and wanted-states go to shared memory; each thread takes
// kRun consecutive right rows (kRun independent loads in flight), finds the first one's left
// row by galloping from the tile's start and the others by galloping forward from there (both
// sides ascend), and flags the found left rows; then the block writes their marks.
//
// Order is checked as it is read (the left side once per check, `check_left`: later launches
// over the same left column skip it, and their tiles without right rows exit at once): each
// left row against the one before it, each right row
// against the one before it (every pair by exactly one thread, as the tiles partition the right
// side), and the tiles' bounds against each other. A violation sets a bit of `status`.
#include "common.cuh"

namespace {

constexpr uint32_t kWanted = 1, kFound = 2;
constexpr uint32_t kLeftUnsorted = 1, kRightUnsorted = 2;
constexpr int kRun = 8;  // right rows a thread takes at a time

template <typename K>
__device__ __forceinline__ uint64_t lower_bound(const K* __restrict__ a, uint64_t n, K key) {
  uint64_t lo = 0, hi = n;
  while (lo < hi) {
    const uint64_t mid = (lo + hi) / 2;
    if (a[mid] < key) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// The first position p in [from, len) with keys[p] >= key (len if none), keys ascending:
// exponential steps from `from`, then a binary search in the last step.
template <typename K>
__device__ __forceinline__ uint32_t gallop(const K* keys, uint32_t len, uint32_t from, K key) {
  uint32_t lo = from, step = 1;
  while (lo + step < len && keys[lo + step] < key) {
    lo += step;
    step *= 2;
  }
  uint32_t hi = min(lo + step, len);
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    if (keys[mid] < key) lo = mid + 1; else hi = mid;
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

// Right rows counted by their flags (all rows without flags).
struct Flagged {
  const uint32_t* flags;
  __device__ __forceinline__ bool operator()(uint64_t j) const {
    return flags == nullptr || flags[j] != 0;
  }
};

// Right rows with first[j] < second[j].
template <typename T>
struct Less {
  const T* first;
  const T* second;
  __device__ __forceinline__ bool operator()(uint64_t j) const { return first[j] < second[j]; }
};

template <typename K, typename Counts>
__device__ void match(const K* __restrict__ left, const uint32_t* __restrict__ left_flags,
                      uint64_t n, const K* __restrict__ right, Counts counts,
                      const uint64_t* __restrict__ tile_bounds, uint32_t* __restrict__ marks,
                      uint32_t* __restrict__ status, int check_left) {
  __shared__ K keys[jkp::kTile];
  __shared__ uint32_t state[jkp::kTile];
  const uint64_t tile = blockIdx.x, first = tile * jkp::kTile;
  const uint64_t lo = tile_bounds[tile], hi = tile_bounds[tile + 1];
  // A left side checked by an earlier launch: tiles without right rows have nothing to do
  // (a caller streaming the right side in chunks launches once a chunk).
  if (!check_left && lo == hi) return;
  const uint64_t rest = n - first;
  const uint32_t len = rest < jkp::kTile ? static_cast<uint32_t>(rest) : jkp::kTile;
  for (uint32_t i = threadIdx.x; i < len; i += blockDim.x) {
    const K k = left[first + i];
    keys[i] = k;
    state[i] = left_flags == nullptr || left_flags[first + i] != 0 ? kWanted : 0u;
    if (check_left && first + i > 0 && !(left[first + i - 1] < k)) atomicOr(status, kLeftUnsorted);
  }
  if (hi < lo && threadIdx.x == 0) atomicOr(status, kRightUnsorted);
  __syncthreads();
  for (uint64_t base = lo + threadIdx.x * kRun; base < hi; base += blockDim.x * kRun) {
    const int rows = hi - base < kRun ? static_cast<int>(hi - base) : kRun;
    K r[kRun];
#pragma unroll
    for (int q = 0; q < kRun; ++q) r[q] = q < rows ? right[base + q] : r[q > 0 ? q - 1 : 0];
    bool ordered = base == 0 || !(right[base - 1] > r[0]);
#pragma unroll
    for (int q = 1; q < kRun; ++q) ordered &= !(r[q - 1] > r[q]);
    if (!ordered) atomicOr(status, kRightUnsorted);
    uint32_t a = 0;
#pragma unroll
    for (int q = 0; q < kRun; ++q) {
      if (q >= rows) break;
      a = gallop(keys, len, q == 0 || !ordered ? 0u : a, r[q]);
      if (a < len && keys[a] == r[q] && (state[a] & kWanted) && counts(base + q)) {
        atomicOr(&state[a], kFound);
      }
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
      uint32_t* status, int check_left) {                                                       \
    match<K>(left, left_flags, n, right, Flagged{right_flags}, tile_bounds, marks, status,      \
             check_left);                                                                       \
  }

#define JKP_SORTED_MATCH_LESS(K, KNAME, T, TNAME)                                               \
  extern "C" __global__ void __launch_bounds__(jkp::kBlock) sorted_match_less_##KNAME##_##TNAME( \
      const K* left, const uint32_t* left_flags, uint64_t n, const K* right, const T* first,    \
      const T* second, const uint64_t* tile_bounds, uint32_t* marks, uint32_t* status,          \
      int check_left) {                                                                         \
    match<K>(left, left_flags, n, right, Less<T>{first, second}, tile_bounds, marks, status,    \
             check_left);                                                                       \
  }

JKP_SORTED_MATCH(uint32_t, u32)
JKP_SORTED_MATCH(uint64_t, u64)
JKP_SORTED_MATCH_LESS(uint32_t, u32, uint32_t, u32)
JKP_SORTED_MATCH_LESS(uint32_t, u32, uint64_t, u64)
JKP_SORTED_MATCH_LESS(uint32_t, u32, int32_t, i32)
JKP_SORTED_MATCH_LESS(uint32_t, u32, int64_t, i64)
JKP_SORTED_MATCH_LESS(uint64_t, u64, uint32_t, u32)
JKP_SORTED_MATCH_LESS(uint64_t, u64, uint64_t, u64)
JKP_SORTED_MATCH_LESS(uint64_t, u64, int32_t, i32)
JKP_SORTED_MATCH_LESS(uint64_t, u64, int64_t, i64)
