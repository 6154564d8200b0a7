"""The union bodies (opus families i8u and i8uc, the canonical one; docs/opus-backend.md, "The
union body"): gather-mode rows
of one sequence scored on the union of their tables, each row's logits stored at its own list
positions. The conformance suite runs these instances on its gather geometry (two rows a
sequence at most); here the rows share a pool as candidate lists do, up to eight a sequence,
on data that takes the fast path and data that forces the canonical one, with cut windows and
with entries a row lists twice; the canonical body against a canonical one-row body, bit for bit."""

from __future__ import annotations

import re

import pytest
import torch

from mqa_logits_mxfp4.backends.opus.instances import UNION_MAX_ENTRIES
from mqa_logits_mxfp4.dispatch import registry
from mqa_logits_mxfp4.problems import make_problem
from mqa_logits_mxfp4.reference import compare_to_reference

from .common import (assert_same_bits, assert_untouched_outside, candidates, config, instance_of, reference, run,
                     window_starts)

UNION = [p for p in candidates() if p.values[0][0] == "opus" and re.search(r"_i8uc?_", p.values[0][1])]
# (context, rows) a sequence: a full MTP 8 group, a part group, one row, an empty sequence, and a
# sequence whose rows see short windows
SEQS = [(3000, 8), (1200, 5), (700, 1), (0, 0), (2500, 3)]
DATA = {"narrow": dict(scale_exponents=(100, 160), block_spread=2), "wide": dict(scale_exponents=(107, 147))}


def union_problem(data: str, seed: int):
    return make_problem(heads=32, page_size=8, gather=True, seqs=SEQS, pad_rows=2, table_pad=3,
                        generator=torch.Generator().manual_seed(seed), device="cuda", **DATA[data])


def mixed_union_problem(seed: int):
    """Narrow data with a block scale 12 binades off on every seventh of row 0's pages: the
    stages holding those keys take the canonical path, the others the fast one."""
    prob = union_problem("narrow", seed)
    kv_scale = prob.kv_scale.clone()
    pages = prob.block_tables[0, :360:7].long()
    kv_scale[pages, :, 2] = (kv_scale[pages, :, 0].int() + 12).clamp(max=250).to(torch.uint8)
    prob.kv_scale = kv_scale
    return prob


def need_gpu() -> None:
    if not torch.cuda.is_available() or registry.get("opus").available() is not None:
        pytest.skip("the opus backend on a GPU")


def check(prob, cfg, row_starts=None):
    out = run(prob, cfg, "free", row_starts=row_starts)
    ref = reference(prob, cfg, row_starts=row_starts)
    assert compare_to_reference(out, ref) == []
    assert_untouched_outside(out, ref, prob.live_rows)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("pair", UNION)
@pytest.mark.parametrize("data", ["narrow", "wide"])
def test_union_of_rows_sharing_a_pool(pair, data):
    """Rows drawing their lists from one pool (make_problem's gather tables: each row a random
    80% of a pool 1.25x its list): within the tolerance, nothing written outside the windows;
    then the same with cut windows (row_starts)."""
    need_gpu()
    prob = union_problem(data, seed=71)
    cfg = config(prob, pair, "free", max_qlen=8)
    check(prob, cfg)
    check(prob, cfg, row_starts=window_starts(prob, seed=72))


@pytest.mark.gpu
@pytest.mark.parametrize("pair", UNION)
def test_union_with_repeated_and_foreign_entries(pair):
    """A row that lists one entry twice (the second listing gets a union entry of its own), a
    row whose list comes from another sequence's pool (the union holds both pools), and a row
    listing its set in another order: every listed key is stored at each of its places."""
    need_gpu()
    prob = union_problem("narrow", seed=81)
    table = prob.block_tables.clone()
    table[0, 7] = table[0, 2]            # row 0 lists entry 2's block again at 7
    table[1, 40:60] = table[1, 0:20]     # row 1 repeats a run of its own
    table[2] = table[9]                  # row 2 draws from the second sequence's pool
    table[8] = table[8].flip(0)          # row 8 (the second sequence's first) in reverse order
    prob.block_tables = table
    cfg = config(prob, pair, "free", max_qlen=8)
    out = check(prob, cfg)
    assert torch.equal(out[0, 56:64], out[0, 16:24]) and torch.equal(out[1, 320:480], out[1, 0:160])


@pytest.mark.gpu
@pytest.mark.parametrize("pair", UNION)
def test_union_repeats_bit_for_bit_on_mixed_paths(pair):
    """Stages of both paths (narrow data, with a block scale 12 binades off on every seventh of
    row 0's pages: those keys fall outside the fast rule): within the tolerance, and a repeated
    call gives the same bits (the union's order, and so each stage's vote, is the same at every
    call: docs/contract.md, "Determinism")."""
    need_gpu()
    prob = mixed_union_problem(seed=91)
    cfg = config(prob, pair, "free", max_qlen=8)
    first = check(prob, cfg)
    again = run(prob, cfg, "free")
    assert torch.equal(first.view(torch.int32), again.view(torch.int32))


@pytest.mark.gpu
@pytest.mark.parametrize("pair", [p for p in UNION if "_i8uc_" in p.values[0][1]])
@pytest.mark.parametrize("data", ["narrow", "mixed"])
def test_canonical_union_gives_the_canonical_bits(pair, data):
    """The canonical union body (i8uc: the union's tiles, i8c's fast path) gives every cell the
    bits a canonical one-row body gives it, NaN cells included, on stages of either path: a
    canonical cell's value does not depend on which other keys shared its tile."""
    need_gpu()
    assert instance_of(pair)[1].canonical
    prob = union_problem("narrow", seed=101) if data == "narrow" else mixed_union_problem(seed=101)
    out = check(prob, config(prob, pair, "free", max_qlen=8))
    peer = ("opus", "sm90_fp8_r1w4")  # canonical, one row
    want = run(prob, config(prob, peer, "free", max_qlen=8), "free")
    width = min(out.shape[1], want.shape[1])
    assert_same_bits(out[: prob.rows, :width], want[: prob.rows, :width], f"{pair[1]} against {peer[1]}")


# A prefill's rows (more than a union holds: max_qlen x 625 blocks > 16384 entries), so the
# pre-pass cuts each sequence into runs of whole groups (args.h's union_geometry: 24 or 26 rows),
# an empty sequence between, and a one-row sequence after it.
PREFILL_SEQS = [(5000, 70), (900, 30), (0, 0), (3000, 1)]


def prefill_union_problem(seed: int):
    return make_problem(heads=32, page_size=8, gather=True, seqs=PREFILL_SEQS, pad_rows=2, table_pad=3,
                        generator=torch.Generator().manual_seed(seed), device="cuda", **DATA["narrow"])


@pytest.mark.gpu
@pytest.mark.parametrize("pair", UNION)
def test_union_of_a_prefill_in_runs_of_groups(pair):
    """A prefill's rows scored on unions of runs of whole groups (each run its own union, the
    body's sequences the runs): within the tolerance, nothing written outside the windows, with
    and without cut windows; the canonical body bit for bit a canonical one-row body's."""
    need_gpu()
    prob = prefill_union_problem(seed=111)
    _, inst = instance_of(pair)
    try:
        cfg = config(prob, pair, "free")
    except pytest.skip.Exception as e:  # a union body must take it: not a skip
        pytest.fail(f"{pair[1]} refused a prefill it should take in runs: {e}")
    assert cfg.key.max_qlen * cfg.key.block_table_width > UNION_MAX_ENTRIES, "one union a sequence would do"
    out = check(prob, cfg)
    check(prob, cfg, row_starts=window_starts(prob, seed=112))
    if inst.canonical:
        peer = ("opus", "sm90_fp8_r1w4")
        want = run(prob, config(prob, peer, "free"), "free")
        width = min(out.shape[1], want.shape[1])
        assert_same_bits(out[: prob.rows, :width], want[: prob.rows, :width], f"{pair[1]} against {peer[1]}")
