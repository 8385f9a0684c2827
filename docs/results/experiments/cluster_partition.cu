// One stable 8-bit radix partition pass of 2^28 (u32 key, u32 payload) rows through a thread
// block cluster, built to test the way past the write-run bound of docs/results/primitives.md
// ("What one 8-bit pass can reach"): the cluster's CTAs rank a tile of CLUSTER x THREADS x ITEMS
// rows together, so a digit's run in the output holds tile / 256 rows (256 at 65536) instead of
// the ~32 a one-SM tile gives. Per tile: each warp ranks its rows (match_any, one shared atomic
// per run of equal digits), each CTA sorts its rows by digit in its own shared memory, the CTAs
// exchange digit totals over distributed shared memory (DSMEM), each pushes its digit runs to
// their places in the tile's sorted order (split evenly over the CTAs' shared memory), and each
// CTA writes its share of the sorted tile. A persistent grid: each cluster owns a contiguous
// range of tiles whose digit counts the histogram kernel gathers, so output starts are known up
// front (no look-back). Checked against CUB's stable sort on the same bits (uniform, skewed,
// constant keys, a high bit range, a ragged size); timed against CUB's onesweep pass and a copy
// kernel, median of 15 after a warm-up. `clusterpart [n] [quick]`: quick runs one configuration
// on uniform keys (for a profiler).
//
// Measured on an H200 (2026-11-22), uniform keys, 2^28 rows, CUB's pass 2.02 ms: this kernel
// 5.05 ms (cluster 8 x 512 x 16) and 4.34 ms (4 x 512 x 16): 0.40-0.47x CUB. On the way:
// rows pushed one by one to their DSMEM places (no local sort) 6.2 ms, the scattered 4-byte
// remote stores costing ~2 SM cycles each; a decoupled look-back instead of the up-front range
// counts 6.3 ms. Taking parts out (timing only): without the ranking 4.18 ms, without the
// push 5.37, without the global writes 4.94 (with 5.75 in that build): no single part holds
// it; every phase waits on the one before it (three cluster barriers a tile, 32 warps an SM),
// ncu: 39-55 cycles between issues a warp. Reaching CUB needs the phases overlapped (TMA loads
// of the next tile into shared memory, warp-specialized producers), a different kernel again.
// Build on the GPU machine: nvcc -O3 -std=c++17 -arch=sm_90 -o clusterpart cluster_partition.cu
#include <cooperative_groups.h>
#include <cub/cub.cuh>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace cg = cooperative_groups;
#define CK(...) do { cudaError_t e_ = (__VA_ARGS__); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
using u32 = uint32_t;
using u64 = unsigned long long;

// Digit counts of each cluster's range of rows, digit-major (counts[d * ranges + range]);
// blockIdx.x is the range, blockIdx.y splits it.
__global__ void range_hist(const u32* __restrict__ keys, size_t n, size_t range_rows, int shift, u32* counts) {
  __shared__ u32 h[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) h[i] = 0;
  __syncthreads();
  size_t first = blockIdx.x * range_rows, end = first + range_rows < n ? first + range_rows : n;
  for (size_t i = first + (blockIdx.y * size_t(blockDim.x) + threadIdx.x) * 4; i < end; i += size_t(gridDim.y) * blockDim.x * 4) {
    if (i + 4 <= n) {
      uint4 k = *reinterpret_cast<const uint4*>(keys + i);
      atomicAdd(&h[(k.x >> shift) & 255], 1); atomicAdd(&h[(k.y >> shift) & 255], 1);
      atomicAdd(&h[(k.z >> shift) & 255], 1); atomicAdd(&h[(k.w >> shift) & 255], 1);
    } else {
      for (size_t j = i; j < end; ++j) atomicAdd(&h[(keys[j] >> shift) & 255], 1);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += blockDim.x) if (h[i]) atomicAdd(&counts[size_t(i) * gridDim.x + blockIdx.x], h[i]);
}

// Distributed shared memory through 32-bit shared::cluster addresses (generic 64-bit pointers
// from map_shared_rank cost twice the registers, and the compiler hoists them per rank).
__device__ __forceinline__ u32 remote(const void* local, u32 rank) {
  u32 a = u32(__cvta_generic_to_shared(local)), r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
__device__ __forceinline__ u32 remote_base(u32 local_shared, u32 rank) {
  u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(local_shared), "r"(rank));
  return r;
}
__device__ __forceinline__ void store_remote(u32 addr, u32 v) { asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory"); }
__device__ __forceinline__ void store_remote(u32 addr, u64 v) { asm volatile("st.shared::cluster.u64 [%0], %1;" ::"r"(addr), "l"(v) : "memory"); }
__device__ __forceinline__ u32 load_remote(u32 addr) {
  u32 v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

template <int THREADS, int ITEMS>
struct Shared {
  static constexpr int kWarps = THREADS / 32, kRows = THREADS * ITEMS;
  u32 keys[kRows];
  u32 vals[kRows];
  u32 warp_count[kWarps][256];  // then each warp's first sorted place in the tile for a digit
  u32 cta_total[256];   // this CTA's rows of a digit (read by the cluster)
  u32 to_tile[256];     // sorted place in the tile of this CTA's locally sorted row q of digit d: q + to_tile[d]
  u64 out_delta[256];   // output row of sorted place p of digit d: out_delta[d] + p
  u32 scan[THREADS / 32];
};

// Exclusive scan of x over threads 0..255 (all threads call; x ignored elsewhere). Returns the
// total to every thread.
template <int THREADS>
__device__ u32 scan256(u32 x, u32* warp_sums, u32* total) {
  int t = threadIdx.x, lane = t & 31;
  u32 inc = x;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) { u32 y = __shfl_up_sync(~0u, inc, o); if (lane >= o) inc += y; }
  if (t < 256 && lane == 31) warp_sums[t >> 5] = inc;
  __syncthreads();
  u32 before = 0, all = 0;
#pragma unroll
  for (int w = 0; w < 8; ++w) { u32 s = warp_sums[w]; if (w < (t >> 5)) before += s; all += s; }
  *total = all;
  __syncthreads();
  return before + inc - x;
}

template <int CLUSTER, int THREADS, int ITEMS, int MIN_BLOCKS>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
cluster_partition(const u32* __restrict__ keys, const u32* __restrict__ vals, u32* __restrict__ out_keys,
                  u32* __restrict__ out_vals, size_t n, int shift, const u32* __restrict__ counts,
                  u32 tiles, u32 tiles_a_cluster) {
  using S = Shared<THREADS, ITEMS>;
  constexpr int kRows = S::kRows, kTile = kRows * CLUSTER;
  extern __shared__ __align__(16) unsigned char raw[];
  S& s = *reinterpret_cast<S*>(raw);
  cg::cluster_group cluster = cg::this_cluster();
  const u32 me = cluster.block_rank();
  const u32 cluster_id = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  const u32 lt = (1u << lane) - 1;
  const u32 keys_at = u32(__cvta_generic_to_shared(s.keys));  // s.vals follows at kRows * 4
  // Thread d < 256 keeps digit d's next output row for this cluster's range.
  u64 running = 0;
  {
    u32 before = 0, total = 0;
    if (t < 256) {
      for (u32 c = 0; c < clusters; ++c) {
        u32 x = counts[size_t(t) * clusters + c];
        before += c < cluster_id ? x : 0;
        total += x;
      }
    }
    u32 all;
    running = u64(scan256<THREADS>(total, s.scan, &all)) + before;
  }
  const u32 tile_end = min(tiles, (cluster_id + 1) * tiles_a_cluster);
  // Keys stay in registers through the ranking; the next tile's are loaded before this tile's
  // rows are written, so the loads overlap the writes.
  u32 k[ITEMS];
  auto warp_row_of = [&](u32 tile) { return size_t(tile) * kTile + size_t(me) * kRows + size_t(w) * ITEMS * 32; };
  auto valid_of = [&](size_t row) { return row >= n ? 0u : u32(min(n - row, size_t(ITEMS * 32))); };
  auto load_keys = [&](u32 tile) {
    size_t row = warp_row_of(tile);
    u32 valid = valid_of(row);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) k[i] = u32(i * 32 + lane) < valid ? keys[row + i * 32 + lane] : 0;
  };
  if (cluster_id * tiles_a_cluster < tile_end) load_keys(cluster_id * tiles_a_cluster);
  for (u32 tile = cluster_id * tiles_a_cluster; tile < tile_end; ++tile) {
    const size_t tile_row = size_t(tile) * kTile;
    const size_t warp_row = warp_row_of(tile);
    const u32 warp_valid = valid_of(warp_row);
    for (int d = lane; d < 256; d += 32) s.warp_count[w][d] = 0;
    __syncwarp();
    // Rank within the warp: one shared atomic per run of equal digits among the 32 lanes (the
    // warp's atomics on one counter apply in issue order, which keeps the ranks stable); ranks
    // (< 512) two to a word.
    u32 rank[ITEMS / 2];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      u32 d = u32(i * 32 + lane) < warp_valid ? (k[i] >> shift) & 255 : 256;
      u32 peers = __match_any_sync(~0u, d);
      int leader = __ffs(peers) - 1;
      u32 before = 0;
      if (lane == leader && d < 256) before = atomicAdd(&s.warp_count[w][d], __popc(peers));
      u32 r = __shfl_sync(~0u, before, leader) + __popc(peers & lt);
      rank[i / 2] = i % 2 ? rank[i / 2] | (r << 16) : r;
    }
    __syncthreads();
    if (t < 256) {
      u32 sum = 0;
#pragma unroll
      for (int x = 0; x < S::kWarps; ++x) { u32 c = s.warp_count[x][t]; s.warp_count[x][t] = sum; sum += c; }
      s.cta_total[t] = sum;
    }
    cluster.sync();
    // Digit starts in the tile (scan of the cluster's totals) and in this CTA (scan of its own),
    // in one scan: tile totals (<= 2^17) above CTA totals (<= 2^14).
    u32 tile_total = 0, lower = 0, mine = 0;
    if (t < 256) {
      mine = s.cta_total[t];
#pragma unroll 1
      for (int c = 0; c < CLUSTER; ++c) {
        u32 x = load_remote(remote(&s.cta_total[t], c));
        lower += c < int(me) ? x : 0;
        tile_total += x;
      }
    }
    u32 all;
    u32 both = scan256<THREADS>((tile_total << 14) | mine, s.scan, &all);
    if (t < 256) {
      u32 tile_start = both >> 14, local_start = both & 0x3fff;
      s.out_delta[t] = running - tile_start;
      s.to_tile[t] = tile_start + lower - local_start;
      running += tile_total;
#pragma unroll
      for (int x = 0; x < S::kWarps; ++x) s.warp_count[x][t] += local_start;
    }
    __syncthreads();
    // Sort the CTA's rows by digit in its own shared memory.
    const u32* warp_vals = vals + warp_row;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      if (u32(i * 32 + lane) < warp_valid) {
        u32 d = (k[i] >> shift) & 255;
        u32 q = s.warp_count[w][d] + ((rank[i / 2] >> (16 * (i % 2))) & 0xffff);
        s.keys[q] = k[i];
        s.vals[q] = warp_vals[i * 32 + lane];
      }
    }
    __syncthreads();
    const size_t cta_row = tile_row + size_t(me) * kRows;
    const u32 cta_valid = cta_row >= n ? 0u : u32(min(n - cta_row, size_t(kRows)));
    u32 kk[ITEMS], vv[ITEMS];
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      u32 q = j * THREADS + t;
      kk[j] = q < cta_valid ? s.keys[q] : 0;
      vv[j] = q < cta_valid ? s.vals[q] : 0;
    }
    cluster.sync();
    // A digit's rows of this CTA are one run in the tile's order: consecutive lanes store to
    // consecutive places of (mostly) one other CTA.
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      u32 q = j * THREADS + t;
      if (q < cta_valid) {
        u32 p = q + s.to_tile[(kk[j] >> shift) & 255];
        u32 to = remote_base(keys_at, p / kRows) + (p % kRows) * 4;
        store_remote(to, kk[j]);
        store_remote(to + kRows * 4, vv[j]);
      }
    }
    if (tile + 1 < tile_end) load_keys(tile + 1);
    cluster.sync();
    size_t valid = n - tile_row < size_t(kTile) ? n - tile_row : size_t(kTile);
    for (int q = t; q < kRows; q += THREADS) {
      u32 p = me * kRows + q;
      if (p < valid) {
        u32 key = s.keys[q], d = (key >> shift) & 255;
        u64 o = s.out_delta[d] + p;
        out_keys[o] = key;
        out_vals[o] = s.vals[q];
      }
    }
  }
}

__global__ void copy2(const uint4* __restrict__ a, const uint4* __restrict__ b, uint4* __restrict__ c, uint4* __restrict__ d, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) { c[i] = a[i]; d[i] = b[i]; }
}

struct Timer {
  cudaEvent_t a, b;
  Timer() { cudaEventCreate(&a); cudaEventCreate(&b); }
  template <class F> float median(F f, int reps = 15) {
    f();
    std::vector<float> ts;
    for (int r = 0; r < reps; ++r) { cudaEventRecord(a); f(); cudaEventRecord(b); CK(cudaEventSynchronize(b)); float ms; cudaEventElapsedTime(&ms, a, b); ts.push_back(ms); }
    std::sort(ts.begin(), ts.end());
    return ts[reps / 2];
  }
};

struct Bufs { u32 *k, *v, *ok, *ov, *ck, *cv, *counts; void* tmp; size_t tmp_bytes; };

template <int CLUSTER, int THREADS, int ITEMS, int MIN_BLOCKS>
void run(const char* what, size_t n, int shift, Bufs& b, double copy_ms, float cub_ms, Timer& tm) {
  using S = Shared<THREADS, ITEMS>;
  constexpr int kTile = S::kRows * CLUSTER;
  auto kernel = cluster_partition<CLUSTER, THREADS, ITEMS, MIN_BLOCKS>;
  size_t smem = sizeof(S);
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CLUSTER; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
  cfg.blockDim = dim3(THREADS); cfg.dynamicSmemBytes = smem; cfg.attrs = attr; cfg.numAttrs = 1;
  cfg.gridDim = dim3(CLUSTER * 1024);
  int max_clusters = 0;
  CK(cudaOccupancyMaxActiveClusters(&max_clusters, kernel, &cfg));
  u32 tiles = u32((n + kTile - 1) / kTile);
  u32 clusters = std::min<u32>(u32(max_clusters), tiles);
  u32 tiles_a_cluster = (tiles + clusters - 1) / clusters;
  clusters = (tiles + tiles_a_cluster - 1) / tiles_a_cluster;
  cfg.gridDim = dim3(CLUSTER * clusters);
  size_t range_rows = size_t(tiles_a_cluster) * kTile;
  auto hist = [&] {
    cudaMemsetAsync(b.counts, 0, size_t(clusters) * 256 * 4);
    range_hist<<<dim3(clusters, std::max(1u, 132 * 4 / clusters)), 512>>>(b.k, n, range_rows, shift, b.counts);
  };
  auto body = [&] { CK(cudaLaunchKernelEx(&cfg, kernel, (const u32*)b.k, (const u32*)b.v, b.ok, b.ov, n, shift, (const u32*)b.counts, tiles, tiles_a_cluster)); };
  auto pass = [&] { hist(); body(); };
  CK(cudaMemset(b.ok, 0xff, n * 4)); CK(cudaMemset(b.ov, 0xff, n * 4));
  pass();
  CK(cudaDeviceSynchronize());
  bool same = true;
  {
    std::vector<u32> a(n), c(n);
    CK(cudaMemcpy(a.data(), b.ok, n * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(c.data(), b.ck, n * 4, cudaMemcpyDeviceToHost));
    same = a == c;
    CK(cudaMemcpy(a.data(), b.ov, n * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(c.data(), b.cv, n * 4, cudaMemcpyDeviceToHost));
    same = same && a == c;
  }
  float all = tm.median(pass);
  float h = tm.median(hist);
  float scat = tm.median(body);
  printf("%-10s cluster %d x %d x %d (tile %6d, %5.1f rows a run), %d clusters of %u tiles, smem %zu: pass %.3f ms (%.1f %% of copy at 20 B a row; CUB %.3f -> %.2fx)  histogram %.3f  partition kernel %.3f ms  %s\n",
         what, CLUSTER, THREADS, ITEMS, kTile, kTile / 256.0, int(clusters), tiles, smem, all, 100.0 * copy_ms * 1.25 / all, cub_ms, cub_ms / all, h, scat,
         same ? "== CUB" : "DIFFERS FROM CUB");
}

int main(int argc, char** argv) {
  size_t n = size_t(1) << 28;
  if (argc > 1) n = strtoull(argv[1], nullptr, 0);
  Bufs b;
  CK(cudaMalloc(&b.k, n * 4 + 16)); CK(cudaMalloc(&b.v, n * 4 + 16)); CK(cudaMalloc(&b.ok, n * 4 + 16)); CK(cudaMalloc(&b.ov, n * 4 + 16));
  CK(cudaMalloc(&b.ck, n * 4 + 16)); CK(cudaMalloc(&b.cv, n * 4 + 16)); CK(cudaMalloc(&b.counts, 1024 * 256 * 4));
  b.tmp_bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, b.tmp_bytes, b.k, b.ck, b.v, b.cv, u32(n), 0, 8);
  CK(cudaMalloc(&b.tmp, b.tmp_bytes));
  std::vector<u32> hv(n);
  for (size_t i = 0; i < n; ++i) hv[i] = u32(i);
  CK(cudaMemcpy(b.v, hv.data(), n * 4, cudaMemcpyHostToDevice));
  Timer tm;
  float copy_ms = tm.median([&] { copy2<<<132 * 8, 256>>>((const uint4*)b.k, (const uint4*)b.v, (uint4*)b.ok, (uint4*)b.ov, n / 4); });
  printf("n = %zu; copy of keys + payloads (16 B a row): %.3f ms, %.0f GB/s\n", n, copy_ms, n * 16.0 / copy_ms / 1e6);
  const char* names[] = {"uniform", "zipf-ish", "constant", "shift 24"};
  const bool quick = argc > 2;  // one configuration on uniform keys (for a profiler)
  for (int dist = 0; dist < (quick ? 1 : 4); ++dist) {
    std::vector<u32> hk(n);
    std::mt19937 rng(9 + dist);
    int shift = dist == 3 ? 24 : 0;
    for (auto& x : hk) {
      u32 r = rng();
      if (dist == 1) { u32 e = rng() % 9; x = (r & ~255u) | ((r & 255) >> e); }  // digits piled toward 0
      else if (dist == 2) x = 0xdeadbeefu;
      else x = r;
    }
    CK(cudaMemcpy(b.k, hk.data(), n * 4, cudaMemcpyHostToDevice));
    auto cub_pass = [&] { size_t sb = b.tmp_bytes; cub::DeviceRadixSort::SortPairs(b.tmp, sb, b.k, b.ck, b.v, b.cv, u32(n), shift, shift + 8); };
    float cub_ms = tm.median(cub_pass);
    cub_pass();
    CK(cudaDeviceSynchronize());
    run<8, 512, 16, 2>(names[dist], n, shift, b, copy_ms, cub_ms, tm);
    if (quick) break;
    run<4, 512, 16, 2>(names[dist], n, shift, b, copy_ms, cub_ms, tm);
    if (dist == 0) {
      run<8, 256, 16, 4>(names[dist], n, shift, b, copy_ms, cub_ms, tm);
      run<16, 256, 16, 4>(names[dist], n, shift, b, copy_ms, cub_ms, tm);
      run<8, 512, 8, 3>(names[dist], n, shift, b, copy_ms, cub_ms, tm);
      run<16, 512, 8, 3>(names[dist], n, shift, b, copy_ms, cub_ms, tm);
    }
  }
  return 0;
}
