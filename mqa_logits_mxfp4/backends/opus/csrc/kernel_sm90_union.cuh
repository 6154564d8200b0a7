// The union body's pre-pass (family i8u; docs/opus-backend.md, "The union body"): one CTA a
// sequence. In gather mode each row lists its own table entries; the rows of one sequence
// draw most of them from one pool. The pre-pass writes, for sequence b,
//   utab[b, u]   its union: every live entry of its rows once (then padding up to ucap),
//   upos[r, u]   for each of its rows r, the list index j with table[r, j] == utab[b, u], or -1,
//   uends[r]     the union's keys (entries x span), the same for every row of b,
// so that the i8 body scores the union as one non-gather sequence (its rows share every key
// tile) and stores row r's logit of union key u * span + i at list key j * span + i.
// A row's live entries are those its window [row_start, min(row_end, key_cap)) reaches. A row
// that lists one entry twice gets a union entry of its own for the second listing (upos holds
// one list index a row and entry), so every listed key is stored. The union's order follows
// the hash slots (it may differ from call to call); each cell's value does not depend on it.
// Memory safety: query_start_loc is clamped as the work split clamps it, a sequence's entries
// past ucap are dropped (only a caller-contract violation gets there: ucap = max_qlen x table
// columns), and an entry outside the cache stays in the union (the body scores it NaN, as any).
#pragma once

#include <stdint.h>

#include "args.h"
#include "port.h"
#include "registry.h"
#include "worksplit.h"

namespace opus {
namespace sm90 {

constexpr int kUnionThreads = 512;
// Hash slots for `ucap` entries: a quarter spare (linear probing stays short even when every
// entry is distinct), 8 bytes each in dynamic shared memory (registry.h's OPUS_UNION_MAX_ENTRIES
// keeps them inside 227 KB).
OPUS_HD constexpr int union_slots(int ucap) { return ucap + ucap / 4 + 1; }
static_assert(union_slots(OPUS_UNION_MAX_ENTRIES) * 8 <= 227 * 1024 - 1024, "the union's hash and its few static words fit");

// A slot: 0 empty; else the entry (high word), kUnionTaken, and 1 + its union index (0 until
// pass 2; it stays 0 past ucap).
constexpr unsigned long long kUnionTaken = 0x80000000ull;
OPUS_DEV uint32_t union_home(int32_t entry, int slots) {
  return uint32_t((uint64_t(uint32_t(entry) * 0x9E3779B1u) * uint32_t(slots)) >> 32);
}
OPUS_DEV bool union_holds(unsigned long long s, int32_t entry) { return (s & kUnionTaken) && int32_t(s >> 32) == entry; }
// The union index of an entry pass 1 inserted (-1: past ucap).
OPUS_DEV int union_index(const unsigned long long* slot, int32_t entry, int slots) {
  uint32_t i = union_home(entry, slots);
  for (int n = 0; n < slots && !union_holds(slot[i], entry); ++n) i = i + 1 == uint32_t(slots) ? 0 : i + 1;
  return union_holds(slot[i], entry) ? int(uint32_t(slot[i]) & 0x7FFFFFFFu) - 1 : -1;
}

// Row r's live entries [jb, je) of its table row (the window's entries, capped at the table).
OPUS_DEV void union_row_entries(const LaunchArgs& a, int r, int span, int& jb, int& je) {
  const int e = imin(imax(a.row_ends[r], 0), a.key_cap);
  const int s = a.row_starts ? imin(imax(a.row_starts[r], 0), e) : 0;
  jb = s / span;
  je = imin(cdiv_nonneg(e, span), a.bt_cols);
}

// kUnionBatch of a thread's entries at a time (entries e0 + k x kUnionThreads), their loads in
// flight together: one at a time, each pass waited a DRAM trip an entry (measured ~60 us at
// eight rows of 2048 entries). `live[k]`: inside its row's window; `entry[k]`: the table's.
constexpr int kUnionBatch = 8;
OPUS_DEV void union_batch(const LaunchArgs& a, int r0, int W, long long n_entries, long long e0, int span,
                          int32_t (&entry)[kUnionBatch], int (&row)[kUnionBatch], int (&col)[kUnionBatch],
                          bool (&live)[kUnionBatch]) {
#pragma unroll
  for (int k = 0; k < kUnionBatch; ++k) {
    const long long e = e0 + (long long)k * kUnionThreads;
    const bool in = e < n_entries;
    row[k] = r0 + (in ? int(e / W) : 0);
    col[k] = in ? int(e % W) : 0;
    // in bounds whether or not the entry is live (col < W <= the table's columns): loaded early
    entry[k] = in ? a.block_tables[(long long)row[k] * a.stride_bt + col[k]] : 0;
    int jb = 0, je = 0;
    if (in) union_row_entries(a, row[k], span, jb, je);
    live[k] = in && col[k] >= jb && col[k] < je;
  }
}

__global__ void __launch_bounds__(kUnionThreads) mqa_union_prepass(const LaunchArgs a) {
  extern __shared__ __align__(16) unsigned char union_smem[];
  unsigned long long* slot = reinterpret_cast<unsigned long long*>(union_smem);
  __shared__ int count, total;
  __shared__ int warp_sum[kUnionThreads / 32];
  const int b = blockIdx.x, tid = threadIdx.x;
  const SeqView sv = seq_view(a);
  const int r0 = sv.start(b), r1 = imax(sv.start(b + 1), r0);
  const int span = a.page_size * a.pages_per_block, ucap = a.ucap, slots = union_slots(ucap);
  const int W = cdiv_nonneg(a.key_cap, span);  // the columns a window can reach (ucap = max_qlen x W)
  // the sequence's entries, row-major: entry e is row r0 + e / W, list index e % W
  const long long n_entries = (long long)(r1 - r0) * W;
  for (int i = tid; i < slots; i += kUnionThreads) slot[i] = 0ull;
  if (tid == 0) count = 0;
  __syncthreads();

  int32_t entry[kUnionBatch];
  int row[kUnionBatch], col[kUnionBatch];
  bool live[kUnionBatch];
  // pass 1: every live entry into the hash
  for (long long e0 = tid; e0 < n_entries; e0 += (long long)kUnionThreads * kUnionBatch) {
    union_batch(a, r0, W, n_entries, e0, span, entry, row, col, live);
#pragma unroll  // registers, not a local array
    for (int k = 0; k < kUnionBatch; ++k) {
      if (!live[k]) continue;
      const unsigned long long mine = (unsigned long long)uint32_t(entry[k]) << 32 | kUnionTaken;
      uint32_t i = union_home(entry[k], slots);
      for (int n = 0; n < slots; ++n) {  // a free slot always exists: slots > ucap >= the entries
        const unsigned long long old = atomicCAS(&slot[i], 0ull, mine);
        if (old == 0ull || old == mine) break;
        i = i + 1 == uint32_t(slots) ? 0 : i + 1;
      }
    }
  }
  __syncthreads();

  // pass 2: union indices in slot order (a block-wide prefix count over the taken slots)
  const int per = (slots + kUnionThreads - 1) / kUnionThreads;
  const int s0 = imin(tid * per, slots), s1 = imin(s0 + per, slots);
  int mine_count = 0;
  for (int i = s0; i < s1; ++i) mine_count += slot[i] != 0ull;
  // exclusive scan of mine_count over the block
  int incl = mine_count;
  for (int d = 1; d < 32; d <<= 1) {
    const int v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
    if ((tid & 31) >= d) incl += v;
  }
  if ((tid & 31) == 31) warp_sum[tid >> 5] = incl;
  __syncthreads();
  if (tid < 32) {
    int w = tid < kUnionThreads / 32 ? warp_sum[tid] : 0;
    for (int d = 1; d < 32; d <<= 1) {
      const int v = __shfl_up_sync(0xFFFFFFFFu, w, d);
      if (tid >= d) w += v;
    }
    if (tid < kUnionThreads / 32) warp_sum[tid] = w;
  }
  __syncthreads();
  int u = incl - mine_count + ((tid >> 5) > 0 ? warp_sum[(tid >> 5) - 1] : 0);
  const long long utab_row = (long long)b * ucap;
  for (int i = s0; i < s1; ++i) {
    if (slot[i] == 0ull) continue;
    if (u < ucap) {
      slot[i] |= (unsigned long long)(u + 1);
      a.utab[utab_row + u] = int32_t(slot[i] >> 32);
    }
    ++u;
  }
  if (tid == kUnionThreads - 1) total = imin(u, ucap);
  __syncthreads();
  const int U = total;
  for (long long e = tid; e < (long long)(r1 - r0) * U; e += kUnionThreads)
    a.upos[(long long)(r0 + e / U) * ucap + e % U] = -1;
  if (tid == 0) count = U;
  __syncthreads();

  // pass 3: each live entry's list index at its union entry; a second listing by one row gets
  // a union entry of its own
  for (long long e0 = tid; e0 < n_entries; e0 += (long long)kUnionThreads * kUnionBatch) {
    union_batch(a, r0, W, n_entries, e0, span, entry, row, col, live);
    int first[kUnionBatch];  // the batch's claims in flight together
#pragma unroll
    for (int k = 0; k < kUnionBatch; ++k) {
      const int uu = live[k] ? union_index(slot, entry[k], slots) : -1;  // -1: past ucap (a contract violation)
      first[k] = uu < 0 ? -2 : atomicCAS(&a.upos[(long long)row[k] * ucap + uu], -1, col[k]);
    }
#pragma unroll  // registers, not a local array
    for (int k = 0; k < kUnionBatch; ++k) {
      if (first[k] < 0) continue;  // -1: claimed; -2: nothing to claim; else the row listed it before
      const int v = atomicAdd(&count, 1);
      if (v >= ucap) continue;
      a.utab[utab_row + v] = entry[k];
      for (int rr = r0; rr < r1; ++rr) a.upos[(long long)rr * ucap + v] = rr == row[k] ? col[k] : -1;
    }
  }
  __syncthreads();
  const int n_union = imin(count, ucap);  // the body reads no entry past it (its keys end there)
  for (int r = r0 + tid; r < r1; r += kUnionThreads) a.uends[r] = n_union * span;
}

}  // namespace sm90
}  // namespace opus
