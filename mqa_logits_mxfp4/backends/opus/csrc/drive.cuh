// The schedule-mode driver every kernel body shares (device code only): find this program's
// work -- Prefill: its row chunk and part; Table: its record; Free: the unit range that the
// first LANES threads compute with RANGE and share through `range` in shared memory -- then hand
// each non-empty piece to the scorer. The rules themselves are worksplit.h's. Also the
// per-row pieces of a group's setup that every body reads the same way.
#pragma once

#include "args.h"
#include "port.h"
#include "worksplit.h"

namespace opus {

// Free mode: the CTA's unit range, by its first warp / wave (a scan over the sequences).
OPUS_DEV CtaRange cta_range_scan(const SeqView& sv, int rows, int pid, int nprog, int lane) {
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
    if (carry > cr.u_begin) break;  // every later cumulative count is past u_begin
  }
  return cr;
}

// The keys [beg, end) row `row` stores (empty for a dead row) and the out offset of its key 0:
// the window starts at row_starts (clamped into [0, the row's end]) and is cut at the out width
// (2-D out) or kept inside [0, out_numel) (flat out with offsets). row_window_in: from given
// row ends / starts and key cap (the union body's rows' own windows); row_window: the launch's.
OPUS_DEV void row_window_in(const LaunchArgs& args, const int32_t* ends, const int32_t* starts, int cap, int row,
                            bool live, int& beg, int& end, long long& base) {
  int e = 0, s = 0;
  long long b = 0;
  if (live) {
    e = imin(imax(ends[row], 0), cap);
    if (starts != nullptr) s = imin(imax(starts[row], 0), e);
    if (args.out_offsets != nullptr) {
      b = args.out_offsets[row];
      const long long room = args.out_numel - b;
      e = (b < 0 || room <= 0) ? 0 : (room < e ? (int)room : e);
    } else {
      b = (long long)row * args.stride_out;
      e = imin(e, args.out_cols);
    }
  }
  beg = s;
  end = e;
  base = b;
}
OPUS_DEV void row_window(const LaunchArgs& args, int row, bool live, int& beg, int& end, long long& base) {
  row_window_in(args, args.row_ends, args.row_starts, args.key_cap, row, live, beg, end, base);
}

// A float32 result in the narrow out's format (bfloat16 / float16), rounded once.
OPUS_DEV uint16_t narrow_out(const LaunchArgs& args, float v) {
  return args.out_kind == kOutBF16 ? f32_to_bf16_rn(v) : f32_to_f16_rn(v);
}
// Key n of the out row at `row` (a byte address): the float32 value, or (NARROW) its narrow form.
// Bodies that choose the narrow out at compile time (the i8 consumers) store through this with
// their NARROW and kOutBytes; the others through store_out.
template <bool NARROW>
constexpr long long kOutBytes = NARROW ? 2 : 4;
template <bool NARROW>
OPUS_DEV void store_key(const LaunchArgs& args, char* row, int n, float v) {
  if constexpr (NARROW)
    reinterpret_cast<uint16_t*>(row)[n] = narrow_out(args, v);
  else
    reinterpret_cast<float*>(row)[n] = v;
}
// Element idx of out (a row's base plus its key), its kind read at run time.
OPUS_DEV void store_out(const LaunchArgs& args, long long idx, float v) {
  if (args.out_kind == kOutF32)
    static_cast<float*>(args.out)[idx] = v;
  else
    static_cast<uint16_t*>(args.out)[idx] = narrow_out(args, v);
}

// The four block-scale bytes of (row, head): q_scale is [rows, H, 4], contiguous.
template <int H>
OPUS_DEV uint32_t query_scales(const LaunchArgs& args, int row, int h) {
  return *reinterpret_cast<const uint32_t*>(args.q_scale + ((long long)row * H + h) * kScaleBlocks);
}

// Weight of (row, head) as fp32 (bf16 or fp32 weights).
OPUS_DEV float head_weight(const LaunchArgs& args, int row, int h) {
  const long long off = (long long)row * args.stride_w + h;
  return args.weights_bf16 ? bf16_to_f32(reinterpret_cast<const uint16_t*>(args.weights)[off])
                           : reinterpret_cast<const float*>(args.weights)[off];
}

// Start piece p: its rows and block-table row into the scorer, the scorer's setup_group()
// (the group's operands into shared memory), then the group's key range [gbeg, gend) (the rows'
// smallest window start, largest end) and the tiles [t_lo, t_hi) of the piece that hold keys of
// it (the others store nothing). Dead rows have empty windows at key 0: they do not lower gbeg.
template <int R, class Scorer>
OPUS_DEV void stage_group(Scorer& s, const Piece& p, const int* rbeg, const int* rend, int& t_lo, int& t_hi) {
  __syncthreads();  // the previous piece is done with shared memory
  s.r0 = p.r0;
  s.r1 = p.r1;
  s.bt_row = s.args.block_tables + (long long)(s.args.gather ? p.r0 : p.b) * s.args.stride_bt;
  s.setup_group();
  __syncthreads();
  s.gbeg = 0x7FFFFFFF;
  s.gend = 0;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (p.r0 + r < p.r1) s.gbeg = imin(s.gbeg, rbeg[r]);
    s.gend = imax(s.gend, rend[r]);
  }
  t_lo = imax(p.t0, s.gbeg / kBlockN);
  t_hi = imin(p.t1, cdiv_nonneg(s.gend, kBlockN));
}

template <int LANES, CtaRange (*RANGE)(const SeqView&, int, int, int, int), class Scorer>
OPUS_DEV void for_each_piece(const LaunchArgs& args, const SeqView& sv, int rows, int* range,
                             Scorer& scorer) {
  FreeIter fi{0, 0, 0, 0};
  PrefillIter pi{(int)blockIdx.y, args.parts};
  const bool prefill = args.mode == kModePrefill;
  if (prefill) {
    pi.init(sv, rows, blockIdx.x);
  } else if (args.mode == kModeTable) {
    const int32_t* rec = args.records + (long long)blockIdx.x * kRecordInts;
    fi.u = rec[0];
    fi.u_end = rec[1];
    fi.b = rec[2];
    fi.base = rec[3];
  } else {
    if (threadIdx.x < LANES) {
      const CtaRange cr = RANGE(sv, rows, blockIdx.x, gridDim.x, threadIdx.x);
      if (threadIdx.x == 0) {
        range[0] = cr.u_begin;
        range[1] = cr.u_end;
        range[2] = cr.b;
        range[3] = cr.base;
      }
    }
    __syncthreads();
    fi.u = range[0];
    fi.u_end = range[1];
    fi.b = range[2];
    fi.base = range[3];
  }
  Piece p;
  while (prefill ? pi.next(sv, p) : fi.next(sv, rows, p)) {
    if (p.r1 > p.r0 && p.t1 > p.t0) scorer.score_piece(p);
  }
}

}  // namespace opus
