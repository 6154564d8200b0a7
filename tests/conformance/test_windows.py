"""Per-row window starts, narrow outputs and bands (docs/contract.md, "Windows", "Narrow outputs"
and "Bands"): every backend x instance x mode against the float64 reference, on CPU (the Triton
interpreter) and on the GPU."""

import dataclasses

import pytest
import torch

import mqa_logits_mxfp4 as mx
from mqa_logits_mxfp4.problems import make_edge_problem
from mqa_logits_mxfp4.reference import compare_to_reference

from .common import (DEVICES, MODES, POISON, assert_untouched_outside, build, candidates, config,
                     instance_of, need_device, reference, run, window_starts)

CANDIDATES = candidates()
NARROW = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="f16")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", CANDIDATES)
@pytest.mark.parametrize("geometry", ["v4_decode", "v41_full", "v41_candidate", "h16_prefill"])
def test_row_starts(geometry, pair, mode, device):
    """Row r scores keys [row_starts[r], row_ends[r]): within the tolerance there, and every
    cell before the start (and outside the window) keeps its poison."""
    need_device(device)
    seed = hash((geometry, mode, "starts")) % 1000
    prob = build(geometry, device, seed=seed)
    starts = window_starts(prob, seed)
    cfg = config(prob, pair, mode)
    ref = reference(prob, cfg, row_starts=starts)
    assert int(ref.window.sum()) < int(reference(prob, cfg).window.sum())  # the starts cut keys off
    out = run(prob, cfg, mode, row_starts=starts)
    assert compare_to_reference(out, ref) == []
    assert_untouched_outside(out, ref, prob.live_rows)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pair", CANDIDATES)
def test_row_starts_modes_bitwise_identical(pair, device):
    need_device(device)
    prob = build("v4_decode", device, seed=11)
    starts = window_starts(prob, 11)
    outs = [run(prob, config(prob, pair, mode), mode, row_starts=starts) for mode in MODES]
    for mode, out in zip(MODES[1:], outs[1:]):
        assert torch.equal(out, outs[0]), f"{mode} differs from {MODES[0]} with row_starts"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", CANDIDATES)
def test_shards_equal_the_whole(pair, mode, device):
    """A context-parallel split: each row's window cut at a key m into two calls ([start, m)
    and [m, end)) writes what one call over [start, end) writes -- bit for bit on a canonical
    instance (each cell depends on its row and key only), within the tolerance on the others
    (whose fast/exact path choice may see a tile's neighbours: docs/numerics.md)."""
    need_device(device)
    prob = build("v4_decode", device, seed=17)
    starts = window_starts(prob, 17)
    ends = prob.row_ends
    g = torch.Generator().manual_seed(5)
    # a cut per sequence, inside its windows (non-decreasing along its rows: still a valid call)
    cut = torch.zeros_like(ends)
    qsl = prob.query_start_loc.tolist()
    for b in range(len(qsl) - 1):
        at = int(float(torch.rand((), generator=g)) * int(ends[max(qsl[b + 1] - 1, 0)]))
        for r in range(qsl[b], qsl[b + 1]):
            cut[r] = min(max(int(starts[r]), at), int(ends[r]))
    cfg = config(prob, pair, mode)
    whole = run(prob, cfg, mode, row_starts=starts)
    split = torch.full_like(whole, POISON)
    first = dataclasses.replace(prob, row_ends=cut)
    run(first, cfg, mode, out=split, row_starts=starts)
    run(prob, cfg, mode, out=split, row_starts=cut)
    assert bool(((cut > starts) & (cut < ends))[:prob.live_rows].any())  # some window was really split
    ref = reference(prob, cfg, row_starts=starts)
    assert_untouched_outside(split, ref, prob.live_rows)
    if instance_of(pair)[1].canonical:
        assert torch.equal(split, whole)
    else:
        assert compare_to_reference(split, ref) == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", CANDIDATES)
def test_narrow_out(pair, mode, dtype, device):
    """A bfloat16 / float16 out holds the instance's float32 result rounded once to nearest-even:
    bit for bit what rounding its float32 out gives, within the tolerance of the reference
    (compare_to_reference's narrow rule), with row_starts too, and nothing written outside."""
    need_device(device)
    # bfloat16 has float32's range; float16 overflows past 65504, so its scales spread less
    prob = build("v41_full", device, seed=23, **({} if dtype == torch.bfloat16 else {"scales": (120, 131)}))
    starts = window_starts(prob, 23)
    cfg = config(prob, pair, mode)
    wide = run(prob, cfg, mode, row_starts=starts)
    out = run(prob, cfg, mode, row_starts=starts, dtype=dtype)
    ref = reference(prob, cfg, row_starts=starts)
    assert compare_to_reference(out, ref) == []
    assert_untouched_outside(out, ref, prob.live_rows)
    win = torch.zeros(out.shape, dtype=torch.bool, device=out.device)
    win[:prob.live_rows, :ref.window.shape[1]] = ref.window.to(out.device)
    assert torch.equal(out[win], wide[win].to(dtype))
    finite = out[win][torch.isfinite(out[win])]
    assert finite.numel() > win.sum() // 2 and float(finite.abs().max()) > 1.0  # real values, not zeros


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("pair", CANDIDATES)
def test_narrow_out_keeps_nan_and_inf(pair, dtype, device):
    """E8M0 0xFF, NaN/Inf weights and overflow: a narrow out has the float32 evaluation's NaN
    cells and its +-Inf cells, and a finite float32 past the narrow range becomes +-Inf."""
    need_device(device)
    if pair[1].startswith("scaled") and device == "cpu":
        pytest.skip("the interpreter's dot_scaled overflows before the block sum (test_numerics.py)")
    prob = make_edge_problem(heads=32, page_size=16, generator=torch.Generator().manual_seed(7), device=device)
    cfg = config(prob, pair, "free", extra_len=0)
    wide = run(prob, cfg, "free")
    out = run(prob, cfg, "free", dtype=dtype)
    ref = reference(prob, cfg)
    assert compare_to_reference(out, ref) == []
    win = ref.window.to(out.device)
    o, w = out[:prob.live_rows, :win.shape[1]][win], wide[:prob.live_rows, :win.shape[1]][win]
    assert torch.equal(torch.isnan(o), torch.isnan(w)) and bool(torch.isnan(o).any())
    assert bool((torch.isinf(w) & ~torch.isinf(o)).sum() == 0) and bool(torch.isinf(o).any())
    assert torch.equal(o[~torch.isnan(o)], w[~torch.isnan(o)].to(dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pair", CANDIDATES)
def test_bands_equal_one_call(pair, device):
    """A prefill scored in bands of rows under a byte budget (mqa_logits_mxfp4_bands: one reused
    buffer, sliced rows, query_start_loc clamped to the band) equals one call over every row --
    sequences cut across bands, with row_starts, in float32 and bfloat16: bit for bit on a
    canonical instance, within the tolerance on the others (bands regroup rows, and a
    non-canonical instance's path may depend on its row group: docs/numerics.md) -- and each
    band's cells outside windows are -inf."""
    need_device(device)
    prob = build("h16_prefill", device, seed=29)
    starts = window_starts(prob, 29)
    cfg = config(prob, pair, "prefill")
    for dtype in (torch.float32, torch.bfloat16):
        whole = run(prob, cfg, "prefill", row_starts=starts, dtype=dtype)
        per_band = prob.rows // 3
        budget = per_band * cfg.max_seq_len * whole.element_size() + 1
        assert mx.band_rows(cfg, budget, dtype) == per_band
        got = torch.full_like(whole, POISON)
        seen = []
        for start, logits in mx.mqa_logits_mxfp4_bands(*prob.args(), cfg=cfg, budget_bytes=budget,
                                                       row_starts=starts, out_dtype=dtype):
            assert logits.shape == (min(per_band, prob.rows - start), cfg.max_seq_len)
            got[start:start + logits.shape[0], :cfg.max_seq_len] = logits
            seen.append(start)
        assert seen == list(range(0, prob.rows, per_band)) and len(seen) >= 3
        ref = reference(prob, cfg, row_starts=starts)
        win = torch.zeros(whole.shape, dtype=torch.bool, device=whole.device)
        win[:prob.live_rows, :ref.window.shape[1]] = ref.window.to(whole.device)
        if instance_of(pair)[1].canonical:
            assert torch.equal(got[win], whole[win])
        else:
            assert compare_to_reference(got[:prob.rows], ref) == []
        outside = got[:prob.rows, :cfg.max_seq_len][~win[:prob.rows, :cfg.max_seq_len]]
        assert bool((outside == float("-inf")).all())
