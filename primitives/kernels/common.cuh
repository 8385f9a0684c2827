// Shared pieces of joinkit-primitives' kernels: tile shapes, column-pointer packs passed by
// value, 16-byte vector loads/stores of four elements, and the bounds-status protocol.
#pragma once
#include <stdint.h>
#include "joinkit/device.cuh"

namespace jkp {

constexpr int kBlock = 256;                  // threads per block of every tiled kernel here
constexpr int kVec = 4;                      // elements per 16-byte (u32) vector
constexpr int kItems = 8;                    // elements per thread per tile
constexpr int kTile = kBlock * kItems;       // elements per tile (2048)
constexpr int kMaxCols = 8;                  // columns one multi-column launch handles
constexpr uint64_t kNoError = ~0ull;         // a bounds status word with nothing recorded

// Column pointers passed by value (the Rust side mirrors this: 8 source and 8 output
// addresses). Indexed only with compile-time indices (unrolled loops), so it stays in the
// kernel-parameter bank.
struct ColumnPtrs {
  uint64_t src[kMaxCols];
  uint64_t out[kMaxCols];
};

// Element j (0..kItems) of thread t in the tile at `tile`, in the vector layout: vector v =
// j / kVec covers kBlock * kVec consecutive elements, thread t holds four of them, so a warp's
// 16-byte loads of one vector are contiguous.
__device__ __forceinline__ uint64_t vec_pos(uint64_t tile, int j) {
  return tile + static_cast<uint64_t>(j / kVec) * (kBlock * kVec) + threadIdx.x * kVec + (j % kVec);
}

// Four consecutive elements through 16-byte accesses (p 16-byte aligned). Streaming hints:
// maps and outputs are touched once, so they should not evict a gather's source from L2.
__device__ __forceinline__ void load4(const uint32_t* p, uint32_t* v) {
  uint4 x = __ldcs(reinterpret_cast<const uint4*>(p));
  v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
}
__device__ __forceinline__ void load4(const uint64_t* p, uint64_t* v) {
  ulonglong2 a = __ldcs(reinterpret_cast<const ulonglong2*>(p));
  ulonglong2 b = __ldcs(reinterpret_cast<const ulonglong2*>(p) + 1);
  v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}
__device__ __forceinline__ void store4(uint32_t* p, const uint32_t* v) {
  __stcs(reinterpret_cast<uint4*>(p), make_uint4(v[0], v[1], v[2], v[3]));
}
__device__ __forceinline__ void store4(uint64_t* p, const uint64_t* v) {
  __stcs(reinterpret_cast<ulonglong2*>(p), make_ulonglong2(v[0], v[1]));
  __stcs(reinterpret_cast<ulonglong2*>(p) + 1, make_ulonglong2(v[2], v[3]));
}

// Records `position` as a bad input position: the status word keeps the smallest one, so
// both backends report the first bad element. A null status (trusted input, nothing to report)
// records nothing.
__device__ __forceinline__ void record_bad(uint64_t* status, uint64_t position) {
  if (status == nullptr) return;
  atomicMin(reinterpret_cast<unsigned long long*>(status), static_cast<unsigned long long>(position));
}

}  // namespace jkp
