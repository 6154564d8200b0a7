"""Run one candidate on one suite shape a few times: the program `ncu` profiles.

    ncu --clock-control none -k regex:mqa_logits --launch-skip 2 --launch-count 1 \
        python3 scripts/profile_case.py core "decode mtp1 bs64 ctx32K" opus/sm90_fp8_r1w4/table

Warm-up launches come first (compilation, schedule build), then `--calls` timed launches.
"""

from __future__ import annotations

import argparse
import sys

import torch

from mqa_logits_mxfp4.dispatch import registry
from mqa_logits_mxfp4.tuning import suites
from mqa_logits_mxfp4.tuning.tuner import Candidate, candidate_runner


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("suite")
    p.add_argument("shape", help="exact shape name of the suite")
    p.add_argument("candidate", help="backend/instance/mode")
    p.add_argument("--calls", type=int, default=3)
    a = p.parse_args(argv)
    shape = next(s for s in suites.get_suite(a.suite).shapes() if s.name == a.shape)
    backend_name, inst_name, mode = a.candidate.split("/")
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")  # cpu: TRITON_INTERPRET=1
    problem = shape.make(device)
    key = shape.key(device)
    be = registry.get(backend_name)
    cand = Candidate(be, next(i for i in be.instances() if i.name == inst_name), mode)
    out = torch.empty((key.max_rows, key.max_seq_len), device=device)
    launch, build = candidate_runner(cand, key, problem, out)
    if build is not None:
        build()
    for _ in range(1 + a.calls):
        launch()
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"{a.candidate} on {a.suite}/{a.shape}: {1 + a.calls} launches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
