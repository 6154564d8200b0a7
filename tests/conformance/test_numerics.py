"""Every backend x instance x mode against the float64 reference (docs/numerics.md)."""

import pytest
import torch

import mqa_logits_mxfp4 as mx
from mqa_logits_mxfp4.dispatch import registry
from mqa_logits_mxfp4.problems import EDGE_SOURCES, make_edge_problem
from mqa_logits_mxfp4.reference import (Reference, compare_to_reference, gather_rows,
                                        mqa_logits_reference)

from .common import (DEVICES, GEOMETRIES, MODES, POISON, assert_untouched_outside, build,
                     candidates, config, instance_of, need_device, reference, run, run_and_check)

CANDIDATES = candidates()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", CANDIDATES)
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
def test_random_ragged(geometry, pair, mode, device):
    need_device(device)
    run_and_check(build(geometry, device, seed=hash((geometry, mode)) % 1000), pair, mode)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", CANDIDATES)
def test_nan_inf_cells(pair, mode, device):
    """E8M0 0xFF in q and k scales (with and without a zero q block), NaN/Inf weights, overflow."""
    need_device(device)
    prob = make_edge_problem(heads=32, page_size=16, generator=torch.Generator().manual_seed(7), device=device)
    cfg = config(prob, pair, mode, extra_len=0)
    out = run(prob, cfg, mode)
    ref = reference(prob, cfg)
    assert_untouched_outside(out, ref, prob.live_rows)
    if pair[1].startswith("scaled") and device == "cpu":
        # The interpreter's dot_scaled folds scales into the operands, so elementwise products
        # overflow before the block sum: Inf - Inf is NaN where the canonical order gives +-Inf
        # (docs/numerics.md). Exact sets for every other source; non-finite cells for overflow.
        ovf = 2 * EDGE_SOURCES.index("overflow")
        keep = [r for r in range(prob.live_rows) if r not in (ovf, ovf + 1)]
        sub = Reference(*(getattr(ref, f)[keep] for f in ("ref", "bound", "fp32", "window")))
        assert compare_to_reference(out[keep], sub) == []
        win = ref.window[ovf:ovf + 2].to(out.device)
        got = ~torch.isfinite(out[ovf:ovf + 2, :win.shape[1]][win])
        want = ~torch.isfinite(ref.fp32[ovf:ovf + 2].to(out.device)[win])
        assert torch.equal(got, want)
    else:
        assert compare_to_reference(out, ref) == []
    live = out[:prob.live_rows, :ref.window.shape[1]]
    for b, source in enumerate(EDGE_SOURCES):  # each planted source shows up where it should
        rows = live[2 * b:2 * b + 2][ref.window[2 * b:2 * b + 2].to(live.device)]
        assert not torch.isfinite(rows).all(), f"{source}: no NaN/Inf cell in its sequence"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pair", CANDIDATES)
def test_modes_bitwise_identical_and_deterministic(pair, device):
    need_device(device)
    prob = build("v4_decode", device, seed=3)
    outs = {}
    for mode in MODES:
        cfg = config(prob, pair, mode)
        outs[mode] = run(prob, cfg, mode)
    for mode in MODES[1:]:
        assert torch.equal(outs[mode], outs[MODES[0]]), f"{mode} differs from {MODES[0]}"
    cfg = config(prob, pair, "table")
    for _ in range(10):
        assert torch.equal(run(prob, cfg, "table"), outs["table"])


@pytest.mark.parametrize("device", DEVICES)
def test_instances_bitwise_identical(device):
    """Every canonical instance follows the canonical order, so all agree bit for bit (the
    non-canonical ones use dot_scaled, whose block sum is the MMA's: docs/numerics.md)."""
    need_device(device)
    prob = build("v41_full", device, seed=5)
    outs = {}
    for pair in CANDIDATES:
        pair = pair.values[0]
        try:
            cfg = config(prob, pair, "free")
        except pytest.skip.Exception:
            continue
        if not instance_of(pair)[1].canonical:
            continue
        outs[pair] = run(prob, cfg, "free")
    assert len(outs) >= 2, f"need two instances to compare; got {list(outs)}"
    first = next(iter(outs.values()))
    for pair, out in outs.items():
        assert torch.equal(out, first), f"{pair} differs from {next(iter(outs))}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("geometry", ["v4_decode", "v41_full", "v41_candidate", "h128"])  # h16_prefill: 40 s on the CPU
def test_batch_invariant_instances_bitwise_identical(geometry, device):
    """batch_invariant=True admits only the canonical instances (docs/numerics.md, "Canonical and
    non-canonical instances"): each one that may serve, of every available backend, gives the
    same bits in each mode (an instance in two, in turn) and under wider bounds, and so does the
    dispatcher's own pick."""
    need_device(device)
    prob = build(geometry, device, seed=23)
    # two table entries more keys (the block table has 3 spare), more rows and sequences
    wider = dict(extra_len=2 * prob.page_size * prob.pages_per_block, max_rows=prob.rows + 5,
                 max_seqs=prob.num_seqs + 3)
    width = prob.max_seq_len + 13  # compared up to the narrowest config's max_seq_len (every window is within)
    outs, excluded = {}, []
    for n, param in enumerate(CANDIDATES):
        pair = param.values[0]
        try:
            config(prob, pair, "free", batch_invariant=True)
        except pytest.skip.Exception as e:  # the instance's reasons: supports() decides, not this test
            excluded += [pair] if "batch_invariant" in str(e) else []
            continue
        # two modes an instance, each mode in turn (test_modes_bitwise_identical_and_deterministic
        # holds an instance's modes to each other), among those it runs (a union body: Free only)
        modes = [m for m in MODES if m in instance_of(pair)[1].modes]
        mode = modes[n % len(modes)]
        outs[f"{pair[1]}/{mode}"] = run(prob, config(prob, pair, mode, batch_invariant=True), mode)
        mode = modes[(n + 1) % len(modes)]
        outs[f"{pair[1]}/{mode}/wider"] = run(prob, config(prob, pair, mode, batch_invariant=True, **wider), mode)
    assert set(excluded) == {p.values[0] for p in CANDIDATES if not instance_of(p.values[0])[1].canonical}
    cfg = mx.mqa_logits_mxfp4_config(device, prob.heads, prob.head_dim, prob.page_size, max_rows=prob.rows,
                                     max_seqs=prob.num_seqs, max_qlen=max(prob.max_qlen, 1),
                                     max_seq_len=width, pages_per_block=prob.pages_per_block,
                                     gather=prob.gather, batch_invariant=True)
    assert cfg.canonical and cfg.batch_invariant
    picked = outs[f"dispatcher {cfg.instance}/{cfg.mode}"] = run(prob, cfg, cfg.mode)
    assert len({name.split("/")[0] for name in outs}) >= 3, f"need two instances to compare; got {list(outs)}"
    first_name, first = next(iter(outs.items()))
    for name, out in outs.items():
        assert torch.equal(out[:, :width], first[:, :width]), f"{name} differs from {first_name}"
    assert compare_to_reference(picked, reference(prob, cfg)) == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", CANDIDATES)
@pytest.mark.parametrize("geometry", ["v4_decode", "v41_candidate"])
def test_bands_equal_the_whole(geometry, pair, mode, device):
    """Scoring in bands of rows (sliced row tensors, clamped query_start_loc) gives the same bits."""
    need_device(device)
    prob = build(geometry, device, seed=11)
    cfg = config(prob, pair, mode)
    whole = run(prob, cfg, mode)
    banded = torch.full_like(whole, POISON)
    live = prob.live_rows
    for start in range(0, live, 2):
        count = min(2, live - start)
        sl = slice(start, start + count)
        band = prob.__class__(**{**prob.__dict__,
                                 "q": prob.q[sl], "q_scale": prob.q_scale[sl], "weights": prob.weights[sl],
                                 "row_ends": prob.row_ends[sl],
                                 "block_tables": prob.block_tables[sl] if prob.gather else prob.block_tables,
                                 "query_start_loc": (prob.query_start_loc.clamp(start, start + count) - start)})
        bcfg = config(band, pair, mode)
        assert bcfg.max_rows == count
        run(band, bcfg, mode, out=banded[sl])
    assert torch.equal(banded[:live], whole[:live])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", CANDIDATES)
def test_flat_out_with_offsets(pair, mode, device):
    need_device(device)
    prob = build("v41_full", device, seed=13)
    cfg = config(prob, pair, mode, extra_len=0)
    # rows laid out back to back with gaps, in reverse order: offsets need not be monotone
    widths = [cfg.max_seq_len + 5] * prob.rows
    offs = torch.tensor([sum(widths[r + 1:]) for r in range(prob.rows)], dtype=torch.int64)
    flat = torch.full((sum(widths) + 7,), POISON, device=device)
    run(prob, cfg, mode, out=flat, out_offsets=offs.to(device))
    ref = reference(prob, cfg)
    grid = gather_rows(flat, offs.to(device), prob.live_rows, cfg.max_seq_len)
    assert compare_to_reference(grid, ref) == []
    mask = torch.ones_like(flat, dtype=torch.bool)
    for r in range(prob.live_rows):
        n = int(prob.row_ends[r])
        mask[int(offs[r]):int(offs[r]) + n] = False
    assert torch.equal(flat[mask], torch.full_like(flat[mask], POISON))


# Scale regimes for the opus fold family's tile rule (docs/numerics.md, "Folded scales"): byte
# ranges [lo, hi) of the query and key scales, each at one of the rule's limits.
FOLD_REGIMES = {
    "typical": ((116, 140), (116, 140)),
    "key-max-242-pair-369": ((104, 128), (219, 243)),    # largest key byte and pair sum allowed
    "key-max-51": ((110, 134), (27, 52)),                # smallest largest-key byte allowed
    "pair-130": ((8, 33), (122, 147)),                   # smallest pair sum allowed
}


def plant_fold_limits(prob, lo: int, hi: int):
    """Keys of sequence 0's first page with a block spread of exactly 24 (folds), keys of its
    fifth page (another 64-key tile at page sizes <= 16) with 25 (that tile falls back), and
    one head of the last live row with 25 (its row group falls back)."""
    kv_scale, q_scale = prob.kv_scale.clone(), prob.q_scale.clone()
    pages = prob.block_tables[0].tolist()
    kv_scale[pages[0], :, 0], kv_scale[pages[0], :, 1] = hi - 1 - 24, hi - 1
    if len(pages) > 4 and pages[4] >= 0:
        kv_scale[pages[4], :, 0], kv_scale[pages[4], :, 2] = hi - 1 - 25, hi - 1
    q_scale[prob.live_rows - 1, 5, 0], q_scale[prob.live_rows - 1, 5, 3] = lo, lo + 25
    return prob.__class__(**{**prob.__dict__, "kv_scale": kv_scale, "q_scale": q_scale})


@pytest.mark.gpu
@pytest.mark.parametrize("regime", list(FOLD_REGIMES))
@pytest.mark.parametrize("geometry", ["v4_decode", "v41_full", "h16_prefill"])
def test_folded_tiles_bitwise_canonical(geometry, regime):
    """Scales narrow enough for the opus fold family's folded tiles, at each limit of its tile
    rule, with planted keys and heads on both sides of the spread limit: every opus instance
    and the Triton fp8 path give the same bits in every mode, and they match the reference."""
    if not torch.cuda.is_available() or registry.get("opus").available() is not None:
        pytest.skip("the opus backend on a GPU runs the fold family")
    (qlo, qhi), (klo, khi) = FOLD_REGIMES[regime]
    prob = build(geometry, "cuda", seed=29, scales=(klo, khi))
    gen = torch.Generator().manual_seed(31)
    q_scale = torch.randint(qlo, qhi, prob.q_scale.shape, generator=gen, dtype=torch.int64).to(torch.uint8)
    prob = plant_fold_limits(prob.__class__(**{**prob.__dict__, "q_scale": q_scale.to("cuda")}), qlo, khi)
    pairs = [("opus", i.name) for i in registry.get("opus").instances() if i.canonical] + [("triton", "fp8_r1n64w4s2")]
    outs = {}
    for pair in pairs:
        for mode in MODES:
            try:
                cfg = config(prob, pair, mode)
            except pytest.skip.Exception:
                continue
            outs[f"{pair[1]}/{mode}"] = run(prob, cfg, mode)
    assert any(name.startswith("sm90_fold") for name in outs), f"no fold instance ran: {list(outs)}"
    first_name, first = next(iter(outs.items()))
    for name, out in outs.items():
        assert torch.equal(out, first), f"{name} differs from {first_name}"
    ref = reference(prob, config(prob, pairs[-1], "free"))
    assert compare_to_reference(first, ref) == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", CANDIDATES)
def test_one_config_across_alignments_and_strides(pair, mode, device):
    """Calls of one config whose tensors change alignment and strides between calls (an out 4
    bytes past a 16-byte boundary with an odd row stride, weights with an odd row stride) give
    the same bits as aligned, contiguous calls before and after them: launch caches (the Triton
    backend's direct launch) must not reuse a kernel specialized on the first call's facts."""
    need_device(device)
    prob = build("v4_decode", device, seed=19)
    cfg = config(prob, pair, mode)
    base = run(prob, cfg, mode)
    width = cfg.max_seq_len + 3
    store = torch.full((1 + (prob.rows + 1) * width,), POISON, device=device)
    odd_out = store[1:].view(prob.rows + 1, width)  # data_ptr % 16 == 4, row stride odd
    wide = torch.zeros(prob.weights.shape[0], prob.heads + 1, dtype=prob.weights.dtype, device=device)
    wide[:, :prob.heads] = prob.weights
    odd = prob.__class__(**{**prob.__dict__, "weights": wide[:, :prob.heads]})
    run(odd, cfg, mode, out=odd_out)
    assert odd_out.data_ptr() % 16 != 0 and odd.weights.stride(0) % 16 != 0
    assert torch.equal(odd_out, base)
    assert torch.equal(run(prob, cfg, mode), base)


@pytest.mark.parametrize("device", DEVICES)
def test_allocated_out_is_minus_inf_outside_windows(device):
    need_device(device)
    prob = build("h16_prefill", device, seed=17)
    out = mx.mqa_logits_mxfp4(*prob.args())  # cfg=None: bounds from shapes
    ref = mqa_logits_reference(*prob.args(), max_seq_len=out.shape[1])
    assert out.shape == (prob.rows, out.shape[1]) and out.shape[1] >= prob.max_seq_len
    assert compare_to_reference(out, ref) == []
    inside = torch.zeros_like(out, dtype=torch.bool)
    inside[:prob.live_rows] = ref.window.to(out.device)
    assert bool((out[~inside] == float("-inf")).all())
