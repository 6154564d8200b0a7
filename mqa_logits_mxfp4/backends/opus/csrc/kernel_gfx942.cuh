// gfx942 (MI300, CDNA3) body: two v_mfma_f32_16x16x16_f16 per 32-element scale block on E2M1
// codes placed exactly in FP16 (encode.h's f16 words, the sm_90 f16 family's encoding): keys
// are value * 2^-13 (all normal), queries value * 2^13, so each product is the exact E2M1
// product and the fp32 block partial is exact (at most 13 significant bits, any order). The
// rest (LDS staging, key loads, docs/numerics.md steps 2-5 on the VALU) is kernel_gfx9.cuh's,
// with 16-key waves: four waves a 64-key tile, lane groups l / 16.
//
// Operand split inside a block (the K order is free: the partial is exact in any order): lane
// group g of both operands takes word g (elements 8g .. 8g+7) of the block; its four f16 pairs
// (n_i, n_{i+4}) feed the two MFMAs, pairs 0-1 the first and 2-3 the second. Query operands are
// converted once a group into LDS (uint4 a lane, block and M-tile); keys once a tile in registers.
//
// Not FP8: gfx942's FP8 MFMA reads E4M3 FNUZ (bias 8, 0x80 is NaN, no -0), a different
// encoding from the OCP E4M3 of encode.h; FP16 needs no such care (docs/opus-backend.md).
#pragma once

#include "encode.h"
#include "kernel_gfx9.cuh"

namespace opus {
namespace gfx942 {

typedef _Float16 v4h __attribute__((ext_vector_type(4)));
typedef float v4f __attribute__((ext_vector_type(4)));
typedef uint32_t v2u __attribute__((ext_vector_type(2)));

struct F16Mfma {
  static constexpr int kKeys = 16, kCols = 16;
  typedef uint4 Query;  // word kgroup of one block as four f16 pairs
  struct KeyData {
    uint32_t word[kScaleBlocks];  // word kgroup of each block
  };
  struct KeyOp {
    v4h op[kScaleBlocks][2];  // [block][MFMA]
  };
  typedef v4f Acc;

  static OPUS_DEV v4h halves(uint32_t a, uint32_t b) { return __builtin_bit_cast(v4h, v2u{a, b}); }
  static OPUS_DEV Query query(const uint8_t* head, int blk, int kgroup) {
    uint32_t o[4];
    f16_query_word(*reinterpret_cast<const uint32_t*>(head + blk * 16 + kgroup * 4), o);
    return make_uint4(o[0], o[1], o[2], o[3]);
  }
  static OPUS_DEV void load(const uint8_t* key, int kgroup, KeyData& k) {
#pragma unroll
    for (int blk = 0; blk < kScaleBlocks; ++blk) k.word[blk] = *reinterpret_cast<const uint32_t*>(key + blk * 16 + kgroup * 4);
  }
  static OPUS_DEV KeyOp key_operand(const KeyData& k) {
    KeyOp op;
#pragma unroll
    for (int blk = 0; blk < kScaleBlocks; ++blk) {
      uint32_t o[4];
      f16_key_word(k.word[blk], o);
      op.op[blk][0] = halves(o[0], o[1]);
      op.op[blk][1] = halves(o[2], o[3]);
    }
    return op;
  }
  // A = query (heads on M), B = key (keys on N); the second MFMA accumulates onto the first.
  static OPUS_DEV Acc partial(const Query& q, const KeyOp& k, int blk) {
    const v4f zero = {};
    const v4f p = __builtin_amdgcn_mfma_f32_16x16x16f16(halves(q.x, q.y), k.op[blk][0], zero, 0, 0, 0);
    return __builtin_amdgcn_mfma_f32_16x16x16f16(halves(q.z, q.w), k.op[blk][1], p, 0, 0, 0);
  }
};

#if defined(__HIP_DEVICE_COMPILE__) && defined(__gfx942__)
constexpr bool kOnTarget = true;
#else
constexpr bool kOnTarget = false;
#endif

template <int R, int H, int WAVES, int MIN_CTAS>
__global__ void __launch_bounds__(WAVES * 64) mqa_logits_gfx942(const LaunchArgs args) {
  gfx9::kernel_body<F16Mfma, R, H, WAVES, kOnTarget>(args);
}

}  // namespace gfx942
}  // namespace opus
