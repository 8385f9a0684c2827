// Gather (out[i] = src[map[i]]) of one or many columns with one map, and scatter
// (out[map[i]] = src[i]). Every map index is compared against the indexed column's length;
// out-of-range entries are never dereferenced: the output element gets 0 (gather) or no write
// (scatter) and the first bad position goes to the status word (the host reads it back in
// checked mode).
//
// Tiles of kTile map entries; each thread holds kItems entries loaded as 16-byte vectors when
// the map and outputs are aligned (the host says), and gathers them with independent loads.
//
// Clustered fast path (no caller flag): per tile, the block reduces min/max of its indices.
// When they span fewer than `window` elements (a clustered map: i/2, small-window shuffles,
// sorted row ids) the block copies src[lo..=hi] into shared memory with coalesced loads and
// gathers from there; otherwise it gathers straight from global memory (L2).
#include "common.cuh"

namespace {

using namespace jkp;

template <typename T, typename I>
__device__ __forceinline__ void load_map(const I* map, uint64_t n, uint64_t tile, bool vector,
                                         I* idx, bool* valid) {
  if (vector) {
#pragma unroll
    for (int v = 0; v < kItems / kVec; ++v) load4(map + vec_pos(tile, v * kVec), idx + v * kVec);
#pragma unroll
    for (int j = 0; j < kItems; ++j) valid[j] = true;
  } else {
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      uint64_t p = vec_pos(tile, j);
      valid[j] = p < n;
      idx[j] = valid[j] ? map[p] : I(0);
    }
  }
}

template <typename T>
__device__ __forceinline__ void store_out(T* out, uint64_t n, uint64_t tile, bool vector,
                                          const T* val) {
  if (vector) {
#pragma unroll
    for (int v = 0; v < kItems / kVec; ++v) store4(out + vec_pos(tile, v * kVec), val + v * kVec);
  } else {
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      uint64_t p = vec_pos(tile, j);
      if (p < n) out[p] = val[j];
    }
  }
}

// Block-wide min/max of the tile's valid indices. `red` holds 2 x 2 x (kBlock / 32) words,
// double-buffered by tile parity so one barrier per tile suffices.
__device__ __forceinline__ void block_minmax(uint64_t& lo, uint64_t& hi, uint64_t* red, int parity) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) {
    lo = min(lo, static_cast<uint64_t>(__shfl_xor_sync(joinkit::kFullMask, lo, d)));
    hi = max(hi, static_cast<uint64_t>(__shfl_xor_sync(joinkit::kFullMask, hi, d)));
  }
  constexpr int kWarps = kBlock / 32;
  uint64_t* buf = red + parity * 2 * kWarps;
  if (joinkit::lane_id() == 0) {
    buf[joinkit::warp_id()] = lo;
    buf[kWarps + joinkit::warp_id()] = hi;
  }
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    lo = min(lo, buf[w]);
    hi = max(hi, buf[kWarps + w]);
  }
}

template <typename T, typename I>
__device__ void gather_columns(ColumnPtrs cols, int ncols, uint64_t src_len, const I* __restrict__ map,
                               uint64_t n, bool aligned, uint64_t window, uint64_t* status) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* win = reinterpret_cast<T*>(smem_raw);
  __shared__ uint64_t red[2 * 2 * (kBlock / 32)];
  const uint64_t tiles = (n + kTile - 1) / kTile;
  int parity = 0;
  for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x, parity ^= 1) {
    const uint64_t tile = t * kTile;
    const bool vector = aligned && tile + kTile <= n;
    I idx[kItems];
    bool valid[kItems];
    load_map<T>(map, n, tile, vector, idx, valid);
    // Check once per map entry (not per column); bad entries read index 0 of nothing: they
    // are masked below.
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (valid[j] && static_cast<uint64_t>(idx[j]) >= src_len) {
        record_bad(status, vec_pos(tile, j));
        valid[j] = false;
      }
    }
    bool staged = false;
    uint64_t lo = kNoError, hi = 0;
    if (window > 0) {
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        if (valid[j]) {
          lo = min(lo, static_cast<uint64_t>(idx[j]));
          hi = max(hi, static_cast<uint64_t>(idx[j]));
        }
      }
      block_minmax(lo, hi, red, parity);
      staged = lo <= hi && hi - lo < window;  // block-uniform
    }
#pragma unroll
    for (int c = 0; c < kMaxCols; ++c) {
      if (c >= ncols) break;
      const T* __restrict__ src = reinterpret_cast<const T*>(cols.src[c]);
      T* __restrict__ out = reinterpret_cast<T*>(cols.out[c]);
      T val[kItems];
      if (staged) {
        const uint64_t span = hi - lo + 1;
        __syncthreads();  // the window's previous contents have been read
        for (uint64_t k = threadIdx.x; k < span; k += 4 * kBlock) {
          T v[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            uint64_t q = k + u * kBlock;
            if (q < span) v[u] = __ldg(src + lo + q);
          }
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            uint64_t q = k + u * kBlock;
            if (q < span) win[q] = v[u];
          }
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kItems; ++j) val[j] = valid[j] ? win[static_cast<uint64_t>(idx[j]) - lo] : T(0);
      } else {
#pragma unroll
        for (int j = 0; j < kItems; ++j) val[j] = valid[j] ? __ldg(src + idx[j]) : T(0);
      }
      store_out(out, n, tile, vector, val);
    }
  }
}

template <typename T, typename I>
__device__ void scatter(const T* __restrict__ src, const I* __restrict__ map, uint64_t n,
                        T* __restrict__ out, uint64_t out_len, bool aligned, uint64_t* status) {
  const uint64_t tiles = (n + kTile - 1) / kTile;
  for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const uint64_t tile = t * kTile;
    const bool vector = aligned && tile + kTile <= n;
    I idx[kItems];
    bool valid[kItems];
    T val[kItems];
    load_map<T>(map, n, tile, vector, idx, valid);
    if (vector) {
#pragma unroll
      for (int v = 0; v < kItems / kVec; ++v) load4(src + vec_pos(tile, v * kVec), val + v * kVec);
    } else {
#pragma unroll
      for (int j = 0; j < kItems; ++j) val[j] = valid[j] ? src[vec_pos(tile, j)] : T(0);
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (!valid[j]) continue;
      if (static_cast<uint64_t>(idx[j]) < out_len) {
        out[idx[j]] = val[j];
      } else {
        record_bad(status, vec_pos(tile, j));
      }
    }
  }
}

}  // namespace

#define GATHER(TN, T, IN, I)                                                                   \
  extern "C" __global__ void __launch_bounds__(jkp::kBlock, 4)                                \
      gather_##TN##_##IN(jkp::ColumnPtrs cols, int ncols, uint64_t src_len, const I* map,     \
                         uint64_t n, int aligned, uint64_t window, uint64_t* status) {        \
    gather_columns<T, I>(cols, ncols, src_len, map, n, aligned != 0, window, status);         \
  }                                                                                            \
  extern "C" __global__ void __launch_bounds__(jkp::kBlock)                                   \
      scatter_##TN##_##IN(const T* src, const I* map, uint64_t n, T* out, uint64_t out_len,   \
                          int aligned, uint64_t* status) {                                     \
    scatter<T, I>(src, map, n, out, out_len, aligned != 0, status);                            \
  }
GATHER(u32, uint32_t, u32, uint32_t)
GATHER(u32, uint32_t, u64, uint64_t)
GATHER(u64, uint64_t, u32, uint32_t)
GATHER(u64, uint64_t, u64, uint64_t)
#undef GATHER
