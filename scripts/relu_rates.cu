// The issue cost of the instructions a relu cell can take on sm_90a, each alone: eight
// independent chains a thread, one CTA an SM of 4, 8 or 16 warps, cycles a warp instruction a
// scheduler (clock64 around the loop; 2.0 is a half-rate pipe, 1.0 a full-rate one, more at four
// warps where the chains' latency shows). The kinds: FMNMX against an immediate (the one-chunk
// kernels' relu), VIADDMNMX against a register (DPX add-then-max: a relu that takes a bias back),
// FFMA, FMUL.SAT (the multi-chunk kernels' relu). docs/perf-notes.md, twenty-first session.
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a scripts/relu_rates.cu -o /tmp/relu_rates && /tmp/relu_rates
#include <cuda_runtime.h>

#include <cstdio>

enum Kind { kFmnmx, kViaddmnmx, kFfma, kFmulSat, kKinds };
static const char* const kNames[kKinds] = {"FMNMX (max.f32, +0)", "VIADDMNMX", "FFMA", "FMUL.SAT"};

template <int KIND>
__global__ void chains(float* out, int iters, int nb, long long* cycles) {
  int a[8];
  float f[8];
  for (int j = 0; j < 8; ++j) {
    a[j] = int(threadIdx.x) + j;
    f[j] = __int_as_float(a[j]);
  }
  __syncthreads();
  const long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {  // volatile: repeats of an idempotent max are not folded
      if (KIND == kFmnmx) asm volatile("max.f32 %0, %0, 0f00000000;" : "+f"(f[j]));
      if (KIND == kViaddmnmx) a[j] = __viaddmax_s32(a[j], nb, 0);
      if (KIND == kFfma) asm volatile("fma.rn.f32 %0, %0, 0f3F800001, 0f00000001;" : "+f"(f[j]));
      if (KIND == kFmulSat) asm volatile("mul.rn.sat.f32 %0, %0, 0f7F000000;" : "+f"(f[j]));
    }
  }
  const long long t1 = clock64();
  float s = 0.0f;
  for (int j = 0; j < 8; ++j) s += f[j] + __int_as_float(a[j]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps the chains live
  if (threadIdx.x == 0 && blockIdx.x == 0) *cycles = t1 - t0;
}

template <int KIND>
static double run(float* out, long long* cycles, int warps, int iters) {
  long long c = 0;
  for (int rep = 0; rep < 2; ++rep) {  // the first launch warms up
    chains<KIND><<<132, 32 * warps>>>(out, iters, -5, cycles);
    cudaMemcpy(&c, cycles, sizeof(c), cudaMemcpyDeviceToHost);
  }
  return double(c) / (double(iters) * 8 * warps / 4);  // warp instructions a scheduler
}

int main() {
  float* out = nullptr;
  long long* cycles = nullptr;
  if (cudaMalloc(&out, 132 * 512 * sizeof(float)) != cudaSuccess || cudaMalloc(&cycles, sizeof(long long)) != cudaSuccess) {
    std::fprintf(stderr, "relu_rates: no CUDA device\n");
    return 1;
  }
  const int iters = 4096;
  for (int warps : {4, 8, 16}) {
    const double c[kKinds] = {run<kFmnmx>(out, cycles, warps, iters), run<kViaddmnmx>(out, cycles, warps, iters),
                              run<kFfma>(out, cycles, warps, iters), run<kFmulSat>(out, cycles, warps, iters)};
    for (int k = 0; k < kKinds; ++k)
      std::printf("%-20s %2d warps: %.2f cycles a warp instruction a scheduler\n", kNames[k], warps, c[k]);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
