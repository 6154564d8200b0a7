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
// Family fp8 (Fp8Mfma): one v_mfma_f32_16x16x32_fp8_fp8 per block instead of two FP16 ones, on
// the E2M1 values written as E4M3 FNUZ bytes (bias 8; 0x80 is NaN and there is no -0, so an
// E2M1 -0 becomes 0x00): every E2M1 value is an FNUZ normal, each product is exact and so is the
// fp32 block partial, as for f16. Same operand split (lane group g: word g of the block, its
// eight codes as eight bytes). Both are canonical.
//
// Family fp8fold (Fp8FoldMfma, not canonical): where a key's four block scales lie within 2^6 of
// its largest (kmax), a head's within 2^6 of its (qmax), those in 96..158, and the weights below
// 2^40, each block's offset is folded into the FNUZ operand (the exponent field lowered by
// kmax - ek_b, exact: every value stays normal) and the four MFMAs of a (row, M-tile) chain into
// one accumulator: acc = sum_b P_b * 2^-(dq_b + dk_b), then two exact multiplies by 2^(kmax - 127)
// and 2^(qmax - 127). No per-block scaling on the VALU; the hardware's additions of the four
// terms decide the last bits (docs/numerics.md, "Scaled MFMA tiles"). fp8's steps elsewhere.
#pragma once

#include <type_traits>

#include "encode.h"
#include "kernel_gfx9.cuh"

namespace opus {
namespace gfx942 {

typedef _Float16 v4h __attribute__((ext_vector_type(4)));
typedef float v4f __attribute__((ext_vector_type(4)));
typedef uint32_t v2u __attribute__((ext_vector_type(2)));

struct F16Mfma {
  static constexpr int kKeys = 16, kCols = 16;
  static constexpr bool kFull = false;  // the canonical steps on every tile
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

// Eight E2M1 codes (a word) -> eight E4M3 FNUZ bytes of the same values: lo = the even codes,
// hi = the odd ones (the K order inside a lane is free; queries and keys use the same).
// v_perm_b32 looks the magnitude up (selector 0-3: bytes of the second source, 4-7 of the
// first); the sign bit goes to bit 7 only for a nonzero magnitude (m + 7 carries into bit 3).
OPUS_DEV uint32_t fnuz_bytes(uint32_t codes) {  // four codes, one a byte
  constexpr uint32_t kMag03 = 0x44403800u, kMag47 = 0x54504C48u;  // 0, 0.5, 1, 1.5 | 2, 3, 4, 6
  const uint32_t m = codes & 0x07070707u;
  const uint32_t neg = codes & ((m + 0x07070707u) & 0x08080808u);  // bit 3: negative and nonzero
  return __builtin_amdgcn_perm(kMag47, kMag03, m) | neg << 4;
}
// The same with every nonzero value divided by 2^d (fp8fold): its exponent field lowered by d
// (d <= 6 keeps it normal: the smallest, 0.5 = exponent 7, becomes 2^-7; no byte borrows, the
// nonzero ones being >= 0x38). (Folding the shift into the lookup above, one expression, cost
// fp8fold up to 16 VGPRs.)
OPUS_DEV uint32_t fnuz_bytes(uint32_t codes, uint32_t d) {
  const uint32_t nz = (((codes & 0x07070707u) + 0x07070707u) & 0x08080808u) >> 3;  // 1 in each nonzero byte
  return fnuz_bytes(codes) - nz * (d << 3);
}
OPUS_DEV uint2 fnuz_word(uint32_t w) { return make_uint2(fnuz_bytes(w & 0x0F0F0F0Fu), fnuz_bytes(w >> 4 & 0x0F0F0F0Fu)); }
OPUS_DEV uint2 fnuz_word(uint32_t w, uint32_t d) {
  return make_uint2(fnuz_bytes(w & 0x0F0F0F0Fu, d), fnuz_bytes(w >> 4 & 0x0F0F0F0Fu, d));
}

struct Fp8Mfma {
  static constexpr int kKeys = 16, kCols = 16;
  static constexpr bool kFull = false;
  typedef uint2 Query;  // word kgroup of one block as eight FNUZ bytes
  typedef F16Mfma::KeyData KeyData;
  struct KeyOp {
    uint2 op[kScaleBlocks];
  };
  typedef v4f Acc;

  static OPUS_DEV Query query(const uint8_t* head, int blk, int kgroup) {
    return fnuz_word(*reinterpret_cast<const uint32_t*>(head + blk * 16 + kgroup * 4));
  }
  static OPUS_DEV void load(const uint8_t* key, int kgroup, KeyData& k) { F16Mfma::load(key, kgroup, k); }
  static OPUS_DEV KeyOp key_operand(const KeyData& k) {
    KeyOp op;
#pragma unroll
    for (int blk = 0; blk < kScaleBlocks; ++blk) op.op[blk] = fnuz_word(k.word[blk]);
    return op;
  }
  static OPUS_DEV long bits(uint2 v) { return __builtin_bit_cast(long, v); }
  // A = query (heads on M), B = key (keys on N): the exact block partial in one MFMA.
  static OPUS_DEV Acc partial(const Query& q, const KeyOp& k, int blk) {
    const v4f zero = {};
    return __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(bits(q), bits(k.op[blk]), zero, 0, 0, 0);
  }
};

// The fold rule (fp8fold): block offsets from the vector's largest scale byte at most
// kFoldSpread, the largest in gfx9::kFullScaleLo..kFullScaleHi, the weights as gfx9's full paths.
constexpr int kFoldSpread = 6;

struct Fp8FoldMfma : Fp8Mfma {
  static constexpr bool kFull = true;
  static constexpr bool kPostScale = true;
  struct QueryFull {
    uint2 q[kScaleBlocks];  // word kgroup of each block, folded by the head's block offsets
  };
  struct KeyFull {
    uint2 op[kScaleBlocks];  // the same for the key
  };
  static OPUS_DEV uint32_t max_byte(uint32_t s) {
    return uint32_t(imax(imax(int(s & 0xFFu), int(s >> 8 & 0xFFu)), imax(int(s >> 16 & 0xFFu), int(s >> 24))));
  }
  static OPUS_DEV bool full_ok(uint32_t scales) {
    const uint32_t hi = max_byte(scales);
    bool ok = hi >= gfx9::kFullScaleLo && hi <= gfx9::kFullScaleHi;
#pragma unroll
    for (int b = 0; b < kScaleBlocks; ++b) ok = ok && hi - (scales >> (8 * b) & 0xFFu) <= uint32_t(kFoldSpread);
    return ok;
  }
  static OPUS_DEV float scale_factor(uint32_t scales) { return __uint_as_float(max_byte(scales) << 23); }
  static OPUS_DEV uint2 folded(uint32_t word, uint32_t scales, int blk) {
    return fnuz_word(word, max_byte(scales) - (scales >> (8 * blk) & 0xFFu));
  }
  // head == nullptr: the zero operand (heads and rows past the group's).
  static OPUS_DEV QueryFull query_full(const uint8_t* head, uint32_t scales, int kgroup) {
    QueryFull f;
#pragma unroll
    for (int blk = 0; blk < kScaleBlocks; ++blk)
      f.q[blk] = head ? folded(*reinterpret_cast<const uint32_t*>(head + blk * 16 + kgroup * 4), scales, blk)
                      : make_uint2(0u, 0u);
    return f;
  }
  static OPUS_DEV KeyFull key_full(const KeyOp&, const KeyData& k, uint32_t scales, int) {
    KeyFull f;
#pragma unroll
    for (int blk = 0; blk < kScaleBlocks; ++blk) f.op[blk] = folded(k.word[blk], scales, blk);
    return f;
  }
  // sum_b P_b * 2^-(dq_b + dk_b): the four MFMAs on one accumulator
  static OPUS_DEV Acc full(const QueryFull& q, const KeyFull& k) {
    v4f a = {};
#pragma unroll
    for (int blk = 0; blk < kScaleBlocks; ++blk)
      a = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(bits(q.q[blk]), bits(k.op[blk]), a, 0, 0, 0);
    return a;
  }
};

#if defined(__HIP_DEVICE_COMPILE__) && defined(__gfx942__)
constexpr bool kOnTarget = true;
#else
constexpr bool kOnTarget = false;
#endif

constexpr int kF16 = 0, kFp8 = 1, kFp8Fold = 2;  // the FAMILY template argument (kernels.cu)

template <int FAMILY, int R, int H, int WAVES, int MIN_CTAS>
__global__ void __launch_bounds__(WAVES * 64) mqa_logits_gfx942(const LaunchArgs args) {
  using M = std::conditional_t<FAMILY == kFp8Fold, Fp8FoldMfma, std::conditional_t<FAMILY == kFp8, Fp8Mfma, F16Mfma>>;
  gfx9::kernel_body<M, R, H, WAVES, kOnTarget>(args);
}

}  // namespace gfx942
}  // namespace opus
