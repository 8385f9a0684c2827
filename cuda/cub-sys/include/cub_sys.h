/* cub-sys: a C interface to CUB's device-wide algorithms.
 *
 * Every function follows CUB's temporary-storage protocol: called with temp == NULL it only
 * writes the bytes it needs to *temp_bytes; called again with that much device memory at temp it
 * queues the work on `stream` and returns. Return values are cudaError_t codes (0 = success).
 * Pointers are device pointers. Sizes are 64-bit; functions whose CUB algorithm takes a 32-bit
 * count return cudaErrorInvalidValue (1) for larger inputs instead of truncating.
 *
 * This header needs no CUDA toolkit: bindgen reads it through the stub types below. */
#ifndef CUB_SYS_H
#define CUB_SYS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#include <cuda_runtime_api.h>
typedef cudaError_t cubsys_status;
#else
typedef struct CUstream_st* cudaStream_t;
typedef int cubsys_status;
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Stable LSD radix sort of (key, value) pairs by key bits [begin_bit, end_bit). */
cubsys_status cubsys_sort_pairs_uint32_uint32(void* temp, size_t* temp_bytes, const uint32_t* keys_in, uint32_t* keys_out, const uint32_t* values_in, uint32_t* values_out, uint64_t num_items, int begin_bit, int end_bit, cudaStream_t stream);
cubsys_status cubsys_sort_pairs_uint32_uint64(void* temp, size_t* temp_bytes, const uint32_t* keys_in, uint32_t* keys_out, const uint64_t* values_in, uint64_t* values_out, uint64_t num_items, int begin_bit, int end_bit, cudaStream_t stream);
cubsys_status cubsys_sort_pairs_uint64_uint32(void* temp, size_t* temp_bytes, const uint64_t* keys_in, uint64_t* keys_out, const uint32_t* values_in, uint32_t* values_out, uint64_t num_items, int begin_bit, int end_bit, cudaStream_t stream);
cubsys_status cubsys_sort_pairs_uint64_uint64(void* temp, size_t* temp_bytes, const uint64_t* keys_in, uint64_t* keys_out, const uint64_t* values_in, uint64_t* values_out, uint64_t num_items, int begin_bit, int end_bit, cudaStream_t stream);

/* Stable LSD radix sort of keys by bits [begin_bit, end_bit). */
cubsys_status cubsys_sort_keys_uint32(void* temp, size_t* temp_bytes, const uint32_t* keys_in, uint32_t* keys_out, uint64_t num_items, int begin_bit, int end_bit, cudaStream_t stream);
cubsys_status cubsys_sort_keys_uint64(void* temp, size_t* temp_bytes, const uint64_t* keys_in, uint64_t* keys_out, uint64_t num_items, int begin_bit, int end_bit, cudaStream_t stream);

/* out[i] = in[0] + ... + in[i-1]; out[0] = 0 (wrapping). In place is allowed. */
cubsys_status cubsys_exclusive_sum_uint32(void* temp, size_t* temp_bytes, const uint32_t* in, uint32_t* out, uint64_t num_items, cudaStream_t stream);
cubsys_status cubsys_exclusive_sum_uint64(void* temp, size_t* temp_bytes, const uint64_t* in, uint64_t* out, uint64_t num_items, cudaStream_t stream);

/* num_levels - 1 equal-width bins over [lower, upper); samples outside are not counted.
 * Counts are 32-bit: callers keep num_samples below 2^32. */
cubsys_status cubsys_histogram_even_uint32(void* temp, size_t* temp_bytes, const uint32_t* samples, uint32_t* histogram, int num_levels, uint32_t lower, uint32_t upper, uint64_t num_samples, cudaStream_t stream);
cubsys_status cubsys_histogram_even_uint64(void* temp, size_t* temp_bytes, const uint64_t* samples, uint32_t* histogram, int num_levels, uint64_t lower, uint64_t upper, uint64_t num_samples, cudaStream_t stream);

/* Stable compaction: copies in[i] where flags[i] != 0 to out; writes the count to *num_selected. */
cubsys_status cubsys_select_flagged_uint32(void* temp, size_t* temp_bytes, const uint32_t* in, const uint8_t* flags, uint32_t* out, uint64_t* num_selected, uint64_t num_items, cudaStream_t stream);
cubsys_status cubsys_select_flagged_uint64(void* temp, size_t* temp_bytes, const uint64_t* in, const uint8_t* flags, uint64_t* out, uint64_t* num_selected, uint64_t num_items, cudaStream_t stream);

/* Run-length encoding: runs of equal consecutive values as (unique, count); *num_runs gets the
 * number of runs. CUB counts items in 32 bits: num_items must be below 2^31. */
cubsys_status cubsys_run_length_encode_uint32(void* temp, size_t* temp_bytes, const uint32_t* in, uint32_t* unique_out, uint32_t* counts_out, uint64_t* num_runs, uint64_t num_items, cudaStream_t stream);
cubsys_status cubsys_run_length_encode_uint64(void* temp, size_t* temp_bytes, const uint64_t* in, uint64_t* unique_out, uint32_t* counts_out, uint64_t* num_runs, uint64_t num_items, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* CUB_SYS_H */
