// A PK-FK inner join after ONE 8-bit radix pass per side, its co-partitions matched through
// hash tables that live in L2 instead of shared memory: what dropping PHJ-OM's second radix
// pass would give. 2^27 (R, unique keys) x 2^28 (S, uniform over R's keys), key + one payload
// of the key's width a side, output: the two payload columns. Behind docs/results/joins.md
// ("Co-partitions of one radix pass, matched in L2: measured, slower").
//
// Transform: CUB radix sort (key, payload) on bits 0..8, a digit histogram for the offsets.
// Match: one persistent grid takes work items in a fixed order from a counter: the build
// chunks of partition 0, then for p = 1.. the build chunks of p and the probe chunks of p - 1
// (with lookahead L: of p - L). A probe chunk waits until its partition's table is built (a
// per-partition counter); a build chunk waits until the partition that used its table before
// (p - T) is probed. Items are taken in order by resident blocks, so every wait is on items
// already running: no deadlock (T > L). A ring of T tables of `slots` 2-word slots each (word 0
// the key with its low 8 bits -- the partition's digit, the same for all its keys -- replaced
// by a tag, word 1 the payload), so a slot from an older partition reads as empty and no table
// is cleared between uses. A build thread reads all its rows' home slots, then issues all its
// CASes, before it looks at any result.
//
// H200 (driver 580.159.04), 2026-11-23, median of 11:
//   transform (histogram + one pass): 8 B: R 1.94 ms, S 3.99 (5.94; PHJ-OM's two passes 9.85)
//                                     4 B: R 1.20, S 2.43 (3.63; PHJ-OM 5.80)
//   match, ring 3 x 2^20 slots (load <= 1/2), chunks of 8192 rows, one 512-thread block an SM:
//     8 B: 12.27 ms (the builds alone, no probe items: 6.14), total 18.2 (PHJ-OM: 14.2)
//     4 B:  9.86 ms (builds alone 5.22), total 13.5 (PHJ-OM: 8.47)
//   two blocks an SM (64 registers): 8 B 14.9 (builds 9.6), 4 B 10.4 (5.6); before batching
//   the CASes: 12.8 (builds 6.4) and 9.8 (6.5); a ring of 256 tables (no reuse): builds 8.5;
//   1.5 slots a row: 21.3; chunks of 32768 rows: 22.7; lookahead 2 with a ring of 4: 12.3.
//   2^27 inserts take 5.2-6.1 ms however they are issued: about 22-26 G CAS/s into L2-resident
//   tables, more than the second radix pass of both sides that they would save (8 B: 3.9 ms,
//   4 B: 2.2), before any probe.
//
// Build on the GPU machine: nvcc -O3 -std=c++17 -arch=sm_90 -o l2match l2_match.cu
// Run: ./l2match [key bytes 4|8] [ring T] [slots per build row x100] [chunk rows] [lookahead L]
//      [builds only 0|1]   (defaults 8 3 200 8192 1 0; -DMIN_BLOCKS=n sets blocks an SM)
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

constexpr int kBlock = 512;
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 2
#endif
// Rows a thread per chunk pass (their loads in flight together): 32 bytes of keys.
template <typename K> constexpr int kRowsOf = 32 / sizeof(K);

template <typename K> struct Slot;
template <> struct alignas(8) Slot<uint32_t> { uint32_t tagged, payload; };
template <> struct alignas(16) Slot<uint64_t> { uint64_t tagged, payload; };

struct Item { uint64_t begin; uint32_t len; uint32_t part_probe; };  // part << 1 | probe

template <typename K>
__device__ __forceinline__ uint32_t home(K k, uint32_t slots) {
  const uint64_t h = static_cast<uint64_t>(k) * 0x9e3779b97f4a7c15ull;
  return static_cast<uint32_t>(((h >> 32) * slots) >> 32);
}

__device__ __forceinline__ uint32_t load_cg(const uint32_t* p) { return __ldcg(p); }
__device__ __forceinline__ uint64_t load_cg(const uint64_t* p) {
  return __ldcg(reinterpret_cast<const unsigned long long*>(p));
}
__device__ __forceinline__ uint32_t cas(uint32_t* a, uint32_t c, uint32_t v) { return atomicCAS(a, c, v); }
__device__ __forceinline__ uint64_t cas(uint64_t* a, uint64_t c, uint64_t v) {
  return atomicCAS(reinterpret_cast<unsigned long long*>(a), c, v);
}
__device__ __forceinline__ void store_cg(uint32_t* a, uint32_t v) { __stcg(a, v); }
__device__ __forceinline__ void store_cg(uint64_t* a, uint64_t v) {
  __stcg(reinterpret_cast<unsigned long long*>(a), v);
}

__device__ __forceinline__ Slot<uint32_t> load_slot(const Slot<uint32_t>* s) {
  const uint2 v = __ldcg(reinterpret_cast<const uint2*>(s));
  return {v.x, v.y};
}
__device__ __forceinline__ Slot<uint64_t> load_slot(const Slot<uint64_t>* s) {
  const ulonglong2 v = __ldcg(reinterpret_cast<const ulonglong2*>(s));
  return {v.x, v.y};
}

struct Params {
  const Item* items; uint64_t n_items;
  uint32_t* build_done; uint32_t* probe_done;  // per partition
  const uint32_t* build_items; const uint32_t* probe_items;  // per partition
  unsigned long long* item_cursor; unsigned long long* out_cursor;
  void* ring; uint32_t ring_len; uint32_t slots;
  const void* rk; const void* rp; const void* sk; const void* sp;
  void* out_s; void* out_r; uint32_t* status;
  unsigned long long* wait_cycles;  // [0] build waits, [1] probe waits, [2] busy
};

__device__ __forceinline__ void wait_at_least(const uint32_t* c, uint32_t v) {
  if (v == 0) return;
  while (true) {
    uint32_t x;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(x) : "l"(c) : "memory");
    if (x >= v) return;
    __nanosleep(64);
  }
}

template <typename K>
__global__ void __launch_bounds__(kBlock, MIN_BLOCKS) l2_join(Params p) {
  using S = Slot<K>;
  constexpr int kRows = kRowsOf<K>;
  constexpr uint32_t kWarps = kBlock / 32;
  __shared__ uint64_t item_idx;
  __shared__ uint32_t hits[kRows][kWarps];
  __shared__ unsigned long long base;
  const K* rk = static_cast<const K*>(p.rk); const K* rp = static_cast<const K*>(p.rp);
  const K* sk = static_cast<const K*>(p.sk); const K* sp = static_cast<const K*>(p.sp);
  K* out_s = static_cast<K*>(p.out_s); K* out_r = static_cast<K*>(p.out_r);
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  while (true) {
    if (threadIdx.x == 0) item_idx = atomicAdd(p.item_cursor, 1ull);
    __syncthreads();
    const uint64_t i = item_idx;
    if (i >= p.n_items) break;
    const Item it = p.items[i];
    const uint32_t part = it.part_probe >> 1;
    const bool probe = it.part_probe & 1;
    S* table = static_cast<S*>(p.ring) + size_t(part % p.ring_len) * p.slots;
    const K tag = static_cast<K>((part / p.ring_len) + 1);  // 1.. (0: fresh memory)
    long long t0 = clock64();
    if (threadIdx.x == 0) {
      if (probe) wait_at_least(p.build_done + part, p.build_items[part]);
      else if (part >= p.ring_len) wait_at_least(p.probe_done + part - p.ring_len, p.probe_items[part - p.ring_len]);
      atomicAdd(p.wait_cycles + (probe ? 1 : 0), (unsigned long long)(clock64() - t0));
    }
    __syncthreads();
    t0 = clock64();
    if (!probe) {
      for (uint32_t first = 0; first < it.len; first += kRows * kBlock) {
        K key[kRows], pay[kRows];
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const uint32_t r = first + j * kBlock + threadIdx.x;
          if (r < it.len) { key[j] = rk[it.begin + r]; pay[j] = rp[it.begin + r]; }
        }
        // Every row's home slot read, then every CAS issued, before any result is used: two
        // L2 round trips for the thread's rows instead of two a row.
        uint32_t at[kRows];
        K w[kRows], prev[kRows];
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const uint32_t r = first + j * kBlock + threadIdx.x;
          if (r < it.len) { at[j] = home(key[j], p.slots); w[j] = load_cg(&table[at[j]].tagged); }
        }
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const uint32_t r = first + j * kBlock + threadIdx.x;
          prev[j] = w[j];
          if (r < it.len && (w[j] & 0xff) != tag)
            prev[j] = cas(&table[at[j]].tagged, w[j], (key[j] & ~K(0xff)) | tag);
        }
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const uint32_t r = first + j * kBlock + threadIdx.x;
          if (r >= it.len) continue;
          const K want = (key[j] & ~K(0xff)) | tag;
          if ((w[j] & 0xff) != tag && prev[j] == w[j]) { store_cg(&table[at[j]].payload, pay[j]); continue; }
          uint32_t s = at[j];
          K x = prev[j];
          for (uint32_t step = 0; step < p.slots; ++step) {
            bool placed = false;
            while ((x & 0xff) != tag) {  // empty for this partition: claim it
              const K got = cas(&table[s].tagged, x, want);
              if (got == x) { placed = true; break; }
              x = got;
            }
            if (placed) { store_cg(&table[s].payload, pay[j]); break; }
            if (x == want) { atomicOr(p.status, 1u); break; }  // duplicate build key
            s = s + 1 == p.slots ? 0 : s + 1;
            x = load_cg(&table[s].tagged);
          }
        }
      }
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) atomicAdd(p.build_done + part, 1u);
    } else {
      for (uint32_t first = 0; first < it.len; first += kRows * kBlock) {
        K key[kRows], match[kRows];
        uint32_t hit = 0;
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const uint32_t r = first + j * kBlock + threadIdx.x;
          if (r < it.len) key[j] = sk[it.begin + r];
        }
        S sl[kRows];
        uint32_t s[kRows];
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const uint32_t r = first + j * kBlock + threadIdx.x;
          if (r < it.len) { s[j] = home(key[j], p.slots); sl[j] = load_slot(table + s[j]); }
        }
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const uint32_t r = first + j * kBlock + threadIdx.x;
          if (r >= it.len) continue;
          const K want = (key[j] & ~K(0xff)) | tag;
          S x = sl[j];
          uint32_t at = s[j];
          for (uint32_t step = 0; step < p.slots; ++step) {
            if ((x.tagged & 0xff) != tag) break;
            if (x.tagged == want) { hit |= 1u << j; match[j] = x.payload; break; }
            at = at + 1 == p.slots ? 0 : at + 1;
            x = load_slot(table + at);
          }
        }
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const uint32_t b = __ballot_sync(0xffffffffu, (hit >> j) & 1u);
          if (lane == 0) hits[j][warp] = __popc(b);
        }
        __syncthreads();
        if (warp == 0) {
          constexpr uint32_t kPer = kRows * kWarps / 32;
          uint32_t* flat = &hits[0][0];
          uint32_t v[kPer], sum = 0;
#pragma unroll
          for (uint32_t q = 0; q < kPer; ++q) { v[q] = flat[lane * kPer + q]; sum += v[q]; }
          uint32_t incl = sum;
#pragma unroll
          for (int d = 1; d < 32; d *= 2) { const uint32_t y = __shfl_up_sync(0xffffffffu, incl, d); if (lane >= d) incl += y; }
          uint32_t at = incl - sum;
#pragma unroll
          for (uint32_t q = 0; q < kPer; ++q) { flat[lane * kPer + q] = at; at += v[q]; }
          if (lane == 31) base = incl == 0 ? 0 : atomicAdd(p.out_cursor, (unsigned long long)incl);
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const uint32_t b = __ballot_sync(0xffffffffu, (hit >> j) & 1u);
          if (!((hit >> j) & 1u)) continue;
          const uint64_t o = base + hits[j][warp] + __popc(b & ((1u << lane) - 1));
          out_s[o] = sp[it.begin + first + j * kBlock + threadIdx.x];
          out_r[o] = match[j];
        }
        __syncthreads();
      }
      __syncthreads();
      if (threadIdx.x == 0) atomicAdd(p.probe_done + part, 1u);
    }
    if (threadIdx.x == 0) atomicAdd(p.wait_cycles + 2 + (probe ? 1 : 0), (unsigned long long)(clock64() - t0));
    __syncthreads();  // item_idx is rewritten
  }
}

template <typename K>
__global__ void fill_r(K* k, K* v, size_t n, uint64_t mul) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const K key = K((i * mul) & (n - 1));
    k[i] = key; v[i] = K(key * 7 + 1);
  }
}
__device__ __forceinline__ uint64_t fmix64(uint64_t k) { k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ull; k ^= k >> 33; return k; }
template <typename K>
__global__ void fill_s(K* k, K* v, size_t n, size_t nr) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const K key = K(fmix64(i + 12345) & (nr - 1));
    k[i] = key; v[i] = K(key ^ K(0x5a5a5a5a5a5a5a5aull));
  }
}
template <typename K>
__global__ void hist(const K* k, size_t n, unsigned long long* h) {
  __shared__ unsigned int c[256];
  for (int d = threadIdx.x; d < 256; d += blockDim.x) c[d] = 0;
  __syncthreads();
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) atomicAdd(&c[k[i] & 0xff], 1u);
  __syncthreads();
  for (int d = threadIdx.x; d < 256; d += blockDim.x) atomicAdd(h + d, (unsigned long long)c[d]);
}
template <typename K>
__global__ void check(const K* out_s, const K* out_r, size_t n, unsigned long long* bad) {
  unsigned long long b = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const K key = K(out_s[i] ^ K(0x5a5a5a5a5a5a5a5aull));
    if (out_r[i] != K(key * 7 + 1)) ++b;
  }
  if (b) atomicAdd(bad, b);
}

template <typename K>
int run(int ring_len, double slot_factor, uint32_t chunk, int lookahead, int builds_only) {
  const size_t nr = size_t(1) << 27, ns = size_t(1) << 28;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  auto median = [&](auto f) { f(); std::vector<float> ts; for (int r = 0; r < 11; ++r) { cudaEventRecord(e0); f(); cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms); } std::sort(ts.begin(), ts.end()); return ts[5]; };
  K *rk, *rp, *sk, *sp, *rk2, *rp2, *sk2, *sp2, *out_s, *out_r;
  CK(cudaMalloc(&rk, nr * sizeof(K))); CK(cudaMalloc(&rp, nr * sizeof(K)));
  CK(cudaMalloc(&rk2, nr * sizeof(K))); CK(cudaMalloc(&rp2, nr * sizeof(K)));
  CK(cudaMalloc(&sk, ns * sizeof(K))); CK(cudaMalloc(&sp, ns * sizeof(K)));
  CK(cudaMalloc(&sk2, ns * sizeof(K))); CK(cudaMalloc(&sp2, ns * sizeof(K)));
  CK(cudaMalloc(&out_s, ns * sizeof(K))); CK(cudaMalloc(&out_r, ns * sizeof(K)));
  fill_r<<<2048, 256>>>(rk, rp, nr, 0x9E3779B97F4A7C15ull | 1);
  fill_s<<<2048, 256>>>(sk, sp, ns, nr);
  CK(cudaDeviceSynchronize());
  size_t tb_r = 0, tb_s = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, tb_r, rk, rk2, rp, rp2, int(nr), 0, 8);
  cub::DeviceRadixSort::SortPairs(nullptr, tb_s, sk, sk2, sp, sp2, int(ns), 0, 8);
  void* tmp; CK(cudaMalloc(&tmp, std::max(tb_r, tb_s)));
  unsigned long long* h; CK(cudaMalloc(&h, 512 * 8));
  float t_copy = median([&] { cudaMemcpyAsync(sk2, sk, ns * sizeof(K), cudaMemcpyDeviceToDevice); });
  printf("K=%zu B: copy of S keys %.3f ms = %.0f GB/s\n", sizeof(K), t_copy, 2.0 * ns * sizeof(K) / t_copy / 1e6);
  float t_r = median([&] { cudaMemsetAsync(h, 0, 256 * 8); hist<<<1024, 512>>>(rk, nr, h); cub::DeviceRadixSort::SortPairs(tmp, tb_r, rk, rk2, rp, rp2, int(nr), 0, 8); });
  float t_s = median([&] { cudaMemsetAsync(h + 256, 0, 256 * 8); hist<<<1024, 512>>>(sk, ns, h + 256); cub::DeviceRadixSort::SortPairs(tmp, tb_s, sk, sk2, sp, sp2, int(ns), 0, 8); });
  printf("transform (histogram + one 8-bit pass): R %.3f ms, S %.3f ms, both %.3f\n", t_r, t_s, t_r + t_s);
  std::vector<unsigned long long> hh(512);
  CK(cudaMemcpy(hh.data(), h, 512 * 8, cudaMemcpyDeviceToHost));
  std::vector<Item> items;
  std::vector<uint32_t> bi(256, 0), pi(256, 0);
  uint64_t rb[257], sb[257]; rb[0] = sb[0] = 0;
  uint32_t maxr = 0;
  for (int d = 0; d < 256; ++d) { rb[d + 1] = rb[d] + hh[d]; sb[d + 1] = sb[d] + hh[256 + d]; maxr = std::max<uint32_t>(maxr, hh[d]); }
  auto add = [&](int part, bool probe) {
    const uint64_t* b = probe ? sb : rb;
    for (uint64_t x = b[part]; x < b[part + 1]; x += chunk) {
      items.push_back({x, uint32_t(std::min<uint64_t>(chunk, b[part + 1] - x)), uint32_t(part << 1 | probe)});
      (probe ? pi : bi)[part]++;
    }
  };
  if (ring_len < lookahead + 1) { printf("ring must be > lookahead\n"); return 1; }
  for (int q = 0; q < 256 + lookahead; ++q) { if (q < 256) add(q, false); if (q >= lookahead && !builds_only) add(q - lookahead, true); }
  const uint32_t slots = uint32_t(maxr * slot_factor);
  Item* ditems; uint32_t* counters; unsigned long long* cursors; uint32_t* status; void* ring;
  CK(cudaMalloc(&ditems, items.size() * sizeof(Item)));
  CK(cudaMemcpy(ditems, items.data(), items.size() * sizeof(Item), cudaMemcpyHostToDevice));
  CK(cudaMalloc(&counters, 4 * 256 * 4));
  CK(cudaMemcpy(counters + 512, bi.data(), 1024, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(counters + 768, pi.data(), 1024, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&cursors, 48)); CK(cudaMalloc(&status, 4));
  const size_t ring_bytes = size_t(ring_len) * slots * sizeof(Slot<K>);
  CK(cudaMalloc(&ring, ring_bytes));
  int per_sm = 0, sms = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, l2_join<K>, kBlock, 0);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  Params prm{ditems, items.size(), counters, counters + 256, counters + 512, counters + 768, cursors, cursors + 1,
             ring, uint32_t(ring_len), slots, rk2, rp2, sk2, sp2, out_s, out_r, status, cursors + 2};
  float t_m = median([&] {
    cudaMemsetAsync(counters, 0, 512 * 4); cudaMemsetAsync(cursors, 0, 48); cudaMemsetAsync(status, 0, 4);
    cudaMemsetAsync(ring, 0, ring_bytes);
    l2_join<K><<<per_sm * sms, kBlock>>>(prm);
  });
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  unsigned long long cur[2]; uint32_t st;
  CK(cudaMemcpy(cur, cursors, 16, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(&st, status, 4, cudaMemcpyDeviceToHost));
  CK(cudaMemset(h, 0, 8));
  check<K><<<1024, 512>>>(out_s, out_r, cur[1], h);
  unsigned long long bad; CK(cudaMemcpy(&bad, h, 8, cudaMemcpyDeviceToHost));
  const double bytes = double(nr + ns) * 2 * sizeof(K) + double(ns) * 2 * sizeof(K);
  printf("match: ring %d x %u slots (%.1f MiB, max R part %u rows), chunk %u, %zu items, %d blocks/SM: %.3f ms (%.0f GB/s of inputs+output)\n",
         ring_len, slots, ring_bytes / 1048576.0, maxr, chunk, items.size(), per_sm, t_m, bytes / t_m / 1e6);
  unsigned long long wc[4]; CK(cudaMemcpy(wc, cursors + 2, 32, cudaMemcpyDeviceToHost));
  printf("  block cycles (last run): build wait %.3g, probe wait %.3g, build work %.3g, probe work %.3g\n", double(wc[0]), double(wc[1]), double(wc[2]), double(wc[3]));
  printf("  output rows %llu (expect %zu), wrong %llu, status %u; total %.3f ms\n", cur[1], ns, bad, st, t_r + t_s + t_m);
  cudaFree(rk); cudaFree(rp); cudaFree(sk); cudaFree(sp); cudaFree(rk2); cudaFree(rp2); cudaFree(sk2); cudaFree(sp2);
  cudaFree(out_s); cudaFree(out_r); cudaFree(tmp); cudaFree(h); cudaFree(ditems); cudaFree(counters); cudaFree(cursors); cudaFree(status); cudaFree(ring);
  return 0;
}

int main(int argc, char** argv) {
  const int kb = argc > 1 ? atoi(argv[1]) : 8;
  const int ring = argc > 2 ? atoi(argv[2]) : 3;
  const double factor = argc > 3 ? atoi(argv[3]) / 100.0 : 2.0;
  const uint32_t chunk = argc > 4 ? atoi(argv[4]) : 8192;
  const int lookahead = argc > 5 ? atoi(argv[5]) : 1;
  const int builds_only = argc > 6 ? atoi(argv[6]) : 0;
  return kb == 4 ? run<uint32_t>(ring, factor, chunk, lookahead, builds_only)
                 : run<uint64_t>(ring, factor, chunk, lookahead, builds_only);
}
