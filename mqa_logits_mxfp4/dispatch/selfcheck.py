"""First-use self-check of an instance never executed on the live arch (docs/contract.md, "Self-check")."""

from __future__ import annotations

import torch

from ..core.problem import ProblemKey
from ..core.records import RECORD_INTS
from ..problems import make_problem
from ..reference import compare_to_reference, mqa_logits_reference
from .config import make_config


def run_selfcheck(backend, inst, key: ProblemKey) -> str | None:
    """A small random problem of the key's geometry in every mode; None when all match."""
    span = key.page_size * key.pages_per_block
    qlen = min(key.max_qlen, 3)
    gen = torch.Generator().manual_seed(20261129)
    prob = make_problem(heads=key.heads, head_dim=key.head_dim, page_size=key.page_size,
                        pages_per_block=key.pages_per_block, gather=key.gather,
                        seqs=[(2 * span + 5, qlen), (span // 2 + 1, 1), (3, min(qlen, 2))],
                        generator=gen, device=key.device)
    small = ProblemKey(key.device, key.arch, key.cu_num, key.heads, key.head_dim, key.page_size,
                       key.pages_per_block, key.gather, prob.rows, prob.num_seqs, prob.max_qlen,
                       prob.max_seq_len)
    ref = mqa_logits_reference(*prob.args(), max_seq_len=prob.max_seq_len,
                               pages_per_block=key.pages_per_block, gather=key.gather)
    first = None
    for mode in inst.modes:
        cfg = make_config(small, backend, inst, "prefill" if mode == "prefill" else "free", "self-check")
        out = torch.full((prob.rows, prob.max_seq_len), float("nan"), device=key.device)
        records = None
        if mode == "table":
            records = torch.empty((cfg.table_grid, RECORD_INTS), dtype=torch.int32, device=key.device)
            backend.build_schedule(cfg, prob.query_start_loc, prob.row_ends, records)
        backend.launch(cfg, mode, *prob.args(), out, None, records)
        bad = compare_to_reference(out, ref)
        if bad:
            return f"{mode} mode: " + "; ".join(bad)
        if first is None:
            first = out
        elif not torch.equal(first.nan_to_num(1.0), out.nan_to_num(1.0)):
            return f"{mode} mode is not bitwise identical to {inst.modes[0]}"
    return None
