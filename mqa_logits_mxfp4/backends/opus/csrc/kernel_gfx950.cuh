// gfx950 body: the scaled MFMA v_mfma_scale_f32_32x32x64_f8f6f4 on raw E2M1 operands, one
// MFMA per 32-element scale block; the rest (LDS staging, key loads, docs/numerics.md steps 2-5
// on the VALU) is kernel_gfx9.cuh's, with 32-key waves (lane groups l / 32).
//
// Why one MFMA a block (K = 64 holds two blocks): the canonical order scales each block's exact
// partial on its own and sums the four left to right, with a rounding after each add. An MFMA
// over two blocks sums inside the instruction. So each MFMA sees one block: the query operand
// holds block b in the lanes of K-half (b % 2) and zeros in the other half; the key operand
// holds blocks 2p and 2p+1 (p = b / 2) in its two K-halves, so one 32-byte load a lane serves
// two MFMAs. The hardware scales are unit (E8M0 127): the E8M0 scales are applied on the VALU
// as (P * sk) * sq, the same two roundings as the Triton kernels and the sm_90 body, and
// 0xFF -> NaN by our own conversion, independent of how the hardware treats scale bytes.
#pragma once

#include "kernel_gfx9.cuh"

namespace opus {
namespace gfx950 {

typedef int v8i __attribute__((ext_vector_type(8)));
typedef float v16f __attribute__((ext_vector_type(16)));

struct ScaledMfma {
  static constexpr int kKeys = 32, kCols = 32;
  static constexpr int kE2M1 = 4;                  // f8f6f4 operand format code of E2M1
  static constexpr int kUnitScales = 0x7F7F7F7F;   // E8M0 127 = 1.0 in every byte
  typedef uint4 Query;  // block b's 16 bytes in K-half b % 2, zeros in the other
  struct KeyData {
    uint4 lo, hi;  // blocks kgroup and 2 + kgroup
  };
  struct KeyOp {
    v8i op[2];  // blocks (0, 1) and (2, 3), one block a K-half
  };
  typedef v16f Acc;

  static OPUS_DEV v8i operand(uint4 v) {
    v8i o = {(int)v.x, (int)v.y, (int)v.z, (int)v.w, 0, 0, 0, 0};
    return o;
  }
  static OPUS_DEV Query query(const uint8_t* head, int blk, int kgroup) {
    return kgroup == (blk & 1) ? *reinterpret_cast<const uint4*>(head + blk * 16) : make_uint4(0u, 0u, 0u, 0u);
  }
  static OPUS_DEV void load(const uint8_t* key, int kgroup, KeyData& k) {
    k.lo = *reinterpret_cast<const uint4*>(key + kgroup * 16);
    k.hi = *reinterpret_cast<const uint4*>(key + (2 + kgroup) * 16);
  }
  static OPUS_DEV KeyOp key_operand(const KeyData& k) { return KeyOp{{operand(k.lo), operand(k.hi)}}; }
  static OPUS_DEV Acc partial(const Query& q, const KeyOp& k, int blk) {
    const v16f zero = {};
    return __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(operand(q), k.op[blk >> 1], zero, kE2M1, kE2M1, 0,
                                                           kUnitScales, 0, kUnitScales);
  }
};

#if defined(__HIP_DEVICE_COMPILE__) && defined(__gfx950__)
constexpr bool kOnTarget = true;
#else
constexpr bool kOnTarget = false;
#endif

template <int R, int H, int WAVES, int MIN_CTAS>
__global__ void __launch_bounds__(WAVES * 64) mqa_logits_gfx950(const LaunchArgs args) {
  gfx9::kernel_body<ScaledMfma, R, H, WAVES, kOnTarget>(args);
}

}  // namespace gfx950
}  // namespace opus
