// Portability layer: one source builds as CUDA (nvcc, sm_90) and as HIP (clang, gfx942 / gfx950).
// Only the names the opus kernels use are mapped; nothing here includes torch.
#pragma once

#include <stdint.h>

#include "hd.h"

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
  #include <hip/hip_runtime.h>
  #define OPUS_HIP 1
  #define OPUS_WARP 64                    // gfx9 (gfx942 / gfx950) waves are 64 lanes
  typedef hipStream_t opus_stream_t;
  typedef hipError_t opus_error_t;
  #define opus_success hipSuccess
  #define opus_get_last_error hipGetLastError
  #define opus_error_string hipGetErrorString
  #define opus_get_device hipGetDevice
  #define opus_set_device hipSetDevice
  typedef uint64_t opus_lanemask_t;
#else
  #include <cuda_runtime.h>
  #define OPUS_CUDA 1
  #define OPUS_WARP 32
  typedef cudaStream_t opus_stream_t;
  typedef cudaError_t opus_error_t;
  #define opus_success cudaSuccess
  #define opus_get_last_error cudaGetLastError
  #define opus_error_string cudaGetErrorString
  #define opus_get_device cudaGetDevice
  #define opus_set_device cudaSetDevice
  typedef uint32_t opus_lanemask_t;
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
namespace opus {

// Lane exchanges over the whole warp / wave.
template <class T> OPUS_DEV T warp_xor(T v, int mask) {
#if OPUS_HIP
  return __shfl_xor(v, mask, OPUS_WARP);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask, OPUS_WARP);
#endif
}
template <class T> OPUS_DEV T warp_up(T v, int delta) {
#if OPUS_HIP
  return __shfl_up(v, delta, OPUS_WARP);
#else
  return __shfl_up_sync(0xffffffffu, v, delta, OPUS_WARP);
#endif
}
template <class T> OPUS_DEV T warp_bcast(T v, int lane) {
#if OPUS_HIP
  return __shfl(v, lane, OPUS_WARP);
#else
  return __shfl_sync(0xffffffffu, v, lane, OPUS_WARP);
#endif
}
OPUS_DEV int warp_count(bool pred) {
#if OPUS_HIP
  return __popcll(__ballot(pred));
#else
  return __popc(__ballot_sync(0xffffffffu, pred));
#endif
}
OPUS_DEV long long warp_sum_i64(long long v) {
#pragma unroll
  for (int m = OPUS_WARP / 2; m > 0; m >>= 1) v += warp_xor(v, m);
  return v;
}

// fp32 arithmetic with one rounding each, never contracted (docs/numerics.md fixes every
// rounding). nvcc: the _rn intrinsics are never fused. clang/HIP: every opus TU is compiled
// with -ffp-contract=off and starts its kernels under `#pragma clang fp contract(off)`, so
// plain operators are single IEEE operations; fma is explicit.
OPUS_DEV float fmul_rn(float a, float b) {
#if OPUS_HIP
  return a * b;
#else
  return __fmul_rn(a, b);
#endif
}
OPUS_DEV float fadd_rn(float a, float b) {
#if OPUS_HIP
  return a + b;
#else
  return __fadd_rn(a, b);
#endif
}
OPUS_DEV float fma_rn(float a, float b, float c) {
#if OPUS_HIP
  return __builtin_fmaf(a, b, c);
#else
  return __fmaf_rn(a, b, c);
#endif
}
// IEEE 754-2019 maximum(x, 0): NaN propagates (docs/numerics.md: relu is not a compare-and-select).
OPUS_DEV float relu_nan(float x) {
#if OPUS_HIP
  return __builtin_elementwise_maximum(x, 0.0f);
#else
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(0.0f));
  return r;
#endif
}
// E8M0 byte -> 2^(e-127) by placing it in the exponent field; 0xFF is NaN, 0 flushes to +0
// (the same bits as the Triton kernels' _e8m0_to_f32).
OPUS_DEV float e8m0_to_f32(uint32_t e) {
  return __uint_as_float(e == 255u ? 0x7FC00000u : (e << 23));
}
OPUS_DEV float bf16_to_f32(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

// fp32 -> bfloat16 / float16, rounded once to nearest-even (NaN stays NaN, +-Inf stays +-Inf, a
// finite value past the narrow range becomes +-Inf): the narrow outs (docs/contract.md).
OPUS_DEV uint16_t f32_to_bf16_rn(float v) {
#if OPUS_HIP
  const uint32_t b = __float_as_uint(v);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((b >> 16) | 0x40u);  // NaN: quiet, sign kept
  return uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
#else
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
#endif
}
OPUS_DEV uint16_t f32_to_f16_rn(float v) {
#if OPUS_HIP
  const _Float16 h = static_cast<_Float16>(v);  // IEEE conversion: round to nearest-even
  return __builtin_bit_cast(uint16_t, h);
#else
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
#endif
}
}  // namespace opus
#endif
