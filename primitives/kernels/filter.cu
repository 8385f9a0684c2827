// Predicate flags for compaction: flags[i] = 1 where a row passes, else 0, for the two shapes
// of predicate a scan filter needs (a column against constants, a column against a column).
// CPU twin: src/filter.rs. Bandwidth-bound and grid-stride: one read of each input column and
// one write of the flags.
#include "common.cuh"

namespace {

// flags[i] = lo <= col[i] < hi.
template <typename T>
__device__ void flag_range(const T* __restrict__ col, T lo, T hi, uint32_t* __restrict__ flags,
                           uint64_t n) {
  for (uint64_t i = joinkit::global_thread_id(); i < n; i += joinkit::grid_stride()) {
    const T v = col[i];
    flags[i] = (lo <= v) & (v < hi);
  }
}

// flags[i] = a[i] < b[i].
template <typename T>
__device__ void flag_less(const T* __restrict__ a, const T* __restrict__ b,
                          uint32_t* __restrict__ flags, uint64_t n) {
  for (uint64_t i = joinkit::global_thread_id(); i < n; i += joinkit::grid_stride()) {
    flags[i] = a[i] < b[i];
  }
}

}  // namespace

#define JKP_FILTER(T, NAME)                                                                  \
  extern "C" __global__ void __launch_bounds__(jkp::kBlock)                                   \
      flag_range_##NAME(const T* col, T lo, T hi, uint32_t* flags, uint64_t n) {             \
    flag_range<T>(col, lo, hi, flags, n);                                                      \
  }                                                                                            \
  extern "C" __global__ void __launch_bounds__(jkp::kBlock)                                   \
      flag_less_##NAME(const T* a, const T* b, uint32_t* flags, uint64_t n) {                \
    flag_less<T>(a, b, flags, n);                                                              \
  }

JKP_FILTER(uint32_t, u32)
JKP_FILTER(uint64_t, u64)
JKP_FILTER(int32_t, i32)
JKP_FILTER(int64_t, i64)
