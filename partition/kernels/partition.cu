// Partitioning kernels: per-chunk digit histograms, a scan of those histograms, a tile-ranking
// scatter (stable, writes contiguous runs per partition), offsets of a sorted column, and the
// bucket-chain partition with a global bucket pool.
//
// Shape shared with src/cuda.rs (keep the two in step):
// - blocks of kThreads = 256 threads; a tile is kThreads * ITEMS elements;
// - the grid is `chunks` blocks; block c owns rows [c * chunk_rows, (c + 1) * chunk_rows), a
//   whole number of tiles of every tile size in use;
// - counts[d * chunks + c] is the number of elements of chunk c in partition d (digit-major, so
//   a per-row scan gives each chunk its place inside the partition).
//
// The scatter (`sweep`) copies a tile of keys and columns into shared memory (cp.async: no
// register staging), as large as 64 KB allows (8192 rows of 4-byte keys and payloads): the
// larger the tile, the longer each partition's run in it and the better its writes coalesce.
// Within a tile, elements are ranked stably by digit: each warp ranks its 32 * ITEMS
// consecutive elements with ballots (one counter update per distinct digit and item), warps are
// then combined per digit; the ranking becomes a map from each sorted position to its tile
// element, so consecutive threads write consecutive addresses of one partition's run, reading
// every column straight from the tile.
#include <stdint.h>

#include "joinkit/device.cuh"
#include "joinkit/hash.cuh"

namespace {

using joinkit::kFullMask;
using joinkit::kWarpSize;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kMaxColumns = 16;
constexpr uint32_t kNoBucket = 0xffffffffu;
constexpr uint32_t kInvalid = 0xffffffffu;  // digit of a lane past the end of the input

// Digits each thread owns in the per-digit steps: RADIX / kThreads, and one for the small
// class (16 digits), whose threads past the 16th own none.
template <int RADIX>
__host__ __device__ constexpr int digits_per_thread() {
  return RADIX >= kThreads ? RADIX / kThreads : 1;
}

template <int RADIX>
struct Shape;
template <>
struct Shape<256> {
  static constexpr int kItems = 16;
};
template <>
struct Shape<1024> {
  static constexpr int kItems = 8;
};

// Partition of a key: bits [shift, shift + log2(mask + 1)) (kind 0), or the seeded murmur hash
// mapped onto [0, fanout) by a multiply-shift (kind 1), or that hash of the key's low 32 bits
// as a 4-byte key (kind 2: 8-byte keys narrowed as they are partitioned). Mirrors `DigitFn` in
// src/cuda.rs.
struct DigitFn {
  uint32_t kind;
  uint32_t shift;
  uint32_t mask;
  uint32_t seed;
  uint32_t fanout;

  template <typename K>
  __device__ __forceinline__ uint32_t operator()(K key) const {
    if (kind == 0) return static_cast<uint32_t>(key >> shift) & mask;
    const uint32_t h = kind == 1 ? joinkit::hash_key(key, seed)
                                 : joinkit::hash_key(static_cast<uint32_t>(key), seed);
    return static_cast<uint32_t>((static_cast<uint64_t>(h) * fanout) >> 32);
  }
};

// Columns moved along with the keys: src (0 = write the row index plus id_base instead), dst,
// width in bytes (4 or 8). Passed by value. Mirrors `Columns` in src/cuda.rs.
struct Columns {
  uint64_t src[kMaxColumns];
  uint64_t dst[kMaxColumns];
  uint32_t width[kMaxColumns];
  uint32_t count;
  uint64_t id_base;
};

// Where the distributed join's partition by rank writes its membership bitmaps instead of row
// ids: partition d's bitmap is words [d * per_partition, (d + 1) * per_partition), bit r % 32 of
// word r / 32 set when row r goes to d. `words` is null where none are asked for. Mirrors the
// `members` and `member_words` arguments in src/cuda.rs.
struct Members {
  uint32_t* words;
  uint64_t per_partition;
};

template <int RADIX>
struct TileSmem {
  static constexpr int kItems = Shape<RADIX>::kItems;
  static constexpr int kTile = kThreads * kItems;
  static constexpr int kDpt = digits_per_thread<RADIX>();
  // One column of the tile in partition order (any width up to 8 bytes).
  uint64_t buf[kTile];
  union {
    // Per-warp digit counters while ranking (at most kTile, so 16 bits suffice).
    uint16_t warp_count[kWarps][RADIX];
    // Bucket-chain reservations of the tile, once ranking is done.
    struct {
      uint32_t avail[RADIX];
      uint64_t fresh[RADIX];
    } bucket;
  } u;
  uint16_t digit[kTile];  // digit of each staged element
  uint64_t base[RADIX];   // global position of the tile's first element of each digit
  uint16_t start[RADIX];  // tile-local start of each digit's run
  uint64_t scan[kWarpSize + 1];
};

// Position of item j of this thread inside a tile of kThreads * ITEMS elements (warp-striped:
// coalesced per warp, and (warp, j, lane) order is tile order).
template <int ITEMS>
__device__ __forceinline__ uint32_t item_index(int j) {
  return joinkit::warp_id() * kWarpSize * ITEMS + j * kWarpSize + joinkit::lane_id();
}

// The lanes of the warp holding the same digit as this one (valid digits only: lanes past the
// end, kInvalid, match no one). One ballot per digit bit, `bits` of them (the digits lie below
// 2^bits: 2 for a fan-out of 4): plain votes, cheaper than __match_any_sync, which keeps the
// shared-memory pipe free for the ranking's counters.
template <int RADIX>
__device__ __forceinline__ unsigned match_digit(uint32_t d, int bits) {
  constexpr int kBits = RADIX == 16 ? 4 : RADIX == 256 ? 8 : 10;
  unsigned peers = __ballot_sync(kFullMask, d != kInvalid);
#pragma unroll
  for (int b = 0; b < kBits; ++b) {
    if (b >= bits) break;
    const bool bit = (d >> b) & 1u;
    const unsigned m = __ballot_sync(kFullMask, bit);
    peers &= bit ? m : ~m;
  }
  return peers;
}

// Ranks a tile whose digits are in `slot` (kInvalid past the end). On return slot[j] holds
// (digit << 16) | pos, pos being the element's place in the tile sorted stably by digit (still
// kInvalid past the end); start[d] holds the start of digit d's run and total[k] the count of
// the k-th digit this thread owns (digits threadIdx.x * kDpt + k). Item j of lane l of warp w
// is tile element item_index<ITEMS>(j), so the ranking is stable. The digits lie below 2^bits.
template <int RADIX, int ITEMS>
__device__ __forceinline__ void rank_tile(uint16_t (&warp_count)[kWarps][RADIX], uint16_t* start,
                                          uint64_t* scan, uint32_t (&slot)[ITEMS],
                                          uint32_t (&total)[digits_per_thread<RADIX>()], int bits) {
  constexpr int kDpt = digits_per_thread<RADIX>();
  const unsigned lane = joinkit::lane_id();
  const unsigned warp = joinkit::warp_id();
  for (int d = lane; d < RADIX; d += kWarpSize) warp_count[warp][d] = 0;
  __syncwarp();
  const unsigned lt = (1u << lane) - 1u;
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const uint32_t d = slot[j];
    const unsigned peers = match_digit<RADIX>(d, bits);
    uint32_t before = 0;
    if (d != kInvalid) before = warp_count[warp][d];
    __syncwarp();
    // The lowest lane of each group of equal digits advances the warp's counter.
    if (d != kInvalid && (peers & lt) == 0)
      warp_count[warp][d] = static_cast<uint16_t>(before + __popc(peers));
    __syncwarp();
    if (d != kInvalid) slot[j] = (d << 16) | (before + __popc(peers & lt));
  }
  __syncthreads();
  // Per digit: exclusive prefix over warps, then over digits.
  uint64_t sum = 0;
#pragma unroll
  for (int k = 0; k < kDpt; ++k) {
    const int d = threadIdx.x * kDpt + k;
    uint32_t run = 0;
    if (d < RADIX) {  // the small class's threads past its digits own none
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const uint32_t c = warp_count[w][d];
        warp_count[w][d] = static_cast<uint16_t>(run);
        run += c;
      }
    }
    total[k] = run;
    sum += run;
  }
  uint64_t all;
  uint64_t excl = joinkit::block_exclusive_scan<uint64_t>(sum, scan, &all);
#pragma unroll
  for (int k = 0; k < kDpt; ++k) {
    if (threadIdx.x * kDpt + k < RADIX) start[threadIdx.x * kDpt + k] = static_cast<uint16_t>(excl);
    excl += total[k];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    if (slot[j] != kInvalid) {
      const uint32_t d = slot[j] >> 16;
      slot[j] += start[d] + warp_count[warp][d];
    }
  }
}

__device__ __forceinline__ uint32_t pos_of(uint32_t slot) { return slot & 0xffffu; }

// Bits that hold every digit below `fanout`.
__device__ __forceinline__ int digit_bits(uint32_t fanout) {
  return fanout <= 1 ? 0 : 32 - __clz(fanout - 1);
}

// Loads the tile's keys, computes their digits into `slot` (kInvalid past the end) and parks the
// keys in the staging buffer in input order for stage_keys.
template <typename K, int RADIX>
__device__ __forceinline__ void load_tile(const K* __restrict__ keys, uint64_t begin,
                                          uint32_t count, const DigitFn& fn, K* stage,
                                          uint32_t (&slot)[Shape<RADIX>::kItems]) {
  constexpr int kItems = Shape<RADIX>::kItems;
  K key[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const uint32_t idx = item_index<kItems>(j);
    key[j] = idx < count ? keys[begin + idx] : K(0);
  }
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const uint32_t idx = item_index<kItems>(j);
    slot[j] = idx < count ? fn(key[j]) : kInvalid;
    if (idx < count) stage[idx] = key[j];
  }
}

// Destination of staged element i (digit d, rank r inside the tile's run of d) in a bucket
// chain: the head bucket's free slots first, then the freshly linked buckets.
struct BucketDest {
  template <int RADIX>
  __device__ __forceinline__ uint64_t operator()(const TileSmem<RADIX>& s, uint32_t d,
                                                 uint32_t r) const {
    const uint32_t avail = s.u.bucket.avail[d];
    if (r < avail) return s.base[d] + r;
    const uint64_t fresh = s.u.bucket.fresh[d];
    return fresh == ~0ull ? ~0ull : fresh + (r - avail);  // ~0: pool exhausted, dropped
  }
};

// Stages one column of the tile in digit order and writes it out as contiguous runs.
template <typename V, int RADIX, typename Dest>
__device__ __forceinline__ void move_column(TileSmem<RADIX>& s, uint64_t src, uint64_t dst,
                                            uint64_t id_base, uint64_t begin, uint32_t count,
                                            const uint32_t (&slot)[Shape<RADIX>::kItems],
                                            const Dest& dest) {
  constexpr int kItems = Shape<RADIX>::kItems;
  const V* in = reinterpret_cast<const V*>(src);
  V v[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const uint32_t idx = item_index<kItems>(j);
    if (idx < count)
      v[j] = in != nullptr ? in[begin + idx] : static_cast<V>(id_base + begin + idx);
  }
  V* staged = reinterpret_cast<V*>(s.buf);
  __syncthreads();  // the staging buffer is free
#pragma unroll
  for (int j = 0; j < kItems; ++j)
    if (slot[j] != kInvalid) staged[pos_of(slot[j])] = v[j];
  __syncthreads();
  V* out = reinterpret_cast<V*>(dst);
  for (uint32_t i = threadIdx.x; i < count; i += kThreads) {
    const uint32_t d = s.digit[i];
    const uint64_t at = dest(s, d, i - s.start[d]);
    if (at != ~0ull) out[at] = staged[i];
  }
}

template <int RADIX, typename Dest>
__device__ __forceinline__ void move_columns(TileSmem<RADIX>& s, const Columns& cols,
                                             uint64_t begin, uint32_t count,
                                             const uint32_t (&slot)[Shape<RADIX>::kItems],
                                             const Dest& dest) {
  for (uint32_t c = 0; c < cols.count; ++c) {
    const uint64_t src = cols.src[c], dst = cols.dst[c];
    if (cols.width[c] == 4)
      move_column<uint32_t, RADIX>(s, src, dst, cols.id_base, begin, count, slot, dest);
    else
      move_column<uint64_t, RADIX>(s, src, dst, cols.id_base, begin, count, slot, dest);
  }
}

// Moves the keys parked by load_tile into digit order, recording each staged element's digit.
template <typename K, int RADIX>
__device__ __forceinline__ void stage_keys(TileSmem<RADIX>& s,
                                           const uint32_t (&slot)[Shape<RADIX>::kItems]) {
  constexpr int kItems = Shape<RADIX>::kItems;
  K* staged = reinterpret_cast<K*>(s.buf);
  K key[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j)
    if (slot[j] != kInvalid) key[j] = staged[item_index<kItems>(j)];  // this thread's own
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (slot[j] != kInvalid) {
      staged[pos_of(slot[j])] = key[j];
      s.digit[pos_of(slot[j])] = static_cast<uint16_t>(slot[j] >> 16);
    }
  }
}

// Per-chunk digit histograms: counts[d * gridDim.x + blockIdx.x] for d < fn.fanout. Each thread
// reads 16-byte vectors and counts runs of equal digits in registers before adding them to its
// warp's counters, so sorted or constant keys cost one shared atomic per run, not per key.
// With kWindow, *outside is set when a key lies outside [window, window + 2^32): the keys whose
// low 32 bits the scatter writes must all lie in one such window for those to be one-to-one.
template <typename K, int RADIX, bool kWindow = false>
__device__ void histogram(const K* __restrict__ keys, uint64_t n, DigitFn fn, uint64_t* counts,
                          uint64_t chunk_rows, uint64_t window = 0,
                          uint32_t* outside = nullptr) {
  // Per-warp counters: a chunk holds fewer than 2^31 elements (the host sizes chunks so).
  __shared__ uint32_t h[kWarps][RADIX];
  for (int i = threadIdx.x; i < kWarps * RADIX; i += kThreads) (&h[0][0])[i] = 0;
  __syncthreads();
  uint32_t* mine = h[joinkit::warp_id()];
  uint32_t run_digit = kInvalid, run = 0;
  bool out_of_window = false;
  auto count = [&](K key) {
    if (kWindow) out_of_window |= ((static_cast<uint64_t>(key) - window) >> 32) != 0;
    const uint32_t d = fn(key);
    if (d == run_digit) {
      ++run;
    } else {
      if (run != 0) atomicAdd(&mine[run_digit], run);
      run_digit = d;
      run = 1;
    }
  };
  const uint64_t begin = static_cast<uint64_t>(blockIdx.x) * chunk_rows;
  const uint64_t end = min(n, begin + chunk_rows);
  uint64_t tail = begin;
  if ((reinterpret_cast<uintptr_t>(keys + begin) & 15) == 0) {
    constexpr int kVec = 16 / sizeof(K);
    constexpr int kUnroll = 8;  // 128 bytes in flight per thread: DRAM latency needs it
    const uint64_t vecs = (end - begin) / kVec;
    const uint4* v = reinterpret_cast<const uint4*>(keys + begin);
    for (uint64_t i = threadIdx.x; i < vecs; i += kThreads * kUnroll) {
      uint4 buf[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (i + u * kThreads < vecs) buf[u] = v[i + u * kThreads];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (i + u * kThreads < vecs) {
          const K* k = reinterpret_cast<const K*>(&buf[u]);
#pragma unroll
          for (int e = 0; e < kVec; ++e) count(k[e]);
        }
      }
    }
    tail = begin + vecs * kVec;
  }
  for (uint64_t i = tail + threadIdx.x; i < end; i += kThreads) count(keys[i]);
  if (run != 0) atomicAdd(&mine[run_digit], run);
  if (kWindow) {
    if (__syncthreads_or(out_of_window) && threadIdx.x == 0) atomicOr(outside, 1u);
  }
  __syncthreads();
  for (uint32_t d = threadIdx.x; d < fn.fanout; d += kThreads) {
    uint64_t sum = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += h[w][d];
    counts[static_cast<uint64_t>(d) * gridDim.x + blockIdx.x] = sum;
  }
}

// Asynchronous global-to-shared copies (cp.async, sm_80 and later).
__device__ __forceinline__ void cp_async_16(char* dst, const char* src) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_4(char* dst, const char* src) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// The whole block starts copying `bytes` (a multiple of 4) from global `src` to shared `dst`
// (16-byte aligned): 16-byte copies where `src` is aligned too, 4-byte ones otherwise.
__device__ __forceinline__ void copy_async(char* dst, const char* src, uint32_t bytes) {
  uint32_t body = 0;
  if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    body = bytes & ~15u;
    for (uint32_t o = threadIdx.x * 16; o < body; o += kThreads * 16) cp_async_16(dst + o, src + o);
  }
  for (uint32_t o = body + threadIdx.x * 4; o < bytes; o += kThreads * 4) cp_async_4(dst + o, src + o);
}

template <int RADIX, int ITEMS>
struct SweepSmem {
  static constexpr int kTile = kThreads * ITEMS;
  uint16_t warp_count[kWarps][RADIX];
  uint32_t map[kTile];   // at each position of the digit-sorted tile: digit << 16 | tile element
  uint64_t dest[RADIX];  // where the digit's run goes, minus its tile-local start (mod 2^64)
  uint16_t start[RADIX]; // tile-local start of each digit's run
  uint64_t scan[kWarpSize + 1];
};

// Writes one column value of `width` bytes.
__device__ __forceinline__ void put(uint64_t dst, uint32_t width, uint64_t at, uint64_t v) {
  if (width == 4)
    reinterpret_cast<uint32_t*>(dst)[at] = static_cast<uint32_t>(v);
  else
    reinterpret_cast<uint64_t*>(dst)[at] = v;
}

// The membership bitmaps' words of a tile's `count` rows from their digits (`slot`, before the
// ranking turns them into places; kInvalid past the end): item j of a warp's lanes is 32
// consecutive rows of the tile (item_index), so a partition's ballot over them is its word for
// those rows. Each lane keeps one of the ballots of kWarpSize / ITEMS partitions at a time, so
// that one store writes ITEMS consecutive words of each (with a store of a word a lane, the
// partition by rank of 4 H200s was 0.55 ms slower than writing ids; this way 0.4). `first_row`,
// the tile's first input row, is a multiple of 32 (tiles and chunks are).
template <int ITEMS>
__device__ __forceinline__ void write_members(const uint32_t (&slot)[ITEMS], uint32_t fanout,
                                              uint32_t count, uint64_t first_row, Members m) {
  static_assert(kWarpSize % ITEMS == 0, "a warp's lanes hold whole partitions' words");
  constexpr uint32_t kPer = kWarpSize / ITEMS;  // partitions a store covers
  const uint32_t lane = joinkit::lane_id();
  const uint32_t warp_rows = joinkit::warp_id() * kWarpSize * ITEMS;
  for (uint32_t p0 = 0; p0 < fanout; p0 += kPer) {
    uint32_t kept = 0;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
#pragma unroll 1
      for (uint32_t q = 0; q < kPer; ++q) {
        const uint32_t bits = __ballot_sync(kFullMask, slot[j] == p0 + q);
        if (lane == q * ITEMS + j) kept = bits;
      }
    }
    const uint32_t p = p0 + lane / ITEMS;
    const uint32_t group = warp_rows + (lane % ITEMS) * kWarpSize;
    if (p < fanout && group < count)
      m.words[p * m.per_partition + (first_row + group) / kWarpSize] = kept;
  }
}

// Stable scatter of the keys and `cols` by digit. `counts` is the per-row-scanned histogram
// and `totals` the per-digit totals (from part_scan_counts). Chunk 0 also writes the partition
// offsets (fanout + 1 of them) when `offsets` is set. Dynamic shared memory: one tile, the
// keys followed by each column with a source (kThreads * ITEMS rows each).
template <typename K, int RADIX, int ITEMS, typename KOut = K>
__device__ void sweep(const K* __restrict__ keys, KOut* keys_out, uint64_t n, DigitFn fn,
                      const uint64_t* counts, const uint64_t* totals, uint64_t chunk_rows,
                      uint64_t* offsets, const Columns& cols, Members members = {nullptr, 0}) {
  using S = SweepSmem<RADIX, ITEMS>;
  constexpr int kTile = S::kTile;
  constexpr int kDpt = digits_per_thread<RADIX>();
  __shared__ S s;
  extern __shared__ __align__(16) char tile[];
  const uint64_t chunks = gridDim.x;
  const uint64_t chunk = blockIdx.x;
  uint64_t base[kDpt];  // global position of this chunk's next element of each digit it owns
  {
    uint64_t tot[kDpt];
    uint64_t sum = 0;
#pragma unroll
    for (int k = 0; k < kDpt; ++k) {
      const uint32_t d = threadIdx.x * kDpt + k;
      tot[k] = d < fn.fanout ? totals[d] : 0;
      sum += tot[k];
    }
    uint64_t all;
    uint64_t excl = joinkit::block_exclusive_scan<uint64_t>(sum, s.scan, &all);
#pragma unroll
    for (int k = 0; k < kDpt; ++k) {
      const uint32_t d = threadIdx.x * kDpt + k;
      base[k] = d < fn.fanout ? excl + counts[d * chunks + chunk] : 0;
      if (offsets != nullptr && chunk == 0 && d < fn.fanout) offsets[d] = excl;
      excl += tot[k];
    }
    if (offsets != nullptr && chunk == 0 && threadIdx.x == 0) offsets[fn.fanout] = all;
  }
  const int bits = digit_bits(fn.fanout);
  const uint64_t begin_row = chunk * chunk_rows;
  const uint64_t end_row = min(n, begin_row + chunk_rows);
  // Starts copying the tile of rows [b, b + kTile) (or to the chunk's end) into `buf`.
  auto fetch = [&](uint64_t b, char* buf) {
    const uint32_t count = static_cast<uint32_t>(min(static_cast<uint64_t>(kTile), end_row - b));
    copy_async(buf, reinterpret_cast<const char*>(keys + b), count * sizeof(K));
    uint32_t off = kTile * sizeof(K);
    for (uint32_t c = 0; c < cols.count; ++c) {
      if (cols.src[c] == 0) continue;
      const uint32_t w = cols.width[c];
      copy_async(buf + off, reinterpret_cast<const char*>(cols.src[c]) + b * w, count * w);
      off += kTile * w;
    }
    cp_async_commit();
  };
  if (begin_row < end_row) fetch(begin_row, tile);
  for (uint64_t b = begin_row; b < end_row; b += kTile) {
    const uint32_t count = static_cast<uint32_t>(min(static_cast<uint64_t>(kTile), end_row - b));
    cp_async_wait_all();
    __syncthreads();  // the tile is in for every thread
    const K* tile_keys = reinterpret_cast<const K*>(tile);
    uint32_t slot[ITEMS], total[kDpt];
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const uint32_t idx = item_index<ITEMS>(j);
      slot[j] = idx < count ? fn(tile_keys[idx]) : kInvalid;
    }
    if (members.words != nullptr) write_members<ITEMS>(slot, fn.fanout, count, b, members);
    rank_tile<RADIX, ITEMS>(s.warp_count, s.start, s.scan, slot, total, bits);
#pragma unroll
    for (int j = 0; j < ITEMS; ++j)
      if (slot[j] != kInvalid) s.map[pos_of(slot[j])] = (slot[j] & 0xffff0000u) | item_index<ITEMS>(j);
#pragma unroll
    for (int k = 0; k < kDpt; ++k) {
      const uint32_t d = threadIdx.x * kDpt + k;
      if (d < RADIX) s.dest[d] = base[k] - s.start[d];
    }
    __syncthreads();
    if (cols.count == 1 && cols.width[0] == 4) {
      // One 4-byte column or 4-byte row ids (the partition by rank, the hash tables' clustered
      // builds): the general loop's per-column reads of `cols` cost as much as the moves
      // (ncu, H200, 2^28 rows at a fan-out of 4: 148 → 113 instructions a row, 1.79 → 1.58 ms).
      const uint32_t* col_in = reinterpret_cast<const uint32_t*>(tile + kTile * sizeof(K));
      uint32_t* col_out = reinterpret_cast<uint32_t*>(cols.dst[0]);
      const bool ids = cols.src[0] == 0;
      for (uint32_t i = threadIdx.x; i < count; i += kThreads) {
        const uint32_t m = s.map[i];
        const uint32_t src = m & 0xffffu;
        const uint64_t at = s.dest[m >> 16] + i;
        if (keys_out != nullptr) keys_out[at] = static_cast<KOut>(tile_keys[src]);
        col_out[at] = ids ? static_cast<uint32_t>(cols.id_base + b + src) : col_in[src];
      }
    } else {
      for (uint32_t i = threadIdx.x; i < count; i += kThreads) {
        const uint32_t m = s.map[i];
        const uint32_t src = m & 0xffffu;
        const uint64_t at = s.dest[m >> 16] + i;
        if (keys_out != nullptr) keys_out[at] = static_cast<KOut>(tile_keys[src]);
        uint32_t off = kTile * sizeof(K);
        for (uint32_t c = 0; c < cols.count; ++c) {
          const uint32_t w = cols.width[c];
          uint64_t v = cols.id_base + b + src;  // no source: the row index plus the base
          if (cols.src[c] != 0) {
            v = w == 4 ? reinterpret_cast<const uint32_t*>(tile + off)[src]
                       : reinterpret_cast<const uint64_t*>(tile + off)[src];
            off += kTile * w;
          }
          put(cols.dst[c], w, at, v);
        }
      }
    }
    __syncthreads();  // the tile, the position map and the destinations are read
    if (b + kTile < end_row) fetch(b + kTile, tile);
#pragma unroll
    for (int k = 0; k < kDpt; ++k) base[k] += total[k];
  }
}

__device__ __forceinline__ uint64_t load_volatile(const uint64_t* p) {
  return *reinterpret_cast<const volatile unsigned long long*>(p);
}
__device__ __forceinline__ uint32_t load_volatile(const uint32_t* p) {
  return *reinterpret_cast<const volatile unsigned int*>(p);
}

// Reserves `cnt` slots of partition `state` (packed: head bucket << 32 | fill of the head).
// The thread whose add crosses the head's end takes what is left of it and links fresh buckets
// (consecutive in the pool, newest first in the chain); adds that land past the end wait until
// the head changes and retry. On return: ranks < avail go to old_pos + rank, the rest to
// fresh + (rank - avail); fresh == ~0 when the pool is exhausted (the elements are dropped and
// *used ends above pool_cap, which the host reports).
__device__ void reserve(uint64_t* state, uint32_t* next, uint32_t* used, uint32_t pool_cap,
                        uint32_t cap, uint32_t cnt, uint64_t& old_pos, uint32_t& avail,
                        uint64_t& fresh) {
  old_pos = 0;
  avail = 0;
  fresh = ~0ull;
  while (true) {
    if (load_volatile(used) > pool_cap) return;
    const uint64_t old = joinkit::atomic_add_u64(state, cnt);
    const uint32_t b = static_cast<uint32_t>(old >> 32);
    const uint32_t f = static_cast<uint32_t>(old);
    if (f <= cap && cnt <= cap - f) {  // fits in the head bucket (never the empty state: f = cap)
      old_pos = static_cast<uint64_t>(b) * cap + f;
      avail = cnt;
      return;
    }
    if (f <= cap) {  // this add crosses the end of the head: allocate
      avail = cap - f;
      old_pos = static_cast<uint64_t>(b) * cap + f;
      const uint32_t rest = cnt - avail;
      const uint32_t k = (rest + cap - 1) / cap;
      const uint32_t first = atomicAdd(used, k);
      if (first > pool_cap || k > pool_cap - first) {
        atomicMax(used, pool_cap + 1);  // make the failure visible and stop every waiter
        return;
      }
      next[first] = b;
      for (uint32_t q = 1; q < k; ++q) next[first + q] = first + q - 1;
      fresh = static_cast<uint64_t>(first) * cap;
      const uint64_t fill = rest - static_cast<uint64_t>(k - 1) * cap;
      __threadfence();
      joinkit::atomic_exch_u64(state, (static_cast<uint64_t>(first + k - 1) << 32) | fill);
      return;
    }
    // Past the end: the crossing thread is installing a new head; wait for it.
    while (static_cast<uint32_t>(load_volatile(state) >> 32) == b &&
           load_volatile(used) <= pool_cap)
      __nanosleep(64);
  }
}

template <typename K, int RADIX>
__device__ void bucket_chain(const K* __restrict__ keys, K* pool_keys, uint64_t n, DigitFn fn,
                             uint64_t* state, uint32_t* next, uint64_t* counts, uint32_t* used,
                             uint32_t pool_cap, uint32_t cap, uint64_t chunk_rows,
                             const Columns& cols) {
  using S = TileSmem<RADIX>;
  constexpr int kItems = S::kItems;
  constexpr int kDpt = S::kDpt;
  __shared__ S s;
  const BucketDest dest;
  const uint64_t begin_row = static_cast<uint64_t>(blockIdx.x) * chunk_rows;
  const uint64_t end_row = min(n, begin_row + chunk_rows);
  for (uint64_t begin = begin_row; begin < end_row; begin += S::kTile) {
    const uint32_t count =
        static_cast<uint32_t>(min(static_cast<uint64_t>(S::kTile), end_row - begin));
    uint32_t slot[kItems], total[kDpt];
    load_tile<K, RADIX>(keys, begin, count, fn, reinterpret_cast<K*>(s.buf), slot);
    rank_tile<RADIX, kItems>(s.u.warp_count, s.start, s.scan, slot, total, digit_bits(fn.fanout));
    stage_keys<K, RADIX>(s, slot);
    __syncthreads();  // ranking is done with the per-warp counters: reuse them for reservations
#pragma unroll
    for (int k = 0; k < kDpt; ++k) {
      const uint32_t d = threadIdx.x * kDpt + k;
      uint64_t old_pos = 0, fresh = ~0ull;
      uint32_t avail = 0;
      if (total[k] > 0) {
        reserve(state + d, next, used, pool_cap, cap, total[k], old_pos, avail, fresh);
        joinkit::atomic_add_u64(counts + d, total[k]);
      }
      s.base[d] = old_pos;
      s.u.bucket.avail[d] = avail;
      s.u.bucket.fresh[d] = fresh;
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < count; i += kThreads) {
      const uint32_t d = s.digit[i];
      const uint64_t at = dest(s, d, i - s.start[d]);
      if (at != ~0ull) pool_keys[at] = reinterpret_cast<const K*>(s.buf)[i];
    }
    move_columns<RADIX>(s, cols, begin, count, slot, dest);
    __syncthreads();
  }
}

// offsets[x] for x in [0, fanout]: the first position whose digit is >= x, over keys sorted by
// digit (bits [shift, shift + log2(mask + 1))).
//
// By binary search, one per offset: fanout * log2(n) reads, for fan-outs small against n.
template <typename K>
__device__ void offsets_sorted(const K* __restrict__ keys, uint64_t n, uint32_t shift,
                               uint64_t mask, uint64_t* offsets, uint64_t fanout) {
  for (uint64_t x = joinkit::global_thread_id(); x <= fanout; x += joinkit::grid_stride()) {
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (((static_cast<uint64_t>(keys[mid]) >> shift) & mask) < x) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    offsets[x] = lo;
  }
}

// By one pass over the keys (each offset written by exactly one position), for fan-outs too
// large for the binary searches to be cheaper.
template <typename K>
__device__ void offsets_linear(const K* __restrict__ keys, uint64_t n, uint32_t shift,
                               uint64_t mask, uint64_t* offsets, uint64_t fanout) {
  for (uint64_t i = joinkit::global_thread_id(); i <= n; i += joinkit::grid_stride()) {
    const uint64_t lo = i == 0 ? 0 : ((static_cast<uint64_t>(keys[i - 1]) >> shift) & mask) + 1;
    const uint64_t hi = i == n ? fanout : (static_cast<uint64_t>(keys[i]) >> shift) & mask;
    for (uint64_t x = lo; x <= hi; ++x) offsets[x] = i;
  }
}

}  // namespace

#define JK_HIST_KERNEL(T, K, R)                                                             \
  extern "C" __global__ void __launch_bounds__(kThreads)                                  \
      part_hist##R##_##K(const T* keys, uint64_t n, DigitFn fn, uint64_t* counts,          \
                         uint64_t chunk_rows) {                                           \
    histogram<T, R>(keys, n, fn, counts, chunk_rows);                                     \
  }

#define JK_PARTITION_KERNELS(T, K, R)                                                      \
  JK_HIST_KERNEL(T, K, R)                                                                 \
  extern "C" __global__ void __launch_bounds__(kThreads) part_bucket##R##_##K(            \
      const T* keys, T* pool_keys, uint64_t n, DigitFn fn, uint64_t* state, uint32_t* next, \
      uint64_t* counts, uint32_t* used, uint32_t pool_cap, uint32_t cap, uint64_t chunk_rows, \
      Columns cols) {                                                                     \
    bucket_chain<T, R>(keys, pool_keys, n, fn, state, next, counts, used, pool_cap, cap,  \
                       chunk_rows, cols);                                                 \
  }

// The scatter, per key type, fan-out class and tile size (ITEMS rows per thread), with B blocks
// per SM: shared memory allows two of the 64 KiB tiles (up to 128 registers), four of the small
// class's 32 KiB ones (up to 64).
#define JK_SWEEP_KERNEL(T, K, R, I, B)                                                      \
  extern "C" __global__ void __launch_bounds__(kThreads, B) part_sweep##R##x##I##_##K(       \
      const T* keys, T* keys_out, uint64_t n, DigitFn fn, const uint64_t* counts,           \
      const uint64_t* totals, uint64_t chunk_rows, uint64_t* offsets, Columns cols) {       \
    sweep<T, R, I>(keys, keys_out, n, fn, counts, totals, chunk_rows, offsets, cols);       \
  }

JK_SWEEP_KERNEL(uint32_t, u32, 16, 16, 4)
JK_SWEEP_KERNEL(uint64_t, u64, 16, 16, 4)
JK_SWEEP_KERNEL(uint32_t, u32, 256, 32, 2)
JK_SWEEP_KERNEL(uint64_t, u64, 256, 32, 2)
JK_SWEEP_KERNEL(uint32_t, u32, 256, 16, 2)
JK_SWEEP_KERNEL(uint64_t, u64, 256, 16, 2)
JK_SWEEP_KERNEL(uint32_t, u32, 256, 8, 2)
JK_SWEEP_KERNEL(uint64_t, u64, 256, 8, 2)
JK_SWEEP_KERNEL(uint32_t, u32, 1024, 16, 2)
JK_SWEEP_KERNEL(uint64_t, u64, 1024, 16, 2)
JK_SWEEP_KERNEL(uint32_t, u32, 1024, 8, 2)
JK_SWEEP_KERNEL(uint64_t, u64, 1024, 8, 2)

// The small class (fan-outs up to 16) has a histogram and a scatter, no bucket chains.
JK_HIST_KERNEL(uint32_t, u32, 16)
JK_HIST_KERNEL(uint64_t, u64, 16)

// 8-byte keys partitioned by their low 32 bits, written as those (the distributed join's
// partition by rank narrowing its keys in the same pass): the histogram also checks that every
// key lies in the window [window, window + 2^32), the scatter writes 4-byte keys.
extern "C" __global__ void __launch_bounds__(kThreads)
    part_hist16_low_u64(const uint64_t* keys, uint64_t n, DigitFn fn, uint64_t* counts,
                        uint64_t chunk_rows, uint64_t window, uint32_t* outside) {
  histogram<uint64_t, 16, true>(keys, n, fn, counts, chunk_rows, window, outside);
}
extern "C" __global__ void __launch_bounds__(kThreads, 4)
    part_sweep16x16_low_u64(const uint64_t* keys, uint32_t* keys_out, uint64_t n, DigitFn fn,
                            const uint64_t* counts, const uint64_t* totals, uint64_t chunk_rows,
                            uint64_t* offsets, Columns cols, uint32_t* members,
                            uint64_t member_words) {
  sweep<uint64_t, 16, 16, uint32_t>(keys, keys_out, n, fn, counts, totals, chunk_rows, offsets,
                                    cols, Members{members, member_words});
}

// The partition sizes and the window's flag, posted to the host between the scan and the
// scatter (CudaBackend::posted_words): `words` gets the fanout totals, then the flag, then the
// ticket. One thread: its words are all stored before its ticket.
extern "C" __global__ void part_post_sizes(const uint64_t* totals, uint32_t fanout,
                                           const uint32_t* outside, uint64_t* words,
                                           uint64_t ticket) {
  volatile uint64_t* out = words;
  for (uint32_t d = 0; d < fanout; ++d) out[d] = totals[d];
  out[fanout] = *outside;
  joinkit::post_ticket(words + fanout + 1, ticket);
}

// Row ids from membership bitmaps (LowWordsPartition::member_row_ids): the bitmaps of up to 16
// senders laid end to end, each sender's first word and the id of its row 0.
constexpr int kMemberWordsPerThread = 8;
constexpr uint64_t kMemberTile = kThreads * kMemberWordsPerThread;
struct MemberRuns {
  uint64_t start[17];
  uint32_t first[16];
  uint32_t count;
};

// The first word of the runs of 32 a warp of part_member_row_ids owns (a word of its run:
// + j * 32 + lane).
__device__ __forceinline__ uint64_t member_warp_words() {
  return blockIdx.x * kMemberTile +
         static_cast<uint64_t>(joinkit::warp_id()) * kWarpSize * kMemberWordsPerThread;
}

// The set bits of each tile of kMemberTile words: counts[blockIdx.x].
extern "C" __global__ void __launch_bounds__(kThreads)
    part_member_tile_counts(const uint32_t* words, uint64_t n_words, uint64_t* counts) {
  __shared__ uint64_t scan[kWarpSize + 1];
  const uint64_t first = member_warp_words();
  uint64_t c = 0;
#pragma unroll
  for (int j = 0; j < kMemberWordsPerThread; ++j) {
    const uint64_t w = first + j * kWarpSize + joinkit::lane_id();
    if (w < n_words) c += __popc(words[w]);
  }
  uint64_t all;
  joinkit::block_exclusive_scan<uint64_t>(c, scan, &all);
  if (threadIdx.x == 0) counts[blockIdx.x] = all;
}

// Each set bit's row id at its place: the tile's start (the exclusive sum of the tile counts)
// plus the set bits before it in the tile. A warp owns kMemberWordsPerThread runs of 32
// consecutive words of the tile; for each, its lanes stage their words' ids in shared memory
// in order and then store them together, so a warp's stores are consecutive (ids stored one
// thread-run at a time scatter partial sectors over the whole output). Ids past out_len are
// not written.
extern "C" __global__ void __launch_bounds__(kThreads)
    part_member_row_ids(const uint32_t* words, uint64_t n_words, const uint64_t* starts,
                        MemberRuns runs, uint32_t* out, uint64_t out_len) {
  __shared__ uint64_t scan[kWarpSize + 1];
  __shared__ uint32_t staged[kWarps][kWarpSize * kWarpSize];
  const uint32_t lane = joinkit::lane_id();
  uint32_t* mine = staged[joinkit::warp_id()];
  const uint64_t first = member_warp_words();
  uint32_t v[kMemberWordsPerThread];
  uint64_t c = 0;
#pragma unroll
  for (int j = 0; j < kMemberWordsPerThread; ++j) {
    const uint64_t w = first + j * kWarpSize + lane;
    v[j] = w < n_words ? words[w] : 0;
    c += __popc(v[j]);
  }
  // Lane 0's exclusive prefix counts every word of the warps before this one.
  uint64_t all;
  const uint64_t before = joinkit::block_exclusive_scan<uint64_t>(c, scan, &all);
  uint64_t at = starts[blockIdx.x] + __shfl_sync(kFullMask, before, 0);
  uint32_t s = 0;
#pragma unroll
  for (int j = 0; j < kMemberWordsPerThread; ++j) {
    const uint64_t w = first + j * kWarpSize + lane;
    while (s + 1 < runs.count && runs.start[s + 1] <= w) ++s;
    const uint32_t bits = v[j];
    const uint32_t incl = joinkit::warp_inclusive_scan<uint32_t>(__popc(bits));
    const uint32_t step = __shfl_sync(kFullMask, incl, kWarpSize - 1);
    const uint32_t id0 = runs.first[s] + static_cast<uint32_t>((w - runs.start[s]) * kWarpSize);
    uint32_t k = incl - __popc(bits);
    for (uint32_t b = bits; b != 0; b &= b - 1) mine[k++] = id0 + (__ffs(b) - 1);
    __syncwarp();
    for (uint32_t i = lane; i < step; i += kWarpSize)
      if (at + i < out_len) out[at + i] = mine[i];
    __syncwarp();
    at += step;
  }
}

JK_PARTITION_KERNELS(uint32_t, u32, 256)
JK_PARTITION_KERNELS(uint64_t, u64, 256)
JK_PARTITION_KERNELS(uint32_t, u32, 1024)
JK_PARTITION_KERNELS(uint64_t, u64, 1024)

// Exclusive scan of each row of counts (one block per row, `chunks` entries) in place; the row's
// total goes to totals[row].
extern "C" __global__ void __launch_bounds__(kThreads)
    part_scan_counts(uint64_t* counts, uint64_t* totals, uint64_t chunks) {
  __shared__ uint64_t smem[kWarpSize + 1];
  constexpr int kPer = 4;
  uint64_t* row = counts + static_cast<uint64_t>(blockIdx.x) * chunks;
  uint64_t carry = 0;
  for (uint64_t base = 0; base < chunks; base += kThreads * kPer) {
    uint64_t v[kPer];
    uint64_t sum = 0;
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const uint64_t i = base + threadIdx.x * kPer + q;
      v[q] = i < chunks ? row[i] : 0;
      sum += v[q];
    }
    uint64_t all;
    uint64_t run = carry + joinkit::block_exclusive_scan<uint64_t>(sum, smem, &all);
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const uint64_t i = base + threadIdx.x * kPer + q;
      if (i < chunks) row[i] = run;
      run += v[q];
    }
    carry += all;
  }
  if (threadIdx.x == 0) totals[blockIdx.x] = carry;
}

// keys_out[i] = the seeded hash of keys_in[i] at the key's width (joinkit::hash32, hash64), and
// back in place (unhash32, unhash64): the hash is a bijection of the key, so a partition by
// hash bits can run as a radix partition of the hashed keys and give the keys back after.
// CPU twins: joinkit_cuda::hash.
#define JK_HASH_KEYS_KERNELS(T, K, HASH, UNHASH)                                                  \
  extern "C" __global__ void part_hash_keys_##K(const T* keys_in, T* keys_out, uint64_t n,     \
                                                 uint32_t seed) {                              \
    for (uint64_t i = joinkit::global_thread_id(); i < n; i += joinkit::grid_stride())        \
      keys_out[i] = joinkit::HASH(keys_in[i], seed);                                           \
  }                                                                                             \
  extern "C" __global__ void part_unhash_keys_##K(T* keys, uint64_t n, uint32_t seed) {        \
    for (uint64_t i = joinkit::global_thread_id(); i < n; i += joinkit::grid_stride())        \
      keys[i] = joinkit::UNHASH(keys[i], seed);                                                \
  }
JK_HASH_KEYS_KERNELS(uint32_t, u32, hash32, unhash32)
JK_HASH_KEYS_KERNELS(uint64_t, u64, hash64, unhash64)
#undef JK_HASH_KEYS_KERNELS

// Partition offsets of digit-sorted keys, per key type: by binary searches or by one pass.
#define JK_OFFSETS_KERNELS(T, K)                                                            \
  extern "C" __global__ void part_offsets_sorted_##K(const T* keys, uint64_t n, uint32_t shift, \
                                                     uint64_t mask, uint64_t* offsets,        \
                                                     uint64_t fanout) {                       \
    offsets_sorted(keys, n, shift, mask, offsets, fanout);                                   \
  }                                                                                          \
  extern "C" __global__ void part_offsets_linear_##K(const T* keys, uint64_t n, uint32_t shift, \
                                                     uint64_t mask, uint64_t* offsets,        \
                                                     uint64_t fanout) {                       \
    offsets_linear(keys, n, shift, mask, offsets, fanout);                                   \
  }
JK_OFFSETS_KERNELS(uint32_t, u32)
JK_OFFSETS_KERNELS(uint64_t, u64)
#undef JK_OFFSETS_KERNELS

// Empty chains: no head bucket and a fill of `cap`, so the first reservation allocates.
extern "C" __global__ void part_bucket_init(uint64_t* state, uint64_t* counts, uint32_t* used,
                                            uint32_t fanout, uint32_t cap) {
  for (uint64_t i = joinkit::global_thread_id(); i < fanout; i += joinkit::grid_stride()) {
    state[i] = (static_cast<uint64_t>(kNoBucket) << 32) | cap;
    counts[i] = 0;
  }
  if (joinkit::global_thread_id() == 0) *used = 0;
}

// Chain heads out of the packed partition states.
extern "C" __global__ void part_bucket_heads(const uint64_t* state, uint32_t* heads,
                                             uint32_t fanout) {
  for (uint64_t i = joinkit::global_thread_id(); i < fanout; i += joinkit::grid_stride())
    heads[i] = static_cast<uint32_t>(state[i] >> 32);
}
