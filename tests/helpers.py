"""Pieces shared by the table, dispatch and tuning tests."""

import csv

from mqa_logits_mxfp4.dispatch.table import COLUMNS


def tuned_row(**over) -> dict:
    """One tuned-table row (sm_90/132, H64 D128 page 64x1 decode) with provenance, unless overridden."""
    r = dict(schema_version=2, arch="sm_90", cu_num=132, heads=64, head_dim=128, page_size=64,
             pages_per_block=1, gather=0, batch_invariant=0, qlen=1, rows=16, seq_len=1024, backend="triton",
             instance="fp8_r1n64w4s2", mode="free", us=10.0, date="2026-01-01", tool_version="t",
             torch_version="t", triton_version="t", device_name="d", ref_us=100.0, candidates=3)
    r.update(over)
    return r


def write_csv(path, rows, columns=COLUMNS):
    """A tuned CSV at `path` (parents created) with `columns`; missing fields stay empty."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path
