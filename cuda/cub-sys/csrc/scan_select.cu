// Scan, histogram, select-flagged and run-length encode over CUB.
#include "cub_sys.h"
#include <limits.h>
#include <cub/device/device_histogram.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#define SCAN(T)                                                                                 \
  extern "C" cubsys_status cubsys_exclusive_sum_##T(void* temp, size_t* temp_bytes,             \
                                                    const T##_t* in, T##_t* out,                \
                                                    uint64_t num_items, cudaStream_t stream) {  \
    return cub::DeviceScan::ExclusiveSum(temp, *temp_bytes, in, out, num_items, stream);        \
  }
SCAN(uint32)
SCAN(uint64)

#define HISTOGRAM(T)                                                                            \
  extern "C" cubsys_status cubsys_histogram_even_##T(                                           \
      void* temp, size_t* temp_bytes, const T##_t* samples, uint32_t* histogram,                \
      int num_levels, T##_t lower, T##_t upper, uint64_t num_samples, cudaStream_t stream) {    \
    return cub::DeviceHistogram::HistogramEven(temp, *temp_bytes, samples, histogram,           \
                                               num_levels, lower, upper,                        \
                                               static_cast<int64_t>(num_samples), stream);      \
  }
HISTOGRAM(uint32)
HISTOGRAM(uint64)

#define SELECT(T)                                                                               \
  extern "C" cubsys_status cubsys_select_flagged_##T(                                           \
      void* temp, size_t* temp_bytes, const T##_t* in, const uint8_t* flags, T##_t* out,        \
      uint64_t* num_selected, uint64_t num_items, cudaStream_t stream) {                        \
    return cub::DeviceSelect::Flagged(temp, *temp_bytes, in, flags, out, num_selected,          \
                                      static_cast<int64_t>(num_items), stream);                 \
  }
SELECT(uint32)
SELECT(uint64)

#define RLE(T)                                                                                  \
  extern "C" cubsys_status cubsys_run_length_encode_##T(                                        \
      void* temp, size_t* temp_bytes, const T##_t* in, T##_t* unique_out, uint32_t* counts_out, \
      uint64_t* num_runs, uint64_t num_items, cudaStream_t stream) {                            \
    if (num_items > static_cast<uint64_t>(INT_MAX)) return cudaErrorInvalidValue;               \
    return cub::DeviceRunLengthEncode::Encode(temp, *temp_bytes, in, unique_out, counts_out,    \
                                              num_runs, static_cast<int>(num_items), stream);   \
  }
RLE(uint32)
RLE(uint64)
