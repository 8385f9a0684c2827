// CUB radix sort of 8-byte keys carrying 8- or 16-byte values (bits 0..16, as PHJ-OM's 8 B
// transform), and the interleave of two u64 columns into 16-byte words: what carrying an 8 B
// 2+2 wide join's payload pair as one 16-byte word would cost. Median of 11. Behind
// docs/results/joins.md ("8 B 2+2 wide: the match writes both payload columns").
// H200, 2026-11-22: 2^28 rows: u64 x u64 sort 6.17 ms (two of them, one per payload column:
// 12.35), interleave 2.17, u64 x 16 B sort 9.47 (with the interleave 11.64); 2^27: 3.10 (6.20),
// 1.09, 4.77 (5.86).
// Build on the GPU machine: nvcc -O3 -std=c++17 -arch=sm_90 -o carry_pairs carry_pairs.cu
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <random>
#include <cub/device/device_radix_sort.cuh>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); return 1; } } while (0)
struct alignas(16) Pair { uint64_t lo, hi; };
__global__ void interleave2(const uint64_t* __restrict__ a, const uint64_t* __restrict__ b, Pair* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    Pair p; p.lo = a[i]; p.hi = b[i]; out[i] = p;
  }
}
__global__ void fill(uint64_t* k, size_t n, uint64_t mul) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    k[i] = (i * mul) & ((n) - 1);  // permutation of 0..n-1 (n power of two, mul odd)
}
int main() {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  auto median = [&](auto f) { f(); std::vector<float> ts; for (int r = 0; r < 11; ++r) { cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); ts.push_back(ms); } std::sort(ts.begin(), ts.end()); return ts[5]; };
  size_t N = size_t(1) << 28;
  uint64_t *k0, *k1, *v0, *v1, *w0, *w1; Pair *p0, *p1;
  CK(cudaMalloc(&k0, N * 8)); CK(cudaMalloc(&k1, N * 8));
  CK(cudaMalloc(&v0, N * 8)); CK(cudaMalloc(&v1, N * 8)); CK(cudaMalloc(&w0, N * 8)); CK(cudaMalloc(&w1, N * 8));
  CK(cudaMalloc(&p0, N * 16)); CK(cudaMalloc(&p1, N * 16));
  float copy = median([&] { cudaMemcpyAsync(p1, p0, N * 16, cudaMemcpyDeviceToDevice); });
  printf("copy %zu B: %.3f ms = %.0f GB/s\n", N * 16, copy, 2.0 * N * 16 / copy / 1e6);
  for (size_t n : {N / 2, N}) {
    fill<<<1024, 256>>>(k0, n, 0x9E3779B97F4A7C15ull | 1);
    fill<<<1024, 256>>>(v0, n, 12345677);
    fill<<<1024, 256>>>(w0, n, 7654321);
    CK(cudaDeviceSynchronize());
    size_t t8 = 0, t16 = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, t8, k0, k1, v0, v1, uint32_t(n), 0, 16);
    cub::DeviceRadixSort::SortPairs(nullptr, t16, k0, k1, p0, p1, uint32_t(n), 0, 16);
    void* tmp; CK(cudaMalloc(&tmp, std::max(t8, t16)));
    float s8 = median([&] { cub::DeviceRadixSort::SortPairs(tmp, t8, k0, k1, v0, v1, uint32_t(n), 0, 16); });
    float s8b = median([&] { cub::DeviceRadixSort::SortPairs(tmp, t8, k0, k1, v0, v1, uint32_t(n), 0, 8); });
    float il = median([&] { interleave2<<<132 * 8, 256>>>(v0, w0, p0, n); });
    float s16 = median([&] { cub::DeviceRadixSort::SortPairs(tmp, t16, k0, k1, p0, p1, uint32_t(n), 0, 16); });
    float s16b = median([&] { cub::DeviceRadixSort::SortPairs(tmp, t16, k0, k1, p0, p1, uint32_t(n), 0, 8); });
    // check the 16-byte sort carried the pairs with their keys
    std::vector<uint64_t> hk(n), hv(n), hw(n); std::vector<Pair> hp(n);
    cudaMemcpy(hk.data(), k0, n * 8, cudaMemcpyDeviceToHost); cudaMemcpy(hv.data(), v0, n * 8, cudaMemcpyDeviceToHost); cudaMemcpy(hw.data(), w0, n * 8, cudaMemcpyDeviceToHost);
    std::vector<uint64_t> ok(n); cudaMemcpy(ok.data(), k1, n * 8, cudaMemcpyDeviceToHost); cudaMemcpy(hp.data(), p1, n * 16, cudaMemcpyDeviceToHost);
    std::vector<uint32_t> where(n); for (size_t i = 0; i < n; ++i) where[hk[i]] = uint32_t(i);
    bool good = true; for (size_t i = 0; i < n && good; i += 997) { uint32_t r = where[ok[i]]; good = hp[i].lo == hv[r] && hp[i].hi == hw[r]; }
    printf("n=2^%d: sort u64xu64 bits0..16 %.3f (0..8 %.3f) | interleave %.3f | sort u64x16B 0..16 %.3f (0..8 %.3f) %s | 16B total %.3f vs 2 passes 8B twice %.3f\n",
           __builtin_ctzll(n), s8, s8b, il, s16, s16b, good ? "ok" : "WRONG", il + s16, 2 * s8);
    cudaFree(tmp);
  }
  return 0;
}
