// The union body's pre-pass (family i8u; docs/opus-backend.md, "The union body"): one CTA a
// segment -- a sequence, or where a sequence's rows would overfill a union (a prefill), a run
// of useg_rows of its rows (args.h's UnionGeometry). In gather mode each row lists its own table
// entries; the rows of one sequence draw most of them from one pool. The pre-pass writes, for
// segment s,
//   uqsl[s]      its first row (the body's query_start_loc: each segment a sequence),
//   utab[s, u]   its union: every live entry of its rows once (u < the union's size),
//   upos[r, u]   for each of its rows r, the list index j with table[r, j] == utab[s, u], or -1,
//   uends[r]     the union's keys (entries x span), the same for every row of s,
// so that the i8 body scores the union as one non-gather sequence (its rows share every key
// tile) and stores row r's logit of union key u * span + i at list key j * span + i.
// A row's live entries are those its window [row_start, min(row_end, key_cap)) reaches. A row
// that lists one entry more than once gets a union entry of its own for each later listing
// (upos holds one list index a row and entry), so every listed key is stored. The union's order
// is the entries' first listings' (row-major), then the later listings', the same at every call.
// Memory safety: query_start_loc is clamped as the work split clamps it, a segment's entries
// past ucap are dropped (only a caller-contract violation gets there: ucap = useg_rows x table
// columns), segments past usegs are not scored (the same: a sequence longer than its bound,
// or starts out of order), and an entry outside the cache stays in the union (the body scores
// it NaN, as any). Every union entry is some live listing, so the union never holds more than ucap.
#pragma once

#include <stdint.h>

#include "args.h"
#include "port.h"
#include "registry.h"
#include "worksplit.h"

namespace opus {
namespace sm90 {

constexpr int kUnionThreads = 1024;  // 32 warps an SM to hide each pass's latency chains (64 registers a thread)
constexpr int kUnionStage = 8;  // the staging's chunks in flight at once
// Dynamic shared memory: the hash, ucap + ucap / 8 + 1 slots of 8 bytes (linear probing stays
// short at the unions that candidate lists make; every entry distinct fills it to 8/9), then the
// sequence's table slice (4 bytes an entry) and its entries' liveness (a bit each):
// registry.h's OPUS_UNION_MAX_ENTRIES keeps them inside 227 KB.
OPUS_HD constexpr int union_slots(int ucap) { return ucap + ucap / 8 + 1; }
OPUS_HD constexpr int union_smem_bytes(int ucap) { return union_slots(ucap) * 8 + ucap * 4 + (ucap / 32 + 1) * 4; }
static_assert(union_smem_bytes(OPUS_UNION_MAX_ENTRIES) <= 227 * 1024 - 1024,
              "the union's hash, its staged entries and their liveness, and a few static words, fit");

// A slot: 0 empty; else the entry (high word), kUnionTaken, and in the low 31 bits its first
// listing e (pass 1), then 1 + its union index (pass 2). Pass 1 probes; the later passes find an
// entry's slot in its staged word.
constexpr unsigned long long kUnionTaken = 0x80000000ull;
OPUS_DEV uint32_t union_home(int32_t entry, int slots) {
  return uint32_t((uint64_t(uint32_t(entry) * 0x9E3779B1u) * uint32_t(slots)) >> 32);
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

// Whether entry e's row window reaches it (the staged liveness: a bit an entry).
OPUS_DEV bool union_live(const uint32_t* live, int e) { return live[e >> 5] >> (e & 31) & 1u; }

// Segment g's rows [r0, r1) (every thread gets them). Unsplit, sequence g's. Split, sequence b
// has max(1, ceil(rows_b / useg_rows)) segments (an empty one, one empty segment), numbered in
// sequence order, the k-th its rows [start + k useg_rows, start + (k + 1) useg_rows) cut at its
// end; a number past them all is an empty segment at the live rows' end. A block-wide scan of
// the counts, kUnionThreads sequences a round, until the running count passes g.
OPUS_DEV void union_segment(const LaunchArgs& a, const SeqView& sv, int g, int* warp_sum, int* found, int& r0,
                            int& r1) {
  if (!a.usplit) {
    r0 = sv.start(g);
    r1 = imax(sv.start(g + 1), r0);
    return;
  }
  const int S = imax(a.useg_rows, 1), tid = threadIdx.x;
  if (tid == 0) found[0] = found[1] = sv.start(sv.num_seqs);
  int base = 0;
  for (int c0 = 0; c0 < sv.num_seqs; c0 += kUnionThreads) {
    const int b = c0 + tid;
    int qa = 0, qb = 0, count = 0;
    if (b < sv.num_seqs) {
      qa = sv.start(b);
      qb = imax(sv.start(b + 1), qa);
      count = imax(1, cdiv_nonneg(qb - qa, S));
    }
    int total;
    const int before = base + union_scan(count, warp_sum, &total);  // its syncs order thread 0's first write
    if (b < sv.num_seqs && g >= before && g < before + count) {
      const int k = g - before;
      found[0] = qa + k * S;
      found[1] = imin(qa + k * S + S, qb);
    }
    base += total;
    if (base > g) break;  // uniform: total is the block's
  }
  __syncthreads();
  r0 = found[0];
  r1 = found[1];
}

// The union is numbered in the order of the entries' first listings (row-major), a repeated
// listing by one row after every first one in the same order: the same union, in the same order,
// at every call (the body's stage votes, and so its bits, follow the order).
static __global__ void __launch_bounds__(kUnionThreads) mqa_union_prepass(const LaunchArgs a) {
  extern __shared__ __align__(16) unsigned char union_smem[];
  unsigned long long* slot = reinterpret_cast<unsigned long long*>(union_smem);
  __shared__ int warp_sum[kUnionThreads / 32];
  __shared__ int found[2];
  const int g = blockIdx.x, tid = threadIdx.x;
  const SeqView sv = seq_view(a);
  if (g == 0 && tid == 0) a.uqsl[a.usegs] = sv.start(sv.num_seqs);
  if (g >= a.usegs) return;  // the one CTA of a launch with no segment
  int r0, r1;
  union_segment(a, sv, g, warp_sum, found, r0, r1);
  if (tid == 0) a.uqsl[g] = r0;
  const int span = a.page_size * a.pages_per_block, ucap = a.ucap, slots = union_slots(ucap);
  const int W = cdiv_nonneg(a.key_cap, span);  // the columns a window can reach (ucap = useg_rows x W)
  const FastDiv wdiv = make_fastdiv(imax(W, 1));  // an entry's row
  // the segment's entries, row-major; at most ucap (a caller-contract violation may list more
  // rows: those past it are dropped)
  const int n_entries = (int)imin((long long)(r1 - r0) * W, ucap);
  // entry e (row-major: row r0 + e / W, list index e % W) staged: ent[e] the table's entry until
  // pass 1, its hash slot until pass 3, then its union index; live: a bit an entry
  int32_t* ent = reinterpret_cast<int32_t*>(slot + slots);
  uint32_t* live = reinterpret_cast<uint32_t*>(ent + ucap);
  for (int i = tid; i < slots; i += kUnionThreads) slot[i] = 0ull;
  // the slice staged once, eight chunks' reads in flight together (every later pass reads shared
  // memory but upos): the table entry whether or not it is live (in bounds: its column < W <= the
  // table's), the row's window beside it, a warp's 32 consecutive entries' liveness in one word
  const int chunks = (n_entries + kUnionThreads - 1) / kUnionThreads;
  for (int k0 = 0; k0 < chunks; k0 += kUnionStage) {
    int32_t entry[kUnionStage];
    int j[kUnionStage], end[kUnionStage], start[kUnionStage];
#pragma unroll
    for (int k = 0; k < kUnionStage; ++k) {
      const int e = (k0 + k) * kUnionThreads + tid;
      const bool in = e < n_entries;
      const int row = r0 + (in ? fast_div(e, wdiv) : 0);
      j[k] = e - (row - r0) * W;
      entry[k] = in ? a.block_tables[(long long)row * a.stride_bt + j[k]] : 0;
      end[k] = in ? a.row_ends[row] : 0;
      start[k] = in && a.row_starts ? a.row_starts[row] : 0;
    }
#pragma unroll
    for (int k = 0; k < kUnionStage; ++k) {
      const int e = (k0 + k) * kUnionThreads + tid;
      if (k0 + k >= chunks) break;  // uniform: the block's chunk count
      const int ee = imin(imax(end[k], 0), a.key_cap), ss = imin(imax(start[k], 0), ee);
      // the window [ss, ee) reaches the entry's keys [j span, (j + 1) span)
      const bool lv = e < n_entries && (long long)(j[k] + 1) * span > ss && (long long)j[k] * span < ee;
      if (e < n_entries) ent[e] = entry[k];
      const uint32_t bits = __ballot_sync(0xFFFFFFFFu, lv);
      if ((tid & 31) == 0 && e < n_entries) live[e >> 5] = bits;  // e: a multiple of 32 on lane 0
    }
  }
  __syncthreads();

  // pass 1: every live entry into the hash, each slot keeping its entry's first listing (the
  // smallest e: the same high word, so the 64-bit minimum is the low word's); from here a live
  // entry's staged word is its slot
  for (int e = tid; e < n_entries; e += kUnionThreads) {
    if (!union_live(live, e)) continue;
    const int32_t entry = ent[e];
    const unsigned long long mine = (unsigned long long)uint32_t(entry) << 32 | kUnionTaken | uint32_t(e);
    uint32_t i = union_home(entry, slots);
    for (int n = 0; n < slots; ++n) {  // a free slot always exists: slots > ucap >= the entries
      const unsigned long long old = atomicCAS(&slot[i], 0ull, mine);
      if (old == 0ull) break;
      if (old >> 32 == mine >> 32) {
        atomicMin(&slot[i], mine);
        break;
      }
      i = i + 1 == uint32_t(slots) ? 0 : i + 1;
    }
    ent[e] = int32_t(i);
  }
  __syncthreads();

  // passes 2 and 4 number entries in entry order: warp w walks its run [w x run, (w + 1) x run)
  // 32 entries a step, lane l entry w x run + 32 k + l (shared memory without conflicts, global
  // writes coalesced), a step's flags in one ballot that lane k keeps (<= kSteps steps); the
  // warps' counts scanned block-wide
  constexpr int kWarps = kUnionThreads / 32, kSteps = OPUS_UNION_MAX_ENTRIES / kUnionThreads;
  static_assert(kSteps * kUnionThreads == OPUS_UNION_MAX_ENTRIES && kSteps <= 32, "a warp's run in <= 32 steps");
  const int lane = tid & 31, warp = tid >> 5;
  const uint32_t below = (1u << lane) - 1u;
  const int run = (n_entries + kWarps * 32 - 1) / (kWarps * 32) * 32, steps = run / 32;
  const int wbase = warp * run + lane;  // this lane's entry at step 0
  auto step_live = [&](int k) { const int e = wbase + 32 * k; return e < n_entries && (live[e >> 5] >> lane & 1u); };  // e % 32 == lane

  // pass 2: the first listings (the slot's smallest e is this one's)
  uint32_t firsts = 0u;  // lane k: step k's ballot
  int count = 0;
  for (int k = 0; k < steps; ++k) {
    const int e = wbase + 32 * k;
    bool first = false;
    if (step_live(k)) first = uint32_t(slot[ent[e]]) == (uint32_t(kUnionTaken) | uint32_t(e));
    const uint32_t m = __ballot_sync(0xFFFFFFFFu, first);
    if (lane == k) firsts = m;
    count += __popc(m);
  }
  int U;
  int u = __shfl_sync(0xFFFFFFFFu, union_scan(lane == 0 ? count : 0, warp_sum, &U), 0);  // its syncs order pass 2's reads before the writes
  const long long utab_row = (long long)g * ucap;
  for (int k = 0; k < steps; ++k) {
    const uint32_t m = __shfl_sync(0xFFFFFFFFu, firsts, k);
    if (m >> lane & 1u) {
      const int e = wbase + 32 * k, uu = u + __popc(m & below);
      const int i = ent[e];
      slot[i] = (slot[i] & ~0x7FFFFFFFull) | uint32_t(uu + 1);  // from here the low word is the union index + 1
      a.utab[utab_row + uu] = int32_t(slot[i] >> 32);
    }
    u += __popc(m);
  }
  __syncthreads();

  // pass 3: each live entry's union index into its staged word; from here the hash is free
  for (int e = tid; e < n_entries; e += kUnionThreads)
    if (union_live(live, e)) ent[e] = int(uint32_t(slot[ent[e]]) & 0x7FFFFFFFu) - 1;
  __syncthreads();

  // upos, a tile of rows at a time in the hash's shared memory: tile[(r - ra) x U + u] is row r's
  // smallest list index of union entry u (a row tile's entries are contiguous in entry order, so
  // each entry is visited once); then every listing above its row's minimum is a later one (a
  // bit in `later_bits`), and the tile is written out whole (-1 where the row does not list u)
  uint32_t* later_bits = reinterpret_cast<uint32_t*>(slot);
  uint32_t* tile = later_bits + (ucap / 32 + 1);
  const int tile_words = slots * 2 - (ucap / 32 + 1);  // >= ucap >= U: a tile holds a row at least
  const int rows = (n_entries + W - 1) / imax(W, 1);   // the rows with entries (the rest list none)
  const int tile_rows = imax(tile_words / imax(U, 1), 1);
  for (int i = tid; i < ucap / 32 + 1; i += kUnionThreads) later_bits[i] = 0u;
  for (int ra = 0; ra < rows; ra += tile_rows) {
    const int rb = imin(rows, ra + tile_rows), cells = (rb - ra) * U;
    const int lo = ra * W, hi = imin(rb * W, n_entries);
    for (int i = tid; i < cells; i += kUnionThreads) tile[i] = 0xFFFFFFFFu;
    __syncthreads();
    for (int e = lo + tid; e < hi; e += kUnionThreads) {
      if (!union_live(live, e)) continue;
      const int rl = fast_div(e, wdiv);
      atomicMin(&tile[(rl - ra) * U + ent[e]], uint32_t(e - rl * W));
    }
    __syncthreads();
    for (int base = lo & ~31; base < hi; base += kUnionThreads) {  // a warp's lanes: one aligned word
      const int e = base + tid;
      bool later = false;
      if (e >= lo && e < hi && union_live(live, e)) {
        const int rl = fast_div(e, wdiv);
        later = tile[(rl - ra) * U + ent[e]] != uint32_t(e - rl * W);
      }
      const uint32_t m = __ballot_sync(0xFFFFFFFFu, later);
      if (lane == 0 && m) atomicOr(&later_bits[e >> 5], m);  // two tiles may share a word
    }
    for (int r = ra; r < rb; ++r)
      for (int uu = tid; uu < U; uu += kUnionThreads) a.upos[(long long)(r0 + r) * ucap + uu] = int32_t(tile[(r - ra) * U + uu]);
    __syncthreads();  // the tile is read out before the next one's fill
  }
  for (int r = r0 + rows; r < r1; ++r)  // rows past the entries (a caller-contract violation) list none
    for (int uu = tid; uu < U; uu += kUnionThreads) a.upos[(long long)r * ucap + uu] = -1;

  // pass 4: the later listings numbered after the firsts in entry order (a step's flags: one word)
  uint32_t later = 0u;
  count = 0;
  for (int k = 0; k < steps; ++k) {
    const int e0 = wbase - lane + 32 * k;  // the step's first entry: a multiple of 32
    const uint32_t m = e0 < n_entries ? later_bits[e0 >> 5] : 0u;
    if (lane == k) later = m;
    count += __popc(m);
  }
  int extra;
  int v = U + __shfl_sync(0xFFFFFFFFu, union_scan(lane == 0 ? count : 0, warp_sum, &extra), 0);  // U + extra <= live entries <= ucap
  for (int k = 0; k < steps; ++k) {
    const uint32_t m = __shfl_sync(0xFFFFFFFFu, later, k);
    if (m >> lane & 1u) {
      const int e = wbase + 32 * k, vv = v + __popc(m & below), rl = fast_div(e, wdiv), row = r0 + rl;
      a.utab[utab_row + vv] = __ldcg(&a.utab[utab_row + ent[e]]);  // ent[e]: its union index (pass 3)
      for (int rr = r0; rr < r1; ++rr) a.upos[(long long)rr * ucap + vv] = rr == row ? e - rl * W : -1;
    }
    v += __popc(m);
  }
  for (int r = r0 + tid; r < r1; r += kUnionThreads) a.uends[r] = (U + extra) * span;
}

}  // namespace sm90
}  // namespace opus
