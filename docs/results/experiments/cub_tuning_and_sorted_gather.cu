// Standalone experiments behind claims in docs/results/primitives.md and joins.md (not part of
// the build). On the GPU machine (CUDA 13.0):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o cubtune cub_tuning_and_sorted_gather.cu
//   ./cubtune     CUB onesweep policies and offset widths for one 8-bit pass of 2^28 u32 pairs;
//                 random gather kernels; the sort-based random gather; per-step times
//   ./cubtune b   per-run times of CUB sorts, fixed and pool-allocated buffers
//   ./cubtune p   CUB sort times against where the outputs lie relative to each other
#include <cub/cub.cuh>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cstdint>

#define CK(...) do { cudaError_t ck_err = (__VA_ARGS__); if (ck_err != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(ck_err)); exit(1);} } while (0)

using u32 = uint32_t;

template <int THREADS, int ITEMS, int HT, int HI, typename OffsetT>
struct Hub {
  using Base = cub::detail::radix::policy_hub<u32, u32, OffsetT>;
  struct MaxPolicy : cub::ChainedPolicy<900, MaxPolicy, MaxPolicy>,
                     Base::template OnesweepSmallKeyTunedPolicy<cub::detail::radix::sm90_small_key_tuning<4, 4, sizeof(OffsetT)>> {
    using HistogramPolicy = cub::AgentRadixSortHistogramPolicy<HT, HI, 1, u32, 8>;
    using OnesweepPolicy = cub::AgentRadixSortOnesweepPolicy<THREADS, ITEMS, u32, 1, cub::RADIX_RANK_MATCH_EARLY_COUNTS_ANY,
                                                             cub::BLOCK_SCAN_RAKING_MEMOIZE, cub::RADIX_SORT_STORE_DIRECT, 8>;
  };
};

__global__ void fill_rand(u32* a, size_t n, u32 seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    u32 x = (u32)i * 0x9E3779B1u ^ seed; x ^= x >> 16; x *= 0x85ebca6bu; x ^= x >> 13; x *= 0xc2b2ae35u; x ^= x >> 16;
    a[i] = x;
  }
}
__global__ void iota(u32* a, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) a[i] = (u32)i;
}
__global__ void gather(const u32* __restrict__ src, const u32* __restrict__ map, u32* __restrict__ out, size_t n) {
  size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 4;
  if (i + 3 < n) {
    uint4 m = *reinterpret_cast<const uint4*>(map + i);
    uint4 v; v.x = __ldg(src + m.x); v.y = __ldg(src + m.y); v.z = __ldg(src + m.z); v.w = __ldg(src + m.w);
    *reinterpret_cast<uint4*>(out + i) = v;
  } else for (; i < n; ++i) out[i] = src[map[i]];
}
__global__ void scatter(const u32* __restrict__ src, const u32* __restrict__ map, u32* __restrict__ out, size_t n) {
  size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 4;
  if (i + 3 < n) {
    uint4 m = *reinterpret_cast<const uint4*>(map + i);
    uint4 v = *reinterpret_cast<const uint4*>(src + i);
    out[m.x] = v.x; out[m.y] = v.y; out[m.z] = v.z; out[m.w] = v.w;
  } else for (; i < n; ++i) out[map[i]] = src[i];
}


template <int V>
__global__ void gather_v(const u32* __restrict__ src, const u32* __restrict__ map, u32* __restrict__ out, size_t n) {
  size_t base = blockIdx.x * (size_t)blockDim.x * 4 * V + threadIdx.x * 4;
  uint4 m[V];
#pragma unroll
  for (int v = 0; v < V; ++v) m[v] = __ldcs(reinterpret_cast<const uint4*>(map + base + (size_t)v * blockDim.x * 4));
#pragma unroll
  for (int v = 0; v < V; ++v) {
    uint4 r; r.x = __ldg(src + m[v].x); r.y = __ldg(src + m[v].y); r.z = __ldg(src + m[v].z); r.w = __ldg(src + m[v].w);
    __stcs(reinterpret_cast<uint4*>(out + base + (size_t)v * blockDim.x * 4), r);
  }
}

struct Timer {
  cudaEvent_t a, b;
  Timer() { cudaEventCreate(&a); cudaEventCreate(&b); }
  void start() { cudaEventRecord(a); }
  float stop() { cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); return ms; }
};

template <typename F>
float median_ms(F f, int reps = 10) {
  Timer t; f(); f(); CK(cudaDeviceSynchronize());
  std::vector<float> v;
  for (int r = 0; r < reps; ++r) { t.start(); f(); v.push_back(t.stop()); }
  std::sort(v.begin(), v.end());
  return (v[reps / 2 - 1] + v[reps / 2]) / 2;
}

template <typename OffsetT, typename HubT>
cudaError_t sort_pairs_hub(void* tmp, size_t& tb, const u32* kin, u32* kout, const u32* vin, u32* vout, OffsetT n, int b, int e) {
  cub::DoubleBuffer<u32> k(const_cast<u32*>(kin), kout), v(const_cast<u32*>(vin), vout);
  return cub::DispatchRadixSort<cub::SortOrder::Ascending, u32, u32, OffsetT, cub::detail::identity_decomposer_t, HubT>::Dispatch(
      tmp, tb, k, v, n, b, e, false, 0);
}

void* g_tmp = nullptr; size_t g_tmp_bytes = 0;
template <typename OffsetT, typename HubT>
float time_hub(const char* name, const u32* kin, u32* kout, const u32* vin, u32* vout, size_t n, double copy_bw) {
  size_t tb = 0;
  CK(sort_pairs_hub<OffsetT, HubT>(nullptr, tb, kin, kout, vin, vout, (OffsetT)n, 0, 8));
  if (tb > g_tmp_bytes) { CK(cudaFree(g_tmp)); CK(cudaMalloc(&g_tmp, tb)); g_tmp_bytes = tb; }
  float ms = median_ms([&] { sort_pairs_hub<OffsetT, HubT>(g_tmp, tb, kin, kout, vin, vout, (OffsetT)n, 0, 8); });
  CK(cudaGetLastError());
  double gbs = 20.0 * n / (ms * 1e6);
  printf("%-28s %7.3f ms  %7.0f GB/s  %5.1f %% of copy\n", name, ms, gbs, 100 * gbs / copy_bw);
  return ms;
}

template <typename OffsetT>
void cub_sort(const u32* kin, u32* kout, const u32* vin, u32* vout, size_t n, int b, int e) {
  size_t tb = 0;
  CK(cub::DeviceRadixSort::SortPairs(nullptr, tb, kin, kout, vin, vout, (OffsetT)n, b, e));
  if (tb > g_tmp_bytes) { CK(cudaFree(g_tmp)); CK(cudaMalloc(&g_tmp, tb)); g_tmp_bytes = tb; }
  CK(cub::DeviceRadixSort::SortPairs(g_tmp, tb, kin, kout, vin, vout, (OffsetT)n, b, e));
}


int main_bimodal() {
  const size_t n = size_t(1) << 28;
  u32 *keys, *vals;
  CK(cudaMalloc(&keys, n * 4)); CK(cudaMalloc(&vals, n * 4));
  fill_rand<<<1024, 256>>>(keys, n, 1); fill_rand<<<1024, 256>>>(vals, n, 2);
  cudaMemPool_t pool; CK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t thr = UINT64_MAX; CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
  Timer t;
  for (int mode = 0; mode < 3; ++mode) {
    u32 *ko = nullptr, *vo = nullptr;
    CK(cudaMalloc(&ko, n * 4)); CK(cudaMalloc(&vo, n * 4));
    printf("mode %d (%s):", mode, mode == 0 ? "fixed buffers, bits 0..16" : mode == 1 ? "async alloc per run, bits 0..16" : "fixed, bits 0..8");
    for (int r = 0; r < 24; ++r) {
      u32 *a = ko, *b = vo;
      if (mode == 1) { CK(cudaMallocAsync(&a, n * 4, 0)); CK(cudaMallocAsync(&b, n * 4, 0)); }
      size_t tb = 0; void* tmp = nullptr;
      CK(cub::DeviceRadixSort::SortPairs(nullptr, tb, keys, a, vals, b, (u32)n, 0, mode == 2 ? 8 : 16));
      CK(cudaMallocAsync(&tmp, tb, 0));
      t.start();
      CK(cub::DeviceRadixSort::SortPairs(tmp, tb, keys, a, vals, b, (u32)n, 0, mode == 2 ? 8 : 16));
      float ms = t.stop();
      CK(cudaFreeAsync(tmp, 0));
      if (mode == 1) { CK(cudaFreeAsync(a, 0)); CK(cudaFreeAsync(b, 0)); }
      printf(" %.2f", ms);
    }
    printf("\n");
    CK(cudaFree(ko)); CK(cudaFree(vo));
  }
  return 0;
}

int main_placement() {
  const size_t n = size_t(1) << 28, B = n * 4;
  const size_t MB = 1 << 20;
  char* arena; CK(cudaMalloc(&arena, 8 * B + 512 * MB));
  u32* src = (u32*)arena;
  fill_rand<<<1024, 256>>>(src, n, 1); fill_rand<<<1024, 256>>>(src + n, n, 2);
  size_t tb = 0; CK(cub::DeviceRadixSort::SortPairs(nullptr, tb, src, src, src, src, (u32)n, 0, 16));
  void* tmp; CK(cudaMalloc(&tmp, tb));
  // keys_in at 0, vals_in at B; outputs at 2B + d1 and 3B + d1 + d2 (+ 64 MB gap)
  size_t ds[] = {0, 4096, 65536, 256 * 1024, MB, 2 * MB, 3 * MB, 5 * MB, 7 * MB + 4096, 33 * MB, 64 * MB};
  for (size_t d1 : {size_t(0), 2 * MB, 5 * MB}) for (size_t d2 : ds) {
    u32* ko = (u32*)(arena + 2 * B + 64 * MB + d1);
    u32* vo = (u32*)(arena + 3 * B + 128 * MB + d1 + d2);
    float t16 = median_ms([&] { cub::DeviceRadixSort::SortPairs(tmp, tb, src, ko, src + n, vo, (u32)n, 0, 16); }, 6);
    float t8 = median_ms([&] { cub::DeviceRadixSort::SortPairs(tmp, tb, src, ko, src + n, vo, (u32)n, 0, 8); }, 6);
    printf("d1 %5zu KiB d2 %6zu KiB: 16-bit %.3f ms  8-bit %.3f ms\n", d1 >> 10, d2 >> 10, t16, t8);
  }
  return 0;
}
int main(int argc, char** argv) {
  if (argc > 1 && argv[1][0] == 'b') return main_bimodal();
  if (argc > 1 && argv[1][0] == 'p') return main_placement();
  const size_t n = size_t(1) << 28;
  u32 *keys, *vals, *ko, *vo;
  CK(cudaMalloc(&keys, n * 4)); CK(cudaMalloc(&vals, n * 4)); CK(cudaMalloc(&ko, n * 4)); CK(cudaMalloc(&vo, n * 4));
  fill_rand<<<1024, 256>>>(keys, n, 1); fill_rand<<<1024, 256>>>(vals, n, 2);
  float cms = median_ms([&] { cudaMemcpyAsync(ko, keys, n * 4, cudaMemcpyDeviceToDevice); });
  double copy_bw = 2.0 * n * 4 / (cms * 1e6);
  printf("copy %.3f ms = %.0f GB/s\n", cms, copy_bw);

  time_hub<unsigned long long, typename cub::detail::radix::policy_hub<u32, u32, unsigned long long>>("default off64", keys, ko, vals, vo, n, copy_bw);
  time_hub<u32, typename cub::detail::radix::policy_hub<u32, u32, u32>>("default off32", keys, ko, vals, vo, n, copy_bw);
#define V(T, I, HT, HI, OT) time_hub<OT, Hub<T, I, HT, HI, OT>>(#T "x" #I " h" #HT "x" #HI " " #OT, keys, ko, vals, vo, n, copy_bw)
  V(384, 17, 128, 16, unsigned long long);
  V(384, 23, 128, 16, u32);
  V(384, 16, 128, 16, u32);
  V(384, 20, 128, 16, u32);
  V(384, 28, 128, 16, u32);
  V(256, 16, 128, 16, u32);
  V(256, 23, 128, 16, u32);
  V(256, 32, 128, 16, u32);
  V(512, 12, 128, 16, u32);
  V(512, 16, 128, 16, u32);
  V(512, 20, 128, 16, u32);
  V(512, 23, 128, 16, u32);
  V(640, 16, 128, 16, u32);
  V(768, 12, 128, 16, u32);
  V(384, 23, 256, 16, u32);
  V(384, 23, 512, 16, u32);
  V(384, 23, 256, 32, u32);
  V(384, 23, 128, 32, u32);

  // Sort-based random gather of a random permutation.
  u32 *src, *map, *out, *ref, *io, *ms_, *is_, *v, *iss, *vs;
  CK(cudaMalloc(&src, n * 4)); CK(cudaMalloc(&map, n * 4)); CK(cudaMalloc(&out, n * 4)); CK(cudaMalloc(&ref, n * 4));
  CK(cudaMalloc(&io, n * 4)); CK(cudaMalloc(&ms_, n * 4)); CK(cudaMalloc(&is_, n * 4)); CK(cudaMalloc(&v, n * 4));
  CK(cudaMalloc(&iss, n * 4)); CK(cudaMalloc(&vs, n * 4));
  fill_rand<<<1024, 256>>>(src, n, 7);
  iota<<<1024, 256>>>(io, n);
  cub_sort<u32>(keys, ko, io, map, n, 0, 32);  // map = random permutation
  int gb = (int)((n / 4 + 255) / 256);
  float direct = median_ms([&] { gather<<<gb, 256>>>(src, map, ref, n); });
  printf("direct gather %.3f ms\n", direct);

  for (int bs : {128, 256, 512}) {
    float a = median_ms([&] { gather_v<1><<<n / (4 * bs), bs>>>(src, map, out, n); });
    float b = median_ms([&] { gather_v<2><<<n / (8 * bs), bs>>>(src, map, out, n); });
    float c = median_ms([&] { gather_v<4><<<n / (16 * bs), bs>>>(src, map, out, n); });
    float d = median_ms([&] { gather_v<8><<<n / (32 * bs), bs>>>(src, map, out, n); });
    printf("gather variants block %d: 4/thr %.3f  8/thr %.3f  16/thr %.3f  32/thr %.3f ms\n", bs, a, b, c, d);
  }
  for (int lo : {18, 19, 20, 21, 22, 23}) {
    auto run = [&] {
      iota<<<1024, 256>>>(io, n);
      cub_sort<u32>(map, ms_, io, is_, n, lo, 28);
      gather<<<gb, 256>>>(src, ms_, v, n);
      cub_sort<u32>(is_, iss, v, vs, n, lo, 28);
      scatter<<<gb, 256>>>(vs, iss, out, n);
    };
    CK(cudaMemset(out, 0xff, n * 4));
    float t = median_ms(run);
    std::vector<u32> a(n), b(n);
    CK(cudaMemcpy(a.data(), out, n * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(b.data(), ref, n * 4, cudaMemcpyDeviceToHost));
    bool ok = a == b;
    float t1 = median_ms([&] { iota<<<1024, 256>>>(io, n); });
    float t2 = median_ms([&] { cub_sort<u32>(map, ms_, io, is_, n, lo, 28); });
    float t3 = median_ms([&] { gather<<<gb, 256>>>(src, ms_, v, n); });
    float t4 = median_ms([&] { cub_sort<u32>(is_, iss, v, vs, n, lo, 28); });
    float t5 = median_ms([&] { scatter<<<gb, 256>>>(vs, iss, out, n); });
    printf("sorted gather bits %d..28: %.3f ms (%.2fx direct) ok=%d | iota %.3f sort %.3f gather %.3f sort %.3f scatter %.3f\n",
           lo, t, direct / t, ok, t1, t2, t3, t4, t5);
  }
  return 0;
}
