// sm_90a body on INT8 wgmma (family i8): a producer warpgroup gathers paged key tiles into a
// ring of shared-memory stages with bulk copies (the TMA unit); consumer warpgroups convert each
// key tile into INT8 A fragments in registers and issue wgmma against the group's INT8 query
// operand (B, in shared memory), then run the epilogue.
//
// Two paths a stage (OPUS_I8_STAGE_KEYS = 256 keys, four 64-key tiles), chosen by the whole
// consumer warpgroup (docs/numerics.md, "Integer tiles"):
//   fast      every key of the stage has its four block scales within 2^2 of its smallest, every
//             head within 2^3, and the magnitudes stay in range: each operand carries its
//             blocks' offsets as shifts (the keys as unsigned bytes biased by 64, the bias taken
//             back by a fifth, constant k-slice), one chained K = 128 wgmma gives the exact
//             integer dot product of the two 128-vectors, and a cell costs one instruction for
//             the relu (relu_cell) and an FMA (the head weight carries the query's smallest
//             scale, the key's is applied after the head sum). Not the canonical order; within the
//             tolerance, and finite exactly where it is.
//   canonical every other stage: one wgmma chain a scale block (the other blocks' lanes zeroed)
//             gives each exact block partial, then docs/numerics.md steps 2-5 in order; its bits
//             are the canonical ones.
//
// Roles (warpgroup 0 produces, warpgroups 1..CONS consume):
//   schedule  every thread walks the same pieces (worksplit.h); a stage is the sequence's tiles
//             4j .. 4j + 3 (whatever the piece's bounds: the same stages and votes in every mode,
//             each piece storing only its own keys), and a piece's stages go round robin to the
//             consumer warpgroups, the k-th from the one holding tile t0 to consumer k % CONS.
//   stager    QSTAGE (one row a group): warp 3 of warpgroup 0 stages each piece's query inputs
//             (the row's q bytes by one bulk copy, its scale words and weights) in shared memory a
//             piece ahead of the consumers' set-up, which reads them there (I8QStager).
//   producer  warp c of warpgroup 0 fills consumer c's stages (256 keys each): per chunk of
//             min(page size, 64) keys of one page, one table lookup and two bulk copies (key
//             rows, scale words) onto the stage's barrier; a chunk the table sends outside the
//             cache gets NaN scales and is not read. (A kv_scale that is only 4-byte aligned
//             is copied key by key with cp.async instead.)
//   consumer  per piece: the group's query operand, weights and factors into shared memory;
//             per stage: the scales, one warpgroup vote on the path, then the four 64-key M
//             blocks, each one's key bytes read from the stage just before it is converted, or
//             on the fused fast path during the M block before (READ_AHEAD; the stage is released
//             after the last M block's read); on the fast path per M block and
//             64-column chunk: convert, wgmma, and the previous unit's epilogue and store while
//             this one's wgmma runs.
//   UNION     the union body (family i8u): the same roles on the union of a sequence's gather
//             tables (the launch's union view, kernel_sm90_union.cuh's pre-pass); the producer
//             also hands each stage's list keys on, and the consumers store each row's logit at
//             its key's place in the row's own list (I8UnionKeys, union_col).
#pragma once

#include "args.h"
#include "drive.cuh"
#include "i8_encode.h"
#include "port.h"
#include "registry.h"
#include "sm90_ptx.cuh"
#include "worksplit.h"

namespace opus {
namespace sm90 {

// The fast stage rule (docs/numerics.md, "Integer tiles"): a key's four scale bytes span at most
// kI8KeySpread, a head's at most kI8QuerySpread, and all lie in [kI8Lo, kI8Hi]; over the stage's
// keys and the group's heads,
// kmax + qmax <= kI8PairHi (no canonical block term can overflow) and kmax + log2 max|w'| <=
// kI8WeightKey (no canonical or fast partial sum can); every live weight is finite and its
// w' = w * 2^(qmin - 127) is zero or within [2^-100, 2^92], and the binary exponents of the
// group's nonzero |w'| lie within kI8WeightSpread of each other (the products of the one-chunk
// kernels' epilogue, scaled by 2^-(G + 22) for the largest exponent G, stay normal:
// I8Consumer::relu_cell; one rule for every i8 kernel).
constexpr int kI8KeySpread = 2;    // the biased key bytes (i8_encode.h) hold shifts 0..2
constexpr int kI8QuerySpread = 3;  // the signed query bytes hold shifts 0..3
constexpr int kI8Lo = 8, kI8Hi = 240;
// CANON (the canonical i8 body, family i8c): every canonical block term exact (qmin + kmin >= 107,
// kept as qmin >= kI8CanonQLo and kmin >= kI8CanonKLo) and every canonical weighted term normal
// (kmin >= 3 - the group's smallest exponent of |w'|): docs/numerics.md, "Integer tiles".
constexpr int kI8CanonQLo = 54, kI8CanonKLo = 53;
constexpr int kI8PairHi = 368;
constexpr int kI8WeightKey = 225;
constexpr int kI8WExpLo = -100, kI8WExpHi = 92;
constexpr int kI8WeightSpread = 104;

// The dynamic shared memory (every extern __shared__ array starts there): I8Smem.
extern __shared__ __align__(128) unsigned char i8_smem[];
// Where it starts in the CTA's shared window (the low 18 bits of its shared address, all a wgmma
// descriptor holds): after the 1 KB sm_90 reserves, the kernel having no static shared memory.
// The wgmma descriptors are built from it at compile time; the kernel traps at entry if the
// address differs.
constexpr uint32_t kI8SmemBase = 0x400;

// Scale words for keys nothing may be read for: a dead key (past the group's rows: finite,
// never stored) and a key whose table entry lies outside the cache (NaN cells).
static __device__ uint32_t kI8SpecialScales[2] = {0x7F7F7F7Fu, 0xFFFFFFFFu};  // global memory: cp.async reads it
// All ones, read from global memory once a consumer thread: i8_key_word's multiplier (a constant
// ptxas could see would turn its multiply-adds back into ALU instructions).
static __device__ uint32_t kI8Ones = 0xFFFFFFFFu;

// SPLIT: each consumer warpgroup's work in two warpgroups -- a converter that votes and turns
// the fast stages' key bytes into an INT8 tile in shared memory, and a consumer (the MMA
// warpgroup) that runs the fast stages' wgmma with both operands from shared memory, the
// epilogue, and the canonical path (docs/opus-backend.md, "The split i8 body").
template <int R, int H, int CONS, bool SPLIT = false>
struct I8Shape {
  static constexpr int N = R * H;                  // query operand columns: row r, head h at r * H + h
  static constexpr int NC = N < 64 ? N : 64;       // columns of one wgmma
  static constexpr int CHUNKS = N / NC;
  static constexpr int ACC = NC / 2;               // accumulators a thread holds for one chunk
  static constexpr int NT = NC / 8;                // 8-column groups of a chunk
  static constexpr int KEYS = OPUS_I8_STAGE_KEYS;  // keys a stage (registry.h: what path_stats counts)
  static constexpr int MB = KEYS / kBlockN;        // 64-key M blocks (one 64-key tile each) a stage
  static constexpr int VK = MB / 2;                // keys a lane judges in the vote
  // A ring a consumer: deep enough to cover a block-table read plus a DRAM round trip at the
  // bandwidth floor (three consumers' rings must fit 227 KB): 768 keys (CONS 3), 1024 (CONS 2)
  // SPLIT: 512 keys a converter, the tile ring behind it holding two more stages.
  static constexpr int STAGES = SPLIT ? 2 : (CONS == 3 ? 768 : 1024) / KEYS;
  static constexpr int TILE_SLOTS = 2;             // SPLIT: converted stages a consumer pair holds
  static constexpr int TILE_BYTES = KEYS * 128;    // SPLIT: M block mb's k-slice j at mb * 8192 + j * 2048
  static_assert(KEYS % kBlockN == 0 && (MB & (MB - 1)) == 0 && MB >= 2, "a stage: 2, 4, ... whole tiles");
  static_assert(STAGES >= 2, "a ring of at least two stages");
  static constexpr int CT = 128 * CONS;            // consumer (SPLIT: MMA) threads
  static constexpr int THREADS = 128 + CT + (SPLIT ? 128 * CONS : 0);
  static_assert(!SPLIT || (CONS == 2 && NC == 64 && H == 64), "the split body: two pairs, 64 heads");
  // The fast path keeps its weights in registers up to 128 columns where two consumer warpgroups
  // have 224 registers a thread (at 128 columns r2w12 is 7-8% faster so: docs/perf-notes.md, ninth
  // session; an older form of this kernel had ptxas insert a dummy wgmma there and came out
  // wrong). With three consumers (160 registers) 128 columns spill inside the stage loops, and
  // 256 columns never fit: those read their weights from shared memory, before each unit's wait.
  static constexpr bool W_IN_REGS = N <= 64 || (N <= 128 && CONS <= 2);
  // W_VEC: where the weights live in shared memory and two consumers share the registers, column
  // n's fast weight sits at wslot(n): chunk by chunk, a quad lane t's columns 8i + 2t + e (i < NT)
  // side by side in its order, read as 16-byte vectors (a unit's weights in NT / 2 loads, not
  // NT); at NT = 8 a lane's 16 floats are padded to 20, so the four lanes of a quarter warp read
  // four different bank groups. Elsewhere column order, read in pairs (three consumers at 160
  // registers: the vectors' registers put more of r2w16's stage loop in local memory). Measured:
  // docs/opus-backend.md, "The i8 body".
  static constexpr bool W_VEC = !W_IN_REGS && CONS == 2;
  static constexpr int WLANE = 2 * NT + (NT == 8 ? 4 : 0);
  static constexpr int WFAST = W_VEC ? CHUNKS * 4 * WLANE : N;
  static constexpr OPUS_HD int wslot(int n) {
    const int c = n % NC;
    return W_VEC ? n / NC * 4 * WLANE + c % 8 / 2 * WLANE + 2 * (c / 8) + c % 2 : n;
  }
  static_assert(H % 16 == 0 && H <= 128 && N <= 256, "heads 16..128, rows x heads <= 256");
  static_assert(H <= NC || H == 2 * NC, "a row spans at most two chunks");
  static_assert(!W_VEC || NT % 2 == 0, "W_VEC: a lane's weights of a chunk in whole 16-byte vectors");
  static_assert(CONS >= 1 && CONS <= 3, "one producer warp a consumer warpgroup");
  // The fast stage's form, chosen per kernel on the H200 (docs/perf-notes.md, twelfth session;
  // ptxas lays each kernel out differently, and these moved the time more than their
  // instructions): FAST_SPAN, the M blocks of its unrolled span, the spans a rolled loop -- two
  // where a stage has four or more chunks of whole rows (half the fast stage's code: r4w12 -5%), the
  // whole stage elsewhere (rolled, r1w16 was 9% slower and r2w12 2% in the kept tree; at 128
  // heads r1w12 kept local memory in its stage loop). RELU_ALU, the relu as a max on the
  // accumulator's bits with the weights scaled by the group's exponent, at one chunk (r1w16:
  // the same time as the multiply in this tree); with several the FMUL.SAT form (the max
  // measured 1-4% slower there).
  static constexpr int FAST_SPAN = CHUNKS >= 4 && H <= NC ? 2 : MB;
  // PREFILL_WHOLE: a Prefill launch runs a second kernel of this shape whose fast stage is one
  // unrolled span (mqa_logits_sm90_i8's WHOLE; the launcher picks it by the launch's mode): where
  // the rolled spans serve decode, at 64 heads, not at 32 (measured per shape, and against one
  // kernel holding both forms: docs/opus-backend.md, "The i8 body").
  static constexpr bool PREFILL_WHOLE = !SPLIT && FAST_SPAN < MB && H == 64;
  // QSTAGE: the set-up's query inputs staged a piece ahead by warp 3 of the producer warpgroup
  // (I8QStager), where the buffer (N * 72 bytes) leaves the kernel in its shared-memory carve-out
  // step (i8_smem_bytes checks it): one row of up to 64 heads, 1-4% faster on the H200; at two
  // and four rows it crossed a step (less L1) and cost 3-6.5% (docs/perf-notes.md, twenty-fourth
  // session), as it would at one row of 128 heads.
  static constexpr bool QSTAGE = !SPLIT && R == 1 && H <= 64;
  static constexpr bool RELU_ALU = CHUNKS == 1;
  // Registers a thread after the reallocation: the producers give theirs to the consumers. The
  // CTA's pool is what it launched with, THREADS x the launch bound's per-thread count (a
  // multiple of 8); asking for more than the pool holds blocks the consumers' setmaxnreg forever.
  static constexpr int LAUNCH_REGS = (65536 / THREADS) / 8 * 8;
  static constexpr int PRODUCER_REGS = SPLIT || CONS == 3 ? 24 : 56;
  static constexpr int CONSUMER_REGS = SPLIT ? 152 : CONS == 1 ? 240 : CONS == 2 ? 224 : 160;
  static constexpr int CONVERTER_REGS = SPLIT ? 72 : 0;
  static_assert(128 * PRODUCER_REGS + CT * CONSUMER_REGS + 128 * CONS * CONVERTER_REGS <= THREADS * LAUNCH_REGS,
                "register pool");
  static_assert(CONSUMER_REGS >= LAUNCH_REGS && PRODUCER_REGS <= LAUNCH_REGS, "setmaxnreg directions");
};

// One stage: the sequence's 64-key tiles MB j .. MB j + MB - 1 (4j .. 4j + 3; any may lie outside
// the piece that scores it: loaded and voted on inside the row group's keys, never stored).
template <int KEYS>
struct I8Stage {
  uint8_t raw[KEYS * kHeadBytes];  // key k's block b at k * 64 + 16 * b, as in the cache page
  uint32_t scale[KEYS];            // the key's four E8M0 bytes
};

// What a consumer warpgroup reads at each stage's start, in one place (one base address: ptxas
// re-derived the shared window's address for a separate array at each stage, through S2UR).
template <int R>
struct I8GroupKeys {
  int vbeg, vend;    // the group's keys [vbeg, vend): they vote
  int khi;           // a key's largest byte on a fast stage is at most this (0: the group never is fast)
  int rbeg[R], rlen[R];  // keys [rbeg, rbeg + rlen) each row stores (inside the piece's own tiles)
};

// SPLIT: the converted stages, consumer pair c's slots, and their barriers. Tile t holds M block
// mb's k-slice j (raw block j of its 64 keys, 32 bytes a key: word w's low four elements at byte
// 4w, its high four at 16 + 4w) K-major without swizzle, the 8-key core of keys 8i..8i+7 at
// mb * 8192 + j * 2048 + i * 256, its K half kh at + kh * 128, key m % 8 at + 16 * (m % 8).
// Every stage passes through a slot, a canonical one carrying its verdict only: the consumer
// learns the vote from it and never reads a fast stage's raw slot, which its converter releases
// as soon as the tile is written.
template <int CONS, int SLOTS, int BYTES, int KEYS, bool SPLIT>
struct I8Tiles {
  alignas(128) uint8_t tile[CONS][SLOTS][BYTES];
  float factor[CONS][SLOTS][KEYS];  // fast: key k's 2^(kmin - 129)
  int fast[CONS][SLOTS];            // the stage's verdict
  uint64_t full[CONS][SLOTS];       // the converter's 128 threads wrote the slot
  uint64_t empty[CONS][SLOTS];      // the MMA warpgroup's 128 threads are done with it
};
template <int CONS, int SLOTS, int BYTES, int KEYS>
struct I8Tiles<CONS, SLOTS, BYTES, KEYS, false> {};

// UNION (kernel_sm90_union.cuh): where each row lists each 8-key group of a stage. The producer
// writes lkey[c][s] as it fills slot s (lane l: the keys 8l .. 8l + 7, inside one table entry);
// at the stage's start the consumer copies them (its stores outlast the slot) into cur[stage
// parity]: row r's list key of group k's first key, or -1 where row r does not list it.
template <int R, int CONS, int STAGES, int KEYS, bool UNION>
struct I8UnionKeys {
  int lkey[CONS][STAGES][R][KEYS / 8];
  int cur[CONS][2][R][KEYS / 8];
};
template <int R, int CONS, int STAGES, int KEYS>
struct I8UnionKeys<R, CONS, STAGES, KEYS, false> {};

// QSTAGE: a piece's query inputs as the stager leaves them for the set-up (empty without QSTAGE).
template <int N, bool ON>
struct I8QStage {};
template <int N>
struct I8QStage<N, true> {
  alignas(128) uint32_t q[N * 16];  // the live rows' q bytes, as q holds them
  uint32_t qs[N];                   // their scale words
  float w[N];                       // their weights
  uint64_t full, empty;             // staged (the stager's arrivals and bytes); read (every consumer thread)
};

// The smallest sm_90 shared-memory carve-out (KB) that holds `bytes` of dynamic shared memory
// and the 1 KB the CTA reserves; the rest of the 256 KB is the SM's L1.
constexpr int sm90_carveout_kb(int bytes) {
  constexpr int kSteps[] = {0, 8, 16, 32, 64, 100, 132, 164, 196, 228};
  for (int kb : kSteps)
    if (kb * 1024 >= bytes + 1024) return kb;
  return -1;
}

template <int R, int H, int CONS, bool SPLIT = false, bool UNION = false>
struct I8Smem {
  using S = I8Shape<R, H, CONS, SPLIT>;
  I8Stage<S::KEYS> stage[CONS][S::STAGES];
  // Query operand, K-major without swizzle: k-slice j (32 bytes of K) at j * N * 32; in it the
  // 8-column core of columns 8c..8c+7 at c * 256, its K half kh at + kh * 128, column n % 8 at
  // + 16 * (n % 8). K slot p of slice j < 4 holds element 32 * (p % 16 / 4) + 8j + 4 * (p / 16) +
  // p % 4: lane t of a quad holds block t of its keys, word j in slice j. SPLIT: the tiles' order
  // instead, slot p of slice j element 32j + 8 * (p % 16 / 4) + 4 * (p / 16) + p % 4 (slice j is
  // block j; lane t holds word t of each block). Slice 4 (fast groups): the key bias's
  // correction, against the constant key operand bias_operand() names.
  alignas(128) uint8_t qb[(kScaleBlocks + 1) * S::N * 32];
  alignas(16) float wfast[S::WFAST];  // column n at S::wslot(n); fast path: w' = w * 2^(qmin - 127), then scaled (scale_weights; 0 for dead rows)
  float w[S::N];                      // canonical path: the weight
  float sq[kScaleBlocks][S::N];       // 2^(eq_b - 127)
  float uq[kScaleBlocks][S::N];       // 2^-(shift_b + 2): back from the operand's integers to E2M1
  uint32_t qscale[S::N];              // the column's four scale bytes (pass 2 reads them)
  char* optr[R];                      // each row's key 0 in out
  int red[CONS * 4][3];               // per consumer warp: largest qmax, largest and smallest exponent of |w'|
  I8Table tables[4];                  // shift 0..3: queries, keys on the canonical path (and KEY_SIGNED's fast path)
  I8Table ktables[4];                 // shift 0..3: keys on the fast path (biased; 3 for keys nobody reads)
  uint64_t full[CONS][S::STAGES];
  uint64_t empty[CONS][S::STAGES];
  int range[4];
  I8GroupKeys<R> keys[CONS];          // per consumer warpgroup (each reads its own at each stage)
  I8QStage<S::N, S::QSTAGE> qst;      // QSTAGE: the next set-up's query inputs
  I8UnionKeys<R, CONS, S::STAGES, S::KEYS, UNION> un;                // an empty struct without UNION
  I8Tiles<CONS, S::TILE_SLOTS, S::TILE_BYTES, S::KEYS, SPLIT> tiles;  // last: an empty struct without SPLIT
};

template <int R, int H, int CONS, bool SPLIT = false, bool UNION = false>
constexpr int i8_smem_bytes() {
  using S = I8Shape<R, H, CONS, SPLIT>;
  constexpr int bytes = int(sizeof(I8Smem<R, H, CONS, SPLIT, UNION>));
  static_assert(!S::QSTAGE || sm90_carveout_kb(bytes) == sm90_carveout_kb(bytes - int(sizeof(I8QStage<S::N, true>))),
                "the staged query inputs must leave the kernel in its carve-out step (QSTAGE)");
  return bytes;
}

// The pieces of this program, the same sequence for every thread.
struct PieceWalk {
  FreeIter fi{0, 0, 0, 0};
  PrefillIter pi{0, 1};
  bool prefill = false;
  // The view from the launch's arguments at each call: none of it stays in registers across a
  // piece (the consumers' stage loop has none to spare). The one-row bodies (rows is a constant
  // at every call site) enter a Table walk's first sequence from the record (FreeIter::next):
  // two dependent reads off the start-up's path, 0.3-0.6 us of a one-row call's 10-31 us
  // (docs/perf-notes.md, thirty-second session). The other bodies read query_start_loc and
  // row_ends: the entry moved ptxas's allocation of r2w12 (8.6% slower).
  OPUS_DEV bool next(const LaunchArgs& args, int rows, Piece& p) {
    const SeqView sv = seq_view(args);
    const int32_t* rec = rows == 1 && args.mode == kModeTable ? args.records + (long long)blockIdx.x * kRecordInts : nullptr;
    return prefill ? pi.next(sv, p) : fi.next(sv, rows, p, rec);
  }
};

OPUS_DEV PieceWalk make_walk(const LaunchArgs& args, const SeqView& sv, int rows, const int* range) {
  PieceWalk w;
  w.prefill = args.mode == kModePrefill;
  if (w.prefill) {
    w.pi = PrefillIter{(int)blockIdx.y, args.parts};
    // the last row group first: CTAs start in index order, so a causal sequence's longest windows
    // start first and the short ones fill the end (r4w12 1.4-4% faster on the H100,
    // docs/perf-notes.md, fiftieth session)
    w.pi.init(sv, rows, (int)gridDim.x - 1 - (int)blockIdx.x);
  } else {
    const int32_t* rec = args.mode == kModeTable ? args.records + (long long)blockIdx.x * kRecordInts : range;
    w.fi = FreeIter{rec[0], rec[1], rec[2], rec[3]};
  }
  return w;
}

// The keys [gbeg, gend) a piece's row group sees: from the smallest window start of its rows to
// the largest row end. A stage holds the sequence's tiles 4j .. 4j + 3 whatever the piece's
// bounds, so that its path vote is the same in every mode (the pieces of Free, Table and Prefill
// start at different tiles): it loads and votes on every key in [gbeg, gend), and stores only
// the piece's own keys.
template <int R, bool UNION = false>
OPUS_DEV void group_keys(const LaunchArgs& args, const Piece& p, int& gbeg, int& gend) {
  gbeg = 0x7FFFFFFF;
  gend = 0;
#pragma unroll  // the rows' loads in flight together
  for (int i = 0; i < R; ++i) {
    const int r = p.r0 + i;
    if (r >= p.r1) break;
    int s, e;
    long long b;
    if constexpr (UNION) {  // the union's keys [0, uends[r]) (args.row_ends in the union's view)
      s = 0;
      e = imin(imax(args.row_ends[r], 0), args.key_cap);
    } else {
      row_window(args, r, true, s, e, b);
    }
    gbeg = imin(gbeg, imin(s, e));  // a start past an end cut at the out stores nothing: gbeg <= gend
    gend = imax(gend, e);
  }
}
// The first key a piece scores: its first tile, or the tile of the group's start.
OPUS_DEV int piece_first_key(const Piece& p, int gbeg) { return imax(p.t0, gbeg / kBlockN) * kBlockN; }
// The first key of the stage that holds tile t (a stage: tiles MB j .. MB j + MB - 1 of the sequence).
template <int MB>
OPUS_DEV int stage_start(int t) { return (t & ~(MB - 1)) * kBlockN; }

OPUS_DEV int byte_of(uint32_t w, int i) { return int(w >> (8 * i) & 0xFFu); }
// The fast stage rule for key n with smallest and largest scale bytes kmin, kmax: a key outside
// the group's keys [vbeg, vend) takes no part (vbeg <= vend); the others need their bytes within
// kI8KeySpread of each other and inside [klo, khi] (klo: kI8Lo, or the canonical body's bound).
// & and |, not && and ||: no branches.
OPUS_DEV bool i8_key_fast(int kmin, int kmax, int n, int vbeg, int vend, int khi, int klo = kI8Lo) {
  const bool outside = uint32_t(n - vbeg) >= uint32_t(vend - vbeg);
  return outside | ((kmax - kmin <= kI8KeySpread) & (kmin >= klo) & (kmax <= khi));
}
// A fast key's four block offsets from its smallest scale byte kmin, one byte each (no borrows:
// every byte >= kmin), and its factor 2^(kmin - 129) (applied after the head sum).
OPUS_DEV uint32_t i8_key_offsets(uint32_t scale, int kmin) { return scale - uint32_t(kmin) * 0x01010101u; }
OPUS_DEV float i8_key_factor(int kmin) { return __uint_as_float(uint32_t(imax(kmin, 2) - 2) << 23); }
OPUS_DEV int min4(uint32_t w) { return imin(imin(byte_of(w, 0), byte_of(w, 1)), imin(byte_of(w, 2), byte_of(w, 3))); }
OPUS_DEV int max4(uint32_t w) { return imax(imax(byte_of(w, 0), byte_of(w, 1)), imax(byte_of(w, 2), byte_of(w, 3))); }

// A position in a ring of STAGES slots: the slot and the parity of its current phase.
template <int STAGES>
struct RingPos {
  int slot = 0;
  uint32_t phase = 0;
  OPUS_DEV void advance() {
    if (++slot == STAGES) {
      slot = 0;
      phase ^= 1u;
    }
  }
};

// ------------------------------------------------------------------------------------ producer

template <int R, int H, int CONS, bool SPLIT, bool UNION = false>
struct I8Producer {
  using S = I8Shape<R, H, CONS, SPLIT>;
  const LaunchArgs& args;
  I8Smem<R, H, CONS, SPLIT, UNION>& sm;
  int c, lane;
  bool bulk;  // kv_scale is 16-byte aligned (kv_cache always is: checks.h): chunks by bulk copy
  RingPos<S::STAGES> ring;

  // Keys [n0, n0 + KEYS) in chunks of L = min(page size, 64) keys, each inside one page and
  // contiguous there: lane l copies chunk l with two bulk copies (its 64-byte key rows and its
  // scale words) that land on the stage's `full` barrier. A chunk wholly outside [gbeg, gend) is not
  // read (the consumers ignore those keys); a chunk whose page lies outside the cache gets NaN
  // scales and no read.
  OPUS_DEV int chunk_keys() const { return imin(args.page_size, 64); }  // a power of two, 8..64
  // The cache slot of this lane's chunk of the stage at n0: -2 not read, -1 outside the cache.
  OPUS_DEV long long chunk_slot(const int32_t* bt_row, int n0, int gbeg, int gend) const {
    const int L = chunk_keys(), k0 = lane * L, n = n0 + k0;
    return k0 < S::KEYS && n < gend && n + L > gbeg ? key_slot(args, bt_row, n) : -2;  // a chunk is in one page
  }
  OPUS_DEV void load_stage_bulk(I8Stage<S::KEYS>& st, uint64_t* full, long long slot) const {
    const int L = chunk_keys(), k0 = lane * L;
    const uint32_t bytes = slot >= 0 ? uint32_t(L * (kHeadBytes + 4)) : 0u;
    const uint32_t total = __reduce_add_sync(0xFFFFFFFFu, bytes);
    if (lane == 0) mbar_expect_tx(full, total);
    __syncwarp();  // the phase expects every byte before any copy can land
    if (slot >= 0) {
      bulk_copy(st.raw + k0 * kHeadBytes, args.kv + slot * kHeadBytes, uint32_t(L * kHeadBytes), full);
      bulk_copy(&st.scale[k0], args.kv_scale + slot * kScaleBlocks, uint32_t(L * 4), full);
    } else if (slot == -1) {
      for (int i = 0; i < L; i += 4) *reinterpret_cast<uint4*>(&st.scale[k0 + i]) = make_uint4(~0u, ~0u, ~0u, ~0u);
      fence_async_smem();  // before the bulk copies that reuse this stage later
    }
    mbar_arrive(full);
  }

  // The same stage key by key with cp.async, for a kv_scale that is only 4-byte aligned:
  // lane l takes keys l, l + 32, ...; a key outside [gbeg, gend) gets zeros and finite scales,
  // one outside the cache zeros and NaN scales; nothing is read for either.
  OPUS_DEV void load_stage_keys(I8Stage<S::KEYS>& st, uint64_t* full, const int32_t* bt_row, int n0, int gbeg,
                                int gend) const {
#pragma unroll 1
    for (int kk = lane; kk < S::KEYS; kk += 32) {
      const int n = n0 + kk;
      long long slot = -2;  // dead
      if (n >= gbeg && n < gend) slot = key_slot(args, bt_row, n);  // -1: outside the cache
      const bool ok = slot >= 0;
      const uint8_t* src = ok ? args.kv + slot * kHeadBytes : args.kv;
#pragma unroll
      for (int b = 0; b < kScaleBlocks; ++b) cp_async16(st.raw + kk * kHeadBytes + 16 * b, src + 16 * b, ok ? 16u : 0u);
      cp_async4(&st.scale[kk], ok ? static_cast<const void*>(args.kv_scale + slot * kScaleBlocks)
                                  : static_cast<const void*>(&kI8SpecialScales[slot == -1 ? 1 : 0]));
    }
    if constexpr (UNION) {  // the lane's list keys (plain stores) released by an arrive of its own
      cp_async_arrive_counted(full);
      mbar_arrive(full);
    } else {
      cp_async_arrive(full);
    }
  }

  // UNION: lane l's 8-key group of the stage at n0 (keys n0 + 8l ..) for each row of the piece:
  // its list key (upos: the row's list index of the union entry, x span, + the key's offset in
  // the entry), or -1. Written before the stage's loads; the lane's arrive publishes it.
  OPUS_DEV void union_keys(const Piece& p, int n0, int gend, int s) const {
    if constexpr (UNION) {
      const int span = args.page_size * args.pages_per_block;  // a multiple of 8
      const int n = n0 + 8 * lane, u = n / span, off = n - u * span;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const int r = p.r0 + i;
        int key = -1;
        if (r < p.r1 && n < gend) {
          const int j = args.upos[(long long)r * args.ucap + u];
          key = j >= 0 ? j * span + off : -1;
        }
        sm.un.lkey[c][s][i][lane] = key;
      }
    }
  }

  OPUS_DEV void piece(const Piece& p) {
    int gbeg, gend;
    group_keys<R, UNION>(args, p, gbeg, gend);
    const int kbeg = piece_first_key(p, gbeg), kend = imin(gend, p.t1 * kBlockN);
    if (kbeg >= kend) return;  // the consumers skip it too (its first stage may start below kend)
    const int32_t* bt_row = args.block_tables + (long long)(args.gather ? p.r0 : p.b) * args.stride_bt;
    constexpr int STEP = S::KEYS * CONS;
    int n0 = stage_start<S::MB>(kbeg / kBlockN) + S::KEYS * c;
    long long slot = bulk ? chunk_slot(bt_row, n0, gbeg, gend) : -2;
#pragma unroll 1
    for (; n0 < kend; n0 += STEP, ring.advance()) {
      // the next stage's table entry is read while this stage waits for its slot and copies
      const long long next = bulk ? chunk_slot(bt_row, n0 + STEP, gbeg, gend) : -2;
      const int s = ring.slot;
      mbar_wait_sleep(&sm.empty[c][s], ring.phase ^ 1u);
      union_keys(p, n0, gend, s);
      if (bulk)
        load_stage_bulk(sm.stage[c][s], &sm.full[c][s], slot);
      else
        load_stage_keys(sm.stage[c][s], &sm.full[c][s], bt_row, n0, gbeg, gend);
      slot = next;
    }
  }
};

// ------------------------------------------------------------------------------------ stager

// QSTAGE: warp 3 of the producer warpgroup walks the pieces with everyone and stages each one's
// query inputs -- the live rows' q bytes (one bulk copy), their scale words and weights -- once
// the consumers have handed the buffer back (qst.empty, after the previous set-up), so a set-up
// reads shared memory instead of one global round trip after its rows' windows. Every piece the
// consumers start is staged, the ones they skip too (they hand those back unread).
template <int R, int H, int CONS, bool UNION>
struct I8QStager {
  using S = I8Shape<R, H, CONS, false>;
  const LaunchArgs& args;
  I8Smem<R, H, CONS, false, UNION>& sm;
  int lane;
  uint32_t phase = 0;
  OPUS_DEV void piece(const Piece& p) {
    const int r0 = p.r0, n = (imin(p.r1, p.r0 + R) - r0) * H;  // live columns
    mbar_wait(&sm.qst.empty, phase ^ 1u);
    const uint32_t bytes = uint32_t(n * kHeadBytes);
    if (lane == 0) mbar_expect_tx(&sm.qst.full, bytes);
    __syncwarp();  // the phase expects the bytes before they can land
    if (lane == 0) bulk_copy(sm.qst.q, args.q + (long long)r0 * H * kHeadBytes, bytes, &sm.qst.full);
    constexpr int PER = (S::N + 31) / 32;  // columns a lane
    uint32_t qs[PER];
    float w[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {  // every load in flight before the first store
      const int col = lane + 32 * i, row = r0 + col / H, h = col % H;
      qs[i] = 0u;
      w[i] = 0.0f;
      if (col < n) {
        qs[i] = query_scales<H>(args, row, h);
        w[i] = head_weight(args, row, h);
      }
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int col = lane + 32 * i;
      if (col < n) {
        sm.qst.qs[col] = qs[i];
        sm.qst.w[col] = w[i];
      }
    }
    mbar_arrive(&sm.qst.full);
    phase ^= 1u;
  }
};

// ------------------------------------------------------------------------------------ consumer

// NARROW: a bfloat16 / float16 out (the float32 result rounded once at the store; the f32 kernel
// code is the same as without narrow outs): one consumer for each, chosen at the kernel's entry.
// Named barriers: 1 the consumers' group setup, 2 + c consumer c's vote, 4 + c converter c's
// vote (SPLIT), and two between the consumers and the converters at each group (SPLIT): the
// converters arrive on kBarGroupDone when they are done with the previous group (the consumers
// wait there before the setup overwrites it), and all meet at kBarGroupReady once it is set up.
constexpr int kBarGroupDone = 6, kBarGroupReady = 7;

template <int R, int H, int CONS, bool NARROW, bool SPLIT = false, bool UNION = false, bool CANON = false,
          bool WHOLE = false>
struct I8Consumer {
  static_assert(!(UNION && SPLIT), "the union body is the fused body's");
  static_assert(!CANON || (H <= I8Shape<R, H, CONS, SPLIT>::NC && !SPLIT),
                "the canonical head tree runs inside one chunk of the fused body");
  using S = I8Shape<R, H, CONS, SPLIT>;
  using Sm = I8Smem<R, H, CONS, SPLIT, UNION>;
  using Stage = I8Stage<S::KEYS>;
  const LaunchArgs& args;
  Sm& sm;
  int c;         // consumer warpgroup
  int ct;        // thread among all consumers
  int warp, lane, g, t;
  bool count_paths = false;  // path_stats given and this is its warpgroup's first thread
  uint32_t ones = 0u;        // kI8Ones (i8_key_word's multiplier)
  RingPos<S::STAGES> ring;
  RingPos<S::TILE_SLOTS> tring;  // SPLIT: the pair's tile ring (fast stages only)
  int r0 = 0, r1 = 0;
  int kend = 0;  // the piece's key end (its stores stay below it, and inside their rows' windows)
  // Per stage, read from sm.keys[c] (registers the stage loop does not have to carry): the
  // group's keys [vbeg, vend) (they vote), khi, the rows' windows.
  int khi = 0;   // a key's largest byte on a fast tile is at most this (0: the group never is fast)
  // KEY_SIGNED: the fast path's keys as signed bytes through the query's tables at the keys'
  // shifts (i8_word in convert_fast: two ALU instructions a word more than the biased form) against the
  // four k-slices alone (mma_chunk: no bias slice, a fifth of a chunk's wgmma) -- the same exact
  // integers -- and a set-up that builds no bias slice. Where one conversion feeds four chunks the
  // wgmma saved outweigh the ALU: r4w12 at 64 heads 2-4% faster, r8w12 at 32 heads 4-7% (its union
  // bodies 1-4%), r2w12 at 128 heads 5-10%, and the set-up without the slice 2-5% (r4w12) and
  // 7-12% (r8w12) more at 8192 keys, less in the op's longer calls (docs/perf-notes.md,
  // forty-second to forty-fifth sessions). At two chunks it pays through the set-up: r2w12 at
  // 64 heads 2-9% faster in the harness but at 64 x 32768 keys (+1.3%), and the V4 MTP 2 / MTP 4
  // rows it serves in the op up to 10% faster (none slower than +0.1%); the canonical and union
  // bodies of two chunks 1-12% faster.
  // The fused table bodies whose chunk holds several rows keep the biased keys (r4 at 32 heads,
  // RS2: 4-6% slower at 16 and 64 sequences; r8 at 16 heads not measured), as do the one-chunk
  // bodies, whose conversion is their own; r1 at 128 heads and r2w16 take signed keys untimed
  // (docs/perf-notes.md, forty-sixth session).
  static constexpr bool KEY_SIGNED =
      !SPLIT && (S::CHUNKS >= 4 || (S::CHUNKS == 2 && (CANON || UNION || H >= S::NC)));
  // The group's output rows: in registers for up to two rows, read from shared memory for more
  // (registers the wider groups' stage loops do not have)
  static constexpr bool ROWS_IN_REGS = R <= 2;
  char* orow[ROWS_IN_REGS ? R : 1];
  OPUS_DEV char* row_out(int r) const { return ROWS_IN_REGS ? orow[ROWS_IN_REGS ? r : 0] : sm.optr[r]; }
  // Row r0 + i's out row for a lane's i (0 or 1) with no branch: a pointer picked by a branch
  // between the wgmma of a stage made ptxas serialize them at r2w12 (C7518).
  OPUS_DEV char* pair_row(int r0, int i) const {
    if constexpr (!ROWS_IN_REGS) return sm.optr[r0 + i];
    char* o = row_out(r0);
    if constexpr (R > 1) o += (long long)i * (row_out(imin(r0 + 1, R - 1)) - o);
    return o;
  }
  // Key n lies in row r's window.
  OPUS_DEV bool in_row(int r, int n) const { return uint32_t(n - sm.keys[c].rbeg[r]) < uint32_t(sm.keys[c].rlen[r]); }
  // UNION: the piece's first union key (its stores stay in [ubeg, kend)), the stage's parity
  // (which copy of the list keys it reads), and union key n of the stage at n0 -> row r's list
  // key in *col; true when row r lists it inside its own window (rbeg / rlen: list keys).
  int ubeg = 0, upar = 0;
  OPUS_DEV bool union_col(int r, int n, int n0, int& col) const {
    const int k = n - n0, lk = sm.un.cur[c][upar][r][k >> 3];
    col = lk + (k & 7);
    return (uint32_t(n - ubeg) < uint32_t(kend - ubeg)) & (lk >= 0) & in_row(r, col);
  }
  // UNION: at a stage's start, its list keys into this warpgroup's copy; the barrier orders the
  // copy before any thread's stores read it.
  OPUS_DEV void union_stage_keys(int slot) {
    if constexpr (UNION) {
      upar ^= 1;
      constexpr int N = R * (S::KEYS / 8);  // 64 words at two rows: half the warpgroup copies
      const int i = ct % 128;
      int* dst = &sm.un.cur[c][upar][0][0];
      const int* src = &sm.un.lkey[c][slot][0][0];
#pragma unroll
      for (int k = 0; k < N; k += 128)
        if (N % 128 == 0 || k + i < N) dst[k + i] = src[k + i];
      bar_sync(2 + c, 128);
    }
  }
  // The fast path's stores of a stage: bit r MB + mb is set when this thread stores its key of M
  // block mb for row r (key_of(mb, t & 1); store_row: lanes t = 0, 1 store, RS2: every lane, of
  // its row of each pair). One register made at the stage's start from the windows in shared
  // memory: a window test at each store held two more registers, or put a shared-memory read's
  // latency before the store.
  uint32_t store_mask = 0;
  OPUS_DEV void stage_stores(int n0) {
    static_assert(R * S::MB <= 32, "one bit a (row, M block)");
    store_mask = 0u;
    if constexpr (RS2) {  // every lane: its key of every row, then its own rows' bits
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int b = sm.keys[c].rbeg[r], l = sm.keys[c].rlen[r];
#pragma unroll
        for (int mb = 0; mb < S::MB; ++mb) {
          const int n = n0 + key_of(mb, t & 1);
          bool mine = uint32_t(n - b) < uint32_t(l);
          if constexpr (UNION) {
            int col;
            mine = union_col(r, n, n0, col);
          }
          if (mine) store_mask |= 1u << (r * S::MB + mb);
        }
      }
      store_mask &= (t & 2) ? ~even_rows() : even_rows();
      return;
    }
    if constexpr (UNION) {
      if (t < 2) {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int mb = 0; mb < S::MB; ++mb) {
            int col;
            if (union_col(r, n0 + key_of(mb, t), n0, col)) store_mask |= 1u << (r * S::MB + mb);
          }
      }
      return;
    }
    if (t < 2) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int b = sm.keys[c].rbeg[r], l = sm.keys[c].rlen[r];
#pragma unroll
        for (int mb = 0; mb < S::MB; ++mb)
          if (uint32_t(n0 + key_of(mb, t) - b) < uint32_t(l)) store_mask |= 1u << (r * S::MB + mb);
      }
    }
  }
  float wreg[S::W_IN_REGS ? S::N / 4 : 1];
  uint32_t qphase = 0;  // QSTAGE: the staged inputs' phase
  OPUS_DEV void qstage_wait() {
    if constexpr (S::QSTAGE) mbar_wait(&sm.qst.full, qphase);
  }
  // QSTAGE: the staged inputs read (or skipped): the buffer back to the stager, whose bulk copy
  // writes what this thread read (the proxy fence first, as release()).
  OPUS_DEV void qstage_done() {
    if constexpr (S::QSTAGE) {
      fence_async_smem();
      mbar_arrive(&sm.qst.empty);
      qphase ^= 1u;
    }
  }

  // Group setup, pass 1: per column its scales, weights and fast verdict; returns the column's.
  OPUS_DEV bool setup_columns(int& qmax_hi, int& wexp_hi, int& wexp_lo) {
    bool ok = true;
    qmax_hi = 0;
    wexp_hi = -127;
    wexp_lo = 127;
#pragma unroll 1
    for (int n = ct; n < S::N; n += S::CT) {
      const int r = n / H, h = n % H, row = r0 + r;
      const bool live = row < r1;
      uint32_t qs = 0x7F7F7F7Fu;
      float wv = 0.0f;
      if (live) {
        if constexpr (S::QSTAGE) {
          qs = sm.qst.qs[n];
          wv = sm.qst.w[n];
        } else {
          qs = query_scales<H>(args, row, h);
          wv = head_weight(args, row, h);
        }
      }
      const int qmin = min4(qs), qmax = max4(qs);
      const float wf = live ? wv * __uint_as_float(uint32_t(imax(qmin, 1)) << 23) : 0.0f;  // w * 2^(qmin - 127)
      const int wexp = int(__float_as_uint(wf) >> 23 & 0xFFu) - 127;
      const bool col_ok = !live || (qmax - qmin <= kI8QuerySpread && qmin >= (CANON ? kI8CanonQLo : kI8Lo) && qmax <= kI8Hi && isfinite(wv) &&
                                    (wf == 0.0f || (wexp >= kI8WExpLo && wexp <= kI8WExpHi)));
      ok = ok && col_ok;
      if (live) {
        qmax_hi = imax(qmax_hi, qmax);
        wexp_hi = imax(wexp_hi, wf == 0.0f ? -127 : wexp);
        wexp_lo = imin(wexp_lo, wf == 0.0f ? 127 : wexp);
      }
      sm.qscale[n] = qs;
      sm.w[n] = wv;
      sm.wfast[S::wslot(n)] = wf;  // scaled by the group's exponent once it is known (scale_weights)
#pragma unroll
      for (int b = 0; b < kScaleBlocks; ++b) sm.sq[b][n] = e8m0_to_f32(uint32_t(byte_of(qs, b)));
    }
    return ok;
  }

  // The fast epilogue's weights for the group's largest |w'| exponent G (-127: no nonzero weight),
  // in each thread's columns of setup_columns: w' * 2^(127 - G) for relu_cell's max form
  // (RELU_ALU), w' * 2^22 for its multiply, and under RELU_MIX the odd heads' w' * 2^-G -- the
  // exponent field moved, exact (a fast group's nonzero |w'| are normal numbers with exponents in
  // [kI8WExpLo, kI8WExpHi], within kI8WeightSpread of G). gscale = 2^(G + 22) takes the max form's
  // and RELU_MIX's head sums back at the store (GSCALE).
  float gscale = 1.0f;
  OPUS_DEV void scale_weights(int wexp_g) {
    const int g = wexp_g < kI8WExpLo ? 0 : wexp_g;
    const int shift = S::RELU_ALU ? 127 - g : 22;
#pragma unroll 1
    for (int n = ct; n < S::N; n += S::CT) {
      float& w = sm.wfast[S::wslot(n)];
      const int sh = RELU_MIX ? ((n & 1) ? -g : 127 - g) : shift;  // RELU_MIX: head n & 1's form
      w = w == 0.0f ? 0.0f : __int_as_float(__float_as_int(w) + (sh << 23));
    }
    gscale = __int_as_float((127 + g + 22) << 23);
  }

  // Column n's bias slice (i8_bias_slice: 32 bytes against the constant key operand), written
  // by the column's lane k (idx % 16). Rows x heads > 64: the 16 lanes write two bytes each
  // (slots 2k, 2k + 1), so the setup's code holds one short slot computation where lane 0 alone
  // would run the unrolled slice once an operand word (r2w16: 6 copies, ~100 instructions each,
  // fetched cold on the way to the first stage) -- 3.5-7% faster at MTP 2; at one chunk with
  // two consumers (r1w12) 3% at batch 1. With three (r1w16) lane 0 writes the whole slice: the
  // 16-lane form moves ptxas's allocation of that kernel's fast stage, +9-20% (docs/perf-notes.md,
  // eighth and seventeenth sessions).
  OPUS_DEV void bias_column(int n, int k, int qsum) {
    uint8_t* core = sm.qb + kScaleBlocks * (S::N * 32) + (n >> 3) * 256 + (n & 7) * 16;  // slots 0..15, +128: 16..31
    if constexpr (S::CHUNKS > 1 || CONS == 2) {
      *reinterpret_cast<uint16_t*>(core + (k >> 3) * 128 + 2 * (k & 7)) = uint16_t(i8_bias_pair(i8_bias_quot(qsum), k));
    } else if (k == 0) {
      uint32_t w[8];
      i8_bias_slice(qsum, w);
      *reinterpret_cast<uint4*>(core) = make_uint4(w[0], w[1], w[2], w[3]);
      *reinterpret_cast<uint4*>(core + 128) = make_uint4(w[4], w[5], w[6], w[7]);
    }
  }

  // The constant key operand of the bias slice in the A registers: slot p is lane t = p / 4 % 4's
  // byte p % 4 of registers 0 and 1 (p < 16) or 2 and 3 (wgmma_probe.cu checks the layout).
  OPUS_DEV void bias_operand(uint32_t (&a)[4]) const {
    uint32_t lo = 0u, hi = 0u;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      lo |= i8_bias_key(4 * t + b) << (8 * b);
      hi |= i8_bias_key(16 + 4 * t + b) << (8 * b);
    }
    a[0] = a[1] = lo;
    a[2] = a[3] = hi;
  }

  // Pass 2: the query operand (shifted when the group is fast), its bias slice (fast groups)
  // and the canonical path's factors. A thread's words are all read first (their loads in flight
  // together: a rolled loop waited one global-memory latency a word), then converted.
  // N * 16 and CT are multiples of 32: a warp's lanes are all in an iteration or all out, and
  // the 16 lanes of one column (idx / 16) sit in one half-warp for the shuffles below.
  static constexpr int OPERAND_WORDS = (S::N * 16 + S::CT - 1) / S::CT;  // a thread's words
  OPUS_DEV void load_operand(uint32_t (&words)[OPERAND_WORDS]) const {
#pragma unroll
    for (int i = 0; i < OPERAND_WORDS; ++i) {
      const int idx = ct + i * S::CT, n = idx >> 4, blk = (idx >> 2) & 3, j = idx & 3;
      const int row = r0 + n / H, h = n % H;
      words[i] = 0u;
      if (idx < S::N * 16 && row < r1) {
        if constexpr (S::QSTAGE)
          words[i] = sm.qst.q[idx];  // word idx of the live rows' bytes
        else
          words[i] = *reinterpret_cast<const uint32_t*>(args.q + ((long long)row * H + h) * kHeadBytes + 16 * blk + 4 * j);
      }
    }
  }
  // Converts a thread's words (the kernels without COL_SETUP, below). In Free and Table mode groups
  // of 8 or more words a thread (two rows and up) run it as a loop two words a turn: a CTA sets up
  // one or two groups, each at the instruction fetch's pace, and the rolled body took 3-4 us off
  // r2w12's set-up on the H200 (docs/perf-notes.md, fifteenth session). Prefill sets a group up for
  // every piece, ~30 a CTA with the code warm after the first, and there the unrolled body's
  // overlapped loads and selects win (r4w12 3-4% faster, r2w12 1-2%: sixteenth session): both bodies
  // are built, the launch's mode picks.
  static constexpr bool ROLL_SETUP = OPERAND_WORDS >= 8;
  template <bool ROLL>
  OPUS_DEV void setup_operand(bool fast, const uint32_t (&words)[OPERAND_WORDS]) {
    if constexpr (ROLL)
      setup_turns<2, true>(fast, words);
    else if constexpr (OPERAND_WORDS <= 4)
      setup_turns<OPERAND_WORDS, false>(fast, words);
    else
      setup_each(fast, words);
  }
  // W words a turn as independent chains: every word's table load and permutes first, then every
  // word's stores and column sum, with no branch on the verdict (a canonical group's bias column
  // is written and never read; KEY_SIGNED bodies build no bias slice: what that saves is said
  // at KEY_SIGNED). Against one word a turn with the verdict's branches it took the
  // set-up's conversion from ~1.3 to ~0.9 us on r1w12 and from ~4 to ~1.6 us on r2w12, and the
  // kernels 1-4% (one row) and 3-10% (two and four rows) off 1-8 sequences x 8192 keys on the
  // H200; at 64 sequences r2w12 +1-2%, r4w12 -1-3% (docs/perf-notes.md, thirty-third session).
  // Unrolled, one turn holds every word; kept to four words, as r1 H128's eight took its stack
  // frame from 64 to 72 bytes.
  template <int W, bool ROLL>
  OPUS_DEV void setup_turns(bool fast, const uint32_t (&words)[OPERAND_WORDS]) {
    static_assert(OPERAND_WORDS % W == 0, "whole turns");
#pragma unroll 1
    for (int i0 = 0; i0 < OPERAND_WORDS; i0 += W) {
      uint32_t lo[W], hi[W];
      int shift[W];
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const int i = i0 + w, idx = imin(ct + i * S::CT, S::N * 16 - 1);  // a thread past the words converts a real one, stores none
        const int n = idx >> 4, blk = (idx >> 2) & 3;
        const uint32_t qs = sm.qscale[n];
        shift[w] = (int(byte_of(qs, blk)) - min4(qs)) & -int(fast);
        // rolled, a run-time index into the words would put them in local memory: selects instead
        i8_word(ROLL ? pick(words, i) : words[i], sm.tables[shift[w]], lo[w], hi[w]);
      }
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const int idx = ct + (i0 + w) * S::CT;
        if (S::N * 16 % S::CT != 0 && idx >= S::N * 16) break;  // warp-uniform
        const int n = idx >> 4, blk = (idx >> 2) & 3, j = idx & 3;
        const int slice = SPLIT ? blk : j, slot = SPLIT ? j : blk;  // the order of I8Smem::qb
        uint8_t* core = sm.qb + slice * (S::N * 32) + (n >> 3) * 256 + (n & 7) * 16 + 4 * slot;
        *reinterpret_cast<uint32_t*>(core) = lo[w];
        *reinterpret_cast<uint32_t*>(core + 128) = hi[w];
        if (j == 0) sm.uq[blk][n] = __uint_as_float(uint32_t(127 - 2 - shift[w]) << 23);
        if constexpr (!KEY_SIGNED) {  // the bias slice: unread where the keys are signed
          int qsum = __dp4a(int(lo[w]), 0x01010101, 0) + __dp4a(int(hi[w]), 0x01010101, 0);
#pragma unroll
          for (int m = 8; m > 0; m >>= 1) qsum += __shfl_xor_sync(0xFFFFFFFFu, qsum, m);
          bias_column(n, idx & 15, qsum);
        }
      }
    }
  }
  // One word at a time, the column sum only in a fast group: the unrolled body of more than four
  // words. Its stores are written out as setup_turns' are: one helper for both moved ptxas's
  // schedule of the Prefill r2 bodies (32 instructions more), which this form was measured as.
  OPUS_DEV void setup_each(bool fast, const uint32_t (&words)[OPERAND_WORDS]) {
#pragma unroll
    for (int i = 0; i < OPERAND_WORDS; ++i) {
      const int idx = ct + i * S::CT;
      if (idx >= S::N * 16) break;  // warp-uniform
      const int n = idx >> 4, blk = (idx >> 2) & 3, j = idx & 3;
      const uint32_t qs = sm.qscale[n];
      const int shift = fast ? byte_of(qs, blk) - min4(qs) : 0;
      uint32_t lo, hi;
      i8_word(words[i], sm.tables[shift], lo, hi);
      const int slice = SPLIT ? blk : j, slot = SPLIT ? j : blk;  // the order of I8Smem::qb
      uint8_t* core = sm.qb + slice * (S::N * 32) + (n >> 3) * 256 + (n & 7) * 16 + 4 * slot;
      *reinterpret_cast<uint32_t*>(core) = lo;
      *reinterpret_cast<uint32_t*>(core + 128) = hi;
      if (j == 0) sm.uq[blk][n] = __uint_as_float(uint32_t(127 - 2 - shift) << 23);
      if (!KEY_SIGNED && fast) {  // uniform: the group's verdict; unread where the keys are signed
        int qsum = __dp4a(int(lo), 0x01010101, 0) + __dp4a(int(hi), 0x01010101, 0);
#pragma unroll
        for (int m = 8; m > 0; m >>= 1) qsum += __shfl_xor_sync(0xFFFFFFFFu, qsum, m);
        bias_column(n, idx & 15, qsum);
      }
    }
  }

  // COL_SETUP, the operand a column at a time: where the keys are signed (no bias slice, so no
  // column sum across lanes) and a column's four 16-byte blocks split evenly over TPC = 1, 2 or 4
  // consumer threads (among them r2w12 and r4w12 at 64 heads and r8w12 at 32, in every family but
  // the split body, and r1w12 and r2w12 at 128 heads), a thread loads its BPT whole blocks (one
  // 16-byte load each), reads the column's scale word once and stores each k-slice's run of its
  // blocks' words with one 16-, 8- or 4-byte store for lo and one for hi: r4w12 4 loads and 8
  // stores a thread where the word-at-a-time body has 16 and 32. A group's set-up runs cold (a
  // Prefill CTA sets up one group), so its code's length is its time (measured:
  // docs/opus-backend.md, "The i8 body"). The same body in every mode; words[4 * bi + j] is word
  // j of block b0 + bi of the thread's column n.
  static constexpr int TPC = S::CT % S::N == 0 ? S::CT / S::N : 0;
  static constexpr bool COL_SETUP = KEY_SIGNED && !SPLIT && (TPC == 1 || TPC == 2 || TPC == 4);
  static constexpr int BPT = COL_SETUP ? 4 / TPC : 1;
  OPUS_DEV void load_operand_col(uint32_t (&words)[OPERAND_WORDS]) const {
    static_assert(!COL_SETUP || (OPERAND_WORDS == 4 * BPT && !S::QSTAGE), "a thread's words: its blocks");
    // q is 16-byte aligned (checks.h) and a row's heads are contiguous
    const int n = ct / TPC, b0 = (ct % TPC) * BPT, row = r0 + n / H;
    const uint4* src = reinterpret_cast<const uint4*>(args.q + ((long long)r0 * H + n) * kHeadBytes) + b0;
#pragma unroll
    for (int bi = 0; bi < BPT; ++bi) {
      const uint4 v = row < r1 ? src[bi] : make_uint4(0u, 0u, 0u, 0u);
      words[4 * bi] = v.x;
      words[4 * bi + 1] = v.y;
      words[4 * bi + 2] = v.z;
      words[4 * bi + 3] = v.w;
    }
  }
  OPUS_DEV void setup_operand_col(bool fast, const uint32_t (&words)[OPERAND_WORDS]) {
    const int n = ct / TPC, b0 = (ct % TPC) * BPT;
    const uint32_t qs = sm.qscale[n];
    const int qmin = min4(qs);
    uint32_t lo[4][BPT], hi[4][BPT];
#pragma unroll
    for (int bi = 0; bi < BPT; ++bi) {
      const int shift = (byte_of(qs, b0 + bi) - qmin) & -int(fast);
      const I8Table tab = sm.tables[shift];
#pragma unroll
      for (int j = 0; j < 4; ++j) i8_word(words[4 * bi + j], tab, lo[j][bi], hi[j][bi]);
      sm.uq[b0 + bi][n] = __uint_as_float(uint32_t(127 - 2 - shift) << 23);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // slice j, slots b0 .. b0 + BPT - 1 of column n
      uint8_t* core = sm.qb + j * (S::N * 32) + (n >> 3) * 256 + (n & 7) * 16 + 4 * b0;
      if constexpr (BPT == 4) {
        *reinterpret_cast<uint4*>(core) = make_uint4(lo[j][0], lo[j][1], lo[j][2], lo[j][3]);
        *reinterpret_cast<uint4*>(core + 128) = make_uint4(hi[j][0], hi[j][1], hi[j][2], hi[j][3]);
      } else if constexpr (BPT == 2) {
        *reinterpret_cast<uint2*>(core) = make_uint2(lo[j][0], lo[j][1]);
        *reinterpret_cast<uint2*>(core + 128) = make_uint2(hi[j][0], hi[j][1]);
      } else {
        *reinterpret_cast<uint32_t*>(core) = lo[j][0];
        *reinterpret_cast<uint32_t*>(core + 128) = hi[j][0];
      }
    }
  }

  OPUS_DEV void setup_group(const Piece& p, int gbeg, int gend, int kbeg) {
    r0 = p.r0;
    r1 = imin(p.r1, p.r0 + R);
    if constexpr (SPLIT)
      bar_sync(kBarGroupDone, S::THREADS - 128);  // every consumer and converter is done with the previous group
    else
      bar_sync(1, S::CT);  // every consumer is done with the previous group
    qstage_wait();  // QSTAGE: the staged inputs (else: read below)
    // every global read of the setup issued here, in flight together
    uint32_t words[OPERAND_WORDS];
    if constexpr (COL_SETUP)
      load_operand_col(words);
    else
      load_operand(words);
    int wbeg = 0, wend = 0;
    long long wbase = 0;
    const int wr = ct % 128;  // each warpgroup's threads 0 .. R - 1 write its copy of row wr's window
    if constexpr (UNION) {  // the rows' own windows (list keys); the piece's bounds are union keys
      if (wr < R) row_window_in(args, args.list_ends, args.list_starts, args.list_cap, r0 + wr, r0 + wr < r1, wbeg, wend, wbase);
      ubeg = kbeg;
    } else {
      if (wr < R) row_window(args, r0 + wr, r0 + wr < r1, wbeg, wend, wbase);
    }
    if (wr == 0) {
      sm.keys[c].vbeg = gbeg;
      sm.keys[c].vend = gend;
    }
    int qmax_hi, wexp_hi, wexp_lo;
    const bool mine = setup_columns(qmax_hi, wexp_hi, wexp_lo);
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
      qmax_hi = imax(qmax_hi, warp_xor(qmax_hi, m));
      wexp_hi = imax(wexp_hi, warp_xor(wexp_hi, m));
      wexp_lo = imin(wexp_lo, warp_xor(wexp_lo, m));
    }
    if (lane == 0) {
      sm.red[ct >> 5][0] = qmax_hi;
      sm.red[ct >> 5][1] = wexp_hi;
      sm.red[ct >> 5][2] = wexp_lo;
    }
    if (wr < R) {
      const int b = UNION ? wbeg : imax(wbeg, kbeg);  // stores stay inside the piece's own tiles (UNION: union_col)
      sm.keys[c].rbeg[wr] = b;
      sm.keys[c].rlen[wr] = imax((UNION ? wend : imin(wend, kend)) - b, 0);
    }
    if (ct < R) sm.optr[ct] = static_cast<char*>(args.out) + wbase * kOutBytes<NARROW>;
    const bool cols_fast = bar_and(1, S::CT, mine);
    int qmax_g = 0, wexp_g = -127, wlo_g = 127;
#pragma unroll
    for (int i = 0; i < CONS * 4; ++i) {
      qmax_g = imax(qmax_g, sm.red[i][0]);
      wexp_g = imax(wexp_g, sm.red[i][1]);
      wlo_g = imin(wlo_g, sm.red[i][2]);
    }
    const bool fast = cols_fast && wexp_g - wlo_g <= kI8WeightSpread;  // uniform
    khi = fast ? imin(kI8Hi, imin(kI8PairHi - qmax_g, kI8WeightKey - wexp_g)) : 0;
    if (fast) scale_weights(wexp_g);
    if constexpr (CANON) {  // the canonical terms' lower key bound, in bits 16.. of the stage's word
      const int klo = imax(kI8CanonKLo, 3 - wlo_g);
      if (klo > khi) khi = 0;
      if (wr == 0) sm.keys[c].khi = khi > 0 ? khi | klo << 16 : 0;
    } else if (wr == 0) {
      sm.keys[c].khi = khi;  // read back each stage (the last barrier below orders it)
    }
    if constexpr (COL_SETUP)
      setup_operand_col(fast, words);
    else if (ROLL_SETUP && args.mode != kModePrefill)
      setup_operand<ROLL_SETUP>(fast, words);
    else
      setup_operand<false>(fast, words);
    fence_async_smem();
    bar_sync(SPLIT ? kBarGroupReady : 1, SPLIT ? S::THREADS - 128 : S::CT);  // SPLIT: the converters read khi
    qstage_done();
    if constexpr (ROWS_IN_REGS) {
#pragma unroll
      for (int r = 0; r < R; ++r) orow[r] = sm.optr[r];
    }
    if constexpr (S::W_IN_REGS) {
#pragma unroll
      for (int ch = 0; ch < S::CHUNKS; ++ch)
#pragma unroll
        for (int i = 0; i < S::NT; ++i)
#pragma unroll
          for (int e = 0; e < 2; ++e) wreg[(ch * S::NT + i) * 2 + e] = sm.wfast[ch * S::NC + 8 * i + 2 * t + e];
    }
  }

  // The descriptor of k-slice j (4: the bias slice), chunk ch: a compile-time constant, from the
  // operand's offset in I8Smem and the dynamic shared memory's place in the CTA's window
  // (kI8SmemBase, which the kernel checks at entry). From the symbol's address instead, ptxas
  // computed every descriptor of every stage again (address arithmetic, then two R2UR a wgmma).
  static OPUS_DEV constexpr uint64_t b_desc(int j, int ch) {
    return smem_desc_at(kI8SmemBase + uint32_t(offsetof(Sm, qb) + j * (S::N * 32) + ch * (S::NC / 8) * 256), 128, 256);
  }

  // Keys of this thread in M block mb: rows g (k = 0) and g + 8 (k = 1) of the warp's 16.
  OPUS_DEV int key_of(int mb, int k) const { return 64 * mb + 16 * warp + g + 8 * k; }
  // Byte offset in a stage of block t of key_of(0, 0) (eight lanes read two whole keys: 32 banks).
  OPUS_DEV int raw_offset() const { return key_of(0, 0) * kHeadBytes + 16 * t; }
  static OPUS_DEV constexpr int raw_step(int mb, int k) { return (64 * mb + 8 * k) * kHeadBytes; }
  // This thread's key bytes of M block mb (block t of keys key_of(mb, 0), key_of(mb, 1)).
  static OPUS_DEV void load_raw(const uint8_t* raw_base, int mb, uint4 (&raw)[2]) {
#pragma unroll
    for (int k = 0; k < 2; ++k) raw[k] = *reinterpret_cast<const uint4*>(raw_base + raw_step(mb, k));
  }
  // The vote: lane t of a quad judges VK of the quad's keys (its 2 MB keys key_of(mb, k)), the v-th
  // (v < VK) being key_of(2v + t / 2, t % 2). So key_of(mb, k) is judged by quad lane
  // judge(mb, k) as its (mb / 2)-th, and a shuffle inside the quad hands its offsets over.
  OPUS_DEV int judged_key(int v) const { return key_of(2 * v + (t >> 1), t & 1); }
  static OPUS_DEV constexpr int judge(int mb, int k) { return 2 * (mb & 1) + k; }
  // Lane q of this thread's quad: its value of v.
  template <class T>
  static OPUS_DEV T quad_get(T v, int q) { return __shfl_sync(0xFFFFFFFFu, v, q, 4); }

  // A fragments of M block mb: a[j] for k-slice j; registers 0/2 hold key k0's block t word j
  // (elements 0..3 / 4..7), 1/3 key k1's. The canonical path's: signed, unshifted.
  OPUS_DEV void convert(const uint4& raw0, const uint4& raw1, uint32_t (&a)[4][4]) const {
    const I8Table t0 = sm.tables[0];
    const uint32_t w0[4] = {raw0.x, raw0.y, raw0.z, raw0.w}, w1[4] = {raw1.x, raw1.y, raw1.z, raw1.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      i8_word(w0[j], t0, a[j][0], a[j][2]);
      i8_word(w1[j], t0, a[j][1], a[j][3]);
    }
  }

  // The fast path's key operand from the two keys' tables of block t's shifts (block_inputs), laid
  // out as convert's: biased unsigned bytes (i8_key_word; KEY_SIGNED: signed bytes, i8_word).
  OPUS_DEV void convert_fast(const uint4 (&raw)[2], const I8Table (&tb)[2], uint32_t (&a)[4][4]) const {
    const uint32_t w0[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w}, w1[4] = {raw[1].x, raw[1].y, raw[1].z, raw[1].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (KEY_SIGNED) {
        i8_word(w0[j], tb[0], a[j][0], a[j][2]);
        i8_word(w1[j], tb[1], a[j][1], a[j][3]);
      } else {
        i8_key_word(w0[j], tb[0], ones, a[j][0], a[j][2]);
        i8_key_word(w1[j], tb[1], ones, a[j][1], a[j][3]);
      }
    }
  }

  // Canonical path: the signed key operand against the query's four k-slices.
  template <int NC>
  OPUS_DEV void mma_chunk(int32_t (&acc)[NC / 2], const uint32_t (&a)[4][4], int ch) const {
#pragma unroll
    for (int j = 0; j < 4; ++j) WgmmaI8<NC>::run(acc, a[j], b_desc(j, ch), j > 0);
  }
  // Fast path: the bias slice first (it starts the accumulator at -64 * the column's operand
  // sum), then the biased key operand against the four k-slices: the exact dot product
  // (KEY_SIGNED: the signed key operand, mma_chunk's four k-slices alone).
  template <int NC>
  OPUS_DEV void mma_chunk_fast(int32_t (&acc)[NC / 2], const uint32_t (&a)[4][4], int ch) const {
    if constexpr (KEY_SIGNED) {
      mma_chunk<NC>(acc, a, ch);
      return;
    }
    uint32_t ab[4];
    bias_operand(ab);
    WgmmaI8<NC, true>::start(acc, ab, b_desc(kScaleBlocks, ch));
#pragma unroll
    for (int j = 0; j < 4; ++j) WgmmaI8<NC, true>::run(acc, a[j], b_desc(j, ch), true);
  }

  // SPLIT: the same chain with the key operand's four k-slices from the pair's tile (a_desc: the
  // M block's slice 0); the bias slice's constant key operand stays in registers.
  template <int NC>
  OPUS_DEV void mma_chunk_ss(int32_t (&acc)[NC / 2], uint64_t a_desc, int ch) const {
    uint32_t ab[4];
    bias_operand(ab);
    WgmmaI8<NC, true>::start(acc, ab, b_desc(kScaleBlocks, ch));
#pragma unroll
    for (int j = 0; j < 4; ++j) WgmmaI8<NC, true>::run_ss(acc, a_desc + uint64_t((j * 2048) >> 4), b_desc(j, ch));
  }

  // Waits until at most PENDING committed wgmma groups are in flight, then pins `a`, the
  // accumulator of one that has retired, so no read of it moves above the wait.
  template <int PENDING>
  static OPUS_DEV void retired(int32_t (&a)[S::ACC]) {
    wgmma_wait<PENDING>();
#pragma unroll
    for (int i = 0; i < S::ACC; ++i) pin(a[i]);
  }

  // ---- the fast path, one unit (an M block's 64 keys x one chunk of NC columns) at a time.
  // Unit u of a stage is M block u / CHUNKS, chunk u % CHUNKS, accumulated in acc[u & 1]; M
  // block mb's A fragments are afr[mb & 1] (two M blocks' operands live, whatever MB). The wgmma
  // of unit u runs while the epilogue of unit u - 1 does, and M block mb + 1 is converted while
  // the last unit of M block mb runs its wgmma (afr[(mb + 1) & 1] last fed M block mb - 1, whose
  // units have all retired by then). The stage drains before it ends: a wgmma in flight across
  // the stage loop makes ptxas serialize every wgmma of the kernel (C7514/C7518).
  static constexpr int UNITS = S::MB * S::CHUNKS;
  static constexpr int RPC = S::NC >= H ? S::NC / H : 1;  // rows a chunk ends (H = 2 NC: one)
  // RS2: where a chunk holds two rows (32 heads at two rows and up, 16 at two), every lane of a
  // quad stores one (row, key) sum of the unit, its reduction a reduce-scatter (store_unit): three
  // shuffles and one store a unit where store_row takes two shuffles and a store a row (on the
  // H200 r4w12 at 32 heads 19% faster, r2w12 1%: docs/perf-notes.md, twenty-fifth session; pairing
  // the one-row units of 64 heads the same way held a register and lost 0-10%). Not CANON.
  static constexpr bool RS2 = !CANON && RPC == 2;
  // PRED_STORES: the fast stores (store_row, RS2's store_unit) make the address and the value on
  // every lane and store through one predicated st.global (store_key_if), no branch, so a group's
  // out pointer (shared memory at four and eight rows) is read beside the reduction, off the next
  // unit's wgmma path (on the H200 3-7% at 32 and 64 heads, i8c r4w12 at 32 heads 18-20%:
  // docs/perf-notes.md, twenty-ninth session). The groups whose rows span two chunks and the union
  // bodies below eight rows keep the branch (with the predicate their loops spilled or their
  // stacks grew), r1w16 at 64 heads (ptxas serialized its wgmma for registers, C7512), and the
  // fast one-row bodies at 32 heads (their pointers sit in registers, the branch's stores were
  // already off the path: with the predicate r1w16 was 1% slower on the H200 and on the H100,
  // thirtieth session; the canonical r1w12 there was not timed and keeps the predicate).
  static constexpr bool PRED_STORES = !SPLIT && (!UNION || R == 8) && (!ROWS_IN_REGS || RS2 || S::CHUNKS == 1)
                                     && !(R == 1 && ((H == 64 && CONS == 3) || (H == 32 && !CANON)));
  // key n of the out row at `row` under predicate p: one predicated store, no branch
  OPUS_DEV void store_key_if(bool p, char* row, int n, float v) const {
    if constexpr (NARROW) {
      const uint16_t h = narrow_out(args, v);
      asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %0, 0;\n @q st.global.b16 [%1], %2;\n}\n"
                   ::"r"(int(p)), "l"(reinterpret_cast<uint16_t*>(row) + n), "h"(h));
    } else {
      asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %0, 0;\n @q st.global.f32 [%1], %2;\n}\n"
                   ::"r"(int(p)), "l"(reinterpret_cast<float*>(row) + n), "f"(v));
    }
  }
  // RS2: the (row, M block) bits of the even rows, which lanes t = 0, 1 store (t = 2, 3 the odd).
  static constexpr OPUS_HD uint32_t even_rows() {
    uint32_t m = 0u;
    for (int r = 0; r < R; r += 2) m |= ((1u << S::MB) - 1u) << (r * S::MB);
    return m;
  }
  int32_t acc[2][S::ACC];
  uint32_t afr[2][4][4];
  float first_chunk[2];          // H = 2 NC: the row's first-chunk sums of keys g, g + 8

  // relu(I) as one instruction on the accumulator's bits, which read as a float are I * 2^-149
  // (a subnormal) for 0 <= I < 2^23 and a NaN for I < 0 (|I| < 2^21):
  // - RELU_ALU: the max with +0 (it returns the other operand for a NaN), I * 2^-149, against
  //   weights carrying 2^(127 - G): a product is I * w' * 2^-(G + 22), at least 2^-126 (normal,
  //   rounded as the unscaled product would be) while the group's |w'| exponents lie within
  //   kI8WeightSpread = 104 of G, the sums are the unscaled ones times the same power of two
  //   (sums of such products are multiples of 2^-149, exact when small), and the store
  //   multiplies by gscale = 2^(G + 22);
  // - else a saturating multiply by 2^127, I * 2^-22 (exact and below 1; the saturation sends the
  //   NaN to +0), against weights carrying 2^22.
  // Either way the products and sums are those of relu(I) * w', scaled by a power of two.
  // RELU_MIX: the even heads' cells take the max form and the odd heads' the multiply, their
  // weights w' * 2^-G, so both products are I * w' * 2^-(G + 22) and the store takes gscale back
  // as RELU_ALU's does: half the relus on the ALU pipe's issue slots, half on the FMA pipe's. On the
  // H100 r4w12's decode body at 64 heads 2-6% faster at 1-16 sequences, level at 64 and 256 (why
  // only at few CTAs is not known: ncu shows the pipes' shares move, neither pipe near its peak);
  // its Prefill form 1-2% slower, r2w12 2-3% slower at 1-64 sequences, r4w12 at 32 heads 3.5%
  // slower at 8 and r8w12 at 32 heads level, so only there (docs/perf-notes.md, fifty-fifth to
  // fifty-seventh sessions).
  static constexpr bool RELU_MIX = R == 4 && H == 64 && !WHOLE && !UNION && !CANON && !SPLIT;
  static constexpr bool GSCALE = S::RELU_ALU || RELU_MIX;  // the fast sums carry 2^-(G + 22)
  static OPUS_DEV float relu_cell(int32_t i, bool max_form = S::RELU_ALU) {
    float y;
    if (max_form)
      asm("max.f32 %0, %1, 0f00000000;" : "=f"(y) : "f"(__int_as_float(i)));
    else
      asm("mul.rn.sat.f32 %0, %1, 0f7F000000;" : "=f"(y) : "f"(__int_as_float(i)));
    return y;
  }

  // The thread's w' of chunk ch (its columns 8i + 2t, 8i + 2t + 1). Where they live in shared
  // memory (!W_IN_REGS) fast_stage reads them before the wait for the unit's wgmma rather than
  // after it; that moved where the warps wait more than how long (r2w16 -1.5%, others unchanged:
  // docs/perf-notes.md, ninth session).
  OPUS_DEV void unit_weights(int ch, float (&wv)[S::NT][2]) const {
    if constexpr (S::W_IN_REGS) {
#pragma unroll
      for (int i = 0; i < S::NT; ++i) {
        wv[i][0] = wreg[(ch * S::NT + i) * 2];
        wv[i][1] = wreg[(ch * S::NT + i) * 2 + 1];
      }
    } else if constexpr (S::W_VEC) {
#pragma unroll
      for (int v = 0; v < S::NT / 2; ++v) {
        const float4 w4 = *reinterpret_cast<const float4*>(&sm.wfast[S::wslot(ch * S::NC + 16 * v + 2 * t)]);  // columns 16v + 2t + (0, 1, 8, 9)
        wv[2 * v][0] = w4.x;
        wv[2 * v][1] = w4.y;
        wv[2 * v + 1][0] = w4.z;
        wv[2 * v + 1][1] = w4.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < S::NT; ++i) {
        const float2 w2 = *reinterpret_cast<const float2*>(&sm.wfast[ch * S::NC + 8 * i + 2 * t]);
        wv[i][0] = w2.x;
        wv[i][1] = w2.y;
      }
    }
  }

  // relu of the exact dot, times w', summed over the thread's heads of the chunk's rows: two
  // FMA chains a key (even and odd heads), joined at the end.
  OPUS_DEV void unit_sums(const int32_t (&ac)[S::ACC], const float (&wv)[S::NT][2], float (&rs)[RPC][2]) const {
    if constexpr (CANON) {  // docs/numerics.md's halving tree: levels over i in the thread, then the quad, then e
      constexpr int NTR = H / 8;  // a row's 8-column groups (H <= NC): columns 8i + 2t + e
#pragma unroll
      for (int r = 0; r < RPC; ++r) {
        float th[2][2];  // [kk][e]: the thread's levels of key kk's sum over its columns of parity e
#pragma unroll
        for (int kk = 0; kk < 2; ++kk)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float v[NTR / 2];
#pragma unroll
            for (int i = 0; i < NTR / 2; ++i) {  // level 1: fma(x_j, w_j, x_(j + H/2) * w_(j + H/2))
              const int a = r * NTR + i, b = a + NTR / 2;
              v[i] = fmaf(relu_cell(ac[4 * a + 2 * kk + e]), wv[a][e], fmul_rn(relu_cell(ac[4 * b + 2 * kk + e]), wv[b][e]));
            }
#pragma unroll
            for (int m = NTR / 4; m >= 1; m >>= 1)  // levels H/4 .. 8: v[j] + v[j + m]
#pragma unroll
              for (int i = 0; i < m; ++i) v[i] = fadd_rn(v[i], v[i + m]);
            th[kk][e] = v[0];
          }
        // The quad's levels as a reduce-scatter (each add takes the operands the canonical tree
        // gives it; an add commutes, so the lane that does it does not matter): level 4 (lanes t,
        // t ^ 2) keeps e = me of both keys, level 2 (t, t ^ 1) keeps key mk, level 1 (e = 0 and 1:
        // lanes t, t ^ 2) leaves every lane the sum of the key store_row has it store
        const int me = (t >> 1) & 1, mk = t & 1;
        float b[2];
#pragma unroll
        for (int kk = 0; kk < 2; ++kk)  // selects: an array indexed at run time would go to local memory
          b[kk] = fadd_rn(me ? th[kk][1] : th[kk][0], warp_xor(me ? th[kk][0] : th[kk][1], 2));
        const float s2 = fadd_rn(mk ? b[1] : b[0], warp_xor(mk ? b[0] : b[1], 1));
        rs[r][0] = rs[r][1] = fadd_rn(s2, warp_xor(s2, 2));
      }
      return;
    }
    float part[RPC][2][2];
#pragma unroll
    for (int r = 0; r < RPC; ++r)
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) part[r][kk][0] = part[r][kk][1] = 0.0f;
#pragma unroll
    for (int i = 0; i < S::NT; ++i) {
      const int lr = H >= S::NC ? 0 : (8 * i) / H;
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          part[lr][kk][e] = fmaf(relu_cell(ac[4 * i + 2 * kk + e], S::RELU_ALU || (RELU_MIX && e == 0)), wv[i][e],
                                 part[lr][kk][e]);
    }
#pragma unroll
    for (int r = 0; r < RPC; ++r)
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) rs[r][kk] = fadd_rn(part[r][kk][0], part[r][kk][1]);
  }

  // The quad's partial sums of row r for keys g, g + 8 of M block mb -> lanes t = 0, 1 store
  // key g + 8t, times its scale (CANON: every lane holds its key's sum already, unit_sums).
  OPUS_DEV void store_row(int r, const float (&rs)[2], int n0, int mb, float scale) const {
    const bool k_own = t & 1;
    float v = rs[0];
    if constexpr (!CANON) {
      v = fadd_rn(k_own ? rs[1] : rs[0], warp_xor(k_own ? rs[0] : rs[1], 1));
      v = fadd_rn(v, warp_xor(v, 2));
    }
    int n = n0 + key_of(mb, k_own ? 1 : 0);
    if constexpr (GSCALE) v = fmul_rn(v, gscale);
    if constexpr (PRED_STORES) {
      if constexpr (UNION) union_col(r, n, n0, n);  // the mask holds the window test
      store_key_if(store_mask >> (r * S::MB + mb) & 1u, row_out(r), n, fmul_rn(v, scale));
      return;
    }
    if (store_mask >> (r * S::MB + mb) & 1u) {
      if constexpr (UNION) union_col(r, n, n0, n);  // the mask holds the window test
      store_key<NARROW>(args, row_out(r), n, fmul_rn(v, scale));
    }
  }

  // The epilogue of unit u (its wgmma has retired): its rows' sums into rs; false when the unit
  // holds a row's first chunk only (H = 2 NC: kept in first_chunk, stored with the second).
  OPUS_DEV bool unit_rows(int u, const float (&wv)[S::NT][2], float (&rs)[RPC][2]) {
    const int ch = u % S::CHUNKS;
    unit_sums(acc[u & 1], wv, rs);
    if constexpr (H == 2 * S::NC) {
      if ((ch & 1) == 0) {
        first_chunk[0] = rs[0][0];
        first_chunk[1] = rs[0][1];
        return false;
      }
      rs[0][0] = fadd_rn(first_chunk[0], rs[0][0]);
      rs[0][1] = fadd_rn(first_chunk[1], rs[0][1]);
    }
    return true;
  }
  // Unit u's stores; u counts from M block mb0. RS2: level t ^ 1 keeps key t & 1 of both rows,
  // level t ^ 2 row t >> 1 -- store_row's additions in its order, the scaling before the last
  // (gscale and the factor are powers of two: the same sum). Else the quad's reduction a row.
  OPUS_DEV void store_unit(int u, const float (&rs)[RPC][2], int n0, float scale, int mb0 = 0) const {
    const int mb = mb0 + u / S::CHUNKS, ch = u % S::CHUNKS;
    if constexpr (RS2) {
      const int lr = (t >> 1) & 1, k = t & 1;  // this lane's row of the unit and key
      float h[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        h[i] = fadd_rn(k ? rs[i][1] : rs[i][0], warp_xor(k ? rs[i][0] : rs[i][1], 1));
        if constexpr (GSCALE) h[i] = fmul_rn(h[i], gscale);
        h[i] = fmul_rn(h[i], scale);
      }
      const float v = fadd_rn(lr ? h[1] : h[0], warp_xor(lr ? h[0] : h[1], 2));
      const int r = 2 * ch + lr;
      int n = n0 + key_of(mb, k);
      if constexpr (PRED_STORES) {
        if constexpr (UNION) union_col(r, n, n0, n);  // the mask holds the window test
        store_key_if(store_mask >> (r * S::MB + mb) & 1u, pair_row(2 * ch, lr), n, v);
        return;
      }
      if (store_mask >> (r * S::MB + mb) & 1u) {
        if constexpr (UNION) union_col(r, n, n0, n);  // the mask holds the window test
        store_key<NARROW>(args, pair_row(2 * ch, lr), n, v);
      }
      return;
    }
#pragma unroll
    for (int lr = 0; lr < RPC; ++lr) store_row(H >= S::NC ? ch * S::NC / H : ch * RPC + lr, rs[lr], n0, mb, scale);
  }

  // The fast path of a stage. raw: M block 0's key bytes (read before the vote); offsets[v] /
  // factor[v]: the block offsets from the smallest scale byte (one byte each) and 2^(kmin - 129)
  // of this lane's v-th judged key, handed to the quad lanes that convert and store it. Each later
  // M block's bytes are read just before its conversion (READ_AHEAD: in the M block before's last
  // unit), and the stage is released after the last one's read. The stage runs as spans of SPAN
  // M blocks (FAST_SPAN; WHOLE: one span of them all, I8Shape::PREFILL_WHOLE): a span's units are
  // unrolled, the spans a rolled loop, and each span drains its wgmma before the next (a wgmma in
  // flight across a loop's edge makes ptxas serialize every wgmma of the kernel: C7514/C7518).
  static constexpr int SPAN = WHOLE ? S::MB : S::FAST_SPAN;
  static_assert(SPAN % 2 == 0 && S::MB % SPAN == 0, "spans of whole pairs of M blocks");
  OPUS_DEV void fast_stage(const uint8_t* raw_base, uint4 (&raw)[2], const uint32_t (&offsets)[S::VK],
                           const float (&factor)[S::VK], int n0, uint64_t* empty) {
    if constexpr (SPAN == S::MB) {
      fast_span(0, raw_base, raw, offsets, factor, n0, empty);
    } else {
#pragma unroll 1
      for (int sp = 0; sp < S::MB / SPAN; ++sp) fast_span(sp, raw_base, raw, offsets, factor, n0, empty);
    }
  }
  // The fast path's inputs of M block mb, the span's ml-th: the store factor of the key this lane
  // stores into scale[ml & 1], its raw bytes (M block 0's came with the vote) and the two keys'
  // conversion tables for block t's shifts (0..2 on every scored key), from the offsets' quad
  // shuffles.
  OPUS_DEV void block_inputs(int ml, int mb, const uint8_t* raw_base, const uint32_t (&offsets)[S::VK],
                             const float (&factor)[S::VK], uint4 (&raw)[2], I8Table (&tb)[2], float (&scale)[2]) const {
    const uint32_t off = pick(offsets, mb >> 1);
    int d[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) d[k] = int(quad_get(off, judge(ml, k)) >> (8 * t)) & 3;
    scale[ml & 1] = quad_get(pick(factor, mb >> 1), judge(ml, t & 1));
    if (mb > 0) load_raw(raw_base, mb, raw);
#pragma unroll
    for (int k = 0; k < 2; ++k) tb[k] = KEY_SIGNED ? sm.tables[d[k]] : sm.ktables[d[k]];
  }
  // v[i] for a runtime i (selects: a register array indexed at run time goes to local memory)
  template <class T, int N>
  static OPUS_DEV T pick(const T (&v)[N], int i) {
    T r = v[0];
#pragma unroll
    for (int j = 1; j < N; ++j) r = i == j ? v[j] : r;
    return r;
  }

  // Span sp: M blocks SPAN sp .. SPAN sp + SPAN - 1, one unit (an M block x a chunk) at a time. A
  // unit's sums are stored in the next unit's segment (ptxas interleaves the store's shuffles
  // with that unit's conversion), the last two units' after the span's last wgmma wait, together
  // (stored before it, the third unit's shuffles had nothing to overlap).
  // READ_AHEAD: M block ml + 1's inputs (block_inputs) are read in M block ml's last unit, after
  // its wgmma is issued and before the wait for the unit before it, so that its first unit
  // converts at once -- ncu had the consumers waiting on these reads and shuffles just before the
  // conversion, not on the tensor core; ptxas then also moves the conversion up between the last
  // unit's wgmma instructions. On the H100 r4w12's Prefill form 2.3-2.5% faster, r2w12 2.3%,
  // r4w12's decode body and r8w12 level (the same read ahead without the tables: 1-3% slower in
  // Prefill). Not at one chunk, where the unit before is M block ml - 1's and its store factor
  // shares the slot, nor in the canonical and union bodies, where ptxas then moves registers
  // through local memory inside the stage loop (i8c's four-row Prefill form 12 accesses, the union
  // r8 bodies at 16 heads 3-4; docs/perf-notes.md, fifty-fifth and fifty-sixth sessions).
  static constexpr bool READ_AHEAD = S::CHUNKS >= 2 && !CANON && !UNION;
  OPUS_DEV void fast_span(int sp, const uint8_t* raw_base, uint4 (&raw)[2], const uint32_t (&offsets)[S::VK],
                          const float (&factor)[S::VK], int n0, uint64_t* empty) {
    constexpr int U = SPAN * S::CHUNKS;  // units of a span
    const int mb0 = SPAN * sp;           // 0 when the span is the whole stage
    float scale[2] = {0.0f, 0.0f};  // M block mb's in scale[mb & 1]: the factor of the key this lane stores
    float pend[RPC][2];
    bool pending = false;  // a compile-time fact of each unrolled unit
    int pend_u = 0;
    I8Table tb[2];  // the conversion tables of the M block converted next
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ml = u / S::CHUNKS, ch = u % S::CHUNKS, mb = mb0 + ml;  // mb & 1 == ml & 1
      const float pend_scale = scale[(pend_u / S::CHUNKS) & 1];  // before this unit's M block takes its slot
      if (ch == 0) {
        if (!READ_AHEAD || ml == 0) block_inputs(ml, mb, raw_base, offsets, factor, raw, tb, scale);
        if (mb == S::MB - 1) release(empty);  // the stage's last read (READ_AHEAD: a unit ago, but at ml = 0)
        convert_fast(raw, tb, afr[ml & 1]);
      }
      if (pending) store_unit(pend_u, pend, n0, pend_scale, mb0);
      wgmma_fence();
      mma_chunk_fast<S::NC>(acc[u & 1], afr[ml & 1], ch);
      wgmma_commit();
      if (READ_AHEAD && ch == S::CHUNKS - 1 && ml + 1 < SPAN)
        block_inputs(ml + 1, mb + 1, raw_base, offsets, factor, raw, tb, scale);
      if (u > 0) {
        float wv[S::NT][2];
        unit_weights((u - 1) % S::CHUNKS, wv);
        retired<1>(acc[(u - 1) & 1]);
        pending = unit_rows(u - 1, wv, pend);
        pend_u = u - 1;
      }
    }
    float wv[S::NT][2];
    unit_weights((U - 1) % S::CHUNKS, wv);
    retired<0>(acc[(U - 1) & 1]);
    if (pending) store_unit(pend_u, pend, n0, scale[(pend_u / S::CHUNKS) & 1], mb0);
    float rs[RPC][2];
    if (unit_rows(U - 1, wv, rs)) store_unit(U - 1, rs, n0, scale[(SPAN - 1) & 1], mb0);
  }

  // SPLIT: the fast path of a stage on the tile the pair's converter wrote. Unit u's wgmma is
  // issued before unit u - 2's stores (a store is a memory operation ptxas keeps in order with
  // the wgmma statements: before the issue, its shuffles' latency held the tensor core idle), and
  // the tile slot is handed back once the stage's last wgmma has retired.
  OPUS_DEV void fast_stage_split(int n0) {
    using Tiles = I8Tiles<CONS, S::TILE_SLOTS, S::TILE_BYTES, S::KEYS, SPLIT>;
    const int ts = tring.slot;
    const uint64_t tile = smem_desc_at(kI8SmemBase + uint32_t(offsetof(Sm, tiles) + offsetof(Tiles, tile)) +
                                           uint32_t((c * S::TILE_SLOTS + ts) * S::TILE_BYTES), 128, 256);
    float scale[2] = {0.0f, 0.0f};  // as fast_stage's
    float pend[RPC][2];
    bool pending = false;
    int pend_u = 0;
#pragma unroll
    for (int u = 0; u < UNITS; ++u) {
      const int mb = u / S::CHUNKS, ch = u % S::CHUNKS;
      const float pend_scale = scale[(pend_u / S::CHUNKS) & 1];
      if (ch == 0) scale[mb & 1] = sm.tiles.factor[c][ts][key_of(mb, t & 1)];  // the key this lane stores
      wgmma_fence();
      mma_chunk_ss<S::NC>(acc[u & 1], tile + uint64_t((mb * 8192) >> 4), ch);
      wgmma_commit();
      if (pending) store_unit(pend_u, pend, n0, pend_scale);
      if (u > 0) {
        float wv[S::NT][2];
        unit_weights((u - 1) % S::CHUNKS, wv);
        retired<1>(acc[(u - 1) & 1]);
        pending = unit_rows(u - 1, wv, pend);
        pend_u = u - 1;
      }
    }
    float wv[S::NT][2];
    unit_weights((UNITS - 1) % S::CHUNKS, wv);
    retired<0>(acc[(UNITS - 1) & 1]);
    mbar_arrive(&sm.tiles.empty[c][ts]);
    if (pending) store_unit(pend_u, pend, n0, scale[(pend_u / S::CHUNKS) & 1]);
    float rs[RPC][2];
    if (unit_rows(UNITS - 1, wv, rs)) store_unit(UNITS - 1, rs, n0, scale[(S::MB - 1) & 1]);
  }

  // The canonical head tree of one (row, key) over x[H/8][2] (heads 8i + 2t + e).
  OPUS_DEV float head_tree(const float (&x)[H / 8][2], int r) const {
    float v[H / 16][2];
#pragma unroll
    for (int i = 0; i < H / 16; ++i) {
      const float2 wa = *reinterpret_cast<const float2*>(&sm.w[r * H + 8 * i + 2 * t]);
      const float2 wb = *reinterpret_cast<const float2*>(&sm.w[r * H + 8 * (i + H / 16) + 2 * t]);
      v[i][0] = fma_rn(x[i][0], wa.x, fmul_rn(x[i + H / 16][0], wb.x));
      v[i][1] = fma_rn(x[i][1], wa.y, fmul_rn(x[i + H / 16][1], wb.y));
    }
#pragma unroll
    for (int len = H / 16; len > 1; len >>= 1)
#pragma unroll
      for (int i = 0; i < len / 2; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) v[i][e] = fadd_rn(v[i][e], v[i + len / 2][e]);
    float u[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      u[e] = fadd_rn(v[0][e], warp_xor(v[0][e], 2));  // heads j, j + 4
      u[e] = fadd_rn(u[e], warp_xor(u[e], 1));        // heads j, j + 2
    }
    return fadd_rn(u[0], u[1]);                       // heads j, j + 1
  }

  // Canonical path of one M block: one block at a time (the other blocks' key lanes zeroed),
  // then docs/numerics.md steps 2-5 in order.
  OPUS_DEV void canonical_mb(const uint32_t (&a)[4][4], uint32_t sc0, uint32_t sc1, int n0, int mb) {
    float sk[2][kScaleBlocks];
#pragma unroll
    for (int b = 0; b < kScaleBlocks; ++b) {
      sk[0][b] = e8m0_to_f32(uint32_t(byte_of(sc0, b)));
      sk[1][b] = e8m0_to_f32(uint32_t(byte_of(sc1, b)));
    }
    float keep[S::ACC];  // H = 2 NC: the relu'd block sums of the row's first chunk
#pragma unroll  // a rolled loop around wgmma makes ptxas serialize every wgmma (C7520)
    for (int ch = 0; ch < S::CHUNKS; ++ch) {
      float s[S::ACC];
#pragma unroll
      for (int b = 0; b < kScaleBlocks; ++b) {
        uint32_t am[4][4];  // not SPLIT: block b is lane t = b's, the other lanes zeroed
        const uint32_t mask = t == b ? 0xFFFFFFFFu : 0u;
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int k = 0; k < 4; ++k) am[j][k] = a[j][k] & mask;
        int32_t blk[S::ACC];
        wgmma_fence();
        if constexpr (SPLIT)
          WgmmaI8<S::NC>::start(blk, a[b], b_desc(b, ch));  // block b is k-slice b of the SPLIT order
        else
          mma_chunk<S::NC>(blk, am, ch);
        wgmma_commit();
        retired<0>(blk);
#pragma unroll
        for (int i = 0; i < S::NT; ++i) {
          const int col = ch * S::NC + 8 * i + 2 * t;
          const float2 u = *reinterpret_cast<const float2*>(&sm.uq[b][col]);
          const float2 q = *reinterpret_cast<const float2*>(&sm.sq[b][col]);
#pragma unroll
          for (int kk = 0; kk < 2; ++kk)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int idx = 4 * i + 2 * kk + e;
              const float pb = fmul_rn(__int2float_rn(blk[idx]), e ? u.y : u.x);  // the exact block partial
              const float tv = fmul_rn(fmul_rn(pb, sk[kk][b]), e ? q.y : q.x);
              s[idx] = b == 0 ? tv : fadd_rn(s[idx], tv);
            }
        }
      }
#pragma unroll
      for (int i = 0; i < S::ACC; ++i) s[i] = relu_nan(s[i]);
      if constexpr (H == 2 * S::NC) {
        if ((ch & 1) == 0) {
#pragma unroll
          for (int i = 0; i < S::ACC; ++i) keep[i] = s[i];
          continue;
        }
      }
      constexpr int ROWS_HERE = H <= S::NC ? S::NC / H : 1;  // rows that end in this chunk
#pragma unroll
      for (int rr = 0; rr < ROWS_HERE; ++rr) {
        const int r = H <= S::NC ? (ch * S::NC) / H + rr : ch / 2;
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          float x[H / 8][2];
#pragma unroll
          for (int i = 0; i < H / 8; ++i)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              if constexpr (H <= S::NC) {
                x[i][e] = s[4 * (rr * (H / 8) + i) + 2 * kk + e];
              } else {
                const int il = i % S::NT;
                x[i][e] = i < S::NT ? keep[4 * il + 2 * kk + e] : s[4 * il + 2 * kk + e];
              }
            }
          const float val = head_tree(x, r);
          const int n = n0 + key_of(mb, kk);
          if constexpr (UNION) {
            int col;
            if (t == kk && union_col(r, n, n0, col)) store_key<NARROW>(args, sm.optr[r], col, val);
          } else {
            if (t == kk && in_row(r, n)) store_key<NARROW>(args, sm.optr[r], n, val);
          }
        }
      }
    }
  }

  // The canonical path of a stage: its M blocks one after another, each one's bytes and scales
  // read just before it is converted; the stage is released after the last M block.
  OPUS_DEV void canonical_stage(const Stage& st, const uint8_t* raw_base, uint4 (&raw)[2], int n0, uint64_t* empty) {
#pragma unroll 1  // rolled: one copy of the canonical body (each M block drains its wgmma)
    for (int m = 0; m < S::MB; ++m) {
      if (m > 0) load_raw(raw_base, m, raw);
      const uint32_t sc0 = st.scale[key_of(m, 0)], sc1 = st.scale[key_of(m, 1)];
      convert(raw[0], raw[1], afr[0]);
      canonical_mb(afr[0], sc0, sc1, n0, m);
    }
    release(empty);
  }

  // SPLIT: the same with the tile order's A fragments: lane t holds word t of each raw block of
  // its keys (four 4-byte reads a key), k-slice j being block j.
  OPUS_DEV void canonical_stage_split(const Stage& st, int n0, uint64_t* empty) {
    const uint8_t* base = st.raw + key_of(0, 0) * kHeadBytes + 4 * t;
    const I8Table tb = sm.tables[0];
#pragma unroll 1  // rolled, as canonical_stage
    for (int m = 0; m < S::MB; ++m) {
      uint32_t w[2][4];
#pragma unroll
      for (int k = 0; k < 2; ++k)
#pragma unroll
        for (int j = 0; j < 4; ++j) w[k][j] = *reinterpret_cast<const uint32_t*>(base + raw_step(m, k) + 16 * j);
      const uint32_t sc0 = st.scale[key_of(m, 0)], sc1 = st.scale[key_of(m, 1)];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        i8_word(w[0][j], tb, afr[0][j][0], afr[0][j][2]);
        i8_word(w[1][j], tb, afr[0][j][1], afr[0][j][3]);
      }
      canonical_mb(afr[0], sc0, sc1, n0, m);
    }
    release(empty);
  }

  // Hands a ring slot back to the producer once this thread's last read of it is issued. The
  // proxy fence comes first: the producer refills the slot with bulk copies (the async proxy),
  // and an arrive alone does not order this thread's shared-memory loads still in flight before
  // them -- a refill overwrote words under such loads in a prototype of this pipeline
  // (docs/perf-notes.md, "The split on real data"). Placing the arrive after the conversion that
  // uses the words is no remedy either: ptxas moves the conversion's arithmetic below it.
  static OPUS_DEV void release(uint64_t* empty) {
    fence_async_smem();
    mbar_arrive(empty);
  }

  OPUS_DEV void stage(int n0) {
    mbar_wait(&sm.full[c][ring.slot], ring.phase);
    const int vbeg = sm.keys[c].vbeg, vend = sm.keys[c].vend;
    khi = sm.keys[c].khi;
    const Stage& st = sm.stage[c][ring.slot];
    uint64_t* const empty = &sm.empty[c][ring.slot];
    const uint8_t* raw_base = st.raw + raw_offset();
    uint4 raw[2];  // M block 0's bytes, read first: both paths convert them first
    load_raw(raw_base, 0, raw);
    // Each lane judges VK keys (judged_key: a warp owns 16 keys of each M block, a quad the two of
    // each that its lanes convert) and hands their block offsets from the smallest scale byte (one
    // byte each) and their factors to the quad's lanes that convert and store them.
    // Keys outside the group's [vbeg, vend) are not scored: their bytes (stale, or the page's
    // other keys) take no part in the vote; the stage's other keys do, whichever piece stores them.
    uint32_t my_scale[S::VK];
    int my_kmin[S::VK];
#pragma unroll
    for (int v = 0; v < S::VK; ++v) {
      my_scale[v] = st.scale[judged_key(v)];
      my_kmin[v] = min4(my_scale[v]);
    }
    const int klo = CANON ? khi >> 16 : kI8Lo;  // CANON: the word holds both bounds
    if constexpr (CANON) khi &= 0xFFFF;
    bool fast = false;
    if (khi > 0) {  // uniform: the group's verdict
      bool ok = true;
#pragma unroll
      for (int v = 0; v < S::VK; ++v)
        ok &= i8_key_fast(my_kmin[v], max4(my_scale[v]), n0 + judged_key(v), vbeg, vend, khi, klo);
      fast = bar_and(2 + c, 128, ok);  // the stage's one vote: all its keys in [vbeg, vend)
    }
    union_stage_keys(ring.slot);  // UNION: before this stage's stores
    if (count_paths) atomicAdd(&args.path_stats[fast ? 0 : 1], 1ull);
    if (fast) {
      uint32_t offsets[S::VK];
      float factor[S::VK];
#pragma unroll
      for (int v = 0; v < S::VK; ++v) {
        offsets[v] = i8_key_offsets(my_scale[v], my_kmin[v]);
        factor[v] = i8_key_factor(my_kmin[v]);
      }
      stage_stores(n0);
      fast_stage(raw_base, raw, offsets, factor, n0, empty);
    } else {
      canonical_stage(st, raw_base, raw, n0, empty);
    }
  }

  // SPLIT: a stage as its converter hands it on: the verdict from the tile slot; a fast stage
  // from the tile, a canonical one from the raw slot (which only this warpgroup releases then).
  OPUS_DEV void stage_split(int n0) {
    const int ts = tring.slot;
    mbar_wait(&sm.tiles.full[c][ts], tring.phase);
    const bool fast = sm.tiles.fast[c][ts] != 0;  // uniform
    if (count_paths) atomicAdd(&args.path_stats[fast ? 0 : 1], 1ull);
    if (fast) {
      stage_stores(n0);
      fast_stage_split(n0);
    } else {
      mbar_arrive(&sm.tiles.empty[c][ts]);  // the verdict is read
      mbar_wait(&sm.full[c][ring.slot], ring.phase);
      canonical_stage_split(sm.stage[c][ring.slot], n0, &sm.empty[c][ring.slot]);
    }
    tring.advance();
  }

  OPUS_DEV void piece(const Piece& p) {
    int gbeg, gend;
    group_keys<R, UNION>(args, p, gbeg, gend);
    const int kbeg = piece_first_key(p, gbeg);
    kend = imin(gend, p.t1 * kBlockN);
    if (kbeg >= kend) {  // the producer skips it too; QSTAGE: its staged inputs go back unread
      qstage_wait();
      qstage_done();
      return;
    }
    setup_group(p, gbeg, gend, kbeg);
#pragma unroll 1
    for (int n0 = stage_start<S::MB>(kbeg / kBlockN) + S::KEYS * c; n0 < kend; n0 += S::KEYS * CONS, ring.advance()) {
      if constexpr (SPLIT)
        stage_split(n0);
      else
        stage(n0);
    }
  }
};

// ------------------------------------------------------------------------------------ converter

// SPLIT: converter warpgroup c takes consumer c's stages: it votes on each and hands every
// stage on through the pair's next tile slot (I8Tiles) -- a fast one as the biased INT8 tile and
// its keys' factors (then releases the raw slot), a canonical one as its verdict alone (the
// consumer converts and releases that raw slot itself).
template <int R, int H, int CONS>
struct I8Converter {
  using S = I8Shape<R, H, CONS, true>;
  using Sm = I8Smem<R, H, CONS, true>;
  using Stage = I8Stage<S::KEYS>;
  const LaunchArgs& args;
  Sm& sm;
  int c;   // converter (and consumer pair)
  int lt;  // thread in the warpgroup
  uint32_t ones = 0u;  // kI8Ones
  RingPos<S::STAGES> ring;
  RingPos<S::TILE_SLOTS> tring;

  // A 16-byte access is served eight lanes at a time, so lanes 8p .. 8p + 7 take keys g = 0..7
  // of their warp's eight and raw blocks b = (g / 2 + p) % 4: eight different 16-byte bank slots
  // both when they read the stage (key g's block b at slot (4g + b) % 8) and when they write the
  // tile (slot g). Unit i (0..7) of a thread: key 64 (i / 2) + 16 warp + g + 8 (i % 2), row
  // 16 warp + g + 8 (i % 2) of M block i / 2.
  OPUS_DEV int g() const { return lt % 8; }
  OPUS_DEV int blk() const { return (lt % 8 / 2 + lt % 32 / 8) % 4; }
  OPUS_DEV int unit_key(int i) const { return 64 * (i / 2) + 16 * (lt / 32) + g() + 8 * (i % 2); }

  // The stage's vote (the rule of I8Consumer::stage). Lane 8p + g judges the keys of units 2p
  // and 2p + 1 of the four lanes 8p' + g that convert them (a key's four blocks): its smallest
  // scale byte and the blocks' offsets from it (one byte each), which those lanes take by shuffle.
  static constexpr int JUDGED = 2;
  static_assert(S::KEYS == 256, "eight units a thread, two judged");
  OPUS_DEV int judged_key(int v) const { return unit_key(2 * (lt % 32 / 8) + v); }
  OPUS_DEV bool vote(const Stage& st, int n0, int (&kmin)[JUDGED], uint32_t (&offs)[JUDGED]) const {
    const int vbeg = sm.keys[c].vbeg, vend = sm.keys[c].vend, khi = sm.keys[c].khi;
    bool ok = true;
#pragma unroll
    for (int v = 0; v < JUDGED; ++v) {
      const int k = judged_key(v);
      const uint32_t sc = st.scale[k];
      const int kmax = max4(sc);
      kmin[v] = min4(sc);
      offs[v] = i8_key_offsets(sc, kmin[v]);
      ok &= i8_key_fast(kmin[v], kmax, n0 + k, vbeg, vend, khi);
    }
    return khi > 0 && bar_and(4 + c, 128, ok);  // khi uniform: the group's verdict
  }

  // A fast stage into the next tile slot: each unit's raw block, shifted by its offset from the
  // key's smallest scale byte (the vote's, by shuffle; 0..2 on a key that is scored, a key
  // outside the group's keys may take 3, never stored), as two 16-byte core rows. The raw slot
  // and the tile are handed on after one proxy fence (the slot's refill and the wgmma are both
  // the async proxy).
  OPUS_DEV void convert_stage(const Stage& st, uint64_t* empty, const int (&kmin)[JUDGED],
                               const uint32_t (&offs)[JUDGED]) {
    const int ts = tring.slot, b = blk();
    uint4 w[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = *reinterpret_cast<const uint4*>(st.raw + unit_key(i) * kHeadBytes + 16 * b);
    mbar_wait(&sm.tiles.empty[c][ts], tring.phase ^ 1u);
    if (lt == 0) sm.tiles.fast[c][ts] = 1;
#pragma unroll
    for (int v = 0; v < JUDGED; ++v) sm.tiles.factor[c][ts][judged_key(v)] = i8_key_factor(kmin[v]);
    uint8_t* const row = sm.tiles.tile[c][ts] + b * 2048 + (lt / 32) * 512 + g() * 16;  // unit 0's core row
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t o = __shfl_sync(0xFFFFFFFFu, offs[i & 1], 8 * (i >> 1) + g());  // unit i's key, judged there
      const I8Table tb = sm.ktables[(o >> (8 * b)) & 3u];
      const uint32_t x[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
      uint32_t lo[4], hi[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) i8_key_word(x[j], tb, ones, lo[j], hi[j]);
      uint8_t* const at = row + (i / 2) * 8192 + (i % 2) * 256;
      *reinterpret_cast<uint4*>(at) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      *reinterpret_cast<uint4*>(at + 128) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    }
    fence_async_smem();
    mbar_arrive(empty);
    mbar_arrive(&sm.tiles.full[c][ts]);
    tring.advance();
  }
  // A canonical stage: its verdict only (the consumer converts the raw slot and releases it).
  OPUS_DEV void pass_stage() {
    const int ts = tring.slot;
    mbar_wait(&sm.tiles.empty[c][ts], tring.phase ^ 1u);
    if (lt == 0) sm.tiles.fast[c][ts] = 0;
    mbar_arrive(&sm.tiles.full[c][ts]);
    tring.advance();
  }

  OPUS_DEV void piece(const Piece& p) {
    int gbeg, gend;
    group_keys<R>(args, p, gbeg, gend);
    const int kbeg = piece_first_key(p, gbeg), kend = imin(gend, p.t1 * kBlockN);
    if (kbeg >= kend) return;  // the consumers skip it too
    bar_arrive(kBarGroupDone, S::THREADS - 128);   // done with the previous group's sm.keys
    bar_sync(kBarGroupReady, S::THREADS - 128);    // this group's are written
#pragma unroll 1
    for (int n0 = stage_start<S::MB>(kbeg / kBlockN) + S::KEYS * c; n0 < kend; n0 += S::KEYS * CONS, ring.advance()) {
      mbar_wait(&sm.full[c][ring.slot], ring.phase);
      const Stage& st = sm.stage[c][ring.slot];
      int kmin[JUDGED];
      uint32_t offs[JUDGED];
      if (vote(st, n0, kmin, offs))
        convert_stage(st, &sm.empty[c][ring.slot], kmin, offs);
      else
        pass_stage();
    }
  }
};

// A consumer thread's pieces (ct: its index among the consumer threads).
template <int R, int H, int CONS, bool NARROW, bool SPLIT, bool UNION = false, bool CANON = false, bool WHOLE = false>
OPUS_DEV void i8_consume(const LaunchArgs& args, I8Smem<R, H, CONS, SPLIT, UNION>& sm, PieceWalk walk, int ct, int lane) {
  I8Consumer<R, H, CONS, NARROW, SPLIT, UNION, CANON, WHOLE> cons{args, sm};
  cons.c = ct / 128;
  cons.ct = ct;
  cons.warp = (ct % 128) / 32;
  cons.lane = lane;
  cons.g = lane >> 2;
  cons.t = lane & 3;
  cons.count_paths = args.path_stats != nullptr && ct % 128 == 0;
  cons.ones = kI8Ones;
  Piece p;
  while (walk.next(args, R, p))
    if (p.r1 > p.r0 && p.t1 > p.t0) cons.piece(p);
}

// WHOLE: the Prefill form of a shape with I8Shape::PREFILL_WHOLE (the launcher's pick in Prefill).
// EVERY_MODE: the same code under a name of its own, family i8w's kernel in every mode (kernels.cu).
template <int R, int H, int CONS, bool SPLIT = false, bool UNION = false, bool CANON = false, bool WHOLE = false,
          bool EVERY_MODE = false>
__global__ void __launch_bounds__(I8Shape<R, H, CONS, SPLIT>::THREADS, 1) mqa_logits_sm90_i8(const LaunchArgs args) {
  static_assert(!WHOLE || (I8Shape<R, H, CONS, SPLIT>::PREFILL_WHOLE && !UNION), "a Prefill form where the shape has one");
  static_assert(!EVERY_MODE || (WHOLE && !CANON), "family i8w: the fused body's Prefill form");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = I8Shape<R, H, CONS, SPLIT>;
  auto& sm = *reinterpret_cast<I8Smem<R, H, CONS, SPLIT, UNION>*>(i8_smem);
  const SeqView sv = seq_view(args);
  const int tid = threadIdx.x, lane = tid & 31;
  if (tid == 0 && (smem_addr(i8_smem) & 0x3FFFFu) != kI8SmemBase) __trap();  // the descriptors' base
  if (tid == 0) {
#pragma unroll
    for (int c = 0; c < CONS; ++c)
#pragma unroll
      for (int s = 0; s < S::STAGES; ++s) {
        mbar_init(&sm.full[c][s], 32);
        mbar_init(&sm.empty[c][s], 128);  // SPLIT: the converter (fast stages) or the consumer (canonical)
      }
    if constexpr (SPLIT) {
#pragma unroll
      for (int c = 0; c < CONS; ++c)
#pragma unroll
        for (int s = 0; s < S::TILE_SLOTS; ++s) {
          mbar_init(&sm.tiles.full[c][s], 128);
          mbar_init(&sm.tiles.empty[c][s], 128);
        }
    }
  }
  if constexpr (S::QSTAGE) {
    if (tid == 0) {
      mbar_init(&sm.qst.full, 32);
      mbar_init(&sm.qst.empty, S::CT);
    }
  }
  if (tid < 4) sm.tables[tid] = i8_table(tid);
  if (tid >= 4 && tid < 8) sm.ktables[tid - 4] = i8_key_table(tid - 4);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  if (args.mode == kModeFree && tid < 32) {
    const CtaRange cr = cta_range_scan(sv, R, blockIdx.x, gridDim.x, lane);
    if (lane == 0) {
      sm.range[0] = cr.u_begin;
      sm.range[1] = cr.u_end;
      sm.range[2] = cr.b;
      sm.range[3] = cr.base;
    }
  }
  __syncthreads();
  PieceWalk walk = make_walk(args, sv, R, sm.range);
  Piece p;
  if (tid < 128) {
    regs_shrink<S::PRODUCER_REGS>();
    if constexpr (S::QSTAGE) {
      if (tid / 32 == 3) {  // CONS <= 3: warp 3 produces for no consumer
        I8QStager<R, H, CONS, UNION> stager{args, sm, lane};
        while (walk.next(args, R, p))
          if (p.r1 > p.r0 && p.t1 > p.t0) stager.piece(p);
        return;
      }
    }
    if (tid / 32 >= CONS) return;
    const bool bulk = (reinterpret_cast<uintptr_t>(args.kv_scale) & 15) == 0;
    I8Producer<R, H, CONS, SPLIT, UNION> prod{args, sm, tid / 32, lane, bulk};
    while (walk.next(args, R, p))
      if (p.r1 > p.r0 && p.t1 > p.t0) prod.piece(p);
    asm volatile("cp.async.wait_all;" ::: "memory");  // nothing in flight when the warp exits
  } else if (SPLIT && tid < 128 + 128 * CONS) {
    if constexpr (SPLIT) {
      regs_shrink<S::CONVERTER_REGS>();
      I8Converter<R, H, CONS> conv{args, sm, (tid - 128) / 128, tid % 128};
      conv.ones = kI8Ones;
      while (walk.next(args, R, p))
        if (p.r1 > p.r0 && p.t1 > p.t0) conv.piece(p);
    }
  } else {
    regs_grow<S::CONSUMER_REGS>();
    const int ct = tid - 128 - (SPLIT ? 128 * CONS : 0);
    if (args.out_kind == kOutF32)
      i8_consume<R, H, CONS, false, SPLIT, UNION, CANON, WHOLE>(args, sm, walk, ct, lane);
    else
      i8_consume<R, H, CONS, true, SPLIT, UNION, CANON, WHOLE>(args, sm, walk, ct, lane);
  }
#else
  __trap();  // built for another arch: the launcher never routes here
#endif
}

}  // namespace sm90
}  // namespace opus
