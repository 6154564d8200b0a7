// sm_90 body: tensor cores through mma.sync, one exact block partial per 32-element scale
// block, then docs/numerics.md steps 2-5 on the CUDA cores in that order.
//
// Families (encode.h has the operand encodings):
//   f16  two m16n8k16 FP16 MMAs a block (HMMA.16816.F32, native on sm_90);
//   fp8  one m16n8k32 E4M3 MMA a block. sm_90 has no native FP8 mma.sync: ptxas lowers it to
//        F2FP conversions of both operands + two HMMA.16816 per MMA, every tile. Its key tile
//        is staged at a byte an element, and on the H200 it beat f16 on decode by 2-7%; f16
//        with multi-row tiles won prefill (docs/opus-backend.md has the measurement).
//   fold the f16 MMAs on operands that carry each block's scale relative to the largest of its
//        key / head ("folded"), on the key tiles where that is exact and the canonical sum
//        provably takes no rounding outside the normal range; then a cell costs 3 adds and
//        2 multiplies instead of 4 x (2 multiplies + add). Other tiles run the f16 path. The
//        proof that both give the canonical bits is docs/numerics.md's "Folded scales".
//
// A CTA scores a row group (R rows of one sequence, all H heads) against 64-key tiles. Keys
// sit on the MMA's M side (16 keys an m-tile; each warp owns MT m-tiles), columns on N (8 an
// n-tile). Each key tile is loaded once (the next one is in flight in registers while the
// current one is scored: its loads are issued first), converted to A fragments in shared memory, and serves every row of
// the group; the group's query operands (B fragments), scales and weights are converted once
// per group. Rows are scored one after another against the staged tile, so the accumulators
// hold H columns, not R*H.
//
// Column map, chosen so the head tree stays in registers except its last two levels: the C
// fragment gives thread (g, t) columns 2t, 2t+1 of each n-tile j of a row. Slot i = 2j + e
// (e = column parity) of thread t holds head 4i + t, so level 1 and the following levels pair
// slots of one thread, and the last two levels pair lanes t^2 and t^1 of a quad (shuffles).
#pragma once

#include "args.h"
#include "encode.h"
#include "port.h"
#include "drive.cuh"
#include "worksplit.h"

namespace opus {
namespace sm90 {

enum Family : int { kF16 = 0, kFp8 = 1, kFold = 2, kI8 = 3, kI8U = 4, kI8C = 5, kI8UC = 6, kI8W = 7 };  // kI8..kI8W: kernel_sm90_i8.cuh

// The fold family's tile rule (docs/numerics.md, "Folded scales"): scale bytes of a key's or a
// head's four blocks span at most kFoldSpread, so every folded operand is a normal FP16 number;
// a key's largest byte lies in [kFoldKeyLo, kFoldKeyHi] and a head's in [1, 254], so the
// rescaling multiplies stay normal; and over the tile's keys and the group's heads the sums of a
// key byte and a head byte lie in [kFoldPairLo, kFoldPairHi], so every canonical term and
// partial sum is zero or a normal float.
constexpr int kFoldSpread = 24;
constexpr int kFoldKeyLo = 51, kFoldKeyHi = 242;
constexpr int kFoldPairLo = 130, kFoldPairHi = 369;

// Both halves of an FP16 pair times one FP16 factor, one rounding each (exact when the results
// are normal).
OPUS_DEV uint32_t hmul2_rn(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
// FP16 2^e in both halves, e in [-14, 15].
OPUS_DEV uint32_t f16x2_pow2(int e) {
  const uint32_t h = uint32_t(e + 15) << 10;
  return h | (h << 16);
}
// Both halves of an FP16 pair times 2^e, e in [-28, 0], as two normal factors (exact when the
// results are normal).
OPUS_DEV uint32_t f16x2_ldexp(uint32_t w, int e) {
  return hmul2_rn(hmul2_rn(w, f16x2_pow2(e / 2)), f16x2_pow2(e - e / 2));
}
OPUS_DEV int byte_min4(uint32_t b) {
  return imin(imin(int(b & 0xFFu), int(b >> 8 & 0xFFu)), imin(int(b >> 16 & 0xFFu), int(b >> 24)));
}
OPUS_DEV int byte_max4(uint32_t b) {
  return imax(imax(int(b & 0xFFu), int(b >> 8 & 0xFFu)), imax(int(b >> 16 & 0xFFu), int(b >> 24)));
}

template <int FAMILY>
struct Mma;

template <>
struct Mma<kF16> {
  static constexpr int kPerBlock = 2;  // m16n8k16 MMAs a 32-element block
  static OPUS_DEV void key_word(uint32_t x, uint32_t (&o)[4]) { f16_key_word(x, o); }
  static OPUS_DEV void query_word(uint32_t x, uint32_t (&o)[4]) { f16_query_word(x, o); }
  // d (+)= A(16 x 16) * B(16 x 8); `first` starts from zero
  static OPUS_DEV void run(float (&d)[4], const uint32_t* a, const uint32_t* b, bool first) {
    if (first) {
      asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
          "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"
          : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.0f));
    } else {
      asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
          "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
};

template <>
struct Mma<kFold> : Mma<kF16> {};  // fold tiles and the canonical fallback both run the f16 MMA

template <>
struct Mma<kFp8> {
  static constexpr int kPerBlock = 1;  // one m16n8k32 a block
  static OPUS_DEV void key_word(uint32_t x, uint32_t (&o)[2]) { e4m3_key_word(x, o); }
  static OPUS_DEV void query_word(uint32_t x, uint32_t (&o)[2]) { e4m3_query_word(x, o); }
  static OPUS_DEV void run(float (&d)[4], const uint32_t* a, const uint32_t* b, bool) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.0f));
  }
};

template <int FAMILY, int R, int H, int WARPS>
struct Shape {
  static constexpr int MMAS = Mma<FAMILY>::kPerBlock;
  static constexpr int AREGS = 4 * MMAS;          // A registers a block an m-tile
  static constexpr int BREGS = 2 * MMAS;          // B registers a block an n-tile
  static constexpr int NT = H / 8;                // n-tiles of one row
  static constexpr int HQ = H / 4;                // head slots of one row in one thread
  static constexpr int THREADS = WARPS * 32;
  static constexpr int KM = kBlockN / 16;         // m-tiles a key tile
  static constexpr int MT = KM / WARPS;           // m-tiles a warp
  // words of one scale block of a staged tile: [m-tile][register][lane], +1 so that the
  // producers' stores (8 keys x 4 blocks a warp) hit 32 different banks
  static constexpr int A_WORDS = KM * AREGS * 32 + 1;
  static constexpr int CHUNKS = kBlockN * kScaleBlocks / THREADS;  // 16-byte loads a thread a tile
  static_assert(H % 16 == 0 && H <= 128, "heads: 16, 32, 64 or 128");
  static_assert(R * H <= 256, "rows x heads <= 256: the group's query operands fit shared memory");
  static_assert(KM % WARPS == 0 && MT >= 1, "warps must split the 4 m-tiles of a key tile");
  static_assert(kBlockN * kScaleBlocks % THREADS == 0, "whole chunks per thread");
};

// The fold family's part of shared memory (empty for the others).
template <int FAMILY, int R, int H, int WARPS>
struct FoldSmem {};
template <int R, int H, int WARPS>
struct FoldSmem<kFold, R, H, WARPS> {
  using S = Shape<kFold, R, H, WARPS>;
  float2 qb[R][S::NT][4];                  // 2^(qmax_h - 127) of columns 2t, 2t+1
  float2 uq[R][kScaleBlocks][S::NT][4];    // 2^(qmax_h - eq_b): undoes the fold on fallback tiles
  int qext[WARPS][3];                      // per warp: least and largest byte, all heads fold
};

// Dynamic shared memory of one CTA (its size is smem_bytes() below).
template <int FAMILY, int R, int H, int WARPS>
struct Smem {
  using S = Shape<FAMILY, R, H, WARPS>;
  uint32_t a[2][kScaleBlocks * S::A_WORDS];             // staged key operand, two stages
  float4 sk[2][kBlockN];                                // key scales, [key][block]
  alignas(16) uint32_t qf[R * kScaleBlocks * S::NT * 32 * S::BREGS];  // query operand (qf_at() has the layout)
  float2 sq[R][kScaleBlocks][S::NT][4];                 // query scales of columns 2t, 2t+1
  float w[R][4][S::HQ + 1];                             // weights, [row][t][slot] (+1: no bank conflict)
  long long obase[R];                                   // out offset of each row
  int rbeg[R], rend[R];                                 // keys [rbeg, rend) each row stores (empty: a dead row)
  int range[4];                                         // Free mode: the CTA's unit range
  FoldSmem<FAMILY, R, H, WARPS> fold;
};

template <int FAMILY, int R, int H, int WARPS>
constexpr int smem_bytes() { return int(sizeof(Smem<FAMILY, R, H, WARPS>)); }

template <int CHUNKS>
struct TileRegs {  // one thread's share of the next key tile, between its load and its store
  uint4 data[CHUNKS];
  uint32_t scale[CHUNKS];
  int kmax[CHUNKS];  // fold: the largest scale byte of the chunk's key
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

template <int FAMILY, int R, int H, int WARPS>
struct Scorer {
  using S = Shape<FAMILY, R, H, WARPS>;
  using Sm = Smem<FAMILY, R, H, WARPS>;
  using M = Mma<FAMILY>;
  static constexpr bool FOLD = FAMILY == kFold;
  // The query operand's word (row r, block blk, n-tile j, lane l, register k). fold keeps a
  // lane's registers together (one 16-byte load; folded in place when the group folds); the
  // other families keep [register][lane] (the vector layout cost them registers and spills).
  static constexpr bool LANE_MAJOR_B = FOLD;
  OPUS_DEV static int qf_at(int r, int blk, int j, int l, int k) {
    const int base = ((r * kScaleBlocks + blk) * S::NT + j) * 32 * S::BREGS;
    return base + (LANE_MAJOR_B ? l * S::BREGS + k : k * 32 + l);
  }

  const LaunchArgs& args;
  Sm& sm;
  int tid, lane, warp, g, tq;
  int r0, r1, gbeg, gend;
  const int32_t* bt_row;

  OPUS_DEV Scorer(const LaunchArgs& a, Sm& s) : args(a), sm(s) {
    tid = threadIdx.x;
    lane = tid & 31;
    warp = tid >> 5;
    g = lane >> 2;
    tq = lane & 3;
  }

  // Query operands, scales, weights and row bounds of rows [r0, r1) into shared memory.
  OPUS_DEV void setup_group() {
#pragma unroll 1  // setup runs once a group: keep its registers out of the peak
    for (int idx = tid; idx < R * kScaleBlocks * S::NT * 32; idx += S::THREADS) {
      const int l = idx & 31, j = (idx >> 5) % S::NT, blk = (idx / (32 * S::NT)) % kScaleBlocks;
      const int r = idx / (32 * S::NT * kScaleBlocks);
      const int n = l >> 2;                           // this lane supplies column n of n-tile j
      const int h = 4 * (2 * j + (n & 1)) + (n >> 1);  // slot 2j + e, lane-in-quad n / 2
      const int row = r0 + r;
      uint32_t word = 0u;
      if (row < r1)
        word = *reinterpret_cast<const uint32_t*>(args.q + ((long long)row * H + h) * kHeadBytes +
                                                  blk * 16 + (l & 3) * 4);
      uint32_t o[S::BREGS];
      M::query_word(word, o);
#pragma unroll
      for (int k = 0; k < S::BREGS; ++k) sm.qf[qf_at(r, blk, j, l, k)] = o[k];
    }
#pragma unroll 1  // setup runs once a group: keep its registers out of the peak
    for (int idx = tid; idx < R * kScaleBlocks * S::NT * 4; idx += S::THREADS) {
      const int t = idx & 3, j = (idx >> 2) % S::NT, blk = (idx / (4 * S::NT)) % kScaleBlocks;
      const int r = idx / (4 * S::NT * kScaleBlocks);
      const int row = r0 + r;
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int h = 4 * (2 * j + e) + t;
        const uint32_t byte = row < r1 ? args.q_scale[((long long)row * H + h) * kScaleBlocks + blk] : 127u;
        v[e] = e8m0_to_f32(byte);
      }
      sm.sq[r][blk][j][t] = make_float2(v[0], v[1]);
    }
#pragma unroll 1  // setup runs once a group: keep its registers out of the peak
    for (int idx = tid; idx < R * 4 * S::HQ; idx += S::THREADS) {
      const int slot = idx % S::HQ, t = (idx / S::HQ) & 3, r = idx / (4 * S::HQ);
      const int row = r0 + r, h = 4 * slot + t;
      sm.w[r][t][slot] = row < r1 ? head_weight(args, row, h) : 0.0f;
    }
    if (tid < R) row_window(args, r0 + tid, r0 + tid < r1, sm.rbeg[tid], sm.rend[tid], sm.obase[tid]);
    if constexpr (FOLD) setup_fold();
  }

  // The group's scale bytes of (row, head), four blocks in one word (dead rows: 127s).
  OPUS_DEV uint32_t q_scale_word(int row, int h) const {
    return row < r1 ? query_scales<H>(args, row, h) : 0x7F7F7F7Fu;
  }

  // Fold: each head's 2^(qmax_h - 127), the group's byte range and fold verdict (every head's
  // bytes span at most kFoldSpread and its largest lies in [1, 254]); then, when the group folds,
  // the query operand in place as query * 2^13 * 2^(eq_b - qmax_h) (normal FP16) and the factors
  // 2^(qmax_h - eq_b) that give fallback tiles the canonical partials back (exact).
  OPUS_DEV void setup_fold() {
    int lo = 255, hi = 0, ok = 1;
#pragma unroll 1
    for (int idx = tid; idx < R * H; idx += S::THREADS) {
      const int r = idx / H, h = idx % H;
      const uint32_t bytes = q_scale_word(r0 + r, h);
      const int mn = byte_min4(bytes), mx = byte_max4(bytes);
      lo = imin(lo, mn);
      hi = imax(hi, mx);
      ok &= int(mx - mn <= kFoldSpread && mx >= 1 && mx <= 254);
      const int slot = h >> 2;
      reinterpret_cast<float*>(&sm.fold.qb[r][slot >> 1][h & 3])[slot & 1] = __uint_as_float(uint32_t(imax(mx, 1)) << 23);
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
      lo = imin(lo, warp_xor(lo, m));
      hi = imax(hi, warp_xor(hi, m));
      ok &= warp_xor(ok, m);
    }
    if (lane == 0) {
      sm.fold.qext[warp][0] = lo;
      sm.fold.qext[warp][1] = hi;
      sm.fold.qext[warp][2] = ok;
    }
    __syncthreads();  // uniform: setup_group runs in every thread
    if (!fold_group().ok) return;
#pragma unroll 1
    for (int idx = tid; idx < R * kScaleBlocks * S::NT * 32; idx += S::THREADS) {
      const int l = idx & 31, j = (idx >> 5) % S::NT, blk = (idx / (32 * S::NT)) % kScaleBlocks;
      const int r = idx / (32 * S::NT * kScaleBlocks);
      const int n = l >> 2;
      const int h = 4 * (2 * j + (n & 1)) + (n >> 1);
      const uint32_t bytes = q_scale_word(r0 + r, h);
      const int d = int(bytes >> (8 * blk) & 0xFFu) - byte_max4(bytes);  // [-kFoldSpread, 0]
#pragma unroll
      for (int k = 0; k < S::BREGS; ++k)  // this thread wrote these words in setup_group's first loop
        sm.qf[qf_at(r, blk, j, l, k)] = f16x2_ldexp(sm.qf[qf_at(r, blk, j, l, k)], d);
    }
#pragma unroll 1
    for (int idx = tid; idx < R * kScaleBlocks * S::NT * 4; idx += S::THREADS) {
      const int t = idx & 3, j = (idx >> 2) % S::NT, blk = (idx / (4 * S::NT)) % kScaleBlocks;
      const int r = idx / (4 * S::NT * kScaleBlocks);
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const uint32_t bytes = q_scale_word(r0 + r, 4 * (2 * j + e) + t);
        v[e] = __uint_as_float(uint32_t(127 + byte_max4(bytes) - int(bytes >> (8 * blk) & 0xFFu)) << 23);
      }
      sm.fold.uq[r][blk][j][t] = make_float2(v[0], v[1]);
    }
  }

  // Fold: the group's query byte range and verdict, from the per-warp slots (after the barrier
  // in setup_fold; read again where needed rather than held in registers for the whole piece).
  struct FoldGroup {
    int lo, hi;
    bool ok;
  };
  OPUS_DEV FoldGroup fold_group() const {
    FoldGroup fg{255, 0, true};
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      fg.lo = imin(fg.lo, sm.fold.qext[w][0]);
      fg.hi = imax(fg.hi, sm.fold.qext[w][1]);
      fg.ok = fg.ok && sm.fold.qext[w][2] != 0;
    }
    return fg;
  }

  // Fold: whether the next tile (in regs) folds, the same answer in every thread (a barrier).
  // The four chunks of a key sit in lanes 4i..4i+3, so the key's byte range is a quad reduction.
  OPUS_DEV bool fold_tile(TileRegs<S::CHUNKS>& regs) const {
    const FoldGroup q = fold_group();
    int ok = q.ok;
#pragma unroll
    for (int i = 0; i < S::CHUNKS; ++i) {
      int mn = int(regs.scale[i]), mx = mn;
      mn = imin(mn, warp_xor(mn, 1));
      mx = imax(mx, warp_xor(mx, 1));
      mn = imin(mn, warp_xor(mn, 2));
      mx = imax(mx, warp_xor(mx, 2));
      regs.kmax[i] = mx;
      ok &= int(mx - mn <= kFoldSpread && mx >= kFoldKeyLo && mx <= kFoldKeyHi &&
                mn + q.lo >= kFoldPairLo && mx + q.hi <= kFoldPairHi);
    }
    return __syncthreads_or(!ok) == 0;
  }

  // Global -> registers: chunk c = tid + THREADS*i is (key c/4, scale block c%4), 16 bytes.
  OPUS_DEV void load_tile(int tile, TileRegs<S::CHUNKS>& regs) const {
#pragma unroll
    for (int i = 0; i < S::CHUNKS; ++i) {
      const int c = tid + S::THREADS * i, key = c >> 2, blk = c & 3;
      const int n = tile * kBlockN + key;
      uint4 d = make_uint4(0u, 0u, 0u, 0u);
      uint32_t sc = 127u;  // keys outside the group's windows: finite, never stored
      if (n >= gbeg && n < gend) {
        const long long slot = key_slot(args, bt_row, n);
        if (slot >= 0) {
          d = *reinterpret_cast<const uint4*>(args.kv + slot * kHeadBytes + blk * 16);
          sc = args.kv_scale[slot * kScaleBlocks + blk];
        } else {
          sc = 255u;  // a table entry outside the cache: the key scores NaN, nothing is read
        }
      }
      regs.data[i] = d;
      regs.scale[i] = sc;
    }
  }

  // Registers -> stage `st` as A fragments. Key (m-tile mt, row rr of 16) belongs to lane
  // (rr % 8) * 4 + t for word t of each block; MMA k of the block takes registers
  // 4k + (rr / 8) [first k half] and 4k + 2 + (rr / 8) [second k half].
  // FOLDED (fold family): the key operand is key * 2^11 * 2^(ek_b - kmax) -- the f16 encoding
  // (key * 2^-13, normal) times 2^12 and then 2^(12 + ek_b - kmax), each product exact and
  // normal -- and sk.x holds the key's 2^(kmax - 151) (the 2^-24 undoes the operands' 2^11 * 2^13);
  // otherwise sk holds the four block scales.
  template <bool FOLDED>
  OPUS_DEV void store_tile(const TileRegs<S::CHUNKS>& regs, int st) {
#pragma unroll
    for (int i = 0; i < S::CHUNKS; ++i) {
      const int c = tid + S::THREADS * i, key = c >> 2, blk = c & 3;
      const int mt = key >> 4, rr = key & 15, up = rr >> 3;
      uint32_t* dst = sm.a[st] + blk * S::A_WORDS + mt * (S::AREGS * 32) + (rr & 7) * 4;
      const uint32_t w4[4] = {regs.data[i].x, regs.data[i].y, regs.data[i].z, regs.data[i].w};
      const uint32_t shift = FOLDED ? f16x2_pow2(12 + int(regs.scale[i]) - regs.kmax[i]) : 0u;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        uint32_t o[S::BREGS];
        M::key_word(w4[t], o);
        if constexpr (FOLDED) {
#pragma unroll
          for (int k = 0; k < S::BREGS; ++k) o[k] = hmul2_rn(hmul2_rn(o[k], f16x2_pow2(12)), shift);
        }
#pragma unroll
        for (int k = 0; k < S::MMAS; ++k) {
          dst[(4 * k + up) * 32 + t] = o[2 * k];
          dst[(4 * k + 2 + up) * 32 + t] = o[2 * k + 1];
        }
      }
      if constexpr (FOLDED) {
        if (blk == 0) sm.sk[st][key].x = __uint_as_float(uint32_t(regs.kmax[i] - 24) << 23);
      } else {
        reinterpret_cast<float*>(&sm.sk[st][key])[blk] = e8m0_to_f32(regs.scale[i]);
      }
    }
  }

  // Stage the next tile: folded when it folds (fold family), else canonical. Returns the choice.
  OPUS_DEV bool stage_tile(TileRegs<S::CHUNKS>& regs, int st) {
    if constexpr (FOLD) {
      if (fold_tile(regs)) {
        store_tile<true>(regs, st);
        return true;
      }
    }
    store_tile<false>(regs, st);
    return false;
  }

  // The lane's B registers of (row r, block blk, n-tile j).
  OPUS_DEV void load_b(int r, int blk, int j, uint32_t (&bq)[S::BREGS]) const {
    if constexpr (LANE_MAJOR_B && S::BREGS == 4) {
      const uint4 v = *reinterpret_cast<const uint4*>(&sm.qf[qf_at(r, blk, j, lane, 0)]);
      bq[0] = v.x; bq[1] = v.y; bq[2] = v.z; bq[3] = v.w;
    } else {
#pragma unroll
      for (int k = 0; k < S::BREGS; ++k) bq[k] = sm.qf[qf_at(r, blk, j, lane, k)];
    }
  }

  // Steps 1-3 for row r, block blk: acc = (P * sk) * sq (FIRST) or acc + (P * sk) * sq.
  // UNFOLD (fold family, a folding group on a fallback tile): the MMA gives P * 2^(eq_b - qmax_h),
  // and one exact multiply by uq gives P back before the canonical terms.
  template <bool FIRST, bool UNFOLD>
  OPUS_DEV void block_terms(int st, int r, int blk, float (&acc)[S::MT][S::NT][4]) const {
    uint32_t af[S::MT][S::AREGS];
    float k_lo[S::MT], k_hi[S::MT];
#pragma unroll
    for (int m = 0; m < S::MT; ++m) {
      const int mt = warp * S::MT + m;
#pragma unroll
      for (int reg = 0; reg < S::AREGS; ++reg)
        af[m][reg] = sm.a[st][blk * S::A_WORDS + (mt * S::AREGS + reg) * 32 + lane];
      k_lo[m] = reinterpret_cast<const float*>(&sm.sk[st][mt * 16 + g])[blk];
      k_hi[m] = reinterpret_cast<const float*>(&sm.sk[st][mt * 16 + 8 + g])[blk];
    }
#pragma unroll
    for (int j = 0; j < S::NT; ++j) {
      uint32_t bq[S::BREGS];
      load_b(r, blk, j, bq);
      const float2 qs = sm.sq[r][blk][j][tq];
      float2 uq = make_float2(1.0f, 1.0f);
      if constexpr (UNFOLD) uq = sm.fold.uq[r][blk][j][tq];
#pragma unroll
      for (int m = 0; m < S::MT; ++m) {
        float p[4];
#pragma unroll
        for (int k = 0; k < S::MMAS; ++k) M::run(p, &af[m][4 * k], &bq[2 * k], k == 0);
        if constexpr (UNFOLD) {
          p[0] = fmul_rn(p[0], uq.x);
          p[1] = fmul_rn(p[1], uq.y);
          p[2] = fmul_rn(p[2], uq.x);
          p[3] = fmul_rn(p[3], uq.y);
        }
        const float tv[4] = {fmul_rn(fmul_rn(p[0], k_lo[m]), qs.x), fmul_rn(fmul_rn(p[1], k_lo[m]), qs.y),
                             fmul_rn(fmul_rn(p[2], k_hi[m]), qs.x), fmul_rn(fmul_rn(p[3], k_hi[m]), qs.y)};
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[m][j][k] = FIRST ? tv[k] : fadd_rn(acc[m][j][k], tv[k]);
      }
    }
  }

  template <bool UNFOLD>
  OPUS_DEV void block_sums(int st, int r, float (&acc)[S::MT][S::NT][4]) const {
    block_terms<true, UNFOLD>(st, r, 0, acc);
#pragma unroll 1
    for (int blk = 1; blk < kScaleBlocks; ++blk) block_terms<false, UNFOLD>(st, r, blk, acc);  // left to right
  }

  // Fold: S' = ((P'_0 + P'_1) + P'_2) + P'_3 of the folded partials, then s = (S' * A_key) * B_head:
  // the canonical s bit for bit on a folding tile (docs/numerics.md, "Folded scales").
  template <bool FIRST>
  OPUS_DEV void fold_terms(int st, int r, int blk, float (&acc)[S::MT][S::NT][4]) const {
    uint32_t af[S::MT][S::AREGS];
#pragma unroll
    for (int m = 0; m < S::MT; ++m) {
      const int mt = warp * S::MT + m;
#pragma unroll
      for (int reg = 0; reg < S::AREGS; ++reg)
        af[m][reg] = sm.a[st][blk * S::A_WORDS + (mt * S::AREGS + reg) * 32 + lane];
    }
#pragma unroll
    for (int j = 0; j < S::NT; ++j) {
      uint32_t bq[S::BREGS];
      load_b(r, blk, j, bq);
#pragma unroll
      for (int m = 0; m < S::MT; ++m) {
        float p[4];
#pragma unroll
        for (int k = 0; k < S::MMAS; ++k) M::run(p, &af[m][4 * k], &bq[2 * k], k == 0);
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[m][j][k] = FIRST ? p[k] : fadd_rn(acc[m][j][k], p[k]);
      }
    }
  }

  OPUS_DEV void fold_sums(int st, int r, float (&acc)[S::MT][S::NT][4]) const {
    fold_terms<true>(st, r, 0, acc);
#pragma unroll 1
    for (int blk = 1; blk < kScaleBlocks; ++blk) fold_terms<false>(st, r, blk, acc);  // left to right
#pragma unroll
    for (int m = 0; m < S::MT; ++m) {
      const int mt = warp * S::MT + m;
      const float a_lo = sm.sk[st][mt * 16 + g].x, a_hi = sm.sk[st][mt * 16 + 8 + g].x;
#pragma unroll
      for (int j = 0; j < S::NT; ++j) {
        const float2 b = sm.fold.qb[r][j][tq];
        acc[m][j][0] = fmul_rn(fmul_rn(acc[m][j][0], a_lo), b.x);
        acc[m][j][1] = fmul_rn(fmul_rn(acc[m][j][1], a_lo), b.y);
        acc[m][j][2] = fmul_rn(fmul_rn(acc[m][j][2], a_hi), b.x);
        acc[m][j][3] = fmul_rn(fmul_rn(acc[m][j][3], a_hi), b.y);
      }
    }
  }

  // Steps 4-5 for one key row (kr: g or g + 8) of m-tile m: relu, the halving head tree.
  OPUS_DEV float head_sum(const float (&acc)[S::MT][S::NT][4], int m, int kr, int r) const {
    float v[S::HQ / 2];
#pragma unroll
    for (int i = 0; i < S::HQ / 2; ++i) {  // level 1: fma(x_j, w_j, x_{j+H/2} * w_{j+H/2})
      const int sa = i, sb = i + S::HQ / 2;
      const float xa = relu_nan(acc[m][sa >> 1][2 * kr + (sa & 1)]);
      const float xb = relu_nan(acc[m][sb >> 1][2 * kr + (sb & 1)]);
      v[i] = fma_rn(xa, sm.w[r][tq][sa], fmul_rn(xb, sm.w[r][tq][sb]));
    }
    halve<S::HQ / 2>(v);
    float x = fadd_rn(v[0], warp_xor(v[0], 2));  // heads h and h + 2
    return fadd_rn(x, warp_xor(x, 1));            // heads h and h + 1
  }

  OPUS_DEV void score_tile(int st, int tile, bool folded) const {
#pragma unroll 1
    for (int r = 0; r < R; ++r) {
      const int beg = sm.rbeg[r], end = sm.rend[r];
      if (tile * kBlockN >= end || (tile + 1) * kBlockN <= beg) continue;  // uniform: every thread reads the same values
      const long long base = sm.obase[r];
      float acc[S::MT][S::NT][4];
      if constexpr (FOLD) {
        if (folded)
          fold_sums(st, r, acc);
        else if (fold_group().ok)
          block_sums<true>(st, r, acc);
        else
          block_sums<false>(st, r, acc);
      } else {
        block_sums<false>(st, r, acc);
      }
#pragma unroll
      for (int m = 0; m < S::MT; ++m) {
#pragma unroll
        for (int kr = 0; kr < 2; ++kr) {
          const float val = head_sum(acc, m, kr, r);
          const int n = tile * kBlockN + (warp * S::MT + m) * 16 + kr * 8 + g;
          if (tq == ((kr + r) & 3) && n >= beg && n < end) store_out(args, base + n, val);
        }
      }
    }
  }

  OPUS_DEV void score_piece(const Piece& p) {
    int t0, t1;
    stage_group<R>(*this, p, sm.rbeg, sm.rend, t0, t1);
    if (t0 >= t1) return;
    TileRegs<S::CHUNKS> regs;
    load_tile(t0, regs);
    bool folded = stage_tile(regs, 0);
    __syncthreads();
    for (int tile = t0; tile < t1; ++tile) {
      const int st = (tile - t0) & 1;
      const bool more = tile + 1 < t1;
      // The next tile's loads are issued before this tile is scored, so their latency hides
      // behind the scoring (issued after it, every tile waited a full DRAM round trip: the
      // compiler may not move loads above the `out` stores, which could alias).
      if (more) load_tile(tile + 1, regs);
      score_tile(st, tile, folded);
      bool next = false;
      if (more) next = stage_tile(regs, st ^ 1);
      __syncthreads();
      folded = next;
    }
  }
};

template <int FAMILY, int R, int H, int WARPS, int MIN_CTAS>
__global__ void __launch_bounds__(WARPS * 32, MIN_CTAS) mqa_logits_sm90(const LaunchArgs args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<Smem<FAMILY, R, H, WARPS>*>(smem_raw);
  const SeqView sv = seq_view(args);
  Scorer<FAMILY, R, H, WARPS> scorer(args, sm);
  for_each_piece<32, cta_range_scan>(args, sv, R, sm.range, scorer);
#else
  __trap();  // built for another arch: the launcher never routes here
#endif
}

}  // namespace sm90
}  // namespace opus
