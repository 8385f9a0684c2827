// The partitioned hash joins' match step (PHJ-UM, PHJ-OM): a hash join of every co-partition,
// one work item per block at a time. CPU twin: src/copart.rs (same outputs as multisets).
//
// A side is cut into pieces (runs of rows of one partition): `po` (fanout + 1 offsets into the
// piece arrays), `begin` (first row, 64-bit) and `len` (rows) per piece. A work item is one
// build piece and one probe piece of the same partition: item `i` of partition `p` (items
// `item_offsets[p]..item_offsets[p + 1]`) pairs build piece `i / np` with probe piece `i % np`,
// `np` being p's number of probe pieces.
//
// Per item, a block builds a table in shared memory from the build piece (at most `capacity`
// rows, `capacity` <= 2^15) and probes it with the probe piece:
//   keys[capacity]    the build piece's keys
//   slots[2^tb]       open addressing, linear probing, 2^tb >= 2 * rows (load <= 1/2; 4 * rows
//                     where 2 * capacity slots allow, see table_bits): one
//                     32-bit word per distinct key, (rows of the key) << 16 | newest row, or
//                     kEmpty; a second equal key swaps itself in as the newest row with one CAS
//                     that also counts it, so equal keys take one slot and a probe reads its
//                     match count in O(1)
//   next[capacity]    16-bit chain of equal keys, newest to oldest
// The count pass writes each item's match count (and the probe rows' match flags); the host
// scans the counts (64-bit) and the write pass recomputes every probe row's count, scans them
// across the block for the row's output position, and walks the chain: the same counts in both
// passes (they depend on the piece's keys only, not on the table's layout), so the write pass
// fills exactly the counted rows.
//
// With a unique build side every probe row matches at most once, so the output is bounded by
// the probe rows and one pass does both (`phj_join_*`): a block builds, then per round of up to
// 8 probe rows a thread looks them up, reserves the round's output rows with one atomic add on
// a cursor, and writes; the table is built once. The rounds' runs of pairs land in the order
// the reservations happen (each run in probe-row order): the pairs are a deterministic
// multiset, their order is not. (An in-order variant,
// decoupled look-back over published counts, made every block wait for the slowest earlier
// item: 8.7 against 5.1 ms on Zipf-skewed probes.)
#include <stdint.h>

#include "joinkit/device.cuh"
#include "joinkit/hash.cuh"

namespace {

constexpr uint32_t kEmpty = 0xffffffffu;
constexpr uint16_t kNoRow = 0xffffu;
constexpr uint32_t kStatusDuplicate = 1u;
constexpr uint32_t kStatusBadId = 2u;
constexpr uint32_t kStatusOverflow = 4u;
constexpr uint32_t kStatusLaunch = 8u;  // a one-pass join launched with blockDim != kJoinBlock

// Device addresses and sizes of one co-partition join. Field order and types must match
// `CoParams` in src/copart_cuda.rs.
struct CoParams {
  uint64_t probe_keys;    // const K*
  uint64_t probe_ids;     // const PW* (the kernel's probe id word) or 0 (ids are rows)
  uint64_t probe_po;      // const uint64_t* fanout + 1
  uint64_t probe_begin;   // const uint64_t*
  uint64_t probe_len;     // const uint32_t*
  uint64_t build_keys;    // const K*
  uint64_t build_ids;     // const BW* or 0
  uint64_t build_po;      // const uint64_t*
  uint64_t build_begin;   // const uint64_t*
  uint64_t build_len;     // const uint32_t*
  uint64_t item_offsets;  // const uint64_t* fanout + 1
  uint64_t item_part;     // const uint32_t* n_items
  uint64_t n_items;
  uint64_t counts;        // uint64_t*: count pass writes n_items; write pass reads their scan
  uint64_t flags;         // uint32_t* or 0 (count pass, one-pass join)
  uint64_t flags_len;
  uint64_t out_probe;     // PW* (write pass, one-pass join); uint32_t* when out_probe_hi,
                          // uint64_t* when probe_unpack
  uint64_t out_build;     // BW*; uint32_t* when out_build_hi, uint64_t* when build_unpack
  uint64_t out_probe_hi;  // uint32_t* or 0: 8-byte probe words split in two (see store_id)
  uint64_t out_build_hi;  // uint32_t* or 0
  uint64_t probe_second;  // const PW* or 0: a second carried column (see store_second)
  uint64_t build_second;  // const BW* or 0
  uint64_t out_probe_second;  // PW*: where probe_second's words go (when probe_second)
  uint64_t out_build_second;  // BW*
  uint64_t status;        // uint32_t*: kStatus* bits
  uint64_t out_cursor;    // unsigned long long*, zeroed (one-pass join: output rows reserved)
  uint64_t item_cursor;   // unsigned long long*, zeroed (one-pass join: runs of items taken)
  uint64_t out_capacity;  // rows out_probe and out_build hold (one-pass join)
  uint32_t capacity;      // rows the shared table holds (sizes the dynamic shared memory)
  uint32_t unique_build;  // skip probing items whose build piece holds a key twice
  uint32_t probe_unpack;  // 0, or 1 + the low bits of packed 4-byte probe ids stored widened
  uint32_t build_unpack;  // as probe_unpack, for the build side's ids
};
static_assert(sizeof(CoParams) == 28 * 8 + 4 * 4, "CoParams as src/copart_cuda.rs lays it out");

template <typename T>
__device__ __forceinline__ T* ptr(uint64_t p) {
  return reinterpret_cast<T*>(p);
}

// The home slot of a key in 2^bits slots: multiply-shift on the whole key (a partition's keys
// share their low bits). The CPU twin uses the same function.
template <typename K>
__device__ __forceinline__ uint32_t home(K k, uint32_t bits) {
  return static_cast<uint32_t>((static_cast<uint64_t>(k) * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

// Slots for `rows` keys: 4 a row where the 2 a row of a full piece (`capacity`, a power of
// two) leave room, else 2 (load <= 1/2). Why: the radix bits make the average piece half full,
// and at load 1/2 random keys' linear probes run long enough that a warp waits on its longest
// one (H200, PHJ-OM 2^27 ⋈ 2^28 with keys spread over 32 bits: see docs/results/joins.md).
__device__ __forceinline__ uint32_t table_bits(uint32_t rows, uint32_t capacity) {
  uint32_t bits = 6;  // at least 64 slots
  while ((1u << bits) < 2 * rows || ((1u << bits) < 4 * rows && (1u << bits) < 2 * capacity))
    ++bits;
  return bits;
}

// Shared memory of one block.
template <typename K>
struct Table {
  K* keys;
  uint32_t* slots;
  uint16_t* next;
  uint32_t bits;

  __device__ __forceinline__ Table(uint8_t* smem, uint32_t capacity, uint32_t rows) {
    const uint32_t key_bytes = (capacity * sizeof(K) + 15) & ~15u;
    keys = reinterpret_cast<K*>(smem);
    slots = reinterpret_cast<uint32_t*>(smem + key_bytes);
    next = reinterpret_cast<uint16_t*>(slots + 2 * capacity);
    bits = table_bits(rows, capacity);
  }

  // Inserts piece row t; returns whether its key was there already. Bounded: an empty slot is
  // met within 2^bits steps (load <= 1/2), and each CAS retry means another insert of the same
  // key succeeded (at most `rows` of them).
  __device__ __forceinline__ bool insert(uint32_t t) const {
    const K k = keys[t];
    const uint32_t mask = (1u << bits) - 1;
    uint32_t s = home(k, bits);
    for (uint32_t step = 0; step <= mask; ++step) {
      uint32_t w = *reinterpret_cast<volatile uint32_t*>(slots + s);
      if (w == kEmpty) {
        w = atomicCAS(slots + s, kEmpty, (1u << 16) | t);
        if (w == kEmpty) {
          next[t] = kNoRow;
          return false;
        }
      }
      // The slot holds a key for good (words only change from empty to a key, then to the same
      // key's newer rows), so comparing with any row it named is comparing with its key.
      if (keys[w & 0xffffu] == k) {
        while (true) {
          const uint32_t nw = (((w >> 16) + 1) << 16) | t;
          const uint32_t prev = atomicCAS(slots + s, w, nw);
          if (prev == w) break;
          w = prev;
        }
        next[t] = static_cast<uint16_t>(w & 0xffffu);
        return true;
      }
      s = (s + 1) & mask;
    }
    return false;  // unreachable at load <= 1/2
  }

  // Rows of key k and the newest of them.
  __device__ __forceinline__ uint32_t lookup(K k, uint32_t* head) const {
    const uint32_t mask = (1u << bits) - 1;
    uint32_t s = home(k, bits);
    for (uint32_t step = 0; step <= mask; ++step) {
      const uint32_t w = slots[s];
      if (w == kEmpty) return 0;
      if (keys[w & 0xffffu] == k) {
        *head = w & 0xffffu;
        return w >> 16;
      }
      s = (s + 1) & mask;
    }
    return 0;
  }
};

// Keys a thread loads before using any (32 bytes: 8 or 4), so their loads are in flight
// together; a loop of one key per step waits on each load in turn (the one-pass match of
// 2^27 ⋈ 2^28 took 4.1 ms that way, 2.8 batched).
template <typename K>
constexpr uint32_t kKeysInFlight = 32 / sizeof(K);

// The id of row `row` of a side: its carried id (`ids`: the side's `*_ids` column of W words,
// or null), or the row itself. W is the side's id word: uint32_t for row ids, positions and
// 4-byte payloads, uint64_t for 8-byte payloads (narrow joins carry payloads as ids); a
// template parameter of the match kernels (a run-time width cost the 4-byte one-pass join
// 7 % on the H200).
template <typename W>
__device__ __forceinline__ W side_id(const W* ids, uint64_t row) {
  return ids != nullptr ? ids[row] : static_cast<W>(row);
}

// Writes a side's id word `w` to output row `o`: whole to `out`; or, with `hi` (an 8-byte word
// that packs two 4-byte payload columns, low half first), its halves to `out` and `hi`, so a
// wide join's pair of payloads lands in its two output columns with no pass after the match;
// or, with `unpack` (a 4-byte packed id, see CoParams::probe_unpack), widened to 8 bytes, so a
// distributed join's global row ids need no pass after the match either.
template <typename W>
__device__ __forceinline__ void store_id(uint64_t out, uint64_t hi, uint32_t unpack, uint64_t o,
                                         W w) {
  if constexpr (sizeof(W) == 8) {
    if (hi != 0) {
      ptr<uint32_t>(out)[o] = static_cast<uint32_t>(w);
      ptr<uint32_t>(hi)[o] = static_cast<uint32_t>(w >> 32);
      return;
    }
  } else {
    if (unpack != 0) {
      ptr<uint64_t>(out)[o] = joinkit::unpack_id(w, unpack - 1);
      return;
    }
  }
  ptr<W>(out)[o] = w;
}

// A side's second carried column `second` (a wide join's other payload, partitioned in the
// same order as the ids, or 0): its word of row `row`, and the store of such a word `w` to
// output row `o` of `out`.
template <typename W>
__device__ __forceinline__ W second_word(uint64_t second, uint64_t row) {
  return second != 0 ? ptr<const W>(second)[row] : W(0);
}

template <typename W>
__device__ __forceinline__ void store_second(uint64_t second, uint64_t out, uint64_t o, W w) {
  if (second != 0) ptr<W>(out)[o] = w;
}

// Marks probe id `id` matched in `flags` (the caller checks that the pass has flags).
__device__ __forceinline__ void mark_probe(const CoParams& p, uint64_t id) {
  if (id < p.flags_len)
    ptr<uint32_t>(p.flags)[id] = 1;  // items sharing probe rows all store 1
  else
    atomicOr(ptr<uint32_t>(p.status), kStatusBadId);
}

// One item's pieces, decoded by one thread (thread 0 the first, then a thread of warp 1).
struct Item {
  uint64_t probe_begin, build_begin;
  uint32_t probe_len, build_len;
  uint32_t duplicate;
};

__device__ __forceinline__ void decode_item(const CoParams& p, uint64_t item, Item* it) {
  const uint32_t part = ptr<const uint32_t>(p.item_part)[item];
  const uint64_t local = item - ptr<const uint64_t>(p.item_offsets)[part];
  const uint64_t* ppo = ptr<const uint64_t>(p.probe_po);
  const uint64_t first = ppo[part];
  const uint64_t np = ppo[part + 1] - first;
  if (np == 0) {  // a build-only item (uniqueness check)
    it->probe_begin = 0;
    it->probe_len = 0;
  } else {
    const uint64_t pj = first + local % np;
    it->probe_begin = ptr<const uint64_t>(p.probe_begin)[pj];
    it->probe_len = ptr<const uint32_t>(p.probe_len)[pj];
  }
  const uint64_t bi = ptr<const uint64_t>(p.build_po)[part] + (np == 0 ? local : local / np);
  it->build_begin = ptr<const uint64_t>(p.build_begin)[bi];
  it->build_len = ptr<const uint32_t>(p.build_len)[bi];
  it->duplicate = 0;
}

// Loads the build piece and builds the table; returns with the block synchronized and
// it->duplicate set when a key came twice.
template <typename K>
__device__ __forceinline__ void build(const CoParams& p, const Table<K>& t, Item* it) {
  const K* bk = ptr<const K>(p.build_keys) + it->build_begin;
  const uint32_t rows = it->build_len;
  constexpr uint32_t kBatch = kKeysInFlight<K>;
  for (uint32_t first = 0; first < rows; first += kBatch * blockDim.x) {
    K k[kBatch];
#pragma unroll
    for (uint32_t j = 0; j < kBatch; ++j) {
      const uint32_t r = first + j * blockDim.x + threadIdx.x;
      if (r < rows) k[j] = bk[r];
    }
#pragma unroll
    for (uint32_t j = 0; j < kBatch; ++j) {
      const uint32_t r = first + j * blockDim.x + threadIdx.x;
      if (r < rows) t.keys[r] = k[j];
    }
  }
  for (uint32_t s = threadIdx.x; s < (1u << t.bits); s += blockDim.x) t.slots[s] = kEmpty;
  __syncthreads();
  bool dup = false;
  for (uint32_t r = threadIdx.x; r < rows; r += blockDim.x) dup |= t.insert(r);
  if (dup) it->duplicate = 1;  // every writer stores 1
  __syncthreads();
}

// This thread's share of the item's matches (its probe rows' counts); marks the probe rows
// that match in `flags` when the pass has flags.
template <typename K, typename PW>
__device__ __forceinline__ uint64_t count_probe(const CoParams& p, const Table<K>& t,
                                                const Item& it) {
  const K* pk = ptr<const K>(p.probe_keys) + it.probe_begin;
  uint64_t mine = 0;
  for (uint32_t r = threadIdx.x; r < it.probe_len; r += blockDim.x) {
    uint32_t head;
    const uint32_t c = t.lookup(pk[r], &head);
    mine += c;
    if (c != 0 && p.flags != 0)
      mark_probe(p, side_id(ptr<const PW>(p.probe_ids), it.probe_begin + r));
  }
  return mine;
}

// The block's total of `mine`, valid in thread 0; synchronizes the block.
__device__ __forceinline__ uint64_t block_total(uint64_t mine, uint64_t* warp_totals) {
  mine = joinkit::warp_sum(mine);
  if (joinkit::lane_id() == 0) warp_totals[joinkit::warp_id()] = mine;
  __syncthreads();
  uint64_t total = 0;
  if (threadIdx.x == 0)
    for (uint32_t w = 0; w < (blockDim.x + 31) / 32; ++w) total += warp_totals[w];
  return total;
}

// Writes the item's pairs from output row `base` on, in probe-row order: every thread runs
// every tile of blockDim probe rows (the scan synchronizes the block).
template <typename K, typename PW, typename BW>
__device__ __forceinline__ void write_pairs(const CoParams& p, const Table<K>& t, const Item& it,
                                            uint64_t base, uint32_t* scan) {
  const PW* probe_ids = ptr<const PW>(p.probe_ids);
  const BW* build_ids = ptr<const BW>(p.build_ids);
  const K* pk = ptr<const K>(p.probe_keys) + it.probe_begin;
  const uint32_t rows = it.probe_len;
  for (uint32_t first = 0; first < rows; first += blockDim.x) {
    const uint32_t r = first + threadIdx.x;
    uint32_t head = 0, c = 0;
    if (r < rows) c = t.lookup(pk[r], &head);
    uint32_t tile_total;
    const uint32_t at = joinkit::block_exclusive_scan<uint32_t>(c, scan, &tile_total);
    if (c != 0) {
      const uint64_t prow = it.probe_begin + r;
      const PW pid = side_id(probe_ids, prow);
      uint64_t o = base + at;
      uint32_t b = head;
      const PW pid2 = second_word<PW>(p.probe_second, prow);
      for (uint32_t i = 0; i < c; ++i, ++o) {
        // Loaded before the stores, as in join_round.
        const BW bid = side_id(build_ids, it.build_begin + b);
        const BW bid2 = second_word<BW>(p.build_second, it.build_begin + b);
        store_id(p.out_probe, p.out_probe_hi, p.probe_unpack, o, pid);
        store_second(p.probe_second, p.out_probe_second, o, pid2);
        store_id(p.out_build, p.out_build_hi, p.build_unpack, o, bid);
        store_second(p.build_second, p.out_build_second, o, bid2);
        b = t.next[b];
      }
    }
    base += tile_total;
  }
}

template <typename K, typename PW>
__device__ void count_items(const CoParams& p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ Item it;
  __shared__ uint64_t warp_totals[32];
  for (uint64_t item = blockIdx.x; item < p.n_items; item += gridDim.x) {
    if (threadIdx.x == 0) decode_item(p, item, &it);
    __syncthreads();
    const Table<K> t(smem, p.capacity, it.build_len);
    build<K>(p, t, &it);
    if (threadIdx.x == 0 && it.duplicate) atomicOr(ptr<uint32_t>(p.status), kStatusDuplicate);
    const bool skip = it.duplicate && p.unique_build;
    const uint64_t total = block_total(skip ? 0 : count_probe<K, PW>(p, t, it), warp_totals);
    if (threadIdx.x == 0) ptr<uint64_t>(p.counts)[item] = total;
    __syncthreads();  // the next item reuses shared memory
  }
}

template <typename K, typename PW, typename BW>
__device__ void write_items(const CoParams& p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ Item it;
  __shared__ uint32_t scan[joinkit::kWarpSize + 1];
  for (uint64_t item = blockIdx.x; item < p.n_items; item += gridDim.x) {
    if (threadIdx.x == 0) decode_item(p, item, &it);
    __syncthreads();
    const Table<K> t(smem, p.capacity, it.build_len);
    build<K>(p, t, &it);
    // Where this item's pairs start (the scan of the count pass's per-item counts).
    write_pairs<K, PW, BW>(p, t, it, ptr<const uint64_t>(p.counts)[item], scan);
    __syncthreads();  // the next item reuses shared memory
  }
}

// The one-pass join probes in rounds of kKeysInFlight rows a thread, loaded before any is
// looked up. A round's output positions come from one scan of per-warp hit counts in
// (row slot, warp) order, which is probe-row order.
constexpr uint32_t kRowsPerThread = kKeysInFlight<uint32_t>;  // the most
// Threads of a one-pass join block (`BLOCK` in src/copart_cuda.rs); its round counts are
// sized by it.
constexpr uint32_t kJoinBlock = 512;
constexpr uint32_t kJoinWarps = kJoinBlock / joinkit::kWarpSize;

// A round's shared state: hit counts per (row slot, warp), scanned in place into the
// round's exclusive output offsets, and where the round's rows start.
struct Round {
  uint32_t hits[kRowsPerThread][kJoinWarps];
  uint64_t base;
  bool writes;
};

// Exclusive scan of round->hits' first `R` row slots in (row slot, warp) order by warp 0,
// then one reservation of the round's output rows. Other warps wait at the caller's barrier.
template <uint32_t R>
__device__ __forceinline__ void reserve_round(const CoParams& p, Round* round) {
  constexpr uint32_t kEntries = R * kJoinWarps;
  constexpr uint32_t kPerLane = kEntries / joinkit::kWarpSize;
  static_assert(kEntries % joinkit::kWarpSize == 0, "entries spread evenly over a warp");
  uint32_t* flat = &round->hits[0][0];
  const uint32_t lane = joinkit::lane_id();
  uint32_t v[kPerLane], sum = 0;
#pragma unroll
  for (uint32_t q = 0; q < kPerLane; ++q) {
    v[q] = flat[lane * kPerLane + q];
    sum += v[q];
  }
  const uint32_t incl = joinkit::warp_inclusive_scan(sum);
  uint32_t at = incl - sum;
#pragma unroll
  for (uint32_t q = 0; q < kPerLane; ++q) {
    flat[lane * kPerLane + q] = at;
    at += v[q];
  }
  if (lane == joinkit::kWarpSize - 1) {
    const uint64_t total = incl;
    const uint64_t base =
        total == 0 ? 0 : atomicAdd(ptr<unsigned long long>(p.out_cursor), total);
    const bool fits = base + total <= p.out_capacity;
    if (!fits) atomicOr(ptr<uint32_t>(p.status), kStatusOverflow);
    round->base = base;
    round->writes = fits && total != 0;
  }
}

// This thread's probe keys of the round from `first` on: row slot j of thread t is row
// first + j * kJoinBlock + t.
template <typename K>
__device__ __forceinline__ void load_round_keys(const CoParams& p, const Item& it, uint32_t first,
                                                K (&key)[kKeysInFlight<K>]) {
  const K* pk = ptr<const K>(p.probe_keys) + it.probe_begin;
#pragma unroll
  for (uint32_t j = 0; j < kKeysInFlight<K>; ++j) {
    const uint32_t r = first + j * kJoinBlock + threadIdx.x;
    if (r < it.probe_len) key[j] = pk[r];
  }
}

// Whether the one-pass join loads a round's id words (of its probe rows and their build rows)
// right after the lookups, all in flight together, rather than each just before its store,
// where every store waits on its own load. The registers this takes leave room for two blocks an
// SM, not three. H200, 2^27 ⋈ 2^28 PHJ-OM match: 8-byte keys 4.42 -> 3.69-3.73 ms narrow, 8.96
// -> 7.80 2+2 wide; 4-byte keys (twice the rows a round) 2.67 -> 2.80 and 3.48 -> 3.89, so
// not for them. (Loading the probe ids with the keys, before the lookups, gave 4.07 ms; the
// build rows' ids staged in shared memory with the table, 4.24.)
template <typename K>
constexpr bool kEarlyIds = sizeof(K) == 8;

// Blocks an SM the one-pass join is built for: two with kEarlyIds, else three.
template <typename K>
constexpr uint32_t kJoinBlocks = kEarlyIds<K> ? 2 : 3;

// One round of the item's probe rows from `first` on, their keys loaded: marks matched probe
// rows in `flags` and writes the pairs.
template <typename K, typename PW, typename BW>
__device__ __forceinline__ void join_round(const CoParams& p, const Table<K>& t, const Item& it,
                                           uint32_t first, const K (&key)[kKeysInFlight<K>],
                                           Round* round) {
  constexpr uint32_t R = kKeysInFlight<K>;
  const uint32_t lane = joinkit::lane_id(), warp = joinkit::warp_id();
  // Bit j: slot j matched; its build row in 16 bits of heads.
  uint32_t hit = 0, heads[(R + 1) / 2] = {};
#pragma unroll
  for (uint32_t j = 0; j < R; ++j) {
    const uint32_t r = first + j * kJoinBlock + threadIdx.x;
    uint32_t head;
    if (r < it.probe_len && t.lookup(key[j], &head) != 0) {
      hit |= 1u << j;
      heads[j / 2] |= head << (16 * (j % 2));
    }
  }
#pragma unroll
  for (uint32_t j = 0; j < R; ++j) {
    const uint32_t b = __ballot_sync(joinkit::kFullMask, (hit >> j) & 1u);
    if (lane == 0) round->hits[j][warp] = __popc(b);
  }
  const PW* probe_ids = ptr<const PW>(p.probe_ids);
  const BW* build_ids = ptr<const BW>(p.build_ids);
  // With kEarlyIds, the hits' id words are loaded here, before the reservation: their loads
  // overlap each other, the barriers and the cursor's atomic.
  PW pid[kEarlyIds<K> ? R : 1];
  BW bid[kEarlyIds<K> ? R : 1];
  if constexpr (kEarlyIds<K>) {
#pragma unroll
    for (uint32_t j = 0; j < R; ++j) {
      if (((hit >> j) & 1u) == 0) continue;
      pid[j] = side_id(probe_ids, it.probe_begin + first + j * kJoinBlock + threadIdx.x);
      bid[j] = side_id(build_ids, it.build_begin + ((heads[j / 2] >> (16 * (j % 2))) & 0xffffu));
    }
  }
  __syncthreads();
  if (warp == 0) reserve_round<R>(p, round);
  __syncthreads();
  const uint32_t below = (1u << lane) - 1u;
  const bool marks = p.flags != 0;
#pragma unroll
  for (uint32_t j = 0; j < R; ++j) {
    const uint32_t b = __ballot_sync(joinkit::kFullMask, (hit >> j) & 1u);
    if (((hit >> j) & 1u) == 0) continue;
    const uint64_t row = it.probe_begin + first + j * kJoinBlock + threadIdx.x;
    PW probe_id;
    if constexpr (kEarlyIds<K>) probe_id = pid[j];
    else probe_id = side_id(probe_ids, row);
    if (marks) mark_probe(p, probe_id);
    if (round->writes) {
      const uint64_t o = round->base + round->hits[j][warp] + __popc(b & below);
      const uint64_t brow = it.build_begin + ((heads[j / 2] >> (16 * (j % 2))) & 0xffffu);
      // The row's words are all loaded before any is stored: stored as each arrived, every
      // store held the next load back (H200, 2^27 ⋈ 2^28 PHJ-OM match: 8 B 2+2 wide 5.96 ->
      // 5.48 ms, 8 B narrow 3.38 -> 3.19, 4 B 2+2 wide 3.47 -> 3.28, 4 B narrow 2.65 -> 2.48).
      const PW probe_second = second_word<PW>(p.probe_second, row);
      BW build_id;
      if constexpr (kEarlyIds<K>) build_id = bid[j];
      else build_id = side_id(build_ids, brow);
      const BW build_second = second_word<BW>(p.build_second, brow);
      store_id(p.out_probe, p.out_probe_hi, p.probe_unpack, o, probe_id);
      store_second(p.probe_second, p.out_probe_second, o, probe_second);
      store_id(p.out_build, p.out_build_hi, p.build_unpack, o, build_id);
      store_second(p.build_second, p.out_build_second, o, build_second);
    }
  }
  __syncthreads();  // the next round reuses `round`
}

// Consecutive items a block of the one-pass join takes at a time, at most: a hot partition's
// probe pieces are consecutive items, so a run of them builds its table once. Runs are handed out
// by an atomic counter (the first grid's worth by block index), which also keeps the blocks busy
// to the end under skew: H200, 2^27 ⋈ 2^28 under Zipf 1.0, dealing items a grid apart left the
// busiest SM 11 % above the average (uniform keys: 5 %). Fewer items than four a block get
// shorter runs, so that every block has work.
constexpr uint64_t kItemsPerRun = 4;

// The items of a run for this launch: kItemsPerRun, or fewer when the items would not give
// every block a full run. (Recomputed where needed: kept live across the item loop, it cost the
// 4-byte-key kernels a register spill.)
__device__ __forceinline__ uint64_t run_length(const CoParams& p) {
  const uint64_t fair = p.n_items / gridDim.x;
  return fair < 1 ? 1 : (fair < kItemsPerRun ? fair : kItemsPerRun);
}

// The item this block joins after `item`: the next of its run, or the first of the next run it
// takes (at or past n_items when none is left).
__device__ __forceinline__ uint64_t next_item(const CoParams& p, uint64_t item) {
  const uint64_t run = run_length(p);
  if ((item + 1) % run != 0) return item + 1;
  return (gridDim.x + atomicAdd(ptr<unsigned long long>(p.item_cursor), 1ull)) * run;
}

// The one-pass join of a unique build side (see the top of this file). While a block works on
// one item, a thread of its second warp takes and decodes the next (its pieces' bounds are
// three dependent global reads).
template <typename K, typename PW, typename BW>
__device__ void join_items(const CoParams& p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ Item items[2];
  __shared__ Round round;
  if (blockDim.x != kJoinBlock) {  // its rounds would skip rows
    if (threadIdx.x == 0) atomicOr(ptr<uint32_t>(p.status), kStatusLaunch);
    return;
  }
  // The build piece the table holds (none yet).
  __shared__ uint64_t built_begin;
  __shared__ uint32_t built_len, built_duplicate;
  // The item after items[cur], as the thread that decodes it found it (double-buffered like
  // `items`: a slot is rewritten two items later, when every thread has read it).
  __shared__ uint64_t next_of[2];
  uint32_t cur = 0;
  uint64_t item = blockIdx.x * run_length(p);
  if (threadIdx.x == 0) {
    built_begin = ~0ull;
    built_len = 0;
    built_duplicate = 0;
    if (item < p.n_items) decode_item(p, item, &items[0]);
  }
  __syncthreads();
  while (item < p.n_items) {
    if (threadIdx.x == joinkit::kWarpSize) {
      const uint64_t next = next_item(p, item);
      next_of[cur] = next;
      if (next < p.n_items) decode_item(p, next, &items[cur ^ 1]);
    }
    Item& it = items[cur];
    const Table<K> t(smem, p.capacity, it.build_len);
    // The first round's probe keys are loaded before the build, so both loads overlap.
    K key[kKeysInFlight<K>];
    load_round_keys(p, it, 0, key);
    // A partition's probe pieces share its build piece: a block that meets the piece it built
    // last keeps the table (a hot partition under Zipf 1.0 has hundreds of probe pieces).
    const bool rebuild = it.build_begin != built_begin || it.build_len != built_len;
    if (rebuild) {
      build<K>(p, t, &it);
      if (threadIdx.x == 0) {
        if (it.duplicate) atomicOr(ptr<uint32_t>(p.status), kStatusDuplicate);
        built_begin = it.build_begin;
        built_len = it.build_len;
        built_duplicate = it.duplicate;
      }
    }
    const bool duplicate = rebuild ? it.duplicate != 0 : built_duplicate != 0;
    if (!(duplicate && p.unique_build))
      for (uint32_t first = 0; first < it.probe_len; first += kKeysInFlight<K> * kJoinBlock) {
        if (first != 0) load_round_keys(p, it, first, key);
        join_round<K, PW, BW>(p, t, it, first, key, &round);
      }
    __syncthreads();  // the next item reuses shared memory and the decoded item
    item = next_of[cur];
    cur ^= 1;
  }
}

}  // namespace

// The count, write and one-pass join kernels, per key type and id words (`_4`: uint32_t, `_8`:
// uint64_t; the count pass names only the probe side's, which the flags read), built for three
// blocks an SM (40 registers a thread), or kJoinBlocks for the one-pass join.
#define MATCH_KERNEL(NAME, BLOCKS, ...)                                                \
  extern "C" __global__ void __launch_bounds__(kJoinBlock, BLOCKS) NAME(CoParams p) { \
    __VA_ARGS__(p);                                                                    \
  }
#define MATCH_KERNELS(KN, K)                                                             \
  MATCH_KERNEL(phj_count_##KN##_4, 3, count_items<K, uint32_t>)                          \
  MATCH_KERNEL(phj_count_##KN##_8, 3, count_items<K, uint64_t>)                          \
  MATCH_KERNEL(phj_write_##KN##_4_4, 3, write_items<K, uint32_t, uint32_t>)              \
  MATCH_KERNEL(phj_write_##KN##_4_8, 3, write_items<K, uint32_t, uint64_t>)              \
  MATCH_KERNEL(phj_write_##KN##_8_4, 3, write_items<K, uint64_t, uint32_t>)              \
  MATCH_KERNEL(phj_write_##KN##_8_8, 3, write_items<K, uint64_t, uint64_t>)              \
  MATCH_KERNEL(phj_join_##KN##_4_4, (kJoinBlocks<K>), join_items<K, uint32_t, uint32_t>) \
  MATCH_KERNEL(phj_join_##KN##_4_8, (kJoinBlocks<K>), join_items<K, uint32_t, uint64_t>) \
  MATCH_KERNEL(phj_join_##KN##_8_4, (kJoinBlocks<K>), join_items<K, uint64_t, uint32_t>) \
  MATCH_KERNEL(phj_join_##KN##_8_8, (kJoinBlocks<K>), join_items<K, uint64_t, uint64_t>)
MATCH_KERNELS(u32, uint32_t)
MATCH_KERNELS(u64, uint64_t)
#undef MATCH_KERNELS
#undef MATCH_KERNEL

// stats[0] and [1] raised to this thread's maxima: one atomic per warp, not per partition
// (65536 partitions' atomics on two words took 0.1 ms). Every thread of the launch calls it.
__device__ __forceinline__ void raise_stats(unsigned long long* stats, uint64_t most,
                                            uint64_t longest) {
  most = joinkit::warp_max(most);
  longest = joinkit::warp_max(longest);
  if (joinkit::lane_id() == 0) {
    if (most != 0) atomicMax(stats + 0, static_cast<unsigned long long>(most));
    if (longest != 0) atomicMax(stats + 1, static_cast<unsigned long long>(longest));
  }
}

// Pieces of a contiguous partition, step 1: counts[p] = ceil(rows of p / max_rows) for
// p < fanout and counts[fanout] = 0 (scanned into the piece offsets); stats[0] = most pieces of
// a partition, stats[1] = longest piece, stats[2] = 1 when offsets decrease, stats[3] = rows.
// `stats` must be zeroed.
extern "C" __global__ void phj_piece_counts(const uint64_t* offsets, uint64_t fanout,
                                            uint64_t max_rows, uint64_t* counts,
                                            unsigned long long* stats) {
  uint64_t most = 0, longest = 0;
  for (uint64_t p = joinkit::global_thread_id(); p <= fanout; p += joinkit::grid_stride()) {
    if (p == fanout) {
      counts[p] = 0;
      stats[3] = offsets[fanout] - offsets[0];
      continue;
    }
    uint64_t rows = 0;
    if (offsets[p + 1] < offsets[p])
      atomicMax(stats + 2, 1ull);
    else
      rows = offsets[p + 1] - offsets[p];
    const uint64_t n = (rows + max_rows - 1) / max_rows;
    counts[p] = n;
    most = n > most ? n : most;
    const uint64_t l = rows < max_rows ? rows : max_rows;
    longest = l > longest ? l : longest;
  }
  raise_stats(stats, most, longest);
}

// Step 2: partition p's pieces at po[p]..po[p + 1], cut every max_rows rows (a warp per
// partition, its lanes striding over the pieces).
extern "C" __global__ void phj_piece_fill(const uint64_t* offsets, const uint64_t* po,
                                          uint64_t fanout, uint64_t max_rows, uint64_t* begin,
                                          uint32_t* len) {
  const uint64_t warps = joinkit::grid_stride() / joinkit::kWarpSize;
  for (uint64_t p = joinkit::global_thread_id() / joinkit::kWarpSize; p < fanout; p += warps) {
    const uint64_t first = po[p], n = po[p + 1] - first, start = offsets[p], end = offsets[p + 1];
    for (uint64_t i = joinkit::lane_id(); i < n; i += joinkit::kWarpSize) {
      const uint64_t b = start + i * max_rows;
      begin[first + i] = b;
      len[first + i] = static_cast<uint32_t>(end - b < max_rows ? end - b : max_rows);
    }
  }
}

// Pieces of a bucket-chain partition, step 1: counts[p] = ceil(rows / cap) (buckets of the
// chain), counts[fanout] = 0; stats as phj_piece_counts (stats[3] summed).
extern "C" __global__ void phj_chain_counts(const uint64_t* rows, uint64_t fanout, uint64_t cap,
                                            uint64_t* counts, unsigned long long* stats) {
  uint64_t most = 0, longest = 0, sum = 0;
  for (uint64_t p = joinkit::global_thread_id(); p <= fanout; p += joinkit::grid_stride()) {
    if (p == fanout) {
      counts[p] = 0;
      continue;
    }
    const uint64_t r = rows[p], n = (r + cap - 1) / cap;
    counts[p] = n;
    most = n > most ? n : most;
    const uint64_t l = r < cap ? r : cap;
    longest = l > longest ? l : longest;
    sum += r;
  }
  raise_stats(stats, most, longest);
  sum = joinkit::warp_sum(sum);
  if (joinkit::lane_id() == 0 && sum != 0) atomicAdd(stats + 3, static_cast<unsigned long long>(sum));
}

// Step 2, per pool bucket b < used: its partition from its first key (every bucket taken holds
// at least one row from slot 0), a place among the partition's pieces (order unspecified), its
// rows (full, or what the head bucket holds). stats[2] = 1 when a bucket claims a partition
// with no room left, which the host reports as corrupt chains.
template <typename K>
__device__ void chain_fill(const K* pool_keys, const uint32_t* heads, const uint64_t* rows,
                           const uint64_t* po, uint64_t used, uint64_t cap, uint64_t fanout,
                           uint32_t hash_seed, uint32_t use_hash, uint32_t bits_begin,
                           uint32_t* cursor, uint64_t* begin, uint32_t* len,
                           unsigned long long* stats) {
  for (uint64_t b = joinkit::global_thread_id(); b < used; b += joinkit::grid_stride()) {
    const K k = pool_keys[b * cap];
    uint64_t p;
    if (use_hash)
      p = (static_cast<uint64_t>(joinkit::hash_key(k, hash_seed)) * fanout) >> 32;
    else
      p = (static_cast<uint64_t>(k) >> bits_begin) & (fanout - 1);
    if (p >= fanout) {
      atomicMax(stats + 2, 1ull);
      continue;
    }
    const uint32_t slot = atomicAdd(cursor + p, 1u);
    if (slot >= po[p + 1] - po[p]) {
      atomicMax(stats + 2, 1ull);
      continue;
    }
    begin[po[p] + slot] = b * cap;
    len[po[p] + slot] =
        static_cast<uint32_t>(heads[p] == b ? (rows[p] - 1) % cap + 1 : cap);
  }
}

#define CHAIN_FILL(K, NAME)                                                                     \
  extern "C" __global__ void NAME(const K* pool_keys, const uint32_t* heads,                  \
                                  const uint64_t* rows, const uint64_t* po, uint64_t used,     \
                                  uint64_t cap, uint64_t fanout, uint32_t hash_seed,           \
                                  uint32_t use_hash, uint32_t bits_begin, uint32_t* cursor,    \
                                  uint64_t* begin, uint32_t* len, unsigned long long* stats) { \
    chain_fill<K>(pool_keys, heads, rows, po, used, cap, fanout, hash_seed, use_hash,         \
                  bits_begin, cursor, begin, len, stats);                                      \
  }
CHAIN_FILL(uint32_t, phj_chain_fill_u32)
CHAIN_FILL(uint64_t, phj_chain_fill_u64)
#undef CHAIN_FILL

// Work items per partition: counts[p] = build pieces * probe pieces (with `unique`, build
// pieces of a partition without probe pieces get a build-only item each, so every build piece
// is checked for duplicates), counts[fanout] = 0.
extern "C" __global__ void phj_item_counts(const uint64_t* probe_po, const uint64_t* build_po,
                                           uint64_t fanout, uint32_t unique, uint64_t* counts) {
  for (uint64_t p = joinkit::global_thread_id(); p <= fanout; p += joinkit::grid_stride()) {
    if (p == fanout) {
      counts[p] = 0;
      continue;
    }
    uint64_t np = probe_po[p + 1] - probe_po[p];
    if (np == 0 && unique) np = 1;
    counts[p] = np * (build_po[p + 1] - build_po[p]);
  }
}

// item_part[i] = the partition of item i (a warp per partition).
extern "C" __global__ void phj_item_parts(const uint64_t* item_offsets, uint64_t fanout,
                                          uint32_t* item_part) {
  const uint64_t warps = joinkit::grid_stride() / joinkit::kWarpSize;
  for (uint64_t p = joinkit::global_thread_id() / joinkit::kWarpSize; p < fanout; p += warps)
    for (uint64_t i = item_offsets[p] + joinkit::lane_id(); i < item_offsets[p + 1];
         i += joinkit::kWarpSize)
      item_part[i] = static_cast<uint32_t>(p);
}

// Folds this thread's least and greatest key into range[0] (atomicMin) and range[1]
// (atomicMax), one atomic pair a warp; every lane of the warp calls it. A thread that saw no
// key holds (2^64 - 1, 0).
__device__ __forceinline__ void fold_range(uint64_t least, uint64_t greatest,
                                           unsigned long long* range) {
  // The least key as the greatest complement: one reduction function for both.
  const uint64_t not_least = joinkit::warp_max(~least);
  greatest = joinkit::warp_max(greatest);
  if (joinkit::lane_id() == 0 && (not_least != 0 || greatest != 0)) {  // the warp saw a key
    atomicMin(range, static_cast<unsigned long long>(~not_least));
    atomicMax(range + 1, static_cast<unsigned long long>(greatest));
  }
}

// The low 32 bits of n 8-byte keys into `out`, and the least and greatest key folded into
// range[0] (atomicMin) and range[1] (atomicMax), which the caller sets to (2^64 - 1, 0) before
// the first side: both sides' keys go through before the caller reads the range and keeps the
// narrowed keys only when it spans at most 2^32 values (src/copart_cuda.rs narrow_keys). Four
// keys a thread are loaded before any is stored.
extern "C" __global__ void phj_narrow_keys(const uint64_t* keys, uint64_t n, uint32_t* out,
                                           unsigned long long* range) {
  constexpr uint32_t kInFlight = 4;
  uint64_t least = ~0ull, greatest = 0;
  const uint64_t stride = joinkit::grid_stride();
  for (uint64_t first = joinkit::global_thread_id(); first < n; first += kInFlight * stride) {
    uint64_t k[kInFlight];
#pragma unroll
    for (uint32_t j = 0; j < kInFlight; ++j) {
      const uint64_t i = first + j * stride;
      if (i < n) k[j] = keys[i];
    }
#pragma unroll
    for (uint32_t j = 0; j < kInFlight; ++j) {
      const uint64_t i = first + j * stride;
      if (i >= n) continue;
      out[i] = static_cast<uint32_t>(k[j]);
      least = k[j] < least ? k[j] : least;
      greatest = k[j] > greatest ? k[j] : greatest;
    }
  }
  fold_range(least, greatest, range);
}

// Folds `samples` of n 8-byte keys, evenly spaced, into range[0] (least, atomicMin) and
// range[1] (greatest, atomicMax), set by the caller to (2^64 - 1, 0): a look before
// phj_narrow_keys, whose pass is wasted when the keys span more than 2^32 values, which a few
// keys usually show (a miss key far above the build keys, hashed or random keys).
extern "C" __global__ void phj_sample_range(const uint64_t* keys, uint64_t n, uint64_t samples,
                                            unsigned long long* range) {
  uint64_t least = ~0ull, greatest = 0;
  const uint64_t taken = samples < n ? samples : n;
  for (uint64_t s = joinkit::global_thread_id(); s < taken; s += joinkit::grid_stride()) {
    const uint64_t k = keys[s * n / taken];
    least = k < least ? k : least;
    greatest = k > greatest ? k : greatest;
  }
  fold_range(least, greatest, range);
}
