// A hardware probe of the layouts the i8 body assumes (kernel_sm90_i8.cuh), one warpgroup, one
// INT8 wgmma m64n64k32 with A from registers and B from shared memory:
//   A (64 x 32): thread (warp w, lane 4g + t) holds rows 16w + g (registers 0, 2) and
//                16w + g + 8 (registers 1, 3), k = 4t..4t+3 (registers 0, 1) and 16 + 4t..
//                (registers 2, 3), one byte each;
//   B (32 x 64): K-major 8-row x 16-byte cores, `k_step` bytes between the two K cores,
//                `mn_step` between 8-column groups (tried both ways round);
//   D (64 x 64): thread holds (row 16w + g + 8 (i & 2 ? 1 : 0), column 8 (i / 4) + 2t + (i & 1)).
// Prints, for each descriptor variant, how many of the 4096 outputs match the CPU product; then
// the same with A unsigned (u8, the fast path's biased keys), and the fast path's relu
// (mul.rn.sat.f32 of the accumulator's bits by 2^127 must give relu(D) * 2^-22 exactly).
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mqa_logits_mxfp4/backends/opus/csrc \
//        scripts/wgmma_probe.cu -o /tmp/wgmma_probe && /tmp/wgmma_probe
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "sm90_ptx.cuh"

using namespace opus::sm90;

__global__ void probe(const int8_t* A, const int8_t* B, int32_t* D, int swap, int u8, float* relu) {
  __shared__ __align__(128) int8_t bsm[64 * 32];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  // B[k][n] into cores: core (n / 8, k / 16) at (n / 8) * 256 + (k / 16) * 128, row n % 8 at 16 (n % 8)
  for (int i = tid; i < 64 * 32; i += 128) {
    const int n = i / 32, k = i % 32;
    bsm[(n / 8) * 256 + (k / 16) * 128 + (n % 8) * 16 + (k % 16)] = B[k * 64 + n];
  }
  fence_async_smem();
  __syncthreads();
  uint32_t a[4];
  for (int r = 0; r < 4; ++r) {
    const int row = 16 * warp + g + ((r & 1) ? 8 : 0), k0 = 4 * t + ((r & 2) ? 16 : 0);
    uint32_t w = 0;
    for (int b = 0; b < 4; ++b) w |= uint32_t(uint8_t(A[row * 32 + k0 + b])) << (8 * b);
    a[r] = w;
  }
  const uint64_t desc = swap ? smem_desc(bsm, 256, 128) : smem_desc(bsm, 128, 256);
  int32_t d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0;
  wgmma_fence();
  if (u8)
    WgmmaI8<64, true>::run(d, a, desc, false);
  else
    WgmmaI8<64>::run(d, a, desc, false);
  wgmma_commit();
  wgmma_wait<0>();
  for (int i = 0; i < 32; ++i) pin(d[i]);
  for (int i = 0; i < 32; ++i) {
    const int row = 16 * warp + g + ((i & 2) ? 8 : 0), col = 8 * (i / 4) + 2 * t + (i & 1);
    D[row * 64 + col] = d[i];
    float y;
    asm("mul.rn.sat.f32 %0, %1, 0f7F000000;" : "=f"(y) : "f"(__int_as_float(d[i])));
    relu[row * 64 + col] = y;
  }
}

int main() {
  std::vector<int8_t> A(64 * 32), B(32 * 64);
  srand(7);
  for (auto& x : B) x = int8_t(rand() % 193 - 96);
  int8_t *dA, *dB;
  int32_t* dD;
  float* dR;
  cudaMalloc(&dA, A.size());
  cudaMalloc(&dB, B.size());
  cudaMalloc(&dD, 4 * 64 * 64);
  cudaMalloc(&dR, 4 * 64 * 64);
  cudaMemcpy(dB, B.data(), B.size(), cudaMemcpyHostToDevice);
  int failures = 0;
  for (int variant = 0; variant < 3; ++variant) {
    const int swap = variant == 1, u8 = variant == 2;
    // s8: -96..96; u8: 0..255 (the fast path's keys stay below 128; the whole range is checked)
    for (auto& x : A) x = u8 ? int8_t(uint8_t(rand() % 256)) : int8_t(rand() % 193 - 96);
    std::vector<int32_t> want(64 * 64, 0);
    for (int m = 0; m < 64; ++m)
      for (int n = 0; n < 64; ++n)
        for (int k = 0; k < 32; ++k)
          want[m * 64 + n] += (u8 ? int(uint8_t(A[m * 32 + k])) : int(A[m * 32 + k])) * int(B[k * 64 + n]);
    cudaMemcpy(dA, A.data(), A.size(), cudaMemcpyHostToDevice);
    cudaMemset(dD, 0x55, 4 * 64 * 64);
    probe<<<1, 128>>>(dA, dB, dD, swap, u8, dR);
    const cudaError_t e = cudaDeviceSynchronize();
    std::vector<int32_t> got(64 * 64);
    std::vector<float> relu(64 * 64);
    cudaMemcpy(got.data(), dD, 4 * 64 * 64, cudaMemcpyDeviceToHost);
    cudaMemcpy(relu.data(), dR, 4 * 64 * 64, cudaMemcpyDeviceToHost);
    int match = 0, relu_match = 0, first_bad = -1;
    for (int i = 0; i < 64 * 64; ++i) {
      if (got[i] == want[i]) ++match;
      else if (first_bad < 0) first_bad = i;
      if (relu[i] == std::ldexp(float(got[i] > 0 ? got[i] : 0), -22)) ++relu_match;
    }
    std::printf("wgmma probe: %s A, descriptor %s: %s, %d of 4096 outputs match, relu %d of 4096", u8 ? "u8" : "s8",
                swap ? "k_step 256, mn_step 128" : "k_step 128, mn_step 256", cudaGetErrorString(e), match,
                relu_match);
    if (first_bad >= 0)
      std::printf(" (first mismatch row %d col %d: got %d want %d)", first_bad / 64, first_bad % 64, got[first_bad],
                  want[first_bad]);
    std::printf("\n");
    failures += !swap && (match != 4096 || relu_match != 4096);
  }
  return failures ? 1 : 0;
}
