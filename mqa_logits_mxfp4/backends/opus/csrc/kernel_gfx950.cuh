// gfx950 bodies: the scaled MFMA v_mfma_scale_f32_32x32x64_f8f6f4 on raw E2M1 operands; the
// rest (LDS staging, key loads, docs/numerics.md steps 2-5 on the VALU) is kernel_gfx9.cuh's,
// with 32-key waves (lane groups l / 32). Two families:
//   mxf4 (ScaledMfma)      one MFMA per 32-element scale block with unit hardware scales: the
//                          canonical order (below).
//   mxsc (FullScaledMfma)  two MFMAs over the whole head_dim with the real E8M0 block scales as
//                          the scale operands, where the tile's scale bytes and the group's
//                          weights lie in the range where the hardware's scaling is a plain
//                          power of two (full_ok, gfx9::kFullScale*); mxf4's steps elsewhere. The
//                          hardware sums the four scaled blocks: not the canonical order,
//                          within the tolerance (docs/numerics.md, "Scaled MFMA tiles").
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

#include <type_traits>

#include "kernel_gfx9.cuh"

namespace opus {
namespace gfx950 {

typedef int v8i __attribute__((ext_vector_type(8)));
typedef float v16f __attribute__((ext_vector_type(16)));

struct ScaledMfma {
  static constexpr int kKeys = 32, kCols = 32;
  static constexpr bool kFull = false;
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

struct FullScaledMfma : ScaledMfma {
  static constexpr bool kFull = true;
  static constexpr bool kPostScale = false;  // the MFMA applies the scales itself
  struct QueryFull {
    uint4 q[2];   // blocks kgroup and 2 + kgroup of the lane's head
    uint32_t sa;  // their scale bytes in bytes 0 and 1 (the MFMAs' op_sel picks them)
  };
  static OPUS_DEV bool full_ok(uint32_t scales) {
    bool ok = true;
#pragma unroll
    for (int b = 0; b < kScaleBlocks; ++b) {
      const uint32_t e = scales >> (8 * b) & 0xFFu;
      ok = ok && e >= gfx9::kFullScaleLo && e <= gfx9::kFullScaleHi;
    }
    return ok;
  }
  // Blocks kgroup and 2 + kgroup's scale bytes of a scale word (a key's or a head's), in bytes 0
  // and 1: a lane's two scale operand bytes.
  static OPUS_DEV uint32_t lane_scales(uint32_t scales, int kgroup) {
    return (scales >> (8 * kgroup) & 0xFFu) | (scales >> (8 * (2 + kgroup)) & 0xFFu) << 8;
  }
  // head == nullptr: the zero operand with unit scales (heads and rows past the group's).
  static OPUS_DEV QueryFull query_full(const uint8_t* head, uint32_t scales, int kgroup) {
    QueryFull f;
    f.q[0] = head ? *reinterpret_cast<const uint4*>(head + kgroup * 16) : make_uint4(0u, 0u, 0u, 0u);
    f.q[1] = head ? *reinterpret_cast<const uint4*>(head + (2 + kgroup) * 16) : make_uint4(0u, 0u, 0u, 0u);
    f.sa = lane_scales(scales, kgroup);
    return f;
  }
  struct KeyFull {
    KeyOp op;     // the raw key operand, as mxf4's
    uint32_t sb;  // the lane's two block scale bytes (lane_scales)
  };
  static OPUS_DEV KeyFull key_full(const KeyOp& op, const KeyData&, uint32_t scales, int kgroup) {
    return KeyFull{op, lane_scales(scales, kgroup)};
  }
  // The scaled dot over the head_dim: blocks 0-1, then 2-3 accumulated onto them; each lane's
  // scale register holds the bytes of its row's blocks (byte p for the p-th MFMA).
  static OPUS_DEV Acc full(const QueryFull& q, const KeyFull& k) {
    const v16f zero = {};
    const v16f a = __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(operand(q.q[0]), k.op.op[0], zero, kE2M1, kE2M1, 0,
                                                                   q.sa, 0, k.sb);
    return __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(operand(q.q[1]), k.op.op[1], a, kE2M1, kE2M1, 1, q.sa, 1,
                                                           k.sb);
  }
};

#if defined(__HIP_DEVICE_COMPILE__) && defined(__gfx950__)
constexpr bool kOnTarget = true;
#else
constexpr bool kOnTarget = false;
#endif

constexpr int kMxf4 = 0, kMxsc = 1;  // the FAMILY template argument (kernels.cu)

template <int FAMILY, int R, int H, int WAVES, int MIN_CTAS>
__global__ void __launch_bounds__(WAVES * 64) mqa_logits_gfx950(const LaunchArgs args) {
  using M = std::conditional_t<FAMILY == kMxsc, FullScaledMfma, ScaledMfma>;
  gfx9::kernel_body<M, R, H, WAVES, kOnTarget>(args);
}

}  // namespace gfx950
}  // namespace opus
