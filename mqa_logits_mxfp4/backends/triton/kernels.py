"""Triton kernels for the MXFP4 paged MQA-logits op (only @triton.jit code lives here).

One kernel scores a *row group* (up to R rows of one sequence, all heads) against tiles of
BLOCK_N keys: every key tile it loads is shared by the group's rows. The three schedule modes
differ only in how (row group, key tile) work is handed to programs; the per-cell arithmetic is
docs/numerics.md's canonical order in all of them, so they are bitwise identical.

Work units (Free and Table): sequence b has ceil(rows_b / R) groups, each with the key tiles
[lo_b, ceil(end_b / BLOCK_N)) (end_b: the sequence's last row_end; lo_b: its first row_start //
BLOCK_N, 0 without row_starts); a group with span > 0 tiles holds PIECE_COST set-up units, then
one unit a tile; units are numbered sequence-major, group-major, and program p takes units
[p * total // G, (p + 1) * total // G). worksplit/rules.py states these rules in plain Python;
every backend's kernels transcribe it, and worksplit/kernel.py's `cta_range` (shared with the
Table-records kernel) is Free mode's split here.

Memory safety (docs/contract.md, "Memory safety"): every read of query_start_loc is clamped into
[0, num_rows], of row_ends into [0, seq_cap] and of row_starts into [0, the row's end]; a flat
out's row is cut at out_numel and a negative offset writes nothing; a key whose page lies outside [0, num_pages) is not loaded and
gets a NaN scale, so its cells are NaN. None of it changes a valid input's bits.
"""

import triton
import triton.language as tl

from ...core.modes import MODE_CODES
from ...worksplit.kernel import (PIECE_COST, RECORD_INTS, cta_range, group_units, row_end, row_start, seq_start,
                                 seq_tiles)
from .instances import MMA_KINDS

MODE_TABLE: tl.constexpr = tl.constexpr(MODE_CODES["table"])
MODE_FREE: tl.constexpr = tl.constexpr(MODE_CODES["free"])
MODE_PREFILL: tl.constexpr = tl.constexpr(MODE_CODES["prefill"])

MMA_FP8: tl.constexpr = tl.constexpr(MMA_KINDS["fp8"])
MMA_F16: tl.constexpr = tl.constexpr(MMA_KINDS["f16"])
MMA_SCALED: tl.constexpr = tl.constexpr(MMA_KINDS["scaled"])


@triton.jit
def _e8m0_to_f32(s):
    # 2^(s-127) by placing s in the exponent field; 0xFF is NaN (not +inf); s == 0 flushes to 0.
    bits = tl.where(s == 255, 0x7FC00000, s.to(tl.int32) << 23)
    return bits.to(tl.float32, bitcast=True)


# E2M1 bits placed straight into the exponent/mantissa fields of a wider float give the value
# times a power of two, exactly: E2M1's subnormal 0.5 lands on the wider format's subnormal.
# E4M3: value * 2^-6; FP16: value * 2^-14. A block partial of two such operands is undone by
# one exact multiply.
FP8_UNDO: tl.constexpr = tl.constexpr(4096.0)           # 2^12
F16_UNDO: tl.constexpr = tl.constexpr(268435456.0)      # 2^28


@triton.jit
def _operand(codes, MMA: tl.constexpr):
    """E2M1 codes (uint8 0..15) -> MMA operand holding value * 2^-6 (fp8) or * 2^-14 (fp16)."""
    if MMA == MMA_FP8:
        return (((codes & 7) << 2) | ((codes & 8) << 4)).to(tl.float8e4nv, bitcast=True)
    else:
        c = codes.to(tl.int16)
        return (((c & 7) << 9) | ((c & 8) << 12)).to(tl.float16, bitcast=True)


@triton.jit
def _unpack(packed, MMA: tl.constexpr):
    """[M, 16] bytes -> [M, 32] operand in element order (low nibble = even element)."""
    return _operand(tl.interleave(packed & 0xF, packed >> 4), MMA)


@triton.jit
def _q_block(q_ptr, qs_ptr, qhead, cmask, blk: tl.constexpr, DB: tl.constexpr, NB: tl.constexpr,
             MMA: tl.constexpr):
    """One scale block of the group's queries: ([32, C] operand, [C] fp32 scale)."""
    b16 = tl.arange(0, 16)
    qb = tl.load(q_ptr + qhead[:, None] * DB + blk * 16 + b16[None, :], mask=cmask[:, None], other=0)
    qsc = _e8m0_to_f32(tl.load(qs_ptr + qhead * NB + blk, mask=cmask, other=127))
    return tl.trans(_unpack(qb, MMA)), qsc


@triton.jit
def _k_term(kv_ptr, ks_ptr, slot, kmask, blk: tl.constexpr, qop, qsc, DB: tl.constexpr,
            NB: tl.constexpr, MMA: tl.constexpr, INTERP: tl.constexpr):
    """docs/numerics.md steps 1-2 for one block: [N, C] fp32 terms P * sk * sq (NaN for a key
    not loaded: its scale reads as 0xFF)."""
    b16 = tl.arange(0, 16)
    kb = tl.load(kv_ptr + slot[:, None] * DB + blk * 16 + b16[None, :], mask=kmask[:, None], other=0)
    ksc = _e8m0_to_f32(tl.load(ks_ptr + slot * NB + blk, mask=kmask, other=255))
    kop = _unpack(kb, MMA)
    if MMA == MMA_FP8:
        p = tl.dot(kop, qop, out_dtype=tl.float32) * FP8_UNDO
    elif INTERP:  # keep the interpreter's dot in fp32 (it is exact here too)
        p = tl.dot(kop.to(tl.float32), qop.to(tl.float32), input_precision="ieee") * F16_UNDO
    else:
        p = tl.dot(kop, qop, out_dtype=tl.float32) * F16_UNDO
    return (p * ksc[:, None]) * qsc[None, :]


@triton.jit
def _narrow(v, dtype: tl.constexpr, INTERP: tl.constexpr):
    """float32 -> the out's bfloat16 / float16, rounded once to nearest-even (NaN and +-Inf kept).
    The interpreter truncates float32 -> bfloat16, so there the rounding is done on the bits."""
    if INTERP and dtype == tl.bfloat16:
        bits = v.to(tl.uint32, bitcast=True)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        bits = tl.where(v != v, (bits >> 16) | 0x40, rounded)  # a NaN stays a (quiet) NaN
        return bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return v.to(dtype, fp_downcast_rounding="rtne")


@triton.jit
def _halves(v, N: tl.constexpr, R: tl.constexpr, M: tl.constexpr):
    """[N, R, M] -> ([N, R, M/2] first half, [N, R, M/2] second half)."""
    v = tl.permute(tl.reshape(v, [N, R, 2, M // 2]), [0, 1, 3, 2])
    return tl.split(v)


@triton.jit
def _weighted_head_sum(x, w, N: tl.constexpr, R: tl.constexpr, H: tl.constexpr,
                       LOG2_H: tl.constexpr):
    """docs/numerics.md step 5: x [N, R*H] relu'd scores, w [R*H] -> [N, R]."""
    xa, xb = _halves(tl.reshape(x, [N, R, H]), N, R, H)
    wa, wb = _halves(tl.reshape(w, [1, R, H]), 1, R, H)
    v = tl.fma(xa, wa, xb * wb)
    for lvl in tl.static_range(LOG2_H - 1):
        va, vb = _halves(v, N, R, H >> (lvl + 1))
        v = va + vb
    return tl.reshape(v, [N, R])


@triton.jit
def _score_group(q_ptr, qs_ptr, kv_ptr, ks_ptr, w_ptr, bt_ptr, re_ptr, rs_ptr, out_ptr, oo_ptr,
                 num_pages, seq_cap, out_numel, stride_w, stride_bt, stride_out,
                 b, r0, r1, t0, t1,
                 HEADS: tl.constexpr, LOG2_H: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, PPB: tl.constexpr,
                 GATHER: tl.constexpr, R: tl.constexpr, BLOCK_N: tl.constexpr,
                 MMA: tl.constexpr, FLAT_OUT: tl.constexpr, HAS_STARTS: tl.constexpr, NARROW_OUT: tl.constexpr,
                 INTERP: tl.constexpr):
    """Rows [r0, r1) of sequence b (at most R) against key tiles [t0, t1): row r stores keys
    [start_r, end_r), the float32 result rounded once to nearest-even for a narrow out."""
    C: tl.constexpr = R * HEADS
    DB: tl.constexpr = D // 2       # bytes of a key or a q head
    NB: tl.constexpr = D // 32      # scale blocks
    cols = tl.arange(0, C)
    crow = r0 + cols // HEADS
    cmask = crow < r1
    qhead = crow.to(tl.int64) * HEADS + cols % HEADS
    w = tl.load(w_ptr + crow.to(tl.int64) * stride_w + cols % HEADS, mask=cmask, other=0.0)
    w = w.to(tl.float32)

    rows = r0 + tl.arange(0, R)
    rmask = rows < r1
    rend = row_end(re_ptr, rows, seq_cap, rmask)
    rbeg = row_start(rs_ptr, rows, rend, rmask, HAS_STARTS)
    gbeg = tl.min(tl.where(rmask, rbeg, seq_cap), axis=0)  # tiles before it store nothing
    if FLAT_OUT:  # a row ends at the flat out's end; a negative offset writes nothing
        obase = tl.load(oo_ptr + rows, mask=rmask, other=0)
        room = tl.maximum(out_numel - obase, 0)
        rend = tl.where(obase >= 0, tl.minimum(rend.to(tl.int64), room), 0).to(tl.int32)
    else:
        obase = rows.to(tl.int64) * stride_out
    gend = tl.max(rend, axis=0)
    if GATHER:
        bt_row = bt_ptr + r0.to(tl.int64) * stride_bt
    else:
        bt_row = bt_ptr + b.to(tl.int64) * stride_bt

    if MMA != MMA_SCALED:  # the group's query operands stay in registers for all its tiles
        tl.static_assert(NB == 4, "the fp8/f16 families are written for head_dim 128")
        q0, sq0 = _q_block(q_ptr, qs_ptr, qhead, cmask, 0, DB, NB, MMA)
        q1, sq1 = _q_block(q_ptr, qs_ptr, qhead, cmask, 1, DB, NB, MMA)
        q2, sq2 = _q_block(q_ptr, qs_ptr, qhead, cmask, 2, DB, NB, MMA)
        q3, sq3 = _q_block(q_ptr, qs_ptr, qhead, cmask, 3, DB, NB, MMA)
    else:
        bD = tl.arange(0, DB)
        bS = tl.arange(0, NB)
        qb = tl.load(q_ptr + qhead[:, None] * DB + bD[None, :], mask=cmask[:, None], other=0)
        qsc = tl.load(qs_ptr + qhead[:, None] * NB + bS[None, :], mask=cmask[:, None], other=127)
    for t in range(tl.maximum(t0, gbeg // BLOCK_N), t1):
        keys = t * BLOCK_N + tl.arange(0, BLOCK_N)
        kmask = (keys >= gbeg) & (keys < gend)
        entry = tl.load(bt_row + keys // (PAGE * PPB), mask=kmask, other=0)
        page = entry.to(tl.int64) * PPB + (keys // PAGE) % PPB
        kmask = kmask & (entry >= 0) & (page < num_pages)  # a page outside the cache: not read, NaN
        slot = page * PAGE + keys % PAGE
        if MMA == MMA_SCALED:
            kb = tl.load(kv_ptr + slot[:, None] * DB + bD[None, :], mask=kmask[:, None], other=0)
            ksc = tl.load(ks_ptr + slot[:, None] * NB + bS[None, :], mask=kmask[:, None], other=255)
            s = tl.dot_scaled(kb, ksc, "e2m1", tl.trans(qb), qsc, "e2m1")
        else:  # docs/numerics.md step 3: left to right
            s = _k_term(kv_ptr, ks_ptr, slot, kmask, 0, q0, sq0, DB, NB, MMA, INTERP)
            s = s + _k_term(kv_ptr, ks_ptr, slot, kmask, 1, q1, sq1, DB, NB, MMA, INTERP)
            s = s + _k_term(kv_ptr, ks_ptr, slot, kmask, 2, q2, sq2, DB, NB, MMA, INTERP)
            s = s + _k_term(kv_ptr, ks_ptr, slot, kmask, 3, q3, sq3, DB, NB, MMA, INTERP)
        x = tl.maximum(s, 0.0, propagate_nan=tl.PropagateNan.ALL)
        v = _weighted_head_sum(x, w, BLOCK_N, R, HEADS, LOG2_H)
        smask = (keys[:, None] >= rbeg[None, :]) & (keys[:, None] < rend[None, :]) & rmask[None, :]
        if NARROW_OUT:
            v = _narrow(v, out_ptr.dtype.element_ty, INTERP)
        tl.store(out_ptr + obase[None, :] + keys[:, None], v, mask=smask)


# shape-dependent ints: one compile serves every shape
@triton.jit(do_not_specialize=["num_seqs", "num_rows", "num_pages", "seq_cap", "out_numel", "parts"])
def mqa_logits_kernel(q_ptr, qs_ptr, kv_ptr, ks_ptr, w_ptr, bt_ptr, qsl_ptr, re_ptr, rs_ptr,
                      out_ptr, oo_ptr, sched_ptr,
                      num_seqs, num_rows, num_pages, seq_cap, out_numel,
                      stride_w, stride_bt, stride_out, parts,
                      HEADS: tl.constexpr, LOG2_H: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, PPB: tl.constexpr,
                      GATHER: tl.constexpr, R: tl.constexpr, BLOCK_N: tl.constexpr,
                      MMA: tl.constexpr, MODE: tl.constexpr,
                      SEQ_P2: tl.constexpr, FLAT_OUT: tl.constexpr, HAS_STARTS: tl.constexpr,
                      NARROW_OUT: tl.constexpr, INTERP: tl.constexpr):
    pid = tl.program_id(0)
    if MODE == MODE_PREFILL:
        # program (g, p): global rows [g*R, g*R + R), split per sequence, key tiles cut in `parts`
        part = tl.program_id(1)
        live = seq_start(qsl_ptr, num_seqs, num_rows, None)
        row0 = pid * R
        chunk_end = tl.minimum(row0 + R, live)
        lo = 0
        hi = num_seqs
        while hi - lo > 1:  # last sequence starting at or before row0
            mid = (lo + hi) // 2
            at_or_before = seq_start(qsl_ptr, mid, num_rows, None) <= row0
            lo = tl.where(at_or_before, mid, lo)
            hi = tl.where(at_or_before, hi, mid)
        b = lo
        qa = seq_start(qsl_ptr, b, num_rows, None)
        while (b < num_seqs) & (qa < chunk_end):
            qb = tl.maximum(seq_start(qsl_ptr, b + 1, num_rows, None), qa)
            r0 = tl.maximum(row0, qa)
            r1 = tl.minimum(chunk_end, qb)
            end = row_end(re_ptr, r1 - 1, seq_cap, r1 > r0)
            lo, span = seq_tiles(rs_ptr, r0, end, r1 > r0, BLOCK_N, HAS_STARTS)
            t0 = lo + (part * span) // parts
            t1 = lo + ((part + 1) * span) // parts
            _score_group(q_ptr, qs_ptr, kv_ptr, ks_ptr, w_ptr, bt_ptr, re_ptr, rs_ptr, out_ptr, oo_ptr,
                         num_pages, seq_cap, out_numel, stride_w, stride_bt, stride_out, b, r0, r1, t0, t1,
                         HEADS, LOG2_H, D, PAGE, PPB, GATHER, R, BLOCK_N, MMA, FLAT_OUT, HAS_STARTS, NARROW_OUT,
                         INTERP)
            b += 1
            qa = qb
    else:
        if MODE == MODE_TABLE:
            rec = sched_ptr + pid * RECORD_INTS
            u = tl.load(rec + 0)
            u_end = tl.load(rec + 1)
            b = tl.load(rec + 2)
            base = tl.load(rec + 3)
        else:
            u, u_end, b, base = cta_range(qsl_ptr, re_ptr, rs_ptr, num_seqs, num_rows, seq_cap, pid,
                                          tl.num_programs(0), R, BLOCK_N, SEQ_P2, HAS_STARTS)
        while (u < u_end) & (b < num_seqs) & (b >= 0):  # b < 0: only from corrupted records
            qa = seq_start(qsl_ptr, b, num_rows, None)
            qb = tl.maximum(seq_start(qsl_ptr, b + 1, num_rows, None), qa)
            end = row_end(re_ptr, qb - 1, seq_cap, qb > qa)
            tlo, span = seq_tiles(rs_ptr, qa, end, qb > qa, BLOCK_N, HAS_STARTS)
            stride = PIECE_COST + span  # a group's units: its set-up's, then its tiles
            units = tl.cdiv(qb - qa, R) * group_units(span)
            lo = tl.maximum(u - base, 0)  # negative only for corrupted records
            hi = tl.minimum(u_end - base, units)
            u = tl.where(hi > lo, base + hi, u)
            while lo < hi:  # the groups this program touches, each with its own tile range
                j = lo // stride
                t0 = tl.maximum(lo - j * stride - PIECE_COST, 0)
                t1 = tl.minimum(hi - j * stride, stride) - PIECE_COST
                r0 = qa + j * R
                r1 = tl.minimum(r0 + R, qb)
                if t1 > t0:  # not only set-up units of group j
                    _score_group(q_ptr, qs_ptr, kv_ptr, ks_ptr, w_ptr, bt_ptr, re_ptr, rs_ptr, out_ptr, oo_ptr,
                                 num_pages, seq_cap, out_numel, stride_w, stride_bt, stride_out,
                                 b, r0, r1, tlo + t0, tlo + t1,
                                 HEADS, LOG2_H, D, PAGE, PPB, GATHER, R, BLOCK_N, MMA, FLAT_OUT, HAS_STARTS,
                                 NARROW_OUT, INTERP)
                lo = (j + 1) * stride
            base += units
            b += 1
