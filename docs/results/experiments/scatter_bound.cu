// How fast can one 8-bit stable partition pass of 2^28 (u32 key, u32 payload) rows write, when
// each tile's rows arrive already ranked? Behind docs/results/primitives.md ("What an 8-bit pass
// can reach"). The input is generated so that every tile of TILE rows is in digit order; the
// "ideal" scatter then does only what every tile-ranking partition must still do: read a tile
// (coalesced), and write each digit's run of it to that digit's output region at the offset the
// histogram scan gives. Against: a copy kernel (the same 16 bytes a row, no scatter) and CUB's
// onesweep pass (bits 0..8) on random keys. Rows sorted by digit over chunks longer than a tile
// give longer runs at the same tile size and occupancy: what a shared-memory write-combining
// scatter (flushing B rows of a digit at a time) could reach at best. Median of 15 after a warm-up.
// Build on the GPU machine: nvcc -O3 -std=c++17 -arch=sm_90 -o scatterbound scatter_bound.cu
#include <cub/cub.cuh>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#define CK(...) do { cudaError_t e_ = (__VA_ARGS__); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
using u32 = uint32_t;

// Per-tile digit counts, digit-major (hist[d * tiles + t]), so one flat exclusive scan gives
// each (digit, tile) its output offset.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) tile_hist(const u32* __restrict__ keys, size_t n, int tile, u32* hist, u32 tiles) {
  __shared__ u32 h[256];
  for (int i = threadIdx.x; i < 256; i += THREADS) h[i] = 0;
  __syncthreads();
  size_t base = size_t(blockIdx.x) * tile;
  size_t end = base + tile < n ? base + tile : n;
  for (size_t i = base + threadIdx.x * 4; i < end; i += THREADS * 4) {
    uint4 k = *reinterpret_cast<const uint4*>(keys + i);
    atomicAdd(&h[k.x & 255], 1); atomicAdd(&h[k.y & 255], 1); atomicAdd(&h[k.z & 255], 1); atomicAdd(&h[k.w & 255], 1);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < 256; d += THREADS) hist[size_t(d) * tiles + blockIdx.x] = h[d];
}

// The write half of a partition pass over pre-ranked tiles: ITEMS rows a thread loaded before
// any is written.
template <int THREADS, int ITEMS>
__global__ void __launch_bounds__(THREADS) ideal_scatter(const u32* __restrict__ keys, const u32* __restrict__ vals,
                                                           u32* __restrict__ ok, u32* __restrict__ ov, size_t n,
                                                           const u32* __restrict__ hist, const u32* __restrict__ offs, u32 tiles,
                                                           u32 tiles_a_chunk) {
  constexpr int TILE = THREADS * ITEMS;
  __shared__ u32 glob[256], start[256], warp_sum[8];
  int t = threadIdx.x;
  u32 c = 0;
  u32 chunk = blockIdx.x / tiles_a_chunk;
  u32 at = (blockIdx.x % tiles_a_chunk) * TILE;  // this tile's first row within its chunk
  if (t < 256) {
    c = hist[size_t(chunk) * 256 + t];
    glob[t] = offs[size_t(chunk) * 256 + t];
    u32 x = c;  // inclusive warp scan, then across the 8 warps
    for (int o = 1; o < 32; o <<= 1) { u32 y = __shfl_up_sync(~0u, x, o); if ((t & 31) >= o) x += y; }
    if ((t & 31) == 31) warp_sum[t >> 5] = x;
    start[t] = x - c;
  }
  size_t base = size_t(blockIdx.x) * TILE;
  u32 k[ITEMS], v[ITEMS];
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    size_t i = base + j * THREADS + t;
    if (i < n) { k[j] = keys[i]; v[j] = vals[i]; }
  }
  __syncthreads();
  if (t < 256) { u32 add = 0; for (int w = 0; w < (t >> 5); ++w) add += warp_sum[w]; start[t] += add; }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    size_t i = base + j * THREADS + t;
    if (i < n) {
      u32 d = k[j] & 255;
      size_t g = glob[d] + (at + j * THREADS + t - start[d]);
      ok[g] = k[j];
      ov[g] = v[j];
    }
  }
}

// Digit-major (scan order) to tile-major (a tile's 256 words contiguous, one read a tile).
__global__ void to_tile_major(const u32* __restrict__ in, u32* __restrict__ out, u32 tiles) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < size_t(tiles) * 256) { u32 d = u32(i % 256), t = u32(i / 256); out[i] = in[size_t(d) * tiles + t]; }
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

// Tiles of THREADS x ITEMS rows; the rows are in digit order within each chunk of CHUNK rows
// (a multiple of the tile), so a tile writes runs of about CHUNK / 256 rows.
template <int THREADS, int ITEMS>
void run_tile(size_t n, int CHUNK, u32* dk, u32* dv, u32* ok, u32* ov, u32* hist, u32* offs, void* tmp, size_t tmp_bytes, double copy_ms, Timer& tm) {
  constexpr int TILE = THREADS * ITEMS;
  u32 blocks = u32((n + TILE - 1) / TILE);
  u32 tiles = u32((n + CHUNK - 1) / CHUNK);
  // Keys: every tile's digits in order, random counts (each row's digit uniform).
  std::vector<u32> hk(n);
  std::mt19937 rng(7);
  std::vector<u32> cnt(256);
  for (size_t b = 0; b < n; b += CHUNK) {
    size_t e = std::min(n, b + CHUNK);
    std::fill(cnt.begin(), cnt.end(), 0);
    for (size_t i = b; i < e; ++i) cnt[rng() & 255]++;
    size_t i = b;
    for (u32 d = 0; d < 256; ++d) for (u32 c = 0; c < cnt[d]; ++c) hk[i++] = (rng() & ~255u) | d;
  }
  CK(cudaMemcpy(dk, hk.data(), n * 4, cudaMemcpyHostToDevice));
  size_t cells = size_t(tiles) * 256;
  auto hist_k = [&] { tile_hist<256><<<tiles, 256>>>(dk, n, CHUNK, hist, tiles); };
  auto scan_k = [&] { size_t tb = tmp_bytes; cub::DeviceScan::ExclusiveSum(tmp, tb, hist, offs, cells); };
  // The scatter reads each tile's counts and offsets tile-major (transposed copies).
  u32 *hist_t = offs + cells, *offs_t = offs + 2 * cells;
  unsigned tb = unsigned((cells + 255) / 256);
  auto tr_k = [&] { to_tile_major<<<tb, 256>>>(hist, hist_t, tiles); to_tile_major<<<tb, 256>>>(offs, offs_t, tiles); };
  auto scat_k = [&] { ideal_scatter<THREADS, ITEMS><<<blocks, THREADS>>>(dk, dv, ok, ov, n, hist_t, offs_t, tiles, u32(CHUNK / TILE)); };
  hist_k(); scan_k(); tr_k(); scat_k(); CK(cudaDeviceSynchronize());
  // Check: output keys in digit order, and a partition of the input (sum and count per digit).
  std::vector<u32> out(n);
  CK(cudaMemcpy(out.data(), ok, n * 4, cudaMemcpyDeviceToHost));
  bool sorted = true;
  for (size_t i = 1; i < n; ++i) if ((out[i] & 255) < (out[i - 1] & 255)) { sorted = false; break; }
  uint64_t s0 = 0, s1 = 0;
  for (size_t i = 0; i < n; ++i) { s0 += hk[i]; s1 += out[i]; }
  float h = tm.median(hist_k), s = tm.median(scan_k), w = tm.median(scat_k), x = tm.median(tr_k), all = tm.median([&] { hist_k(); scan_k(); tr_k(); scat_k(); });
  double gb = n * 16.0 / 1e9;
  printf("tile %5d (%4d x %2d), chunk %6d (%6.1f rows a digit-run): hist %.3f  scan %.3f  transpose %.3f  scatter %.3f ms (%.1f %% of copy)  pass %.3f ms (20 B a row: %.1f %% of copy)  %s\n",
         TILE, THREADS, ITEMS, CHUNK, CHUNK / 256.0, h, s, x, w, 100.0 * copy_ms / w, all, 100.0 * copy_ms * 1.25 / all,
         sorted && s0 == s1 ? "ok" : "WRONG");
  (void)gb;
}

int main() {
  const size_t n = size_t(1) << 28;
  u32 *dk, *dv, *ok, *ov, *hist, *offs;
  CK(cudaMalloc(&dk, n * 4)); CK(cudaMalloc(&dv, n * 4)); CK(cudaMalloc(&ok, n * 4)); CK(cudaMalloc(&ov, n * 4));
  size_t max_cells = (n / 1024 + 1) * 256;
  CK(cudaMalloc(&hist, max_cells * 4)); CK(cudaMalloc(&offs, 3 * max_cells * 4));
  size_t tmp_bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, tmp_bytes, hist, offs, max_cells);
  void* tmp; CK(cudaMalloc(&tmp, tmp_bytes));
  std::vector<u32> hv(n);
  for (size_t i = 0; i < n; ++i) hv[i] = u32(i);
  CK(cudaMemcpy(dv, hv.data(), n * 4, cudaMemcpyHostToDevice));
  Timer tm;
  float copy_ms = tm.median([&] { copy2<<<132 * 8, 256>>>((const uint4*)dk, (const uint4*)dv, (uint4*)ok, (uint4*)ov, n / 4); });
  printf("copy of keys + payloads (16 B a row): %.3f ms, %.0f GB/s\n", copy_ms, n * 16.0 / copy_ms / 1e6);
  // CUB's onesweep pass on random keys, for reference.
  {
    std::vector<u32> hk(n);
    std::mt19937 rng(9);
    for (auto& x : hk) x = rng();
    CK(cudaMemcpy(dk, hk.data(), n * 4, cudaMemcpyHostToDevice));
    size_t sb = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, sb, dk, ok, dv, ov, u32(n), 0, 8);
    void* st; CK(cudaMalloc(&st, sb));
    float c = tm.median([&] { size_t b = sb; cub::DeviceRadixSort::SortPairs(st, b, dk, ok, dv, ov, u32(n), 0, 8); });
    printf("CUB onesweep, bits 0..8: %.3f ms (20 B a row: %.1f %% of copy)\n", c, 100.0 * copy_ms * 1.25 / c);
    CK(cudaFree(st));
  }
  run_tile<256, 8>(n, 2048, dk, dv, ok, ov, hist, offs, tmp, tmp_bytes, copy_ms, tm);
  run_tile<512, 16>(n, 8192, dk, dv, ok, ov, hist, offs, tmp, tmp_bytes, copy_ms, tm);
  run_tile<1024, 16>(n, 16384, dk, dv, ok, ov, hist, offs, tmp, tmp_bytes, copy_ms, tm);
  for (int chunk : {4096, 8192, 16384, 32768, 65536, 262144})
    run_tile<256, 16>(n, chunk, dk, dv, ok, ov, hist, offs, tmp, tmp_bytes, copy_ms, tm);
  for (int chunk : {16384, 65536, 262144})
    run_tile<512, 16>(n, chunk, dk, dv, ok, ov, hist, offs, tmp, tmp_bytes, copy_ms, tm);
  return 0;
}
