"""Side by side on one GPU: chosen opus/Triton instances and DeepGEMM's FP8 paged MQA logits
on the same ragged V4 decode batches (heads 64, 64-token pages), cold L2, interleaved rounds.

    python3 scripts/peer_compare.py [--data realistic|wide] [--instance NAME ...] [--shape M:B:KEYS ...]

KEYS is the average keys a sequence sees (ragged 0.7-1.3x); M the MTP rows. Prints one line a
shape and candidate (us, fraction of the floor, our time over the peer's) and writes --csv.
"""

from __future__ import annotations

import argparse
import csv
import random
import statistics
import sys
import zlib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mqa_logits_mxfp4 as mx  # noqa: E402
from mqa_logits_mxfp4.dispatch import registry  # noqa: E402
from mqa_logits_mxfp4.core.problem import ProblemKey, device_facts  # noqa: E402
from mqa_logits_mxfp4.dispatch.config import make_config  # noqa: E402
from mqa_logits_mxfp4.problems import DATA_KINDS, make_problem  # noqa: E402
from mqa_logits_mxfp4.tuning import peer  # noqa: E402
from mqa_logits_mxfp4.tuning.bench import floor_us, problem_work  # noqa: E402
from mqa_logits_mxfp4.tuning.timing import ceilings, time_us  # noqa: E402

DEFAULT_SHAPES = ["1:1:4096", "1:1:65536", "1:16:32768", "1:64:32768", "1:64:65536", "2:64:32768",
                  "2:16:32768", "4:64:32768"]
# r1w16: the tables' pick for one-row decode at batch 64 and up; the canonical two for the
# batch_invariant comparison
DEFAULT_INSTANCES = ["sm90_i8_r1w16", "sm90_i8_r1w12", "sm90_i8_r2w12", "sm90_i8_r4w12", "sm90_fp8_r1w4",
                     "sm90_fold_r2w4"]


def problem(mtp: int, batch: int, keys: int, data: str, seed: int):
    rng = random.Random(seed)
    seqs = [(max(mtp, int(keys * rng.uniform(0.7, 1.3))), mtp) for _ in range(batch)]
    return make_problem(heads=64, page_size=64, seqs=seqs, ratio=1, **DATA_KINDS[data],
                        generator=torch.Generator().manual_seed(seed), device="cuda")


def config_for(prob, name: str, mode: str):
    for bname in registry.names():
        be = registry.get(bname)
        if be.available() is not None:
            continue
        inst = next((i for i in be.instances() if i.name == name), None)
        if inst is None:
            continue
        arch, cu = device_facts(prob.q.device)
        key = ProblemKey(prob.q.device, arch, cu, prob.heads, prob.head_dim, prob.page_size, 1, False,
                         prob.rows, prob.num_seqs, prob.max_qlen, prob.max_seq_len)
        why = be.supports(key) + be.instance_supports(inst, key)
        if why:
            return None, "; ".join(map(str, why))
        return make_config(key, be, inst, mode, "peer_compare"), ""
    return None, f"no instance {name}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="realistic", choices=sorted(DATA_KINDS))
    ap.add_argument("--instance", action="append")
    ap.add_argument("--shape", action="append")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--csv", default="peer_compare.csv")
    args = ap.parse_args()
    dev = torch.device("cuda")
    ceil = ceilings(dev)
    print(f"ceilings: copy {ceil['copy_GBps']:.0f} GB/s, fp8 {ceil.get('fp8_TFLOPs', 0):.0f} TFLOP/s", flush=True)
    peer_reason = peer.available()
    rows = []
    for spec in args.shape or DEFAULT_SHAPES:
        mtp, batch, keys = (int(x) for x in spec.split(":"))
        prob = problem(mtp, batch, keys, args.data, seed=zlib.crc32(spec.encode()) % 10000)  # the same batch every run
        work = problem_work(prob)
        floor = floor_us(work, ceil)
        out = torch.empty((prob.rows, prob.max_seq_len), device=dev)
        calls, first = {}, None
        for name in args.instance or DEFAULT_INSTANCES:
            cfg, why = config_for(prob, name, "free")
            if cfg is None:
                print(f"  {spec} {name}: skipped: {why}")
                continue
            fn = (lambda c=cfg, p=prob, o=out: mx.mqa_logits_mxfp4(*p.args(), cfg=c, out=o))
            try:
                out.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
            except Exception as e:  # report and go on
                print(f"  {spec} {name}: failed: {type(e).__name__}: {e}")
                continue
            got = out.clone()
            if first is None:
                first = (name, got)
            else:
                a, b = first[1], got
                fin = torch.isfinite(a) & torch.isfinite(b)
                rel = ((a - b).abs()[fin] / a.abs()[fin].clamp(min=1e-30)).max().item() if fin.any() else 0.0
                same = torch.equal(torch.isnan(a), torch.isnan(b))
                print(f"  {spec} {name} vs {first[0]}: max rel diff {rel:.3g}, NaN sets equal {same}")
            calls[name] = fn
        dg = None
        why = peer_reason or peer.unsupported(prob)
        if why is None:
            try:
                dg = peer.call_for(prob, prob.max_seq_len)
                dg()
                torch.cuda.synchronize()
                if first is not None:
                    print(f"  {spec} deepgemm vs {first[0]}: median rel diff {dg.check(first[1]):.3g}")
                calls["deepgemm"] = dg
            except Exception as e:
                print(f"  {spec} deepgemm: failed: {type(e).__name__}: {e}")
        else:
            print(f"  {spec} deepgemm: {why}")
        times = {n: [] for n in calls}
        for _ in range(args.rounds):
            for n, fn in calls.items():
                times[n].append(time_us(fn, dev, iters=args.iters))
        med = {n: statistics.median(v) for n, v in times.items()}
        peer_us = med.get("deepgemm")
        meta_us = time_us(dg.metadata, dev, iters=args.iters) if dg is not None and dg.metadata is not None else None
        for n, us in med.items():
            ratio = f"{us / peer_us:.3f}" if peer_us else ""
            rows.append(dict(shape=spec, data=args.data, candidate=n, us=f"{us:.2f}", floor_us=f"{floor:.2f}",
                             fraction=f"{floor / us:.3f}", vs_peer=ratio,
                             peer_metadata_us=f"{meta_us:.2f}" if meta_us else ""))
            print(f"{spec:>14} {n:>16}: {us:9.2f} us  floor {floor:8.2f}  frac {floor / us:.3f}  "
                  f"ours/peer {ratio}", flush=True)
        del prob, out, calls, dg
        torch.cuda.empty_cache()
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["shape"])
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
