"""One small call of each opus i8 instance in each mode, with its path counters (their sum
against the stages the work split gives: I8_STAGE_KEYS keys a stage) and the reference
comparison: the first thing a GPU session runs after building the kernels (a hang or a wrong
layout shows here, in seconds).  python3 scripts/i8_smoke.py"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mqa_logits_mxfp4.backends.opus.instances import i8_stages  # noqa: E402
from mqa_logits_mxfp4.dispatch import registry  # noqa: E402
from mqa_logits_mxfp4.core.problem import ProblemKey, device_facts  # noqa: E402
from mqa_logits_mxfp4.dispatch.config import make_config  # noqa: E402
from mqa_logits_mxfp4.problems import make_problem  # noqa: E402
from mqa_logits_mxfp4.reference import compare_to_reference, mqa_logits_reference  # noqa: E402

opus = registry.get("opus")
bad = 0
for spread, label in ((2, "narrow"), (None, "wide")):
    kw = dict(scale_exponents=(100, 160), block_spread=2) if spread else {}
    # the long sequence gives every CTA dozens of stages, so every ring wraps (a ring bug shows here;
    # the short ones alone never wrapped one: docs/perf-notes.md, v10)
    prob = make_problem(heads=64, page_size=16, seqs=[(700, 2), (300, 1), (1500, 2), (400_000, 1)], ratio=1,
                        pad_rows=1,
                        generator=torch.Generator().manual_seed(1), device="cuda", **kw)
    ref = mqa_logits_reference(*prob.args(), max_seq_len=prob.max_seq_len)
    arch, cu = device_facts(prob.q.device)
    for inst in opus.instances():
        if inst.family != "i8" or 64 not in inst.heads:
            continue
        key = ProblemKey(prob.q.device, arch, cu, 64, 128, 16, 1, False, prob.rows, prob.num_seqs, prob.max_qlen,
                         prob.max_seq_len)
        for mode in ("free", "table", "prefill"):
            cfg = make_config(key, opus, inst, "prefill" if mode == "prefill" else "free", "smoke")
            out = torch.full((prob.rows, prob.max_seq_len), -7777.0, device="cuda")
            rec = None
            if mode == "table":
                rec = cfg.schedule_buffers()
                opus.build_schedule(cfg, prob.query_start_loc, prob.row_ends, rec)
            stats = torch.zeros(2, dtype=torch.int64, device="cuda")
            opus.launch(cfg, mode, *prob.args(), out, None, rec, path_stats=stats)
            torch.cuda.synchronize()
            problems = compare_to_reference(out, ref)
            want = i8_stages(cfg, inst, mode, prob.query_start_loc.tolist(), prob.row_ends.tolist())
            if sum(stats.tolist()) != want:
                problems = [f"the path counters add up to {sum(stats.tolist())} stages; the work split has {want}",
                            *problems]
            bad += bool(problems)
            print(f"{label} {inst.name} {mode}: stages fast/canonical {stats.tolist()} of {want}: "
                  f"{'OK' if not problems else problems[:3]}", flush=True)
sys.exit(1 if bad else 0)
