// What the gfx9 bodies (kernel_gfx950.cuh, kernel_gfx942.cuh) share: one exact block partial
// per 32-element scale block from MFMAs, then docs/numerics.md steps 2-5 on the VALU in that
// order. An MFMA family M (the arch's header) says how operands are built and multiplied; the
// LDS staging, the key loads, the epilogue and the piece loop are written once here.
//
// Layout: a CTA of kBlockN / TN waves scores a row group against 64-key tiles; wave w owns keys
// [TN*w, TN*w + TN) of a tile (the MFMA's N side, lane l -> key l % TN, lane group g = l / TN of
// G = 64 / TN). Columns (heads) sit on M, TM an M-tile. The accumulator of an M-tile gives lane
// group g rows m = 4*G*(i/4) + 4*g + (i%4), i = 0..VPT-1 (both gfx9 MFMA output layouts); slot
// I = VPT*mt + i of group g holds head G*I + g. So every level of the head tree pairs slots of
// one lane except the last log2(G), which pair lane groups (lanes l ^ (TN*G/2) ... l ^ TN).
// Keys go straight from global memory to registers (the next tile's loads are in flight while
// the current one is scored); the group's query operands, scales and weights sit in LDS.
//
// An MFMA family provides:
//   kKeys (TN), kCols (TM); Query (one lane's query operand of one (M-tile, block), in LDS),
//   KeyData (one lane's raw key bytes), KeyOp (that key as operands), Acc (one M-tile's
//   accumulator, VPT floats);
//   query(head, blk, kgroup) -> Query   head: the 64 bytes of one head; kgroup = lane / TM
//   load(key, kgroup, KeyData&)          key: the 64 bytes of one key; kgroup = lane / TN
//   key_operand(KeyData) -> KeyOp;  partial(Query, KeyOp, blk) -> Acc (the exact block partial)
//   kFull: false, or true for a family that also scores a whole tile in one MFMA chain over the
//   head_dim with the block scales in the operands (not the canonical order; within the
//   tolerance) where full_ok() admits the tile, and then provides QueryFull,
//   query_full(head, scales, kgroup), KeyFull, key_full(KeyOp, KeyData, scales, kgroup) and
//   full(QueryFull, KeyFull) -> Acc; with kPostScale the Acc is the dot over 2^(qmax + kmax - 254)
//   and the Scorer multiplies it by the key's and the head's scale_factor(scales) =
//   2^(largest byte - 127) (exact powers of two). Other tiles take the canonical steps.
#pragma once

#include "args.h"
#include "port.h"
#include "drive.cuh"
#include "worksplit.h"

namespace opus {
namespace gfx9 {

// The full paths' range (kFull families): scale bytes 2^-31..2^31 (gfx950 mxsc: every byte;
// gfx942 fp8fold: each vector's largest), so a scaled product (|E2M1 x E2M1| <= 36) and any
// 128-term sum of them stay normal and finite, far from where a format's scaling could saturate
// or flush; 0xFF (NaN) and the extremes take the canonical steps. Weights finite and below 2^40:
// a cell, 4608 x 2^62 x 2^40 at most, summed over 128 heads stays finite (the canonical steps
// decide overflow otherwise).
constexpr uint32_t kFullScaleLo = 96, kFullScaleHi = 158;
constexpr float kFullWeightHi = 1099511627776.0f;
OPUS_DEV bool full_weight_ok(float w) { return w < kFullWeightHi && -w < kFullWeightHi; }  // false for NaN

template <class M, int R, int H>
struct Shape {
  static constexpr int TN = M::kKeys;            // keys a wave
  static constexpr int TM = M::kCols;            // columns an M-tile
  static constexpr int G = 64 / TN;              // lane groups of a wave
  static constexpr int VPT = TM * TN / 64;       // accumulator values of an M-tile in one lane
  static constexpr int MT = (H + TM - 1) / TM;   // M-tiles of one row (H = 16 on 32 columns: half a tile)
  static constexpr int SLOTS = H / G;            // head slots of one row in one lane
  static constexpr int WAVES = kBlockN / TN;
  static constexpr int THREADS = WAVES * 64;
  static_assert(H % 16 == 0 && H <= 128, "heads: 16, 32, 64 or 128");
  static_assert(R * H <= 256, "rows x heads <= 256: the group's query operands fit in LDS");
  static_assert(kBlockN % TN == 0 && TM == TN, "whole waves a tile; square MFMA tiles");
  static_assert(SLOTS >= 2 && SLOTS % 2 == 0, "level 1 pairs slots of one lane");
};

// The whole-head_dim query operands with their scale bytes, [row][M-tile][lane]: kFull families
// only (an empty base otherwise, so the other families' layout does not move: a one-byte
// placeholder shifted their scale arrays off 16-byte alignment and cost gfx942 r1 H128 78 VGPRs).
template <class M, int R, int MT, bool FULL = M::kFull>
struct FullOperands {};
// kPostScale families: each head's scale_factor, [row][lane group][slot] (as Lds::sq).
template <class M, int R, int G, int SLOTS, bool POST = M::kPostScale>
struct PostScaleFactors {};
template <class M, int R, int G, int SLOTS>
struct PostScaleFactors<M, R, G, SLOTS, true> {
  float fq[R][G][SLOTS];
};
template <class M, int R, int MT>
struct FullOperands<M, R, MT, true> : PostScaleFactors<M, R, 64 / M::kKeys, MT * M::kCols * M::kKeys / 64> {
  typename M::QueryFull qf[R][MT][64];
};

template <class M, int R, int H>
struct Lds : FullOperands<M, R, Shape<M, R, H>::MT> {
  using S = Shape<M, R, H>;
  typename M::Query qa[R][S::MT][kScaleBlocks][64];  // query operands, [row][M-tile][block][lane]
  float sq[R][kScaleBlocks][S::G][S::SLOTS];         // query scales, [row][block][lane group][slot]
  float w[R][S::G][S::SLOTS];                        // weights, [row][lane group][slot]
  long long obase[R];
  int rbeg[R], rend[R];  // keys [rbeg, rend) each row stores (empty: a dead row)
  int range[4];
};

template <class M>
struct KeyRegs {  // one lane's key of the next tile
  typename M::KeyData data;
  uint32_t scales;  // the key's four E8M0 bytes
};

// In-register levels of the head tree: v[i] = v[i] + v[i + LEN/2] until one value is left.
template <int LEN>
OPUS_DEV void halve(float* v) {
  if constexpr (LEN > 1) {
#pragma unroll
    for (int i = 0; i < LEN / 2; ++i) v[i] = fadd_rn(v[i], v[i + LEN / 2]);
    halve<LEN / 2>(v);
  }
}

template <class M, int R, int H>
struct Scorer {
  using S = Shape<M, R, H>;
  using L = Lds<M, R, H>;

  const LaunchArgs& args;
  L& lds;
  int tid, lane, wave, grp;
  int r0, r1, gbeg, gend;
  bool full_group = false;  // kFull: every live head's scales and weight admit the full path
  const int32_t* bt_row;

  OPUS_DEV Scorer(const LaunchArgs& a, L& s) : args(a), lds(s) {
    tid = threadIdx.x;
    lane = tid & 63;
    wave = tid >> 6;
    grp = lane / S::TN;
  }

  // Column m of M-tile mt -> head (the inverse of the output map in the header comment).
  static OPUS_DEV int head_of(int mt, int m) {
    const int g = (m >> 2) % S::G, i = 4 * (m / (4 * S::G)) + (m & 3);
    return S::G * (S::VPT * mt + i) + g;
  }

  OPUS_DEV void setup_group() {
    for (int idx = tid; idx < R * S::MT * kScaleBlocks * 64; idx += S::THREADS) {
      const int l = idx & 63, blk = (idx >> 6) % kScaleBlocks, mt = (idx / (64 * kScaleBlocks)) % S::MT;
      const int r = idx / (64 * kScaleBlocks * S::MT);
      const int h = head_of(mt, l % S::TM), row = r0 + r;
      typename M::Query v{};
      if (h < H && row < r1) v = M::query(args.q + ((long long)row * H + h) * kHeadBytes, blk, l / S::TM);
      lds.qa[r][mt][blk][l] = v;
    }
    for (int idx = tid; idx < R * kScaleBlocks * S::G * S::SLOTS; idx += S::THREADS) {
      const int slot = idx % S::SLOTS, g = (idx / S::SLOTS) % S::G, blk = (idx / (S::G * S::SLOTS)) % kScaleBlocks;
      const int r = idx / (S::G * S::SLOTS * kScaleBlocks);
      const int row = r0 + r, h = S::G * slot + g;
      const uint32_t byte = row < r1 ? args.q_scale[((long long)row * H + h) * kScaleBlocks + blk] : 127u;
      lds.sq[r][blk][g][slot] = e8m0_to_f32(byte);
    }
    for (int idx = tid; idx < R * S::G * S::SLOTS; idx += S::THREADS) {
      const int slot = idx % S::SLOTS, g = (idx / S::SLOTS) % S::G, r = idx / (S::G * S::SLOTS);
      const int row = r0 + r;
      lds.w[r][g][slot] = row < r1 ? head_weight(args, row, S::G * slot + g) : 0.0f;
    }
    if (tid < R) row_window(args, r0 + tid, r0 + tid < r1, lds.rbeg[tid], lds.rend[tid], lds.obase[tid]);
    if constexpr (M::kFull) {
      bool mine = true;
      for (int idx = tid; idx < R * S::MT * 64; idx += S::THREADS) {
        const int l = idx & 63, mt = (idx >> 6) % S::MT, r = idx / (64 * S::MT);
        const int h = head_of(mt, l % S::TM), row = r0 + r;
        typename M::QueryFull v = M::query_full(nullptr, 0x7F7F7F7Fu, 0);  // zeros, unit scales
        if (h < H && row < r1) {
          const long long col = (long long)row * H + h;
          const uint32_t qs = *reinterpret_cast<const uint32_t*>(args.q_scale + col * kScaleBlocks);
          v = M::query_full(args.q + col * kHeadBytes, qs, l / S::TM);
          mine = mine && M::full_ok(qs) && full_weight_ok(head_weight(args, row, h));
        }
        lds.qf[r][mt][l] = v;
      }
      if constexpr (M::kPostScale) {
        for (int idx = tid; idx < R * S::G * S::SLOTS; idx += S::THREADS) {
          const int slot = idx % S::SLOTS, g = (idx / S::SLOTS) % S::G, r = idx / (S::G * S::SLOTS);
          const int row = r0 + r;
          const uint32_t qs = row < r1 ? query_scales<H>(args, row, S::G * slot + g) : 0x7F7F7F7Fu;
          lds.fq[r][g][slot] = M::scale_factor(qs);
        }
      }
      full_group = __syncthreads_and(mine) != 0;
    }
  }

  OPUS_DEV int key_of(int tile) const { return tile * kBlockN + wave * S::TN + lane % S::TN; }

  OPUS_DEV void load_key(int tile, KeyRegs<M>& k) const {
    const int n = key_of(tile);
    k.data = typename M::KeyData{};
    k.scales = 0x7F7F7F7Fu;  // keys outside the group's windows: finite, never stored
    if (n >= gbeg && n < gend) {
      const long long slot = key_slot(args, bt_row, n);
      if (slot >= 0) {
        M::load(args.kv + slot * kHeadBytes, grp, k.data);
        k.scales = *reinterpret_cast<const uint32_t*>(args.kv_scale + slot * kScaleBlocks);
      } else {
        k.scales = 0xFFFFFFFFu;  // a table entry outside the cache: NaN, nothing is read
      }
    }
  }

  // Steps 4 (relu) and 5 of row r from its column sums acc, then the store of key n: level 1
  // fma(x_j, w_j, x_{j+H/2} * w_{j+H/2}), in-lane halving, then the lane groups.
  OPUS_DEV void finish_row(const float (&acc)[S::MT][S::VPT], int r, int n, int beg, int end) const {
    float v[S::SLOTS / 2];
#pragma unroll
    for (int i = 0; i < S::SLOTS / 2; ++i) {
      const int sa = i, sb = i + S::SLOTS / 2;
      const float xa = relu_nan(acc[sa / S::VPT][sa % S::VPT]);
      const float xb = relu_nan(acc[sb / S::VPT][sb % S::VPT]);
      v[i] = fma_rn(xa, lds.w[r][grp][sa], fmul_rn(xb, lds.w[r][grp][sb]));
    }
    halve<S::SLOTS / 2>(v);
    float val = v[0];
#pragma unroll
    for (int m = S::G / 2; m >= 1; m >>= 1) val = fadd_rn(val, warp_xor(val, m * S::TN));  // lane groups g, g + m
    if (grp == r % S::G && n >= beg && n < end) store_out(args, lds.obase[r] + n, val);
  }

  // The full path of a kFull family: one MFMA chain a (row, M-tile) over the whole head_dim with
  // the real block scales, then steps 4 and 5. (The row loop repeats score_tile's: one loop with
  // both paths inside it, or a row loop taking the column sums as a lambda, made the AMDGPU
  // backend's allocation worse: more SGPR spills, and 350 VGPRs at r1 H128.)
  OPUS_DEV void score_tile_full(const KeyRegs<M>& k, const typename M::KeyOp& kop, int tile) const {
    const int n = key_of(tile);
    const typename M::KeyFull kf = M::key_full(kop, k.data, k.scales, grp);
    float kfac = 1.0f;
    if constexpr (M::kPostScale) kfac = M::scale_factor(k.scales);
#pragma unroll 1
    for (int r = 0; r < R; ++r) {
      const int beg = lds.rbeg[r], end = lds.rend[r];
      if (tile * kBlockN >= end) continue;  // uniform across the CTA (a tile before the row's start only stores nothing)
      float acc[S::MT][S::VPT];
#pragma unroll
      for (int mt = 0; mt < S::MT; ++mt) {
        const typename M::Acc p = M::full(lds.qf[r][mt][lane], kf);
#pragma unroll
        for (int i = 0; i < S::VPT; ++i) {
          acc[mt][i] = p[i];
          if constexpr (M::kPostScale) {
            const int slot = S::VPT * mt + i;
            if (slot < S::SLOTS) acc[mt][i] = fmul_rn(fmul_rn(p[i], kfac), lds.fq[r][grp][slot]);
          }
        }
      }
      finish_row(acc, r, n, beg, end);
    }
  }

  // Steps 1-5 for every row of the group against the lane's key, then the stores. A kFull
  // family takes its full path where the group and all of the wave's keys admit it (the wave's
  // 32 keys of this tile: the same keys in every mode).
  OPUS_DEV void score_tile(const KeyRegs<M>& k, int tile) const {
    const int n = key_of(tile);
    const typename M::KeyOp kop = M::key_operand(k.data);
    if constexpr (M::kFull) {
      if (full_group && __all(M::full_ok(k.scales))) {
        score_tile_full(k, kop, tile);
        return;
      }
    }
    float sk[kScaleBlocks];
#pragma unroll
    for (int blk = 0; blk < kScaleBlocks; ++blk) sk[blk] = e8m0_to_f32((k.scales >> (8 * blk)) & 0xFFu);
#pragma unroll 1
    for (int r = 0; r < R; ++r) {
      const int beg = lds.rbeg[r], end = lds.rend[r];
      if (tile * kBlockN >= end) continue;  // uniform across the CTA (a tile before the row's start only stores nothing)
      float acc[S::MT][S::VPT];
#pragma unroll
      for (int blk = 0; blk < kScaleBlocks; ++blk) {
#pragma unroll
        for (int mt = 0; mt < S::MT; ++mt) {
          const typename M::Acc p = M::partial(lds.qa[r][mt][blk][lane], kop, blk);
#pragma unroll
          for (int i = 0; i < S::VPT; ++i) {
            const int slot = S::VPT * mt + i;
            if (slot >= S::SLOTS) break;  // H = 16 on 32 columns: the upper half of the M-tile is empty
            const float t = fmul_rn(fmul_rn(p[i], sk[blk]), lds.sq[r][blk][grp][slot]);
            acc[mt][i] = blk == 0 ? t : fadd_rn(acc[mt][i], t);
          }
        }
      }
      finish_row(acc, r, n, beg, end);
    }
  }

  OPUS_DEV void score_piece(const Piece& p) {
    int t0, t1;
    stage_group<R>(*this, p, lds.rbeg, lds.rend, t0, t1);
    if (t0 >= t1) return;
    KeyRegs<M> cur, next;
    load_key(t0, cur);
    for (int tile = t0; tile < t1; ++tile) {
      if (tile + 1 < t1) load_key(tile + 1, next);  // in flight while this tile is scored
      score_tile(cur, tile);
      cur = next;
    }
  }
};

// The body of an arch's __global__: ON_TARGET is true in the device pass for the arch M is
// written for; any other gfx target traps (the launcher never routes there).
template <class M, int R, int H, int WAVES, bool ON_TARGET>
OPUS_DEV void kernel_body(const LaunchArgs& args) {
  static_assert(WAVES == Shape<M, R, H>::WAVES, "a wave a TN-key slice of the 64-key tile");
  if constexpr (ON_TARGET) {
    __shared__ Lds<M, R, H> lds;
    const SeqView sv = seq_view(args);
    Scorer<M, R, H> scorer(args, lds);
    for_each_piece<64, cta_range_scan>(args, sv, R, lds.range, scorer);
  } else {
    __builtin_trap();
  }
}

}  // namespace gfx9
}  // namespace opus
