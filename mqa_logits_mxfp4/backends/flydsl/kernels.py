"""FlyDSL kernels for gfx950: the whole op with the scaled MFMA, in docs/numerics.md's order.

Imported only when a kernel is built (it imports flydsl). One kernel family, specialized by
`KernelSpec`; the work split is a transcription of worksplit/rules.py (same names, same order).

Tile: a CTA of WAVES waves scores a row group (up to R rows of one sequence, all heads) against
a key tile of BLOCK_N = 16 * WAVES keys; wave w takes keys [16w, 16w + 16) of the tile, and
every row of the group reuses that wave's loaded keys. Per wave, one
`v_mfma_scale_f32_16x16x128_f8f6f4` (E2M1 x E2M1) has A = 16 keys (M) x head_dim 128 and
B = 128 x 16 heads (N) of one row. Lane l = 16 g + c holds A row c's and B column c's K-block g
(32 E2M1 in 16 bytes), and gets D[keys 4g..4g+3, head c].

docs/numerics.md steps 1-2: the MFMA sums a lane group's 32 products exactly but adds the four
K-blocks in its own order, so each block gets its own MFMA with the key operand of the other
three lane groups zeroed and unit scales (E8M0 127): D is then the exact block partial P_b.
The scales are applied on the VALU as (P_b * sk) * sq with sk, sq decoded exactly as the Triton
kernels do (0xFF -> NaN, 0 -> 0), then step 3 sums b = 0..3 left to right, step 4 is
`maximumf` (v_maximum3_f32, NaN-propagating), step 5 is the head tree: levels that pair heads
of different 16-head tiles are in-register, the last four (heads c and c ^ 8, 4, 2, 1 of a tile)
are DPP row rotations, after which every lane of a 16-lane row holds the row's value.

Family mxsc (not canonical; docs/numerics.md, "Scaled MFMA tiles"): where every scale byte of
the wave's 16 keys and of a 16-head tile's heads lies in FULL_LO..FULL_HI and the tile's weights
below FULL_W_HI (a flag a (row, head tile), found while staging), one MFMA over the whole
head_dim with the real E8M0 bytes as its scale operands (lane l: its key's / head's block g byte)
replaces the four, then relu; elsewhere the steps above.

Row windows and narrow outs (KernelSpec.has_starts, out_dtype; docs/flydsl-backend.md): with
row_starts, row r stores keys [start_r, end_r) and the tiles follow worksplit's rules (a
sequence's tiles from its first row's start tile, a group's from its rows' smallest start); a
bf16 / f16 out gets the f32 result rounded once (arith.truncf) right before its store.

Memory safety (docs/contract.md, "Memory safety"), as the Triton kernels: query_start_loc is read
clamped into [0, num_rows], row_ends into [0, seq_cap] and row_starts into [0, the row's end]; a
flat out's row is cut at out_numel and a negative offset writes nothing; a key whose page lies
outside [0, num_pages) is not loaded (a branch around its loads) and its scale words read as 0xFF
bytes, so its cells are NaN.
"""

from __future__ import annotations

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import const_expr, gpu, range_constexpr, rocdl
from flydsl.expr.typing import T, Vector

from .spec import HEAD_DIM, MODE_PREFILL, MODE_TABLE, MODES, PIECE_COST, RECORD_INTS, KernelSpec

UNIT_SCALES = 0x7F7F7F7F      # E8M0 127 = 1.0 in every byte
# The mxsc rule, as the opus gfx9 bodies' (kernel_gfx9.cuh kFullScale*, kFullWeightHi; a test
# checks both sources agree): scale bytes 96..158, weights below 2^40
FULL_LO, FULL_HI, FULL_W_HI = 96, 158, 2.0 ** 40
E2M1 = 4                      # cbsz / blgp format code of the f8f6f4 MFMA
DPP_ROW_ROR = 0x120           # + n: rotate right by n lanes within a row of 16
WAVE = 64
OUT_TYPES = {"f32": fx.Float32, "bf16": fx.BFloat16, "f16": fx.Float16}   # KernelSpec.out_dtype


def _cdiv(a, b):
    return (a + (b - 1)) // b


def _imin(a, b):
    return (a < b).select(a, b)


def _imax(a, b):
    return (a > b).select(a, b)


def _group_units(span):
    """A group's units: PIECE_COST for its set-up, then one a key tile; none without a tile
    (worksplit.group_units)."""
    return (span > 0).select(span + PIECE_COST, fx.Int32(0))


def _clamp(x, lo, hi):
    return _imin(_imax(x, lo), hi)


def _uniform(x):
    """A wave-uniform i32 into an SGPR (loop bounds, page ids)."""
    return fx.Int32(rocdl.readfirstlane(T.i32, fx.Int32(x)))


def _wave_sum(x):
    """Sum of an i32 over the 64 lanes, in every lane."""
    for k in range_constexpr(6):
        x = x + x.shuffle_xor(32 >> k, WAVE)
    return x


def _row_min(x):
    """Minimum of an i32 over each 16-lane row, in every lane of the row."""
    for k in range_constexpr(4):
        x = _imin(x, x.shuffle_xor(8 >> k, WAVE))
    return x


def _wave_inclusive_scan(x, lane):
    """Inclusive prefix sum of an i32 over the lanes."""
    for k in range_constexpr(6):
        up = fx.Int32(gpu.shuffle_up(x, 1 << k, WAVE))
        x = (lane >= (1 << k)).select(x + up, x)
    return x


def _e8m0(bits):
    """E8M0 byte already shifted into the f32 exponent field (i32 vector) -> f32 vector:
    2^(e-127), byte 0 -> 0, byte 0xFF -> NaN (Inf * 0 + Inf), as backends/triton/kernels.py."""
    f = bits.bitcast(fx.Float32)
    return fx.math.fma(f, Vector.filled(f.numel, 0.0, fx.Float32), f)


def _scale_block(word, blk):
    """Byte `blk` of each i32 of a vector of packed E8M0 bytes, in the exponent field."""
    n = word.numel
    if const_expr(blk == 3):
        shifted = word >> Vector.filled(n, 1, fx.Int32)   # arithmetic shift: masked below
    else:
        shifted = word << Vector.filled(n, 23 - 8 * blk, fx.Int32)
    return shifted & Vector.filled(n, 0x7F800000, fx.Int32)


def _bytes_in_full_range(word):
    """Whether all four E8M0 bytes of an i32 lie in FULL_LO..FULL_HI (0xFF: no)."""
    ok = None
    for blk in range_constexpr(4):
        e = (word >> (8 * blk)) & 0xFF
        this = (e >= FULL_LO) & (e <= FULL_HI)
        ok = this if ok is None else ok & this
    return ok


def build(spec: KernelSpec):  # noqa: C901 (one kernel, its helpers inline)
    """The @flyc.jit launcher for `spec`: launch(ptrs..., ints..., grid_x, grid_y, stream)."""
    H, R, WAVES = spec.heads, spec.rows, spec.waves
    BN = spec.block_n
    NT = H // 16                      # 16-head tiles of one row
    THREADS = WAVE * WAVES
    PAGE, PPB = spec.page_size, spec.pages_per_block
    GATHER, FLAT_OUT, W_BF16 = spec.gather, spec.flat_out, spec.w_bf16
    MODE = MODES[spec.mode]
    DB = HEAD_DIM // 2                # bytes of one key or one query head
    NB = HEAD_DIM // 32               # scale blocks
    FULL = spec.family == "mxsc"
    STARTS = spec.has_starts
    OUT_T = OUT_TYPES[spec.out_dtype]
    assert H % 32 == 0 and H >= 32 and PAGE % 4 == 0 and R <= 16

    @flyc.jit
    def slot_of(key, bt_row, num_pages):
        """(cache slot (token index over all pages, i64), whether its page lies in the cache)
        of key `key` of a table row."""
        entry = fx.Int32((bt_row + fx.Int64(key // (PAGE * PPB))).load())
        page = fx.Int64(entry) * PPB + fx.Int64((key // PAGE) % PPB)
        return page * PAGE + fx.Int64(key % PAGE), (entry >= 0) & (page < num_pages)

    @flyc.jit
    def seq_start(qsl, b, num_rows):
        """query_start_loc[b] clamped into [0, num_rows]."""
        return _clamp(fx.Int32((qsl + fx.Int64(b)).load()), fx.Int32(0), num_rows)

    @flyc.jit
    def row_end(re, r, seq_cap):
        """row_ends[r] clamped into [0, seq_cap]."""
        return _clamp(fx.Int32((re + fx.Int64(r)).load()), fx.Int32(0), seq_cap)

    @flyc.jit
    def row_start(rs, r, end):
        """row_starts[r] clamped into [0, end]."""
        return _clamp(fx.Int32((rs + fx.Int64(r)).load()), fx.Int32(0), end)

    @flyc.jit
    def seq_tiles(rs, first_row, end, has_rows):
        """(lo, span): the key tiles [lo, lo + span) of a window from first_row's start to `end`
        (worksplit.seq_units and prefill_work; lo is 0 without row_starts or rows)."""
        lo = fx.Int32(0)
        if const_expr(STARTS):
            if has_rows:
                lo = row_start(rs, first_row, end) // BN
        return lo, _cdiv(end, BN) - lo

    def tile_scores(kiso, kscale, qfrag, qscale):
        """docs/numerics.md steps 1-4 for 16 keys x one 16-head tile: relu of the block sum of
        (P_b * sk_b) * sq_b, P_b from the MFMA with only lane group b's keys nonzero."""
        zero4 = Vector.filled(4, 0.0, fx.Float32)
        terms = []
        for bi in range_constexpr(NB):
            p = Vector(rocdl.mfma_scale_f32_16x16x128_f8f6f4(
                Vector.make_type(4, fx.Float32),
                [kiso[bi], qfrag, zero4, E2M1, E2M1, 0, UNIT_SCALES, 0, UNIT_SCALES]))
            terms.append((p * kscale[bi]) * Vector.filled(4, qscale[bi], fx.Float32))
        s = terms[0]
        for bi in range_constexpr(1, NB):   # step 3: left to right
            s = s + terms[bi]
        return s.maximumf(zero4)

    def full_scores(kfrag, qfrag, sa, sb):
        """mxsc: relu of the scaled dot over the whole head_dim for 16 keys x one 16-head tile, the
        MFMA scaling each lane's K-block by its key's (sa) and head's (sb) E8M0 byte."""
        zero4 = Vector.filled(4, 0.0, fx.Float32)
        p = Vector(rocdl.mfma_scale_f32_16x16x128_f8f6f4(
            Vector.make_type(4, fx.Float32), [kfrag, qfrag, zero4, E2M1, E2M1, 0, sa, 0, sb]))
        return p.maximumf(zero4)

    def weight(wp):
        """The f32 weight at wp (bf16 weights widened exactly)."""
        if const_expr(W_BF16):
            return (fx.Int32(wp.load()) << 16).bitcast(fx.Float32)
        return fx.Float32(wp.load())

    @flyc.jit
    def stage_queries(q, qs, w, stride_w, r0, r1, tid, lds_q, lds_s, lds_w, lds_qw, lds_ok):
        """Write the group's query operands, decoded q scales and weights to LDS (all waves)."""
        V4I = Vector.make_type(4, fx.Int32)
        for it in range_constexpr(_cdiv(R * NT * WAVE, THREADS)):
            idx = tid + it * THREADS          # (row, head tile, lane) of an MFMA B operand
            if idx < R * NT * WAVE:
                i = idx // WAVE
                row = _imin(r0 + i // NT, r1 - 1)      # rows past r1 are staged, never stored
                head = fx.Int64(row) * H + fx.Int64((i % NT) * 16 + idx % 16)
                frag = (q + (head * DB + fx.Int64((idx % WAVE) // 16) * 16)).load(V4I)
                (lds_q + fx.Int64(idx) * 4).store(frag)
                if const_expr(FULL):  # the (row, head tile)'s flag: a wave a tile (idx // WAVE uniform)
                    word = fx.Int32((qs + head).load())
                    wf = weight(w + (fx.Int64(row) * stride_w + fx.Int64((i % NT) * 16 + idx % 16)))
                    ok = _bytes_in_full_range(word) & (wf < FULL_W_HI) & (wf > -FULL_W_HI)
                    votes = _wave_sum(ok.select(fx.Int32(1), fx.Int32(0)))
                    if idx % WAVE == 0:
                        (lds_ok + fx.Int64(i)).store((votes == WAVE).select(fx.Int32(1), fx.Int32(0)))
        for it in range_constexpr(_cdiv(R * H, THREADS)):
            idx = tid + it * THREADS          # (row, head)
            if idx < R * H:
                row = _imin(r0 + idx // H, r1 - 1)
                word = Vector.filled(1, fx.Int32((qs + (fx.Int64(row) * H + fx.Int64(idx % H))).load()), fx.Int32)
                scales = Vector.from_elements([_e8m0(_scale_block(word, blk))[0] for blk in range_constexpr(NB)],
                                              fx.Float32)
                (lds_s + fx.Int64(idx) * NB).store(scales)
                if const_expr(FULL):
                    (lds_qw + fx.Int64(idx)).store(word[0])
                (lds_w + fx.Int64(idx)).store(weight(w + (fx.Int64(row) * stride_w + fx.Int64(idx % H))))

    @flyc.jit
    def score_group(q, qs, kv, ks, w, bt, re, rs, out, oo, num_pages, seq_cap, out_numel, stride_w,
                    stride_bt, stride_out, b, r0, r1, t0, t1, tid, wave, lane, lds_q, lds_s, lds_w,
                    lds_qw, lds_ok):
        """Rows [r0, r1) of sequence b (at most R, r1 > r0) against key tiles [t0, t1), as
        worksplit.piece_tiles: from the group start (the rows' smallest row_start) to the group
        end (their largest row_end)."""
        V4I = Vector.make_type(4, fx.Int32)   # types need the tracing context
        c = lane % 16
        g = lane // 16
        gpu.barrier()                         # every wave is done with the previous group
        stage_queries(q, qs, w, stride_w, r0, r1, tid, lds_q, lds_s, lds_w, lds_qw, lds_ok)
        gpu.barrier()
        gend = fx.Int32(0)
        for r in range_constexpr(R):
            gend = _imax(gend, row_end(re, _imin(r0 + r, r1 - 1), seq_cap))
        # lane c < R stores row r0 + c
        my_row = _imin(r0 + c, r1 - 1)
        my_end = row_end(re, my_row, seq_cap)
        my_start = fx.Int32(0)
        gbeg = fx.Int32(0)
        if const_expr(STARTS):
            # the group start, the rows' smallest start: lanes c = 0..15 hold rows r0..r1-1 (one
            # vector load and a row minimum; a scalar loop over R rows, as gend's, spills SGPRs)
            my_start = row_start(rs, my_row, my_end)
            gbeg = _uniform(_row_min(my_start))
        my_end = ((c < R) & (r0 + c < r1)).select(my_end, fx.Int32(0))
        if const_expr(FLAT_OUT):  # a row ends at the flat out's end; a negative offset writes nothing
            my_base = fx.Int64((oo + fx.Int64(my_row)).load())
            room = _imax(out_numel - my_base, fx.Int64(0))
            my_end = (my_base >= 0).select(fx.Int32(_imin(fx.Int64(my_end), room)), fx.Int32(0))
        else:
            my_base = fx.Int64(my_row) * stride_out
        if const_expr(STARTS):
            my_start = _imin(my_start, my_end)   # clamped into [0, the cut end], as row_start does
        if const_expr(GATHER):
            bt_row = bt + fx.Int64(r0) * stride_bt
        else:
            bt_row = bt + fx.Int64(b) * stride_bt
        kmax = _imax(gend - 1, fx.Int32(0))
        kmin = fx.Int32(0)   # keys before the group start read its key: no table entry before the windows
        t = t0
        if const_expr(STARTS):
            kmin = _imin(gbeg, kmax)
            t = _imax(t0, gbeg // BN)
        t_stop = _imin(t1, _cdiv(gend, BN))
        while t < t_stop:
            key0 = t * BN + wave * 16
            # A operand: key key0 + c, K-block g (keys past the group end, or before its start,
            # read a valid key; a key outside the cache reads nothing: its scales below make its
            # cells NaN)
            key_a = _imin(key0 + c, kmax)
            if const_expr(STARTS):
                key_a = _clamp(key0 + c, kmin, kmax)
            slot_a, in_cache_a = slot_of(key_a, bt_row, num_pages)
            kfrag = Vector.filled(4, 0, fx.Int32)
            if in_cache_a:
                kfrag = Vector((kv + (slot_a * DB + fx.Int64(g) * 16)).load(V4I))
            # key scales of keys key0 + 4g .. + 3: one page, 16 contiguous bytes (0xFF bytes,
            # NaN, for a page outside the cache)
            kq = _imin(key0 + 4 * g, (kmax // 4) * 4)
            if const_expr(STARTS):
                kq = _clamp(key0 + 4 * g, (kmin // 4) * 4, (kmax // 4) * 4)
            slot_s, in_cache_s = slot_of(kq, bt_row, num_pages)
            sk_words = Vector.filled(4, -1, fx.Int32)
            if in_cache_s:
                sk_words = Vector((ks + slot_s).load(V4I))
            kscale = [_e8m0(_scale_block(sk_words, blk)) for blk in range_constexpr(NB)]
            kiso = [(g == blk).select(kfrag, Vector.filled(4, 0, fx.Int32)) for blk in range_constexpr(NB)]
            keys_full = fx.Int32(0)
            key_byte = fx.Int32(0)
            if const_expr(FULL):  # key key0 + c's scale word: its block g byte, and the wave's vote
                kword = fx.Int32(-1)
                if in_cache_a:
                    kword = fx.Int32((ks + slot_a).load())
                key_byte = (kword >> (8 * g)) & 0xFF
                keys_full = _uniform((_wave_sum(_bytes_in_full_range(kword).select(fx.Int32(1), fx.Int32(0)))
                                      == WAVE).select(fx.Int32(1), fx.Int32(0)))

            def scores(i, fq, sq):
                """steps 1-4 of (row, head tile) i: mxsc's one MFMA where its flag and the wave's
                keys allow, the four otherwise."""
                if const_expr(not FULL):
                    return tile_scores(kiso, kscale, fq, sq)
                flag = fx.Int32(fx.generic_load(lds_ok + fx.Int64(i), dtype=fx.Int32, volatile=True))
                head_byte = (fx.Int32(fx.generic_load(lds_qw + fx.Int64(i * 16 + c), dtype=fx.Int32, volatile=True))
                             >> (8 * g)) & 0xFF
                x = Vector.filled(4, 0.0, fx.Float32)
                if (keys_full & _uniform(flag)) != 0:
                    x = full_scores(kfrag, fq, key_byte, head_byte)
                else:
                    x = tile_scores(kiso, kscale, fq, sq)
                return x

            def operands(i):
                """Staged B operand, q scales and weight of (row, head tile) i. Volatile, so that
                they are re-read from LDS each tile instead of hoisted into registers."""
                frag = fx.generic_load(lds_q + fx.Int64(i * WAVE + lane) * 4, dtype=fx.Int32, count=4, volatile=True)
                sq = fx.generic_load(lds_s + fx.Int64(i * 16 + c) * NB, dtype=fx.Float32, count=NB, volatile=True)
                wi = fx.generic_load(lds_w + fx.Int64(i * 16 + c), dtype=fx.Float32, volatile=True)
                return frag, [sq[blk] for blk in range_constexpr(NB)], wi

            vals = []
            for ri in range_constexpr(R):
                # head tree level 1 pairs tile ti with ti + NT/2 (heads j and j + H/2)
                half = NT // 2
                v = []
                for ti in range_constexpr(half):
                    fa, sa, wa = operands(ri * NT + ti)
                    fb, sb, wb = operands(ri * NT + ti + half)
                    xa = scores(ri * NT + ti, fa, sa)
                    xb = scores(ri * NT + ti + half, fb, sb)
                    v.append(fx.math.fma(xa, Vector.filled(4, wa, fx.Float32),
                                         xb * Vector.filled(4, wb, fx.Float32)))
                while const_expr(len(v) > 1):
                    m = len(v) // 2
                    v = [v[j] + v[j + m] for j in range_constexpr(m)]
                acc = v[0]
                for k in range_constexpr(4):  # heads c and c + 8, 4, 2, 1 within the tile
                    rotated = []
                    for e in range_constexpr(4):
                        a = acc[e]
                        rot = rocdl.update_dpp(T.f32, a.ir_value(), a.ir_value(), DPP_ROW_ROR + (8 >> k),
                                               0xF, 0xF, False)
                        rotated.append(a + fx.Float32(rot))
                    acc = Vector.from_elements(rotated, fx.Float32)
                vals.append(acc)
            res = vals[0]
            for ri in range_constexpr(1, R):
                res = (c == ri).select(vals[ri], res)
            if const_expr(OUT_T is not fx.Float32):   # rounded once, to nearest even
                res = Vector.from_elements([OUT_T(res[e]) for e in range_constexpr(4)], OUT_T)
            for e in range_constexpr(4):
                key = key0 + 4 * g + e
                stored = key < my_end
                if const_expr(STARTS):
                    stored = stored & (key >= my_start)
                if stored:
                    (out + (my_base + fx.Int64(key))).store(res[e])
            t = t + 1

    @flyc.jit
    def cta_range(qsl, re, rs, num_seqs, num_rows, seq_cap, lanes, pid, nprog, lane):
        """worksplit.cta_range over `lanes` sequences, 64 at a time."""
        total = fx.Int32(0)
        s0 = fx.Int32(0)
        while s0 < lanes:
            total = total + _wave_sum(seq_units(qsl, re, rs, num_seqs, num_rows, seq_cap, s0 + lane))
            s0 = s0 + WAVE
        u_begin = fx.Int32((fx.Int64(pid) * fx.Int64(total)) // fx.Int64(nprog))
        u_end = fx.Int32(((fx.Int64(pid) + 1) * fx.Int64(total)) // fx.Int64(nprog))
        b = fx.Int32(0)
        base = fx.Int32(0)
        cum = fx.Int32(0)
        s0 = fx.Int32(0)
        while s0 < lanes:
            units = seq_units(qsl, re, rs, num_seqs, num_rows, seq_cap, s0 + lane)
            incl = cum + _wave_inclusive_scan(units, lane)
            before = (incl <= u_begin) & (s0 + lane < lanes)
            b = b + _wave_sum(before.select(fx.Int32(1), fx.Int32(0)))
            base = base + _wave_sum(before.select(units, fx.Int32(0)))
            cum = cum + _wave_sum(units)
            s0 = s0 + WAVE
        return _uniform(u_begin), _uniform(u_end), _uniform(b), _uniform(base)

    @flyc.jit
    def seq_units(qsl, re, rs, num_seqs, num_rows, seq_cap, s):
        """Units of sequence s (0 past num_seqs), as worksplit.seq_units."""
        live = s < num_seqs
        qa = seq_start(qsl, _imin(s, num_seqs), num_rows)
        qb = _imax(seq_start(qsl, _imin(s + 1, num_seqs), num_rows), qa)
        n = live.select(qb - qa, fx.Int32(0))
        end = fx.Int32(0)
        if n > 0:
            end = row_end(re, qb - 1, seq_cap)
        groups = _cdiv(n, R)
        _, span = seq_tiles(rs, qa, end, n > 0)
        return groups * _group_units(span)

    @flyc.jit
    def prefill_body(q, qs, kv, ks, w, bt, qsl, re, rs, out, oo, num_seqs, num_rows, num_pages, seq_cap,
                     out_numel, stride_w, stride_bt, stride_out, pid, part, parts, tid, wave, lane,
                     lds_q, lds_s, lds_w, lds_qw, lds_ok):
        """worksplit.prefill_work: global rows [pid*R, pid*R + R), tiles cut in `parts`."""
        live = seq_start(qsl, num_seqs, num_rows)
        row0 = pid * R
        chunk_end = _imin(row0 + R, live)
        lo = fx.Int32(0)
        hi = num_seqs
        while hi - lo > 1:  # last sequence starting at or before row0
            mid = (lo + hi) // 2
            at_or_before = seq_start(qsl, mid, num_rows) <= row0
            lo = at_or_before.select(mid, lo)
            hi = at_or_before.select(hi, mid)
        b = lo
        qa = seq_start(qsl, b, num_rows)
        while (b < num_seqs) & (qa < chunk_end):
            qb = _imax(seq_start(qsl, b + 1, num_rows), qa)
            r0 = _imax(row0, qa)
            r1 = _imin(chunk_end, qb)
            if r1 > r0:  # an empty piece (an empty sequence) has no row to read
                end = row_end(re, r1 - 1, seq_cap)
                lo, span = seq_tiles(rs, r0, end, True)
                t0 = lo + (part * span) // parts
                t1 = lo + ((part + 1) * span) // parts
                score_group(q, qs, kv, ks, w, bt, re, rs, out, oo, num_pages, seq_cap, out_numel,
                            stride_w, stride_bt, stride_out, b, r0, r1, t0, t1, tid, wave, lane,
                            lds_q, lds_s, lds_w, lds_qw, lds_ok)
            b = b + 1
            qa = qb

    @flyc.jit
    def free_body(q, qs, kv, ks, w, bt, qsl, re, rs, out, oo, num_seqs, num_rows, num_pages, seq_cap,
                  out_numel, stride_w, stride_bt, stride_out, u, u_end, b, base, tid, wave, lane,
                  lds_q, lds_s, lds_w, lds_qw, lds_ok):
        """worksplit.free_work from a program's (u_begin, u_end, b, base)."""
        while (u < u_end) & (b < num_seqs) & (b >= 0):  # b < 0: only from corrupted records
            qa = seq_start(qsl, b, num_rows)
            qb = _imax(seq_start(qsl, b + 1, num_rows), qa)
            end = fx.Int32(0)
            if qb > qa:
                end = row_end(re, qb - 1, seq_cap)
            tlo, span = seq_tiles(rs, qa, end, qb > qa)
            stride = span + PIECE_COST  # a group's units: its set-up's, then its tiles
            units = _cdiv(qb - qa, R) * _group_units(span)
            lo = _imax(u - base, fx.Int32(0))  # negative only for corrupted records
            hi = _imin(u_end - base, units)
            u = (hi > lo).select(base + hi, u)
            while lo < hi:  # the groups this program touches, each with its own tile range
                j = lo // stride
                t0 = _imax(lo - j * stride - PIECE_COST, fx.Int32(0))
                t1 = _imin(hi - j * stride, stride) - PIECE_COST
                r0 = qa + j * R
                r1 = _imin(r0 + R, qb)
                if t1 > t0:  # not only set-up units of group j
                    score_group(q, qs, kv, ks, w, bt, re, rs, out, oo, num_pages, seq_cap, out_numel,
                                stride_w, stride_bt, stride_out, b, r0, r1, tlo + t0, tlo + t1, tid, wave, lane,
                                lds_q, lds_s, lds_w, lds_qw, lds_ok)
                lo = (j + 1) * stride
            base = base + units
            b = b + 1

    @flyc.kernel
    def mqa_logits_fly(q: fx.Pointer, qs: fx.Pointer, kv: fx.Pointer, ks: fx.Pointer,
                       w: fx.Pointer, bt: fx.Pointer, qsl: fx.Pointer, re: fx.Pointer,
                       out: fx.Pointer, oo: fx.Pointer, sched: fx.Pointer,
                       num_seqs: fx.Int32, lanes: fx.Int32, num_rows: fx.Int32, seq_cap: fx.Int32,
                       num_pages: fx.Int64, out_numel: fx.Int64, stride_w: fx.Int64,
                       stride_bt: fx.Int64, stride_out: fx.Int64, nprog: fx.Int32, parts: fx.Int32,
                       rs: fx.Pointer):
        # nprog / parts: the grid's x / y size (gridDim would need the ROCm device libraries); rs
        # (row_starts) last, so that the other arguments keep their places without row_starts
        tid = fx.Int32(gpu.thread_idx.x)
        lane = tid % WAVE
        wave = _uniform(tid // WAVE)
        pid = fx.Int32(gpu.block_idx.x)
        smem = fx.SharedAllocator()
        lds_q = smem.allocate(fx.Array[fx.Int32, R * H * DB // 4, 16]).peek().ptr   # B operands, lane order
        lds_s = smem.allocate(fx.Array[fx.Float32, R * H * NB, 16]).peek().ptr      # decoded q scales
        lds_w = smem.allocate(fx.Array[fx.Float32, R * H, 16]).peek().ptr           # weights
        lds_qw, lds_ok = lds_w, lds_w  # mxsc only (unused otherwise)
        if const_expr(FULL):
            lds_qw = smem.allocate(fx.Array[fx.Int32, R * H, 16]).peek().ptr        # raw q scale words
            lds_ok = smem.allocate(fx.Array[fx.Int32, R * NT, 16]).peek().ptr       # full-path flags
        if const_expr(MODE == MODE_PREFILL):
            prefill_body(q, qs, kv, ks, w, bt, qsl, re, rs, out, oo, num_seqs, num_rows, num_pages, seq_cap,
                         out_numel, stride_w, stride_bt, stride_out, pid, fx.Int32(gpu.block_idx.y), parts,
                         tid, wave, lane, lds_q, lds_s, lds_w, lds_qw, lds_ok)
        elif const_expr(MODE == MODE_TABLE):
            rec = sched + fx.Int64(pid) * RECORD_INTS
            free_body(q, qs, kv, ks, w, bt, qsl, re, rs, out, oo, num_seqs, num_rows, num_pages, seq_cap,
                      out_numel, stride_w, stride_bt, stride_out, _uniform((rec + 0).load()),
                      _uniform((rec + 1).load()), _uniform((rec + 2).load()), _uniform((rec + 3).load()),
                      tid, wave, lane, lds_q, lds_s, lds_w, lds_qw, lds_ok)
        else:
            u, u_end, b, base = cta_range(qsl, re, rs, num_seqs, num_rows, seq_cap, lanes, pid, nprog, lane)
            free_body(q, qs, kv, ks, w, bt, qsl, re, rs, out, oo, num_seqs, num_rows, num_pages, seq_cap,
                      out_numel, stride_w, stride_bt, stride_out, u, u_end, b, base, tid, wave, lane,
                      lds_q, lds_s, lds_w, lds_qw, lds_ok)

    @flyc.jit
    def launch(q: fx.Pointer, qs: fx.Pointer, kv: fx.Pointer, ks: fx.Pointer, w: fx.Pointer,
               bt: fx.Pointer, qsl: fx.Pointer, re: fx.Pointer, out: fx.Pointer, oo: fx.Pointer,
               sched: fx.Pointer, rs: fx.Pointer, num_seqs: fx.Int32, lanes: fx.Int32, num_rows: fx.Int32,
               seq_cap: fx.Int32, num_pages: fx.Int64, out_numel: fx.Int64, stride_w: fx.Int64,
               stride_bt: fx.Int64, stride_out: fx.Int64, grid_x: fx.Int32, grid_y: fx.Int32,
               stream: fx.Stream = fx.Stream(None)):
        mqa_logits_fly(q, qs, kv, ks, w, bt, qsl, re, out, oo, sched, num_seqs, lanes, num_rows, seq_cap,
                       num_pages, out_numel, stride_w, stride_bt, stride_out, grid_x, grid_y, rs
                       ).launch(grid=(grid_x, grid_y, 1), block=(WAVE * WAVES, 1, 1), stream=stream)

    return launch


# The launcher's int arguments after its pointers, in order (compile-only builds pass 1 for each).
INT_ARGS = ("num_seqs", "lanes", "num_rows", "seq_cap", "num_pages", "out_numel", "stride_w",
            "stride_bt", "stride_out", "grid_x", "grid_y")


def pointer_args(spec: KernelSpec, ptrs: dict | None = None) -> list:
    """The launcher's pointer arguments (element type and alignment promised to the compiler);
    `ptrs` maps names to addresses, None everywhere for a compile-only build."""
    from flydsl.compiler.jit_argument import PointerJitArg
    ptrs = ptrs or {}
    kinds = [("q", fx.Uint8, 16), ("q_scale", fx.Int32, 4), ("kv_cache", fx.Uint8, 16),
             ("kv_scale", fx.Int32, 16), ("weights", fx.Int16 if spec.w_bf16 else fx.Float32, None),
             ("block_tables", fx.Int32, None), ("query_start_loc", fx.Int32, None),
             ("row_ends", fx.Int32, None), ("out", OUT_TYPES[spec.out_dtype], None),
             ("out_offsets", fx.Int64, None), ("records", fx.Int32, None), ("row_starts", fx.Int32, None)]
    return [PointerJitArg(dtype, ptrs.get(name), alignment=align) for name, dtype, align in kinds]
