// The opus instance registry: the one list of kernels this backend offers. Plain C++ (no CUDA,
// HIP or torch): kernels.cu instantiates the entries of the platform it is compiled for,
// bindings.cpp exports every entry to Python, and backends/opus/instances.py parses this file
// at import (before the extension is built); tests/opus_host_check.cpp prints the compiled
// entries so tests/test_opus_build.py can check the parse against them.
//
// Format (what instances.py reads; docs/adding-an-instance.md): one
//   X(id, name, arch, family, rows, warps, keys, stages, ctas, heads_mask)
// a line inside OPUS_INSTANCES, ids distinct, numbers decimal or 0x hex, `arch` a token with an
// OPUS_ARCH_NAME_<arch> define below; comments only as /* ... */ within the macro.
//
// Names: <arch>_<family>_r<rows>w<warps>
//   arch    sm90 | gfx942 | gfx950  the target the body is written for
//   family  f16  E2M1 encoded exactly in FP16 (encode.h): sm90 two mma.sync m16n8k16 a scale
//                block, gfx942 two v_mfma_f32_16x16x16_f16 a scale block
//           fp8  sm90 one FP8 E4M3 mma.sync m16n8k32 a scale block (sm_90 lowers it to
//                conversions + FP16 MMAs, yet it measured faster than f16 on decode:
//                docs/opus-backend.md); gfx942 one v_mfma_f32_16x16x32_fp8_fp8 a scale block
//                on E4M3 FNUZ bytes (half the MFMAs of gfx942 f16)
//           fp8fold gfx942 the fp8 MFMAs on FNUZ operands carrying each block's scale offset
//                (from the vector's largest, <= 2^6), the four chained into one accumulator;
//                not canonical (docs/numerics.md, "Scaled MFMA tiles"); fp8's steps elsewhere
//           fold sm90 f16 MMAs on operands carrying each block's scale relative to the
//                largest of its key / head, where that is exact (docs/numerics.md, "Folded
//                scales"); the f16 path elsewhere. rows x heads <= 128 (two query operands)
//           i8   sm90a INT8 wgmma (kernel_sm90_i8.cuh): a producer warpgroup gathers key tiles
//                into stage rings (bulk copies), two (w12) or three (w16: 160 registers a thread,
//                one row of <= 64 heads) consumer warpgroups convert them to INT8 and run one
//                exact K = 128 chain a tile on stages (OPUS_I8_STAGE_KEYS below) where every key's
//                block scales differ by shifts of 0-2 and a head's by 0-3 (not the canonical
//                order; within the tolerance), the canonical steps elsewhere. One CTA an SM.
//                w20 is the split body: two converter warpgroups write INT8 tiles that two MMA
//                warpgroups read from shared memory (one row of 64 heads)
//           i8u  sm90a the i8 body on the union of each sequence's row tables (gather mode: the
//                candidate layers' rows list their own entries, mostly from one pool): a
//                pre-pass builds the union (kernel_sm90_union.cuh), the body scores it as one
//                non-gather sequence whose rows share every key tile, and stores each row's
//                logit of a key at the key's place in the row's own list. Free mode only
//           i8c  sm90a the i8 body whose fast tiles sum a key's heads in the canonical tree's
//                order under a rule that keeps every canonical term exact and normal: there the
//                exact integer block sum is the canonical one, so every tile carries the
//                canonical bits (docs/numerics.md, "Integer tiles"). Heads <= 64 (one chunk a row)
//           i8uc sm90a the union body (i8u) with i8c's fast tiles: canonical. Free mode only
//           i8w  sm90a the i8 body with its fast stage unrolled whole in every mode (the
//                Prefill form, I8Shape::PREFILL_WHOLE, in Table and Free launches too): faster
//                where a CTA runs many stages (long contexts), slower where few (its longer
//                code's first pass: docs/opus-backend.md); in Prefill it runs i8's Prefill
//                form's code. Only the shapes that have a Prefill form
//           mxf4 one scaled MFMA 32x32x64 a scale block on raw E2M1 operands, unit
//                hardware scales (the E8M0 scales are applied on the VALU)
//           mxsc gfx950 two scaled MFMAs 32x32x64 over the whole head_dim with the real E8M0
//                block scales as scale operands, where every scale byte of the tile lies in
//                96..158 and the group's weights below 2^40 (not the canonical order; within
//                the tolerance: docs/numerics.md, "Scaled MFMA tiles"); mxf4's steps elsewhere
//   rows    rows of one sequence per row group (they share every loaded key tile)
//   warps   warps (sm_90, 32 lanes) or waves (gfx942 / gfx950, 64 lanes) a CTA
// Every instance uses 64-key tiles (the schedule records count units in 64-key tiles) and two
// stages (the next tile's loads are in flight while the current one is scored); a future
// instance that differs there adds n<keys> / s<stages> to its name.
//
// Heads mask: bit 0 = 16, bit 1 = 32, bit 2 = 64, bit 3 = 128, with rows x heads <= 256 (the
// group's converted query operands live in shared memory; rows are scored one after another,
// so the accumulators hold one row's heads). gfx942 keeps rows x heads <= 128: its FP16 query
// operands take 256 B a (row, head) and its CUs have 64 KB of LDS.
#pragma once

#define OPUS_INSTANCES(X)                                                      \
  /* id  name               arch    family rows warps keys stages ctas heads */ \
  X(0, sm90_f16_r1w4,      sm90,   f16,  1, 4, 64, 2, 4, 0xF)                  \
  X(1, sm90_f16_r2w4,      sm90,   f16,  2, 4, 64, 2, 4, 0xF)                  \
  X(2, sm90_f16_r4w4,      sm90,   f16,  4, 4, 64, 2, 4, 0x7)                  \
  X(3, sm90_f16_r8w4,      sm90,   f16,  8, 4, 64, 2, 4, 0x3)                  \
  X(4, sm90_f16_r1w2,      sm90,   f16,  1, 2, 64, 2, 4, 0x7)                  \
  X(5, sm90_fp8_r1w4,      sm90,   fp8,  1, 4, 64, 2, 4, 0xF)                  \
  X(21, gfx950_mxsc_r1w2,  gfx950, mxsc, 1, 2, 64, 2, 2, 0xF)                  \
  X(22, gfx950_mxsc_r2w2,  gfx950, mxsc, 2, 2, 64, 2, 2, 0xF)                  \
  X(23, gfx950_mxsc_r4w2,  gfx950, mxsc, 4, 2, 64, 2, 2, 0x7)                  \
  X(24, gfx950_mxsc_r8w2,  gfx950, mxsc, 8, 2, 64, 2, 2, 0x3)                  \
  X(6, gfx950_mxf4_r1w2,   gfx950, mxf4, 1, 2, 64, 2, 2, 0xF)                  \
  X(7, gfx950_mxf4_r2w2,   gfx950, mxf4, 2, 2, 64, 2, 2, 0xF)                  \
  X(8, gfx950_mxf4_r4w2,   gfx950, mxf4, 4, 2, 64, 2, 2, 0x7)                  \
  X(9, gfx950_mxf4_r8w2,   gfx950, mxf4, 8, 2, 64, 2, 2, 0x3)                  \
  X(28, gfx942_fp8fold_r1w4, gfx942, fp8fold, 1, 4, 64, 2, 2, 0xF)            \
  X(29, gfx942_fp8fold_r2w4, gfx942, fp8fold, 2, 4, 64, 2, 2, 0x7)            \
  X(30, gfx942_fp8fold_r4w4, gfx942, fp8fold, 4, 4, 64, 2, 2, 0x3)            \
  X(25, gfx942_fp8_r1w4,   gfx942, fp8,  1, 4, 64, 2, 2, 0xF)                  \
  X(26, gfx942_fp8_r2w4,   gfx942, fp8,  2, 4, 64, 2, 2, 0x7)                  \
  X(27, gfx942_fp8_r4w4,   gfx942, fp8,  4, 4, 64, 2, 2, 0x3)                  \
  X(10, gfx942_f16_r1w4,   gfx942, f16,  1, 4, 64, 2, 2, 0xF)                  \
  X(11, gfx942_f16_r2w4,   gfx942, f16,  2, 4, 64, 2, 2, 0x7)                  \
  X(12, gfx942_f16_r4w4,   gfx942, f16,  4, 4, 64, 2, 2, 0x3)                  \
  X(13, sm90_fold_r1w4,    sm90,   fold, 1, 4, 64, 2, 4, 0x7)                  \
  X(14, sm90_fold_r2w4,    sm90,   fold, 2, 4, 64, 2, 3, 0x7)                  \
  X(15, sm90_fold_r4w4,    sm90,   fold, 4, 4, 64, 2, 3, 0x3)                  \
  /* w16 before w12: 10% faster at one row, 4-7% at two (docs/perf-notes.md); ties keep this order */ \
  X(20, sm90_i8_r1w16,     sm90,   i8,   1, 16, 64, 4, 1, 0x7)                 \
  X(16, sm90_i8_r1w12,     sm90,   i8,   1, 12, 64, 4, 1, 0xF)                 \
  /* w20, the split body: exact, slower than w16 so far (docs/perf-notes.md): last of one row */ \
  X(32, sm90_i8_r1w20,     sm90,   i8,   1, 20, 64, 4, 1, 0x4)                 \
  X(31, sm90_i8_r2w16,     sm90,   i8,   2, 16, 64, 4, 1, 0x5)                 \
  X(17, sm90_i8_r2w12,     sm90,   i8,   2, 12, 64, 4, 1, 0xF)                 \
  X(18, sm90_i8_r4w12,     sm90,   i8,   4, 12, 64, 4, 1, 0x7)                 \
  X(19, sm90_i8_r8w12,     sm90,   i8,   8, 12, 64, 4, 1, 0x3)                 \
  /* i8u: the i8 body on the union of a sequence's row tables (gather mode, Free mode only) */ \
  X(40, sm90_i8u_r2w12,    sm90,   i8u,  2, 12, 64, 4, 1, 0xF)                 \
  X(41, sm90_i8u_r4w12,    sm90,   i8u,  4, 12, 64, 4, 1, 0x7)                 \
  X(42, sm90_i8u_r8w12,    sm90,   i8u,  8, 12, 64, 4, 1, 0x3)                 \
  /* i8c: the i8 body with the canonical head sum on its fast tiles (canonical: docs/numerics.md) */ \
  X(43, sm90_i8c_r1w12,    sm90,   i8c,  1, 12, 64, 4, 1, 0x7)                 \
  X(44, sm90_i8c_r2w12,    sm90,   i8c,  2, 12, 64, 4, 1, 0x7)                 \
  X(45, sm90_i8c_r4w12,    sm90,   i8c,  4, 12, 64, 4, 1, 0x7)                 \
  X(46, sm90_i8c_r8w12,    sm90,   i8c,  8, 12, 64, 4, 1, 0x3)                 \
  /* i8uc: the union body with the canonical fast tiles (gather mode, Free mode only) */ \
  X(47, sm90_i8uc_r2w12,   sm90,   i8uc, 2, 12, 64, 4, 1, 0x7)                 \
  X(48, sm90_i8uc_r4w12,   sm90,   i8uc, 4, 12, 64, 4, 1, 0x7)                 \
  X(49, sm90_i8uc_r8w12,   sm90,   i8uc, 8, 12, 64, 4, 1, 0x3)                 \
  /* i8w: the i8 body's Prefill form in Table and Free launches (64 heads: the shape that has one) */ \
  X(50, sm90_i8w_r4w12,    sm90,   i8w,  4, 12, 64, 4, 1, 0x4)

// Keys of one stage of the i8 body (kernel_sm90_i8.cuh): the sequence's 64-key tiles 4j .. 4j + 3,
// converted and voted on (fast or canonical path) as one, and what one count of its path_stats
// is. The one statement of it: the kernel's I8Shape and the Python side (instances.py
// I8_STAGE_KEYS, which the tests count stages with) read it here.
#define OPUS_I8_STAGE_KEYS 256

// Page sizes every instance serves (keys are gathered one by one through the table).
#define OPUS_PAGE_SIZES {8, 16, 32, 64, 128}
#define OPUS_MODES "table,free,prefill"
// The union bodies (families i8u, i8uc): their modes (their windows come from the pre-pass, which
// the Table schedule cannot see), and the most entries the pre-pass hashes: a union's rows x
// table columns (MTP 8 x 2048 blocks; args.h's union_geometry), staged and hashed inside sm_90's
// 227 KB of shared memory.
#define OPUS_UNION_FAMILIES "i8u,i8uc"
#define OPUS_UNION_MODES "free"
#define OPUS_UNION_MAX_ENTRIES 16384

namespace opus {

// Consumer warpgroups of an i8 body of `warps` warps (kernels.cu's SmBody): 20 warps is the split
// body (a producer, two converter and two MMA warpgroups: two consuming pairs); else one producer
// warpgroup and the rest consume. instances.py repeats it (tests/test_opus_build.py compares).
constexpr int i8_consumers(int warps) { return warps == 20 ? 2 : warps / 4 - 1; }

// The Table split of an i8 body (families i8 and i8c; worksplit/rules.py's table_unit): 4-tile
// stages, a stage for each consumer a round, and a later row group's set-up counted as this many
// tiles: 8 with one row, 12 with more (a longer set-up). Only the two-consumer bodies (12 warps)
// take it: the three-consumer body ran slower on rounds of 12 tiles and the split body is
// unmeasured (docs/perf-notes.md, thirty-third and thirty-fourth sessions). 0: the units' own
// split. instances.py repeats it (tests/test_opus_build.py compares).
constexpr int i8_table_setup(int rows, int warps) { return warps != 12 ? 0 : rows == 1 ? 8 : 12; }

struct InstanceInfo {
  int id;
  const char* name;
  const char* arch;       // the device arch token Python uses: sm_90 / gfx942 / gfx950
  const char* family;
  int rows, warps, block_n, stages, ctas_per_sm;
  unsigned heads_mask;
};

#define OPUS_ARCH_NAME_sm90 "sm_90"
#define OPUS_ARCH_NAME_gfx942 "gfx942"
#define OPUS_ARCH_NAME_gfx950 "gfx950"
#define OPUS_INFO_ROW(id, name, arch, family, rows, warps, keys, stages, ctas, heads) \
  {id, #name, OPUS_ARCH_NAME_##arch, #family, rows, warps, keys, stages, ctas, heads},

constexpr InstanceInfo kInstances[] = {OPUS_INSTANCES(OPUS_INFO_ROW)};
constexpr int kNumInstances = int(sizeof(kInstances) / sizeof(kInstances[0]));
#undef OPUS_INFO_ROW

constexpr int kPageSizes[] = OPUS_PAGE_SIZES;

inline const InstanceInfo* find_instance(int id) {
  for (const InstanceInfo& i : kInstances)
    if (i.id == id) return &i;
  return nullptr;
}
// CTAs an SM a kernel is compiled for (__launch_bounds__): the instance's `ctas`, capped at 3
// for 128 heads (their 64 accumulators a thread spill under the 4-CTA register budget).
constexpr int ctas_for_heads(int ctas, int heads) { return heads >= 128 && ctas > 3 ? 3 : ctas; }

inline bool heads_in_mask(unsigned mask, int heads) {
  for (int bit = 0; bit < 4; ++bit)
    if ((mask >> bit & 1u) && heads == (16 << bit)) return true;
  return false;
}

}  // namespace opus
