// The work split of every schedule mode: which (row group, key tiles) pieces a program scores.
//
// The same rules as backends/triton/kernels.py and their plain-Python statement
// worksplit/rules.py: sequence b has ceil(rows_b / R) groups of up to R rows, each with the
// tiles [lo_b, ceil(end_b / 64)) (end_b: the row_end of its last row; lo_b: the row_start of its
// first row / 64, 0 without row_starts); a group with span > 0 tiles holds kPieceCost units for
// its set-up, then one unit a tile, numbered sequence-major, group-major (a piece costs its
// set-up whatever its length, so the split charges it). A Table/Free program takes units
// [u_begin, u_end) and walks them from sequence b with `base` units before it; Prefill program
// (group, part) takes global rows [group*R, group*R + R), split at sequence starts, and the
// part-th of `parts` equal cuts of each piece's tiles [start(r0) / 64, ceil(end(r1 - 1) / 64)).
// Pieces carry the sequence's own tile numbers.
//
// Host-and-device code: tests/opus_host_check.cpp runs it with g++ against worksplit/rules.py.
// Every read of query_start_loc is clamped into [0, num_rows], of row_ends into [0, key_cap]
// and of row_starts into [0, the end it starts] (the device-side guards, worksplit/rules.py's
// seq_start / row_end / row_start: a
// caller-contract violation can waste work but never index outside the row tensors or past
// the keys a launch may score).
#pragma once

#include <stdint.h>

#include "args.h"
#include "hd.h"

namespace opus {

// Key n of a sequence -> its cache slot, through the block-table row `bt_row`:
// page = bt_row[n / (page_size * ppb)] * ppb + (n / page_size) % ppb; -1 when that page is
// outside the cache (a corrupted table: the caller scores NaN and reads nothing).
OPUS_HD long long key_slot(const LaunchArgs& a, const int32_t* bt_row, int n) {
  const int page_in_seq = n >> a.page_shift;
  const int entry_idx = fast_div(page_in_seq, a.ppb_div);
  const int entry = bt_row[entry_idx];
  const long long page = (long long)entry * a.pages_per_block + (page_in_seq - entry_idx * a.pages_per_block);
  if (entry < 0 || page >= a.num_pages) return -1;
  return (page << a.page_shift) + (n & (a.page_size - 1));
}

OPUS_HD int imin(int a, int b) { return a < b ? a : b; }
OPUS_HD int imax(int a, int b) { return a > b ? a : b; }
OPUS_HD int cdiv_nonneg(int a, int b) { return a <= 0 ? 0 : (a + b - 1) / b; }

struct Piece {
  int b, r0, r1, t0, t1;  // rows [r0, r1) of sequence b against key tiles [t0, t1)
};

struct SeqView {
  const int32_t* qsl;
  const int32_t* row_ends;
  int num_seqs;
  int num_rows;
  int key_cap = 0x7FFFFFFF;            // LaunchArgs::key_cap in the kernels
  const int32_t* row_starts = nullptr;  // null: every window starts at key 0

  OPUS_HD int start(int b) const { return imin(imax(qsl[b], 0), num_rows); }
  OPUS_HD int end_of(int r) const { return imin(imax(row_ends[r], 0), key_cap); }
  // row r's window start, clamped into [0, end]
  OPUS_HD int start_of(int r, int end) const { return row_starts ? imin(imax(row_starts[r], 0), end) : 0; }
  // (qa, qb, end, lo, span) of sequence b with qa <= qb <= num_rows: its groups score the
  // tiles [lo, lo + span)
  OPUS_HD void bounds(int b, int& qa, int& qb, int& end, int& lo, int& span) const {
    qa = start(b);
    qb = imax(start(b + 1), qa);
    end = qb > qa ? end_of(qb - 1) : 0;
    lo = qb > qa ? start_of(qa, end) / kBlockN : 0;
    span = cdiv_nonneg(end, kBlockN) - lo;
  }
  // a group's units: its set-up's, then its tiles; none without a tile
  static OPUS_HD int group_units(int span) { return span > 0 ? kPieceCost + span : 0; }
  OPUS_HD int units(int b, int rows) const {
    int qa, qb, end, lo, span;
    bounds(b, qa, qb, end, lo, span);
    return cdiv_nonneg(qb - qa, rows) * group_units(span);
  }
};

// A launch's row tensors as the iterators read them.
OPUS_HD SeqView seq_view(const LaunchArgs& a) {
  return SeqView{a.qsl, a.row_ends, a.num_seqs, a.num_rows, a.key_cap, a.row_starts};
}

// Table/Free: the pieces of units [u, u_end) starting at sequence b with `base` units before it.
// (The sequence view and R are arguments, not members: kernels keep them once, in registers
// that both iterators share.)
struct FreeIter {
  int u, u_end, b, base;
  int lo = 0, hi = 0, stride = kPieceCost, qa = 0, qb = 0, units = 0;
  bool in_seq = false;

  // rec: Table mode's record of this program (core/records.py), or null. Its fields 4, 5 and 7
  // are the first sequence's rows and tiles a group: entering that sequence from them reads
  // neither query_start_loc nor row_ends (two dependent trips on the start-up's path; the record
  // is in L1 since the walk's fields were read from it). They are clamped as those reads are: a
  // broken record names no row past the rows and no tile past the cap.
  OPUS_HD bool next(const SeqView& sv, int rows, Piece& p, const int32_t* rec = nullptr) {
    while (true) {
      if (in_seq) {
        if (lo < hi) {  // the groups this program touches, each with its own tile range
          const int j = lo / stride;
          const int t0 = imax(lo - j * stride - kPieceCost, 0), t1 = imin(hi - j * stride, stride) - kPieceCost;
          lo = (j + 1) * stride;
          if (t1 > t0) {
            // the window's first tile, read again for each piece rather than kept in the
            // iterator (whose state every body carries across its pieces)
            const int tlo = sv.row_starts ? sv.start_of(qa, sv.end_of(qb - 1)) / kBlockN : 0;
            p.b = b;
            p.t0 = tlo + t0;
            p.t1 = tlo + t1;
            p.r0 = qa + j * rows;
            p.r1 = imin(p.r0 + rows, qb);
            return true;
          }
          // only set-up units of group j: the range ends in them, so this sequence is done
        }
        base += units;
        b += 1;
        in_seq = false;
      }
      if (!(u < u_end && b < sv.num_seqs) || b < 0) return false;
      int sqa, sqb, end, tlo, span;
      if (rec != nullptr && b == rec[2] && rec[4] >= 0) {
        sqa = imin(rec[4], sv.num_rows);
        sqb = imin(imax(rec[5], sqa), sv.num_rows);
        span = imin(imax(rec[7], 0), sv.key_cap / kBlockN + 1);
      } else {
        sv.bounds(b, sqa, sqb, end, tlo, span);
      }
      enter(sqa, sqb, span, rows);
    }
  }
  // Sequence b, rows [qa, qb), `span` key tiles a group: its units, and the groups of it this
  // program's units [u, u_end) touch.
  OPUS_HD void enter(int sqa, int sqb, int span, int rows) {
    qa = sqa;
    qb = sqb;
    stride = kPieceCost + span;
    units = cdiv_nonneg(qb - qa, rows) * SeqView::group_units(span);
    lo = imax(u - base, 0);  // negative only for a corrupted record
    hi = imin(u_end - base, units);
    if (hi > lo) u = base + hi;
    in_seq = true;
  }
};

// Prefill: program (group, part) of (groups, parts).
struct PrefillIter {
  int part, parts;
  int row0 = 0, chunk_end = 0, b = 0, qa = 0;

  OPUS_HD void init(const SeqView& sv, int rows, int group) {
    const int live = sv.start(sv.num_seqs);
    row0 = group * rows;
    chunk_end = imin(row0 + rows, live);
    int lo = 0, hi = sv.num_seqs;
    while (hi - lo > 1) {  // last sequence starting at or before row0
      const int mid = (lo + hi) / 2;
      if (sv.start(mid) <= row0) lo = mid; else hi = mid;
    }
    b = lo;
    qa = sv.num_seqs > 0 ? sv.start(b) : 0;
  }
  OPUS_HD bool next(const SeqView& sv, Piece& p) {
    if (!(b < sv.num_seqs && qa < chunk_end)) return false;
    const int qb = imax(sv.start(b + 1), qa);
    p.b = b;
    p.r0 = imax(row0, qa);
    p.r1 = imin(chunk_end, qb);
    const int end = p.r1 > p.r0 ? sv.end_of(p.r1 - 1) : 0;
    const int lo = p.r1 > p.r0 ? sv.start_of(p.r0, end) / kBlockN : 0;
    const int span = cdiv_nonneg(end, kBlockN) - lo;
    p.t0 = lo + int((int64_t)part * span / parts);
    p.t1 = lo + int((int64_t)(part + 1) * span / parts);
    b += 1;
    qa = qb;
    return true;
  }
};

// Program pid's (u_begin, u_end, first sequence, units before it) of nprog programs, serially.
// Kernels compute the same with a warp-parallel scan; Table records come from the shared
// Triton build_schedule_kernel (worksplit/kernel.py; tests check all three agree).
struct CtaRange {
  int u_begin, u_end, b, base;
};
// r.b, r.base: the sequence holding unit r.u_begin and the units before it.
OPUS_HD void first_seq_serial(const SeqView& sv, int rows, CtaRange& r) {
  r.b = 0;
  r.base = 0;
  int64_t cum = 0;
  for (int s = 0; s < sv.num_seqs; ++s) {  // cum is non-decreasing: `before` is a prefix
    const int u = sv.units(s, rows);
    cum += u;
    if (cum > r.u_begin) break;
    r.b += 1;
    r.base += u;
  }
}
OPUS_HD CtaRange cta_range_serial(const SeqView& sv, int rows, int pid, int nprog) {
  int64_t total = 0;
  for (int s = 0; s < sv.num_seqs; ++s) total += sv.units(s, rows);
  CtaRange r;
  r.u_begin = int(pid * total / nprog);
  r.u_end = int((pid + 1) * total / nprog);
  first_seq_serial(sv, rows, r);
  return r;
}

// An instance's Table split (worksplit/rules.py's table_unit): tiles a stage, stages a round, and
// the tiles a later group's set-up counts as. The default is the units' own split (cta_range).
struct TableSplit {
  int stage = 1, rounds = 1, setup = kPieceCost;
};

// The stages a group of tiles [lo, lo + span) touches, counted from its first tile's stage.
OPUS_HD int group_stages(int lo, int span, int stage) { return cdiv_nonneg(lo + span, stage) - lo / stage; }

// The runs of `run` stages every group's stages are cut into, summed over the sequences.
OPUS_HD int64_t allot_runs(const SeqView& sv, int rows, int run, int stage) {
  int64_t runs = 0;
  for (int s = 0; s < sv.num_seqs; ++s) {
    int qa, qb, end, lo, span;
    sv.bounds(s, qa, qb, end, lo, span);
    const int g = sv.units(s, rows) / (kPieceCost + span);
    if (g > 0) runs += int64_t(g) * cdiv_nonneg(group_stages(lo, span, stage), run);
  }
  return runs;
}

// Table program k's first unit when the programs are allotted to row groups (one run of a
// group's stages each, spread evenly over the program ids), serially: worksplit/rules.py's
// allot_run (which says when and why), run_starts and allot_unit; -1 where it does not allot.
OPUS_HD int64_t table_allot_serial(const SeqView& sv, int rows, int k, int nprog, const TableSplit& split) {
  if (split.stage * split.rounds == 1) return -1;  // the units' own split
  int64_t groups = 0, tiles = 0;
  int most = 0;
  for (int s = 0; s < sv.num_seqs; ++s) {
    int qa, qb, end, lo, span;
    sv.bounds(s, qa, qb, end, lo, span);
    const int g = sv.units(s, rows) / (kPieceCost + span);
    if (g == 0) continue;
    groups += g;
    tiles += int64_t(g) * span;
    most = imax(most, group_stages(lo, span, split.stage));
  }
  if (groups == 0 || groups > nprog) return -1;
  int low = 1, high = most;
  while (low < high) {  // the fewest stages a program for which the runs fit the programs
    const int m = (low + high) / 2;
    if (allot_runs(sv, rows, m, split.stage) <= nprog) high = m; else low = m + 1;
  }
  const int run = low > split.rounds ? cdiv_nonneg(low, split.rounds) * split.rounds : low;
  if (int64_t(run) * split.stage * nprog > tiles + int64_t(split.setup) * nprog) return -1;
  // program k starts run ceil(k x runs / nprog): the working programs spread over the ids
  const int64_t first = (int64_t(k) * allot_runs(sv, rows, run, split.stage) + nprog - 1) / nprog;
  int64_t before = 0, ucum = 0;  // runs and units before the sequence
  for (int s = 0; s < sv.num_seqs; ++s) {
    int qa, qb, end, lo, span;
    sv.bounds(s, qa, qb, end, lo, span);
    const int units = sv.units(s, rows), stride = kPieceCost + span, g = units / stride;
    const int runs = g > 0 ? cdiv_nonneg(group_stages(lo, span, split.stage), run) : 0;
    if (first < before + int64_t(g) * runs) {
      const int j = int(first - before), group = j / runs, part = j % runs;
      const int64_t gstart = ucum + int64_t(group) * stride;
      return part == 0 ? gstart : gstart + kPieceCost + lo - lo % split.stage + part * run * split.stage - lo;
    }
    before += int64_t(g) * runs;
    ucum += units;
  }
  return ucum;
}

// Table program k's first unit by `split` (k = nprog: the total), serially: worksplit/rules.py's
// table_unit, which says why.
OPUS_HD int table_unit_serial(const SeqView& sv, int rows, int k, int nprog, const TableSplit& split) {
  if (const int64_t a = table_allot_serial(sv, rows, k, nprog, split); a >= 0) return int(a);
  int64_t groups = 0, tiles = 0;
  for (int s = 0; s < sv.num_seqs; ++s) {
    int qa, qb, end, lo, span;
    sv.bounds(s, qa, qb, end, lo, span);
    const int g = sv.units(s, rows) / (kPieceCost + span);
    groups += g;
    tiles += int64_t(g) * span;
  }
  // fewer tiles than a round a program: ends on stages, a later set-up counted as a stage
  const bool few = split.rounds > 1 && tiles < int64_t(nprog) * split.stage * split.rounds;
  const int grain = few ? split.stage : split.stage * split.rounds;
  const int setup = few ? imin(split.setup, split.stage) : split.setup;
  const int64_t x = k * (groups * setup + tiles) / nprog;  // the cost: each group's set-up, then its tiles
  int64_t ccum = 0, ucum = 0;
  for (int s = 0; s < sv.num_seqs; ++s) {
    int qa, qb, end, lo, span;
    sv.bounds(s, qa, qb, end, lo, span);
    const int units = sv.units(s, rows), stride = kPieceCost + span;
    const int64_t cost = int64_t(units / stride) * (setup + span);
    if (ccum + cost > x) {
      const int off = int(x - ccum), j = off / (setup + span);
      const int o = off - j * (setup + span) - setup;  // tiles into group j (<= 0: inside its set-up)
      const int64_t gstart = ucum + int64_t(j) * stride;
      if (o <= 0) return int(gstart + imin(off - j * (setup + span), kPieceCost));
      const int origin = lo - lo % split.stage;
      const int rel = imin(imax((lo + o - origin + grain / 2) / grain * grain + origin - lo, 0), span);
      return int(gstart + kPieceCost + rel);
    }
    ccum += cost;
    ucum += units;
  }
  return int(ucum);
}

// Program pid's Table record (core/records.py), serially: what the shared Triton records kernel
// writes (the harness's records, the host check's; FreeIter::next reads fields 2, 4, 5 and 7).
OPUS_HD void table_record(const SeqView& sv, int rows, int pid, int nprog, int32_t* rec,
                          const TableSplit& split = TableSplit{}) {  // kRecordInts ints
  CtaRange cr;
  if (split.stage * split.rounds == 1 && split.setup == kPieceCost) {  // the units' own split
    cr = cta_range_serial(sv, rows, pid, nprog);
  } else {
    cr.u_begin = table_unit_serial(sv, rows, pid, nprog, split);
    cr.u_end = table_unit_serial(sv, rows, pid + 1, nprog, split);
    first_seq_serial(sv, rows, cr);
  }
  for (int i = 0; i < kRecordInts; ++i) rec[i] = 0;
  rec[0] = cr.u_begin;
  rec[1] = cr.u_end;
  rec[2] = cr.b;
  rec[3] = cr.base;
  if (cr.b < sv.num_seqs) {
    int end;
    sv.bounds(cr.b, rec[4], rec[5], end, rec[6], rec[7]);
  }
}

}  // namespace opus
