"""Table records on the device for any backend's instance, from one Triton kernel (no host read)."""

from __future__ import annotations

import torch

from .rules import UNIT_SPLIT, seq_lanes


def build_records(query_start_loc: torch.Tensor, row_ends: torch.Tensor, records: torch.Tensor, *,
                  programs: int, rows: int, block_n: int, max_seqs: int, max_seq_len: int,
                  row_starts: torch.Tensor | None = None, split: tuple[int, int, int] = UNIT_SPLIT) -> None:
    """Write core/records.py's records of a launch of `programs` programs into `records`.

    query_start_loc [num_seqs + 1] int32, row_ends [rows] int32, row_starts [rows] int32 or
    None (all zero), records [>= programs,
    RECORD_INTS] int32 contiguous, all on one device; `rows` / `block_n`: the instance's row
    group and key tile (the units are counted in them); max_seqs, max_seq_len: the config's
    bounds (row_ends are read clamped into [0, max_seq_len], query_start_loc into
    [0, row_ends.shape[0]]); split: the instance's Table split (worksplit/rules.py's table_unit).
    """
    from . import kernel  # first use: TRITON_INTERPRET has been read by now
    has_starts = row_starts is not None
    kernel.build_schedule_kernel[(programs,)](
        query_start_loc, row_ends, row_starts if has_starts else row_ends, records,
        query_start_loc.shape[0] - 1, row_ends.shape[0], max_seq_len,
        R=rows, BLOCK_N=block_n, SEQ_P2=seq_lanes(max_seqs), HAS_STARTS=has_starts,
        STAGE=split[0], ROUND=split[1], SETUP=split[2])
