"""The fast paths of the gfx950 `mxsc` and gfx942 `fp8fold` families, modelled on the CPU
(docs/numerics.md, "Scaled MFMA tiles").

Nothing here ran on AMD hardware: this is the part of the tolerance claim we can execute. What the
hardware documentation states for v_mfma_scale_f32_32x32x64_f8f6f4 -- D = (A x 2^(sa - 127)) .
(B x 2^(sb - 127)) + C over E2M1 operands, one E8M0 scale a 32-element block, accumulated in fp32,
the order of the additions inside one instruction not specified -- is modelled as each order of
fp32 additions of the four exact scaled block terms that chained MFMAs can use. `fp8fold` adds
the same terms scaled by one power of two (the folded operands) and multiplies the sum back
exactly, so the same orders model it. Every order
must meet the tolerance against the float64 reference on the conformance data, on the cells the
family's rule (the kernel's constants, read from its header) sends to the fast path; the other
cells take the canonical steps, whose bits the reference's float32 evaluation gives.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from mqa_logits_mxfp4.formats import BLOCK, e2m1_decode, unpack_e2m1
from mqa_logits_mxfp4.problems import DATA_KINDS, make_problem
from mqa_logits_mxfp4.reference import (_head_tree_fp32, _relu, compare_to_reference, key_slots,
                                        mqa_logits_reference, row_sequences)

CSRC = Path(__file__).resolve().parents[1] / "mqa_logits_mxfp4/backends/opus/csrc"
HEADER = CSRC / "kernel_gfx9.cuh"  # the full paths' range, shared by mxsc and fp8fold


def rule_constants(family: str = "mxsc") -> tuple[int, int, float]:
    """(smallest scale byte, largest, weight bound) as the kernel header defines them; for
    fp8fold the bounds of a vector's largest byte."""
    text = HEADER.read_text()
    lo, hi = (int(re.search(rf"\b{n} = (\d+)", text).group(1)) for n in ("kFullScaleLo", "kFullScaleHi"))
    w = float(re.search(r"\bkFullWeightHi = ([0-9.]+)f", text).group(1))
    return lo, hi, w


def fold_spread() -> int:
    return int(re.search(r"\bkFoldSpread = (\d+);", (CSRC / "kernel_gfx942.cuh").read_text()).group(1))


def admits(e: torch.Tensor, family: str) -> torch.Tensor:
    """The family's rule on scale-byte vectors [..., blocks] -> bool [...]."""
    lo, hi, _ = rule_constants(family)
    if family == "mxsc":
        return ((e >= lo) & (e <= hi)).all(-1)
    top = e.max(-1).values
    return (top >= lo) & (top <= hi) & ((top.unsqueeze(-1) - e) <= fold_spread()).all(-1)


# fp32 additions of the four exact terms t0..t3 (blocks 0-1 in the first MFMA, 2-3 in the second,
# whose accumulator input is the first's result)
ORDERS = {
    "one rounding": lambda t: t.sum(0).float(),
    "per instruction": lambda t: (t[0] + t[1]).float() + (t[2] + t[3]).float(),
    "left to right": lambda t: ((t[0].float() + t[1].float()) + t[2].float()) + t[3].float(),
    "right to left in each": lambda t: (t[1].float() + t[0].float()) + (t[3].float() + t[2].float()),
}


def model(prob, order, family: str = "mxsc") -> tuple[torch.Tensor, torch.Tensor]:
    """(logits float32 [rows, max_seq_len] of the fast path under `order`, the cells its rule admits)."""
    _, _, w_hi = rule_constants(family)
    live = int(prob.query_start_loc[-1])
    n = prob.max_seq_len
    keys = torch.arange(n).unsqueeze(0).expand(live, n)
    seq = row_sequences(prob.query_start_loc, live)
    page, token = key_slots(prob.block_tables, seq, keys, prob.page_size, prob.pages_per_block)
    nblk = prob.head_dim // BLOCK
    kv = e2m1_decode(unpack_e2m1(prob.kv_cache[page, token])).double().unflatten(-1, (nblk, BLOCK))  # [R, N, B, 32]
    qv = e2m1_decode(unpack_e2m1(prob.q[:live])).double().unflatten(-1, (nblk, BLOCK))  # [R, H, B, 32]
    ek = prob.kv_scale[page, token].long()  # [R, N, B]
    eq = prob.q_scale[:live].long()  # [R, H, B]
    part = torch.einsum("rhbi,rnbi->brhn", qv, kv)  # exact: at most 13 significant bits
    expo = (eq.permute(2, 0, 1).unsqueeze(-1) + ek.permute(2, 0, 1).unsqueeze(2) - 254).double()  # [B, R, H, N]
    terms = part * torch.exp2(expo)  # exact: the rule keeps every term normal
    w = prob.weights[:live].float()
    s = ORDERS[order](terms)
    out = _head_tree_fp32(_relu(s), w.unsqueeze(-1))
    key_ok = admits(ek, family)  # [R, N]
    head_ok = (admits(eq, family) & (w.abs() < w_hi)).all(-1)  # [R]
    return out, key_ok & head_ok.unsqueeze(-1)


@pytest.mark.parametrize("family", ["mxsc", "fp8fold"])
def test_the_rule_keeps_every_term_normal_and_every_cell_finite(family):
    lo, hi, w_hi = rule_constants(family)
    if family == "fp8fold":  # the smallest byte of an admitted vector
        lo -= fold_spread()
    # smallest nonzero scaled product (E2M1 products are multiples of 1/4) and largest 128-term dot
    smallest, largest = 0.25 * 2.0 ** (2 * lo - 254), 128 * 36 * 2.0 ** (2 * hi - 254)
    assert smallest >= 2.0 ** -126, "a scaled term below the normal range"
    assert largest * w_hi * 128 < 2.0 ** 127, "a cell (128 heads) could overflow fp32"
    assert math.log2(largest) < 100  # the accumulator never nears where any format's scaling saturates


@pytest.mark.parametrize("family", ["mxsc", "fp8fold"])
@pytest.mark.parametrize("heads,page", [(64, 64), (32, 8)])
@pytest.mark.parametrize("data", ["realistic", "wide inside the rule"])
@pytest.mark.parametrize("order", sorted(ORDERS))
def test_fast_path_model_meets_the_tolerance(family, heads, page, data, order):
    lo, hi, _ = rule_constants(family)
    wide = dict(scale_exponents=(lo, hi)) if family == "mxsc" else \
        dict(scale_exponents=(lo, hi - fold_spread()), block_spread=fold_spread())
    kind = DATA_KINDS["realistic"] if data == "realistic" else wide
    prob = make_problem(heads=heads, page_size=page, seqs=[(700, 2), (300, 1), (1100, 2)],
                        generator=torch.Generator().manual_seed(heads + page), **kind)
    ref = mqa_logits_reference(*prob.args(), max_seq_len=prob.max_seq_len)
    fast, admitted = model(prob, order, family)
    admitted &= ref.window
    # the data exercises the fast path: (nearly) every window cell is admitted
    assert admitted.sum() >= 0.9 * ref.window.sum(), (int(admitted.sum()), int(ref.window.sum()))
    out = torch.where(admitted, fast, ref.fp32)  # the other cells: the canonical steps
    assert compare_to_reference(out, ref) == []
    # mxsc's wide data does exercise the order: every order but the canonical one (left to right)
    # rounds differently somewhere. (fp8fold's terms differ by at most 2^12 in scale, so nearly
    # every sum of four is exact in any order: no such check there.)
    if family == "mxsc" and data != "realistic" and order != "left to right":
        assert bool((fast != ref.fp32)[admitted].any())


def test_the_flydsl_kernels_use_the_same_rule():
    """The FlyDSL mxsc family states the rule again (its kernels are Python): the same numbers."""
    text = (Path(__file__).resolve().parents[1] / "mqa_logits_mxfp4/backends/flydsl/kernels.py").read_text()
    m = re.search(r"^FULL_LO, FULL_HI, FULL_W_HI = (\d+), (\d+), 2\.0 \*\* (\d+)$", text, re.M)
    assert m is not None
    assert (int(m.group(1)), int(m.group(2)), 2.0 ** int(m.group(3))) == rule_constants()
