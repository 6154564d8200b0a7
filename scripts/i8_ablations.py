#!/usr/bin/env python3
"""What each part of the i8 fast stage costs: kernel trees with one part taken out, built here with
nvcc into scripts/opus_harness.cu binaries, and a script that times them all on the GPU machine
(no build there, no torch). The numbers are for reading, not shipping: a variant without the
conversion or the epilogue computes wrong logits (the harness says so), one without the consumers
("empty") only moves the keys, and "stamps" is the whole kernel writing its start-up timeline
(STAMPS=1 in the harness prints it). docs/perf-notes.md has the table this made (2026-12-02).

    python3 scripts/i8_ablations.py --out .gl/abl            # every variant, ids 20 and 31 at 64 heads
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,empty --ids 20
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,splitnovote,splitnoconv,noepi --ids 20,32
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,nc128 --ids 17        # MTP 2, one 128-column wgmma
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,splitr2,splitr2signed --ids 17,33  # MTP 2, the split body (id 33)
    python3 scripts/i8_ablations.py --out .gl/abl --variants stamps --ids 20,17 --rounds 1  # the start-up timeline (STAMPS=1)
    python3 scripts/i8_ablations.py --out .gl/abl --variants ctaends --ids 20,17 --rounds 1  # every CTA's start, end, SM and share
    python3 scripts/i8_ablations.py --out .gl/abl --variants piecetimes --ids 20,17 --rounds 1  # and each consumer's stages and pieces
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,onesetup,stage128 --ids 20,17,18  # a later set-up's cost; the stage boundary's
    python3 scripts/i8_ablations.py --out .gl/abl --variants boundary --ids 20,17,18 --rounds 1  # the boundary's parts, in cycles
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,bias16 --ids 20,16  # the one-chunk bias slice by 16 lanes
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,pad4,pad8,pad16,pad32,pad64 --ids 20  # the code's place alone
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,prefetchfirst --ids 20,17  # the first group's rows into L2 early
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,bias16w12,setupunroll2 --ids 16,17,18  # the former set-up forms (lane 0's slice at r1w12; one word a turn)
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,accinit,accinitsm --ids 20,16,17,18  # the bias's correction as the accumulator's start
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,descsalt --ids 20,16,17,18  # the wgmma descriptors held in uniform registers
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,unrollsetup --ids 18,17 --prefill --shapes '8192 1 8192;16384 1 16384'
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,prefetchq --ids 20,17,16,18  # the set-up's loads
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,carve100 --ids 20,16,17,18  # the L1
    python3 scripts/i8_ablations.py --out .gl/abl --heads 32 --variants base,rows4 --ids 18,17  # four rows' out pointers in registers
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,pc4,onesetup,onesetuppc4 --ids 20,16,17  # a free later set-up's bound
    # then, on the GPU machine (the out folder carried): bash .gl/abl/run.sh > log
    # (scripts/device_check.sh's ablations step does that; with NCU=1 it runs the folder's ncu.sh too:
    # each job and variant once in Nsight Compute, NCU_SASS=1 adding the stall samples by SASS line)
    python3 scripts/i8_ablations.py --summarize log   # the medians as a markdown table, changes from base
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,phase,stagger1850,phasestagger1850 --table \\
        --jobs '16 1 64 32768;18 4 64 32768'   # the two consumers' relative phase, and consumer 1 half a stage behind
                                               # (--summarize adds the phase buckets under the table)
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,empty,nomemnovote --table \\
        --jobs '16 1 64 32768;17 2 64 32768'   # Table mode, each id its own shapes: a call's two sides alone
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,btentry,empty,emptybtbatch --table \\
        --jobs '16 1 64 32768;16 1 8 32768;17 2 64 32768'   # the producer's table entries a batch ahead
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,biasedkeys --table \\
        --jobs '18 4 64 8192;18 4 64 32768'   # r4w12's signed keys (KEY_SIGNED) against the biased
    python3 scripts/i8_ablations.py --apply prefetchq   # land an exact variant the H200 measured (then the GPU suite)
    python3 scripts/i8_ablations.py --out .gl/abl --variants base,prior --prior HEAD~3 --ids 18,17 --table \
        --jobs '18 4 8 32768;17 2 64 32768'   # a landed change: this checkout against the kernel tree of a commit

Each variant is exact text edits of kernel_sm90_i8.cuh; an edit whose text is no longer there
stops the script (the kernel changed: update the edit). A variant that ptxas builds with
serialized wgmma (the script prints the count) times that serialization too: read it with care."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "mqa_logits_mxfp4" / "backends" / "opus" / "csrc"
HARNESS = ROOT / "scripts" / "opus_harness.cu"
NVCC = ["nvcc", "-std=c++17", "-O3", "--fmad=false", "-gencode=arch=compute_90a,code=sm_90a"]

# (text in kernel_sm90_i8.cuh, what replaces it), or (another file of the tree, text, replacement)
# mma_chunk_fast's first line, and the KEY_SIGNED branch that opens it (the signed bodies' fast
# path, which the edits below keep)
_MMA_FAST_HEAD = "  OPUS_DEV void mma_chunk_fast(int32_t (&acc)[NC / 2], const uint32_t (&a)[4][4], int ch) const {\n"
_KS_MMA = "    if constexpr (KEY_SIGNED) {\n      mma_chunk<NC>(acc, a, ch);\n      return;\n    }\n"
_BIAS_OPEN = "    uint32_t ab[4];\n    bias_operand(ab);\n    WgmmaI8<NC, true>::start("  # the bias slice's first statements
_KEY_SIGNED_DEF = ("  static constexpr bool KEY_SIGNED =\n"
                   "      !SPLIT && (S::CHUNKS >= 4 || (S::CHUNKS == 2 && (CANON || UNION || H >= S::NC)));\n")  # biasedkeys, keysigned2, keysigned4
# the set-up's bias work as landed: setup_turns' column sum and slot (skipped where the keys are
# signed), and setup_each's branch; the lines biascol, biaspack and nobiasset change
_SETUP_BIAS_OPEN = "        if constexpr (!KEY_SIGNED) {  // the bias slice: unread where the keys are signed\n"
_SETUP_BIAS_SUM = ("        int qsum = __dp4a(int(lo[w]), 0x01010101, 0) + __dp4a(int(hi[w]), 0x01010101, 0);\n"
                   "#pragma unroll\n        for (int m = 8; m > 0; m >>= 1) qsum += __shfl_xor_sync(0xFFFFFFFFu, qsum, m);\n"
                   "        bias_column(n, idx & 15, qsum);\n")  # unwrapped (biascol's form)
_SETUP_BIAS = _SETUP_BIAS_OPEN + "".join("  " + l if not l.startswith("#") else l
                                         for l in _SETUP_BIAS_SUM.splitlines(True)) + "        }\n"
_SETUP_EACH_BIAS = "      if (!KEY_SIGNED && fast) {  // uniform: the group's verdict; unread where the keys are signed\n"

# A warp's L2 prefetch of query rows [r0, r1): q, q_scale and weights, a 128-byte line a lane
# (prefetchq at each piece's start in the producer, prefetchfirst at the kernel's entry).
def _prefetch_rows(r0: str, r1: str, ind: str) -> str:
    pf = 'asm volatile("prefetch.global.L2 [%0];" ::"l"('
    return (f"{ind}for (int r = {r0}; r < {r1}; ++r) {{\n"
            f"{ind}  const uint8_t* qrow = args.q + (long long)r * H * kHeadBytes;\n"
            f"{ind}  for (int off = lane * 128; off < H * kHeadBytes; off += 32 * 128)\n"
            f"{ind}    {pf}qrow + off));\n"
            f"{ind}  const int wbytes = H * (args.weights_bf16 ? 2 : 4);\n"
            f"{ind}  const uint8_t* wrow = static_cast<const uint8_t*>(args.weights) + (long long)r * args.stride_w * (wbytes / H);\n"
            f"{ind}  if (lane * 128 < H * 4) {pf}args.q_scale + (long long)r * H * 4 + lane * 128));\n"
            f"{ind}  if (lane * 128 < wbytes) {pf}wrow + lane * 128));\n"
            f"{ind}}}\n")


# A CTA's record in path_stats: the harness's kCtaWord0 (32) words on, kCtaRecord (22) words a CTA
# (scripts/opus_harness.cu); word i is _CTA_REC + "i]".
_CTA_REC = "args.path_stats[32 + 22 * blockIdx.x + "


def _cons_rec(c: str) -> str:
    """Word j of consumer warpgroup c's part of the record (the harness's kConsWords = 6 words a
    consumer after the CTA's four) is _cons_rec(c) + "j]"."""
    return _CTA_REC + f"4 + 6 * {c} + "


# The stage's top, and the same with its full-barrier wait timed (piecetimes, boundary: the
# cycles from w0)
_STAGE_TOP = "  OPUS_DEV void stage(int n0) {\n    mbar_wait(&sm.full[c][ring.slot], ring.phase);\n"
_TIMED_STAGE_TOP = _STAGE_TOP.replace("    mbar_wait", "    const long long w0 = clock64();\n    mbar_wait")


def _prmt_edit(old: str, ind: str, t0: str, t1: str) -> tuple[str, str]:
    """noconv's edit: `old` (a k-slice's two words converted, at indentation `ind`) made one permute a
    register, from table t0 for key k0's word and t1 for key k1's."""
    regs = ((0, 0, t0, "pos"), (2, 0, t0, "neg"), (1, 1, t1, "pos"), (3, 1, t1, "neg"))
    return (old, "".join(f"{ind}a[j][{r}] = prmt({t}.{s}_lo, {t}.{s}_hi, w{k}[j]);\n" for r, k, t, s in regs))


EDITS = {
    # the rows' out pointers from shared memory at R = 2 too (r2w16 spilled them: 8 LDL.64 a stage)
    "rowsmem": [("  static constexpr bool ROWS_IN_REGS = R <= 2;\n", "  static constexpr bool ROWS_IN_REGS = R <= 1;\n")],
    # the consumers only wait for each stage and release it: what the producer and memory alone cost
    "empty": [("    mbar_wait(&sm.full[c][ring.slot], ring.phase);\n    const int vbeg = sm.keys[c].vbeg, vend = sm.keys[c].vend;\n",
               "    mbar_wait(&sm.full[c][ring.slot], ring.phase);\n"
               "    mbar_arrive(&sm.empty[c][ring.slot]);\n    return;\n    const int vbeg = sm.keys[c].vbeg, vend = sm.keys[c].vend;\n")],
    # the fast conversion down to one permute a register (9 instructions a word -> 2), in every
    # form: convert_fast's biased keys (i8_key_word) and signed keys (i8_word), and the canonical
    # convert (i8_word: its stages go wrong too)
    "noconv": [_prmt_edit("        i8_key_word(w0[j], tb[0], ones, a[j][0], a[j][2]);\n"
                          "        i8_key_word(w1[j], tb[1], ones, a[j][1], a[j][3]);\n", "        ", "tb[0]", "tb[1]"),
               _prmt_edit("        i8_word(w0[j], tb[0], a[j][0], a[j][2]);\n"
                          "        i8_word(w1[j], tb[1], a[j][1], a[j][3]);\n", "        ", "tb[0]", "tb[1]"),
               _prmt_edit("      i8_word(w0[j], t0, a[j][0], a[j][2]);\n      i8_word(w1[j], t0, a[j][1], a[j][3]);\n",
                          "      ", "t0", "t0")],
    # the epilogue down to one relu a key (no head sum). ptxas (CUDA 13) builds the r1 kernel of
    # this variant alone with serialized wgmma in some trees and not in others (the measured one
    # of docs/perf-notes.md was not): check the script's warning count
    "noepi": [("  OPUS_DEV void unit_sums(const int32_t (&ac)[S::ACC], const float (&wv)[S::NT][2], float (&rs)[RPC][2]) const {\n",
               "  OPUS_DEV void unit_sums(const int32_t (&ac)[S::ACC], const float (&wv)[S::NT][2], float (&rs)[RPC][2]) const {\n"
               "#pragma unroll\n    for (int r = 0; r < RPC; ++r) {\n"
               "      rs[r][0] = relu_cell(ac[4 * r]);\n      rs[r][1] = relu_cell(ac[4 * r + 2]);\n    }\n"
               "    return;\n")],
    # no wgmma on the fast path: the accumulators made from the operands (the conversion stays live)
    "nomma": [(_MMA_FAST_HEAD + "    if constexpr (KEY_SIGNED) {\n",
               _MMA_FAST_HEAD + "#pragma unroll\n    for (int i = 0; i < NC / 2; ++i) acc[i] = int32_t(a[(i >> 2) & 3][i & 3] ^ uint32_t(ch));\n"
               "    return;\n    if constexpr (KEY_SIGNED) {\n")],
    # no bias slice: four wgmma a chunk instead of five
    "nobias": [(_MMA_FAST_HEAD + _KS_MMA + _BIAS_OPEN,
                _MMA_FAST_HEAD + _KS_MMA + "#pragma unroll\n    for (int j = 0; j < 4; ++j) WgmmaI8<NC, true>::run(acc, a[j], b_desc(j, ch), j > 0);\n"
                "    return;\n" + _BIAS_OPEN)],
    # KEY_SIGNED off: every body back on the biased keys and the bias slice (the landed form's
    # A/B; the retired signedfast and the four-chunk form measured it before it landed)
    "biasedkeys": [(_KEY_SIGNED_DEF,
                    "  static constexpr bool KEY_SIGNED = false;\n")],
    # KEY_SIGNED's set-up building the bias slice again (its column sums and slots, never read
    # there): the landed form's A/B (docs/perf-notes.md, forty-fourth session: nobiascol)
    "biascol": [(_SETUP_BIAS, _SETUP_BIAS_SUM),
                (_SETUP_EACH_BIAS,
                 "      if (fast) {  // uniform: the group's verdict\n")],
    # the set-up's column sums two words at a time: the two partial sums (offset to [0, 2048]:
    # 16 lanes' total fits 16 bits) packed in one word, one four-shuffle chain for both (exact)
    "biaspack": [("      int shift[W];\n", "      int shift[W];\n      int part[W] = {};\n"),
                 (_SETUP_BIAS + "      }\n    }\n  }\n",
                  "        if constexpr (!KEY_SIGNED) part[w] = __dp4a(int(lo[w]), 0x01010101, 0) + __dp4a(int(hi[w]), 0x01010101, 0) + 1024;\n"
                  "      }\n"
                  "      if constexpr (!KEY_SIGNED) {\n"
                  "#pragma unroll\n"
                  "        for (int w0 = 0; w0 < W; w0 += 2) {\n"
                  "          uint32_t pk = uint32_t(part[w0]) | (w0 + 1 < W ? uint32_t(part[w0 + 1]) << 16 : 0u);\n"
                  "#pragma unroll\n          for (int m = 8; m > 0; m >>= 1) pk += __shfl_xor_sync(0xFFFFFFFFu, pk, m);\n"
                  "#pragma unroll\n"
                  "          for (int w = w0; w < W && w < w0 + 2; ++w) {\n"
                  "            const int idx = ct + (i0 + w) * S::CT;\n"
                  "            if (S::N * 16 % S::CT != 0 && idx >= S::N * 16) break;  // warp-uniform\n"
                  "            bias_column(idx >> 4, idx & 15, int((w == w0 ? pk : pk >> 16) & 0xFFFFu) - 16 * 1024);\n"
                  "          }\n"
                  "        }\n"
                  "      }\n    }\n  }\n")],
    # timing only (a biased fast group's logits come out wrong): no bias slice built in any set-up,
    # the bound of what the set-up's bias work costs
    "nobiasset": [(_SETUP_BIAS_OPEN,
                   "        if constexpr (false) {\n"),
                  (_SETUP_EACH_BIAS,
                   "      if (false && fast) {\n")],
    # KEY_SIGNED at every two-chunk body, the fused ones whose chunk holds several rows too (r4 at
    # 32 heads, r8 at 16; docs/perf-notes.md, forty-sixth session: r4 H32 4-6% slower at 16-64
    # sequences), and at four chunks alone (the tree before the two-chunk bodies took it)
    "keysigned2": [(_KEY_SIGNED_DEF,
                    "  static constexpr bool KEY_SIGNED = S::CHUNKS >= 2 && !SPLIT;\n")],
    "keysigned4": [(_KEY_SIGNED_DEF,
                    "  static constexpr bool KEY_SIGNED = S::CHUNKS >= 4 && !SPLIT;\n")],
    # no vote: every stage of a fast group takes the fast path, no warpgroup barrier
    # the consumers' work alone: the producer walks the table and arrives on each stage without
    # copying (the stage keeps stale bytes; with novote every stage takes the fast path)
    "nomem": [("    const uint32_t bytes = slot >= 0 ? uint32_t(L * (kHeadBytes + 4)) : 0u;\n",
               "    const uint32_t bytes = 0u;\n"),
              ("    if (slot >= 0) {\n      bulk_copy(st.raw", "    if (slot >= 0 && bytes > 0) {\n      bulk_copy(st.raw")],
    # the vote's two halves: its instructions with a warp's verdict instead of the warpgroup
    # barrier (exact on the harness's all-fast data only), and the barrier with no vote behind it
    "votewarp": [("      fast = bar_and(2 + c, 128, ok);", "      fast = __all_sync(0xFFFFFFFFu, ok);")],
    "votebar": [("      fast = bar_and(2 + c, 128, ok);", "      fast = bar_and(2 + c, 128, true);\n      (void)ok;")],
    # 512-key stages (eight M blocks): a consumer's wgmma pipeline drains and its vote runs half as
    # often. Two-consumer kernels only (three consumers' 768-key rings hold no two such stages)
    "stage512": [("registry.h", "#define OPUS_I8_STAGE_KEYS 256", "#define OPUS_I8_STAGE_KEYS 512")],
    # 128-key stages (two M blocks; rings of 6 or 8 stages, the same keys): a CTA's share in half
    # as coarse a grain over its consumers (the busiest consumer's extra stage is what a static
    # split leaves: sixteenth session), at twice the votes and stage boundaries
    "stage128": [("registry.h", "#define OPUS_I8_STAGE_KEYS 256", "#define OPUS_I8_STAGE_KEYS 128")],
    # the split body at two rows (MTP 2, 64 heads): id 33, sm90_i8_r2w20 -- each converted tile
    # serves both rows' chunks, so the conversion's share of the MMA side's work halves
    "splitr2": [("registry.h", "  X(31, sm90_i8_r2w16,     sm90,   i8,   2, 16, 64, 4, 1, 0x5)                 \\\n",
                 "  X(31, sm90_i8_r2w16,     sm90,   i8,   2, 16, 64, 4, 1, 0x5)                 \\\n"
                 "  X(33, sm90_i8_r2w20,     sm90,   i8,   2, 20, 64, 4, 1, 0x4)                 \\\n"),
                # its MMA warpgroups (152 registers) spill the fast stage with 128 columns of weights
                # in registers: they read them from shared memory, as three consumers do
                ("  static constexpr bool W_IN_REGS = N <= 64 || (N <= 128 && CONS <= 2);\n",
                 "  static constexpr bool W_IN_REGS = N <= 64 || (N <= 128 && CONS <= 2 && !SPLIT);\n")],
    # splitr2 with signed keys: the converters write 2 E2M1 2^d as signed bytes (i8_word, two ALU
    # instructions a word more, off the tensor core's warps) and the MMA warpgroups drop the bias
    # slice (four SS wgmma a chunk, not five: a fifth less tensor work)
    "signedss": [("      for (int j = 0; j < 4; ++j) i8_key_word(x[j], tb, ones, lo[j], hi[j]);\n",
                  "      for (int j = 0; j < 4; ++j) i8_word(x[j], tb, lo[j], hi[j]);\n"),
                 ("      const I8Table tb = sm.ktables[(o >> (8 * b)) & 3u];\n",
                  "      const I8Table tb = sm.tables[(o >> (8 * b)) & 3u];\n"),
                 ("    uint32_t ab[4];\n    bias_operand(ab);\n    WgmmaI8<NC, true>::start(acc, ab, b_desc(kScaleBlocks, ch));\n"
                  "#pragma unroll\n    for (int j = 0; j < 4; ++j) WgmmaI8<NC, true>::run_ss(acc, a_desc + uint64_t((j * 2048) >> 4), b_desc(j, ch));\n",
                  "    WgmmaI8<NC, false>::start_ss(acc, a_desc, b_desc(0, ch));\n"
                  "#pragma unroll\n    for (int j = 1; j < 4; ++j) WgmmaI8<NC, false>::run_ss(acc, a_desc + uint64_t((j * 2048) >> 4), b_desc(j, ch));\n"),
                 ("sm90_ptx.cuh", "#undef OPUS_D32\n  }\n};\n",
                  "#undef OPUS_D32\n  }\n"
                  "  static OPUS_DEV void start_ss(int32_t (&d)[32], uint64_t a, uint64_t b) {\n"
                  "    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.u32 p, 0, 0;\\n\"\n"
                  "                 \"wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, \"\n"
                  "                 \"%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, \"\n"
                  "                 \"%30, %31}, %32, %33, p;\\n}\\n\"\n"
                  "                 : OPUS_W32(d, 0) : \"l\"(a), \"l\"(b));\n"
                  "  }\n};\n")],
    # the fast path's stores skipped (timing only: out keeps what was there) while the sums and
    # their quad reductions stay live (a store whose condition no finite sum meets), the branched
    # stores and the predicated ones (store_key_if: PRED_STORES bodies) alike
    "nostore": [("    if (store_mask >> (r * S::MB + mb) & 1u) {\n      if constexpr (UNION) union_col(r, n, n0, n);",
                 "    if ((store_mask >> (r * S::MB + mb) & 1u) && __float_as_uint(v) == 0x7FC00001u) {\n"
                 "      if constexpr (UNION) union_col(r, n, n0, n);"),
                ("      store_key_if(store_mask >> (r * S::MB + mb) & 1u, row_out(r), n, fmul_rn(v, scale));\n",
                 "      store_key_if((store_mask >> (r * S::MB + mb) & 1u) && __float_as_uint(v) == 0x7FC00001u, row_out(r), n, fmul_rn(v, scale));\n"),
                ("        store_key_if(store_mask >> (r * S::MB + mb) & 1u, pair_row(2 * ch, lr), n, v);\n",
                 "        store_key_if((store_mask >> (r * S::MB + mb) & 1u) && __float_as_uint(v) == 0x7FC00001u, pair_row(2 * ch, lr), n, v);\n")],
    "novote": [("      fast = bar_and(2 + c, 128, ok);", "      fast = true;\n      (void)ok;")],
    # the producer warp prefetches each piece's query rows, scales and weights into L2 as it
    # starts the piece -- for every piece after the first, while the consumers still run the
    # previous one's last stages -- so the group set-up's loads hit L2 (exact; addresses only)
    "prefetchq": [("    const int32_t* bt_row = args.block_tables + (long long)(args.gather ? p.r0 : p.b) * args.stride_bt;\n    constexpr int STEP = S::KEYS * CONS;\n",
                   "    const int32_t* bt_row = args.block_tables + (long long)(args.gather ? p.r0 : p.b) * args.stride_bt;\n    constexpr int STEP = S::KEYS * CONS;\n"
                   "    if (c == 0) {  // one warp: a 128-byte line a lane and row\n"
                   + _prefetch_rows("p.r0", "imin(p.r1, p.r0 + R)", "      ") + "    }\n")],
    # every key through the shift-0 table (timing only: wrong logits where a block's offset is not
    # 0): what choosing each key's table by its offsets costs (the quad shuffles, the address, an
    # LDS.128 a key and M block), the biased keys' tables and the signed keys' (i8_word) alike
    "onetable": [("    for (int k = 0; k < 2; ++k) tb[k] = KEY_SIGNED ? sm.tables[d[k]] : sm.ktables[d[k]];\n",
                  "    for (int k = 0; k < 2; ++k) tb[k] = KEY_SIGNED ? sm.tables[0] : sm.ktables[0];\n"
                  "    (void)d;\n")],
    # the split body (id 32): its converters' vote without the warpgroup barrier (exact on data
    # whose stages are all fast: what the bar.red a stage costs the converters)
    "splitnovote": [("    return khi > 0 && bar_and(4 + c, 128, ok);  // khi uniform: the group's verdict\n",
                     "    (void)ok;\n    return khi > 0;\n")],
    # the split body's converters with one XOR a word instead of the conversion (wrong logits):
    # what the conversion costs beside the MMA warpgroups
    "splitnoconv": [("      for (int j = 0; j < 4; ++j) i8_key_word(x[j], tb, ones, lo[j], hi[j]);\n",
                     "      for (int j = 0; j < 4; ++j) lo[j] = hi[j] = x[j] ^ tb.pos_lo;\n")],
    # the split body's MMA warpgroups hand each fast tile back unread (no wgmma, no epilogue, no
    # stores): what the producer and the converters cost alone
    "splitempty": [("    if (fast) {\n      stage_stores(n0);\n      fast_stage_split(n0);\n",
                    "    if (fast) {\n      mbar_arrive(&sm.tiles.empty[c][ts]);\n")],
    # the split body's MMA warpgroups without their wgmma (accumulators made from the tile's
    # address; wrong logits): what the SS wgmma's shared-memory reads and tensor time cost the split
    "splitnomma": [("  OPUS_DEV void mma_chunk_ss(int32_t (&acc)[NC / 2], uint64_t a_desc, int ch) const {\n    uint32_t ab[4];\n",
                    "  OPUS_DEV void mma_chunk_ss(int32_t (&acc)[NC / 2], uint64_t a_desc, int ch) const {\n"
                    "#pragma unroll\n    for (int i = 0; i < NC / 2; ++i) acc[i] = int32_t(uint32_t(a_desc) ^ uint32_t(i + ch));\n"
                    "    return;\n    uint32_t ab[4];\n")],
}
# The start-up timeline: %globaltimer at the milestones of a call, into the path_stats buffer
# words 8-31 (the harness prints them with STAMPS=1). Not an ablation:
# the kernel is whole; a stamp costs a global store.
_STAMP_NOW = ("__device__ __forceinline__ unsigned long long stamp_now() {\n"
              "  unsigned long long t;\n  asm volatile(\"mov.u64 %0, %globaltimer;\" : \"=l\"(t));\n  return t;\n}\n")
_TS = (_STAMP_NOW +
       "#define TS(i) do { if (args.path_stats) args.path_stats[8 + (i)] = stamp_now(); } while (0)\n"
       "#define TS_ONCE(i) TS_MIN(i)  /* the first time is the smallest: a RED, no read (a read-then-write once-stamp added a round trip) */\n"
       "#define TS_MIN(i) do { if (args.path_stats) atomicMin(&args.path_stats[8 + (i)], stamp_now()); } while (0)\n"
       "#define TS_MAX(i) do { if (args.path_stats) atomicMax(&args.path_stats[8 + (i)], stamp_now()); } while (0)\n")
EDITS["stamps"] = [
    ("// ------------------------------------------------------------------------------------ producer\n",
     _TS + "// ------------------------------------------------------------------------------------ producer\n"),
    ("  if (tid == 0 && (smem_addr(i8_smem) & 0x3FFFFu) != kI8SmemBase) __trap();  // the descriptors' base\n",
     "  if (tid == 0 && (smem_addr(i8_smem) & 0x3FFFFu) != kI8SmemBase) __trap();  // the descriptors' base\n"
     "  if (tid == 0) {\n    TS_MIN(0);\n    TS_MAX(1);\n  }\n"),
    ("  PieceWalk walk = make_walk(args, sv, R, sm.range);\n",
     "  if (tid == 0 && blockIdx.x == 0) TS(2);  // the scan and the barrier done\n"
     "  PieceWalk walk = make_walk(args, sv, R, sm.range);\n"),
    ("    regs_shrink<S::PRODUCER_REGS>();\n",
     "    regs_shrink<S::PRODUCER_REGS>();\n    if (tid == 0 && blockIdx.x == 0) TS(3);\n"),
    ("  OPUS_DEV void piece(const Piece& p) {\n    int gbeg, gend;\n    group_keys<R, UNION>(args, p, gbeg, gend);\n"
     "    const int kbeg = piece_first_key(p, gbeg), kend = imin(gend, p.t1 * kBlockN);\n    if (kbeg >= kend) return;  // the consumers skip it too (its first stage may start below kend)\n",
     "  OPUS_DEV void piece(const Piece& p) {\n    const bool st = blockIdx.x == 0 && c == 0 && lane == 0;\n"
     "    if (st) TS_ONCE(4);  // the walk's first step done\n    int gbeg, gend;\n    group_keys<R, UNION>(args, p, gbeg, gend);\n"
     "    if (st && gend != -12345) TS_ONCE(5);  // the row window read (the compare waits for it)\n"
     "    const int kbeg = piece_first_key(p, gbeg), kend = imin(gend, p.t1 * kBlockN);\n    if (kbeg >= kend) return;  // the consumers skip it too (its first stage may start below kend)\n"),
    ("    long long slot = bulk ? chunk_slot(bt_row, n0, gbeg, gend) : -2;\n",
     "    long long slot = bulk ? chunk_slot(bt_row, n0, gbeg, gend) : -2;\n"
     "    if (st && slot != -12345) TS_ONCE(6);  // the first table entry read (the compare waits for it)\n"),
    ("      bulk_copy(st.raw + k0 * kHeadBytes,",
     "      if (blockIdx.x == 0 && c == 0 && lane == 0) TS_ONCE(7);\n      bulk_copy(st.raw + k0 * kHeadBytes,"),
    ("    regs_grow<S::CONSUMER_REGS>();\n",
     "    regs_grow<S::CONSUMER_REGS>();\n    if (tid == 128 && blockIdx.x == 0) TS(8);\n"),
    ("    uint32_t words[OPERAND_WORDS];\n",
     "    if (blockIdx.x == 0 && ct == 0) TS_ONCE(9);  // the consumer's walk step and row window done\n"
     "    uint32_t words[OPERAND_WORDS];\n"),
    # inside the group set-up (CTA 0's first): its columns' loads back, the verdict's barrier, the
    # operand built (the compares wait for the values they test)
    ("    const bool mine = setup_columns(qmax_hi, wexp_hi, wexp_lo);\n",
     "    const bool mine = setup_columns(qmax_hi, wexp_hi, wexp_lo);\n"
     "    if (blockIdx.x == 0 && ct == 0 && qmax_hi != -12345) TS_ONCE(14);\n"),
    ("    const bool cols_fast = bar_and(1, S::CT, mine);\n",
     "    const bool cols_fast = bar_and(1, S::CT, mine);\n"
     "    if (blockIdx.x == 0 && ct == 0 && int(cols_fast) != 7) TS_ONCE(15);\n"),
    ("      setup_operand<false>(fast, words);\n    fence_async_smem();\n",
     "      setup_operand<false>(fast, words);\n    if (blockIdx.x == 0 && ct == 0) TS_ONCE(16);\n    fence_async_smem();\n"),
    ("    setup_group(p, gbeg, gend, kbeg);\n",
     "    setup_group(p, gbeg, gend, kbeg);\n    if (blockIdx.x == 0 && ct == 0) TS_ONCE(10);\n"),
    ("    mbar_wait(&sm.full[c][ring.slot], ring.phase);\n    const int vbeg = sm.keys[c].vbeg, vend = sm.keys[c].vend;\n",
     "    mbar_wait(&sm.full[c][ring.slot], ring.phase);\n    if (blockIdx.x == 0 && ct == 0) TS_ONCE(11);\n    const int vbeg = sm.keys[c].vbeg, vend = sm.keys[c].vend;\n"),
    ("    if (p.r1 > p.r0 && p.t1 > p.t0) cons.piece(p);\n}\n",
     "    if (p.r1 > p.r0 && p.t1 > p.t0) cons.piece(p);\n  if (ct == 0 && blockIdx.x == 0) TS(12);\n  if (ct == 0) TS_MAX(13);\n"
     "  if (ct == 0) TS_MIN(17);\n}\n"),
]
# Every CTA's record from path_stats word 32 on (the harness prints them with STAMPS=1): its SM and
# start (thread 0, at entry), its end (the last consumer warpgroup to finish its pieces: a maximum),
# and its share (consumer 0's pieces and tiles). Not an ablation: a few stores a CTA. Not
# combinable with "stamps" (both edit the consumers' loop). _CTAENDS_TAIL: its record's last
# stores, which `phase` extends.
_CTAENDS_TAIL = "    if (ct == 0) " + _CTA_REC + "3] = (unsigned long long)npieces << 32 | unsigned(ntiles);\n  }\n}\n"
EDITS["ctaends"] = [
    ("// ------------------------------------------------------------------------------------ producer\n",
     _STAMP_NOW + "// ------------------------------------------------------------------------------------ producer\n"),
    ("  if (tid == 0 && (smem_addr(i8_smem) & 0x3FFFFu) != kI8SmemBase) __trap();  // the descriptors' base\n",
     "  if (tid == 0 && (smem_addr(i8_smem) & 0x3FFFFu) != kI8SmemBase) __trap();  // the descriptors' base\n"
     "  if (tid == 0 && args.path_stats) {\n    unsigned smid;\n    asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(smid));\n"
     "    " + _CTA_REC + "1] = smid;\n    " + _CTA_REC + "2] = stamp_now();\n  }\n"),
    ("  while (walk.next(args, R, p))\n    if (p.r1 > p.r0 && p.t1 > p.t0) cons.piece(p);\n}\n",
     "  int npieces = 0, ntiles = 0;\n  while (walk.next(args, R, p))\n    if (p.r1 > p.r0 && p.t1 > p.t0) {\n"
     "      cons.piece(p);\n      ++npieces;\n      ntiles += p.t1 - p.t0;\n    }\n"
     "  if (ct % 128 == 0 && args.path_stats) {\n    atomicMax(&" + _CTA_REC + "0], stamp_now());\n"
     + _CTAENDS_TAIL),
]
# the start-up's floor: the kernel returns before any work (the launch of this grid, block and
# shared memory alone), or right after the Free-mode scan and the CTA barrier (wrong logits)
EDITS["exit0"] = [("  if (tid == 0 && (smem_addr(i8_smem) & 0x3FFFFu) != kI8SmemBase) __trap();  // the descriptors' base\n",
                   "  if (tid == 0 && (smem_addr(i8_smem) & 0x3FFFFu) != kI8SmemBase) __trap();  // the descriptors' base\n"
                   "  if (args.heads > 0) return;\n")]
EDITS["exitscan"] = [("  __syncthreads();\n  PieceWalk walk = make_walk(args, sv, R, sm.range);\n",
                      "  __syncthreads();\n  if (args.heads > 0) return;\n  PieceWalk walk = make_walk(args, sv, R, sm.range);\n")]
# MTP 2 at 64 heads with one wgmma over both rows: the chunk 128 columns (m64n128k32, 64 accumulators
# a thread) instead of two 64-column chunks, so a 64-key block's tensor work is five wgmma, not ten
# (the chunk width, not the CUDA-core work, is what r2's tensor-only time points at)
_W128 = """template <bool KEY_U8>
struct WgmmaI8<128, KEY_U8> {
#define OPUS_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "     \\
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \\
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \\
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
  static OPUS_DEV void run(int32_t (&d)[64], const uint32_t (&a)[4], uint64_t b, bool acc) {
    OPUS_IGMMA_BOTH("m64n128k32", OPUS_D64, "{%64, %65, %66, %67}", "%68", "%69", OPUS_R32(d, 0), OPUS_R32(d, 32));
  }
  static OPUS_DEV void start(int32_t (&d)[64], const uint32_t (&a)[4], uint64_t b) {
    OPUS_IGMMA0_BOTH("m64n128k32", OPUS_D64, "{%64, %65, %66, %67}", "%68", OPUS_W32(d, 0), OPUS_W32(d, 32));
  }
#undef OPUS_D64
};

#undef OPUS_IGMMA0_BOTH
"""
# the fast stage's form against the per-kernel choice (I8Shape::FAST_SPAN, RELU_ALU): every
# kernel's stage unrolled whole / as two rolled spans of two M blocks (the Table and Free launches'
# form: a Prefill launch at 64 heads already runs the whole stage, I8Shape::PREFILL_WHOLE); the
# relu as the saturating multiply / as the max on the accumulator's bits everywhere (both exact)
EDITS["span4"] = [("  static constexpr int FAST_SPAN = CHUNKS >= 4 && H <= NC ? 2 : MB;\n", "  static constexpr int FAST_SPAN = MB;\n")]
# nowhole: a Prefill launch at 64 heads back on the decode kernel (rolled spans): the Prefill
# form's A/B (I8Shape::PREFILL_WHOLE, fiftieth session)
EDITS["nowhole"] = [("  static constexpr bool PREFILL_WHOLE = !SPLIT && FAST_SPAN < MB && H == 64;\n",
                     "  static constexpr bool PREFILL_WHOLE = false;\n")]
EDITS["span2"] = [("  static constexpr int FAST_SPAN = CHUNKS >= 4 && H <= NC ? 2 : MB;\n", "  static constexpr int FAST_SPAN = 2;\n")]
EDITS["relusat"] = [("  static constexpr bool RELU_ALU = CHUNKS == 1;\n", "  static constexpr bool RELU_ALU = false;\n")]
EDITS["relualu"] = [("  static constexpr bool RELU_ALU = CHUNKS == 1;\n", "  static constexpr bool RELU_ALU = true;\n")]
# The landed relu split's line (I8Consumer::RELU_MIX), which mixany, mix1 and nomix edit.
_RELU_MIX = "  static constexpr bool RELU_MIX = R == 4 && H == 64 && !WHOLE && !UNION && !CANON && !SPLIT;\n"
# mixany: RELU_MIX (half the heads' relus the max, half the multiply) in every fused body of two
# chunks and up at any head count, not only r4w12's at 64 heads: refuted in the fifty-seventh
# session (r2w12 +1.6..+2.7% at 1-64 sequences, r4w12 at 32 heads +3.5% at 8, r8w12 level)
EDITS["mixany"] = [(_RELU_MIX, _RELU_MIX.replace("R == 4 && H == 64", "!S::RELU_ALU"))]
# mix1: RELU_MIX in r1w12's one-chunk body too (its relus all the max form today, RELU_ALU): half
# of them to the FMA pipe, the conversion's ALU work beside them
EDITS["mix1"] = [(_RELU_MIX, _RELU_MIX.replace("R == 4 && H == 64", "(R == 4 || R == 1) && H == 64")),
                 ("relu_cell(ac[4 * i + 2 * kk + e], S::RELU_ALU || (RELU_MIX && e == 0))",
                  "relu_cell(ac[4 * i + 2 * kk + e], RELU_MIX ? e == 0 : S::RELU_ALU)")]
# nomix: RELU_MIX off (r4w12's decode body at 64 heads back to the multiply for every relu): the
# landed split's A/B, and ncu's reading of why it wins at few CTAs only
EDITS["nomix"] = [(_RELU_MIX, "  static constexpr bool RELU_MIX = false;\n")]

# The two consumer warpgroups' relative phase (fifty-eighth session). setup_group's barrier
# starts both at a piece's first stage together, and their producers fill both rings at once, so
# they may run their stages in step: both in their units (contending for each scheduler's issue
# slots) at the same time, both in their stage heads (the vote and the first conversion, ~4.5
# cycles an instruction) at the same time. `phase` (ctaends plus, at every stage start): the
# other consumer's last stage start as a fraction of this consumer's own last stage period,
# folded to [0, 0.5] (0: in step, 0.5: half a stage apart), counted in four buckets, thread 0's
# counts kept in the harness's consumer words 0, 2, 3, 4 (word 1: the stages measured; word 5:
# the end), printed by CTADUMP=raw. A reading, not a timing: every consumer thread runs its few
# instructions a stage.
_SETUP_CALL = "    setup_group(p, gbeg, gend, kbeg);\n"
_PIECE_LOOP = (_SETUP_CALL + "#pragma unroll 1\n"
               "    for (int n0 = stage_start<S::MB>(kbeg / kBlockN) + S::KEYS * c; n0 < kend;"
               " n0 += S::KEYS * CONS, ring.advance()) {\n      if constexpr (SPLIT)\n")
EDITS["phase"] = EDITS["ctaends"] + [
    ("  int range[4];\n", "  int range[4];\n  unsigned long long phase_last[CONS];  // phase: each consumer's last stage start\n"),
    (_STAGE_TOP,
     "  long long ph_prev = 0;\n"
     "  unsigned long long ph_hist[5] = {0, 0, 0, 0, 0};  // folded phase buckets 0..3, stages measured\n"
     "  // every thread of the warpgroup alike, with no branch and no division routine (a divergent\n"
     "  // path in the stage loop makes ptxas serialize its wgmma: C7518); thread 0's counts are kept\n"
     "  OPUS_DEV void phase_mark() {\n"
     "    volatile unsigned long long* pl = sm.phase_last;\n"
     "    const long long t = clock64(), other = (long long)pl[(c + 1) % CONS];\n"
     "    const bool ok = ph_prev != 0 && other != 0 && t > ph_prev;\n"
     "    float x = ok ? __fdividef(float(t - other), float(t - ph_prev)) : 0.f;\n"
     "    x -= floorf(x);\n"
     "    const int f = imin(int(x * 8.f), 7), b = f < 4 ? f : 7 - f;\n"
     "    ph_hist[0] += ok && b == 0;\n    ph_hist[1] += ok && b == 1;\n    ph_hist[2] += ok && b == 2;\n"
     "    ph_hist[3] += ok && b == 3;\n    ph_hist[4] += ok;\n"
     "    ph_prev = t;\n"
     "    pl[c] = (unsigned long long)t;\n"
     "  }\n"
     + _STAGE_TOP + "    phase_mark();\n"),
    (_PIECE_LOOP,
     "    reinterpret_cast<volatile unsigned long long*>(sm.phase_last)[c] = 0;  // before setup_group's first barrier\n"
     "    ph_prev = 0;\n"
     + _PIECE_LOOP),
    (_CTAENDS_TAIL,
     _CTAENDS_TAIL.removesuffix("  }\n}\n") + "    const int cc = cons.c;\n"
     "    " + _cons_rec("cc") + "0] = cons.ph_hist[0];\n    " + _cons_rec("cc") + "1] = cons.ph_hist[4];\n"
     "    " + _cons_rec("cc") + "2] = cons.ph_hist[1];\n    " + _cons_rec("cc") + "3] = cons.ph_hist[2];\n"
     "    " + _cons_rec("cc") + "4] = cons.ph_hist[3];\n    " + _cons_rec("cc") + "5] = stamp_now();\n"
     "  }\n}\n"),
]


def _stagger(cycles: int) -> list[tuple[str, str]]:
    """Consumer 1 of a two-consumer body starts each piece's stages `cycles` SM clocks after its
    set-up (a sleep; its ring fills meanwhile), so the two run out of step from the first stage
    on (timing only: the logits are exact). ~1,850 cycles is half a stage of r1w12 at 64 x 32768
    on the H100 (~3,700 cycles a stage), 3,700 a whole one (back in step: the control)."""
    sleep = (f"    if (CONS == 2 && c == 1) {{  // stagger{cycles}\n      const long long t0 = clock64();\n"
             f"      while (clock64() - t0 < {cycles}) __nanosleep(64);\n    }}\n")
    return [(_PIECE_LOOP, _PIECE_LOOP.replace(_SETUP_CALL, _SETUP_CALL + sleep, 1))]


for _cyc in (900, 1850, 3700):
    EDITS[f"stagger{_cyc}"] = _stagger(_cyc)

# spanmode (span4 in Prefill launches only, both forms in one kernel picked at run time) was
# refuted in the fiftieth session (-3.6% at 16384 x 16384 where span4 is -5.5%, +2.0% at 4096 x
# 4096): a Prefill launch now runs its own kernel where the shape has one (I8Shape::PREFILL_WHOLE).
# prefillrev (Prefill's row groups last first) landed then (make_walk; -1.4..-4% on the H100).
# prefillfwd: the Prefill row groups back in index order (make_walk before prefillrev landed): its
# A/B where it was not measured before landing (r8w12 at 32 heads: the landed order 5.4% and
# 9.5% faster at 16384 x 16384 and 4096 x 4096, H100, fifty-first session)
EDITS["prefillfwd"] = [("kernel_sm90_i8.cuh", "    w.pi.init(sv, rows, (int)gridDim.x - 1 - (int)blockIdx.x);\n",
                        "    w.pi.init(sv, rows, (int)blockIdx.x);\n")]

# persist: Prefill on persistent CTAs (the harness's PERSIST=1 launches min(groups, CTA slots)):
# each CTA walks row groups in rounds of the grid, the longest first and every other round
# reversed (a snake, so a CTA's groups sum to about the same keys as any other's), its ring and
# producer running on into the next group; exact (every group scored once). What it would save:
# a CTA's launch, prologue and first copies a row group. Refuted (fifty-first session, H100:
# +0.3..+2.4% at four Prefill shapes); kept for persistone's bound of the set-up
EDITS["persist"] = [
    ("  PrefillIter pi{0, 1};\n  bool prefill = false;\n",
     "  PrefillIter pi{0, 1};\n  bool prefill = false;\n  int j = 0, groups = 0;  // persist: this CTA's place in the walk, the row groups\n"),
    ("    return prefill ? pi.next(sv, p) : fi.next(sv, rows, p, rec);\n",
     "    if (!prefill) return fi.next(sv, rows, p, rec);\n"
     "    while (!pi.next(sv, p)) {\n"
     "      const int P = (int)gridDim.x, k = j / P + 1;\n"
     "      j = k * P + ((k & 1) ? P - 1 - (int)blockIdx.x : (int)blockIdx.x);\n"
     "      if (j >= groups) return false;\n"
     "      pi.init(sv, rows, groups - 1 - j);\n"
     "    }\n"
     "    return true;\n"),
    ("    w.pi.init(sv, rows, (int)gridDim.x - 1 - (int)blockIdx.x);\n",
     "    w.groups = (sv.start(sv.num_seqs) + rows - 1) / rows;\n"
     "    w.j = (int)blockIdx.x;\n"
     "    if (w.j < w.groups) w.pi.init(sv, rows, w.groups - 1 - w.j);\n"),
    ("checks.h", "         ((int64_t)c.grid_x * R >= rows ||\n", "         (true ||\n"),
]

# qstage4: the set-up's query inputs staged a piece ahead by the stager (QSTAGE, warp 3 of the
# producer warpgroup) at two and four rows too: the rows' q bytes by one bulk copy (the rows are
# contiguous), their scale words and weights; r4w12's shared memory crosses a carve-out step
# (192,000 + 18,448 bytes: L1 60 -> 28 KB), so the step's check is off. Exact. With persist
# (persistqstage4) a CTA's later groups find their inputs in shared memory: what the set-up's
# global round trip costs a Prefill group, apart from its code. Refuted (fifty-second session,
# H100: +3.0..+4.1% alone, the first group waiting on the stager; -0.6..-1.4% on persist's later
# groups, the carve-out step ~1% of it)
EDITS["qstage4"] = [
    ("  static constexpr bool QSTAGE = !SPLIT && R == 1 && H <= 64;\n",
     "  static constexpr bool QSTAGE = !SPLIT && R <= 4 && H <= 64;\n"),
    ("  static_assert(!S::QSTAGE || sm90_carveout_kb(bytes)", "  static_assert(true || sm90_carveout_kb(bytes)"),
]
# ring3: a ring of three stages a consumer where there were four (two consumers: 768 keys, as
# three consumers hold): 34,816 bytes less shared memory at r4w12, so qstage4ring3's staged
# inputs leave it in its carve-out step (175,632 bytes). For the Prefill form, whose keys come
# from L2, a shallower ring may cost little. Exact. Fifty-second session (H100): r4w12 Prefill
# -0.2..-0.3% (free there); qstage4ring3 +3.1..+3.7% (the stager's cost is not the step)
EDITS["ring3"] = [("  static constexpr int STAGES = SPLIT ? 2 : (CONS == 3 ? 768 : 1024) / KEYS;\n",
                   "  static constexpr int STAGES = SPLIT ? 2 : 768 / KEYS;\n")]
# colsetup (the query operand a column at a time where the keys are signed) landed in the
# fifty-second session: kernel_sm90_i8.cuh's COL_SETUP (docs/perf-notes.md).
# nocol: the set-up's word-at-a-time body again where COL_SETUP took it (the kernel before the
# fifty-second session): what the column form is worth to a kernel the landing did not time (i8c's
# r4w12 Prefill form, whose stage loop holds a register pair moved through local memory). Exact.
# Fifty-second session (H100): i8c r4w12 +10.5% / +7.3% / +2.3% at 4096 x 4096, the V4 fresh
# prefill and a 16K chunk without the column form, r4w12 +12.1% / +8.6% / +1.3%
_COL_SETUP = "  static constexpr bool COL_SETUP = KEY_SIGNED && !SPLIT && (TPC == 1 || TPC == 2 || TPC == 4);\n"
EDITS["nocol"] = [(_COL_SETUP, _COL_SETUP.replace("= KEY_SIGNED", "= false && KEY_SIGNED"))]
# wlds64: the fast weights in column order, a unit's read as NT 8-byte loads (the tree before
# I8Shape::wslot, fifty-third session): the A/B of the 16-byte loads where the weights live in
# shared memory (256 columns: r4 at 64 heads, r8 at 32, r2 at 128). Exact (the same values).
# Fifty-fourth session (H100, against the landed W_VEC): r4w12 Prefill +0.2% / +0.1% / +1.0% at
# 4096 x 4096, 16384 x 4096 (r4) and 4096 x 16384, i8c r4w12 +1.6..+2.2%, r4w12 Table (MTP 4)
# +0.7..+1.8%, r2w12 within 0.4%.
EDITS["wlds64"] = [("  static constexpr bool W_VEC = !W_IN_REGS && CONS == 2;\n", "  static constexpr bool W_VEC = false;\n")]
# r4w16: r4 at 64 heads with three consumer warpgroups (id 18 at 16 warps): the column set-up
# with its threads past the 256 columns idle (the group's 4,096 operand words do not split evenly
# over 384 threads), the TPC rule moved above OPERAND_WORDS so a thread holds its four blocks. At
# 160 registers a consumer (its Prefill stage loop: 22 local accesses); r1 and r2 gained 10-13%
# from a third consumer. Exact. Refuted (fifty-fourth session, H100): Prefill +5.0% / +4.0% /
# -0.9% at 4096 x 4096, 16384 x 4096 (r4), 4096 x 16384; Table (MTP 4) +5..+27%.
_OPERAND_WORDS = "  static constexpr int OPERAND_WORDS = (S::N * 16 + S::CT - 1) / S::CT;  // a thread's words\n"
_TPC = "  static constexpr int TPC = S::CT % S::N == 0 ? S::CT / S::N : 0;\n"
_BPT = "  static constexpr int BPT = COL_SETUP ? 4 / TPC : 1;\n"
_TPC_RAGGED = "  static constexpr int TPC = S::CT % S::N == 0 ? S::CT / S::N : S::N == 256 && S::CT > S::N ? 1 : 0;\n"
EDITS["r4w16"] = [
    ("registry.h", "  X(18, sm90_i8_r4w12,     sm90,   i8,   4, 12, 64, 4, 1, 0x7)                 \\\n",
     "  X(18, sm90_i8_r4w12,     sm90,   i8,   4, 16, 64, 4, 1, 0x7)                 \\\n"),
    (_OPERAND_WORDS, _TPC_RAGGED + _COL_SETUP + _BPT
     + "  static constexpr int OPERAND_WORDS = COL_SETUP ? 4 * BPT : (S::N * 16 + S::CT - 1) / S::CT;\n"),
    (_TPC + _COL_SETUP + _BPT, ""),
    ("    const int n = ct / TPC, b0 = (ct % TPC) * BPT, row = r0 + n / H;\n",
     "    const int n = imin(ct / TPC, S::N - 1), b0 = (ct % TPC) * BPT, row = ct < S::N * TPC ? r0 + n / H : r1;\n"),
    ("    const int n = ct / TPC, b0 = (ct % TPC) * BPT;\n    const uint32_t qs = sm.qscale[n];\n",
     "    if (ct >= S::N * TPC) return;  // warp-uniform: the threads past the columns\n"
     "    const int n = ct / TPC, b0 = (ct % TPC) * BPT;\n    const uint32_t qs = sm.qscale[n];\n"),
]
# colbias: the column form of the set-up (COL_SETUP) where the keys are biased too -- its bias
# slice from the column's sum over its TPC threads (adjacent lanes, log2 TPC shuffles; the
# word-at-a-time body sums each word over 16 lanes) written with one 8- or 16-byte store a
# thread -- and from the staged words (QSTAGE: whole blocks from shared memory): r1w12 at 64 heads,
# r2w12 at 32, r4w12 at 16 and 32, r8w12 at 16 join it. Exact (the same bytes at the same places).
# Refuted (fifty-second session, H100: r1w12 +0..+2.2% at 1-64 sequences, i8c r1w12 within 0.4%)
EDITS["colbias"] = [
    (_COL_SETUP, _COL_SETUP.replace("= KEY_SIGNED && ", "= ")),
    ("(OPERAND_WORDS == 4 * BPT && !S::QSTAGE), \"a thread's words: its blocks\");\n",
     "OPERAND_WORDS == 4 * BPT, \"a thread's words: its blocks\");\n"),
    ("    const uint4* src = reinterpret_cast<const uint4*>(args.q + ((long long)r0 * H + n) * kHeadBytes) + b0;\n",
     "    const uint4* src;\n"
     "    if constexpr (S::QSTAGE)\n"
     "      src = reinterpret_cast<const uint4*>(sm.qst.q + n * 16) + b0;  // the staged rows' words\n"
     "    else\n"
     "      src = reinterpret_cast<const uint4*>(args.q + ((long long)r0 * H + n) * kHeadBytes) + b0;\n"),
    ("        *reinterpret_cast<uint32_t*>(core) = lo[j][0];\n        *reinterpret_cast<uint32_t*>(core + 128) = hi[j][0];\n      }\n    }\n  }\n",
     "        *reinterpret_cast<uint32_t*>(core) = lo[j][0];\n        *reinterpret_cast<uint32_t*>(core + 128) = hi[j][0];\n      }\n    }\n"
     "    if constexpr (!KEY_SIGNED) {  // the bias slice: slot pairs k0 .. k0 + KP - 1 of the column's\n"
     "      int qsum = 0;\n"
     "#pragma unroll\n"
     "      for (int j = 0; j < 4; ++j)\n"
     "#pragma unroll\n"
     "        for (int bi = 0; bi < BPT; ++bi) qsum += __dp4a(int(lo[j][bi]), 0x01010101, 0) + __dp4a(int(hi[j][bi]), 0x01010101, 0);\n"
     "#pragma unroll\n"
     "      for (int m = 1; m < TPC; m <<= 1) qsum += __shfl_xor_sync(0xFFFFFFFFu, qsum, m);  // the column's TPC lanes\n"
     "      const I8BiasQuot bq = i8_bias_quot(qsum);\n"
     "      constexpr int KP = 16 / TPC;\n"
     "      const int k0 = (ct % TPC) * KP;\n"
     "      uint32_t pw[KP / 2];\n"
     "#pragma unroll\n"
     "      for (int i = 0; i < KP / 2; ++i) pw[i] = i8_bias_pair(bq, k0 + 2 * i) | i8_bias_pair(bq, k0 + 2 * i + 1) << 16;\n"
     "      uint8_t* core = sm.qb + kScaleBlocks * (S::N * 32) + (n >> 3) * 256 + (n & 7) * 16 + (k0 >> 3) * 128 + 2 * (k0 & 7);\n"
     "      if constexpr (KP == 4) {\n"
     "        *reinterpret_cast<uint2*>(core) = make_uint2(pw[0], pw[1]);\n"
     "      } else {\n"
     "        *reinterpret_cast<uint4*>(core) = make_uint4(pw[0], pw[1], pw[2], pw[3]);\n"
     "        if constexpr (KP == 16) *reinterpret_cast<uint4*>(core + 128) = make_uint4(pw[4], pw[5], pw[6], pw[7]);\n"
     "      }\n"
     "    }\n  }\n"),
]
# stamps2: the stamps with the consumers' set-up points (consumer window, columns loaded, verdict,
# operand built, set-up done) taken at CTA 0's second group, not its first: with persist
# (persiststamps2) the set-up of a group that starts mid-run, its ring already full
def _second_group(text: str) -> str:
    for i in (9, 14, 15, 16, 10):
        text = text.replace(f"TS_ONCE({i});", f"{{ if (npiece_ts == 1) TS_ONCE({i}); }}")
    return text.replace("TS_ONCE(10); }\n", "TS_ONCE(10); }\n    ++npiece_ts;\n")


EDITS["stamps2"] = [(old, _second_group(new)) for old, new in EDITS["stamps"]] + [
    ("  uint32_t qphase = 0;  // QSTAGE: the staged inputs' phase\n",
     "  uint32_t qphase = 0;  // QSTAGE: the staged inputs' phase\n  int npiece_ts = 0;  // stamps2: the groups set up so far\n"),
]

# no weight-spread term in the fast rule (only the max relu needs it: with relusat, the simpler
# tree; alone, wrong bits for groups spanning more than 104 binades, which the harness has none of)
EDITS["nospread"] = [("    const bool fast = cols_fast && wexp_g - wlo_g <= kI8WeightSpread;  // uniform\n",
                      "    const bool fast = cols_fast;  // uniform\n")]
EDITS["nc128"] = [("  static constexpr int NC = N < 64 ? N : 64;       // columns of one wgmma\n",
                   "  static constexpr int NC = N < 128 ? N : 128;     // columns of one wgmma\n"),
                  ("sm90_ptx.cuh", "#undef OPUS_IGMMA0_BOTH\n", _W128)]
# the group set-up's operand loop unrolled at every size (before the fifteenth session, the rolled
# loop was only measured in Free mode: this is the check for Prefill, whose CTAs set up a group
# for every piece)
EDITS["unrollsetup"] = [("  static constexpr bool ROLL_SETUP = OPERAND_WORDS >= 8;\n",
                         "  static constexpr bool ROLL_SETUP = false;\n")]
# The consumer's skip of a piece it has no keys of (several variants edit around it).
_SKIP = ("    if (kbeg >= kend) {  // the producer skips it too; QSTAGE: its staged inputs go back unread\n"
         "      qstage_wait();\n      qstage_done();\n      return;\n    }\n")
# ctaends with each consumer warpgroup's account (the harness's kConsWords words a consumer after
# the CTA's four): its stages in the first piece and in all, the cycles its thread 0 waited on
# full stages, and when its first piece ended, its second piece's set-up ended and it ended.
# CTADUMP=1 prints every CTA's. Timing only in its waits' clock reads.
EDITS["piecetimes"] = EDITS["ctaends"] + [
    (_STAGE_TOP,
     "  long long waited = 0;\n  int nstages = 0, npiece = 0;\n" + _TIMED_STAGE_TOP
     + "    waited += clock64() - w0;\n    ++nstages;\n"),
    (_SKIP + "    setup_group(p, gbeg, gend, kbeg);\n",
     _SKIP
     + "    const bool rec = args.path_stats && ct % 128 == 0;\n"
     "    if (rec && npiece == 1) {\n      " + _cons_rec("c") + "0] = nstages;\n      " + _cons_rec("c") + "3] = stamp_now();\n    }\n"
     "    setup_group(p, gbeg, gend, kbeg);\n"
     "    if (rec && npiece == 1) " + _cons_rec("c") + "4] = stamp_now();\n    ++npiece;\n"),
    ("      cons.piece(p);\n      ++npieces;\n",
     "      cons.piece(p);\n      ++npieces;\n"
     "      if (ct % 128 == 0 && args.path_stats) {\n        const int c = cons.c;\n"
     "        " + _cons_rec("c") + "1] = cons.nstages;\n        " + _cons_rec("c") + "2] = cons.waited;\n"
     "        " + _cons_rec("c") + "5] = stamp_now();\n        if (npieces == 1) " + _cons_rec("c") + "0] = cons.nstages;\n      }\n"),
]
# Free mode's unit ranges with their ends moved back to a stage's start (4 tiles, the sequence's
# own numbering) where they fall among a group's tiles: no CTA scores a stage that another also
# loads and scores in part (both ends of a range inside a group did: 504 tiles took 127-128 stages,
# 43 for the busiest consumer at r1w16 64 x 64K, where 126 would give 42). One scan finds the
# sequence of both ends. Exact (every unit still in exactly one range); Free mode only (the
# Table records and the other backends keep the rule they share).
_ALIGN = (
    "OPUS_DEV int stage_aligned(const SeqView& sv, int rows, int x, int b, int base) {\n"
    "  if (b >= sv.num_seqs) return x;\n"
    "  int qa, qb, end, lo, span;\n  sv.bounds(b, qa, qb, end, lo, span);\n"
    "  const int stride = kPieceCost + span, off = x - base;\n"
    "  if (off < 0 || span <= 0) return x;\n"
    "  const int j = off / stride, o = off - j * stride - kPieceCost;\n"
    "  if (o <= 0) return x;\n"
    "  const int ta = imax((lo + o) & ~3, lo);\n"
    "  return base + j * stride + kPieceCost + (ta - lo);\n}\n")
EDITS["stagealign"] = [
    ("drive.cuh", "// Free mode: the CTA's unit range, by its first warp / wave (a scan over the sequences).\n",
     _ALIGN + "// Free mode: the CTA's unit range, by its first warp / wave (a scan over the sequences).\n"),
    ("drive.cuh", "  cr.b = 0;\n  cr.base = 0;\n  long long carry = 0;\n",
     "  cr.b = 0;\n  cr.base = 0;\n  int be = 0, basee = 0;\n  long long carry = 0;\n"),
    ("drive.cuh", "    carry = warp_bcast(incl, OPUS_WARP - 1);\n    if (carry > cr.u_begin) break;  // every later cumulative count is past u_begin\n  }\n  return cr;\n",
     "    const bool before_e = s < sv.num_seqs && incl <= cr.u_end;\n"
     "    be += warp_count(before_e);\n    basee += (int)warp_sum_i64(before_e ? u : 0);\n"
     "    carry = warp_bcast(incl, OPUS_WARP - 1);\n    if (carry > cr.u_end) break;\n  }\n"
     "  cr.u_end = stage_aligned(sv, rows, cr.u_end, be, basee);\n"
     "  cr.u_begin = stage_aligned(sv, rows, cr.u_begin, cr.b, cr.base);\n  return cr;\n"),
]
# Where a stage boundary's ~0.45 us goes (sixteenth session, stage128): ctaends plus, for each
# consumer warpgroup's thread 0, clock64 cycles summed over its stages -- the wait for the stage's
# full barrier, the vote after it (scale reads, the warpgroup barrier), from the vote to the first
# wgmma's issue (the first M block's conversion), and each span's tail from its last wgmma's issue
# through its last stores -- in the harness's six words a consumer (stages, wait, vote, head, tail,
# end; CTADUMP=raw prints them). Fast stages only (the harness's data has no canonical one).
_BND = _cons_rec("cons.c")
EDITS["boundary"] = EDITS["ctaends"] + [
    (_STAGE_TOP,
     "  long long cyc_wait = 0, cyc_vote = 0, cyc_head = 0, cyc_tail = 0, t_mark = 0;\n  int nstages = 0;\n"
     + _TIMED_STAGE_TOP + "    t_mark = clock64();\n    cyc_wait += t_mark - w0;\n    ++nstages;\n"),
    ("    if (count_paths) atomicAdd(&args.path_stats[fast ? 0 : 1], 1ull);\n    if (fast) {\n      uint32_t offsets[S::VK];\n",
     "    {\n      const long long tv = clock64();\n      cyc_vote += tv - t_mark;\n      t_mark = tv;\n    }\n"
     "    if (count_paths) atomicAdd(&args.path_stats[fast ? 0 : 1], 1ull);\n    if (fast) {\n      uint32_t offsets[S::VK];\n"),
    ("      mma_chunk_fast<S::NC>(acc[u & 1], afr[ml & 1], ch);\n      wgmma_commit();\n",
     "      mma_chunk_fast<S::NC>(acc[u & 1], afr[ml & 1], ch);\n      wgmma_commit();\n"
     "      if (u == 0 && sp == 0) cyc_head += clock64() - t_mark;\n"),
    ("    float wv[S::NT][2];\n    unit_weights((U - 1) % S::CHUNKS, wv);\n    retired<0>(acc[(U - 1) & 1]);\n",
     "    const long long te = clock64();\n"
     "    float wv[S::NT][2];\n    unit_weights((U - 1) % S::CHUNKS, wv);\n    retired<0>(acc[(U - 1) & 1]);\n"),
    ("    if (unit_rows(U - 1, wv, rs)) store_unit(U - 1, rs, n0, scale[(SPAN - 1) & 1], mb0);\n  }\n",
     "    if (unit_rows(U - 1, wv, rs)) store_unit(U - 1, rs, n0, scale[(SPAN - 1) & 1], mb0);\n"
     "    cyc_tail += clock64() - te;\n  }\n"),
    ("      cons.piece(p);\n      ++npieces;\n",
     "      cons.piece(p);\n      ++npieces;\n"
     "      if (ct % 128 == 0 && args.path_stats) {\n"
     "        " + _BND + "0] = cons.nstages;\n        " + _BND + "1] = cons.cyc_wait;\n"
     "        " + _BND + "2] = cons.cyc_vote;\n        " + _BND + "3] = cons.cyc_head;\n"
     "        " + _BND + "4] = cons.cyc_tail;\n        " + _BND + "5] = stamp_now();\n      }\n"),
]
# the rolled operand loop in Prefill too (the fifteenth session's kernel, before the launch's mode
# picked the body), in the kernels without COL_SETUP; r4w12 -3.2% at 4096 x 4096 before COL_SETUP
# took its set-up (fifty-second session)
EDITS["rollprefill"] = [("    else if (ROLL_SETUP && args.mode != kModePrefill)\n", "    else if (ROLL_SETUP)\n")]
# A CTA's later pieces without their group set-up (timing only: they score the first group's
# query, so their cells are wrong): each consumer warpgroup writes its own keys and windows and
# goes on, with no barrier across the consumers and no operand built. What a piece's set-up and
# the drain before it cost, the bound of a query operand prepared ahead of the stages.
EDITS["onesetup"] = [
    ("  OPUS_DEV void piece(const Piece& p) {\n    int gbeg, gend;\n    group_keys<R, UNION>(args, p, gbeg, gend);\n"
     "    const int kbeg = piece_first_key(p, gbeg);\n    kend = imin(gend, p.t1 * kBlockN);\n"
     + _SKIP + "    setup_group(p, gbeg, gend, kbeg);\n",
     "  bool set_up = false;\n"
     "  OPUS_DEV void setup_light(const Piece& p, int gbeg, int gend, int kbeg) {\n"
     "    r0 = p.r0;\n    r1 = imin(p.r1, p.r0 + R);\n    const int wr = ct % 128;\n"
     "    bar_sync(8 + c, 128);\n"
     "    if (wr < R) {\n      int wbeg = 0, wend = 0;\n      long long wbase = 0;\n"
     "      row_window(args, r0 + wr, r0 + wr < r1, wbeg, wend, wbase);\n"
     "      const int b = imax(wbeg, kbeg);\n      sm.keys[c].rbeg[wr] = b;\n"
     "      sm.keys[c].rlen[wr] = imax(imin(wend, kend) - b, 0);\n"
     "      sm.optr[wr] = static_cast<char*>(args.out) + wbase * kOutBytes<NARROW>;\n    }\n"
     "    if (wr == 0) {\n      sm.keys[c].vbeg = gbeg;\n      sm.keys[c].vend = gend;\n    }\n"
     "    bar_sync(8 + c, 128);\n"
     "    qstage_wait();  // QSTAGE: the stager's buffer back, unread\n    qstage_done();\n"
     "    if constexpr (ROWS_IN_REGS) {\n#pragma unroll\n      for (int r = 0; r < R; ++r) orow[r] = sm.optr[r];\n    }\n"
     "  }\n"
     "  OPUS_DEV void piece(const Piece& p) {\n    int gbeg, gend;\n    group_keys<R, UNION>(args, p, gbeg, gend);\n"
     "    const int kbeg = piece_first_key(p, gbeg);\n    kend = imin(gend, p.t1 * kBlockN);\n"
     + _SKIP
     + "    if (set_up && !SPLIT) {\n      setup_light(p, gbeg, gend, kbeg);\n    } else {\n"
     "      setup_group(p, gbeg, gend, kbeg);\n      set_up = true;\n    }\n")]
# onesetupbar (onesetup and this edit, timing only): the light set-up's first barrier across both
# consumers, as setup_group's is -- onesetup less the consumers' drift past each other at a piece
# boundary: with persist, what the drain costs apart from the set-up's own work
EDITS["onesetupbar"] = EDITS["onesetup"] + [("    bar_sync(8 + c, 128);\n    if (wr < R) {\n",
                         "    bar_sync(1, S::CT);  // onesetupbar: both consumers meet, as at setup_group\n    if (wr < R) {\n")]
# The bias slice at one chunk by the column's 16 lanes (two bytes each), as at two chunks and up,
# in place of lane 0's whole slice once an operand word: ~250 fewer instructions of the set-up's
# straight code (seventeenth session: ncu puts the set-up's samples on instruction fetch).
EDITS["bias16"] = [("    if constexpr (S::CHUNKS > 1 || CONS == 2) {\n      *reinterpret_cast<uint16_t*>",
                    "    if constexpr (true) {\n      *reinterpret_cast<uint16_t*>")]
# The former kernel (before the seventeenth session): the one-chunk bias slice by lane 0 at two
# consumers too, and the rolled set-up loop one word a turn.
EDITS["bias16w12"] = [("    if constexpr (S::CHUNKS > 1 || CONS == 2) {\n      *reinterpret_cast<uint16_t*>",
                       "    if constexpr (S::CHUNKS > 1) {\n      *reinterpret_cast<uint16_t*>")]
# (Since the thirty-third session the rolled set-up is setup_turns: these take its turns to one
# and to four words.)
EDITS["setupunroll2"] = [("      setup_turns<2, true>(fast, words);\n", "      setup_turns<1, true>(fast, words);\n")]
# ... and four words a turn (r2w12: two turns, r4w12: four).
EDITS["setupunroll4"] = [("      setup_turns<2, true>(fast, words);\n", "      setup_turns<4, true>(fast, words);\n")]
# Code layout alone (timing only, exact): PAD dead stores under a never-true test at the kernel's
# entry, so everything after it -- the set-up, the stage loops -- sits PAD * ~2 instructions
# later, with the live code and its registers unchanged. Whether r1w16's 10-30% swings with any
# set-up edit (seventeenth session: bias16, voteahead, boundary) are the hot loops' place in the
# instruction caches rather than their allocation.
_PAD_AT = "  const SeqView sv = seq_view(args);\n  const int tid = threadIdx.x, lane = tid & 31;\n"
for _pad in (4, 8, 16, 32, 64):
    EDITS[f"pad{_pad}"] = [(_PAD_AT, _PAD_AT + (
        "  if (args.mode == 0x7EAD) {  // never (mode codes are small): code-layout padding\n"
        "#pragma unroll\n"
        f"    for (int i = 0; i < {_pad}; ++i)\n"
        "      asm volatile(\"st.global.u32 [%0], %1;\" ::\"l\"(static_cast<uint32_t*>(args.out) + 33 * i), \"r\"(i + tid) : \"memory\");\n"
        "  }\n"))]
# The first group's query rows, scales and weights prefetched into L2 by the warp that knows the
# CTA's first sequence (Free: right after its scan; Table: after its record's read), while the
# walk, the row windows and the set-up's code run: the set-up's column loads, one DRAM trip of
# 1.3-2.5 us on the start-up's path (fourteenth session's stamps), become L2 hits. Exact (a hint:
# the rows are clamped into the launch's, so no address is outside its tensors).
_FREE_SCAN = ("  if (args.mode == kModeFree && tid < 32) {\n"
              "    const CtaRange cr = cta_range_scan(sv, R, blockIdx.x, gridDim.x, lane);\n"
              "    if (lane == 0) {\n      sm.range[0] = cr.u_begin;\n      sm.range[1] = cr.u_end;\n"
              "      sm.range[2] = cr.b;\n      sm.range[3] = cr.base;\n    }\n  }\n")
EDITS["prefetchfirst"] = [
    ("template <int R, bool UNION = false>\nOPUS_DEV void group_keys(",
     "// L2 prefetch of the rows of the group at unit offset `into` of sequence b (R rows a group).\n"
     "template <int R, int H>\n"
     "OPUS_DEV void prefetch_first_group(const LaunchArgs& args, const SeqView& sv, int b, int into, int lane) {\n"
     "  if (b < 0 || b >= sv.num_seqs) return;\n"
     "  int qa, qb, end, lo, span;\n"
     "  sv.bounds(b, qa, qb, end, lo, span);\n"
     "  const int gu = SeqView::group_units(span);\n"
     "  const int r0 = qa + (gu > 0 ? imax(into, 0) / gu : 0) * R;\n"
     + _prefetch_rows("r0", "imin(qb, r0 + R)", "  ") + "}\n\n"
     "template <int R, bool UNION = false>\nOPUS_DEV void group_keys("),
    (_FREE_SCAN, _FREE_SCAN[:-len("  }\n")]
     + "    prefetch_first_group<R, H>(args, sv, cr.b, cr.u_begin - cr.base, lane);\n"
       "  } else if (args.mode == kModeTable && tid < 32) {\n"
       "    const int32_t* rec = args.records + (long long)blockIdx.x * kRecordInts;\n"
       "    prefetch_first_group<R, H>(args, sv, rec[2], rec[0] - rec[3], lane);\n"
       "  }\n")]
# The launch's row metadata (qsl, row_ends, row_starts) prefetched into L2 by warp 0 at the entry:
# the Free scan reads qsl and then, through it, row_ends (two dependent DRAM trips, ~2.3 us to
# the scan's end), the Table walk reads them after its record. With both arrays in flight from
# the first instruction the dependent read finds L2. Exact (a hint; every address inside its array).
EDITS["prefetchmeta"] = [
    ('  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");\n',
     '  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");\n'
     "  if (tid < 32) {  // the row metadata's 128-byte lines, into L2 before anything reads them\n"
     "    const int qlines = (args.num_seqs + 1 + 31) / 32, rlines = (args.num_rows + 31) / 32;\n"
     "    for (int l = lane; l < qlines; l += 32) asm volatile(\"prefetch.global.L2 [%0];\" ::\"l\"(args.qsl + 32 * l));\n"
     "    for (int l = lane; l < rlines; l += 32) {\n"
     "      asm volatile(\"prefetch.global.L2 [%0];\" ::\"l\"(args.row_ends + 32 * l));\n"
     "      if (args.row_starts != nullptr) asm volatile(\"prefetch.global.L2 [%0];\" ::\"l\"(args.row_starts + 32 * l));\n"
     "    }\n"
     "  }\n")]
# The producer's first table entry read beside its group's row windows, not after them: the
# entry of the key the walk's first tile gives (the first stage when the group's window starts at
# or before that tile: always without row_starts), read for a key under the key cap (inside the
# table's span), used when the stage the windows give is that one and the window holds the
# chunk, else read again as before. The stamps put row window -> table entry at ~0.5 us of the
# producer's start-up chain. Exact (the same slot or a fresh read).
EDITS["btahead"] = [
    ("  OPUS_DEV void piece(const Piece& p) {\n    int gbeg, gend;\n    group_keys<R, UNION>(args, p, gbeg, gend);\n"
     "    const int kbeg = piece_first_key(p, gbeg), kend = imin(gend, p.t1 * kBlockN);\n    if (kbeg >= kend) return;  // the consumers skip it too (its first stage may start below kend)\n"
     "    const int32_t* bt_row = args.block_tables + (long long)(args.gather ? p.r0 : p.b) * args.stride_bt;\n"
     "    constexpr int STEP = S::KEYS * CONS;\n    int n0 = stage_start<S::MB>(kbeg / kBlockN) + S::KEYS * c;\n"
     "    long long slot = bulk ? chunk_slot(bt_row, n0, gbeg, gend) : -2;\n",
     "  OPUS_DEV void piece(const Piece& p) {\n"
     "    const int32_t* bt_row = args.block_tables + (long long)(args.gather ? p.r0 : p.b) * args.stride_bt;\n"
     "    const int L = chunk_keys(), k0 = lane * L, ns = stage_start<S::MB>(p.t0) + S::KEYS * c;  // btahead\n"
     "    const long long spec = bulk && k0 < S::KEYS && ns + k0 < args.key_cap ? key_slot(args, bt_row, ns + k0) : -2;\n"
     "    int gbeg, gend;\n    group_keys<R, UNION>(args, p, gbeg, gend);\n"
     "    const int kbeg = piece_first_key(p, gbeg), kend = imin(gend, p.t1 * kBlockN);\n    if (kbeg >= kend) return;  // the consumers skip it too (its first stage may start below kend)\n"
     "    constexpr int STEP = S::KEYS * CONS;\n    int n0 = stage_start<S::MB>(kbeg / kBlockN) + S::KEYS * c;\n"
     "    long long slot = !bulk ? -2 : n0 != ns ? chunk_slot(bt_row, n0, gbeg, gend) : k0 < S::KEYS && ns + k0 < gend && ns + k0 + L > gbeg ? spec : -2;\n"),
]
# setupil (the set-up's conversion as independent chains) landed in the thirty-third session:
# kernel_sm90_i8.cuh's setup_turns (docs/perf-notes.md).
# The set-up's code fetched before the first real set-up: the one-row kernels that stage their
# query inputs (QSTAGE) run the consumers' piece once on no rows before their walk -- the same
# code (one call site), no global reads, no staged-buffer handshake, every shared value it writes
# written again by the real set-up -- so the first real set-up runs from a warm instruction cache.
# Exact. With the stamps (warmstamps), the real set-up's own length: what a consumer that took its
# pieces from the stager (no walk of its own) would save at the start of a small call.
EDITS["warmsetup"] = [
    ("  uint32_t qphase = 0;  // QSTAGE: the staged inputs' phase\n",
     "  uint32_t qphase = 0;  // QSTAGE: the staged inputs' phase\n"
     "  bool warming = false;  // warmsetup: this piece is the set-up's dry run (no rows)\n"),
    ("    if constexpr (S::QSTAGE) mbar_wait(&sm.qst.full, qphase);\n",
     "    if constexpr (S::QSTAGE) if (!warming) mbar_wait(&sm.qst.full, qphase);\n"),
    ("    if constexpr (S::QSTAGE) {\n      fence_async_smem();\n      mbar_arrive(&sm.qst.empty);\n",
     "    if constexpr (S::QSTAGE) if (!warming) {\n      fence_async_smem();\n      mbar_arrive(&sm.qst.empty);\n"),
    ("    r0 = p.r0;\n    r1 = imin(p.r1, p.r0 + R);\n",
     "    r0 = p.r0;\n    r1 = warming ? p.r0 : imin(p.r1, p.r0 + R);\n"),
    ("    group_keys<R, UNION>(args, p, gbeg, gend);\n    const int kbeg = piece_first_key(p, gbeg);\n    kend = imin(gend, p.t1 * kBlockN);\n",
     "    if (warming) {\n      gbeg = 0;\n      gend = kBlockN;\n    } else {\n      group_keys<R, UNION>(args, p, gbeg, gend);\n    }\n"
     "    const int kbeg = warming ? 0 : piece_first_key(p, gbeg);\n    kend = warming ? kBlockN : imin(gend, p.t1 * kBlockN);\n"),
    ("    setup_group(p, gbeg, gend, kbeg);\n",
     "    setup_group(p, gbeg, gend, kbeg);\n    if (warming) {\n      warming = false;\n      return;\n    }\n"),
    ("  cons.ones = kI8Ones;\n  Piece p;\n  while (walk.next(args, R, p))\n",
     "  cons.ones = kI8Ones;\n  Piece p{0, 0, 1, 0, 1};  // warmsetup: the dry run's piece (its rows are dropped)\n"
     "  bool first = I8Shape<R, H, CONS, SPLIT>::QSTAGE && !UNION;\n  cons.warming = first;\n"
     "  while (first ? (first = false, true) : walk.next(args, R, p))\n"),
]
# The stamps' set-up points taken by the real set-up only, not by the dry run (warmstamps,
# qpiecestamps)
_WARM_TS = [(f"    if (blockIdx.x == 0 && ct == 0{c}) TS_ONCE({i});", f"    if (blockIdx.x == 0 && ct == 0 && !warming{c}) TS_ONCE({i});")
            for i, c in ((9, ""), (10, ""), (14, " && qmax_hi != -12345"), (15, " && int(cols_fast) != 7"), (16, ""))]
# warmsetup with the stamps (its dry run returns before TS 10)
EDITS["warmstamps"] = EDITS["stamps"] + EDITS["warmsetup"] + [e for e in _WARM_TS if "TS_ONCE(10)" not in e[0]]
# The consumers take their pieces from the stager (QSTAGE: the one-row bodies at <= 64 heads):
# the stager, which walks the pieces anyway to stage each one's query inputs, also leaves the
# piece, its group's keys and its row's window (one row_window read, as group_keys and the
# set-up make) in the staged buffer, and a last entry that says there are no more; the consumers
# walk nothing and read no global memory before their set-up. qpiececold: that alone (the
# consumers wait for the staged piece where they walked); qpiece: with warmsetup's dry run first,
# so the set-up's code is fetched while the stager and the producer read. Exact (the same values
# from the same reads).
_QP_COMMON = [
    ("  float w[N];                       // their weights\n",
     "  float w[N];                       // their weights\n"
     "  int piece[5];                     // qpiece: the piece (b, r0, r1, t0, t1)\n"
     "  int gb, ge, wb, we, more;         // its group's keys, its row's window; more = 0: no more pieces\n"
     "  long long wbase;                  // its row's out offset\n"),
    ("    if (lane == 0) bulk_copy(sm.qst.q, args.q + (long long)r0 * H * kHeadBytes, bytes, &sm.qst.full);\n",
     "    if (lane == 0) bulk_copy(sm.qst.q, args.q + (long long)r0 * H * kHeadBytes, bytes, &sm.qst.full);\n"
     "    if (lane == 0) {  // qpiece: what the consumers' walk, group_keys and set-up would read\n"
     "      int s, e;\n      long long wb;\n      row_window(args, r0, true, s, e, wb);\n"
     "      sm.qst.piece[0] = p.b;\n      sm.qst.piece[1] = p.r0;\n      sm.qst.piece[2] = p.r1;\n"
     "      sm.qst.piece[3] = p.t0;\n      sm.qst.piece[4] = p.t1;\n"
     "      sm.qst.gb = imin(s, e);\n      sm.qst.ge = e;\n      sm.qst.wb = s;\n      sm.qst.we = e;\n"
     "      sm.qst.wbase = wb;\n      sm.qst.more = 1;\n    }\n"),
    ("  uint32_t phase = 0;\n  OPUS_DEV void piece(const Piece& p) {\n    const int r0 = p.r0,",
     "  uint32_t phase = 0;\n"
     "  OPUS_DEV void finish() {  // qpiece: no more pieces\n"
     "    mbar_wait(&sm.qst.empty, phase ^ 1u);\n    if (lane == 0) sm.qst.more = 0;\n    __syncwarp();\n"
     "    mbar_arrive(&sm.qst.full);\n    phase ^= 1u;\n  }\n"
     "  OPUS_DEV void piece(const Piece& p) {\n    const int r0 = p.r0,"),
    ("          if (p.r1 > p.r0 && p.t1 > p.t0) stager.piece(p);\n        return;\n",
     "          if (p.r1 > p.r0 && p.t1 > p.t0) stager.piece(p);\n        stager.finish();\n        return;\n"),
    ("  uint32_t qphase = 0;  // QSTAGE: the staged inputs' phase\n",
     "  uint32_t qphase = 0;  // QSTAGE: the staged inputs' phase\n"
     "  static constexpr bool QP = S::QSTAGE && !UNION;  // qpiece: the pieces come from the stager\n"),
    ("  OPUS_DEV void qstage_wait() {\n",
     "  OPUS_DEV void qstage_wait() {\n    if constexpr (QP) return;  // qpiece: the consumers' loop waited for the piece\n"),
    ("      if (wr < R) row_window(args, r0 + wr, r0 + wr < r1, wbeg, wend, wbase);\n",
     "      if (wr < R) {\n        if constexpr (QP) {  // qpiece: the stager's read\n"
     "          wbeg = sm.qst.wb;\n          wend = sm.qst.we;\n          wbase = sm.qst.wbase;\n"
     "        } else {\n          row_window(args, r0 + wr, r0 + wr < r1, wbeg, wend, wbase);\n        }\n      }\n"),
]
_QP_NEXT = ("      mbar_wait(&sm.qst.full, cons.qphase);\n      if (sm.qst.more == 0) break;\n"
            "      p = Piece{sm.qst.piece[0], sm.qst.piece[1], sm.qst.piece[2], sm.qst.piece[3], sm.qst.piece[4]};\n")
EDITS["qpiececold"] = _QP_COMMON + [
    ("    group_keys<R, UNION>(args, p, gbeg, gend);\n    const int kbeg = piece_first_key(p, gbeg);\n",
     "    if constexpr (QP) {\n      gbeg = sm.qst.gb;\n      gend = sm.qst.ge;\n    } else {\n"
     "      group_keys<R, UNION>(args, p, gbeg, gend);\n    }\n    const int kbeg = piece_first_key(p, gbeg);\n"),
    ("  Piece p;\n  while (walk.next(args, R, p))\n    if (p.r1 > p.r0 && p.t1 > p.t0) cons.piece(p);\n}\n",
     "  Piece p;\n  if constexpr (I8Shape<R, H, CONS, SPLIT>::QSTAGE && !UNION) {  // qpiece: the stager's pieces\n"
     "    while (true) {\n" + _QP_NEXT + "      cons.piece(p);\n    }\n  } else {\n"
     "    while (walk.next(args, R, p))\n      if (p.r1 > p.r0 && p.t1 > p.t0) cons.piece(p);\n  }\n}\n"),
]
# qpiece's dry run: no window (its staged buffer is not yet written), so no store of it can fire
_QP_DRY_WINDOW = [("          wbeg = sm.qst.wb;\n          wend = sm.qst.we;\n          wbase = sm.qst.wbase;\n",
                   "          wbeg = warming ? 0 : sm.qst.wb;\n          wend = warming ? 0 : sm.qst.we;\n"
                   "          wbase = warming ? 0 : sm.qst.wbase;\n")]
EDITS["qpiece"] = EDITS["warmsetup"] + _QP_COMMON + [
    ("      group_keys<R, UNION>(args, p, gbeg, gend);\n    }\n    const int kbeg = warming",
     "      if constexpr (QP) {\n        gbeg = sm.qst.gb;\n        gend = sm.qst.ge;\n      } else {\n"
     "        group_keys<R, UNION>(args, p, gbeg, gend);\n      }\n    }\n    const int kbeg = warming"),
    ("  while (first ? (first = false, true) : walk.next(args, R, p))\n    if (p.r1 > p.r0 && p.t1 > p.t0) cons.piece(p);\n}\n",
     "  if constexpr (I8Shape<R, H, CONS, SPLIT>::QSTAGE && !UNION) {  // qpiece: the dry run, then the stager's pieces\n"
     "    while (true) {\n      if (!first) {\n" + _QP_NEXT.replace("      ", "        ") + "      }\n"
     "      first = false;\n      cons.piece(p);\n    }\n  } else {\n"
     "    while (first ? (first = false, true) : walk.next(args, R, p))\n      if (p.r1 > p.r0 && p.t1 > p.t0) cons.piece(p);\n  }\n}\n"),
] + _QP_DRY_WINDOW
# warmsetup's dry run through one fast stage too (consumer 0's: convert, wgmma, epilogue and the
# stores' code, every store masked off by the dry run's empty windows): no wait on the full
# barrier, no release of the slot, no path count, the ring put back to its start after it.
# Reads ring slot 0 while the producer may be filling it (values unused). Exact.
_WARM_STAGE = [
    ("    setup_group(p, gbeg, gend, kbeg);\n    if (warming) {\n      warming = false;\n      return;\n    }\n",
     "    setup_group(p, gbeg, gend, kbeg);\n"),
    ("        stage(n0);\n    }\n  }\n};",
     "        stage(n0);\n    }\n    if (warming) {  // warmstage: the dry run's stage done, the ring back to its start\n"
     "      ring = decltype(ring){};\n      warming = false;\n    }\n  }\n};"),
    ("    mbar_wait(&sm.full[c][ring.slot], ring.phase);\n    const int vbeg = sm.keys[c].vbeg, vend = sm.keys[c].vend;\n",
     "    if (!warming)\n    mbar_wait(&sm.full[c][ring.slot], ring.phase);\n    const int vbeg = sm.keys[c].vbeg, vend = sm.keys[c].vend;\n"),
    ("      fast = bar_and(2 + c, 128, ok);  // the stage's one vote: all its keys in [vbeg, vend)\n    }\n",
     "      fast = bar_and(2 + c, 128, ok);  // the stage's one vote: all its keys in [vbeg, vend)\n    }\n"
     "    if (warming) fast = true;  // warmstage: the dry run runs the fast stage's code\n"),
    ("    union_stage_keys(ring.slot);  // UNION: before this stage's stores\n    if (count_paths) atomicAdd",
     "    union_stage_keys(ring.slot);  // UNION: before this stage's stores\n    if (count_paths && !warming) atomicAdd"),
    # the dry stage releases a barrier of its own (a branch around the release, between the
    # wgmma, made ptxas serialize r1w16's wgmma: C7520)
    ("    uint64_t* const empty = &sm.empty[c][ring.slot];\n",
     "    uint64_t* const empty = warming ? &sm.dry : &sm.empty[c][ring.slot];\n"),
    ("  uint64_t full[CONS][S::STAGES];\n  uint64_t empty[CONS][S::STAGES];\n",
     "  uint64_t full[CONS][S::STAGES];\n  uint64_t empty[CONS][S::STAGES];\n  uint64_t dry;  // warmstage: the dry stage's release (nobody waits on it)\n"),
    ("        mbar_init(&sm.empty[c][s], 128);  // SPLIT: the converter (fast stages) or the consumer (canonical)\n      }\n",
     "        mbar_init(&sm.empty[c][s], 128);  // SPLIT: the converter (fast stages) or the consumer (canonical)\n      }\n"
     "    mbar_init(&sm.dry, 128);  // warmstage\n"),
]
EDITS["warmstage"] = EDITS["warmsetup"] + _WARM_STAGE
EDITS["qpiecewarm"] = EDITS["qpiece"] + _WARM_STAGE
# qpiece with the stamps (the consumers' end stamps left out: qpiece rewrote that loop)
EDITS["qpiecestamps"] = EDITS["qpiece"] + [e for e in EDITS["stamps"] if "cons.piece(p);\n}\n" not in e[0]] + _WARM_TS
# The fast one-row bodies at 32 heads back on the predicated stores (what the thirtieth session
# took them off, timed on an H100 only): the same A/B on an H200 settles it.
EDITS["r1pred"] = [("                                     && !(R == 1 && ((H == 64 && CONS == 3) || (H == 32 && !CANON)));\n",
                    "                                     && !(R == 1 && H == 64 && CONS == 3);\n")]
# the split's set-up units (args.h's kPieceCost, 16) at other values: what the charge should be
for _cost in (8, 12, 24, 32):
    EDITS[f"pc{_cost}"] = [("args.h", "constexpr int kPieceCost = 16;", f"constexpr int kPieceCost = {_cost};")]
# The Table records' split (the harness's records: worksplit.h's table_record with the i8 split,
# (stage tiles, consumers, registry.h's i8_table_setup); the kernel walks units as before).
# `unitsplit`: the units' own split (the rule before the thirty-fourth session); `tsetupN`: a later
# set-up counted as N tiles whatever the rows; `tablealign4`: ends on stages (not rounds), a
# later set-up counted as 4 tiles, whatever the share; `fewcharge`: below.
# The thirty-third session's A/B of these ran as edits of that session's main (docs/perf-notes.md).
EDITS["unitsplit"] = [("worksplit.h", "  if (split.stage * split.rounds == 1 && split.setup == kPieceCost) {  // the units' own split\n",
                       "  if (true) {  // unitsplit\n")]
for _c in (8, 12):
    EDITS[f"tsetup{_c}"] = [("registry.h", "rows == 1 ? 8 : 12; }", f"{_c}; }}  // tsetup{_c}")]
EDITS["tablealign4"] = [("worksplit.h", "  const bool few = split.rounds > 1 && tiles < int64_t(nprog) * split.stage * split.rounds;\n",
                         "  const bool few = tiles >= 0;  // tablealign4\n")]
# The one-row bodies' query operand converted before the group's verdict (`convahead`): with the
# query staged (QSTAGE), each thread converts its words as a fast group's right after reading
# them, shifts from the staged scale words, so the conversion overlaps the verdict's chain (the
# columns' scales and weights, the warp reductions, the barrier, the row window's read) instead of
# following it; a group the verdict calls canonical converts again, unshifted. The other bodies
# as before. Thirty-seventh session (H100): 0.5-5% slower in 27 of 29 cells, not landed.
EDITS["convahead"] = [
    ("        const uint32_t qs = sm.qscale[n];\n        shift[w] = (int(byte_of(qs, blk)) - min4(qs)) & -int(fast);\n",
     "        const uint32_t qs = S::QSTAGE ? sm.qst.qs[n] : sm.qscale[n];  // convahead: the staged scales\n"
     "        shift[w] = (int(byte_of(qs, blk)) - min4(qs)) & -int(fast);\n"),
    ("    load_operand(words);\n",
     "    load_operand(words);\n"
     "    if constexpr (S::QSTAGE) setup_operand<false>(true, words);  // convahead: as a fast group, before the verdict\n"),
    ("    else if (ROLL_SETUP && args.mode != kModePrefill)\n      setup_operand<ROLL_SETUP>(fast, words);\n",
     "    else if constexpr (S::QSTAGE) {\n"
     "      if (!fast) setup_operand<false>(false, words);  // convahead: a canonical group again, unshifted\n"
     "    } else if (ROLL_SETUP && args.mode != kModePrefill)\n      setup_operand<ROLL_SETUP>(fast, words);\n"),
]
# below a round a program, a later set-up charged as the body's own (not one stage): what keeps a
# program from holding the last stage of one group and the first of the next (r4w12 4 x 16 x 4096).
# Thirty-seventh session (H100): 8-16% faster at 16 x 4096, 10-14% slower at 8 x 8192; `allot` does both.
EDITS["fewcharge"] = [("worksplit.h", "  const int setup = few ? imin(split.setup, split.stage) : split.setup;\n",
                       "  const int setup = split.setup;  // fewcharge\n")]
# `allot` (programs allotted to row groups, one run of a group's stages each) is in the split:
# worksplit.h's table_allot_serial (docs/perf-notes.md, thirty-seventh session).
# Every program of an allotment busy (`allotspread`: the programs the runs leave over one each to
# the first groups with more stages than runs, each group's stages cut as evenly as its programs
# allow): measured on the thirty-eighth session (H100), r4w12 2-3% faster at 8 x 8192, r1w12 and
# r2w12 1.8-2.4% slower at 1 x 8 x 32768, the rest within 1%: not landed, retired (its edit was a
# copy of table_allot_serial's last loop; the tree it measured is .gl/s43c).
# The allotment's runs spread over the program ids (`allotstride`: program k starts run
# ceil(k x runs / nprog), so where the runs are fewer than the programs the working CTAs sit
# evenly over the grid as the cost split's do) is in the split: worksplit.h's table_allot_serial
# (docs/perf-notes.md, thirty-ninth session; the tree it measured against the packed allotment
# is .gl/s44a).
# The Table record's line asked into L1 at the kernel's first instruction (`recprefetch`), so its
# trip from memory runs under the prologue (the barriers' set-up, the tables, the fence and the
# block barrier) instead of after it: at one sequence every idle CTA lives 1.5-2 us, prologue and
# the record's read (ctaends, thirty-ninth session), and every walk starts with that read.
# Thirty-ninth session (H100): 0.5-3.6% faster on 13 of 15 cells, but it moves ptxas's allocation
# (stack r4w12 48 -> 24 bytes at 64 heads, 56 -> 128 at 32): landed, then reverted.
EDITS["recprefetch"] = [("  if (tid == 0 && (smem_addr(i8_smem) & 0x3FFFFu) != kI8SmemBase) __trap();  // the descriptors' base\n",
                         "  if (tid == 0 && (smem_addr(i8_smem) & 0x3FFFFu) != kI8SmemBase) __trap();  // the descriptors' base\n"
                         "  if (tid == 32 && args.mode == kModeTable)  // recprefetch: the record's line under the prologue\n"
                         "    asm volatile(\"prefetch.global.L1 [%0];\" ::\"l\"(args.records + (long long)blockIdx.x * kRecordInts));\n")]
# The same prefetch one line earlier, before the shared-memory base check (`recprefetchw`): the
# only form of four tried (there; in thread 0's barrier block; before the fence) that leaves every
# i8 body's allocation as it is, at 32 and 64 heads (the same local loads and stores, stack
# unchanged; `recprefetch` took r2w12 and r4w12 at 64 heads from 108 to 89 local stores and 144 to
# 89 local loads, and r4w12 at 32 heads to 128 bytes of stack), so its A/B times the prefetch
# alone (docs/perf-notes.md, thirty-ninth session). Fortieth session (H100): no gain (r1w12 -0.4
# to -2.1%, r2w12 +2 to +6.8% at one and eight sequences): recprefetch's gain was the allocation.
EDITS["recprefetchw"] = [("  const int tid = threadIdx.x, lane = tid & 31;\n",
                          "  const int tid = threadIdx.x, lane = tid & 31;\n"
                          "  if (tid == 32 && args.mode == kModeTable)  // recprefetchw: the record's line under the prologue\n"
                          "    asm volatile(\"prefetch.global.L1 [%0];\" ::\"l\"(args.records + (long long)blockIdx.x * kRecordInts));\n")]
# The producer's empty-slot wait with a shorter sleep between its tries (exact): `waitsleep`, 128
# ns, measured 0.4-1.3% faster on 9 of 10 cells and landed (mbar_wait_sleep, sm90_ptx.cuh;
# docs/perf-notes.md, fortieth session); waitsleep32, 32 ns, measured beside it.
EDITS["waitsleep32"] = [("sm90_ptx.cuh", '      "nanosleep.u32 128;\\n"\n', '      "nanosleep.u32 32;\\n"\n')]
# One accumulator a consumer at one chunk (the fast path's second, 32 registers a thread, freed):
# unit u's wgmma runs while M block u + 1 is read and converted and unit u - 1's sums stored; its
# epilogue follows its own wait, overlapped only by the other consumers' work (docs/perf-notes.md,
# forty-first session). The kernels of several chunks keep the base's pipeline. Exact.
EDITS["acc1"] = [("    constexpr int U = SPAN * S::CHUNKS;  // units of a span\n",
                  "    if constexpr (S::CHUNKS == 1) {\n"
                  "      const int mb0 = SPAN * sp;\n"
                  "      float scale[2] = {0.0f, 0.0f};\n"
                  "      auto prep = [&](int ml) {\n"
                  "        const int mb = mb0 + ml;\n"
                  "        I8Table tb[2];\n"
                  "        block_inputs(ml, mb, raw_base, offsets, factor, raw, tb, scale);\n"
                  "        if (mb == S::MB - 1) release(empty);\n"
                  "        convert_fast(raw, tb, afr[ml & 1]);\n"
                  "      };\n"
                  "      prep(0);\n"
                  "      float pend[RPC][2];\n"
                  "#pragma unroll\n"
                  "      for (int u = 0; u < SPAN; ++u) {\n"
                  "        wgmma_fence();\n"
                  "        mma_chunk_fast<S::NC>(acc[0], afr[u & 1], 0);\n"
                  "        wgmma_commit();\n"
                  "        if (u > 0) store_unit(u - 1, pend, n0, scale[(u - 1) & 1], mb0);\n"
                  "        if (u + 1 < SPAN) prep(u + 1);\n"
                  "        float wv[S::NT][2];\n"
                  "        unit_weights(0, wv);\n"
                  "        retired<0>(acc[0]);\n"
                  "        unit_sums(acc[0], wv, pend);\n"
                  "      }\n"
                  "      store_unit(SPAN - 1, pend, n0, scale[(SPAN - 1) & 1], mb0);\n"
                  "      return;\n"
                  "    }\n"
                  "    constexpr int U = SPAN * S::CHUNKS;  // units of a span\n")]
# A claimed tail (Table mode; a prototype that measures what balancing the CTAs' ends is worth,
# docs/perf-notes.md, forty-first session): each program's record keeps its last 16, 32 or 64 units
# (the tail's start aligned down to 8 of its group's tiles) as a tail -- fields 8-10: the tail's first unit, its
# sequence and the units before it -- and walks only [u_begin, tail); a program whose walk is done
# claims tails by an atomic on a counter in program 0's record (field 14), tail k being program
# k's, until none is left. Producer warp 0's lane 0 claims for its CTA and publishes each claim in
# shared memory (I8Smem::claims), every other role reads it there in the same order; the last
# CTA's warp 0 to finish (field 15 counts them) zeroes both counters for the next launch. The
# harness's records only (args.h's kRecordInts grows to 16; the op's records kernel is not
# changed). Exact: every unit is walked once, by its owner or by its tail's claimer.
def _tailclaim(tiles: int) -> list:
    return [
        ("args.h", "constexpr int kRecordInts = 8; ", "constexpr int kRecordInts = 16;"),
        ("worksplit.h", "  if (cr.b < sv.num_seqs) {\n    int end;\n    sv.bounds(cr.b, rec[4], rec[5], end, rec[6], rec[7]);\n  }\n",
         "  if (cr.b < sv.num_seqs) {\n    int end;\n    sv.bounds(cr.b, rec[4], rec[5], end, rec[6], rec[7]);\n  }\n"
         f"  int u_mid = cr.u_end - {tiles};\n"
         "  if (u_mid <= cr.u_begin) {\n    u_mid = cr.u_begin;\n  } else {\n"
         "    CtaRange m{u_mid, 0, 0, 0};\n    first_seq_serial(sv, rows, m);\n"
         "    int qa, qb, end, lo, span;\n    sv.bounds(m.b, qa, qb, end, lo, span);\n"
         "    const int stride = kPieceCost + span, j = (u_mid - m.base) / stride, off = u_mid - m.base - j * stride - kPieceCost;\n"
         "    const int gstart = m.base + j * stride;\n"
         "    u_mid = off <= 0 ? gstart : gstart + kPieceCost + imax((lo + off) / 8 * 8 - lo, 0);\n"
         "    u_mid = imax(u_mid, cr.u_begin);\n  }\n"
         "  CtaRange t{u_mid, 0, 0, 0};\n  first_seq_serial(sv, rows, t);\n"
         "  rec[8] = u_mid;\n  rec[9] = t.b;\n  rec[10] = t.base;\n"),
        ("  int range[4];\n", "  int range[4];\n  int claims[32];                     // tailclaim: the tails this CTA claimed, in order (INT_MIN: not yet)\n"),
        ("  bool prefill = false;\n", "  bool prefill = false;\n  int* claims = nullptr;  // Table mode: the CTA's claims (I8Smem::claims)\n  int nclaim = 0;\n"),
        ("    return prefill ? pi.next(sv, p) : fi.next(sv, rows, p, rec);\n",
         "    if (prefill) return pi.next(sv, p);\n"
         "    while (true) {\n"
         "      if (fi.next(sv, rows, p, rec)) return true;\n"
         "      if (claims == nullptr || nclaim >= 31) return false;\n"
         "      const int k = claim(args, nclaim++);\n"
         "      if (k < 0) return false;\n"
         "      const int32_t* r = args.records + (long long)k * kRecordInts;\n"
         "      fi = FreeIter{r[8], r[1], r[9], r[10]};\n"
         "    }\n"
         "  }\n"
         "  OPUS_DEV int claim(const LaunchArgs& args, int j) const {\n"
         "    volatile int* c = claims;\n"
         "    if (threadIdx.x < 32) {\n"
         "      int k = 0;\n"
         "      if (threadIdx.x == 0) {\n"
         "        const int t = atomicAdd(const_cast<int32_t*>(args.records) + 14, 1);\n"
         "        k = t < int(gridDim.x) ? t : -1;\n"
         "        c[j] = k;\n"
         "      }\n"
         "      return __shfl_sync(0xFFFFFFFFu, k, 0);\n"
         "    }\n"
         "    int v;\n"
         "    while ((v = c[j]) == int(0x80000000u)) __nanosleep(64);\n"
         "    return v;\n"),
        ("  if (tid < 4) sm.tables[tid] = i8_table(tid);\n",
         "  if (tid < 4) sm.tables[tid] = i8_table(tid);\n  if (tid < 32) sm.claims[tid] = int(0x80000000u);\n"),
        ("  PieceWalk walk = make_walk(args, sv, R, sm.range);\n",
         "  PieceWalk walk = make_walk(args, sv, R, sm.range);\n"
         "  if (args.mode == kModeTable) {\n"
         "    walk.claims = sm.claims;\n"
         "    walk.fi.u_end = args.records[(long long)blockIdx.x * kRecordInts + 8];\n"
         "  }\n"),
        ("    asm volatile(\"cp.async.wait_all;\" ::: \"memory\");  // nothing in flight when the warp exits\n",
         "    asm volatile(\"cp.async.wait_all;\" ::: \"memory\");  // nothing in flight when the warp exits\n"
         "    if (args.mode == kModeTable && tid == 0) {\n"
         "      int32_t* r0 = const_cast<int32_t*>(args.records);\n"
         "      if (atomicAdd(r0 + 15, 1) == int(gridDim.x) - 1) {\n"
         "        atomicExch(r0 + 14, 0);\n"
         "        atomicExch(r0 + 15, 0);\n"
         "      }\n"
         "    }\n"),
    ]
# The two-consumer bodies' ring one stage deeper (1280 keys a consumer, 1024 in the kernel; a
# sixth stage does not fit 227 KB): whether the memory side and the consumers, equal at
# MTP 1, couple through the ring's depth (docs/perf-notes.md, forty-first session: 1.3-4.6%
# slower, the L1 it takes). Exact.
_RING = "  static constexpr int STAGES = SPLIT ? 2 : (CONS == 3 ? 768 : 1024) / KEYS;\n"
EDITS["ring5"] = [(_RING, _RING.replace("1024", "1280"))]
# the producer's block-table entries a batch at a time: lane l reads the entry of chunk l % cps of
# the stage l / cps of the next batch (cps chunks a stage, 32 / cps stages a batch: eight at page
# 64), a batch ahead, and each stage takes its chunks' slots by shuffle -- one table round trip a
# batch where the base waits one a stage whenever its ring runs dry (the skeleton's 28 us).
# Exact; refuted as a change (docs/perf-notes.md, forty-second session: the memory side alone
# 5-6% faster, the call not)
_BT_LOOP_OLD = ("    long long slot = bulk ? chunk_slot(bt_row, n0, gbeg, gend) : -2;\n"
                "#pragma unroll 1\n"
                "    for (; n0 < kend; n0 += STEP, ring.advance()) {\n"
                "      // the next stage's table entry is read while this stage waits for its slot and copies\n"
                "      const long long next = bulk ? chunk_slot(bt_row, n0 + STEP, gbeg, gend) : -2;\n")
_BT_LOOP_NEW = ("    const int cps = S::KEYS / chunk_keys(), ahead = 32 / cps, bj = lane / cps, bk = lane % cps;\n"
                "    long long nxt = bulk ? chunk_slot_at(bt_row, n0 + bj * STEP, bk, gbeg, gend) : -2, cur = -2;\n"
                "#pragma unroll 1\n"
                "    for (int i = 0; n0 < kend; n0 += STEP, ring.advance(), ++i) {\n"
                "      const int ib = i & (ahead - 1);\n"
                "      if (ib == 0) {\n"
                "        cur = nxt;\n"
                "        nxt = bulk ? chunk_slot_at(bt_row, n0 + (ahead + bj) * STEP, bk, gbeg, gend) : -2;\n"
                "      }\n"
                "      long long slot = __shfl_sync(0xFFFFFFFFu, cur, ib * cps + bk);\n"
                "      if (lane >= cps) slot = -2;\n")
EDITS["btbatch"] = [
    ("  OPUS_DEV void load_stage_bulk(",
     "  OPUS_DEV long long chunk_slot_at(const int32_t* bt_row, int n0, int k, int gbeg, int gend) const {\n"
     "    const int L = chunk_keys(), n = n0 + k * L;\n"
     "    return n < gend && n + L > gbeg ? key_slot(args, bt_row, n) : -2;\n"
     "  }\n"
     "  OPUS_DEV void load_stage_bulk("),
    (_BT_LOOP_OLD, _BT_LOOP_NEW),
    ("      slot = next;\n    }\n", "    }\n")]
# btbatch holding 32-bit table entries (the slots made after the shuffle) in every body: the
# landing form the forty-second session measured (btbatch's 64-bit slots moved the op's other
# bodies' stacks; refuted there, the call -0.2 to +8.3%); worksplit.h's key_slot in two steps
# beside it
EDITS["btentry"] = [
    ("worksplit.h", "\nOPUS_HD int imin(int a, int b)",
     "\nOPUS_HD int table_index(const LaunchArgs& a, int n) { return fast_div(n >> a.page_shift, a.ppb_div); }\n"
     "OPUS_HD long long entry_slot(const LaunchArgs& a, int entry, int n) {\n"
     "  const int page_in_seq = n >> a.page_shift;\n"
     "  const long long page = (long long)entry * a.pages_per_block + (page_in_seq - table_index(a, n) * a.pages_per_block);\n"
     "  if (entry < 0 || page >= a.num_pages) return -1;\n"
     "  return (page << a.page_shift) + (n & (a.page_size - 1));\n"
     "}\n\nOPUS_HD int imin(int a, int b)"),
    ("  OPUS_DEV void load_stage_bulk(",
     "  OPUS_DEV bool chunk_read(int n0, int k, int gbeg, int gend) const {\n"
     "    const int L = chunk_keys(), n = n0 + k * L;\n"
     "    return n < gend && n + L > gbeg;\n"
     "  }\n"
     "  OPUS_DEV int chunk_entry(const int32_t* bt_row, int n0, int k, int gbeg, int gend) const {\n"
     "    return chunk_read(n0, k, gbeg, gend) ? bt_row[table_index(args, n0 + k * chunk_keys())] : 0;\n"
     "  }\n"
     "  OPUS_DEV long long entry_chunk_slot(int entry, int n0, int k, int gbeg, int gend) const {\n"
     "    return chunk_read(n0, k, gbeg, gend) ? entry_slot(args, entry, n0 + k * chunk_keys()) : -2;\n"
     "  }\n"
     "  OPUS_DEV void load_stage_bulk("),
    (_BT_LOOP_OLD,
     "    const int cps = S::KEYS / chunk_keys(), batch = 32 / cps, bj = lane / cps, bk = lane % cps;\n"
     "    int ahead = bulk ? chunk_entry(bt_row, n0 + bj * STEP, bk, gbeg, gend) : 0, cur = 0;\n"
     "#pragma unroll 1\n"
     "    for (int i = 0; n0 < kend; n0 += STEP, ring.advance(), ++i) {\n"
     "      const int ib = i & (batch - 1);\n"
     "      if (ib == 0) {\n"
     "        cur = ahead;\n"
     "        ahead = bulk ? chunk_entry(bt_row, n0 + (batch + bj) * STEP, bk, gbeg, gend) : 0;\n"
     "      }\n"
     "      const int entry = __shfl_sync(0xFFFFFFFFu, cur, ib * cps + bk);\n"
     "      const long long slot = bulk && lane < cps ? entry_chunk_slot(entry, n0, lane, gbeg, gend) : -2;\n"),
    ("      slot = next;\n    }\n", "    }\n")]
EDITS["tailclaim16"] = _tailclaim(16)
EDITS["tailclaim32"] = _tailclaim(32)
EDITS["tailclaim64"] = _tailclaim(64)
# The bias's correction as the accumulator's start, not a fifth wgmma: the set-up keeps each
# column's -kI8KeyBias * qsum (the value the bias slice sums to), each unit's accumulator is
# written from it before the wgmma fence (init_acc), and the four k-slices accumulate onto it
# (four wgmma a chunk). Exact: the same integers in the same s32 sum. The two forms differ in
# where the starts live: _accinit's arguments.
_WFAST = "  alignas(16) float wfast[S::WFAST];  // column n at S::wslot(n); fast path: w' = w * 2^(qmin - 127), then scaled (scale_weights; 0 for dead rows)\n"
_BIAS_COLUMN = "        bias_column(n, idx & 15, qsum);\n"


def _indent(text: str, pad: str) -> str:
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


# where the set-up writes a column's bias, and the indentation there beyond _BIAS_COLUMN's:
# setup_turns's (inside its `if constexpr (!KEY_SIGNED)`) and setup_each's
_BIAS_SITES = ((_indent(_BIAS_COLUMN, "  ") + "        }\n      }\n    }\n  }\n  // One word at a time", "  "),
               (_BIAS_COLUMN + "      }\n    }\n  }\n\n  // COL_SETUP, the operand a column at a time", ""))


def _bias_column_edits(new: str) -> list:
    """Both set-up forms' bias_column line made `new` (written at setup_each's indentation)."""
    return [(site, site.replace(_indent(_BIAS_COLUMN, pad), _indent(new, pad), 1)) for site, pad in _BIAS_SITES]


# (with KEY_SIGNED's branch, which these edits keep: they measure the biased keys' bodies)
_MMA_FAST = "  template <int NC>\n" + _MMA_FAST_HEAD + _KS_MMA
_BIAS_START = _BIAS_OPEN + "acc, ab, b_desc(kScaleBlocks, ch));\n"
_UNIT_MMA = "      wgmma_fence();\n      mma_chunk_fast<S::NC>(acc[u & 1], afr[ml & 1], ch);\n"


def _accinit(field: str, store: str, body: str, extra: tuple = ()) -> list:
    """The starts' shared-memory array (field), the set-up's write of a column's start (store, by
    the column's lane 0), init_acc's body in place of the bias slice, and any extra edits."""
    return [(_WFAST, _WFAST + field),
            *_bias_column_edits(_BIAS_COLUMN + "        if ((idx & 15) == 0) " + store + " = -int(kI8KeyBias) * qsum;\n"),
            *extra,
            (_MMA_FAST + _BIAS_START, "  OPUS_DEV void init_acc(int32_t (&ac)[S::ACC], int ch) const {\n" + body + "  }\n" + _MMA_FAST),
            (_UNIT_MMA, "      init_acc(acc[u & 1], ch);\n" + _UNIT_MMA)]


# accinit: the starts in registers beside the weights where those are (breg), 32 moves a unit
EDITS["accinit"] = _accinit(
    "  int qbias[S::N];                    // fast path: -kI8KeyBias * the column's operand sum (each unit's start)\n",
    "sm.qbias[n]",
    "#pragma unroll\n    for (int i = 0; i < S::NT; ++i)\n#pragma unroll\n      for (int e = 0; e < 2; ++e) {\n"
    "        int b;\n"
    "        if constexpr (S::W_IN_REGS) b = breg[(ch * S::NT + i) * 2 + e];\n"
    "        else b = sm.qbias[ch * S::NC + 8 * i + 2 * t + e];\n"
    "        ac[4 * i + e] = b;\n        ac[4 * i + 2 + e] = b;\n      }\n",
    (("  float wreg[S::W_IN_REGS ? S::N / 4 : 1];\n",
      "  float wreg[S::W_IN_REGS ? S::N / 4 : 1];\n  int breg[S::W_IN_REGS ? S::N / 4 : 1];\n"),
     ("          for (int e = 0; e < 2; ++e) wreg[(ch * S::NT + i) * 2 + e] = sm.wfast[ch * S::NC + 8 * i + 2 * t + e];\n",
      "          for (int e = 0; e < 2; ++e) {\n"
      "            wreg[(ch * S::NT + i) * 2 + e] = sm.wfast[ch * S::NC + 8 * i + 2 * t + e];\n"
      "            breg[(ch * S::NT + i) * 2 + e] = sm.qbias[ch * S::NC + 8 * i + 2 * t + e];\n"
      "          }\n")))
# accinitsm: the starts read from shared memory at each unit, in the accumulator's own order: the
# quad lane t's int4 (c0, c1, c0, c1) of 8-column group i holds columns 8i + 2t, 8i + 2t + 1 for
# keys g and g + 8 (one LDS.128 straight into four accumulators, eight a 64-column unit; the 8
# lanes of a t read one address), so no register holds them across the stage.
EDITS["accinitsm"] = _accinit(
    "  alignas(16) int qbias[2 * S::N];    // fast path: column n's -kI8KeyBias * qsum at (n / 2) * 4 + n % 2 and + 2\n",
    "sm.qbias[(n >> 1) * 4 + (n & 1)] = sm.qbias[(n >> 1) * 4 + (n & 1) + 2]",
    "#pragma unroll\n    for (int i = 0; i < S::NT; ++i) {\n"
    "      const int4 v = *reinterpret_cast<const int4*>(&sm.qbias[((ch * S::NT + i) * 4 + t) * 4]);\n"
    "      ac[4 * i] = v.x;\n      ac[4 * i + 1] = v.y;\n      ac[4 * i + 2] = v.z;\n      ac[4 * i + 3] = v.w;\n    }\n")

# The fast chunk's ten wgmma descriptors out of uniform registers held across the stage: ptxas
# rematerializes each constant descriptor as two UMOV right before its IGMMA (78 of the ~900
# instructions between r2w12's first and last fast-stage IGMMA, each IGMMA waiting on its pair); a descriptor offset by a launch value
# it cannot fold (Prefill's `parts` >> 31: 0, parts >= 1) is computed once and kept. Exact.
EDITS["descsalt"] = [
    ("  float gscale = 1.0f;\n",
     "  float gscale = 1.0f;\n  const uint64_t dsalt = uint64_t(uint32_t(args.parts) >> 31);  // 0, opaque to ptxas\n"),
    ("b_desc(kScaleBlocks, ch));\n#pragma unroll\n"
     "    for (int j = 0; j < 4; ++j) WgmmaI8<NC, true>::run(acc, a[j], b_desc(j, ch), true);\n",
     "b_desc(kScaleBlocks, ch) + dsalt);\n#pragma unroll\n"
     "    for (int j = 0; j < 4; ++j) WgmmaI8<NC, true>::run(acc, a[j], b_desc(j, ch) + dsalt, true);\n"),
]

# Unit u - 2's stores after unit u's wgmma issue, not before it (the split body's order): in
# order issue, the store's quad shuffles and adds stood between the previous epilogue and every
# unit's first IGMMA (a memory operation, the store keeps its place among the wgmma statements).
# The same instructions, exact.
EDITS["storeafter"] = [
    ("      if (pending) store_unit(pend_u, pend, n0, pend_scale, mb0);\n" + _UNIT_MMA + "      wgmma_commit();\n",
     _UNIT_MMA + "      wgmma_commit();\n      if (pending) store_unit(pend_u, pend, n0, pend_scale, mb0);\n"),
]

# pc4: the split charges a group's start 4 units, not 16 (args.h; the other backends' rule is not
# touched: harness only). With onesetup (onesetuppc4): what a set-up that costs the consumers
# nothing would give, once the split stops charging for it (timing only).
EDITS["pc4"] = [("args.h", "constexpr int kPieceCost = 16;", "constexpr int kPieceCost = 4;")]

# fastslice: i8_bias_slice word by word: a slice is 127s (q's sign), one word holding the
# remainder, then zeros, so each word is two selects (the slot-by-slot clamps ran ~300
# instructions on lane 0 of each column at r1w16's set-up); the same bytes (the host check).
_SLICE_OLD = """OPUS_HD void i8_bias_slice(int qsum, uint32_t (&w)[8]) {
  const I8BiasQuot bq = i8_bias_quot(qsum);
  for (int i = 0; i < 8; ++i) {
    w[i] = 0u;
    for (int b = 0; b < 4; ++b) w[i] |= (uint32_t(i8_bias_slot(bq, 4 * i + b)) & 0xFFu) << (8 * b);
  }
}
"""
_SLICE_NEW = """OPUS_HD void i8_bias_slice(int qsum, uint32_t (&w)[8]) {
  const I8BiasQuot bq = i8_bias_quot(qsum);
  // slots 1 .. full hold 127, slot full + 1 the remainder, the rest 0 (all with q's sign): the
  // words before the remainder's are whole 127s, the words after it zeros
  const int m = bq.q < 0 ? -bq.q : bq.q, full = m / 127, rem = m - 127 * full;
  const uint32_t all = bq.q < 0 ? 0x81818181u : 0x7F7F7F7Fu;
  const int wr = (full + 1) >> 2, br = 8 * ((full + 1) & 3);  // the remainder's word and bit
  const uint32_t below = br == 0 ? 0u : all & (0xFFFFFFFFu >> (32 - br));
  const uint32_t part = below | (uint32_t(bq.q < 0 ? -rem : rem) & 0xFFu) << br;
  for (int i = 0; i < 8; ++i) w[i] = i < wr ? all : i == wr ? part : 0u;
  w[0] = (w[0] & 0xFFFFFF00u) | (uint32_t(i8_bias_slot(bq, 0)) & 0xFFu);
}
"""
EDITS["fastslice"] = [("i8_encode.h", _SLICE_OLD, _SLICE_NEW)]

# qstage (the set-up's query inputs staged a piece ahead by warp 3) landed in the kernel in the
# twenty-fifth session as I8Shape::QSTAGE (one row of up to 64 heads).

# carve100: every kernel asks the runtime for the largest shared-memory carve-out (228 KB, the
# SM's L1 down to 28 KB) instead of the smallest that fits its shared memory: what the L1 is worth
# to each kernel (the twenty-fourth session's qstage lost 3-6.5% where it crossed a step). Exact.
EDITS["carve100"] = [("kernels.cu",
    "    if ((last_error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)) != opus_success)\n      return false;\n",
    "    if ((last_error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)) != opus_success)\n      return false;\n"
    "    if ((last_error = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100)) != opus_success)\n      return false;\n")]

# w8 (one consumer warpgroup a CTA, two CTAs an SM: r4w8 / r8w8 beside r4w12 / r8w12) was refuted
# in the fiftieth session: the two CTAs share an SM, each at about half the rate; r4w8 is behind
# r4w12's unrolled Prefill stage on every shape, and 11-29% slower in MTP 4 decode (docs/perf-notes.md).

# pairstore (every lane of a quad stores one sum) landed in the kernel in the twenty-eighth session
# for two rows a chunk (I8Consumer::RS2); its pairing of one-row units at 64 heads was refuted
# (docs/perf-notes.md, twenty-fifth session).
# storepred (the fast stores through one predicated st.global, no branch) landed on 2026-12-05
# (I8Consumer::PRED_STORES); nostore edits the branch form, which the kernels
# outside PRED_STORES keep.

# r1branch (the one-row bodies at 32 heads back to the branch form of the fast store) landed in the
# thirtieth session (I8Consumer::PRED_STORES); unionahead (the union bodies' list key read a unit
# before the store) was refuted there, within 0.4% of base at i8u r4w12 / r8w12 and i8uc r4w12
# (docs/perf-notes.md, thirtieth session).

# rows4: the out rows in registers at four rows too (ROWS_IN_REGS for R <= 4; today two): a store
# reads no pointer from shared memory (at four rows RS2's 18.7% at 32 heads came with one such
# read a unit gone). Exact.
EDITS["rows4"] = [("  static constexpr bool ROWS_IN_REGS = R <= 2;\n", "  static constexpr bool ROWS_IN_REGS = R <= 4;\n")]

# the consumers alone (no keys' bytes, no vote), and their core: conversion, epilogue and bias slice out too
_ALONE = ["nomem", "novote"]
_CORE = [*_ALONE, "noconv", "noepi", "nobias"]
# and what is left of their stage: the walk, the stage waits and releases, the raw loads, the unit loop
_SKELETON = [*_CORE[:-1], "nostore", "onetable", "nomma"]  # nomma replaces the bias slice's text too
COMBOS = {"onesetuppc4": ["onesetup", "pc4"], "descstore": ["descsalt", "storeafter"], "prefetchboth": ["prefetchfirst", "prefetchmeta"], "noconvepi": ["noconv", "noepi"], "noconvepinobias": ["noconv", "noepi", "nobias"],
          "splitemptynoconv": ["splitempty", "splitnoconv"], "splitnoconvepi": ["splitnoconv", "noepi"],
          "nc128noconvepi": ["nc128", "noconv", "noepi"],
          "nomemnovote": _ALONE, "nomemnovotenostore": [*_ALONE, "nostore"],
          "nomemnovotenostoreonetable": [*_ALONE, "nostore", "onetable"],
          "emptyends": ["empty", "ctaends"],
          "emptybtbatch": ["empty", "btbatch"], "skeletonbtbatch": [*_SKELETON, "btbatch"],
          "nomemnovotesplit": [*_ALONE, "splitnovote"],
          "nomemnovotenoconv": [*_ALONE, "noconv"], "nomemnovotenoepi": [*_ALONE, "noepi"],
          "nomemnovotenobias": [*_ALONE, "nobias"], "nomemnovotenoconvepinobias": _CORE,
          "corenostore": [*_CORE, "nostore"], "coreonetable": [*_CORE, "onetable"],
          "corenomma": [*_CORE[:-1], "nomma"],  # nomma replaces the bias slice's text too
          "skeleton": _SKELETON,
          "before": ["span4", "relusat"],
          "simple": ["relusat", "nospread"],
          "splitr2signed": ["splitr2", "signedss"],
          # 512-key stages unrolled whole: one wgmma drain, one vote and one stage end a 512 keys,
          # where span4 has two drains and two ends and stage512 four drains
          "stage512span": ["stage512", "span4"],
          # persist with the later groups' set-up taken out (timing only): what the set-up costs a Prefill
          "persistone": ["persist", "onesetup"],
          "persistonebar": ["persist", "onesetupbar"],
          # persist with the later groups' inputs staged a group ahead (qstage4), and its set-up's timeline
          "persistqstage4": ["persist", "qstage4"],
          "persiststamps2": ["persist", "stamps2"],
          # the staged inputs inside the carve-out step (a ring of three), alone and persistent
          "qstage4ring3": ["qstage4", "ring3"],
          "persistqstage4ring3": ["persist", "qstage4", "ring3"],
          # the phase reading with consumer 1 half a stage behind: whether the offset lasts
          "phasestagger1850": ["phase", "stagger1850"]}
VARIANTS = ["base", *EDITS, *COMBOS]
SHAPES = {20: ["1 64 65536", "1 64 32768", "1 16 32768", "1 1 65536"], 31: ["2 64 32768", "2 16 32768"],
          17: ["2 64 32768", "2 16 32768"], 33: ["2 64 32768", "2 16 32768"],
          32: ["1 64 65536", "1 64 32768"], 16: ["1 64 65536", "1 1 65536"], 18: ["4 64 32768"],
          43: ["1 64 65536", "1 1 65536"], 44: ["2 64 32768", "2 16 32768"], 45: ["4 64 32768"]}


HEAD_MASK = {16: 0x1, 32: 0x2, 64: 0x4, 128: 0x8}  # registry.h's heads_mask bits


def trimmed_registry(text: str, ids: list[int], heads: int = 64) -> str:
    """OPUS_INSTANCES with only the given rows, each at `heads` heads (64: mask 0x4)."""
    out, inside = [], False
    for line in text.split("\n"):
        if line.startswith("#define OPUS_INSTANCES"):
            inside = True
            out.append(line)
            continue
        if inside:
            m = re.match(r"\s*X\((\d+),", line)
            if m:
                if int(m.group(1)) in ids:
                    out.append(re.sub(r"0x[0-9A-F]+\)", f"0x{HEAD_MASK[heads]:X})", line).rstrip(" \\") + " \\")
                continue
            if line.strip().startswith("/*"):
                out.append(line)
                continue
            out[-1] = out[-1].rstrip(" \\")
            inside = False
        out.append(line)
    return "\n".join(out)


def apply_edits(tree: Path, variant: str) -> None:
    """The variant's text edits, in place, into the kernel files under `tree`."""
    for name in COMBOS.get(variant, [variant] if variant in EDITS else []):
        for edit in EDITS[name]:
            fname, old, new = edit if len(edit) == 3 else ("kernel_sm90_i8.cuh", *edit)
            path = tree / fname
            src = path.read_text()
            if src.count(old) != 1:
                sys.exit(f"{variant}: the edit '{name}' no longer matches {fname} exactly once")
            path.write_text(src.replace(old, new))


def prior_csrc(out: Path, rev: str) -> Path:
    """The kernel files as they were at git commit `rev`, unpacked under out/prior-src (--prior)."""
    old = out / "prior-src"
    shutil.rmtree(old, ignore_errors=True)
    old.mkdir(parents=True)
    rel = CSRC.relative_to(ROOT).as_posix()
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, rel], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=tar, check=True)
    return old / rel


def make_tree(out: Path, variant: str, ids: list[int], csrc: Path = CSRC, heads: int = 64) -> Path:
    tree = out / variant
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(csrc, tree)
    apply_edits(tree, variant)
    reg = tree / "registry.h"  # trimmed after the edits: an edit may add a row
    reg.write_text(trimmed_registry(reg.read_text(), ids, heads))
    return tree


def build(out: Path, variant: str, tree: Path) -> str:
    exe = out / "bin" / variant
    cmd = NVCC + [f"-I{tree}", str(HARNESS), str(tree / "kernels.cu"), str(tree / "launch.cpp"), "-o", str(exe)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    serialized = [l for l in res.stderr.splitlines() if "are serialized" in l]  # ptxas C7510-C7520
    if res.returncode != 0:
        return f"{variant}: build failed\n{res.stderr[-2000:]}"
    return f"{variant}: built" + (f" ({len(serialized)} wgmma serialization warnings)" if serialized else "")


_TIMED = re.compile(r"^(\w+): (\w+) M=(\d+) B=(\d+) keys=(\d+): median ([\d.]+) us.*?(\d+) past 1e-5 A; "
                    r"\d+ repeats, (\d+) cells not bitwise")


def summarize(log: str) -> str:
    """A run.sh log as a markdown table: a row a (kernel, shape), a column a variant, each cell
    the median over the rounds of the harness's medians and its change from base; a variant whose
    cells missed the check or differed between launches is marked (timing-only variants do)."""
    times: dict[tuple, dict[str, list[float]]] = {}
    variants: list[str] = []
    inexact: set[str] = set()
    for line in log.splitlines():
        m = _TIMED.match(line)
        if not m:
            continue
        v, inst, rows, seqs, keys, med, bad, differ = m.groups()
        if v not in variants:
            variants.append(v)
        if int(bad) or int(differ):
            inexact.add(v)
        times.setdefault((inst, int(rows), int(seqs), int(keys)), {}).setdefault(v, []).append(float(med))
    if "base" in variants:
        variants.remove("base")
        variants.insert(0, "base")
    out = ["| kernel, rows x seqs x keys | " + " | ".join(v + (" (inexact)" if v in inexact else "") for v in variants) + " |",
           "|---" * (len(variants) + 1) + "|"]
    for (inst, rows, seqs, keys), by in times.items():
        med = {v: statistics.median(t) for v, t in by.items()}
        cells = []
        for v in variants:
            if v not in med:
                cells.append("")
            elif v == "base" or "base" not in med:
                cells.append(f"{med[v]:.1f}")
            else:
                cells.append(f"{med[v]:.1f} ({100 * (med[v] / med['base'] - 1):+.1f}%)")
        out.append(f"| {inst.removeprefix('sm90_i8_')} {rows} x {seqs} x {keys} | " + " | ".join(cells) + " |")
    return "\n".join(out + phase_table(log))


_PHASE_WORDS = re.compile(r" c(\d) (\d+) (\d+) (\d+) (\d+) (\d+) end")


def phase_table(log: str) -> list[str]:
    """The `phase` variants' CTA dumps (CTADUMP=raw lines after each timed line) summed over every
    CTA, consumer and launch of a (variant, kernel, shape): the stages measured and the share of
    them in each folded-phase bucket (0-1/8 of a stage from the other consumer's last start, i.e.
    in step, ... 3/8-1/2: half a stage apart). Nothing for a log without them."""
    sums: dict[tuple, list[int]] = {}
    key = None
    for line in log.splitlines():
        if m := _TIMED.match(line):
            v, inst, rows, seqs, keys = m.groups()[:5]
            key = (v, inst, rows, seqs, keys) if "phase" in COMBOS.get(v, [v]) else None
        elif key and line.startswith("  cta "):
            for w in _PHASE_WORDS.findall(line):
                b0, n, b1, b2, b3 = (int(x) for x in w[1:])
                acc = sums.setdefault(key, [0] * 5)
                for i, x in enumerate((n, b0, b1, b2, b3)):
                    acc[i] += x
    if not sums:
        return []
    out = ["", "| phase: variant, kernel, rows x seqs x keys | stages | 0-1/8 (in step) | 1/8-1/4 | 1/4-3/8 | 3/8-1/2 (half a stage apart) |",
           "|---|---|---|---|---|---|"]
    for (v, inst, rows, seqs, keys), (n, *b) in sums.items():
        out.append(f"| {v}, {inst.removeprefix('sm90_i8_')} {rows} x {seqs} x {keys} | {n} | "
                   + " | ".join(f"{x / n:.0%}" if n else "-" for x in b) + " |")
    return out


def _job_env(v: str, ratio: str | None, heads: int, prefill: bool) -> str:
    """The harness's environment for variant v's run of a job (its stamps and dumps, the mode, the
    keys' ratio and the heads): run.sh's and ncu.sh's lines alike."""
    parts = set(COMBOS.get(v, [v]))
    env = "STAMPS=1 " if {"stamps", "stamps2", "warmstamps", "qpiecestamps", "ctaends", "piecetimes", "boundary",
                           "phase"} & parts else ""
    env += "CTADUMP=1 " if "piecetimes" in parts else ""
    env += "CTADUMP=raw " if {"boundary", "phase"} & parts else ""
    env += "PREFILL=1 " if prefill else ""
    env += "PERSIST=1 " if "persist" in parts else ""
    env += f"RATIO={ratio} " if ratio else ""
    env += f"HEADS={heads} " if heads != 64 else ""
    return env


def _split_job(job: str) -> tuple[str, str | None]:
    """'ROWS SEQS KEYS' and the N of a trailing 'rN' (None without one)."""
    shape, ratio = re.fullmatch(r"(.*?)(?:\s+r(\d+))?", job.strip()).groups()
    return shape, ratio


def _script_head(what: str, table: bool) -> list[str]:
    lines = ["#!/usr/bin/env bash", f"# made by scripts/i8_ablations.py: {what}", 'cd "$(dirname "${BASH_SOURCE[0]}")"']
    return lines + (["export TABLE=1"] if table else [])


def run_script(variants: list[str], jobs: list[tuple[int, str]], rounds: int, heads: int = 64,
               prefill: bool = False, table: bool = False) -> list[str]:
    """run.sh's lines: each job (a registry id and 'ROWS SEQS KEYS', with 'rN' after them for the
    harness's RATIO=N: keys compressed as the model suites do) timed under every variant back to
    back, the variants' order reversed every other round, so a variant and its base meet the same
    machine state (the order of the A/Bs in docs/perf-notes.md)."""
    lines = _script_head("each job under every variant in turn, the order reversed every other round", table)
    for r in range(rounds):
        for i, job in jobs:
            shape, ratio = _split_job(job)
            for v in (variants if r % 2 == 0 else variants[::-1]):
                lines.append(f'echo -n "{v}: "; {_job_env(v, ratio, heads, prefill)}timeout 60 ./bin/{v} {i} {shape} 20')
    return lines


# What ncu.sh keeps of ncu's raw page: the duration, the pipes' shares, issue, warps and each stall
# reason's warp-cycles an issue (the readings of docs/perf-notes.md's ncu tables)
NCU_METRICS = ("gpu__time_duration.sum|smsp__inst_executed.sum |smsp__issue_active.avg.pct|smsp__warps_active.avg.per_cycle"
               "|sm__inst_executed_pipe_(alu|fma|lsu|uniform)\\.avg\\.pct_of_peak_sustained_active"
               "|sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active|dram__throughput.avg.pct"
               "|smsp__average_warp_latency_per_inst_issued|smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active")


def ncu_script(variants: list[str], jobs: list[tuple[int, str]], heads: int = 64, prefill: bool = False,
               table: bool = False, root: str = "../..") -> list[str]:
    """ncu.sh's lines: each job under every variant once in Nsight Compute (the harness's third
    launch; --cache-control none: the harness flushes L2 itself and the code stays warm, as in its
    timings -- with ncu's default flush a small grid's warps wait on instruction fetch instead, the
    fifty-seventh session's reading), NCU_METRICS of the raw page into $OUT/ncu-<folder>.txt; with
    NCU_SASS=1 also the stall samples by SASS line (scripts/ncu_sass.py --opcodes) into
    $OUT/sass-<folder>.txt. root: the checkout's root from the out folder."""
    lines = _script_head("each job under every variant once in ncu (scripts/device_check.sh: NCU=1)", table)
    lines += ['out=${OUT:-/tmp}; name=$(basename "$PWD"); sass=$(cd ' + root + ' && pwd)/scripts/ncu_sass.py',
              'ncu="ncu --cache-control none --clock-control none -k regex:mqa_logits_sm90 --launch-skip 2 --launch-count 1"',
              f"keep='{NCU_METRICS}'"]
    raw = ("$ncu --page raw --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis "
           "--section InstructionStats --section MemoryWorkloadAnalysis")
    rep = "$ncu --section SourceCounters --section WarpStateStats --import-source no -f -o /tmp/ncu-rep"
    for i, job in jobs:
        shape, ratio = _split_job(job)
        for v in variants:
            env, binary = _job_env(v, ratio, heads, prefill), f"./bin/{v} {i} {shape} 3"
            tag = f"{v} {i} {job.strip()}"
            lines.append(f'echo "=== {tag}" >>"$out/ncu-$name.txt"; '
                         f'env {env}timeout 120 {raw} {binary} 2>&1 | grep -E "$keep" >>"$out/ncu-$name.txt"')
            lines.append(f'if [[ ${{NCU_SASS:-0}} == 1 ]]; then env {env}timeout 120 {rep} {binary} >/dev/null 2>&1 && '
                         "ncu --import /tmp/ncu-rep.ncu-rep --page source --print-source sass --csv >/tmp/ncu-sass.csv && "
                         f'{{ echo "=== {tag}"; python3 "$sass" /tmp/ncu-sass.csv --top 20 --opcodes; }} >>"$out/sass-$name.txt"; fi')
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="a folder of the checkout that is ignored (carry it)")
    ap.add_argument("--apply", metavar="VARIANT", help="write an exact variant's edits into this checkout's kernel "
                    "files and stop (to land one the H200 measured; never a timing-only one)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {', '.join(VARIANTS)}")
    ap.add_argument("--ids", default="20,31", help="registry ids to keep (their 64-head kernels)")
    ap.add_argument("--heads", type=int, default=64, choices=sorted(HEAD_MASK),
                    help="the heads the trees are built for (run.sh passes them to the harness as HEADS)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prefill", action="store_true", help="time Prefill-mode calls (the harness's PREFILL=1); "
                    "give the shapes, e.g. --shapes '16384 1 16384'")
    ap.add_argument("--shapes", default="", help="';'-separated 'ROWS SEQS KEYS' for every id instead of the defaults "
                    "('ROWS SEQS KEYS rN': the harness's RATIO=N, e.g. '16384 1 4096 r4', DeepSeek-V4's fresh prefill)")
    ap.add_argument("--jobs", default="", help="';'-separated 'ID ROWS SEQS KEYS' (each id its own shapes) instead of "
                    "every --ids x --shapes pair")
    ap.add_argument("--table", action="store_true", help="time Table-mode calls (the harness's TABLE=1: the op's "
                    "decode schedule)")
    ap.add_argument("--csrc", type=Path, default=CSRC, help="the kernel tree to start from (default: this checkout's; "
                    "e.g. an older commit's, from `git archive`)")
    ap.add_argument("--prior", metavar="REV", help="the variant `prior`: the kernel tree as it was at git "
                    "commit REV (to time a landed change against the tree it replaced)")
    ap.add_argument("--summarize", type=Path, metavar="LOG", help="print a run.sh log as a markdown table and stop")
    a = ap.parse_args()
    if a.summarize:
        print(summarize(a.summarize.read_text()))
        return 0
    if a.apply:
        if a.apply not in VARIANTS:
            ap.error(f"unknown variant {a.apply}")
        apply_edits(CSRC, a.apply)
        print(f"applied {a.apply} to {CSRC}")
        return 0
    if a.out is None:
        ap.error("--out is required (unless --apply)")
    variants = [v for v in a.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS and not (v == "prior" and a.prior)]
    if unknown:
        ap.error(f"unknown variants {unknown}" + (" (`prior` needs --prior)" if "prior" in unknown else ""))
    jobs = [(int(i), shape.strip()) for i, shape in (j.split(maxsplit=1) for j in a.jobs.split(";") if j.strip())]
    ids = sorted({i for i, _ in jobs}) if jobs else [int(i) for i in a.ids.split(",")]
    (a.out / "bin").mkdir(parents=True, exist_ok=True)
    csrc = {v: a.csrc for v in variants}
    if "prior" in variants:
        csrc["prior"] = prior_csrc(a.out, a.prior)
    trees = {v: make_tree(a.out, v, ids, csrc[v], a.heads) for v in variants}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for line in pool.map(lambda v: build(a.out, v, trees[v]), variants):
            print(line)
    jobs = jobs or [(i, shape) for i in ids for shape in (a.shapes.split(";") if a.shapes else SHAPES.get(i, []))]
    lines = run_script(variants, jobs, a.rounds, heads=a.heads, prefill=a.prefill, table=a.table)
    (a.out / "run.sh").write_text("\n".join(lines) + "\n")
    lines = ncu_script(variants, jobs, heads=a.heads, prefill=a.prefill, table=a.table,
                       root=os.path.relpath(ROOT, a.out.resolve()))
    (a.out / "ncu.sh").write_text("\n".join(lines) + "\n")
    print(f"wrote {a.out / 'run.sh'} and {a.out / 'ncu.sh'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
