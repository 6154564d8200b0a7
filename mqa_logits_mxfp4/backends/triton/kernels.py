"""Triton kernels for the MXFP4 paged MQA-logits op (only @triton.jit code lives here).

One kernel scores a *row group* (up to R rows of one sequence, all heads) against tiles of
BLOCK_N keys: every key tile it loads is shared by the group's rows. The three schedule modes
differ only in how (row group, key tile) work is handed to programs; the per-cell arithmetic is
docs/numerics.md's canonical order in all of them, so they are bitwise identical.

Work units (Free and Table): sequence b has ceil(rows_b / R) groups, each with
ceil(end_b / BLOCK_N) key tiles (end_b: the sequence's last row_end); units are numbered
sequence-major, group-major, tile-minor, and program p takes units
[p * total // G, (p + 1) * total // G).
"""

import triton
import triton.language as tl

MODE_TABLE: tl.constexpr = tl.constexpr(0)
MODE_FREE: tl.constexpr = tl.constexpr(1)
MODE_PREFILL: tl.constexpr = tl.constexpr(2)

MMA_FP8: tl.constexpr = tl.constexpr(0)
MMA_BF16: tl.constexpr = tl.constexpr(1)
MMA_SCALED: tl.constexpr = tl.constexpr(2)

RECORD_INTS: tl.constexpr = tl.constexpr(8)


@triton.jit
def _e8m0_to_f32(s):
    # 2^(s-127) by placing s in the exponent field; 0xFF is NaN (not +inf); s == 0 flushes to 0.
    bits = tl.where(s == 255, 0x7FC00000, s.to(tl.int32) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _e2m1_to_e4m3(c):
    # exact: E2M1 magnitudes 0.5..6 are E4M3 normals
    c = c.to(tl.int32)
    mag = c & 7
    bits = tl.where(mag >= 2, (mag + 12) << 2, tl.where(mag == 1, 0x30, 0)) | ((c & 8) << 4)
    return bits.to(tl.uint8).to(tl.float8e4nv, bitcast=True)


@triton.jit
def _e2m1_to_bf16(c):
    c = c.to(tl.int32)
    mag = c & 7
    bits = tl.where(mag >= 2, (mag + 252) << 6, tl.where(mag == 1, 0x3F00, 0)) | ((c & 8) << 12)
    return bits.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _unpack_codes(packed):
    # [M, 16] bytes -> [M, 32] E2M1 codes in element order (low nibble = even element)
    return tl.interleave(packed & 0xF, packed >> 4)


@triton.jit
def _block_partial(kb, qb, MMA: tl.constexpr, INTERP: tl.constexpr):
    """Exact raw partial sums of one 32-element block: [N, 16] x [C, 16] bytes -> [N, C] fp32."""
    kc = _unpack_codes(kb)
    qc = _unpack_codes(qb)
    if MMA == MMA_FP8:
        return tl.dot(_e2m1_to_e4m3(kc), tl.trans(_e2m1_to_e4m3(qc)), out_dtype=tl.float32)
    else:
        k16 = _e2m1_to_bf16(kc)
        q16 = tl.trans(_e2m1_to_bf16(qc))
        if INTERP:  # the interpreter multiplies bf16 bit patterns; fp32 is exact here too
            return tl.dot(k16.to(tl.float32), q16.to(tl.float32), input_precision="ieee")
        else:
            return tl.dot(k16, q16, out_dtype=tl.float32)


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
def _score_group(q_ptr, qs_ptr, kv_ptr, ks_ptr, w_ptr, bt_ptr, re_ptr, out_ptr, oo_ptr,
                 stride_w, stride_bt, stride_out,
                 b, r0, r1, t0, t1,
                 HEADS: tl.constexpr, LOG2_H: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, PPB: tl.constexpr,
                 GATHER: tl.constexpr, R: tl.constexpr, BLOCK_N: tl.constexpr,
                 MMA: tl.constexpr, FLAT_OUT: tl.constexpr, INTERP: tl.constexpr):
    """Rows [r0, r1) of sequence b (at most R) against key tiles [t0, t1)."""
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
    rend = tl.load(re_ptr + rows, mask=rmask, other=0)
    gend = tl.max(rend, axis=0)
    if FLAT_OUT:
        obase = tl.load(oo_ptr + rows, mask=rmask, other=0)
    else:
        obase = rows.to(tl.int64) * stride_out
    if GATHER:
        bt_row = bt_ptr + r0.to(tl.int64) * stride_bt
    else:
        bt_row = bt_ptr + b.to(tl.int64) * stride_bt

    b16 = tl.arange(0, 16)
    for t in range(t0, t1):
        keys = t * BLOCK_N + tl.arange(0, BLOCK_N)
        kmask = keys < gend
        entry = tl.load(bt_row + keys // (PAGE * PPB), mask=kmask, other=0)
        slot = (entry.to(tl.int64) * PPB + (keys // PAGE) % PPB) * PAGE + keys % PAGE
        if MMA == MMA_SCALED:
            bD = tl.arange(0, DB)
            bS = tl.arange(0, NB)
            kb = tl.load(kv_ptr + slot[:, None] * DB + bD[None, :], mask=kmask[:, None], other=0)
            ksc = tl.load(ks_ptr + slot[:, None] * NB + bS[None, :], mask=kmask[:, None], other=127)
            qb = tl.load(q_ptr + qhead[:, None] * DB + bD[None, :], mask=cmask[:, None], other=0)
            qsc = tl.load(qs_ptr + qhead[:, None] * NB + bS[None, :], mask=cmask[:, None], other=127)
            s = tl.dot_scaled(kb, ksc, "e2m1", tl.trans(qb), qsc, "e2m1")
        else:
            for blk in tl.static_range(NB):
                kb = tl.load(kv_ptr + slot[:, None] * DB + blk * 16 + b16[None, :],
                             mask=kmask[:, None], other=0)
                qb = tl.load(q_ptr + qhead[:, None] * DB + blk * 16 + b16[None, :],
                             mask=cmask[:, None], other=0)
                ksc = _e8m0_to_f32(tl.load(ks_ptr + slot * NB + blk, mask=kmask, other=127))
                qsc = _e8m0_to_f32(tl.load(qs_ptr + qhead * NB + blk, mask=cmask, other=127))
                term = (_block_partial(kb, qb, MMA, INTERP) * ksc[:, None]) * qsc[None, :]
                if blk == 0:
                    s = term
                else:
                    s = s + term
        x = tl.maximum(s, 0.0, propagate_nan=tl.PropagateNan.ALL)
        v = _weighted_head_sum(x, w, BLOCK_N, R, HEADS, LOG2_H)
        smask = (keys[:, None] < rend[None, :]) & rmask[None, :]
        tl.store(out_ptr + obase[None, :] + keys[:, None], v, mask=smask)


@triton.jit
def _cta_range(qsl_ptr, re_ptr, num_seqs, pid, nprog,
               R: tl.constexpr, BLOCK_N: tl.constexpr, SEQ_P2: tl.constexpr):
    """Program pid's unit range and its first sequence: (u_begin, u_end, b, units before b)."""
    seqs = tl.arange(0, SEQ_P2)
    smask = seqs < num_seqs
    qa = tl.load(qsl_ptr + seqs, mask=smask, other=0)
    qb = tl.load(qsl_ptr + seqs + 1, mask=smask, other=0)
    n = qb - qa
    end = tl.load(re_ptr + qb - 1, mask=smask & (n > 0), other=0)
    units = tl.cdiv(n, R) * tl.cdiv(end, BLOCK_N)
    total = tl.sum(units, axis=0).to(tl.int64)
    u_begin = ((pid * total) // nprog).to(tl.int32)
    u_end = (((pid + 1) * total) // nprog).to(tl.int32)
    cum = tl.cumsum(units, axis=0)
    before = cum <= u_begin
    b = tl.sum(before.to(tl.int32), axis=0)
    base = tl.sum(tl.where(before, units, 0), axis=0)
    return u_begin, u_end, b, base


@triton.jit
def build_schedule_kernel(qsl_ptr, re_ptr, sched_ptr, num_seqs,
                          R: tl.constexpr, BLOCK_N: tl.constexpr, SEQ_P2: tl.constexpr):
    """Table mode: one 32-byte record per program of the scoring launch."""
    pid = tl.program_id(0)
    u_begin, u_end, b, base = _cta_range(qsl_ptr, re_ptr, num_seqs, pid, tl.num_programs(0),
                                         R, BLOCK_N, SEQ_P2)
    rec = sched_ptr + pid * RECORD_INTS
    tl.store(rec + 0, u_begin)
    tl.store(rec + 1, u_end)
    tl.store(rec + 2, b)
    tl.store(rec + 3, base)


@triton.jit
def mqa_logits_kernel(q_ptr, qs_ptr, kv_ptr, ks_ptr, w_ptr, bt_ptr, qsl_ptr, re_ptr,
                      out_ptr, oo_ptr, sched_ptr,
                      num_seqs, stride_w, stride_bt, stride_out,
                      HEADS: tl.constexpr, LOG2_H: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, PPB: tl.constexpr,
                      GATHER: tl.constexpr, R: tl.constexpr, BLOCK_N: tl.constexpr,
                      MMA: tl.constexpr, MODE: tl.constexpr, PARTS: tl.constexpr,
                      SEQ_P2: tl.constexpr, FLAT_OUT: tl.constexpr, INTERP: tl.constexpr):
    pid = tl.program_id(0)
    if MODE == MODE_PREFILL:
        # program (g, p): global rows [g*R, g*R + R), split per sequence, key tiles cut in PARTS
        part = tl.program_id(1)
        live = tl.load(qsl_ptr + num_seqs)
        row0 = pid * R
        chunk_end = tl.minimum(row0 + R, live)
        lo = 0
        hi = num_seqs
        while hi - lo > 1:  # last sequence starting at or before row0
            mid = (lo + hi) // 2
            at_or_before = tl.load(qsl_ptr + mid) <= row0
            lo = tl.where(at_or_before, mid, lo)
            hi = tl.where(at_or_before, hi, mid)
        b = lo
        qa = tl.load(qsl_ptr + b)
        while (b < num_seqs) & (qa < chunk_end):
            qb = tl.load(qsl_ptr + b + 1)
            r0 = tl.maximum(row0, qa)
            r1 = tl.minimum(chunk_end, qb)
            end = tl.load(re_ptr + r1 - 1, mask=r1 > r0, other=0)
            ntiles = tl.cdiv(end, BLOCK_N)
            t0 = (part * ntiles) // PARTS
            t1 = ((part + 1) * ntiles) // PARTS
            _score_group(q_ptr, qs_ptr, kv_ptr, ks_ptr, w_ptr, bt_ptr, re_ptr, out_ptr, oo_ptr,
                         stride_w, stride_bt, stride_out, b, r0, r1, t0, t1,
                         HEADS, LOG2_H, D, PAGE, PPB, GATHER, R, BLOCK_N, MMA, FLAT_OUT, INTERP)
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
            u, u_end, b, base = _cta_range(qsl_ptr, re_ptr, num_seqs, pid, tl.num_programs(0),
                                           R, BLOCK_N, SEQ_P2)
        while (u < u_end) & (b < num_seqs):
            qa = tl.load(qsl_ptr + b)
            qb = tl.load(qsl_ptr + b + 1)
            end = tl.load(re_ptr + qb - 1, mask=qb > qa, other=0)
            ntiles = tl.maximum(tl.cdiv(end, BLOCK_N), 1)
            units = tl.cdiv(qb - qa, R) * tl.cdiv(end, BLOCK_N)
            lo = u - base
            hi = tl.minimum(u_end - base, units)
            u = tl.where(hi > lo, base + hi, u)
            while lo < hi:  # the groups this program touches, each with its own tile range
                j = lo // ntiles
                t0 = lo - j * ntiles
                t1 = tl.minimum(hi - j * ntiles, ntiles)
                r0 = qa + j * R
                r1 = tl.minimum(r0 + R, qb)
                _score_group(q_ptr, qs_ptr, kv_ptr, ks_ptr, w_ptr, bt_ptr, re_ptr, out_ptr,
                             oo_ptr, stride_w, stride_bt, stride_out, b, r0, r1, t0, t1,
                             HEADS, LOG2_H, D, PAGE, PPB, GATHER, R, BLOCK_N, MMA, FLAT_OUT, INTERP)
                lo = (j + 1) * ntiles
            base += units
            b += 1
