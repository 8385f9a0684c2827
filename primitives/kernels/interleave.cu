// Two u32 columns as one column of u64 words and back: words[i] = lo[i] | hi[i] << 32, and the
// inverse. The partitioned hash join carries a pair of 4-byte payloads through its radix
// partition as one 8-byte column. CPU twin: src/interleave.rs.
//
// Bandwidth-bound, grid-stride. When all three columns are 16-byte aligned (the host says),
// each thread moves four rows at a time: one 16-byte load of lo and of hi, two 16-byte stores
// of words (and the reverse), then a scalar tail of up to three rows; otherwise row by row.
// Both kernels take the columns in the same order (lo, hi, words) so the host shares a launcher.
#include "common.cuh"

namespace {

using namespace jkp;

// quad(first row) for every kVec-row group (aligned columns only), then row(i) for the rows
// left, both grid-stride.
template <typename Quad, typename Row>
__device__ __forceinline__ void by_quads(uint64_t n, bool aligned, Quad quad, Row row) {
  const uint64_t first = joinkit::global_thread_id(), stride = joinkit::grid_stride();
  const uint64_t quads = aligned ? n / kVec : 0;
  for (uint64_t q = first; q < quads; q += stride) quad(q * kVec);
  for (uint64_t i = quads * kVec + first; i < n; i += stride) row(i);
}

__device__ __forceinline__ uint64_t word(uint32_t lo, uint32_t hi) {
  return static_cast<uint64_t>(lo) | (static_cast<uint64_t>(hi) << 32);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(jkp::kBlock)
    interleave_u32(const uint32_t* __restrict__ lo, const uint32_t* __restrict__ hi,
                   uint64_t* __restrict__ words, uint64_t n, int aligned) {
  by_quads(
      n, aligned != 0,
      [&](uint64_t p) {
        uint32_t l[kVec], h[kVec];
        uint64_t w[kVec];
        load4(lo + p, l);
        load4(hi + p, h);
#pragma unroll
        for (int j = 0; j < kVec; ++j) w[j] = word(l[j], h[j]);
        store4(words + p, w);
      },
      [&](uint64_t i) { words[i] = word(lo[i], hi[i]); });
}

extern "C" __global__ void __launch_bounds__(jkp::kBlock)
    deinterleave_u32(uint32_t* __restrict__ lo, uint32_t* __restrict__ hi,
                     const uint64_t* __restrict__ words, uint64_t n, int aligned) {
  by_quads(
      n, aligned != 0,
      [&](uint64_t p) {
        uint32_t l[kVec], h[kVec];
        uint64_t w[kVec];
        load4(words + p, w);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          l[j] = static_cast<uint32_t>(w[j]);
          h[j] = static_cast<uint32_t>(w[j] >> 32);
        }
        store4(lo + p, l);
        store4(hi + p, h);
      },
      [&](uint64_t i) {
        const uint64_t w = words[i];
        lo[i] = static_cast<uint32_t>(w);
        hi[i] = static_cast<uint32_t>(w >> 32);
      });
}
