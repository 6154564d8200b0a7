// The schedule-mode driver every kernel body shares (device code only): find this program's
// work -- Prefill: its row chunk and part; Table: its record; Free: the unit range that the
// first LANES threads compute with RANGE and share through `range` in shared memory -- then hand
// each non-empty piece to the scorer. The rules themselves are worksplit.h's.
#pragma once

#include "args.h"
#include "worksplit.h"

namespace opus {

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
