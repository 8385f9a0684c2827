// Stable compaction by a u32 flags column (non-zero = keep), of many columns at once or of the
// row ids themselves, in three steps: per-tile counts of set flags, an exclusive scan of the
// counts (CUB, on the host side), then per tile a block scan of the flags places every kept
// element. Flags are read twice, every column once. Threads hold kItems consecutive elements
// (the block scan needs them in order), loaded as 16-byte vectors when aligned.
#include "common.cuh"

namespace {

using namespace jkp;

// The thread's kItems consecutive flags of the tile as 0/1, and their count.
__device__ __forceinline__ uint32_t load_flags(const uint32_t* flags, uint64_t n, uint64_t first,
                                               bool vector, uint32_t* f) {
  if (vector) {
    load4(flags + first, f);
    load4(flags + first + kVec, f + kVec);
  } else {
#pragma unroll
    for (int j = 0; j < kItems; ++j) f[j] = first + j < n ? flags[first + j] : 0u;
  }
  uint32_t c = 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    f[j] = f[j] != 0u;
    c += f[j];
  }
  return c;
}

__device__ void flag_counts(const uint32_t* flags, uint64_t n, bool aligned, uint64_t* counts) {
  __shared__ uint32_t part[2][kBlock / 32];
  const uint64_t tiles = (n + kTile - 1) / kTile;
  int parity = 0;
  for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x, parity ^= 1) {
    const uint64_t tile = t * kTile;
    uint32_t f[kItems];
    uint32_t c = load_flags(flags, n, tile + threadIdx.x * kItems, aligned && tile + kTile <= n, f);
    c = joinkit::warp_sum(c);
    if (joinkit::lane_id() == 0) part[parity][joinkit::warp_id()] = c;
    __syncthreads();  // double-buffered by parity: one barrier per tile
    if (threadIdx.x == 0) {
      uint32_t s = 0;
#pragma unroll
      for (int w = 0; w < kBlock / 32; ++w) s += part[parity][w];
      counts[t] = s;
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) counts[tiles] = 0;  // the scan's total lands here
}

// Where the thread's first kept element goes.
__device__ __forceinline__ uint64_t tile_position(const uint64_t* offsets, uint64_t t, uint32_t c,
                                                  uint32_t* scan_smem) {
  uint32_t total;
  uint32_t prefix = joinkit::block_exclusive_scan(c, scan_smem, &total);
  return offsets[t] + prefix;
}

template <typename T>
__device__ void compact(ColumnPtrs cols, int ncols, const uint32_t* flags, uint64_t n,
                        const uint64_t* offsets, uint64_t out_len, bool aligned,
                        uint64_t* status) {
  __shared__ uint32_t scan_smem[joinkit::kWarpSize + 1];
  const uint64_t tiles = (n + kTile - 1) / kTile;
  for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const uint64_t tile = t * kTile;
    const uint64_t first = tile + threadIdx.x * kItems;
    const bool vector = aligned && tile + kTile <= n;
    uint32_t f[kItems];
    uint32_t c = load_flags(flags, n, first, vector, f);
    uint64_t pos = tile_position(offsets, t, c, scan_smem);
    if (c == 0) continue;
#pragma unroll
    for (int col = 0; col < kMaxCols; ++col) {
      if (col >= ncols) break;
      const T* src = reinterpret_cast<const T*>(cols.src[col]);
      T* out = reinterpret_cast<T*>(cols.out[col]);
      T v[kItems];
      if (vector) {
        load4(src + first, v);
        load4(src + first + kVec, v + kVec);
      } else {
#pragma unroll
        for (int j = 0; j < kItems; ++j) v[j] = f[j] ? src[first + j] : T(0);
      }
      uint64_t p = pos;
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        if (f[j]) {
          if (p < out_len) out[p] = v[j]; else record_bad(status, first + j);
          ++p;
        }
      }
    }
  }
}

template <typename I>
__device__ void flagged_ids(const uint32_t* flags, uint64_t n, const uint64_t* offsets, I* out,
                            uint64_t out_len, bool aligned, uint64_t* status) {
  __shared__ uint32_t scan_smem[joinkit::kWarpSize + 1];
  const uint64_t tiles = (n + kTile - 1) / kTile;
  for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const uint64_t tile = t * kTile;
    const uint64_t first = tile + threadIdx.x * kItems;
    uint32_t f[kItems];
    uint32_t c = load_flags(flags, n, first, aligned && tile + kTile <= n, f);
    uint64_t p = tile_position(offsets, t, c, scan_smem);
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (f[j]) {
        if (p < out_len) out[p] = static_cast<I>(first + j); else record_bad(status, first + j);
        ++p;
      }
    }
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(jkp::kBlock)
    flag_counts_u32(const uint32_t* flags, uint64_t n, int aligned, uint64_t* counts) {
  flag_counts(flags, n, aligned != 0, counts);
}

#define COMPACT(TN, T)                                                                         \
  extern "C" __global__ void __launch_bounds__(jkp::kBlock)                                   \
      compact_##TN(jkp::ColumnPtrs cols, int ncols, const uint32_t* flags, uint64_t n,        \
                   const uint64_t* offsets, uint64_t out_len, int aligned, uint64_t* status) { \
    compact<T>(cols, ncols, flags, n, offsets, out_len, aligned != 0, status);                \
  }                                                                                            \
  extern "C" __global__ void __launch_bounds__(jkp::kBlock)                                   \
      flagged_ids_##TN(const uint32_t* flags, uint64_t n, const uint64_t* offsets, T* out,    \
                       uint64_t out_len, int aligned, uint64_t* status) {                      \
    flagged_ids<T>(flags, n, offsets, out, out_len, aligned != 0, status);                     \
  }
COMPACT(u32, uint32_t)
COMPACT(u64, uint64_t)
#undef COMPACT
