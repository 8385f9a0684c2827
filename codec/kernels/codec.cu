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
// Decode: the host has validated every stream header and offset table; `decode_chunks`
// re-checks the chunk's offsets, validates the chunk header and checksum before reading any
// stream, and checks the RLE run sums; a failing chunk records (global chunk << 8 | fault code)
// with atomicMin in `err` and writes nothing more.
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
__device__ __forceinline__ uint64_t block_min(uint64_t v, uint64_t* red) {
  return block_reduce(v, red, [](uint64_t a, uint64_t b) { return umin(a, b); });
}
__device__ __forceinline__ uint64_t block_max(uint64_t v, uint64_t* red) {
  return block_reduce(v, red, [](uint64_t a, uint64_t b) { return umax(a, b); });
}
__device__ __forceinline__ uint64_t block_sum(uint64_t v, uint64_t* red) {
  return block_reduce(v, red, [](uint64_t a, uint64_t b) { return a + b; });
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

// Shared state of one block (besides the dynamic value buffers).
struct BlockState {
  uint64_t scan[joinkit::kWarpSize + 1];
  uint64_t red[32];
  uint64_t hdr[3 + kMaxLayers];
  // Decode: the chunk's parsed header.
  uint64_t fault;
  uint64_t chunk_off, chunk_len, n, buffer, chunk;
  uint64_t mode, fw, fmin, fcount, foff;
  uint64_t lcount[kMaxLayers], lwidth[kMaxLayers], lvalue[kMaxLayers], loff[kMaxLayers];
};

// A chunk kernel's dynamic shared memory (two value buffers and one index buffer of a chunk
// each) and per-thread shape: `ipt` consecutive items per thread.
template <typename U>
struct Stage {
  static constexpr uint32_t kBits = sizeof(U) * 8;
  U* a;
  U* b;
  uint32_t* s;
  U flip;
  uint32_t ipt;
  __device__ Stage(uint32_t cv, uint32_t is_signed) {
    extern __shared__ __align__(16) unsigned char dyn[];
    a = reinterpret_cast<U*>(dyn);
    b = a + cv;
    s = reinterpret_cast<uint32_t*>(b + cv);
    flip = is_signed ? static_cast<U>(U(1) << (kBits - 1)) : U(0);
    ipt = (cv + blockDim.x - 1) / blockDim.x;
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

// ---------------------------------------------------------------------------------------------
// Encode
// ---------------------------------------------------------------------------------------------

// desc: 4 words per buffer: [input offset (values), values, unused, unused].
template <typename U>
__device__ void encode_chunks(const U* in, const uint64_t* desc, const uint64_t* chunk_base,
                              uint32_t nbuf, uint64_t total_chunks, uint32_t cv, uint64_t layers,
                              uint32_t nl, uint32_t is_signed, uint64_t* slots,
                              uint64_t slot_words, uint64_t* sizes) {
  __shared__ BlockState st;
  const Stage<U> sg(cv, is_signed);
  U* const bufA = sg.a;
  U* const bufB = sg.b;
  uint32_t* const S = sg.s;
  const U flip = sg.flip;
  const uint32_t ipt = sg.ipt, t = threadIdx.x, bits = Stage<U>::kBits;

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
        uint32_t cnt = 0;
        for (uint32_t j = 0; j < ipt; ++j) {
          const uint64_t i = static_cast<uint64_t>(t) * ipt + j;
          if (i < m && (i == 0 || cur[i] != cur[i - 1])) ++cnt;
        }
        uint64_t total;
        uint64_t off = joinkit::block_exclusive_scan<uint64_t>(cnt, st.scan, &total);
        for (uint32_t j = 0; j < ipt; ++j) {
          const uint64_t i = static_cast<uint64_t>(t) * ipt + j;
          if (i < m && (i == 0 || cur[i] != cur[i - 1])) {
            oth[off] = cur[i];
            S[off] = static_cast<uint32_t>(i);
            ++off;
          }
        }
        __syncthreads();
        const uint64_t r = total;
        uint64_t lo = ~0ull, hi = 0;
        for (uint64_t q = t; q < r; q += blockDim.x) {
          const uint64_t len = (q + 1 < r ? S[q + 1] : m) - S[q];
          lo = umin(lo, len);
          hi = umax(hi, len);
        }
        lo = block_min(lo, st.red);
        hi = block_max(hi, st.red);
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
      lo = block_min(lo, st.red);
      hi = block_max(hi, st.red);
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

// Thread 0: checks chunk c's offsets and header (the rules of format.rs chunk_range and
// chunk_layout, in the same order) and fills `st`; st.fault = 0 when valid.
__device__ void parse_chunk(const uint64_t* stream, uint64_t total, uint64_t nvals, uint32_t cv,
                            uint64_t c, uint64_t layers, uint32_t nl, uint32_t bits,
                            BlockState& st) {
  st.fault = 0;
  const uint64_t chunks = (nvals + cv - 1) / cv;
  const uint64_t n = umin(cv, nvals - c * cv);
  st.n = n;
  const uint64_t a = stream[kHeaderWords + c];
  const uint64_t b = stream[kHeaderWords + c + 1];
  if (a < kHeaderWords + chunks + 1 || b <= a || b > total || b - a > raw_words(cv, bits)) {
    st.fault = kFaultOffset;
    return;
  }
  const uint64_t* w = stream + a;
  const uint64_t len = b - a;
  st.chunk_off = a;
  st.chunk_len = len;
  if (len < 2) { st.fault = kFaultLength; return; }
  const uint64_t w0 = w[0];
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
    if (len != raw_words(n, bits)) st.fault = kFaultLength;
    return;
  }
  const uint64_t head = 3 + nl;
  if (len < head) { st.fault = kFaultLength; return; }
  const uint64_t vmask = value_mask(bits);
  uint64_t m = n;
  uint64_t at = head;
  for (uint32_t l = 0; l < nl; ++l) {
    const uint64_t hw = w[2 + l];
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
  const uint64_t fmin = w[2 + nl];
  if (fmin & ~vmask) { st.fault = kFaultHeader; return; }
  st.fmin = fmin;
  st.fcount = m;
  st.foff = at;
  if (at + packed_words(m, static_cast<uint32_t>(fw)) != len) st.fault = kFaultLength;
}

// desc: 8 words per buffer: [stream start (words), stream length, output offset (values),
// values, unused, scheme layers word, layer count, unused].
template <typename U>
__device__ void decode_chunks(const uint64_t* enc, const uint64_t* desc,
                              const uint64_t* chunk_base, uint32_t nbuf, uint64_t total_chunks,
                              uint32_t cv, uint32_t is_signed, U* out, uint64_t* err) {
  __shared__ BlockState st;
  const Stage<U> sg(cv, is_signed);
  U* const bufA = sg.a;
  U* const bufB = sg.b;
  uint32_t* const S = sg.s;
  const U flip = sg.flip;
  const uint32_t ipt = sg.ipt, t = threadIdx.x, bits = Stage<U>::kBits;

  for (uint64_t g = blockIdx.x; g < total_chunks; g += gridDim.x) {
    __syncthreads();
    const uint32_t k = find_buffer(chunk_base, nbuf, g);
    const uint64_t* d = desc + 8 * k;
    const uint64_t* stream = enc + d[0];
    const uint64_t c = g - chunk_base[k];
    const uint64_t layers = d[5];
    const uint32_t nl = static_cast<uint32_t>(d[6]);
    if (t == 0) parse_chunk(stream, d[1], d[3], cv, c, layers, nl, bits, st);
    __syncthreads();
    if (st.fault != 0) {
      if (t == 0) atomicMin(reinterpret_cast<unsigned long long*>(err), (g << 8) | st.fault);
      continue;
    }
    const uint64_t* w = stream + st.chunk_off;
    const uint64_t len = st.chunk_len;
    const uint64_t n = st.n;
    U* dst = out + d[2] + c * cv;

    uint64_t acc = 0;
    for (uint64_t j = t; j < len; j += blockDim.x)
      if (j != 1) acc += word_term(w[j], j);
    const uint64_t sum = block_sum(acc, st.red);
    if (finish_checksum(sum, c, len) != w[1]) {
      if (t == 0) atomicMin(reinterpret_cast<unsigned long long*>(err), (g << 8) | kFaultChecksum);
      continue;
    }
    if (st.mode == kModeRaw) {
      const U* vals = reinterpret_cast<const U*>(w + 2);
      for (uint64_t i = t; i < n; i += blockDim.x) dst[i] = vals[i];
      continue;
    }

    const uint64_t* fs = w + st.foff;
    const uint32_t fw = static_cast<uint32_t>(st.fw);
    const U fmin = static_cast<U>(st.fmin);
    uint64_t m = st.fcount;
    for (uint64_t i = t; i < m; i += blockDim.x)
      bufA[i] = static_cast<U>(fmin + static_cast<U>(unpack(fs, i, fw)));
    __syncthreads();
    U* cur = bufA;
    U* oth = bufB;
    bool bad = false;
    for (int l = static_cast<int>(nl) - 1; l >= 0; --l) {
      if (((layers >> (8 * l)) & 0xff) == kLayerDelta) {
        U s = 0;
        for (uint32_t j = 0; j < ipt; ++j) {
          const uint64_t i = static_cast<uint64_t>(t) * ipt + j;
          if (i < m) s += unzigzag(cur[i]);
        }
        U total;
        U run = static_cast<U>(st.lvalue[l]) +
                joinkit::block_exclusive_scan<U>(s, reinterpret_cast<U*>(st.scan), &total);
        for (uint32_t j = 0; j < ipt; ++j) {
          const uint64_t i = static_cast<uint64_t>(t) * ipt + j;
          if (i < m) {
            run += unzigzag(cur[i]);
            cur[i] = run;
          }
        }
        __syncthreads();
      } else {
        const uint64_t before = l == 0 ? n : st.lcount[l - 1];
        const uint64_t r = st.lcount[l];
        const uint64_t* runs = w + st.loff[l];
        const uint32_t lw = static_cast<uint32_t>(st.lwidth[l]);
        const uint64_t mn = st.lvalue[l];
        uint64_t s = 0;
        for (uint32_t j = 0; j < ipt; ++j) {
          const uint64_t q = static_cast<uint64_t>(t) * ipt + j;
          if (q < r) s += mn + unpack(runs, q, lw);
        }
        uint64_t total;
        uint64_t start = joinkit::block_exclusive_scan<uint64_t>(s, st.scan, &total);
        if (total != before) {  // uniform: every thread has the same total
          bad = true;
          break;
        }
        for (uint32_t j = 0; j < ipt; ++j) {
          const uint64_t q = static_cast<uint64_t>(t) * ipt + j;
          if (q < r) {
            S[q] = static_cast<uint32_t>(start);
            start += mn + unpack(runs, q, lw);
          }
        }
        __syncthreads();
        // Expand: item i takes the value of the last run starting at or before it.
        const uint64_t i0 = static_cast<uint64_t>(t) * ipt;
        if (i0 < before) {
          uint64_t lo = 0, hi = r;  // last q with S[q] <= i0, in [lo, hi)
          while (hi - lo > 1) {
            const uint64_t mid = (lo + hi) / 2;
            if (S[mid] <= i0) lo = mid; else hi = mid;
          }
          for (uint32_t j = 0; j < ipt; ++j) {
            const uint64_t i = i0 + j;
            if (i >= before) break;
            while (lo + 1 < r && S[lo + 1] <= i) ++lo;
            oth[i] = cur[lo];
          }
        }
        __syncthreads();
        U* x = cur; cur = oth; oth = x;
        m = before;
      }
    }
    if (bad) {
      if (t == 0) atomicMin(reinterpret_cast<unsigned long long*>(err), (g << 8) | kFaultRuns);
      continue;
    }
    for (uint64_t i = t; i < n; i += blockDim.x) dst[i] = cur[i] ^ flip;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Entry points (u32 serves u32 and i32, u64 serves u64 and i64; `is_signed` flips the sign bit).
// ---------------------------------------------------------------------------------------------

extern "C" __global__ void codec_encode_u32(const uint32_t* in, const uint64_t* desc,
                                            const uint64_t* chunk_base, uint32_t nbuf,
                                            uint64_t total_chunks, uint32_t cv, uint64_t layers,
                                            uint32_t nl, uint32_t is_signed, uint64_t* slots,
                                            uint64_t slot_words, uint64_t* sizes) {
  encode_chunks<uint32_t>(in, desc, chunk_base, nbuf, total_chunks, cv, layers, nl, is_signed,
                          slots, slot_words, sizes);
}
extern "C" __global__ void codec_encode_u64(const uint64_t* in, const uint64_t* desc,
                                            const uint64_t* chunk_base, uint32_t nbuf,
                                            uint64_t total_chunks, uint32_t cv, uint64_t layers,
                                            uint32_t nl, uint32_t is_signed, uint64_t* slots,
                                            uint64_t slot_words, uint64_t* sizes) {
  encode_chunks<uint64_t>(in, desc, chunk_base, nbuf, total_chunks, cv, layers, nl, is_signed,
                          slots, slot_words, sizes);
}

extern "C" __global__ void codec_decode_u32(const uint64_t* enc, const uint64_t* desc,
                                            const uint64_t* chunk_base, uint32_t nbuf,
                                            uint64_t total_chunks, uint32_t cv,
                                            uint32_t is_signed, uint32_t* out, uint64_t* err) {
  decode_chunks<uint32_t>(enc, desc, chunk_base, nbuf, total_chunks, cv, is_signed, out, err);
}
extern "C" __global__ void codec_decode_u64(const uint64_t* enc, const uint64_t* desc,
                                            const uint64_t* chunk_base, uint32_t nbuf,
                                            uint64_t total_chunks, uint32_t cv,
                                            uint32_t is_signed, uint64_t* out, uint64_t* err) {
  decode_chunks<uint64_t>(enc, desc, chunk_base, nbuf, total_chunks, cv, is_signed, out, err);
}

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
