// Radix sorts (pairs and keys) over CUB, 64-bit item counts.
#include "cub_sys.h"
#include <cub/device/device_radix_sort.cuh>

#define SORT_PAIRS(K, V)                                                                        \
  extern "C" cubsys_status cubsys_sort_pairs_##K##_##V(                                         \
      void* temp, size_t* temp_bytes, const K##_t* keys_in, K##_t* keys_out,                    \
      const V##_t* values_in, V##_t* values_out, uint64_t num_items, int begin_bit,             \
      int end_bit, cudaStream_t stream) {                                                       \
    return cub::DeviceRadixSort::SortPairs(temp, *temp_bytes, keys_in, keys_out, values_in,     \
                                           values_out, num_items, begin_bit, end_bit, stream);  \
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
    return cub::DeviceRadixSort::SortKeys(temp, *temp_bytes, keys_in, keys_out, num_items,      \
                                          begin_bit, end_bit, stream);                          \
  }

SORT_KEYS(uint32)
SORT_KEYS(uint64)
