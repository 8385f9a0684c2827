// Hash-table kernels: build (open addressing with CAS, chaining with atomic exchange), and the
// probe operations written once over any table view of joinkit/hashtable.cuh: count (per row
// and per tile), retrieve (into a window of the output, by tile offsets), contains, find, mark.
// Plus the random-access floors the benchmark compares against.
#include <stdint.h>

#include "joinkit/device.cuh"
#include "joinkit/hash.cuh"
#include "joinkit/hashtable.cuh"

namespace {

using joinkit::ht::RawTable;

// Probe tiles: a block handles kTile consecutive probe rows (kItems rounds of kBlock rows),
// so matches can be placed by (tile offset + in-tile prefix) without a per-row offset array.
// Must match TILE_ROWS / PROBE_BLOCK in src/cuda.rs.
constexpr unsigned kBlock = 256;
constexpr unsigned kItems = 4;
constexpr uint64_t kTile = static_cast<uint64_t>(kBlock) * kItems;

// Sum over the block; all threads call it, thread 0 gets the result. `smem` needs one slot per
// warp.
__device__ __forceinline__ uint64_t block_sum(uint64_t v, uint64_t* smem) {
  v = joinkit::warp_sum(v);
  if (joinkit::lane_id() == 0) smem[joinkit::warp_id()] = v;
  __syncthreads();
  uint64_t total = 0;
  if (threadIdx.x == 0) {
    const unsigned warps = (blockDim.x + joinkit::kWarpSize - 1) / joinkit::kWarpSize;
    for (unsigned w = 0; w < warps; ++w) total += smem[w];
  }
  __syncthreads();
  return total;
}

// Builds an open-addressing table. Each lane inserts its own keys step by step and, when its
// key is placed, takes the next one from its warp's batch of 32 (read coalesced, handed out by
// ballot and shuffle): a warp never idles behind its longest probe sequence. (With one key per
// lane per round, lanes waited for the round's longest sequence: ncu counted 12 of 32 active.)
// `rows` gives each key's build row (keys clustered by a hash partition), or is null: key i is
// row i. Block b inserts keys [b * tile, (b + 1) * tile).
template <typename Table, typename K>
__device__ void build_open(const RawTable& raw, const K* keys, const uint32_t* rows, uint64_t n,
                           uint64_t tile, uint32_t* status) {
  using joinkit::kFullMask;
  using joinkit::ht::kStatusDuplicate;
  using joinkit::ht::kStatusFull;
  const Table table(raw);
  const uint32_t lane = joinkit::lane_id();
  const uint32_t lanes_before = (1u << lane) - 1;
  auto full = [&] { return (*reinterpret_cast<const volatile uint32_t*>(status) & kStatusFull) != 0; };
  const uint64_t tile_end = min(n, (static_cast<uint64_t>(blockIdx.x) + 1) * tile);
  // Keys of the batch at `first` (0 past the tile's end or once the table is full);
  // warp-uniform.
  auto batch_len = [&](uint64_t first) -> uint32_t {
    const bool stop = __any_sync(kFullMask, full());
    return first < tile_end && !stop
               ? static_cast<uint32_t>(tile_end - first < 32 ? tile_end - first : 32)
               : 0u;
  };
  // The warp's batch: keys [batch, batch + avail), key batch + j held by lane j; lanes
  // [0, taken) of it are handed out.
  uint64_t batch = static_cast<uint64_t>(blockIdx.x) * tile + threadIdx.x - lane;
  uint32_t avail = batch_len(batch), taken = 0;
  K held = lane < avail ? keys[batch + lane] : K(0);
  uint32_t held_row = rows != nullptr && lane < avail ? rows[batch + lane] : 0u;
  // This lane's key in progress.
  bool busy = false;
  K key = 0;
  uint32_t row = 0;
  uint64_t steps = 0;
  joinkit::ht::ProbeSeq seq{0, 1, 1};
  uint32_t local_max = 0, local_status = 0;
  for (;;) {
    const uint32_t idle = __ballot_sync(kFullMask, !busy);
    if (idle != 0 && taken < avail) {  // warp-uniform
      const uint32_t src = taken + __popc(idle & lanes_before);
      const K k = __shfl_sync(kFullMask, held, src & 31);
      const uint32_t r = rows != nullptr ? __shfl_sync(kFullMask, held_row, src & 31)
                                         : static_cast<uint32_t>(batch + src);
      if (!busy && src < avail) {
        key = k;
        row = r;
        seq = table.start(k);
        steps = 0;
        busy = true;
      }
      taken = min(avail, taken + __popc(idle));
    }
    if (taken == avail && avail != 0) {  // batch handed out: read the next
      batch += blockDim.x;
      avail = batch_len(batch);
      taken = 0;
      held = lane < avail ? keys[batch + lane] : K(0);
      held_row = rows != nullptr && lane < avail ? rows[batch + lane] : 0u;
    }
    if (!__any_sync(kFullMask, busy)) {
      if (avail == 0) break;
      continue;
    }
    if (busy) {
      const int r = table.insert_step(seq, key, row);
      ++steps;
      if (r == joinkit::ht::kStepInserted) {
        local_max = steps > local_max ? static_cast<uint32_t>(steps) : local_max;
        busy = false;
      } else if (r == joinkit::ht::kStepDuplicate) {
        local_status |= kStatusDuplicate;
        busy = false;
      } else if (steps >= table.capacity || ((steps & 63) == 0 && full())) {
        local_status |= kStatusFull;
        atomicOr(status, kStatusFull);  // stop the others
        busy = false;
      } else {
        seq.advance();
      }
    }
  }
  // Every lane leaves the loop together (the exit is warp-uniform): full-warp reductions.
  local_max = __reduce_max_sync(kFullMask, local_max);
  local_status = __reduce_or_sync(kFullMask, local_status);
  if (lane == 0) {
    if (local_max) atomicMax(status + 1, local_max);
    if (local_status) atomicOr(status, local_status);
  }
}

template <typename K>
__device__ void build_chained(const RawTable& raw, const K* keys, uint64_t n) {
  const joinkit::ht::ChainedTable<K> table(raw);
  for (uint64_t i = joinkit::global_thread_id(); i < n; i += joinkit::grid_stride())
    table.insert(keys[i], static_cast<uint32_t>(i));
}

// counts[r] = matches of probe row r; tile_totals[t] = matches of tile t; tile_totals[tiles] = 0
// (so an exclusive scan of tiles + 1 entries ends with the grand total).
template <typename Table, typename K>
__device__ void count(const RawTable& raw, const K* probe, uint64_t n, uint32_t* counts,
                      uint64_t* tile_totals, uint64_t tiles) {
  __shared__ uint64_t smem[joinkit::kWarpSize];
  const Table table(raw);
  for (uint64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    uint64_t mine = 0;
#pragma unroll
    for (unsigned k = 0; k < kItems; ++k) {
      const uint64_t r = tile * kTile + k * kBlock + threadIdx.x;
      if (r < n) {
        uint32_t c = 0;
        table.for_each_match(probe[r], [&](uint32_t) {
          ++c;
          return true;
        });
        counts[r] = c;
        mine += c;
      }
    }
    const uint64_t total = block_sum(mine, smem);
    if (threadIdx.x == 0) tile_totals[tile] = total;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) tile_totals[tiles] = 0;
}

// Writes the pairs whose output positions fall in [win_lo, win_lo + win_len) to
// out_*[position - win_lo]. Position of the j-th match of row r: tile_offsets[tile] + matches of
// the tile's earlier rows + j. At most counts[r] matches of a row are written.
template <typename Table, typename K>
__device__ void retrieve(const RawTable& raw, const K* probe, uint64_t n, const uint32_t* counts,
                         const uint64_t* tile_offsets, uint64_t tiles, uint64_t win_lo,
                         uint64_t win_len, uint32_t* out_probe, uint32_t* out_build) {
  __shared__ uint64_t smem[joinkit::kWarpSize + 1];
  const Table table(raw);
  const uint64_t win_hi = win_lo + win_len;
  for (uint64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    uint64_t base = tile_offsets[tile];
    const uint64_t end = tile_offsets[tile + 1];
    if (end <= win_lo || base >= win_hi) continue;  // the same for the whole block
    for (unsigned k = 0; k < kItems; ++k) {
      const uint64_t r = tile * kTile + k * kBlock + threadIdx.x;
      const uint32_t c = r < n ? counts[r] : 0;
      uint64_t round_total;
      const uint64_t pos =
          base + joinkit::block_exclusive_scan<uint64_t>(c, smem, &round_total);
      if (c != 0 && pos < win_hi && pos + c > win_lo) {
        uint32_t j = 0;
        table.for_each_match(probe[r], [&](uint32_t row) {
          const uint64_t p = pos + j;
          if (p >= win_lo && p < win_hi) {
            out_probe[p - win_lo] = static_cast<uint32_t>(r);
            out_build[p - win_lo] = row;
          }
          ++j;
          return j < c && p + 1 < win_hi;
        });
      }
      base += round_total;
    }
  }
}

// out[r] = 1 when probe row r has a match, else 0.
template <typename Table, typename K>
__device__ void contains(const RawTable& raw, const K* probe, uint64_t n, uint32_t* out) {
  const Table table(raw);
  for (uint64_t r = joinkit::global_thread_id(); r < n; r += joinkit::grid_stride()) {
    uint32_t hit = 0;
    table.for_each_match(probe[r], [&](uint32_t) {
      hit = 1;
      return false;
    });
    out[r] = hit;
  }
}

// out[r] = the first matching build row in probe order, or kEmptyRow.
template <typename Table, typename K>
__device__ void find(const RawTable& raw, const K* probe, uint64_t n, uint32_t* out) {
  const Table table(raw);
  for (uint64_t r = joinkit::global_thread_id(); r < n; r += joinkit::grid_stride()) {
    uint32_t found = joinkit::ht::kEmptyRow;
    table.for_each_match(probe[r], [&](uint32_t row) {
      found = row;
      return false;
    });
    out[r] = found;
  }
}

// flags[b] = 1 for every build row b matched by some probe row (others untouched).
template <typename Table, typename K>
__device__ __forceinline__ void mark_key(const Table& table, K key, uint32_t* flags) {
  table.for_each_match(key, [&](uint32_t row) {
    if (flags[row] == 0) flags[row] = 1;  // every writer stores the same value
    return true;
  });
}

template <typename Table, typename K>
__device__ void mark(const RawTable& raw, const K* probe, uint64_t n, uint32_t* flags) {
  const Table table(raw);
  for (uint64_t r = joinkit::global_thread_id(); r < n; r += joinkit::grid_stride())
    mark_key(table, probe[r], flags);
}

// `mark` for small tables probed by many rows (Auto's sample of the left keys against every
// right key): each block first sets two bits per build key in a 256 Ki-bit filter in shared
// memory, and a probe row reads the table only where both its bits are set. Without it, such
// probes are bound by the L1's random-access rate (ncu on an H200: SM 80 % busy, L1 hits 95 %).
// With one bit a key in 64 Ki bits, one probe key in 16 passed (4096 build keys), so nearly
// every warp had a lane in the probe path for every batch slot, and the warp waited on that
// lane's table reads, one slot after another (ncu, 2^27 8-byte probe keys: 856 us, DRAM 26 %).
// With at most kFilterRows build keys, at most an eighth of the bits are set, and a missing
// probe key passes with a chance of at most 1/64 (1/4096 for 4096 build keys). No false
// negatives: every build key sets both its bits.
constexpr uint32_t kFilterWords = 8192;  // 256 Ki bits, 32 KiB; Rust: FILTER_ROWS sizes for it
constexpr uint32_t kFilterBits = kFilterWords * 32;
constexpr uint32_t kFilterSeed = 0x27d4eb2fu;
constexpr uint32_t kFilterBatch = 8;  // probe keys a thread loads before checking them

// The filter's two bits of a key, from one 32-bit hash: its low 18 bits, and a multiplicative
// remix's high 18 bits.
template <typename K>
__device__ __forceinline__ uint2 filter_bits(K key, uint32_t seed) {
  const uint32_t h = joinkit::hash_key(key, seed ^ kFilterSeed);
  return make_uint2(h & (kFilterBits - 1), (h * 0x9e3779b1u) >> (32 - 18));
}
static_assert(kFilterBits == 1u << 18, "filter_bits takes 18-bit positions");

template <typename Table, typename K>
__device__ void mark_filtered(const RawTable& raw, const K* build, uint64_t rows, const K* probe,
                              uint64_t n, uint32_t* flags) {
  __shared__ uint32_t filter[kFilterWords];
  for (uint32_t i = threadIdx.x; i < kFilterWords; i += blockDim.x) filter[i] = 0;
  __syncthreads();
  for (uint64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const uint2 bits = filter_bits(build[r], raw.seed);
    atomicOr(&filter[bits.x >> 5], 1u << (bits.x & 31));
    atomicOr(&filter[bits.y >> 5], 1u << (bits.y & 31));
  }
  __syncthreads();
  const Table table(raw);
  // Most keys stop at the filter, so the loop is bound by its probe-key loads: kFilterBatch
  // independent ones a thread in flight.
  const auto check = [&](K key) {
    const uint2 bits = filter_bits(key, raw.seed);
    const uint32_t both = (filter[bits.x >> 5] >> (bits.x & 31)) & (filter[bits.y >> 5] >> (bits.y & 31));
    if ((both & 1u) != 0) mark_key(table, key, flags);
  };
  const uint64_t stride = joinkit::grid_stride();
  uint64_t r = joinkit::global_thread_id();
  for (; r + (kFilterBatch - 1) * stride < n; r += kFilterBatch * stride) {
    K keys[kFilterBatch];
#pragma unroll
    for (uint32_t j = 0; j < kFilterBatch; ++j) keys[j] = probe[r + j * stride];
#pragma unroll
    for (uint32_t j = 0; j < kFilterBatch; ++j) check(keys[j]);
  }
  for (; r < n; r += stride) check(probe[r]);
}

// Random-access floors: one random 8-byte write (read) per key into (from) a table of m words,
// at the slot a hash table would use first.
template <typename K>
__device__ void floor_write(const K* keys, uint64_t n, uint64_t* table, uint64_t m, uint32_t seed) {
  for (uint64_t i = joinkit::global_thread_id(); i < n; i += joinkit::grid_stride()) {
    const K key = keys[i];
    table[joinkit::ht::reduce(joinkit::hash_key(key, seed), m)] =
        static_cast<uint64_t>(key) ^ (i << 32);
  }
}

template <typename K>
__device__ void floor_read(const K* keys, uint64_t n, const uint64_t* table, uint64_t m,
                           uint32_t seed, uint32_t* out) {
  for (uint64_t i = joinkit::global_thread_id(); i < n; i += joinkit::grid_stride())
    out[i] = static_cast<uint32_t>(table[joinkit::ht::reduce(joinkit::hash_key(keys[i], seed), m)]);
}

}  // namespace

using joinkit::ht::ChainedTable;
using joinkit::ht::DoubleHashing;
using joinkit::ht::HashRowTable;
using joinkit::ht::KeyValueTable;
using joinkit::ht::LinearProbing;

// Entry points: ht_<op>_<table>_<key>, table in kv_linear, kv_double, hr_linear, hr_double,
// chained; key u32 or u64.
using KvLinearU32 = KeyValueTable<uint32_t, LinearProbing>;
using KvDoubleU32 = KeyValueTable<uint32_t, DoubleHashing>;
using HrLinearU32 = HashRowTable<uint32_t, LinearProbing>;
using HrDoubleU32 = HashRowTable<uint32_t, DoubleHashing>;
using KvLinearU64 = KeyValueTable<uint64_t, LinearProbing>;
using KvDoubleU64 = KeyValueTable<uint64_t, DoubleHashing>;
using HrLinearU64 = HashRowTable<uint64_t, LinearProbing>;
using HrDoubleU64 = HashRowTable<uint64_t, DoubleHashing>;
using ChainedU32 = ChainedTable<uint32_t>;
using ChainedU64 = ChainedTable<uint64_t>;

#define JK_PROBE_OPS(NAME, TABLE, SUF, KT)                                                      \
  extern "C" __global__ void __launch_bounds__(kBlock)                                         \
      ht_count_##NAME##_##SUF(RawTable t, const KT* p, uint64_t n, uint32_t* counts,           \
                              uint64_t* tile_totals, uint64_t tiles) {                         \
    count<TABLE>(t, p, n, counts, tile_totals, tiles);                                         \
  }                                                                                            \
  extern "C" __global__ void __launch_bounds__(kBlock) ht_retrieve_##NAME##_##SUF(             \
      RawTable t, const KT* p, uint64_t n, const uint32_t* counts, const uint64_t* offsets,    \
      uint64_t tiles, uint64_t win_lo, uint64_t win_len, uint32_t* out_probe,                  \
      uint32_t* out_build) {                                                                   \
    retrieve<TABLE>(t, p, n, counts, offsets, tiles, win_lo, win_len, out_probe, out_build);   \
  }                                                                                            \
  extern "C" __global__ void ht_contains_##NAME##_##SUF(RawTable t, const KT* p, uint64_t n,   \
                                                        uint32_t* out) {                       \
    contains<TABLE>(t, p, n, out);                                                             \
  }                                                                                            \
  extern "C" __global__ void ht_find_##NAME##_##SUF(RawTable t, const KT* p, uint64_t n,       \
                                                    uint32_t* out) {                           \
    find<TABLE>(t, p, n, out);                                                                 \
  }                                                                                            \
  extern "C" __global__ void ht_mark_##NAME##_##SUF(RawTable t, const KT* p, uint64_t n,       \
                                                    uint32_t* flags) {                         \
    mark<TABLE>(t, p, n, flags);                                                               \
  }                                                                                            \
  extern "C" __global__ void ht_mark_filtered_##NAME##_##SUF(                                  \
      RawTable t, const KT* build, uint64_t rows, const KT* p, uint64_t n, uint32_t* flags) {  \
    mark_filtered<TABLE>(t, build, rows, p, n, flags);                                         \
  }

#define JK_OPEN_BUILD(NAME, TABLE, SUF, KT)                                                     \
  extern "C" __global__ void ht_build_##NAME##_##SUF(RawTable t, const KT* keys,               \
                                                     const uint32_t* rows, uint64_t n,         \
                                                     uint64_t tile, uint32_t* status) {        \
    build_open<TABLE>(t, keys, rows, n, tile, status);                                         \
  }

JK_OPEN_BUILD(kv_linear, KvLinearU32, u32, uint32_t)
JK_OPEN_BUILD(kv_double, KvDoubleU32, u32, uint32_t)
JK_OPEN_BUILD(hr_linear, HrLinearU32, u32, uint32_t)
JK_OPEN_BUILD(hr_double, HrDoubleU32, u32, uint32_t)
JK_OPEN_BUILD(kv_linear, KvLinearU64, u64, uint64_t)
JK_OPEN_BUILD(kv_double, KvDoubleU64, u64, uint64_t)
JK_OPEN_BUILD(hr_linear, HrLinearU64, u64, uint64_t)
JK_OPEN_BUILD(hr_double, HrDoubleU64, u64, uint64_t)
JK_PROBE_OPS(kv_linear, KvLinearU32, u32, uint32_t)
JK_PROBE_OPS(kv_double, KvDoubleU32, u32, uint32_t)
JK_PROBE_OPS(hr_linear, HrLinearU32, u32, uint32_t)
JK_PROBE_OPS(hr_double, HrDoubleU32, u32, uint32_t)
JK_PROBE_OPS(chained, ChainedU32, u32, uint32_t)
JK_PROBE_OPS(kv_linear, KvLinearU64, u64, uint64_t)
JK_PROBE_OPS(kv_double, KvDoubleU64, u64, uint64_t)
JK_PROBE_OPS(hr_linear, HrLinearU64, u64, uint64_t)
JK_PROBE_OPS(hr_double, HrDoubleU64, u64, uint64_t)
JK_PROBE_OPS(chained, ChainedU64, u64, uint64_t)

extern "C" __global__ void ht_build_chained_u32(RawTable t, const uint32_t* keys, uint64_t n) {
  build_chained(t, keys, n);
}
extern "C" __global__ void ht_build_chained_u64(RawTable t, const uint64_t* keys, uint64_t n) {
  build_chained(t, keys, n);
}

extern "C" __global__ void ht_floor_write_u32(const uint32_t* keys, uint64_t n, uint64_t* table,
                                                 uint64_t m, uint32_t seed) {
  floor_write(keys, n, table, m, seed);
}
extern "C" __global__ void ht_floor_write_u64(const uint64_t* keys, uint64_t n, uint64_t* table,
                                                 uint64_t m, uint32_t seed) {
  floor_write(keys, n, table, m, seed);
}
extern "C" __global__ void ht_floor_read_u32(const uint32_t* keys, uint64_t n,
                                                const uint64_t* table, uint64_t m, uint32_t seed,
                                                uint32_t* out) {
  floor_read(keys, n, table, m, seed, out);
}
extern "C" __global__ void ht_floor_read_u64(const uint64_t* keys, uint64_t n,
                                                const uint64_t* table, uint64_t m, uint32_t seed,
                                                uint32_t* out) {
  floor_read(keys, n, table, m, seed, out);
}
