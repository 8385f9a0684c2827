// Random gather of 2^28 u32 values through a random permutation (std::shuffle): the launch
// shapes a direct gather can take (non-persistent blocks of 128-512 threads with 4-16 elements a
// thread, persistent grids), and the L2 fetch granularity hint (cudaLimitMaxL2FetchGranularity,
// per context: 32, 64 = the default, 128 bytes). Behind docs/results/primitives.md ("Random
// gather: launch shapes and the L2 fetch granularity"). Median of 15 after a warm-up.
// Build on the GPU machine: nvcc -O3 -std=c++17 -arch=sm_90 -o gathershapes gather_shapes.cu
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <random>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); return 1; } } while (0)
template <int V>
__global__ void gather_np(const uint32_t* __restrict__ src, const uint32_t* __restrict__ map, uint32_t* __restrict__ out, size_t n) {
  size_t base = blockIdx.x * size_t(blockDim.x) * 4 * V + threadIdx.x * 4;
  uint4 m[V];
#pragma unroll
  for (int v = 0; v < V; ++v) m[v] = *reinterpret_cast<const uint4*>(map + base + size_t(v) * blockDim.x * 4);
#pragma unroll
  for (int v = 0; v < V; ++v) {
    uint4 r; r.x = __ldg(src + m[v].x); r.y = __ldg(src + m[v].y); r.z = __ldg(src + m[v].z); r.w = __ldg(src + m[v].w);
    *reinterpret_cast<uint4*>(out + base + size_t(v) * blockDim.x * 4) = r;
  }
}
template <int V>
__global__ void __launch_bounds__(256, 4) gather_persist(const uint32_t* __restrict__ src, const uint32_t* __restrict__ map, uint32_t* __restrict__ out, size_t n) {
  size_t tile = size_t(blockDim.x) * 4 * V;
  for (size_t t = blockIdx.x; t * tile < n; t += gridDim.x) {
    size_t base = t * tile + threadIdx.x * 4;
    uint4 m[V];
#pragma unroll
    for (int v = 0; v < V; ++v) m[v] = *reinterpret_cast<const uint4*>(map + base + size_t(v) * blockDim.x * 4);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      uint4 r; r.x = __ldg(src + m[v].x); r.y = __ldg(src + m[v].y); r.z = __ldg(src + m[v].z); r.w = __ldg(src + m[v].w);
      *reinterpret_cast<uint4*>(out + base + size_t(v) * blockDim.x * 4) = r;
    }
  }
}
int main() {
  size_t n = size_t(1) << 28;
  uint32_t *src, *map, *out;
  CK(cudaMalloc(&src, n * 4)); CK(cudaMalloc(&map, n * 4)); CK(cudaMalloc(&out, n * 4));
  std::vector<uint32_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = uint32_t(i);
  CK(cudaMemcpy(src, h.data(), n * 4, cudaMemcpyHostToDevice));
  std::mt19937_64 rng(5);
  std::shuffle(h.begin(), h.end(), rng);
  CK(cudaMemcpy(map, h.data(), n * 4, cudaMemcpyHostToDevice));
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  auto median = [&](auto f) { f(); std::vector<float> ts; for (int r = 0; r < 15; ++r) { cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); ts.push_back(ms); } std::sort(ts.begin(), ts.end()); return ts[7]; };
  auto check = [&]() { std::vector<uint32_t> o(1 << 20); cudaMemcpy(o.data(), out, 4 << 20, cudaMemcpyDeviceToHost); for (size_t i = 0; i < o.size(); ++i) if (o[i] != h[i]) return false; return true; };
  for (int bs : {128, 256, 512}) {
    float t1 = median([&] { gather_np<1><<<unsigned(n / (4 * bs)), bs>>>(src, map, out, n); }); bool c1 = check();
    float t2 = median([&] { gather_np<2><<<unsigned(n / (8 * bs)), bs>>>(src, map, out, n); }); bool c2 = check();
    float t4 = median([&] { gather_np<4><<<unsigned(n / (16 * bs)), bs>>>(src, map, out, n); }); bool c4 = check();
    printf("non-persistent block %d: 4/thr %.3f  8/thr %.3f  16/thr %.3f ms %s\n", bs, t1, t2, t4, c1 && c2 && c4 ? "ok" : "WRONG");
  }
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gather_persist<2>, 256, 0));
  for (int mult : {1, 2, 4, 8}) {
    unsigned grid = 132 * per_sm * mult;
    float t = median([&] { gather_persist<2><<<grid, 256>>>(src, map, out, n); });
    printf("persistent 256 x 8/thr, %d blocks/SM x %d: %.3f ms %s\n", per_sm, mult, t, check() ? "ok" : "WRONG");
  }
  size_t def = 0;
  CK(cudaDeviceGetLimit(&def, cudaLimitMaxL2FetchGranularity));
  for (size_t g : {size_t(32), size_t(64), size_t(128), def}) {
    CK(cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, g));
    float t = median([&] { gather_np<1><<<unsigned(n / (4 * 256)), 256>>>(src, map, out, n); });
    printf("L2 fetch granularity %zu B (default %zu): 256 x 4/thr %.3f ms %s\n", g, def, t, check() ? "ok" : "WRONG");
  }
  return 0;
}
