"""What the V4.1 candidate layers would gain from scoring each sequence's union of blocks once.

A probe, not a kernel (docs/perf-notes.md, nineteenth session). In gather mode each row has its
own list of 8-token blocks, so today every row is scored alone (a one-row kernel). The rows of
one sequence draw most of their blocks from one pool; a kernel that takes the union of the
rows' blocks could score every row against it with the multi-row kernels (r4w12, r8w12) and
store row r's logit of a block at the block's position in row r's own list.

This script measures the pieces of that design with what exists today, on the suite's shapes:
  gather    the shape as the op runs it now (its tuned pick, and r1w16 in each mode)
  union     the same rows as a non-gather problem: sequence b's table is the sorted union of its
            rows' blocks, every row's window the whole union; each multi-row instance timed
  prepass   the union built on the GPU with batched torch ops (sort, first-occurrence mask,
            cumsum, scatter): fixed shapes, no host sync, what a pre-pass kernel would do
  scatter   the dense union logits moved to each row's own positions (torch gather + where):
            the extra traffic a kernel that stores in place would not have
and checks the scattered result against the float64 reference (the tuner's check).
With --kernel it times the union body itself instead (opus i8u and i8uc: pre-pass and in-place stores)
beside the one-row pick (the table's, or r1w16 where the table picks a union body), each checked against
the reference.

Run on a GPU: python3 scripts/union_probe.py [--kernel] [--shapes NAME,...] [--iters N]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch

from mqa_logits_mxfp4.backends.opus.instances import INSTANCES as OPUS_INSTANCES, UNION_FAMILIES
from mqa_logits_mxfp4.problems import Problem
from mqa_logits_mxfp4.tuning import timing
from mqa_logits_mxfp4.tuning.suites import get_suite
from mqa_logits_mxfp4.tuning.tuner import ReferenceCheck, candidate_runner, candidates
from mqa_logits_mxfp4.dispatch.config_cache import mqa_logits_mxfp4_config

DEFAULT_SHAPES = ",".join(f"candidate decode mtp{m} bs{b} keys16K" for m in (4, 8) for b in (8, 64, 256))
INSTANCES = ("sm90_i8_r1w16", "sm90_i8_r2w12", "sm90_i8_r4w12", "sm90_i8_r8w12")
# --kernel: the registry's union instances, fewest rows first
UNION_INSTANCES = tuple(i.name for i in sorted((i for i in OPUS_INSTANCES if i.family in UNION_FAMILIES),
                                               key=lambda i: i.rows))
ONE_ROW_REFERENCE = ("sm90_i8_r1w16", "free")  # where the table picks a union instance


def union_tables(p: Problem):
    """Per sequence: the sorted union of its rows' live blocks, and each row's block -> union index.

    Batched over sequences with fixed shapes (capacity: rows x width a sequence). Assumes every
    sequence has the same number of rows (the suite's candidate shapes do)."""
    qsl = p.query_start_loc
    seqs = qsl.numel() - 1
    rows_per = int(qsl[1] - qsl[0])
    live = int(qsl[-1])
    width = p.block_tables.shape[1]
    span = p.page_size * p.pages_per_block
    blocks = (p.row_ends[:live] + span - 1) // span  # live blocks a row
    col = torch.arange(width, device=p.block_tables.device)
    sentinel = torch.iinfo(torch.int32).max
    ids = torch.where(col[None, :] < blocks[:, None], p.block_tables[:live], sentinel)
    ids = ids.reshape(seqs, rows_per * width)
    srt, perm = torch.sort(ids, dim=1)
    first = torch.ones_like(srt, dtype=torch.bool)
    first[:, 1:] = srt[:, 1:] != srt[:, :-1]
    first &= srt != sentinel
    uidx = torch.cumsum(first.to(torch.int32), dim=1) - 1
    count = first.sum(dim=1)
    cap = rows_per * width
    union = torch.zeros(seqs, cap + 1, dtype=torch.int32, device=ids.device)  # column cap: the dump
    union.scatter_(1, torch.where(first, uidx, cap).to(torch.int64), srt.to(torch.int32))
    inv = torch.empty_like(uidx)
    inv.scatter_(1, perm, uidx)
    return union[:, :cap], count, inv.reshape(live, width)


def union_problem(p: Problem, union, count, max_blocks: int) -> Problem:
    live = int(p.query_start_loc[-1])
    rows_per = int(p.query_start_loc[1] - p.query_start_loc[0])
    span = p.page_size * p.pages_per_block
    table = union[:, :max_blocks].contiguous()
    pad = torch.arange(max_blocks, device=table.device)[None, :] >= count[:, None]
    table = torch.where(pad, table[:, :1], table)  # past the union: a valid page nobody stores
    ends = (count * span).to(torch.int32).repeat_interleave(rows_per)
    row_ends = p.row_ends.clone()
    row_ends[:live] = ends
    return Problem(q=p.q, q_scale=p.q_scale, kv_cache=p.kv_cache, kv_scale=p.kv_scale, weights=p.weights,
                   block_tables=table, query_start_loc=p.query_start_loc, row_ends=row_ends,
                   heads=p.heads, head_dim=p.head_dim, page_size=p.page_size,
                   pages_per_block=p.pages_per_block, gather=False, max_seq_len=max_blocks * span,
                   max_qlen=p.max_qlen)


def scatter_index(p: Problem, inv, max_seq_len: int):
    live = int(p.query_start_loc[-1])
    span = p.page_size * p.pages_per_block
    n = torch.arange(max_seq_len, device=inv.device)
    blk = (n // span).clamp(max=inv.shape[1] - 1)
    idx = inv[:, blk] * span + (n % span)[None, :]
    keep = n[None, :] < p.row_ends[:live, None]
    return idx.clamp(min=0).to(torch.int64), keep


def med(xs) -> float:
    return statistics.median(xs)


def time_runner(launch, build, layers, iters, dev) -> float:
    sched = med(timing.time_samples(build, dev, iters=iters)) if build else 0.0  # the records first
    return med(timing.time_samples(launch, dev, iters=iters)) + sched / layers


def time_cand(cand, key, problem, out, layers, iters, dev):
    launch, build = candidate_runner(cand, key, problem, out)
    return time_runner(launch, build, layers, iters, dev), launch, build


def shape_and_pick(suite, name: str, dev):
    """The suite's shape, its problem on `dev`, its key, and the one-row pick (a Candidate): the
    table's, or ONE_ROW_REFERENCE where the table picks the union body itself (the union is
    measured against scoring each row alone)."""
    shape = suite[name]
    key = shape.key(dev)
    cfg = mqa_logits_mxfp4_config(device=dev, **shape.bounds())
    instance, mode = (cfg.instance, cfg.mode) if cfg.instance not in UNION_INSTANCES else ONE_ROW_REFERENCE
    (pick,), _ = candidates(key, instances={instance}, modes={mode})
    return shape, shape.make(dev), key, pick


def kernel(a, dev, suite) -> None:
    """The union bodies (i8u, i8uc; Free mode) beside the one-row pick, each checked on its own output."""
    union_cols = " | ".join(n.removeprefix("sm90_").replace("_", " ") for n in UNION_INSTANCES)
    print(f"| shape | one-row pick | us | {union_cols} | best vs pick | checks |")
    print("|---" * (len(UNION_INSTANCES) + 5) + "|")
    for name in a.shapes.split(","):
        shape, p, key, pick = shape_and_pick(suite, name, dev)
        check = ReferenceCheck(p, shape.max_seq_len)
        out = torch.empty((p.rows, shape.max_seq_len), device=dev)
        cands = [pick] + candidates(key, instances=set(UNION_INSTANCES), modes={"free"})[0]
        times, notes = {}, []
        for cand in cands:
            out.fill_(float("-inf"))
            launch, build = candidate_runner(cand, key, p, out)
            if build:
                build()
            launch()
            torch.cuda.synchronize()
            problems = check(out)
            notes.append(f"{cand.instance.name}: {'ok' if not problems else problems[:1]}")
            times[cand.instance.name] = time_runner(launch, build, shape.layers, a.iters, dev)
        g = times[pick.instance.name]
        cells = [f"{times[k]:.1f}" if k in times else "-" for k in UNION_INSTANCES]
        best = min((times[k] for k in UNION_INSTANCES if k in times), default=float("nan"))
        print(f"| {name} | {pick.label} | {g:.1f} | " + " | ".join(cells) + f" | {best / g:.2f}x | "
              + "; ".join(notes) + " |", flush=True)
        del p, out, check
        torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--kernel", action="store_true", help="time the union bodies (opus i8u, i8uc) themselves")
    a = ap.parse_args()
    dev = torch.device("cuda")
    suite = {s.name: s for s in get_suite("deepseek_v4_1").shapes()}
    if a.kernel:
        kernel(a, dev, suite)
        return
    print("| shape | one-row pick | one-row us | union blocks (mean, max) | union best | union us | prepass us "
          "| scatter us | union total | vs gather | check |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in a.shapes.split(","):
        shape, p, key, pick = shape_and_pick(suite, name, dev)
        out = torch.full((p.rows, shape.max_seq_len), float("-inf"), device=dev)
        g_us, launch, build = time_cand(pick, key, p, out, shape.layers, a.iters, dev)

        build_union = lambda: union_tables(p)  # noqa: E731
        pre_us = med(timing.time_samples(build_union, dev, iters=a.iters))
        union, count, inv = union_tables(p)
        max_blocks = int(count.max())
        up = union_problem(p, union, count, max_blocks)
        ushape_key = dataclasses.replace(key, gather=False, max_seq_len=up.max_seq_len)
        dense = torch.full((p.rows, up.max_seq_len), float("-inf"), device=dev)
        best = None
        rows = []
        for cand in candidates(ushape_key, instances=set(INSTANCES), modes={"table", "free"})[0]:
            try:
                us, ulaunch, ubuild = time_cand(cand, ushape_key, up, dense, shape.layers, a.iters, dev)
            except Exception as e:  # noqa: BLE001 - a probe: say it and go on
                rows.append(f"{cand.label}: {type(e).__name__}: {e}")
                continue
            rows.append(f"{cand.label}: {us:.1f}")
            if best is None or us < best[0]:
                best = (us, cand, ulaunch, ubuild)
        us, cand, ulaunch, ubuild = best
        live = int(p.query_start_loc[-1])
        idx, keep = scatter_index(p, inv, shape.max_seq_len)

        def scatter():
            vals = torch.gather(dense[:live], 1, idx)
            out[:live] = torch.where(keep, vals, out[:live])

        dense.fill_(float("-inf"))
        if ubuild:
            ubuild()
        ulaunch()
        out.fill_(float("-inf"))
        scatter()
        torch.cuda.synchronize()
        problems = ReferenceCheck(p, shape.max_seq_len)(out)
        sc_us = med(timing.time_samples(scatter, dev, iters=a.iters))
        total = us + pre_us + sc_us  # the pre-pass charged to every call: each layer has its own lists
        c = count.float()
        print(f"| {name} | {pick.label} | {g_us:.1f} | {c.mean():.0f}, {max_blocks} | {cand.label} | {us:.1f} "
              f"| {pre_us:.1f} | {sc_us:.1f} | {total:.1f} | {total / g_us:.2f}x "
              f"| {'ok' if not problems else problems[:2]} |", flush=True)
        print("    union candidates: " + "; ".join(rows), flush=True)
        del p, up, out, dense, idx, keep
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
