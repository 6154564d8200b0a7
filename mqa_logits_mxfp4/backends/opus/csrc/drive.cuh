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

// Keys row `row` stores (0 for a dead row) and the out offset of its key 0: the window is cut
// at the out width (2-D out) or kept inside [0, out_numel) (flat out with offsets).
OPUS_DEV void row_window(const LaunchArgs& args, int row, bool live, int& end, long long& base) {
  int e = 0;
  long long b = 0;
  if (live) {
    e = imin(imax(args.row_ends[row], 0), args.key_cap);
    if (args.out_offsets != nullptr) {
      b = args.out_offsets[row];
      const long long room = args.out_numel - b;
      e = (b < 0 || room <= 0) ? 0 : (room < e ? (int)room : e);
    } else {
      b = (long long)row * args.stride_out;
      e = imin(e, args.out_cols);
    }
  }
  end = e;
  base = b;
}

// Weight of (row, head) as fp32 (bf16 or fp32 weights).
OPUS_DEV float head_weight(const LaunchArgs& args, int row, int h) {
  const long long off = (long long)row * args.stride_w + h;
  return args.weights_bf16 ? bf16_to_f32(reinterpret_cast<const uint16_t*>(args.weights)[off])
                           : reinterpret_cast<const float*>(args.weights)[off];
}

// Start piece p: its rows and block-table row into the scorer, the scorer's setup_group()
// (the group's operands into shared memory), then the group's last key tile: the tiles a
// piece scores end there (later tiles store nothing).
template <int R, class Scorer>
OPUS_DEV int stage_group(Scorer& s, const Piece& p, const int* rend) {
  __syncthreads();  // the previous piece is done with shared memory
  s.r0 = p.r0;
  s.r1 = p.r1;
  s.bt_row = s.args.block_tables + (long long)(s.args.gather ? p.r0 : p.b) * s.args.stride_bt;
  s.setup_group();
  __syncthreads();
  s.gend = 0;
#pragma unroll
  for (int r = 0; r < R; ++r) s.gend = imax(s.gend, rend[r]);
  return imin(p.t1, cdiv_nonneg(s.gend, kBlockN));
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
