// What a kernel launch receives: raw pointers, extents and strides that checks.h has validated.
// Plain C++ (no CUDA, HIP or torch): the CPU tests compile it with g++.
#pragma once

#include <stdint.h>

#include "fastdiv.h"

namespace opus {

// Mode codes: core/modes.py's MODE_CODES (tests/test_structure.py checks that they agree).
enum Mode : int32_t { kModeTable = 0, kModeFree = 1, kModePrefill = 2 };
// What `out` holds: core/outputs.py's OUT_CODES (the same check): the float32 result, or that
// result rounded once to nearest-even.
enum OutKind : int32_t { kOutF32 = 0, kOutBF16 = 1, kOutF16 = 2 };

constexpr int kHeadDim = 128;          // elements a head / a key
constexpr int kHeadBytes = 64;         // E2M1 bytes a head / a key
constexpr int kScaleBlocks = 4;        // E8M0 scales a head / a key (32 elements each)
constexpr int kBlockN = 64;            // keys a tile (also the unit size of the schedule records)
constexpr int kRecordInts = 8;         // int32 a Table record (core/records.py's RECORD_INTS)
constexpr int kPieceCost = 16;         // set-up units of a group in the split (worksplit/rules.py's PIECE_COST)

struct LaunchArgs {
  const uint8_t* q;            // [num_rows, heads, 64]   contiguous
  const uint8_t* q_scale;      // [num_rows, heads, 4]    contiguous
  const uint8_t* kv;           // [num_pages, page_size, 64] contiguous
  const uint8_t* kv_scale;     // [num_pages, page_size, 4]  contiguous
  const void* weights;         // [>= num_rows, heads], unit column stride
  const int32_t* block_tables; // [>= num_seqs (gather: num_rows), bt_cols], unit column stride
  const int32_t* qsl;          // [num_seqs + 1]
  const int32_t* row_ends;     // [num_rows]
  const int32_t* row_starts;   // [num_rows], or null: every window starts at key 0
  void* out;                   // out_kind elements: 2-D [>= num_rows, out_cols] (row stride stride_out) or flat [out_numel]
  const int64_t* out_offsets;  // [>= num_rows] for a flat out, else null
  const int32_t* records;      // [>= grid_x, kRecordInts] in Table mode, else null
  // [2] or null: stages (i8: OPUS_I8_STAGE_KEYS keys) a body scored on its fast / canonical path (tests)
  unsigned long long* path_stats;

  int64_t stride_w;            // elements between weight rows
  int64_t stride_bt;           // entries between block-table rows
  int64_t stride_out;          // elements between out rows (2-D)
  int64_t out_numel;           // elements in a flat out
  int64_t num_pages;
  int32_t out_cols;            // 2-D out: columns a row may write
  int32_t bt_cols;             // block-table columns
  int32_t key_cap;             // no row scores keys at or past this (min of max_seq_len, out width, table span)
  int32_t num_seqs;
  int32_t num_rows;            // rows of q / q_scale / row_ends: the device-side row guard
  int32_t heads;
  int32_t page_size;
  int32_t page_shift;          // log2(page_size): page sizes are powers of two
  int32_t pages_per_block;
  FastDiv ppb_div;             // division by pages_per_block
  int32_t gather;
  int32_t weights_bf16;
  int32_t out_kind;            // OutKind
  int32_t mode;                // Mode
  int32_t grid_x;              // Table/Free: programs; Prefill: row groups
  int32_t parts;               // Prefill: key-tile parts per row group (grid y)

  // The union body (family i8u, docs/opus-backend.md "The union body"): a pre-pass writes, per
  // segment (a sequence, or a run of useg_rows of its rows: UnionGeometry below), the union of
  // its rows' live table entries and where each row lists each of them; the i8 body then scores
  // each union as a non-gather sequence and stores row r's logit of a union key at that key's
  // place in row r's own list. The body's query_start_loc, block_tables, row_ends and row_starts
  // are the union's (uqsl, utab, uends, none); the rows' own windows are list_ends /
  // list_starts, capped at list_cap. All null / 0 for every other body.
  int32_t* utab;               // [usegs, ucap]: segment s's union entries (the first uends[r] / span)
  int32_t* upos;               // [num_rows, ucap]: row r's list entry of union entry u, or -1
  int32_t* uends;              // [num_rows]: the keys of the row's segment's union
  int32_t* uqsl;               // [usegs + 1]: segment s's first row; the last, the live rows' end
  const int32_t* list_ends;    // the caller's row_ends
  const int32_t* list_starts;  // the caller's row_starts, or null
  int32_t ucap;                // entries a union may hold: useg_rows x the table columns a window reaches
  int32_t usegs;               // segments (the pre-pass's CTAs, the body's sequences)
  int32_t useg_rows;           // rows a segment holds at most
  int32_t usplit;              // 0: a segment is a sequence; 1: runs of useg_rows rows (UnionGeometry)
  int32_t list_cap;            // the caller's key_cap
};

// The union body's geometry. A union holds at most `most` entries (registry.h's
// OPUS_UNION_MAX_ENTRIES): the live entries of the rows of one segment, `width` table columns a
// row (those a window can reach: the config's ceil(max_seq_len / span), or fewer where the
// table is narrower). Where max_qlen rows fit, a segment is a whole sequence (split false, segs
// = num_seqs); else (a prefill's rows) it is a run of seg_rows consecutive rows of a sequence,
// the most whole groups of R rows that fit, so no group of the body spans two unions; a
// sequence of n rows then has max(1, ceil(n / seg_rows)) segments, at most num_seqs + num_rows /
// seg_rows in all. ok false: not even R rows fit.
struct UnionGeometry {
  int64_t width, seg_rows, segs, ucap;
  bool split, ok;
};
inline UnionGeometry union_geometry(int64_t max_qlen, int64_t R, int64_t bt_cols, int64_t max_seq_len, int64_t span,
                                    int64_t num_seqs, int64_t num_rows, int64_t most) {
  UnionGeometry g{};
  const int64_t reach = (max_seq_len + span - 1) / span;
  g.width = bt_cols < reach ? bt_cols : reach;
  const int64_t w = g.width > 0 ? g.width : 1;
  g.split = max_qlen * g.width > most;
  g.seg_rows = g.split ? most / w / R * R : max_qlen;
  g.ok = max_qlen >= 1 && R >= 1 && g.seg_rows >= 1 && (!g.split || g.seg_rows >= R);
  g.segs = !g.ok ? 0 : g.split ? num_seqs + num_rows / g.seg_rows : num_seqs;
  g.ucap = g.seg_rows * g.width;
  return g;
}
// The union body's scratch (int32): utab, then uends, then upos, then uqsl (LaunchArgs above).
inline int64_t union_scratch_ints(const UnionGeometry& g, int64_t num_rows) {
  return g.segs * g.ucap + num_rows + num_rows * g.ucap + g.segs + 1;
}

}  // namespace opus
