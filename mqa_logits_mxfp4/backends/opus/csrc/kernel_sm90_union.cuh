// The union body's pre-pass (family i8u; docs/opus-backend.md, "The union body"): one CTA a
// sequence. In gather mode each row lists its own table entries; the rows of one sequence
// draw most of them from one pool. The pre-pass writes, for sequence b,
//   utab[b, u]   its union: every live entry of its rows once (u < the union's size),
//   upos[r, u]   for each of its rows r, the list index j with table[r, j] == utab[b, u], or -1,
//   uends[r]     the union's keys (entries x span), the same for every row of b,
// so that the i8 body scores the union as one non-gather sequence (its rows share every key
// tile) and stores row r's logit of union key u * span + i at list key j * span + i.
// A row's live entries are those its window [row_start, min(row_end, key_cap)) reaches. A row
// that lists one entry more than once gets a union entry of its own for each later listing
// (upos holds one list index a row and entry), so every listed key is stored. The union's order
// is the entries' first listings' (row-major), then the later listings', the same at every call.
// Memory safety: query_start_loc is clamped as the work split clamps it, a sequence's entries
// past ucap are dropped (only a caller-contract violation gets there: ucap = max_qlen x table
// columns), and an entry outside the cache stays in the union (the body scores it NaN, as any).
// Every union entry is some live listing, so the union never holds more than ucap.
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

// A slot: 0 empty; else the entry (high word), kUnionTaken, and in the low 31 bits its first
// listing e (pass 1), then 1 + its union index (pass 2).
constexpr unsigned long long kUnionTaken = 0x80000000ull;
OPUS_DEV uint32_t union_home(int32_t entry, int slots) {
  return uint32_t((uint64_t(uint32_t(entry) * 0x9E3779B1u) * uint32_t(slots)) >> 32);
}
OPUS_DEV bool union_holds(unsigned long long s, int32_t entry) { return (s & kUnionTaken) && int32_t(s >> 32) == entry; }
// The slot of an entry pass 1 inserted, and (after pass 2) its union index.
OPUS_DEV int union_slot(const unsigned long long* slot, int32_t entry, int slots) {
  uint32_t i = union_home(entry, slots);
  for (int n = 0; n < slots && !union_holds(slot[i], entry); ++n) i = i + 1 == uint32_t(slots) ? 0 : i + 1;
  return int(i);
}
OPUS_DEV int union_index(const unsigned long long* slot, int32_t entry, int slots) {
  return int(uint32_t(slot[union_slot(slot, entry, slots)]) & 0x7FFFFFFFu) - 1;
}

// Row r's live entries [jb, je) of its table row (the window's entries, capped at the table).
OPUS_DEV void union_row_entries(const LaunchArgs& a, int r, int span, int& jb, int& je) {
  const int e = imin(imax(a.row_ends[r], 0), a.key_cap);
  const int s = a.row_starts ? imin(imax(a.row_starts[r], 0), e) : 0;
  jb = s / span;
  je = imin(cdiv_nonneg(e, span), a.bt_cols);
}

// A block-wide exclusive prefix sum of v (every thread calls it); *total: the sum.
OPUS_DEV int union_scan(int v, int* warp_sum, int* total) {
  const int tid = threadIdx.x;
  int incl = v;
  for (int d = 1; d < 32; d <<= 1) {
    const int x = __shfl_up_sync(0xFFFFFFFFu, incl, d);
    if ((tid & 31) >= d) incl += x;
  }
  __syncthreads();  // warp_sum's previous use is over
  if ((tid & 31) == 31) warp_sum[tid >> 5] = incl;
  __syncthreads();
  if (tid < 32) {
    int w = tid < kUnionThreads / 32 ? warp_sum[tid] : 0;
    for (int d = 1; d < 32; d <<= 1) {
      const int x = __shfl_up_sync(0xFFFFFFFFu, w, d);
      if (tid >= d) w += x;
    }
    if (tid < kUnionThreads / 32) warp_sum[tid] = w;
  }
  __syncthreads();
  *total = warp_sum[kUnionThreads / 32 - 1];
  return incl - v + ((tid >> 5) > 0 ? warp_sum[(tid >> 5) - 1] : 0);
}

// Entry e of a sequence (row-major: row r0 + e / W, list index e % W): its row, list index, table
// entry, and whether the row's window reaches it.
struct UnionEntry {
  int row, j;
  int32_t entry;
  bool live;
};
OPUS_DEV UnionEntry union_entry(const LaunchArgs& a, int r0, int W, int span, int e) {
  UnionEntry x;
  x.row = r0 + e / W;
  x.j = e % W;
  int jb, je;
  union_row_entries(a, x.row, span, jb, je);
  x.live = x.j >= jb && x.j < je;
  x.entry = x.live ? a.block_tables[(long long)x.row * a.stride_bt + x.j] : 0;
  return x;
}

// The union is numbered in the order of the entries' first listings (row-major), a repeated
// listing by one row after every first one in the same order: the same union, in the same order,
// at every call (the body's stage votes, and so its bits, follow the order).
__global__ void __launch_bounds__(kUnionThreads) mqa_union_prepass(const LaunchArgs a) {
  extern __shared__ __align__(16) unsigned char union_smem[];
  unsigned long long* slot = reinterpret_cast<unsigned long long*>(union_smem);
  __shared__ int warp_sum[kUnionThreads / 32];
  const int b = blockIdx.x, tid = threadIdx.x;
  const SeqView sv = seq_view(a);
  const int r0 = sv.start(b), r1 = imax(sv.start(b + 1), r0);
  const int span = a.page_size * a.pages_per_block, ucap = a.ucap, slots = union_slots(ucap);
  const int W = cdiv_nonneg(a.key_cap, span);  // the columns a window can reach (ucap = max_qlen x W)
  // the sequence's entries, row-major; at most ucap (a caller-contract violation may list more
  // rows: those past it are dropped)
  const int n_entries = (int)imin((long long)(r1 - r0) * W, ucap);
  for (int i = tid; i < slots; i += kUnionThreads) slot[i] = 0ull;
  __syncthreads();

  // pass 1: every live entry into the hash, each slot keeping its entry's first listing (the
  // smallest e: the same high word, so the 64-bit minimum is the low word's)
  for (int e = tid; e < n_entries; e += kUnionThreads) {
    const UnionEntry x = union_entry(a, r0, W, span, e);
    if (!x.live) continue;
    const unsigned long long mine = (unsigned long long)uint32_t(x.entry) << 32 | kUnionTaken | uint32_t(e);
    uint32_t i = union_home(x.entry, slots);
    for (int n = 0; n < slots; ++n) {  // a free slot always exists: slots > ucap >= the entries
      const unsigned long long old = atomicCAS(&slot[i], 0ull, mine);
      if (old == 0ull) break;
      if (old >> 32 == mine >> 32) {
        atomicMin(&slot[i], mine);
        break;
      }
      i = i + 1 == uint32_t(slots) ? 0 : i + 1;
    }
  }
  __syncthreads();

  // pass 2: the first listings numbered in entry order (each thread a contiguous run of entries,
  // <= 64 as ucap <= 22528 = 44 x 512: their flags in one word)
  const int per = (n_entries + kUnionThreads - 1) / kUnionThreads;
  const int e0 = imin(tid * per, n_entries), e1 = imin(e0 + per, n_entries);
  unsigned long long firsts = 0ull;
  for (int e = e0; e < e1; ++e) {
    const UnionEntry x = union_entry(a, r0, W, span, e);
    if (!x.live) continue;
    const unsigned long long s = slot[union_slot(slot, x.entry, slots)];
    if (uint32_t(s) == (uint32_t(kUnionTaken) | uint32_t(e))) firsts |= 1ull << (e - e0);
  }
  int U;
  int u = union_scan(__popcll(firsts), warp_sum, &U);  // its syncs keep pass 2's reads before the writes
  const long long utab_row = (long long)b * ucap;
  for (int e = e0; e < e1; ++e) {
    if (!(firsts >> (e - e0) & 1ull)) continue;
    const UnionEntry x = union_entry(a, r0, W, span, e);
    const int i = union_slot(slot, x.entry, slots);
    slot[i] = (slot[i] & ~0x7FFFFFFFull) | uint32_t(u + 1);  // from here the low word is the union index + 1
    a.utab[utab_row + u] = x.entry;
    ++u;
  }
  for (long long e = tid; e < (long long)(r1 - r0) * U; e += kUnionThreads) a.upos[(r0 + e / U) * ucap + e % U] = -1;
  __syncthreads();

  // pass 3: each row's first listing of each union entry (the smallest list index: an unsigned
  // minimum over -1)
  for (int e = tid; e < n_entries; e += kUnionThreads) {
    const UnionEntry x = union_entry(a, r0, W, span, e);
    if (!x.live) continue;
    const int uu = union_index(slot, x.entry, slots);
    atomicMin(reinterpret_cast<unsigned*>(&a.upos[(long long)x.row * ucap + uu]), unsigned(x.j));
  }
  __syncthreads();
  // pass 4: a row's later listings of one entry, numbered after the firsts in entry order
  unsigned long long later = 0ull;
  for (int e = e0; e < e1; ++e) {
    const UnionEntry x = union_entry(a, r0, W, span, e);
    if (x.live && a.upos[(long long)x.row * ucap + union_index(slot, x.entry, slots)] != x.j)
      later |= 1ull << (e - e0);
  }
  int extra;
  int v = U + union_scan(__popcll(later), warp_sum, &extra);  // U + extra <= live entries <= ucap
  for (int e = e0; e < e1; ++e) {
    if (!(later >> (e - e0) & 1ull)) continue;
    const UnionEntry x = union_entry(a, r0, W, span, e);
    a.utab[utab_row + v] = x.entry;
    for (int rr = r0; rr < r1; ++rr) a.upos[(long long)rr * ucap + v] = rr == x.row ? x.j : -1;
    ++v;
  }
  for (int r = r0 + tid; r < r1; r += kUnionThreads) a.uends[r] = (U + extra) * span;
}

}  // namespace sm90
}  // namespace opus
