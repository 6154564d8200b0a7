// gfx950 body: the scaled MFMA v_mfma_scale_f32_32x32x64_f8f6f4 on raw E2M1 operands, one
// MFMA per 32-element scale block, then docs/numerics.md steps 2-5 on the VALU in that order.
//
// Why one MFMA a block (K = 64 holds two blocks): the canonical order scales each block's exact
// partial on its own and sums the four left to right, with a rounding after each add. An MFMA
// over two blocks sums inside the instruction. So each MFMA sees one block: the query operand
// holds block b in the lanes of K-half (b % 2) and zeros in the other half; the key operand
// holds blocks 2p and 2p+1 (p = b / 2) in its two K-halves, so one 32-byte load a lane serves
// two MFMAs. The hardware scales are unit (E8M0 127): the E8M0 scales are applied on the VALU
// as (P * sk) * sq, the same two roundings as the Triton kernels and the sm_90 body, and
// 0xFF -> NaN by our own conversion, independent of how the hardware treats scale bytes.
//
// Layout: a CTA of WAVES waves scores a row group against 64-key tiles; wave w owns keys
// [32w, 32w + 32) of a tile (the MFMA's N side, lane l -> key l % 32). Columns (heads) sit on
// M, 32 an M-tile. Lane l receives rows m = 8*(i/4) + 4*(l/32) + (i%4), i = 0..15, of each
// M-tile; slot I = 16*mt + i of lane half hb = l/32 holds head 2*I + hb. So every level of the
// head tree but the last pairs slots of one lane, and the last pairs lane halves (l ^ 32).
// Keys go straight from global memory to registers (the next tile's loads are in flight
// while the current one is scored); the group's query operands, scales and weights sit in LDS.
#pragma once

#include "args.h"
#include "port.h"
#include "drive.cuh"
#include "worksplit.h"

namespace opus {
namespace gfx950 {

typedef int v8i __attribute__((ext_vector_type(8)));
typedef float v16f __attribute__((ext_vector_type(16)));

constexpr int kE2M1 = 4;                  // f8f6f4 operand format code of E2M1
constexpr int kUnitScales = 0x7F7F7F7F;   // E8M0 127 = 1.0 in every byte

template <int R, int H, int WAVES>
struct Shape {
  static constexpr int MT = (H + 31) / 32;     // M-tiles of one row (H = 16: half a tile)
  static constexpr int SLOTS = H / 2;          // head slots of one row in one lane
  static constexpr int THREADS = WAVES * 64;
  static_assert(H % 16 == 0 && H <= 128, "heads: 16, 32, 64 or 128");
  static_assert(R * H <= 256, "rows x heads <= 256: the group's query operands fit in LDS");
  static_assert(WAVES * 32 == kBlockN, "each wave owns 32 keys of a 64-key tile");
};

template <int R, int H, int WAVES>
struct Lds {
  using S = Shape<R, H, WAVES>;
  uint4 qa[R][S::MT][kScaleBlocks][64];  // query operand of each MFMA, [row][M-tile][block][lane]
  float sq[R][kScaleBlocks][2][S::SLOTS];  // query scales, [row][block][lane half][slot]
  float w[R][2][S::SLOTS];               // weights, [row][lane half][slot]
  long long obase[R];
  int rend[R];
  int range[4];
};

template <int R, int H, int WAVES>
constexpr int smem_bytes() { return 0; }  // static LDS only

struct KeyRegs {  // one lane's key of the next tile
  uint4 lo, hi;     // blocks hb and 2 + hb
  uint32_t scales;  // the key's four E8M0 bytes
};

template <int R, int H, int WAVES>
struct Scorer {
  using S = Shape<R, H, WAVES>;
  using L = Lds<R, H, WAVES>;

  const LaunchArgs& args;
  L& lds;
  int tid, lane, wave, hb;
  int r0, r1, gend;
  const int32_t* bt_row;

  OPUS_DEV Scorer(const LaunchArgs& a, L& s) : args(a), lds(s) {
    tid = threadIdx.x;
    lane = tid & 63;
    wave = tid >> 6;
    hb = lane >> 5;
  }

  // Column m of M-tile mt -> head (the inverse of the output map in the header comment).
  static OPUS_DEV int head_of(int mt, int m) {
    const int slot = 16 * mt + 4 * (m >> 3) + (m & 3);
    return 2 * slot + ((m >> 2) & 1);
  }

  OPUS_DEV void setup_group() {
    for (int idx = tid; idx < R * S::MT * kScaleBlocks * 64; idx += S::THREADS) {
      const int l = idx & 63, blk = (idx >> 6) % kScaleBlocks, mt = (idx / (64 * kScaleBlocks)) % S::MT;
      const int r = idx / (64 * kScaleBlocks * S::MT);
      const int h = head_of(mt, l & 31), row = r0 + r;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if ((l >> 5) == (blk & 1) && h < H && row < r1)  // this K-half carries block blk
        v = *reinterpret_cast<const uint4*>(args.q + ((long long)row * H + h) * kHeadBytes + blk * 16);
      lds.qa[r][mt][blk][l] = v;
    }
    for (int idx = tid; idx < R * kScaleBlocks * 2 * S::SLOTS; idx += S::THREADS) {
      const int slot = idx % S::SLOTS, half = (idx / S::SLOTS) & 1, blk = (idx / (2 * S::SLOTS)) % kScaleBlocks;
      const int r = idx / (2 * S::SLOTS * kScaleBlocks);
      const int row = r0 + r, h = 2 * slot + half;
      const uint32_t byte = row < r1 ? args.q_scale[((long long)row * H + h) * kScaleBlocks + blk] : 127u;
      lds.sq[r][blk][half][slot] = e8m0_to_f32(byte);
    }
    for (int idx = tid; idx < R * 2 * S::SLOTS; idx += S::THREADS) {
      const int slot = idx % S::SLOTS, half = (idx / S::SLOTS) & 1, r = idx / (2 * S::SLOTS);
      const int row = r0 + r, h = 2 * slot + half;
      float wv = 0.0f;
      if (row < r1) {
        const long long off = (long long)row * args.stride_w + h;
        wv = args.weights_bf16 ? bf16_to_f32(reinterpret_cast<const uint16_t*>(args.weights)[off])
                               : reinterpret_cast<const float*>(args.weights)[off];
      }
      lds.w[r][half][slot] = wv;
    }
    if (tid < R) {
      const int row = r0 + tid;
      int end = 0;
      long long base = 0;
      if (row < r1) {
        end = imin(imax(args.row_ends[row], 0), args.key_cap);
        if (args.out_offsets != nullptr) {
          base = args.out_offsets[row];
          const long long room = args.out_numel - base;
          end = (base < 0 || room <= 0) ? 0 : (room < end ? (int)room : end);
        } else {
          base = (long long)row * args.stride_out;
          end = imin(end, args.out_cols);
        }
      }
      lds.rend[tid] = end;
      lds.obase[tid] = base;
    }
  }

  OPUS_DEV void load_key(int tile, KeyRegs& k) const {
    const int n = tile * kBlockN + wave * 32 + (lane & 31);
    k.lo = make_uint4(0u, 0u, 0u, 0u);
    k.hi = k.lo;
    k.scales = 0x7F7F7F7Fu;  // keys past the group's rows: finite, never stored
    if (n < gend) {
      const long long slot = key_slot(args, bt_row, n);
      if (slot >= 0) {
        const uint8_t* key = args.kv + slot * kHeadBytes;
        k.lo = *reinterpret_cast<const uint4*>(key + hb * 16);
        k.hi = *reinterpret_cast<const uint4*>(key + (2 + hb) * 16);
        k.scales = *reinterpret_cast<const uint32_t*>(args.kv_scale + slot * kScaleBlocks);
      } else {
        k.scales = 0xFFFFFFFFu;  // a table entry outside the cache: NaN, nothing is read
      }
    }
  }

  static OPUS_DEV v8i operand(uint4 v) {
    v8i o = {(int)v.x, (int)v.y, (int)v.z, (int)v.w, 0, 0, 0, 0};
    return o;
  }

  // Steps 1-5 for every row of the group against the lane's key, then the stores.
  OPUS_DEV void score_tile(const KeyRegs& k, int tile) const {
    const int n = tile * kBlockN + wave * 32 + (lane & 31);
    float sk[kScaleBlocks];
#pragma unroll
    for (int blk = 0; blk < kScaleBlocks; ++blk) sk[blk] = e8m0_to_f32((k.scales >> (8 * blk)) & 0xFFu);
    const v8i kop[2] = {operand(k.lo), operand(k.hi)};
    const v16f zero = {};
#pragma unroll 1
    for (int r = 0; r < R; ++r) {
      const int end = lds.rend[r];
      if (tile * kBlockN >= end) continue;  // uniform across the CTA
      float acc[S::MT][16];
#pragma unroll
      for (int blk = 0; blk < kScaleBlocks; ++blk) {
#pragma unroll
        for (int mt = 0; mt < S::MT; ++mt) {
          const v16f p = __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(
              operand(lds.qa[r][mt][blk][lane]), kop[blk >> 1], zero, kE2M1, kE2M1, 0, kUnitScales, 0,
              kUnitScales);
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            const int slot = 16 * mt + i;
            if (slot >= S::SLOTS) break;  // H = 16: the upper half of the M-tile is empty
            const float t = fmul_rn(fmul_rn(p[i], sk[blk]), lds.sq[r][blk][hb][slot]);
            acc[mt][i] = blk == 0 ? t : fadd_rn(acc[mt][i], t);
          }
        }
      }
      // step 4 (relu) and step 5: level 1 fma(x_j, w_j, x_{j+H/2} * w_{j+H/2}), in-lane halving
      float v[S::SLOTS / 2];
#pragma unroll
      for (int i = 0; i < S::SLOTS / 2; ++i) {
        const int sa = i, sb = i + S::SLOTS / 2;
        const float xa = relu_nan(acc[sa >> 4][sa & 15]);
        const float xb = relu_nan(acc[sb >> 4][sb & 15]);
        v[i] = fma_rn(xa, lds.w[r][hb][sa], fmul_rn(xb, lds.w[r][hb][sb]));
      }
      halve<S::SLOTS / 2>(v);
      const float val = fadd_rn(v[0], warp_xor(v[0], 32));  // heads 2s and 2s + 1: the last level
      if (hb == (r & 1) && n < end) args.out[lds.obase[r] + n] = val;
    }
  }

  template <int LEN>
  static OPUS_DEV void halve(float* v) {
    if constexpr (LEN > 1) {
#pragma unroll
      for (int i = 0; i < LEN / 2; ++i) v[i] = fadd_rn(v[i], v[i + LEN / 2]);
      halve<LEN / 2>(v);
    }
  }

  OPUS_DEV void score_piece(const Piece& p) {
    __syncthreads();  // the previous piece is done with LDS
    r0 = p.r0;
    r1 = p.r1;
    bt_row = args.block_tables + (long long)(args.gather ? p.r0 : p.b) * args.stride_bt;
    setup_group();
    __syncthreads();
    gend = 0;
#pragma unroll
    for (int r = 0; r < R; ++r) gend = imax(gend, lds.rend[r]);
    const int t1 = imin(p.t1, cdiv_nonneg(gend, kBlockN));
    if (p.t0 >= t1) return;
    KeyRegs cur, next;
    load_key(p.t0, cur);
    for (int tile = p.t0; tile < t1; ++tile) {
      if (tile + 1 < t1) load_key(tile + 1, next);  // in flight while this tile is scored
      score_tile(cur, tile);
      cur = next;
    }
  }
};

OPUS_DEV CtaRange cta_range_wave(const SeqView& sv, int rows, int pid, int nprog, int lane) {
  long long total = 0;
  for (int c0 = 0; c0 < sv.num_seqs; c0 += OPUS_WARP) {
    const int s = c0 + lane;
    total += s < sv.num_seqs ? sv.units(s, rows) : 0;
  }
  total = warp_sum_i64(total);
  CtaRange cr;
  cr.u_begin = int(pid * total / nprog);
  cr.u_end = int((pid + 1) * total / nprog);
  cr.b = 0;
  cr.base = 0;
  long long carry = 0;
  for (int c0 = 0; c0 < sv.num_seqs; c0 += OPUS_WARP) {
    const int s = c0 + lane;
    const int u = s < sv.num_seqs ? sv.units(s, rows) : 0;
    long long incl = u;
#pragma unroll
    for (int d = 1; d < OPUS_WARP; d <<= 1) {
      const long long o = warp_up(incl, d);
      if (lane >= d) incl += o;
    }
    incl += carry;
    const bool before = s < sv.num_seqs && incl <= cr.u_begin;
    cr.b += warp_count(before);
    cr.base += (int)warp_sum_i64(before ? u : 0);
    carry = warp_bcast(incl, OPUS_WARP - 1);
    if (carry > cr.u_begin) break;
  }
  return cr;
}

template <int R, int H, int WAVES, int MIN_CTAS>
__global__ void __launch_bounds__(WAVES * 64) mqa_logits_gfx950(const LaunchArgs args) {
#if defined(__HIP_DEVICE_COMPILE__) && defined(__gfx950__)
  __shared__ Lds<R, H, WAVES> lds;
  const SeqView sv{args.qsl, args.row_ends, args.num_seqs, args.num_rows};
  Scorer<R, H, WAVES> scorer(args, lds);
  for_each_piece<64, cta_range_wave>(args, sv, R, lds.range, scorer);
#elif defined(__HIP_DEVICE_COMPILE__)
  __builtin_trap();  // built for another gfx target: the launcher never routes here
#endif
}

}  // namespace gfx950
}  // namespace opus
