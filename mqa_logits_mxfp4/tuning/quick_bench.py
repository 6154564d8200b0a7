"""A small benchmark of every fitting (instance, mode) against the torch path on a few shapes.

`python -m mqa_logits_mxfp4.tuning.quick_bench --csv FILE` on a GPU. Each candidate is checked
against the float64 reference before it is timed; a failing one is reported, never timed.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys

import torch

from ..dispatch import registry
from ..dispatch.config import ProblemKey, device_facts
from ..dispatch.select import make_config
from ..problems import make_problem
from ..reference import compare_to_reference, mqa_logits_reference
from .timing import ceilings, time_us
from .torch_path import torch_path
import mqa_logits_mxfp4 as mx

KEY_BYTES = 68  # 64 E2M1 bytes + 4 E8M0 bytes at head_dim 128


def shapes():
    """(name, seqs, ratio): V4 decode (keys = ctx) and one chunked prefill (CSA ratio 4)."""
    out = []
    for mtp in (1, 4):
        for bs in (1, 16, 64):
            for ctx in (8192, 32768):
                out.append((f"decode mtp{mtp} bs{bs} ctx{ctx // 1024}K", [(ctx, mtp)] * bs, 1))
    out.append(("prefill 4096 rows x 16K keys (ratio 4)", [(65536, 4096)], 4))
    return out


def floor_us(prob, ceil) -> float:
    live = int(prob.query_start_loc[-1])
    ends = prob.row_ends[:live].long()
    cells = int(ends.sum())
    keys = 0
    for b in range(prob.num_seqs):
        r1 = int(prob.query_start_loc[b + 1])
        if r1 > int(prob.query_start_loc[b]):
            keys += math.ceil(int(ends[r1 - 1]) / prob.page_size) * prob.page_size
    nbytes = keys * KEY_BYTES + live * prob.heads * (68 + 4) + cells * 4
    flops = 2 * prob.heads * prob.head_dim * cells
    return max(nbytes / ceil["copy_GBps"] / 1e3, flops / ceil.get("fp8_TFLOPs", ceil["bf16_TFLOPs"]) / 1e6), nbytes, flops


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--only", default=None, help="substring of shape names to run")
    args = ap.parse_args(argv)
    dev = torch.device("cuda", torch.cuda.current_device())
    arch, cu = device_facts(dev)
    ceil = ceilings(dev)
    print(f"device {torch.cuda.get_device_name(dev)} {arch} x{cu}; ceilings {ceil}", flush=True)
    rows_out, failures = [], 0
    for name, seqs, ratio in shapes():
        if args.only and args.only not in name:
            continue
        prob = make_problem(heads=64, page_size=64, seqs=seqs, ratio=ratio,
                            generator=torch.Generator().manual_seed(len(rows_out)), device=dev)
        key = ProblemKey(dev, arch, cu, 64, 128, 64, 1, False, prob.rows, prob.num_seqs,
                         prob.max_qlen, prob.max_seq_len)
        ref = mqa_logits_reference(*prob.args(), max_seq_len=prob.max_seq_len)
        fl, nbytes, flops = floor_us(prob, ceil)
        qsl = prob.query_start_loc.tolist()
        ends = prob.row_ends.tolist()
        sq = [(qsl[b], qsl[b + 1] - qsl[b], ends[qsl[b + 1] - 1]) for b in range(prob.num_seqs)]
        t_torch = time_us(lambda: torch_path(*prob.args(), max_seq_len=prob.max_seq_len, seqs=sq), dev, iters=5)
        best = None
        for bname in registry.names():
            backend = registry.get(bname)
            if backend.available() or backend.supports(key):
                continue
            for inst in backend.instances():
                if backend.instance_supports(inst, key):
                    continue
                for mode in inst.modes:
                    cfg = make_config(key, backend, inst, "prefill" if mode == "prefill" else "free", "bench")
                    out = torch.empty((prob.rows, prob.max_seq_len), device=dev)
                    sched = mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc, prob.row_ends) if mode == "table" else None
                    call = lambda: mx.mqa_logits_mxfp4(*prob.args(), cfg=cfg, schedule=sched, out=out)  # noqa: E731
                    out.fill_(float("nan"))
                    call()
                    bad = compare_to_reference(out, ref)
                    if bad:
                        failures += 1
                        print(f"  FAIL {name} {bname}/{inst.name}/{mode}: {bad[0][:300]}", flush=True)
                        continue
                    us = time_us(call, dev)
                    row = dict(shape=name, backend=bname, instance=inst.name, mode=mode, us=round(us, 2),
                               floor_us=round(fl, 2), fraction=round(fl / us, 3),
                               GBps=round(nbytes / us / 1e3, 1), TFLOPs=round(flops / us / 1e6, 1),
                               torch_us=round(t_torch, 1))
                    rows_out.append(row)
                    if best is None or us < best["us"]:
                        best = row
        if best:
            print(f"{name:42s} best {best['instance']}/{best['mode']:7s} {best['us']:9.1f} us  "
                  f"floor {fl:8.1f} us ({best['fraction']:.3f})  torch path {t_torch:10.1f} us", flush=True)
    if args.csv and rows_out:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows_out[0]))
            w.writeheader()
            w.writerows(rows_out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
