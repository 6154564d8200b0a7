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


# Row tensors that break the caller contract (docs/contract.md), with the key cap the kernels
# clamp row_ends to: (query_start_loc, row_ends, cap). The work split must stay inside the rows
# and below the cap for each (worksplit/rules.py's guards).
BROKEN_ROW_TENSORS = [
    ([0, 2, 9], [5, 6, 7, 8], 100),                        # query_start_loc[-1] past the rows
    ([0, 2, 2**31 - 1], [5, 6, 7], 100),                   # ... far past
    ([0, -3, 4], [1, 2, 3, 4], 100),                       # a negative start
    ([0, 3, 1, 4], [10, 20, 30, 40], 100),                 # decreasing
    ([2, 3, 4], [1, 64, 65, 66], 100),                     # not starting at 0
    ([0, 2, 4], [10, 500, 20, 3000], 100),                 # row_ends past the cap
    ([0, 1, 3], [2**31 - 1, 5, 2**31 - 1], 300),           # ... at the int32 limit
    ([0, 2, 4], [-5, -1, 3, -100], 100),                   # negative row_ends
    ([0, 100, 200], [1, 2, 3], 64),                        # every sequence past the rows
    ([0, 3, 3, 5], [70, 65, 64, 200, 1], 128),             # decreasing along a sequence
]
