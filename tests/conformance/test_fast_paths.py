"""Data that takes the fast paths of non-canonical instances, and data that forces their
canonical path (docs/numerics.md, "Integer tiles"): every instance meets the tolerance and the
NaN/Inf sets on both, its modes stay bitwise identical, and the opus i8 body's stage counters
show which path ran.

Narrow data: a key's or head's four block scales within 2 of each other (make_problem's
`block_spread`), as MXFP4 of Gaussian-like activations has, around bytes spread over 60
binades; Gaussian data: quantize_mxfp4 of normal vectors with log-normal magnitudes.
"""

import re

import pytest
import torch

from mqa_logits_mxfp4 import quantize_mxfp4
from mqa_logits_mxfp4.backends.opus.instances import i8_stages as opus_i8_stages
from mqa_logits_mxfp4.dispatch import registry
from mqa_logits_mxfp4.problems import EDGE_SOURCES, make_edge_problem
from mqa_logits_mxfp4.reference import compare_to_reference

from .common import (DEVICES, MODES, POISON, assert_same_bits, assert_untouched_outside, build, candidates, config,
                     instance_of, need_device, reference, run, run_and_check)

CANDIDATES = candidates()
NARROW = dict(scales=(100, 160), block_spread=2)



def gaussian(prob, seed: int):
    """The problem with q and the cache replaced by MXFP4 of normal vectors, each vector scaled
    by 2^N(0, 4) (block scales within a few binades in a vector, spread widely across them)."""
    gen = torch.Generator().manual_seed(seed)

    def mx(shape):
        x = torch.randn(*shape, generator=gen) * torch.exp2(torch.randn(*shape[:-1], 1, generator=gen) * 4)
        return quantize_mxfp4(x)

    q, q_scale = mx((*prob.q.shape[:-1], prob.head_dim))
    kv, kv_scale = mx((*prob.kv_cache.shape[:-1], prob.head_dim))
    dev = prob.q.device
    return prob.__class__(**{**prob.__dict__, "q": q.to(dev), "q_scale": q_scale.to(dev), "kv_cache": kv.to(dev),
                             "kv_scale": kv_scale.to(dev)})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", CANDIDATES)
@pytest.mark.parametrize("geometry", ["v4_decode", "v41_full", "h16_prefill", "h128"])
def test_narrow_scales(geometry, pair, mode, device):
    need_device(device)
    if device == "cpu" and geometry in ("h16_prefill", "h128"):
        pytest.skip("the interpreter covers the narrow-scale case on two geometries (CI time)")
    run_and_check(build(geometry, device, seed=hash((geometry, mode, "narrow")) % 1000, **NARROW), pair, mode)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pair", CANDIDATES)
def test_gaussian_activations(pair, device):
    need_device(device)
    prob = gaussian(build("v4_decode", device, seed=41), seed=43)
    outs = {}
    for mode in MODES:
        cfg = config(prob, pair, mode)
        outs[mode] = run(prob, cfg, mode)
        ref = reference(prob, cfg)
        assert compare_to_reference(outs[mode], ref) == []
    for mode in MODES[1:]:
        assert torch.equal(outs[mode], outs[MODES[0]]), f"{mode} differs from {MODES[0]}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", CANDIDATES)
def test_nan_inf_cells_among_narrow_scales(pair, mode, device):
    """The edge sources (0xFF scale bytes, NaN/Inf weights, overflow) planted in narrow data:
    the tiles and groups that hold them take the canonical path, the others may not."""
    need_device(device)
    if pair[1].startswith("scaled"):
        pytest.skip("dot_scaled's overflow cells differ by design (test_numerics.test_nan_inf_cells)")
    prob = make_edge_problem(heads=32, page_size=16, block_spread=2, generator=torch.Generator().manual_seed(9),
                             device=device)
    cfg = config(prob, pair, mode, extra_len=0)
    out = run(prob, cfg, mode)
    ref = reference(prob, cfg)
    assert_untouched_outside(out, ref, prob.live_rows)
    assert compare_to_reference(out, ref) == []
    live = out[:prob.live_rows, :ref.window.shape[1]]
    for b, source in enumerate(EDGE_SOURCES):
        rows = live[2 * b:2 * b + 2][ref.window[2 * b:2 * b + 2].to(live.device)]
        assert not torch.isfinite(rows).all(), f"{source}: no NaN/Inf cell in its sequence"


I8 = [p for p in CANDIDATES if p.values[0][0] == "opus" and re.search(r"_i8[cw]?_", p.values[0][1])]


def i8_stages(prob, cfg, inst, mode: str) -> int:
    """The stages the i8 body scores in `mode` (its path counters add up to it)."""
    return opus_i8_stages(cfg, inst, mode, prob.query_start_loc.tolist(), prob.row_ends.tolist())


def launch_counted(backend, prob, cfg, mode: str, out, records=None) -> tuple[int, int]:
    """One launch of an i8 instance into `out` with its path counters: (fast, canonical) stages."""
    stats = torch.zeros(2, dtype=torch.int64, device="cuda")
    backend.launch(cfg, mode, *prob.args(), out, None, records, path_stats=stats)
    fast, canonical = stats.tolist()
    return fast, canonical


def counted_run(prob, pair, mode: str):
    """An i8 instance's launch in `mode` (its schedule built first in Table mode) into a poisoned
    output: (config, instance, output, fast stages, canonical stages)."""
    cfg = config(prob, pair, mode)
    backend, inst = instance_of(pair)
    out = torch.full((prob.rows + 1, cfg.max_seq_len + 3), -7777.0, device="cuda")
    records = None
    if mode == "table":
        records = cfg.schedule_buffers()
        backend.build_schedule(cfg, prob.query_start_loc, prob.row_ends, records)
    return (cfg, inst, out, *launch_counted(backend, prob, cfg, mode, out, records))


def plant_wide(prob):
    """Sequence 0's first page with a key block spread of 12 and its third page with a 0xFF
    block (both fall outside the fast rule); the rest stays narrow."""
    kv_scale = prob.kv_scale.clone()
    pages = prob.block_tables[0].tolist()
    kv_scale[pages[0], :, 2] = (kv_scale[pages[0], :, 0].int() + 12).clamp(max=250).to(torch.uint8)
    kv_scale[pages[2], 3, 1] = 0xFF
    return prob.__class__(**{**prob.__dict__, "kv_scale": kv_scale})


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", I8)
@pytest.mark.parametrize("data", ["narrow", "wide", "mixed"])
def test_i8_paths_taken(data, pair, mode):
    """The i8 body counts the stages (I8_STAGE_KEYS keys) it scored on each path, every stage of
    the work split once: narrow data only fast, default (40-binade) data only canonical, narrow
    data with planted wide keys both; every result within the tolerance."""
    if not torch.cuda.is_available() or registry.get("opus").available() is not None:
        pytest.skip("the opus backend on a GPU")
    over = {} if data == "wide" else NARROW
    prob = build("v4_decode", "cuda", seed=53, **over)
    if data == "mixed":
        prob = plant_wide(prob)
    cfg, inst, out, fast, canonical = counted_run(prob, pair, mode)
    ref = reference(prob, cfg)
    assert compare_to_reference(out, ref) == []
    assert fast + canonical == i8_stages(prob, cfg, inst, mode), (fast, canonical)
    assert_untouched_outside(out, ref, prob.live_rows)
    if data == "narrow":
        assert fast > 0 and canonical == 0, (fast, canonical)
    elif data == "wide":
        assert fast == 0 and canonical > 0, (fast, canonical)
    else:
        assert fast > 0 and canonical >= 1, (fast, canonical)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", [p for p in I8 if "_i8c_" in p.values[0][1]])
@pytest.mark.parametrize("data", ["narrow", "mixed"])
def test_i8c_fast_tiles_carry_the_canonical_bits(data, pair, mode):
    """The canonical i8 body (family i8c: the i8 fast path with docs/numerics.md's head-sum tree)
    takes its fast path on narrow data and gives the bits of a canonical mma.sync instance there,
    and on mixed data (both paths) as well."""
    if not torch.cuda.is_available() or registry.get("opus").available() is not None:
        pytest.skip("the opus backend on a GPU")
    prob = build("v4_decode", "cuda", seed=59, **NARROW)
    if data == "mixed":
        prob = plant_wide(prob)
    cfg, inst, out, fast, canonical = counted_run(prob, pair, mode)
    assert inst.canonical
    assert fast > 0 and (canonical == 0) == (data == "narrow"), (fast, canonical)
    peer = ("opus", "sm90_fp8_r1w4")  # canonical, one row: every geometry's rows
    want = run(prob, config(prob, peer, "free"), "free")
    width = min(out.shape[1], want.shape[1])
    assert_same_bits(out[: prob.rows, :width], want[: prob.rows, :width], f"{pair[1]}/{mode} against {peer[1]}")
    assert compare_to_reference(out, reference(prob, cfg)) == []


def spread_weights(prob, binades: tuple[int, int], seed: int):
    """The problem with weights sign * 2^e * (1 + u), u uniform in [0, 1), e taking the two values
    of `binades` on alternate heads: every row's |w| spans about their difference."""
    gen = torch.Generator().manual_seed(seed)
    rows, heads = prob.weights.shape
    e = torch.tensor(binades, dtype=torch.float64)[torch.arange(heads) % 2].expand(rows, heads)
    sign = torch.randint(0, 2, (rows, heads), generator=gen, dtype=torch.float64) * 2 - 1
    w = sign * torch.exp2(e) * (1 + torch.rand(rows, heads, generator=gen, dtype=torch.float64))
    return prob.__class__(**{**prob.__dict__, "weights": w.to(prob.weights.dtype).to(prob.weights.device)})


# (the two binades of spread_weights, whether the i8 fast path may take them): with query scale
# bytes in [120, 124) a head's w' = w * 2^(qmin - 127) lies 4..7 binades under w, and the rule
# wants every nonzero |w'| within [2^-100, 2^92], their exponents within 104 of each other
# (docs/numerics.md, "Integer tiles"): "wide" spans 99-102 binades, "too_wide" 110-113
WEIGHT_SPREADS = {"high": ((78, 79), True), "low": ((-86, -85), True), "wide": ((-22, 77), True),
                  "too_wide": ((-33, 77), False), "too_high": ((20, 100), False), "too_low": ((-110, 0), False)}


@pytest.mark.gpu
@pytest.mark.parametrize("pair", I8)
@pytest.mark.parametrize("spread", list(WEIGHT_SPREADS))
def test_i8_weight_range(spread, pair):
    """The fast path's weights near either end of the rule's range, and groups spanning up to
    the rule's 104 binades, take the fast path within the tolerance; a group with a weight past
    either end, or spanning more, takes the canonical path."""
    if not torch.cuda.is_available() or registry.get("opus").available() is not None:
        pytest.skip("the opus backend on a GPU")
    binades, fast_ok = WEIGHT_SPREADS[spread]
    prob = spread_weights(build("v4_decode", "cuda", seed=61, scales=(120, 124), block_spread=2), binades, seed=63)
    cfg = config(prob, pair, "free")
    backend, inst = instance_of(pair)
    out = torch.full((prob.rows + 1, cfg.max_seq_len + 3), POISON, device="cuda")
    fast, canonical = launch_counted(backend, prob, cfg, "free", out)
    ref = reference(prob, cfg)
    assert compare_to_reference(out, ref) == []
    assert_untouched_outside(out, ref, prob.live_rows)
    assert fast + canonical == i8_stages(prob, cfg, inst, "free"), (fast, canonical)
    if fast_ok:
        assert fast > 0 and canonical == 0, (fast, canonical)
    else:
        assert fast == 0 and canonical > 0, (fast, canonical)


def plant_scattered(prob, every: int = 7):
    """Every `every`-th page of the cache with key block offsets of 3 (just outside the i8 fast
    rule), the rest narrow: many stages mix both kinds of tiles (a 256-key stage spans 16 pages
    of 16 keys; with seed 59 at grow 64 about a fifth of the stages hold none of those pages)."""
    kv_scale = prob.kv_scale.clone()
    pages = torch.arange(0, kv_scale.shape[0], every, device=kv_scale.device)
    kv_scale[pages, :, 1] = (kv_scale[pages, :, 0].int() + 3).clamp(max=250).to(torch.uint8)
    return prob.__class__(**{**prob.__dict__, "kv_scale": kv_scale})


@pytest.mark.gpu
@pytest.mark.parametrize("pair", [p for p in I8 if "_r1w" in p.values[0][1]])
def test_i8_modes_bitwise_on_mixed_stages(pair):
    """One-row i8 instances on long sequences (split across programs at odd and even tiles) whose
    stages mix fast and canonical keys: a stage holds the sequence's tiles 4j .. 4j + 3 in every
    mode, so every mode gives the same bits (docs/numerics.md, "Integer tiles")."""
    if not torch.cuda.is_available() or registry.get("opus").available() is not None:
        pytest.skip("the opus backend on a GPU")
    prob = plant_scattered(build("v4_decode", "cuda", seed=59, grow=64, **NARROW))
    outs = {}
    for mode in MODES:
        cfg = config(prob, pair, mode)
        outs[mode] = run(prob, cfg, mode)
        assert compare_to_reference(outs[mode], reference(prob, cfg)) == [], mode
    for mode in MODES[1:]:
        assert torch.equal(outs[mode], outs[MODES[0]]), f"{mode} differs from {MODES[0]}"
    # the data does mix the paths (else the comparison proves nothing)
    cfg = config(prob, pair, "free")
    backend, inst = instance_of(pair)
    out = torch.full_like(outs["free"], POISON)
    fast, canonical = launch_counted(backend, prob, cfg, "free", out)
    assert fast > 0 and canonical > 0, (fast, canonical)
    assert fast + canonical == i8_stages(prob, cfg, inst, "free"), (fast, canonical)
    assert torch.equal(out, outs["free"])


def misaligned(t: torch.Tensor, offset: int) -> torch.Tensor:
    """The same values in a buffer `offset` bytes past a 16-byte boundary."""
    flat = torch.zeros(t.numel() + 16, dtype=t.dtype, device=t.device)
    view = flat[offset:offset + t.numel()].view(t.shape)
    view.copy_(t)
    return view


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", I8)
def test_i8_unaligned_scales(pair, mode):
    """The i8 producer copies whole page chunks in bulk when kv_scale is 16-byte aligned, and key
    by key when it is only 4-byte aligned (what opus requires; kv_cache must be 16-byte aligned):
    both give the same bits, within the tolerance."""
    if not torch.cuda.is_available() or registry.get("opus").available() is not None:
        pytest.skip("the opus backend on a GPU")
    prob = plant_wide(build("v4_decode", "cuda", seed=57, **NARROW))
    cfg = config(prob, pair, mode)
    aligned = run(prob, cfg, mode)
    assert compare_to_reference(aligned, reference(prob, cfg)) == []
    for offset in (4, 8):
        shifted = prob.__class__(**{**prob.__dict__, "kv_scale": misaligned(prob.kv_scale, offset)})
        assert shifted.kv_scale.data_ptr() % 16 == offset
        out = run(shifted, cfg, mode)
        same = out.view(torch.int32) == aligned.view(torch.int32)  # bit for bit, NaN cells too
        assert bool(same.all()), f"offset {offset}: {int((~same).sum())} cells differ"
