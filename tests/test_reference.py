import math
from operator import mul

import numpy as np
import pytest
import torch

from mqa_logits_mxfp4.problems import make_edge_problem, make_problem
from mqa_logits_mxfp4.reference import compare_to_reference, gather_rows, mqa_logits_reference


def e2m1(code: int) -> float:
    sign = -1.0 if code & 8 else 1.0
    exp, man = (code >> 1) & 3, code & 1
    return sign * (man * 0.5 if exp == 0 else 2.0 ** (exp - 1) * (1 + man / 2))


def e8m0(byte: int) -> float:
    return math.nan if byte == 255 else math.ldexp(1.0, byte - 127)


def blocks_of(packed_row: list[int]) -> list[list[float]]:
    values = []
    for byte in packed_row:
        values += [e2m1(byte & 15), e2m1(byte >> 4)]
    return [values[i:i + 32] for i in range(0, len(values), 32)]


def slot_of(p, row: int, seq: int, n: int) -> tuple[int, int]:
    span = p.page_size * p.pages_per_block
    table_row = row if p.gather else seq
    page = int(p.block_tables[table_row, n // span]) * p.pages_per_block + (n // p.page_size) % p.pages_per_block
    return page, n % p.page_size


def naive(p):
    """Python loops over rows, keys, heads, blocks: {(row, key): (ref, bound, fp32)} on window cells."""
    heads = p.heads
    qs, ks, w = p.q_scale.tolist(), p.kv_scale.tolist(), p.weights.double().tolist()
    kv, ends, qsl = p.kv_cache.tolist(), p.row_ends.tolist(), p.query_start_loc.tolist()
    cells = {}
    with np.errstate(all="ignore"):
        for seq in range(len(qsl) - 1):
            for r in range(qsl[seq], qsl[seq + 1]):
                qv = [blocks_of(p.q[r, h].tolist()) for h in range(heads)]
                for n in range(ends[r]):
                    page, tok = slot_of(p, r, seq, n)
                    kb = blocks_of(kv[page][tok])
                    ref = bound = 0.0
                    x32 = []
                    for h in range(heads):
                        s = s_abs = 0.0
                        ts = []
                        for b, (qb, kk) in enumerate(zip(qv[h], kb)):
                            scale = e8m0(qs[r][h][b]) * e8m0(ks[page][tok][b])
                            t = sum(map(mul, qb, kk)) * scale
                            ts.append(t)
                            s += t
                            s_abs += sum(abs(a * c) for a, c in zip(qb, kk)) * abs(scale)
                        x = s if (s != s or s > 0) else 0.0
                        ref += w[r][h] * x
                        bound += abs(w[r][h]) * s_abs
                        s32 = np.float32(ts[0])
                        for t in ts[1:]:
                            s32 = np.float32(s32 + np.float32(t))
                        x32.append(s32 if (s32 != s32 or s32 > 0) else np.float32(0))
                    w32 = [np.float32(v) for v in w[r]]
                    half = heads // 2
                    v = [np.float32(float(x32[j]) * float(w32[j]) + float(np.float32(x32[j + half] * w32[j + half])))
                         for j in range(half)]
                    while len(v) > 1:
                        m = len(v) // 2
                        v = [np.float32(v[j] + v[j + m]) for j in range(m)]
                    cells[(r, n)] = (ref, bound, float(v[0]))
    return cells


def reference_of(p, **kw):
    return mqa_logits_reference(*p.args(), max_seq_len=kw.pop("max_seq_len", p.max_seq_len),
                                pages_per_block=p.pages_per_block, gather=p.gather, **kw)


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def check_against_naive(p, rel=1e-12):
    got = reference_of(p)
    want = naive(p)
    window = {(r, n) for r, n in got.window.nonzero().tolist()}
    assert window == set(want)
    assert got.ref[~got.window].eq(0).all() and got.fp32[~got.window].eq(0).all()
    for (r, n), (ref, bound, f32) in want.items():
        g_ref, g_bound, g_f32 = got.ref[r, n].item(), got.bound[r, n].item(), got.fp32[r, n].item()
        assert same(g_f32, f32), (r, n, g_f32, f32)
        if math.isfinite(ref):
            assert abs(g_ref - ref) <= rel * bound, (r, n, g_ref, ref)
            assert abs(g_bound - bound) <= rel * bound
        else:
            assert same(g_ref, ref), (r, n, g_ref, ref)
    return got


@pytest.mark.parametrize("heads, pages_per_block, gather, ratio, seqs", [
    (16, 1, False, 1, [(20, 2), (9, 1), (35, 3)]),
    (16, 4, False, 2, [(60, 2), (9, 1), (70, 3)]),
    (16, 1, True, 1, [(20, 2), (9, 1), (35, 3)]),
    (16, 4, True, 1, [(40, 2), (9, 1)]),
    (64, 1, False, 1, [(14, 2), (20, 1)]),
    (64, 4, True, 2, [(30, 2), (12, 1)]),
])
def test_matches_naive_loops(heads, pages_per_block, gather, ratio, seqs):
    p = make_problem(heads=heads, page_size=8, pages_per_block=pages_per_block, gather=gather, ratio=ratio,
                     seqs=seqs, pad_rows=2, table_pad=1, scale_exponents=(100, 150),
                     generator=torch.Generator().manual_seed(heads + pages_per_block + gather))
    got = check_against_naive(p)
    assert got.ref.shape == (p.live_rows, p.max_seq_len)
    assert got.ref.isfinite().all() and got.fp32.isfinite().all()


def test_edge_sources_match_naive_loops():
    p = make_edge_problem(heads=16, page_size=8, weights_dtype=torch.bfloat16)
    got = check_against_naive(p)
    assert got.fp32.isnan().any() and got.fp32.isinf().any()


def test_q_scale_nan_only_in_its_row():
    p = make_problem(heads=16, page_size=8, seqs=[(30, 3), (12, 2)])
    p.q_scale[1, 5, 2] = 0xFF
    p.q[1, 5, 32:48] = 0  # NaN scale times an all-zero block is still NaN
    got = reference_of(p)
    for result in (got.ref, got.fp32):
        nan = result.isnan()
        assert torch.equal(nan[1], got.window[1])
        nan[1] = False
        assert not nan.any()


def test_k_scale_nan_marks_the_key_for_every_row_that_sees_it():
    p = make_problem(heads=16, page_size=8, seqs=[(30, 3), (12, 2)])
    page, tok = slot_of(p, 0, 0, 4)
    p.kv_scale[page, tok, 3] = 0xFF
    p.q[2, :, 48:64] = 0  # row 2's block 3 is zero for every head: 0 * NaN
    got = reference_of(p)
    expected = torch.zeros_like(got.window)
    for r in range(p.live_rows):
        seq = 0 if r < 3 else 1
        for n in range(int(p.row_ends[r])):
            expected[r, n] = slot_of(p, r, seq, n) == (page, tok)
    assert expected[:3, 4].all() and expected.sum() == 3
    assert torch.equal(got.ref.isnan(), expected) and torch.equal(got.fp32.isnan(), expected)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_infinite_weight(sign):
    p = make_problem(heads=16, page_size=8, seqs=[(40, 2)])
    p.weights[1, 7] = sign * math.inf
    got = reference_of(p)
    for result in (got.ref, got.fp32):
        row = result[1, : int(p.row_ends[1])]
        inf = row == sign * math.inf
        assert inf.any() and row.isnan().any()  # inf * relu(s) is +-inf for s > 0, NaN for s <= 0
        assert (inf | row.isnan()).all()
        assert result[0].isfinite().all()
    assert torch.equal(got.ref.isnan(), got.fp32.isnan())


def test_fp32_evaluation_is_within_tolerance_of_ref():
    p = make_problem(heads=64, page_size=16, seqs=[(300, 4), (100, 1)], ratio=2, scale_exponents=(100, 150))
    got = reference_of(p)
    finite = got.window & got.fp32.isfinite()
    assert finite.sum() > 500
    err = (got.fp32.double() - got.ref).abs()
    assert (err[finite] <= 1e-5 * got.bound[finite]).all()
    assert (err[finite] > 0).any()  # the float32 path really rounds
    assert compare_to_reference(got.fp32, got) == []


def test_chunking_and_byte_views_do_not_change_results():
    p = make_problem(heads=32, page_size=8, pages_per_block=2, seqs=[(50, 3), (20, 2)], ratio=2)
    p.kv_scale[3, 1, 0] = 0xFF
    whole = reference_of(p, max_seq_len=40)
    args = list(p.args())
    if hasattr(torch, "float4_e2m1fn_x2") and hasattr(torch, "float8_e8m0fnu"):
        args[0] = args[0].view(torch.float4_e2m1fn_x2)
        args[3] = args[3].view(torch.float8_e8m0fnu)
    tiles = mqa_logits_reference(*args, max_seq_len=40, pages_per_block=2, chunk_bytes=1)
    assert torch.equal(whole.fp32.isnan(), tiles.fp32.isnan())
    assert torch.equal(whole.fp32.nan_to_num(), tiles.fp32.nan_to_num())  # float32: bitwise
    for a, b in ((whole.ref, tiles.ref), (whole.bound, tiles.bound)):  # float64 sums may reassociate
        assert torch.allclose(a, b, rtol=1e-14, atol=0, equal_nan=True)
    assert not whole.window[:, p.max_seq_len:].any() and whole.ref[:, p.max_seq_len:].eq(0).all()


def test_rejects_windows_outside_max_seq_len_and_odd_heads():
    p = make_problem(heads=16, page_size=8, seqs=[(30, 2)])
    with pytest.raises(ValueError, match="max_seq_len"):
        reference_of(p, max_seq_len=p.max_seq_len - 1)
    odd = make_problem(heads=12, page_size=8, seqs=[(30, 2)])
    with pytest.raises(ValueError, match="power-of-two"):
        reference_of(odd)


def test_compare_accepts_a_strided_out_and_ignores_cells_outside_windows():
    p = make_edge_problem(heads=16, page_size=8)
    got = reference_of(p)
    out = torch.full((p.rows + 3, p.max_seq_len + 7), 12345.0)
    out[: p.live_rows, : p.max_seq_len] = torch.where(got.window, got.fp32, 7.0)
    assert compare_to_reference(out, got) == []
    assert compare_to_reference(out[:2], got)[0].startswith("out must be 2-D")


def test_compare_reports_value_and_class_mismatches():
    p = make_edge_problem(heads=16, page_size=8)
    got = reference_of(p)
    finite = (got.window & got.fp32.isfinite()).nonzero().tolist()
    r, n = finite[len(finite) // 2]
    out = got.fp32.clone()
    out[r, n] += 1e-3 * got.bound[r, n].item() + 1.0
    (msg,) = compare_to_reference(out, got)
    assert f"1 of {len(finite)} finite window cells" in msg and f"worst (row {r}, key {n})" in msg

    out = got.fp32.clone()
    out[r, n] = math.nan
    (msg,) = compare_to_reference(out, got)
    assert msg.startswith("NaN cells differ") and f"({r}, {n})" in msg

    out = got.fp32.clone()
    out[got.fp32 == math.inf] = math.nan
    msgs = compare_to_reference(out, got)
    assert [m.split()[0] for m in msgs] == ["NaN", "+Inf"]


def test_gather_rows_from_flat_out():
    p = make_problem(heads=16, page_size=8, seqs=[(30, 3), (12, 2)])
    got = reference_of(p)
    ends = p.row_ends[: p.live_rows].long()
    offsets = torch.cumsum(ends, 0) - ends + 5
    flat = torch.full((int(ends.sum()) + 5,), -1.0)
    for r in range(p.live_rows):
        flat[offsets[r]: offsets[r] + ends[r]] = got.fp32[r, : ends[r]]
    rows = gather_rows(flat, offsets, p.live_rows, p.max_seq_len)
    assert rows.shape == (p.live_rows, p.max_seq_len)
    assert compare_to_reference(rows, got) == []
    assert rows[-1, -1].isnan()  # past the end of the flat buffer
