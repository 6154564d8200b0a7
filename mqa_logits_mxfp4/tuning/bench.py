"""The benchmark (docs/tuning.md, "Benchmarking"): per shape and candidate (or the
best of each backend), after the same reference check as the tuner: microseconds, GB/s, TFLOP/s
and the fraction of the roofline floor, from ceilings measured in the same run, plus the torch
path. Rows go to a CSV; report.py draws the PNG.
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

import torch

from ..core.outputs import OUT_NAMES
from . import peer
from .suites import Shape
from .tuner import ShapeResult, Tuner, candidate_runner, measure_each, provenance

COLUMNS = ("suite", "shape", "kind", "data", "out_dtype", "batch_invariant", "backend", "instance", "mode", "status", "us", "launch_us",
           "schedule_us", "layers", "GBps", "TFLOPs", "floor_us", "fraction", "vs_peer", "bytes", "flops",
           "copy_GBps", "fp8_TFLOPs", "bf16_TFLOPs", "device_name", "torch_version", "triton_version",
           "tool_version", "date", "note")
PEERS = ("deepgemm",)


def problem_work(problem, out_bytes: int = 4) -> dict:
    """Useful FLOPs and the fewest bytes of one call (docs/tuning.md, "Benchmarking").

    Bytes: each sequence's keys once (page-aligned; in gather mode the distinct blocks its rows
    name), q + q_scale + weights once, and `out_bytes` (4, or 2 for a narrow out) a written cell.
    """
    p = problem
    live = p.live_rows
    ends = p.row_ends[:live].long()
    cells = int(ends.sum())
    key_bytes = p.head_dim // 2 + p.head_dim // 32
    qsl = p.query_start_loc.tolist()
    keys = 0
    if p.gather:
        span = p.page_size * p.pages_per_block
        for b in range(p.num_seqs):
            r0, r1 = qsl[b], qsl[b + 1]
            if r1 <= r0:
                continue
            need = (ends[r0:r1] + span - 1) // span  # table entries each row reads
            cols = torch.arange(p.block_tables.shape[1], device=need.device)
            named = p.block_tables[r0:r1][cols[None] < need[:, None]]
            keys += int(named.unique().numel()) * span
    else:
        for b in range(p.num_seqs):
            r0, r1 = qsl[b], qsl[b + 1]
            if r1 > r0:
                keys += math.ceil(int(ends[r0:r1].max()) / p.page_size) * p.page_size
    nbytes = (keys * key_bytes + live * p.heads * (key_bytes + p.weights.element_size()) + cells * out_bytes)
    return dict(bytes=nbytes, flops=2 * p.heads * p.head_dim * cells, cells=cells)


def floor_us(work: dict, ceil: dict) -> float:
    """max(bytes / copy bandwidth, FLOPs / FP8 peak (BF16 where there is no FP8 matmul))."""
    peak = ceil.get("fp8_TFLOPs") or ceil["bf16_TFLOPs"]
    return max(work["bytes"] / ceil["copy_GBps"] / 1e3, work["flops"] / peak / 1e6)


def _rate_columns(us: float | None, work: dict, floor: float) -> dict:
    if us is None or not us > 0:
        return dict(GBps="", TFLOPs="", fraction="")
    return dict(GBps=f"{work['bytes'] / us / 1e3:.4g}", TFLOPs=f"{work['flops'] / us / 1e6:.4g}",
                fraction=f"{floor / us:.4g}")


def shape_rows(shape: Shape, result: ShapeResult, work: dict, ceil: dict, best_only: bool) -> list[dict]:
    """Bench rows of one shape: the timed candidates (re-timed values where there are), the
    rejected ones (status says why) and the torch path."""
    floor = floor_us(work, ceil)
    base = dict(suite=shape.suite, shape=shape.name, kind=shape.kind, layers=shape.layers, floor_us=f"{floor:.3f}",
                bytes=work["bytes"], flops=work["flops"])
    final = {t.candidate.label: t for t in result.final}
    timed = [final.get(t.candidate.label, t) for t in result.timed]
    if best_only:
        by_backend = {}
        for t in sorted((t for t in timed if not t.pruned), key=lambda t: t.us):
            by_backend.setdefault(t.candidate.backend.name, t)
        timed = list(by_backend.values())
    rows = []
    for t in timed:
        c = t.candidate
        rows.append(dict(base, backend=c.backend.name, instance=c.instance.name, mode=c.mode,
                         status="pruned" if t.pruned else "ok", us=f"{t.us:.3f}", launch_us=f"{t.launch_us:.3f}",
                         schedule_us=f"{t.schedule_us:.3f}" if c.mode == "table" else "",
                         **_rate_columns(t.us, work, floor),
                         note="probe only: slower than the prune factor x the best" if t.pruned else ""))
    if not best_only:
        for label, reasons in result.rejected:
            backend, instance, mode = label.split("/")
            rows.append(dict(base, backend=backend, instance=instance, mode=mode, status="rejected",
                             note=" | ".join(reasons)[:500]))
    if result.ref_us is not None:
        rows.append(dict(base, backend="torch", instance="torch_path", mode="", status="ok",
                         us=f"{result.ref_us:.3f}", launch_us=f"{result.ref_us:.3f}",
                         **_rate_columns(result.ref_us, work, floor),
                         note="dequantize to bf16, batched matmul, relu, weighted head sum"))
    return rows


def peer_rows(shape: Shape, result, problem, tuner: Tuner, work: dict, ceil: dict, rounds: int = 3) -> list[dict]:
    """DeepGEMM (tuning/peer.py) on the problem our candidates just ran, timed in rounds that
    alternate with our fastest candidate (drift hits both alike): a row for the peer, and the
    ratio `vs_peer` = our time / its time for that candidate. Empty when there is no best."""
    floor = floor_us(work, ceil)
    base = dict(suite=shape.suite, shape=shape.name, kind=shape.kind, layers=shape.layers, floor_us=f"{floor:.3f}",
                bytes=work.get("bytes", ""), flops=work.get("flops", ""), backend="deepgemm",
                instance=peer.kernel_name(problem), mode="")
    why = peer.available() or peer.unsupported(problem)
    if why is not None:
        return [dict(base, status="skipped", note=why)]
    best = result.best
    try:
        call = peer.call_for(problem, shape.max_seq_len)
        call()
        out = torch.empty((problem.rows, shape.max_seq_len), dtype=tuner.out_dtype, device=tuner.device)
        ours, build = candidate_runner(best.candidate, result.key, problem, out)
        if build:
            build()
        theirs_us, ours_us = [], []
        for _ in range(rounds):
            theirs_us += tuner.timer(call, "deepgemm", max(1, tuner.iters // rounds), 1)
            ours_us += tuner.timer(ours, best.candidate.label, max(1, tuner.iters // rounds), 1)
        meta_us = (statistics.median(tuner.timer(call.metadata, "deepgemm:metadata", 5, 1))
                   if call.metadata is not None else None)  # the contiguous kernel has no schedule
    except Exception as e:  # the peer refused this problem (e.g. next_n > 2): the row says why
        return [dict(base, status="error", note=f"{type(e).__name__}: {e}"[:500])]
    t, o = statistics.median(theirs_us), statistics.median(ours_us)
    return [dict(base, status="ok", us=f"{t:.3f}", launch_us=f"{t:.3f}",
                 schedule_us="" if meta_us is None else f"{meta_us:.3f}",
                 **_rate_columns(t, work, floor), vs_peer="1",
                 note=f"interleaved with {best.candidate.label} ({o:.3f} us there): ours / peer {o / t:.3f}"
                      + ("" if meta_us is None else "; schedule_us: its metadata kernel, once a step"))]


def bench(shapes: list[Shape], tuner: Tuner, ceil: dict, *, best_only: bool = False, progress=None,
          peer: str | None = None) -> list[dict]:
    """Bench rows for `shapes` (CSV columns: COLUMNS); `ceil` from timing.ceilings on the same device.
    `peer` ("deepgemm"): also time that op on each problem, interleaved with our fastest
    candidate, and give every row its time over the peer's (`vs_peer`)."""
    prov = provenance(tuner.device)
    ceil_cols = {k: (f"{ceil[k]:.4g}" if k in ceil else "") for k in ("copy_GBps", "fp8_TFLOPs", "bf16_TFLOPs")}
    rows, works, problems = [], {}, {}

    def on_problem(s, p):
        works[s.name] = problem_work(p, tuner.out_dtype.itemsize)
        if peer:
            problems[s.name] = p

    for shape, result, error in measure_each(tuner, shapes, progress, on_problem):
        if error is not None:  # e.g. out of memory: the row says so and the bench goes on
            rows.append(dict(suite=shape.suite, shape=shape.name, kind=shape.kind, status="error",
                             note=f"{type(error).__name__}: {error}"[:500], **ceil_cols, **prov))
            continue
        work = works.get(shape.name, {})
        here = shape_rows(shape, result, work, ceil, best_only)
        problem = problems.pop(shape.name, None)
        if peer and problem is not None and result.best is not None:
            extra = peer_rows(shape, result, problem, tuner, work, ceil)
            peer_us = float(extra[0]["us"]) if extra[0]["status"] == "ok" else None
            if peer_us:
                for r in here:
                    if r.get("us"):
                        r["vs_peer"] = f"{float(r['us']) / peer_us:.4g}"
            here += extra
        del problem
        rows += [dict(r, data=tuner.data, out_dtype=OUT_NAMES[tuner.out_dtype], batch_invariant=int(tuner.batch_invariant),
                      **ceil_cols, **prov) for r in here]
    return rows


def write_csv(path, rows: list[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS), extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
