// Radix sorts (pairs and keys) over CUB, 64-bit item counts.
#include "cub_sys.h"
#include <cub/device/device_radix_sort.cuh>

// CUB sizes its offsets by the count's type. Counts that fit 32 bits run the 32-bit-offset
// kernels: on an H200 one 8-bit pass over 2^28 u32 pairs takes 2.02 ms with them against
// 2.29 ms with 64-bit offsets (sm90 tuning gives 32-bit offsets 23 items per thread, 64-bit
// ones 17). The size query and the sort see the same count, so they pick the same kernels.
template <typename Sort>
static cubsys_status by_offset_width(uint64_t num_items, Sort sort) {
  if (num_items <= UINT32_MAX) return sort(static_cast<uint32_t>(num_items));
  return sort(num_items);
}

#define SORT_PAIRS(K, V)                                                                        \
  extern "C" cubsys_status cubsys_sort_pairs_##K##_##V(                                         \
      void* temp, size_t* temp_bytes, const K##_t* keys_in, K##_t* keys_out,                    \
      const V##_t* values_in, V##_t* values_out, uint64_t num_items, int begin_bit,             \
      int end_bit, cudaStream_t stream) {                                                       \
    return by_offset_width(num_items, [&](auto n) {                                             \
      return cub::DeviceRadixSort::SortPairs(temp, *temp_bytes, keys_in, keys_out, values_in,   \
                                             values_out, n, begin_bit, end_bit, stream);        \
    });                                                                                         \
  }

SORT_PAIRS(uint32, uint32)
SORT_PAIRS(uint32, uint64)
SORT_PAIRS(uint64, uint32)
SORT_PAIRS(uint64, uint64)

#define SORT_KEYS(K)                                                                            \
  extern "C" cubsys_status cubsys_sort_keys_##K(void* temp, size_t* temp_bytes,                 \
                                                const K##_t* keys_in, K##_t* keys_out,          \
                                                uint64_t num_items, int begin_bit, int end_bit, \
                                                cudaStream_t stream) {                          \
    return by_offset_width(num_items, [&](auto n) {                                             \
      return cub::DeviceRadixSort::SortKeys(temp, *temp_bytes, keys_in, keys_out, n, begin_bit, \
                                            end_bit, stream);                                   \
    });                                                                                         \
  }

SORT_KEYS(uint32)
SORT_KEYS(uint64)
