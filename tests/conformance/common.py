"""Shared pieces of the conformance suite: devices, candidates, geometries, poisoned runs."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

import mqa_logits_mxfp4 as mx
from mqa_logits_mxfp4.core.modes import MODES
from mqa_logits_mxfp4.core.problem import ProblemKey, device_facts
from mqa_logits_mxfp4.dispatch import registry
from mqa_logits_mxfp4.dispatch.config import make_config
from mqa_logits_mxfp4.problems import make_problem
from mqa_logits_mxfp4.reference import compare_to_reference, mqa_logits_reference

POISON = -7777.0
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
]


def need_device(device: str) -> None:
    if device == "cpu" and not INTERPRETING:
        pytest.skip("CPU kernels run through the Triton interpreter: set TRITON_INTERPRET=1")


def candidates() -> list:
    """(backend name, instance) for every instance of every available backend, as pytest params."""
    params = []
    for name in registry.names():
        backend = registry.get(name)
        if backend.available() is not None:
            continue
        params += [pytest.param((name, inst.name), id=f"{name}-{inst.name}") for inst in backend.instances()]
    return params


def instance_of(pair):
    name, inst_name = pair
    backend = registry.get(name)
    return backend, next(i for i in backend.instances() if i.name == inst_name)


# Geometries: (heads, page_size, pages_per_block, gather, seqs, ratio, weights dtype), sized for the
# interpreter on CPU and multiplied up on the GPU (`grow`).
GEOMETRIES = {
    "v4_decode": dict(heads=64, page_size=16, seqs=[(300, 2), (130, 1), (0, 0), (257, 2)], ratio=4),
    "v41_full": dict(heads=32, page_size=8, pages_per_block=4, seqs=[(200, 3), (90, 1)], ratio=2,
                     weights_dtype=torch.bfloat16),
    "v41_candidate": dict(heads=32, page_size=8, gather=True, seqs=[(130, 2), (60, 1), (75, 2)]),
    "h16_prefill": dict(heads=16, page_size=32, seqs=[(60, 20), (93, 9)]),
    "h128": dict(heads=128, page_size=128, seqs=[(200, 1), (150, 2)]),
}


def build(geometry: str, device: str, seed: int = 0, grow: int | None = None,
          scales: tuple[int, int] = (107, 147), **over):
    """A random problem for a geometry: fresh data, scale bytes drawn from [scales) (by default
    spread over 40 exponents), 2 pad rows."""
    spec = dict(GEOMETRIES[geometry], **over)
    grow = grow if grow is not None else (1 if device == "cpu" else 24)
    spec["seqs"] = [(ctx * grow, rows * (grow // 4 if rows > 4 and grow > 1 else 1))
                    for ctx, rows in spec["seqs"]]
    gen = torch.Generator().manual_seed(seed)
    return make_problem(**spec, scale_exponents=scales, pad_rows=2, table_pad=3,
                        generator=gen, device=device)


def config(prob, pair, mode: str, extra_len: int = 13, **bounds):
    """A config pinned to one instance, its bounds from the problem (`bounds` overrides key
    fields, e.g. max_rows or batch_invariant); skips with the instance's reasons when it cannot
    serve."""
    backend, inst = instance_of(pair)
    device = prob.q.device
    arch, cu = device_facts(device)
    key = ProblemKey(device, arch, cu, prob.heads, prob.head_dim, prob.page_size,
                     prob.pages_per_block, prob.gather, prob.rows, prob.num_seqs,
                     max(prob.max_qlen, 1), prob.max_seq_len + extra_len)
    key = dataclasses.replace(key, **bounds)
    reasons = backend.supports(key) + backend.instance_supports(inst, key)
    if reasons:
        pytest.skip("; ".join(map(str, reasons)))
    if mode not in inst.modes:
        pytest.skip(f"{inst.name} runs in {', '.join(inst.modes)} mode only; not {mode}")
    return make_config(key, backend, inst, "prefill" if mode == "prefill" else "free", "test")


def run(prob, cfg, mode: str, out=None, out_offsets=None, row_starts=None, dtype=torch.float32):
    """One call in `mode` into a poisoned out of `dtype` (returned)."""
    if out is None:
        out = torch.full((prob.rows + 1, cfg.max_seq_len + 3), POISON, dtype=dtype, device=prob.q.device)
    schedule = (mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc, prob.row_ends, row_starts=row_starts)
                if mode == "table" else None)
    res = mx.mqa_logits_mxfp4(*prob.args(), cfg=cfg, schedule=schedule, out=out, out_offsets=out_offsets,
                              row_starts=row_starts)
    assert res is out
    return out


def reference(prob, cfg, row_starts=None):
    """The float64 reference of a problem for a config's window width."""
    return mqa_logits_reference(*prob.args(), max_seq_len=cfg.max_seq_len,
                                pages_per_block=prob.pages_per_block, gather=prob.gather, row_starts=row_starts)


def window_starts(prob, seed: int):
    """Random row_starts for a problem's live rows that keep the caller contract: in [0, row_end],
    non-decreasing along each sequence's rows; among them 0, the row end (an empty window), tile
    boundaries and keys inside a tile. Pad rows get garbage."""
    g = torch.Generator().manual_seed(seed)
    qsl, ends = prob.query_start_loc.tolist(), prob.row_ends.tolist()
    starts = torch.randint(-50, 10**6, (prob.rows,), generator=g, dtype=torch.int32).tolist()
    for b in range(len(qsl) - 1):
        prev = 0
        for r in range(qsl[b], qsl[b + 1]):
            # a sequence's first row starts inside its window, so every problem has cut windows
            pick = 3 if r == qsl[b] else int(torch.randint(0, 5, (1,), generator=g))
            frac = 0.1 + 0.8 * float(torch.rand((), generator=g))
            s = [0, ends[r], int(frac * ends[r]) // 64 * 64, int(frac * ends[r]), int(frac * ends[r])][pick]
            prev = starts[r] = min(max(s, prev), ends[r])
    return torch.tensor(starts, dtype=torch.int32, device=prob.q.device)


def run_and_check(prob, pair, mode: str):
    """One poisoned call of `pair` in `mode`: within the tolerance of the reference, and nothing
    written outside the live windows. Returns out."""
    cfg = config(prob, pair, mode)
    out = run(prob, cfg, mode)
    ref = reference(prob, cfg)
    assert compare_to_reference(out, ref) == []
    assert_untouched_outside(out, ref, prob.live_rows)
    return out


def assert_untouched_outside(out, ref, live_rows: int):
    """Every cell outside live windows still holds the poison, bit for bit."""
    inside = torch.zeros(out.shape, dtype=torch.bool, device=out.device)
    inside[:live_rows, :ref.window.shape[1]] = ref.window.to(out.device)
    outside = out[~inside]
    assert torch.equal(outside, torch.full_like(outside, POISON)), (
        f"{int((outside != POISON).sum())} cells outside windows / past live rows were written")


def assert_same_bits(out, want, what: str) -> None:
    """`out` and `want` hold the same float bits: the same NaN cells, every other cell equal."""
    assert torch.equal(out.isnan(), want.isnan()), f"{what}: NaN cells differ"
    zero = torch.zeros((), device=out.device)
    assert torch.equal(torch.where(out.isnan(), zero, out), torch.where(want.isnan(), zero, want)), f"{what}: values differ"


__all__ = ["MODES", "DEVICES", "POISON", "need_device", "candidates", "instance_of", "build",
           "config", "run", "assert_untouched_outside", "assert_same_bits", "GEOMETRIES", "reference", "run_and_check",
           "window_starts"]
