// Copy bandwidth across the device's memory: one allocation of all but 3 GiB of the free
// memory, a copy kernel within each 1 GiB window (median of 7). Behind docs/results/joins.md's
// run-to-run modes. Build on the GPU machine: nvcc -O3 -arch=sm_90 -o memscan memory_scan.cu
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
__global__ void copyk(const uint4* __restrict__ a, uint4* __restrict__ b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) b[i] = a[i];
}
int main() {
  size_t fr, tot; cudaMemGetInfo(&fr, &tot);
  const size_t W = size_t(1) << 30;
  size_t bytes = (fr - (size_t(3) << 30)) / W * W;
  char* base; if (cudaMalloc(&base, bytes) != cudaSuccess) { printf("alloc failed\n"); return 1; }
  cudaMemset(base, 1, bytes);
  printf("free %zu GiB, arena %zu GiB\n", fr >> 30, bytes >> 30);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (size_t off = 0; off + W <= bytes; off += W) {
    const uint4* a = (const uint4*)(base + off); uint4* b = (uint4*)(base + off + W / 2);
    size_t n = W / 2 / 16;
    std::vector<float> t;
    for (int r = 0; r < 7; ++r) { cudaEventRecord(e0); copyk<<<132 * 8, 256>>>(a, b, n); cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); t.push_back(ms); }
    std::sort(t.begin(), t.end());
    printf("%3zu GiB: %.0f GB/s\n", off >> 30, 2.0 * (W / 2) / (t[3] * 1e6));
  }
  return 0;
}
