// Cascaded codec kernels (format: codec/FORMAT.md; CPU twin: src/host.rs, decision for decision).
//
// One block per chunk (grid-stride over the chunks of all buffers of a call, so one launch
// serves many buffers of different sizes): the chunk is staged in shared memory, every
// intermediate layer stays there, and only the encoded words (or the decoded values) touch
// global memory.
//
// Compress is two-phase with chunk-aligned slots: `encode_chunks` writes each chunk into a
// max-size slot of scratch memory and its word count; the host scans the counts (CUB) and
// `compact_chunks` copies each chunk to its final place and writes its offset; the stream
// headers are built on the host (they depend only on counts) and scattered by `copy_segments`.
//
// Decode: the host has validated every stream header and offset table. `decode_chunks_warp`
// (one warp per chunk, for cascades of two layers or more whose chunks fit its shared memory)
// runs first over all chunks of all buffers and defers the others to `decode_chunks` (one
// block per chunk), which runs over that list. Both re-check the chunk's offsets, read the
// chunk once into shared memory while summing its checksum, validate the chunk header and
// checksum before writing any output, and check the RLE run sums; a failing chunk records (global chunk << 8 | fault code) with atomicMin in `err`
// and writes nothing more (a chunk failing its run sums may have written nothing either: the
// check comes before its outermost layer writes).
#include <stdint.h>
#include "joinkit/device.cuh"
#include "joinkit/hash.cuh"

namespace {

constexpr int kMaxLayers = 8;
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kModeRaw = 0;
constexpr uint64_t kModeCascaded = 1;
constexpr uint32_t kLayerRle = 1;
constexpr uint32_t kLayerDelta = 2;
constexpr uint64_t kHeaderWords = 8;
constexpr uint64_t kMinChunkWords = 3;  // src/format.rs MIN_CHUNK_WORDS

// Fault codes (src/format.rs ChunkFault).
constexpr uint32_t kFaultOffset = 1;
constexpr uint32_t kFaultHeader = 2;
constexpr uint32_t kFaultLength = 3;
constexpr uint32_t kFaultChecksum = 4;
constexpr uint32_t kFaultRuns = 5;

__device__ __forceinline__ uint64_t word_term(uint64_t w, uint64_t i) {
  return joinkit::fmix64(w + (i + 1) * kGolden);
}
__device__ __forceinline__ uint64_t finish_checksum(uint64_t sum, uint64_t chunk, uint64_t len) {
  return joinkit::fmix64(sum ^ joinkit::hash64(chunk, len));
}
__device__ __forceinline__ uint64_t umin(uint64_t a, uint64_t b) { return a < b ? a : b; }
__device__ __forceinline__ uint64_t umax(uint64_t a, uint64_t b) { return a > b ? a : b; }
__device__ __forceinline__ uint32_t bit_width(uint64_t x) { return x == 0 ? 0 : 64 - __clzll(x); }
__device__ __forceinline__ uint64_t packed_words(uint64_t count, uint32_t w) {
  return (count * w + 63) / 64;
}
__device__ __forceinline__ uint64_t raw_words(uint64_t n, uint32_t bits) {
  return 2 + packed_words(n, bits);
}
__device__ __forceinline__ uint64_t value_mask(uint32_t bits) {
  return bits >= 64 ? ~0ull : (1ull << bits) - 1;
}

__device__ __forceinline__ uint32_t zigzag(uint32_t d) {
  int32_t s = static_cast<int32_t>(d);
  return static_cast<uint32_t>((s << 1) ^ (s >> 31));
}
__device__ __forceinline__ uint64_t zigzag(uint64_t d) {
  int64_t s = static_cast<int64_t>(d);
  return static_cast<uint64_t>((s << 1) ^ (s >> 63));
}
template <typename U>
__device__ __forceinline__ U unzigzag(U z) {
  return (z >> 1) ^ (U(0) - (z & U(1)));
}

// Value i of a packed stream of w-bit values (w <= 64); the stream holds packed_words(.., w).
__device__ __forceinline__ uint64_t unpack(const uint64_t* src, uint64_t i, uint32_t w) {
  if (w == 0) return 0;
  uint64_t pos = i * w;
  uint64_t wi = pos >> 6;
  uint32_t sh = static_cast<uint32_t>(pos & 63);
  uint64_t v = src[wi] >> sh;
  if (sh + w > 64) v |= src[wi + 1] << (64 - sh);
  return v & value_mask(w);
}

// Block-wide reduction with `op` (every thread gets the result). `red` needs 32 words.
template <typename Op>
__device__ __forceinline__ uint64_t block_reduce(uint64_t v, uint64_t* red, Op op) {
  for (int d = 16; d > 0; d >>= 1) v = op(v, __shfl_xor_sync(joinkit::kFullMask, v, d));
  if (joinkit::lane_id() == 0) red[joinkit::warp_id()] = v;
  __syncthreads();
  uint64_t r = red[0];
  for (unsigned w = 1; w < (blockDim.x + 31) / 32; ++w) r = op(r, red[w]);
  __syncthreads();
  return r;
}
__device__ __forceinline__ uint64_t block_sum(uint64_t v, uint64_t* red) {
  return block_reduce(v, red, [](uint64_t a, uint64_t b) { return a + b; });
}
// Block-wide minimum of `lo` and maximum of `hi` in one pass (two barriers, not four).
// `red` and `red2` need 32 words each.
__device__ __forceinline__ void block_minmax(uint64_t& lo, uint64_t& hi, uint64_t* red,
                                             uint64_t* red2) {
  for (int d = 16; d > 0; d >>= 1) {
    lo = umin(lo, __shfl_xor_sync(joinkit::kFullMask, lo, d));
    hi = umax(hi, __shfl_xor_sync(joinkit::kFullMask, hi, d));
  }
  if (joinkit::lane_id() == 0) {
    red[joinkit::warp_id()] = lo;
    red2[joinkit::warp_id()] = hi;
  }
  __syncthreads();
  lo = red[0];
  hi = red2[0];
  for (unsigned w = 1; w < (blockDim.x + 31) / 32; ++w) {
    lo = umin(lo, red[w]);
    hi = umax(hi, red2[w]);
  }
  __syncthreads();  // red and red2 may be written again
}

// Packs `count` values get(i) of w bits into dst[0 .. packed_words(count, w)), one thread per
// output word (no atomics, deterministic). Adds the checksum terms of the words it writes
// (word j sits at chunk position `at + j`) to `acc`.
template <typename F>
__device__ __forceinline__ void pack_words(uint64_t* dst, uint64_t at, uint64_t count, uint32_t w,
                                           F get, uint64_t& acc) {
  const uint64_t nw = packed_words(count, w);
  for (uint64_t j = threadIdx.x; j < nw; j += blockDim.x) {
    const uint64_t bit0 = j * 64;
    const uint64_t i0 = bit0 / w;
    uint64_t i1 = (bit0 + 63) / w;
    if (i1 > count - 1) i1 = count - 1;
    uint64_t word = 0;
    for (uint64_t i = i0; i <= i1; ++i) {
      const uint64_t v = get(i);
      const int64_t sh = static_cast<int64_t>(i * w) - static_cast<int64_t>(bit0);
      word |= sh >= 0 ? v << sh : v >> (-sh);
    }
    dst[j] = word;
    acc += word_term(word, at + j);
  }
}

// Decode: a chunk's parsed header (parse_chunk fills it).
struct ChunkHeader {
  uint64_t fault;
  uint64_t mode, fw, fmin, fcount, foff;
  uint64_t lcount[kMaxLayers], lwidth[kMaxLayers], lvalue[kMaxLayers], loff[kMaxLayers];
};
// Rust: CHUNK_HEADER_BYTES in src/cuda.rs (the warp decoder's shared-memory layout).
static_assert(sizeof(ChunkHeader) == 304, "ChunkHeader layout");

// Shared state of one block (besides the dynamic value buffers).
struct BlockState : ChunkHeader {
  uint64_t scan[joinkit::kWarpSize + 1];
  uint64_t red[32];
  uint64_t red2[32];
  uint64_t hdr[3 + kMaxLayers];
};

// The encode kernel's dynamic shared memory: two value buffers and one run-start buffer of a
// chunk each (u16 starts suffice, they are below cv <= 8192).
template <typename U>
struct Stage {
  static constexpr uint32_t kBits = sizeof(U) * 8;
  U* a;
  U* b;
  uint16_t* s;
  U flip;
  __device__ Stage(uint32_t cv, uint32_t is_signed) {
    extern __shared__ __align__(16) unsigned char dyn[];
    a = reinterpret_cast<U*>(dyn);
    b = a + cv;
    s = reinterpret_cast<uint16_t*>(b + cv);
    flip = is_signed ? static_cast<U>(U(1) << (kBits - 1)) : U(0);
  }
};

// The buffer that global chunk g belongs to: the last k with chunk_base[k] <= g.
__device__ __forceinline__ uint32_t find_buffer(const uint64_t* chunk_base, uint32_t nbuf,
                                                uint64_t g) {
  uint32_t lo = 0, hi = nbuf;  // answer in [lo, hi)
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (chunk_base[mid] <= g) lo = mid; else hi = mid;
  }
  return lo;
}

// find_buffer for a whole warp (every lane gets the answer): 32 candidates per round, so 1024
// buffers take two rounds of loads instead of ten dependent ones (a warp decodes its chunks one
// after another, so the search's latency is not hidden by other threads of the chunk).
__device__ __forceinline__ uint32_t find_buffer_warp(const uint64_t* chunk_base, uint32_t nbuf,
                                                     uint64_t g) {
  uint32_t lo = 0, hi = nbuf;  // answer in [lo, hi); chunk_base[lo] <= g throughout
  while (hi - lo > 1) {
    const uint32_t span = (hi - lo + joinkit::kWarpSize - 1) / joinkit::kWarpSize;
    const uint32_t cand = lo + joinkit::lane_id() * span;
    const uint32_t le = __ballot_sync(joinkit::kFullMask, cand < hi && chunk_base[cand] <= g);
    lo += (31 - __clz(le)) * span;  // lane 0's candidate, lo, always qualifies
    hi = min(hi, lo + span);
  }
  return lo;
}

// ---------------------------------------------------------------------------------------------
// Rows: the chunk kernels' item layout
// ---------------------------------------------------------------------------------------------
//
// A block of cv / IPT threads covers a chunk once, IPT items per thread in warp-contiguous rows:
// row j of warp w holds items (w * IPT + j) * 32 + lane, so a row is 32 consecutive values
// (coalesced global accesses, conflict-free shared accesses) and a scan over rows is in item
// order. IPT is 8 (blocks of 32..512 threads for cv = 256..4096) or 16 for cv = 8192 (the
// `*_wide_*` entry points), so no block exceeds 512 threads and the register caps of
// __launch_bounds__(512, k*MinBlocks) hold for every launch.

constexpr uint32_t kMaxThreads = 512;

#ifndef JOINKIT_CODEC_DECODE_MIN_BLOCKS
#define JOINKIT_CODEC_DECODE_MIN_BLOCKS 3
#endif
// Blocks of 512 threads per SM the decode kernels' registers must allow: 3 caps them at 40
// (u64 cv = 4096 also fits 3 blocks' shared memory on an H100/H200). Override with
// JOINKIT_NVCC_FLAGS=-DJOINKIT_CODEC_DECODE_MIN_BLOCKS=2 to compare.
constexpr int kDecodeMinBlocks = JOINKIT_CODEC_DECODE_MIN_BLOCKS;
#ifndef JOINKIT_CODEC_ENCODE_MIN_BLOCKS
#define JOINKIT_CODEC_ENCODE_MIN_BLOCKS 3
#endif
// The same for the encode kernels: 3 caps them at 40 registers, and u64 chunks of 4096 fit 3
// blocks' shared memory (2 x 32 KB values + 8 KB u16 run starts each) on an H100/H200.
constexpr int kEncodeMinBlocks = JOINKIT_CODEC_ENCODE_MIN_BLOCKS;

template <uint32_t IPT>
__device__ __forceinline__ uint32_t row_item(uint32_t j) {
  return (joinkit::warp_id() * IPT + j) * joinkit::kWarpSize + joinkit::lane_id();
}

// Inclusive scan of the thread's row items v[] in item order across the block; every thread gets
// the block total. `wt` holds one T per warp (at most 32 warps). One barrier inside; the caller
// passes another barrier before `wt` is written again (each call site does).
template <uint32_t IPT, typename T>
__device__ __forceinline__ T block_scan_rows(T (&v)[IPT], T* wt) {
  T carry = 0;
#pragma unroll
  for (uint32_t j = 0; j < IPT; ++j) {
    const T x = joinkit::warp_inclusive_scan(v[j]);
    v[j] = x + carry;
    carry += __shfl_sync(joinkit::kFullMask, x, joinkit::kWarpSize - 1);
  }
  if (joinkit::lane_id() == 0) wt[joinkit::warp_id()] = carry;
  __syncthreads();
  T before = 0, total = 0;
  const uint32_t warps = blockDim.x / joinkit::kWarpSize;
  for (uint32_t w = 0; w < warps; ++w) {
    const T x = wt[w];
    if (w < joinkit::warp_id()) before += x;
    total += x;
  }
#pragma unroll
  for (uint32_t j = 0; j < IPT; ++j) v[j] += before;
  return total;
}

// ---------------------------------------------------------------------------------------------
// Encode
// ---------------------------------------------------------------------------------------------

// desc: 4 words per buffer: [input offset (values), values, unused, unused].
// Block: cv / IPT threads (rows, above).
template <typename U, uint32_t IPT>
__device__ void encode_chunks(const U* in, const uint64_t* desc, const uint64_t* chunk_base,
                              uint32_t nbuf, uint64_t total_chunks, uint32_t cv, uint64_t layers,
                              uint32_t nl, uint32_t is_signed, uint64_t* slots,
                              uint64_t slot_words, uint64_t* sizes) {
  __shared__ BlockState st;
  const Stage<U> sg(cv, is_signed);
  U* const bufA = sg.a;
  U* const bufB = sg.b;
  uint16_t* const S = sg.s;
  const U flip = sg.flip;
  const uint32_t t = threadIdx.x, bits = Stage<U>::kBits;

  for (uint64_t g = blockIdx.x; g < total_chunks; g += gridDim.x) {
    __syncthreads();  // the previous chunk is done with shared memory
    const uint32_t k = find_buffer(chunk_base, nbuf, g);
    const uint64_t c = g - chunk_base[k];
    const uint64_t nvals = desc[4 * k + 1];
    const uint64_t n = umin(cv, nvals - c * cv);
    const U* src = in + desc[4 * k] + c * cv;
    uint64_t* slot = slots + g * slot_words;
    const uint64_t rawn = raw_words(n, bits);

    for (uint64_t i = t; i < n; i += blockDim.x) bufA[i] = src[i] ^ flip;
    __syncthreads();

    U* cur = bufA;
    U* oth = bufB;
    uint64_t m = n;
    uint64_t used = 3 + nl;
    uint64_t acc = 0;
    bool raw = false;
    for (uint32_t l = 0; l < nl && !raw; ++l) {
      const uint32_t kind = static_cast<uint32_t>((layers >> (8 * l)) & 0xff);
      if (kind == kLayerRle) {
        // Run starts in rows (conflict-free reads of each item and its left neighbour); the
        // scan numbers them, and each start writes its run's value and start.
        uint32_t f[IPT];
        uint32_t starts = 0;  // bit j: row item j starts a run
#pragma unroll
        for (uint32_t j = 0; j < IPT; ++j) {
          const uint32_t i = row_item<IPT>(j);
          const bool s = i < m && (i == 0 || cur[i] != cur[i - 1]);
          f[j] = s ? 1u : 0u;
          starts |= static_cast<uint32_t>(s) << j;
        }
        const uint64_t r = block_scan_rows(f, reinterpret_cast<uint32_t*>(st.scan));
#pragma unroll
        for (uint32_t j = 0; j < IPT; ++j) {
          if ((starts >> j) & 1u) {
            const uint32_t i = row_item<IPT>(j);
            oth[f[j] - 1] = cur[i];
            S[f[j] - 1] = static_cast<uint16_t>(i);
          }
        }
        __syncthreads();  // oth and S are complete (and st.scan is free again)
        uint64_t lo = ~0ull, hi = 0;
        for (uint64_t q = t; q < r; q += blockDim.x) {
          const uint64_t len = (q + 1 < r ? S[q + 1] : m) - S[q];
          lo = umin(lo, len);
          hi = umax(hi, len);
        }
        block_minmax(lo, hi, st.red, st.red2);
        const uint32_t w = bit_width(hi - lo);
        const uint64_t nw = packed_words(r, w);
        if (used + nw > rawn) {
          raw = true;  // uniform: every thread computed the same sizes
          break;
        }
        const uint64_t mm = m;
        pack_words(slot + used, used, r, w,
                   [&](uint64_t q) -> uint64_t {
                     return ((q + 1 < r ? S[q + 1] : mm) - S[q]) - lo;
                   },
                   acc);
        if (t == 0) st.hdr[2 + l] = r | static_cast<uint64_t>(w) << 32 | lo << 40;
        used += nw;
        U* x = cur; cur = oth; oth = x;
        m = r;
        __syncthreads();
      } else {  // Delta
        if (t == 0) st.hdr[2 + l] = cur[0];
        for (uint64_t i = t; i < m; i += blockDim.x)
          oth[i] = i == 0 ? U(0) : zigzag(static_cast<U>(cur[i] - cur[i - 1]));
        __syncthreads();
        U* x = cur; cur = oth; oth = x;
      }
    }

    uint64_t total_words = 0;
    uint32_t fw = 0;
    if (!raw) {
      uint64_t lo = ~0ull, hi = 0;
      for (uint64_t i = t; i < m; i += blockDim.x) {
        lo = umin(lo, cur[i]);
        hi = umax(hi, cur[i]);
      }
      block_minmax(lo, hi, st.red, st.red2);
      fw = bit_width(hi - lo);
      const uint64_t nw = packed_words(m, fw);
      if (used + nw >= rawn) {
        raw = true;
      } else {
        const U ulo = static_cast<U>(lo);
        pack_words(slot + used, used, m, fw,
                   [&](uint64_t i) -> uint64_t { return static_cast<U>(cur[i] - ulo); }, acc);
        if (t == 0) st.hdr[2 + nl] = lo;
        total_words = used + nw;
      }
    }
    if (raw) {
      acc = 0;
      const uint64_t nw = packed_words(n, bits);
      for (uint64_t j = t; j < nw; j += blockDim.x) {
        uint64_t word;
        if (bits == 64) {
          word = static_cast<uint64_t>(src[j]);
        } else {
          word = static_cast<uint64_t>(src[2 * j]);
          if (2 * j + 1 < n) word |= static_cast<uint64_t>(src[2 * j + 1]) << 32;
        }
        slot[2 + j] = word;
        acc += word_term(word, 2 + j);
      }
      total_words = 2 + nw;
    }
    __syncthreads();  // st.hdr written by thread 0 above
    if (t == 0) {
      uint64_t w0;
      if (raw) {
        w0 = n | kModeRaw << 32 | static_cast<uint64_t>(bits) << 40;
      } else {
        w0 = n | kModeCascaded << 32 | static_cast<uint64_t>(fw) << 40;
        for (uint32_t h = 2; h < 3 + nl; ++h) {
          slot[h] = st.hdr[h];
          acc += word_term(st.hdr[h], h);
        }
      }
      slot[0] = w0;
      acc += word_term(w0, 0);
    }
    const uint64_t sum = block_sum(acc, st.red);
    if (t == 0) {
      slot[1] = finish_checksum(sum, c, total_words);
      sizes[g] = total_words;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Decode
// ---------------------------------------------------------------------------------------------
//
// One read of the compressed data: the block copies the chunk's words into shared memory (W)
// and sums their checksum terms in the same pass; thread 0 then validates the header, the length
// and the checksum from W (format.rs's order) before any output is written. The layers then read
// only W (run lengths, the final stream, unpacked on demand) and one value buffer A, and the
// outermost layer writes straight to global memory.
//
// The cost per value is kept small: every layer touches only the rows that hold its `count`
// items (an inner layer of 1024 runs keeps 4 of 16 warps busy, the rest skip it), bit fields
// are cut from two or three 32-bit words with funnel shifts (positions are below 2^19: 32-bit
// index math), run lengths are scanned in 32 bits, and an RLE layer finds each item's run with
// one byte load, a ballot and a popcount (run starts flagged in a byte array), not by search.

// Value q of a packed stream of w-bit values read as little-endian 32-bit words P (w <= 32 for
// the 32-bit form, w <= 64 for the 64-bit one); `mask` = value_mask(w); q * w < 2^32. Reads up
// to two 32-bit words past the stream's last word: inside the block's shared memory (W is
// followed by a word of padding), and those bits are masked off.
__device__ __forceinline__ uint32_t unpack_bits(const uint32_t* P, uint32_t q, uint32_t w,
                                                uint32_t mask) {
  const uint32_t pos = q * w;
  const uint32_t i = pos >> 5;
  return __funnelshift_r(P[i], P[i + 1], pos) & mask;  // the shift is taken mod 32
}
__device__ __forceinline__ uint64_t unpack_bits(const uint32_t* P, uint32_t q, uint32_t w,
                                                uint64_t mask) {
  const uint32_t pos = q * w;
  const uint32_t i = pos >> 5;
  const uint32_t a = P[i], b = P[i + 1], c = P[i + 2];
  const uint64_t v = static_cast<uint64_t>(__funnelshift_r(b, c, pos)) << 32 |
                     __funnelshift_r(a, b, pos);
  return v & mask;
}

// The run of this lane's item in a row of 32 items, given whether the item starts a run and
// `runs_before`, the runs that start before the row (advanced past the row's starts).
__device__ __forceinline__ uint32_t next_run(bool starts_run, uint32_t& runs_before) {
  const uint32_t starts = __ballot_sync(joinkit::kFullMask, starts_run);
  const uint32_t lanes_le = 0xffffffffu >> (joinkit::kWarpSize - 1 - joinkit::lane_id());
  const uint32_t q = runs_before + __popc(starts & lanes_le) - 1;
  runs_before += __popc(starts);
  return q;
}

// Rows of this warp that hold items below `count` (warp-uniform; 0..IPT).
template <uint32_t IPT>
__device__ __forceinline__ uint32_t live_rows(uint32_t count) {
  const uint32_t base0 = joinkit::warp_id() * IPT * joinkit::kWarpSize;
  if (count <= base0) return 0;
  const uint32_t rows = (count - base0 + joinkit::kWarpSize - 1) / joinkit::kWarpSize;
  return rows < IPT ? rows : IPT;
}

// Given each warp's total `carry` (the same in all its lanes), returns the sum of the totals of
// the warps before this one, and the block's total in `total`. One barrier inside; the caller
// passes another before `wt` (one T per warp) is written again.
template <typename T>
__device__ __forceinline__ T warp_offset(T carry, T* wt, T& total) {
  const uint32_t lane = joinkit::lane_id(), warp = joinkit::warp_id();
  if (lane == 0) wt[warp] = carry;
  __syncthreads();
  const uint32_t warps = blockDim.x / joinkit::kWarpSize;
  const T x = lane < warps ? wt[lane] : T(0);
#if __CUDA_ARCH__ >= 800
  if constexpr (sizeof(T) == 4) {
    total = __reduce_add_sync(joinkit::kFullMask, x);
    return __reduce_add_sync(joinkit::kFullMask, lane < warp ? x : T(0));
  }
#endif
  const T incl = joinkit::warp_inclusive_scan(x);
  total = __shfl_sync(joinkit::kFullMask, incl, joinkit::kWarpSize - 1);
  return __shfl_sync(joinkit::kFullMask, incl - x, warp);
}

// block_scan_rows for the first `rows` rows of each warp (the others hold no items and keep
// their values): inclusive scan in item order, every thread gets the block total. One barrier
// inside; the caller passes another before `wt` is written again.
template <uint32_t IPT, typename T>
__device__ __forceinline__ T block_scan_live(T (&v)[IPT], uint32_t rows, T* wt) {
  const uint32_t lane = joinkit::lane_id(), warp = joinkit::warp_id();
  T carry = 0;
#pragma unroll
  for (uint32_t j = 0; j < IPT; ++j) {
    if (j < rows) {
      const T x = joinkit::warp_inclusive_scan(v[j]);
      v[j] = x + carry;
      carry += __shfl_sync(joinkit::kFullMask, x, joinkit::kWarpSize - 1);
    }
  }
  T total;
  const T before = warp_offset(carry, wt, total);
#pragma unroll
  for (uint32_t j = 0; j < IPT; ++j) {
    if (j < rows) v[j] += before;
  }
  return total;
}

// Thread 0: checks chunk c's header and length from its staged words W[0 .. len) (the rules of
// format.rs chunk_layout, in the same order), then its checksum (`sum`: the terms of every word
// but word 1), and fills `st`; st.fault = 0 when valid. The offsets were checked already.
__device__ void parse_chunk(const uint64_t* W, uint64_t len, uint64_t n, uint64_t c,
                            uint64_t sum, uint64_t layers, uint32_t nl, uint32_t bits,
                            ChunkHeader& st) {
  st.fault = 0;
  if (len < 2) { st.fault = kFaultLength; return; }
  const uint64_t w0 = W[0];
  const uint64_t mode = (w0 >> 32) & 0xff;
  const uint64_t fw = (w0 >> 40) & 0xff;
  if ((w0 & 0xffffffffull) != n || mode > kModeCascaded || (w0 >> 48) != 0 || fw > bits) {
    st.fault = kFaultHeader;
    return;
  }
  st.mode = mode;
  st.fw = fw;
  if (mode == kModeRaw) {
    if (fw != bits) { st.fault = kFaultHeader; return; }
    if (len != raw_words(n, bits)) { st.fault = kFaultLength; return; }
  } else {
    const uint64_t head = 3 + nl;
    if (len < head) { st.fault = kFaultLength; return; }
    const uint64_t vmask = value_mask(bits);
    uint64_t m = n;
    uint64_t at = head;
    for (uint32_t l = 0; l < nl; ++l) {
      const uint64_t hw = W[2 + l];
      if (((layers >> (8 * l)) & 0xff) == kLayerRle) {
        const uint64_t r = hw & 0xffffffffull;
        const uint64_t lw = (hw >> 32) & 0xff;
        const uint64_t mn = hw >> 40;
        if (r == 0 || r > m || lw > 32 || mn == 0 || mn > m) { st.fault = kFaultHeader; return; }
        st.lcount[l] = r;
        st.lwidth[l] = lw;
        st.lvalue[l] = mn;
        st.loff[l] = at;
        at += packed_words(r, static_cast<uint32_t>(lw));
        m = r;
      } else {
        if (hw & ~vmask) { st.fault = kFaultHeader; return; }
        st.lcount[l] = m;
        st.lwidth[l] = 0;
        st.lvalue[l] = hw;
        st.loff[l] = 0;
      }
    }
    const uint64_t fmin = W[2 + nl];
    if (fmin & ~vmask) { st.fault = kFaultHeader; return; }
    st.fmin = fmin;
    st.fcount = m;
    st.foff = at;
    if (at + packed_words(m, static_cast<uint32_t>(fw)) != len) { st.fault = kFaultLength; return; }
  }
  if (finish_checksum(sum, c, len) != W[1]) st.fault = kFaultChecksum;
}

// Chunk g of buffer k: where its words lie and where its values go. `ok` is false when its
// offsets fail format.rs chunk_range (fault kFaultOffset); `len` is then meaningless.
// desc: 8 words per buffer: [stream start (words), stream length, output offset (values),
// values, unused, scheme layers word, layer count, unused].
template <typename U>
struct ChunkAt {
  const uint64_t* words;  // the chunk's words
  U* dst;                 // its first value's place in the output
  uint64_t c;             // its index in its stream
  uint64_t layers;        // the stream's layer codes, layer 0 in the lowest byte
  uint32_t nl, n, len;    // layers, values, words
  bool ok;
  __device__ __forceinline__ ChunkAt(const uint64_t* enc, const uint64_t* desc,
                                     const uint64_t* chunk_base, uint32_t k, uint64_t g,
                                     uint32_t cv, U* out) {
    const uint64_t* d = desc + 8 * k;
    const uint64_t* stream = enc + d[0];
    c = g - chunk_base[k];
    const uint64_t nvals = d[3];
    layers = d[5];
    nl = static_cast<uint32_t>(d[6]);
    const uint64_t chunks = (nvals + cv - 1) / cv;
    n = static_cast<uint32_t>(umin(cv, nvals - c * cv));
    const uint64_t a = stream[kHeaderWords + c];
    const uint64_t b = stream[kHeaderWords + c + 1];
    dst = out + d[2] + c * cv;
    ok = !(a < kHeaderWords + chunks + 1 || b < a + kMinChunkWords || b > d[1] ||
           b - a > raw_words(cv, sizeof(U) * 8));
    len = static_cast<uint32_t>(b - a);  // at most raw_words(cv) when ok
    words = stream + a;
  }
};

// The final (frame-of-reference + bitpacked) stream of a parsed chunk staged at W: value q.
template <typename U>
struct FinalStream {
  const uint32_t* words;
  uint32_t width;
  U mask, min;
  __device__ __forceinline__ FinalStream(const uint64_t* W, const ChunkHeader& h)
      : words(reinterpret_cast<const uint32_t*>(W + h.foff)),
        width(static_cast<uint32_t>(h.fw)),
        mask(static_cast<U>(value_mask(width))),
        min(static_cast<U>(h.fmin)) {}
  __device__ __forceinline__ U operator()(uint32_t q) const {
    return static_cast<U>(min + unpack_bits(words, q, width, mask));
  }
};

// RLE layer l of a parsed chunk staged at W: the items it expands to (`before`: the next outer
// layer's count, or the chunk's values for layer 0), its runs, and run q's length. Lengths are
// clamped to cv, so 32-bit sums of them cannot wrap (a clamped length exceeds `before` alone,
// so the run-sum check fails exactly when it would unclamped).
struct RleLayer {
  uint32_t before, runs;
  const uint32_t* lengths;
  uint32_t width, mask, min, cap;
  __device__ __forceinline__ RleLayer(const uint64_t* W, const ChunkHeader& h, int l, uint32_t n,
                                      uint32_t cv)
      : before(l == 0 ? n : static_cast<uint32_t>(h.lcount[l - 1])),
        runs(static_cast<uint32_t>(h.lcount[l])),
        lengths(reinterpret_cast<const uint32_t*>(W + h.loff[l])),
        width(static_cast<uint32_t>(h.lwidth[l])),  // <= 32
        mask(static_cast<uint32_t>(value_mask(width))),
        min(static_cast<uint32_t>(h.lvalue[l])),  // 1 ..= before
        cap(cv) {}
  __device__ __forceinline__ uint32_t length(uint32_t q) const {
    const uint32_t x = unpack_bits(lengths, q, width, mask);
    return min + (x < cap ? x : cap);
  }
};

// desc: as ChunkAt reads it.
// Dynamic shared memory: W (raw_words(cv) words: any valid chunk fits, then a word of padding
// that nothing writes, as in the warp decoder: unpack_bits reads up to two 32-bit words past a
// stream, and those reads must not meet A's writes), A (cv values), FL (run start flags, one
// byte per value). Block: cv / IPT threads. Decodes the chunks list[0 ..
// *list_len) (those the warp decoder deferred), or every chunk when `list` is null.
template <typename U, uint32_t IPT>
__device__ void decode_chunks(const uint64_t* enc, const uint64_t* desc,
                              const uint64_t* chunk_base, uint32_t nbuf, uint64_t total_chunks,
                              uint32_t cv, uint32_t is_signed, const uint64_t* list,
                              const uint64_t* list_len, U* out, uint64_t* err) {
  constexpr uint32_t bits = sizeof(U) * 8;
  constexpr uint32_t kWarpItems = IPT * joinkit::kWarpSize;  // items of one warp's rows
  __shared__ BlockState st;
  extern __shared__ __align__(16) unsigned char dyn[];
  uint64_t* const W = reinterpret_cast<uint64_t*>(dyn);
  U* const A = reinterpret_cast<U*>(W + raw_words(cv, bits) + 1);
  uint8_t* const FL = reinterpret_cast<uint8_t*>(A + cv);
  const U flip = is_signed ? static_cast<U>(U(1) << (bits - 1)) : U(0);
  const uint32_t t = threadIdx.x;
  const uint32_t lane = joinkit::lane_id(), warp = joinkit::warp_id();
  const uint32_t warps = blockDim.x / joinkit::kWarpSize;
  // Per RLE layer: the runs that start before each warp's first item (st.red2 is free here).
  uint32_t* const wrun = reinterpret_cast<uint32_t*>(st.red2);
  auto fail = [&](uint64_t g, uint32_t code) {
    if (t == 0) atomicMin(reinterpret_cast<unsigned long long*>(err), (g << 8) | code);
  };

  const uint64_t count = list != nullptr ? *list_len : total_chunks;
  for (uint64_t x = blockIdx.x; x < count; x += gridDim.x) {
    const uint64_t g = list != nullptr ? list[x] : x;
    // Every thread reads the descriptor and the offsets itself (broadcast loads, issued before
    // the barrier so they overlap the previous chunk's tail): no barrier to share them.
    const ChunkAt<U> at(enc, desc, chunk_base, find_buffer(chunk_base, nbuf, g), g, cv, out);
    const uint64_t c = at.c, layers = at.layers;
    const uint32_t nl = at.nl, n = at.n, len = at.len;  // len fits W when at.ok
    const uint64_t* const w = at.words;
    U* const dst = at.dst;
    __syncthreads();  // the previous chunk is done with shared memory (W, A, FL, st)
    if (!at.ok) {  // uniform, so every thread takes the same branch
      fail(g, kFaultOffset);
      continue;
    }
    uint64_t acc = 0;
    for (uint32_t j = t; j < len; j += blockDim.x) {
      const uint64_t x = w[j];
      W[j] = x;
      if (j != 1) acc += word_term(x, j);
    }
    for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(joinkit::kFullMask, acc, s);
    if (lane == 0) st.red[warp] = acc;
    __syncthreads();  // W and the warps' checksum sums are complete
    if (t == 0) {
      uint64_t sum = 0;
      for (uint32_t x = 0; x < warps; ++x) sum += st.red[x];
      parse_chunk(W, len, n, c, sum, layers, nl, bits, st);
    }
    __syncthreads();  // st is filled
    if (st.fault != 0) {
      fail(g, static_cast<uint32_t>(st.fault));
      continue;
    }
    if (st.mode == kModeRaw) {
      const U* vals = reinterpret_cast<const U*>(W + 2);
      for (uint32_t i = t; i < n; i += blockDim.x) dst[i] = vals[i];
      continue;
    }

    const FinalStream<U> final_value(W, st);
    uint32_t m = static_cast<uint32_t>(st.fcount);
    if (nl == 0) {  // bitpacking only: m == n
      for (uint32_t i = t; i < m; i += blockDim.x) dst[i] = final_value(i) ^ flip;
      continue;
    }
    bool bad = false;
    for (int l = static_cast<int>(nl) - 1; l >= 0; --l) {
      const bool first = l == static_cast<int>(nl) - 1;  // input: the final stream, from W
      const bool last = l == 0;                         // output: global memory, else A
      if (((layers >> (8 * l)) & 0xff) == kLayerDelta) {
        // The warp's rows are scanned in registers and parked in A (each thread rewrites only the
        // items it read, so in place is safe), then offset by the warps before: no values are
        // held across the barrier.
        const uint32_t rows = live_rows<IPT>(m);
        U carry = 0;
#pragma unroll 1  // a serial chain anyway (the carry); unrolled, the loads hoisted spill
        for (uint32_t j = 0; j < IPT; ++j) {
          if (j < rows) {
            const uint32_t i = row_item<IPT>(j);
            const U x = joinkit::warp_inclusive_scan(
                i < m ? unzigzag(first ? final_value(i) : A[i]) : U(0));
            if (i < m) A[i] = static_cast<U>(x + carry);
            carry += __shfl_sync(joinkit::kFullMask, x, joinkit::kWarpSize - 1);
          }
        }
        U total;
        const U base =
            static_cast<U>(st.lvalue[l] + warp_offset(carry, reinterpret_cast<U*>(st.scan), total));
#pragma unroll
        for (uint32_t j = 0; j < IPT; ++j) {
          const uint32_t i = row_item<IPT>(j);
          if (j < rows && i < m) {
            const U x = static_cast<U>(base + A[i]);
            if (last) dst[i] = x ^ flip; else A[i] = x;
          }
        }
      } else {
        const RleLayer rle(W, st, l, n, cv);
        const uint32_t before = rle.before, r = rle.runs;  // r == m
        // Clear the flags of the `before` items (the scan's barrier orders this before they are
        // set; the previous layer's readers passed the barrier at its end).
        for (uint32_t x = t; x < (before + 7) / 8; x += blockDim.x)
          reinterpret_cast<uint64_t*>(FL)[x] = 0;
        const uint32_t rrows = live_rows<IPT>(r);
        uint32_t e[IPT];
#pragma unroll
        for (uint32_t j = 0; j < IPT; ++j) {
          const uint32_t q = row_item<IPT>(j);
          e[j] = j < rrows && q < r ? rle.length(q) : 0u;
        }
        if (block_scan_live(e, rrows, reinterpret_cast<uint32_t*>(st.scan)) != before) {
          bad = true;  // uniform: every thread has the total
          break;
        }
        // Run q covers items [e - len, e): it flags its start, and tells each warp whose first
        // item lies in (start, e] how many runs start before that item (q + 1). With lengths
        // >= 1 summing to `before`, the runs tile the items: every start is below `before`,
        // and each warp with items gets exactly one writer (warp 0: none, it starts at run 0).
#pragma unroll
        for (uint32_t j = 0; j < IPT; ++j) {
          const uint32_t q = row_item<IPT>(j);
          if (j < rrows && q < r) {
            const uint32_t s = e[j] - rle.length(q);  // unpacked again: fewer live registers
            FL[s] = 1;
            for (uint32_t x = s / kWarpItems + 1; x < warps && x * kWarpItems <= e[j]; ++x)
              wrun[x] = q + 1;
            if (first && last) A[q] = final_value(q);  // A is free: unpack each run once
          }
        }
        if (t == 0) wrun[0] = 0;
        __syncthreads();  // FL, wrun (and A) are complete
        // Item i's run: the runs starting before the warp's first item, plus the flags of the
        // items up to i in this warp's rows, minus one.
        const uint32_t rows = live_rows<IPT>(before);
        uint32_t runs_before = rows != 0 ? wrun[warp] : 0u;  // set for warps with items
        if (!first && !last) {  // in place in A: read every run value before any is written
          U v[IPT];
#pragma unroll
          for (uint32_t j = 0; j < IPT; ++j) {
            v[j] = U(0);
            if (j < rows) {
              const uint32_t i = row_item<IPT>(j);
              const uint32_t q = next_run(i < before && FL[i] != 0, runs_before);
              if (i < before) v[j] = A[q];
            }
          }
          __syncthreads();  // every thread has read A before it is overwritten
#pragma unroll
          for (uint32_t j = 0; j < IPT; ++j) {
            const uint32_t i = row_item<IPT>(j);
            if (j < rows && i < before) A[i] = v[j];
          }
        } else {
#pragma unroll
          for (uint32_t j = 0; j < IPT; ++j) {
            if (j < rows) {
              const uint32_t i = row_item<IPT>(j);
              const uint32_t q = next_run(i < before && FL[i] != 0, runs_before);
              if (i < before) {
                if (last) dst[i] = A[q] ^ flip;  // first && last: A holds the run values
                else A[i] = final_value(q);      // first && !last: A is only written
              }
            }
          }
        }
        m = before;
      }
      if (!last) __syncthreads();  // A is complete for the next layer; FL and st are free
    }
    if (bad) fail(g, kFaultRuns);
  }
}

// The decode's fast path: one warp per chunk, no block barriers. The block decoder spends
// most of its time at barriers and in per-run bookkeeping shared by 16 warps (ncu on an H200,
// l_orderkey's rle+delta+rle+bp: 6.4 warp instructions per value, barrier stalls 47 % of the
// time); one warp walks each layer in rows of 32 items with warp scans instead. It takes the
// cascaded chunks of schemes of two layers or more whose words fit `w_cap` and whose inner
// layers fit `a_cap` values; every other chunk (one layer or none, where the block decoder
// measured faster; raw chunks; poorly compressed ones) is appended to `deferred` for the block
// decoder, which runs next over that list. Checks and fault codes are the block decoder's
// (parse_chunk, then each RLE layer's run sum before its items are written).
//
// Dynamic shared memory, per warp: the parsed header, W (w_cap words and one of padding), A
// (a_cap values), FLB (run-start bits, one per item of a chunk). Rust: warp_decode_bytes in
// src/cuda.rs.
template <typename U>
__device__ void decode_chunks_warp(const uint64_t* enc, const uint64_t* desc,
                                   const uint64_t* chunk_base, uint32_t nbuf,
                                   uint64_t total_chunks, uint32_t cv, uint32_t is_signed,
                                   uint32_t w_cap, uint32_t a_cap, U* out, uint64_t* err,
                                   uint64_t* deferred, uint64_t* deferred_len) {
  using joinkit::kFullMask;
  constexpr uint32_t bits = sizeof(U) * 8;
  extern __shared__ __align__(16) unsigned char dyn[];
  const uint32_t lane = joinkit::lane_id();
  const uint32_t lanes_le = 0xffffffffu >> (joinkit::kWarpSize - 1 - lane);
  // W has a word of padding past w_cap that nothing writes: unpack_bits reads up to two
  // 32-bit words past a stream, and those reads must not meet A's writes.
  const uint64_t stride = sizeof(ChunkHeader) + 8ull * (w_cap + 1) +
                          sizeof(U) * uint64_t(a_cap) + 4ull * (cv / 32);
  unsigned char* const mine = dyn + stride * joinkit::warp_id();
  ChunkHeader& h = *reinterpret_cast<ChunkHeader*>(mine);
  uint64_t* const W = reinterpret_cast<uint64_t*>(mine + sizeof(ChunkHeader));
  U* const A = reinterpret_cast<U*>(W + w_cap + 1);
  uint32_t* const FLB = reinterpret_cast<uint32_t*>(A + a_cap);
  const U flip = is_signed ? static_cast<U>(U(1) << (bits - 1)) : U(0);
  const uint64_t warps_per_block = blockDim.x / joinkit::kWarpSize;
  auto fail = [&](uint64_t g, uint32_t code) {
    if (lane == 0) atomicMin(reinterpret_cast<unsigned long long*>(err), (g << 8) | code);
  };
  auto defer = [&](uint64_t g) {
    if (lane == 0)
      deferred[atomicAdd(reinterpret_cast<unsigned long long*>(deferred_len), 1ull)] = g;
  };

  for (uint64_t g = blockIdx.x * warps_per_block + joinkit::warp_id(); g < total_chunks;
       g += gridDim.x * warps_per_block) {
    const ChunkAt<U> at(enc, desc, chunk_base, find_buffer_warp(chunk_base, nbuf, g), g, cv,
                        out);
    const uint64_t c = at.c, layers = at.layers;
    const uint32_t nl = at.nl, n = at.n, len = at.len;
    const uint64_t* const w = at.words;
    U* const dst = at.dst;
    __syncwarp();  // the previous chunk is done with this warp's shared memory
    if (!at.ok) {
      fail(g, kFaultOffset);
      continue;
    }
    if (nl < 2 || len > w_cap) {
      defer(g);
      continue;
    }
    uint64_t acc = 0;
    for (uint32_t j = lane; j < len; j += joinkit::kWarpSize) {
      const uint64_t x = w[j];
      W[j] = x;
      if (j != 1) acc += word_term(x, j);
    }
    for (int sh = 16; sh > 0; sh >>= 1) acc += __shfl_xor_sync(kFullMask, acc, sh);
    __syncwarp();  // W is complete
    if (lane == 0) parse_chunk(W, len, n, c, acc, layers, nl, bits, h);
    __syncwarp();  // h is filled
    if (h.fault != 0) {
      fail(g, static_cast<uint32_t>(h.fault));
      continue;
    }
    // A holds the inner layers' outputs: at most lcount[0] values (RLE shortens, Delta keeps).
    if (h.mode == kModeRaw || h.lcount[0] > a_cap) {
      defer(g);
      continue;
    }
    const FinalStream<U> final_value(W, h);
    uint32_t m = static_cast<uint32_t>(h.fcount);
    bool bad = false;
    for (int l = static_cast<int>(nl) - 1; l >= 0; --l) {
      const bool first = l == static_cast<int>(nl) - 1;  // input: the final stream, from W
      const bool last = l == 0;  // output: global memory, else A (never both: nl >= 2)
      if (((layers >> (8 * l)) & 0xff) == kLayerDelta) {
        // In place in A: each lane rewrites the item it read.
        U carry = static_cast<U>(h.lvalue[l]);
        for (uint32_t row = 0; row < m; row += joinkit::kWarpSize) {
          const uint32_t i = row + lane;
          U x = i < m ? unzigzag(first ? final_value(i) : A[i]) : U(0);
          x = static_cast<U>(joinkit::warp_inclusive_scan(x) + carry);
          if (i < m) {
            if (last) dst[i] = x ^ flip; else A[i] = x;
          }
          carry = __shfl_sync(kFullMask, x, joinkit::kWarpSize - 1);
        }
      } else {
        const RleLayer rle(W, h, l, n, cv);
        const uint32_t before = rle.before, r = rle.runs;  // r == m
        // The run sum first: no flag is set unless the runs tile the `before` items.
        uint32_t total = 0;
        for (uint32_t row = 0; row < r; row += joinkit::kWarpSize) {
          const uint32_t q = row + lane;
          total += __reduce_add_sync(kFullMask, q < r ? rle.length(q) : 0u);
        }
        if (total != before) {
          bad = true;  // warp-uniform
          break;
        }
        const uint32_t words = (before + 31) / 32;
        for (uint32_t x = lane; x < words; x += joinkit::kWarpSize) FLB[x] = 0;
        __syncwarp();
        uint32_t end = 0;  // items covered by the runs of earlier rows
        for (uint32_t row = 0; row < r; row += joinkit::kWarpSize) {
          const uint32_t q = row + lane;
          const uint32_t len_q = q < r ? rle.length(q) : 0u;
          const uint32_t e = joinkit::warp_inclusive_scan(len_q) + end;
          if (q < r) {
            const uint32_t start = e - len_q;
            atomicOr(FLB + start / 32, 1u << (start % 32));
          }
          end = __shfl_sync(kFullMask, e, joinkit::kWarpSize - 1);
        }
        if (first) {  // the run values, unpacked once each (r <= lcount[0] <= a_cap)
          for (uint32_t q = lane; q < r; q += joinkit::kWarpSize) A[q] = final_value(q);
        }
        __syncwarp();  // FLB (and A) are complete
        // Item i is in run (runs starting at or before i) - 1. Rows go from the last down:
        // item i reads run q <= i, so writing A in place never overwrites a run value that a
        // row still to come (earlier items) reads.
        uint32_t runs_upto = r;  // runs starting before the end of the current row
        for (uint32_t row = words; row-- > 0;) {
          const uint32_t starts = FLB[row];
          const uint32_t runs_before = runs_upto - __popc(starts);
          const uint32_t i = row * joinkit::kWarpSize + lane;
          const uint32_t q = runs_before + __popc(starts & lanes_le) - 1;
          U v = 0;
          if (i < before) v = A[q];
          __syncwarp();  // every lane has read its run value before any lane writes
          if (i < before) {
            if (last) dst[i] = v ^ flip; else A[i] = v;
          }
          runs_upto = runs_before;
        }
        m = before;
      }
      __syncwarp();  // A is complete for the next layer
    }
    if (bad) fail(g, kFaultRuns);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Entry points (u32 serves u32 and i32, u64 serves u64 and i64; `is_signed` flips the sign bit).
// ---------------------------------------------------------------------------------------------

// Encode: `codec_encode_*` for cv <= 4096 (IPT 8), `codec_encode_wide_*` for cv = 8192 (IPT 16);
// both run blocks of cv / IPT <= 512 threads.
#define JOINKIT_CODEC_ENCODE(NAME, U, IPT, MIN_BLOCKS)                                        \
  extern "C" __global__ void __launch_bounds__(kMaxThreads, MIN_BLOCKS)                       \
      NAME(const U* in, const uint64_t* desc, const uint64_t* chunk_base, uint32_t nbuf,       \
           uint64_t total_chunks, uint32_t cv, uint64_t layers, uint32_t nl, uint32_t is_signed, \
           uint64_t* slots, uint64_t slot_words, uint64_t* sizes) {                            \
    encode_chunks<U, IPT>(in, desc, chunk_base, nbuf, total_chunks, cv, layers, nl, is_signed,  \
                          slots, slot_words, sizes);                                            \
  }
JOINKIT_CODEC_ENCODE(codec_encode_u32, uint32_t, 8, kEncodeMinBlocks)
JOINKIT_CODEC_ENCODE(codec_encode_u64, uint64_t, 8, kEncodeMinBlocks)
// cv = 8192 needs more shared memory than two blocks get anyway: no register cap beyond 512.
JOINKIT_CODEC_ENCODE(codec_encode_wide_u32, uint32_t, 16, 1)
JOINKIT_CODEC_ENCODE(codec_encode_wide_u64, uint64_t, 16, 1)
#undef JOINKIT_CODEC_ENCODE

// Decode: `codec_decode_*` for cv <= 4096 (IPT 8), `codec_decode_wide_*` for cv = 8192 (IPT 16);
// both run blocks of cv / IPT <= 512 threads.
#define JOINKIT_CODEC_DECODE(NAME, U, IPT, MIN_BLOCKS)                                         \
  extern "C" __global__ void __launch_bounds__(kMaxThreads, MIN_BLOCKS)                  \
      NAME(const uint64_t* enc, const uint64_t* desc, const uint64_t* chunk_base, uint32_t nbuf, \
           uint64_t total_chunks, uint32_t cv, uint32_t is_signed, const uint64_t* list,         \
           const uint64_t* list_len, U* out, uint64_t* err) {                                    \
    decode_chunks<U, IPT>(enc, desc, chunk_base, nbuf, total_chunks, cv, is_signed, list,        \
                          list_len, out, err);                                                   \
  }
JOINKIT_CODEC_DECODE(codec_decode_u32, uint32_t, 8, kDecodeMinBlocks)
JOINKIT_CODEC_DECODE(codec_decode_u64, uint64_t, 8, kDecodeMinBlocks)
// cv = 8192 needs more shared memory than two blocks get anyway: no register cap beyond 512.
JOINKIT_CODEC_DECODE(codec_decode_wide_u32, uint32_t, 16, 1)
JOINKIT_CODEC_DECODE(codec_decode_wide_u64, uint64_t, 16, 1)
#undef JOINKIT_CODEC_DECODE

// The warp decoder (chunks up to 4096 values); `deferred` gets the chunks left to
// `codec_decode_*`, `deferred_len` (zeroed by the caller) their number.
#define JOINKIT_CODEC_DECODE_WARP(NAME, U)                                                     \
  extern "C" __global__ void NAME(const uint64_t* enc, const uint64_t* desc,                   \
                                  const uint64_t* chunk_base, uint32_t nbuf,                   \
                                  uint64_t total_chunks, uint32_t cv, uint32_t is_signed,      \
                                  uint32_t w_cap, uint32_t a_cap, U* out, uint64_t* err,       \
                                  uint64_t* deferred, uint64_t* deferred_len) {                \
    decode_chunks_warp<U>(enc, desc, chunk_base, nbuf, total_chunks, cv, is_signed, w_cap,     \
                          a_cap, out, err, deferred, deferred_len);                            \
  }
JOINKIT_CODEC_DECODE_WARP(codec_decode_warp_u32, uint32_t)
JOINKIT_CODEC_DECODE_WARP(codec_decode_warp_u64, uint64_t)
#undef JOINKIT_CODEC_DECODE_WARP

// Moves every encoded chunk from its slot to its place in the output and writes its offset.
// pos: exclusive scan of sizes over all chunks; start: each stream's first word in `out`.
extern "C" __global__ void codec_compact(const uint64_t* slots, uint64_t slot_words,
                                         const uint64_t* sizes, const uint64_t* pos,
                                         const uint64_t* chunk_base, const uint64_t* start,
                                         uint32_t nbuf, uint64_t total_chunks, uint64_t* out) {
  for (uint64_t g = blockIdx.x; g < total_chunks; g += gridDim.x) {
    const uint32_t k = find_buffer(chunk_base, nbuf, g);
    const uint64_t first = chunk_base[k];
    const uint64_t chunks = chunk_base[k + 1] - first;
    const uint64_t rel = kHeaderWords + chunks + 1 + pos[g] - pos[first];
    uint64_t* dst = out + start[k] + rel;
    const uint64_t* src = slots + g * slot_words;
    const uint64_t len = sizes[g];
    for (uint64_t j = threadIdx.x; j < len; j += blockDim.x) dst[j] = src[j];
    if (threadIdx.x == 0) out[start[k] + kHeaderWords + (g - first)] = rel;
  }
}

// Copies segments of words: seg holds (source offset, destination offset, count) triples.
extern "C" __global__ void codec_copy_segments(const uint64_t* src, const uint64_t* seg,
                                               uint64_t nseg, uint64_t* dst) {
  for (uint64_t s = blockIdx.x; s < nseg; s += gridDim.x) {
    const uint64_t from = seg[3 * s], to = seg[3 * s + 1], count = seg[3 * s + 2];
    for (uint64_t j = threadIdx.x; j < count; j += blockDim.x) dst[to + j] = src[from + j];
  }
}
