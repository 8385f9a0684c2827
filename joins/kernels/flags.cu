// Flag helpers that turn match counts into row selections for semi, anti and outer joins. Each
// has a CPU twin in src/flags.rs.
#include <stdint.h>
#include "joinkit/device.cuh"

// flags[i] = ((upper[i] > lower[i]) == want_match): rows with (or without) a match in a sorted
// range search.
extern "C" __global__ void range_flags_u32(const uint32_t* lower, const uint32_t* upper,
                                           uint32_t* flags, uint64_t n, uint32_t want_match) {
  for (uint64_t i = joinkit::global_thread_id(); i < n; i += joinkit::grid_stride())
    flags[i] = (upper[i] > lower[i]) == (want_match != 0);
}

// flags[i] = ((counts[i] != 0) == want_match).
extern "C" __global__ void count_flags_u32(const uint32_t* counts, uint32_t* flags, uint64_t n,
                                           uint32_t want_match) {
  for (uint64_t i = joinkit::global_thread_id(); i < n; i += joinkit::grid_stride())
    flags[i] = (counts[i] != 0) == (want_match != 0);
}
