// joinkit hash tables, device side: the table layouts and the insert / probe routines that the
// crate's kernels (kernels/hashtable.cu) are written with, for use inside other kernels too.
//
// A table is described by one plain struct, `RawTable` (48 bytes, passed by value as a kernel
// argument; the Rust mirror is `joinkit_hashtable::cuda::RawTable`), and read through one of
// three views built from it:
//
//   KeyValueTable<K, Probing>  open addressing, (key, build row) slots, unique keys.
//       K = uint32_t: one 8-byte word per slot, key in the low half, row in the high half, so
//       one 64-bit CAS inserts. K = uint64_t: two words per slot (key, row), 16-byte aligned.
//       The key equal to the empty sentinel (all ones) lives in one extra slot at index
//       `capacity`, so every key value can be inserted.
//   HashRowTable<K, Probing>   open addressing, (hash32, build row) slots in one 8-byte word
//       (hash in the high half), any number of equal keys; a probe re-checks the key against
//       the build key column (`keys`). Row ids are below 2^32 - 1, so a used slot never equals
//       the empty word.
//   ChainedTable<K>            lock-free chaining (Thostrup et al., SIGMOD'23 §4.2): bucket
//       heads (`slots`, uint32_t) and a dense chain array `next` indexed by build row; insert
//       is one atomic exchange on the head; probes use no atomics and compare keys from `keys`.
//
// Probing policies: LinearProbing (step 1) and DoubleHashing (step from a second hash, in
// [1, capacity - 1]; the host makes the capacity prime so every sequence visits every slot).
// The home slot is Lemire's multiply-shift reduction of the 32-bit key hash, so any capacity up
// to 2^32 works without a modulo.
//
// Every loop is bounded: inserts by `capacity` steps, open-addressing probes by `max_probe`
// (the longest insert sequence the build saw, never above `capacity`), chain walks by `rows`.
//
// A table in shared memory: copy `slots` (and for HashRowTable / ChainedTable keep `keys`
// where they are) into shared memory, set `raw.slots` to the shared address (generic
// addressing) and build the view from that `RawTable`; the probe routines are the same.
//
// Include path: this folder is exported by joinkit-hashtable's build script as
// DEP_JOINKIT_HASHTABLE_INCLUDE (links = "joinkit_hashtable"); joinkit/hash.cuh comes from
// joinkit-cuda (DEP_JOINKIT_CUDA_INCLUDE).
#pragma once
#include <stdint.h>

#include "joinkit/hash.cuh"

namespace joinkit {
namespace ht {

// An empty slot (open addressing) or the end of a chain.
constexpr uint64_t kEmptyWord = ~0ull;
constexpr uint32_t kEmptyRow = 0xffffffffu;
// Status bits a build writes (the Rust side reads them after the build kernel).
constexpr uint32_t kStatusFull = 1u;
constexpr uint32_t kStatusDuplicate = 2u;
// What one insert step (`insert_step` of the open-addressing views) found at its slot.
constexpr int kStepInserted = 0;   // the slot was empty and now holds the row
constexpr int kStepDuplicate = 1;  // the slot holds the key already (key-value tables)
constexpr int kStepOccupied = 2;   // another key: advance the sequence and try again
// Seed offset of the second hash (double hashing).
constexpr uint32_t kSecondSeed = 0x5bd1e995u;

// The table a kernel gets: device addresses as 64-bit integers, sizes, hash seed and the probe
// bound. Field order and types must match `joinkit_hashtable::cuda::RawTable`.
struct RawTable {
  uint64_t slots;     // uint64_t* (open addressing) or uint32_t* heads (chained)
  uint64_t next;      // uint32_t* chain array (chained), else 0
  uint64_t keys;      // const K* build key column (HashRow, Chained), else 0
  uint64_t capacity;  // slots (open addressing, sentinel slot not counted) or buckets
  uint64_t rows;      // build rows
  uint32_t seed;      // hash seed
  uint32_t max_probe; // longest insert probe sequence, in slots (open addressing)
};

template <typename K>
__host__ __device__ __forceinline__ K empty_key() {
  return static_cast<K>(~static_cast<K>(0));
}

// Lemire's reduction: a 32-bit hash onto [0, n) for n <= 2^32.
__host__ __device__ __forceinline__ uint64_t reduce(uint32_t h, uint64_t n) {
  return (static_cast<uint64_t>(h) * n) >> 32;
}

// A probe sequence over `capacity` slots: `slot()` now, `advance()` to the next. Visits every
// slot once in `capacity` steps (linear: always; double hashing: when capacity is prime).
struct ProbeSeq {
  uint64_t idx, step, capacity;
  __device__ __forceinline__ uint64_t slot() const { return idx; }
  __device__ __forceinline__ void advance() {
    idx += step;
    if (idx >= capacity) idx -= capacity;
  }
};

struct LinearProbing {
  template <typename K>
  __device__ __forceinline__ static ProbeSeq make(K, uint32_t h, uint32_t, uint64_t capacity) {
    return ProbeSeq{reduce(h, capacity), 1, capacity};
  }
};

struct DoubleHashing {
  template <typename K>
  __device__ __forceinline__ static ProbeSeq make(K key, uint32_t h, uint32_t seed,
                                                  uint64_t capacity) {
    uint64_t step = 1;
    if (capacity > 2) step = 1 + reduce(hash_key(key, seed ^ kSecondSeed), capacity - 1);
    return ProbeSeq{reduce(h, capacity), step, capacity};
  }
};

// Atomic helpers on generic addresses.
__device__ __forceinline__ uint64_t cas64(uint64_t* p, uint64_t expect, uint64_t v) {
  return atomicCAS(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(expect),
                   static_cast<unsigned long long>(v));
}

// ---------------------------------------------------------------------------------------------
// Open addressing, (key, row) slots.

template <typename K>
struct KvSlot;

// 4-byte keys: one word, key low, row high.
template <>
struct KvSlot<uint32_t> {
  static constexpr uint64_t kWords = 1;
  __device__ __forceinline__ static uint64_t pack(uint32_t key, uint32_t row) {
    return static_cast<uint64_t>(key) | (static_cast<uint64_t>(row) << 32);
  }
  // Inserts at word `w`: kStepInserted, kStepDuplicate or kStepOccupied. Reads the word
  // before the CAS (measured on an H200: CAS-first is slower, most of all at load 0.8); that
  // read may come from L1 and be stale, but only ever stale-empty (a slot is written once):
  // the CAS then fails and returns the real word.
  __device__ __forceinline__ static int insert(uint64_t* w, uint32_t key, uint32_t row) {
    uint64_t cur = *w;
    if (cur == kEmptyWord) {
      cur = cas64(w, kEmptyWord, pack(key, row));
      if (cur == kEmptyWord) return kStepInserted;
    }
    return static_cast<uint32_t>(cur) == key ? kStepDuplicate : kStepOccupied;
  }
  // The row stored under `key` at word `w`: kEmptyRow if another key, `empty` set if free.
  __device__ __forceinline__ static uint32_t find(const uint64_t* w, uint32_t key, bool* empty) {
    const uint64_t cur = *w;
    *empty = cur == kEmptyWord;
    return static_cast<uint32_t>(cur) == key && !*empty ? static_cast<uint32_t>(cur >> 32)
                                                        : kEmptyRow;
  }
};

// 8-byte keys: two words (key, row), 16-byte aligned; the row is written after the key is won
// (probes run in later kernels, so they see both).
template <>
struct KvSlot<uint64_t> {
  static constexpr uint64_t kWords = 2;
  __device__ __forceinline__ static int insert(uint64_t* w, uint64_t key, uint32_t row) {
    uint64_t cur = *w;  // stale only ever as empty, as above
    if (cur == kEmptyWord) {
      cur = cas64(w, kEmptyWord, key);
      if (cur == kEmptyWord) {
        w[1] = row;
        return kStepInserted;
      }
    }
    return cur == key ? kStepDuplicate : kStepOccupied;
  }
  __device__ __forceinline__ static uint32_t find(const uint64_t* w, uint64_t key, bool* empty) {
    const ulonglong2 s = *reinterpret_cast<const ulonglong2*>(w);
    *empty = s.x == kEmptyWord;
    return s.x == key ? static_cast<uint32_t>(s.y) : kEmptyRow;
  }
};

// An open-addressing view's whole insert, step by step (`start`, `insert_step`): returns 0 and
// the sequence length used in *probes, or kStatusFull / kStatusDuplicate. Bounded by
// `capacity` steps; gives up early when *status already says full.
template <typename Table, typename K>
__device__ __forceinline__ uint32_t insert_steps(const Table& table, K key, uint32_t row,
                                                 uint32_t* probes, const uint32_t* status) {
  *probes = 0;
  ProbeSeq seq = table.start(key);
  for (uint64_t s = 1; s <= table.capacity; ++s) {
    const int r = table.insert_step(seq, key, row);
    if (r == kStepInserted) {
      *probes = static_cast<uint32_t>(s);
      return 0;
    }
    if (r == kStepDuplicate) return kStatusDuplicate;
    if ((s & 63) == 0 && (*reinterpret_cast<const volatile uint32_t*>(status) & kStatusFull))
      return kStatusFull;
    seq.advance();
  }
  return kStatusFull;
}

template <typename K, typename Probing>
struct KeyValueTable {
  uint64_t* slots;
  uint64_t capacity;
  uint32_t seed;
  uint32_t max_probe;

  __device__ __forceinline__ explicit KeyValueTable(const RawTable& t)
      : slots(reinterpret_cast<uint64_t*>(t.slots)),
        capacity(t.capacity),
        seed(t.seed),
        max_probe(t.max_probe) {}

  // The extra slot of the key equal to the empty sentinel: its row word is the flag.
  __device__ __forceinline__ uint64_t* sentinel_row_word() const {
    return slots + capacity * KvSlot<K>::kWords + (KvSlot<K>::kWords - 1);
  }

  // The probe sequence of `key`, at its home slot.
  __device__ __forceinline__ ProbeSeq start(K key) const {
    return Probing::make(key, hash_key(key, seed), seed, capacity);
  }

  // One insert step: tries (key, row) at the slot `seq` is at. The key equal to the empty
  // sentinel goes to the extra slot instead, in one step.
  __device__ __forceinline__ int insert_step(const ProbeSeq& seq, K key, uint32_t row) const {
    if (key == empty_key<K>()) {
      const uint64_t value = KvSlot<K>::kWords == 1
                                 ? (static_cast<uint64_t>(key) | (static_cast<uint64_t>(row) << 32))
                                 : static_cast<uint64_t>(row);
      return cas64(sentinel_row_word(), kEmptyWord, value) == kEmptyWord ? kStepInserted
                                                                        : kStepDuplicate;
    }
    return KvSlot<K>::insert(slots + seq.slot() * KvSlot<K>::kWords, key, row);
  }

  // Inserts (key, row). Returns 0 and the sequence length used in *probes, or kStatusFull /
  // kStatusDuplicate. Gives up early when *status already says full.
  __device__ __forceinline__ uint32_t insert(K key, uint32_t row, uint32_t* probes,
                                             const uint32_t* status) const {
    return insert_steps(*this, key, row, probes, status);
  }

  // Calls f(row) for the (at most one) build row holding `key`.
  template <typename F>
  __device__ __forceinline__ void for_each_match(K key, F&& f) const {
    if (key == empty_key<K>()) {
      const uint64_t v = *sentinel_row_word();
      if (v != kEmptyWord) f(static_cast<uint32_t>(KvSlot<K>::kWords == 1 ? v >> 32 : v));
      return;
    }
    const uint32_t h = hash_key(key, seed);
    ProbeSeq seq = Probing::make(key, h, seed, capacity);
    for (uint32_t s = 0; s < max_probe; ++s) {
      bool empty;
      const uint32_t row = KvSlot<K>::find(slots + seq.slot() * KvSlot<K>::kWords, key, &empty);
      if (row != kEmptyRow) {
        f(row);
        return;
      }
      if (empty) return;
      seq.advance();
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Open addressing, (hash32, row) slots, multi-match.

template <typename K, typename Probing>
struct HashRowTable {
  uint64_t* slots;
  const K* keys;
  uint64_t capacity;
  uint32_t seed;
  uint32_t max_probe;

  __device__ __forceinline__ explicit HashRowTable(const RawTable& t)
      : slots(reinterpret_cast<uint64_t*>(t.slots)),
        keys(reinterpret_cast<const K*>(t.keys)),
        capacity(t.capacity),
        seed(t.seed),
        max_probe(t.max_probe) {}

  // The probe sequence of `key`, at its home slot.
  __device__ __forceinline__ ProbeSeq start(K key) const {
    return Probing::make(key, hash_key(key, seed), seed, capacity);
  }

  // One insert step: tries (hash, row) at the slot `seq` is at (never kStepDuplicate: equal
  // keys take a slot each). The read may be stale-empty, as in KvSlot::insert.
  __device__ __forceinline__ int insert_step(const ProbeSeq& seq, K key, uint32_t row) const {
    uint64_t* w = slots + seq.slot();
    const uint64_t word = (static_cast<uint64_t>(hash_key(key, seed)) << 32) | row;
    return *w == kEmptyWord && cas64(w, kEmptyWord, word) == kEmptyWord ? kStepInserted
                                                                        : kStepOccupied;
  }

  // As KeyValueTable::insert (never kStatusDuplicate).
  __device__ __forceinline__ uint32_t insert(K key, uint32_t row, uint32_t* probes,
                                             const uint32_t* status) const {
    return insert_steps(*this, key, row, probes, status);
  }

  // Calls f(row) for every build row holding `key`, in probe order, while f returns true.
  template <typename F>
  __device__ __forceinline__ void for_each_match(K key, F&& f) const {
    const uint32_t h = hash_key(key, seed);
    ProbeSeq seq = Probing::make(key, h, seed, capacity);
    for (uint32_t s = 0; s < max_probe; ++s) {
      const uint64_t w = slots[seq.slot()];
      if (w == kEmptyWord) return;
      if (static_cast<uint32_t>(w >> 32) == h) {
        const uint32_t row = static_cast<uint32_t>(w);
        if (keys[row] == key && !f(row)) return;
      }
      seq.advance();
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Lock-free chaining.

template <typename K>
struct ChainedTable {
  uint32_t* heads;
  uint32_t* next;
  const K* keys;
  uint64_t buckets;
  uint64_t rows;
  uint32_t seed;

  __device__ __forceinline__ explicit ChainedTable(const RawTable& t)
      : heads(reinterpret_cast<uint32_t*>(t.slots)),
        next(reinterpret_cast<uint32_t*>(t.next)),
        keys(reinterpret_cast<const K*>(t.keys)),
        buckets(t.capacity),
        rows(t.rows),
        seed(t.seed) {}

  // Pushes `row` on its bucket's chain: one atomic exchange, then the link.
  __device__ __forceinline__ void insert(K key, uint32_t row) const {
    const uint64_t b = reduce(hash_key(key, seed), buckets);
    next[row] = atomicExch(heads + b, row);
  }

  template <typename F>
  __device__ __forceinline__ void for_each_match(K key, F&& f) const {
    uint32_t r = heads[reduce(hash_key(key, seed), buckets)];
    for (uint64_t s = 0; s < rows && r != kEmptyRow; ++s) {
      if (keys[r] == key && !f(r)) return;
      r = next[r];
    }
  }
};

}  // namespace ht
}  // namespace joinkit
