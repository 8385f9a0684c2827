// Gather (out[i] = src[map[i]]) of one or many columns with one map, and scatter
// (out[map[i]] = src[i]). Every map index is compared against the indexed column's length;
// out-of-range entries are never dereferenced: the output element gets 0 (gather) or no write
// (scatter) and the first bad position goes to the status word (the host reads it back in
// checked mode).
//
// Tiles of kTile map entries; each thread holds kItems entries loaded as 16-byte vectors when
// the map and outputs are aligned (the host says), and gathers them with independent loads.
//
// Clustered maps (i/2, small-window shuffles, sorted row ids) take the same kernel: their
// source lines hit L2, so no flag and no shared-memory staging is needed (measured: staging
// was slower on every map shape).
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

template <typename T, typename I>
__device__ void gather_columns(ColumnPtrs cols, int ncols, uint64_t src_len, const I* __restrict__ map,
                               uint64_t n, bool aligned, uint64_t* status) {
  const uint64_t tiles = (n + kTile - 1) / kTile;
  for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
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
#pragma unroll
    for (int c = 0; c < kMaxCols; ++c) {
      if (c >= ncols) break;
      const T* __restrict__ src = reinterpret_cast<const T*>(cols.src[c]);
      T* __restrict__ out = reinterpret_cast<T*>(cols.out[c]);
      T val[kItems];
#pragma unroll
      for (int j = 0; j < kItems; ++j) val[j] = valid[j] ? __ldg(src + idx[j]) : T(0);
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
                         uint64_t n, int aligned, uint64_t* status) {                         \
    gather_columns<T, I>(cols, ncols, src_len, map, n, aligned != 0, status);                 \
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
