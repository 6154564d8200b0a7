"""Host cost of the op: an eager call with a cached config against the backend's raw launch and
against the op's Python path alone (no hot path), and the device time of a Table schedule build.

`python -m mqa_logits_mxfp4.tuning.host [--json FILE]` on a GPU. The call and the raw launch
are timed on the host over back-to-back calls of one decode row (64 keys, and 4096); the
loop measures host time while the kernel is shorter than the host path (`host_bound`, from the
kernel's own time in a CUDA graph). The schedule build's device time comes from a CUDA graph of
20 builds (no host launch in it), for 16384 rows (one prefill chunk) and 256 decode sequences.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from ..dispatch import api, registry
from ..dispatch.api import mqa_logits_mxfp4
from ..dispatch.config import make_config
from ..dispatch.config_cache import mqa_logits_mxfp4_config
from ..dispatch.schedule import mqa_logits_mxfp4_schedule
from ..problems import make_problem

CALLS = 200   # launches a loop: a backlog of 200 kernels never fills the launch queue


def _host_us(fn, calls: int = CALLS, repeats: int = 7) -> float:
    """Median over `repeats` loops of the host time a call, in us."""
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        samples.append((t1 - t0) / calls * 1e6)
    return statistics.median(samples)


def _device_us(fn, per_graph: int = 20, replays: int = 20) -> float:
    """Device time of one fn() call: `per_graph` calls captured back to back in one CUDA graph
    (the op is graph-safe), replayed between events, so host launch time is not counted."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            fn()
    graph.replay()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / per_graph)
    return statistics.median(times)


def call_overhead(device, backend: str | None = None, instance: str | None = None, keys: int = 64) -> dict:
    prob = make_problem(heads=64, page_size=64, seqs=[(keys, 1)], device=device,
                        generator=torch.Generator().manual_seed(0))
    cfg = mqa_logits_mxfp4_config(device, heads=64, head_dim=128, page_size=64, max_rows=1, max_seqs=1,
                                  max_qlen=1, max_seq_len=keys)
    if backend is not None:
        be = registry.get(backend)
        inst = next(i for i in be.instances() if i.name == instance) if instance else be.ranked_picks(cfg.key)[0][0]
        cfg = make_config(cfg.key, be, inst, "free", "host bench")
    out = torch.empty((1, cfg.max_seq_len), device=device)
    args = prob.args()
    be = registry.get(cfg.backend)

    def op():
        mqa_logits_mxfp4(*args, cfg=cfg, out=out)

    def raw():
        be.launch(cfg, cfg.mode, *args, out, None, None)

    op(), op(), raw()   # the second call takes the backend's hot path, where it has one
    raw_us, op_us = _host_us(raw), _host_us(op)
    hot_path = api._launcher
    api._launcher = lambda cfg, mode: None   # the same calls through the Python path alone
    try:
        python_us = _host_us(op)
    finally:
        api._launcher = hot_path
    kernel_us = _device_us(raw)
    return dict(keys=keys, backend=cfg.backend, instance=cfg.instance, mode=cfg.mode, raw_launch_us=round(raw_us, 2),
                op_call_us=round(op_us, 2), added_us=round(op_us - raw_us, 2),
                python_path_us=round(python_us, 2), kernel_us=round(kernel_us, 2),
                host_bound=bool(raw_us > kernel_us))


def schedule_build(device, seqs: list[tuple[int, int]], ratio: int = 4) -> dict:
    """Device and host time of one Table build for these (context tokens, rows) sequences."""
    prob = make_problem(heads=64, page_size=64, seqs=seqs, ratio=ratio, device=device,
                        generator=torch.Generator().manual_seed(1))
    cfg = mqa_logits_mxfp4_config(device, heads=64, head_dim=128, page_size=64, max_rows=prob.rows,
                                  max_seqs=len(seqs), max_qlen=prob.max_qlen, max_seq_len=prob.max_seq_len)
    buffers = cfg.schedule_buffers()
    qsl, ends = prob.query_start_loc, prob.row_ends

    def build():
        mqa_logits_mxfp4_schedule(cfg, qsl, ends, buffers)

    return dict(rows=prob.rows, seqs=len(seqs), backend=cfg.backend, instance=cfg.instance,
                programs=cfg.table_grid, device_us=round(_device_us(build), 2),
                host_us=round(_host_us(build, calls=500), 2))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mqa_logits_mxfp4.tuning.host", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("host: needs a GPU", file=sys.stderr)
        return 1
    device = torch.device("cuda", 0)
    rows = [call_overhead(device, keys=keys) for keys in (64, 4096)]   # a tiny call; one decode row of 4K keys
    key = mqa_logits_mxfp4_config(device, heads=64, max_rows=1, max_seqs=1, max_seq_len=64).key
    for name in registry.names():
        be = registry.get(name)
        if name not in {r["backend"] for r in rows} and be.available() is None and not be.supports(key):
            rows.append(call_overhead(device, name))
    sched = [schedule_build(device, [(65536, 16384)]),       # a prefill chunk: 16384 rows
             schedule_build(device, [(32768, 1)] * 256),      # decode, 256 sequences, MTP 1
             schedule_build(device, [(32768, 4)] * 256)]      # MTP 4: 1024 rows
    for r in rows:
        print(f"call  1 x {r['keys']} keys, {r['backend']}/{r['instance']}/{r['mode']}: op {r['op_call_us']} us (Python path alone "
              f"{r['python_path_us']} us), raw launch {r['raw_launch_us']} us, added {r['added_us']} us "
              f"(kernel {r['kernel_us']} us)")
    for s in sched:
        print(f"schedule {s['rows']} rows / {s['seqs']} seqs ({s['programs']} programs, {s['instance']}): "
              f"device {s['device_us']} us, host {s['host_us']} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(calls=rows, schedule=sched, device=torch.cuda.get_device_name(0)), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
