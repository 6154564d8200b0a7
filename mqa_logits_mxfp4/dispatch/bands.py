"""Bands: a long prefill scored in bands of rows whose logits fit a byte budget, into one reused
buffer (docs/contract.md, "Bands").

Everything a band needs comes from static bounds and tensor shapes: the band size from the
budget, each band's rows as slices, its query_start_loc as `query_start_loc.clamp(start,
start + count) - start` on the device. No host read, no data-dependent shape: a loop over the
bands can be captured in a CUDA graph like one call.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Iterator

import torch

from ..core.errors import InputError
from ..core.outputs import OUT_DTYPES
from . import registry
from .api import mqa_logits_mxfp4
from .config import MqaLogitsConfig, make_config


def band_rows(cfg: MqaLogitsConfig, budget_bytes: int, out_dtype: torch.dtype = torch.float32) -> int:
    """The most rows whose logits ([rows, cfg.max_seq_len] of out_dtype) fit budget_bytes, at
    least 1 and at most cfg.max_rows."""
    if out_dtype not in OUT_DTYPES:
        raise InputError(f"out_dtype must be {' or '.join(map(str, OUT_DTYPES))}; got {out_dtype}")
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 1:
        raise InputError(f"budget_bytes must be a positive int; got {budget_bytes!r}")
    row_bytes = cfg.max_seq_len * out_dtype.itemsize
    return max(1, min(cfg.max_rows, budget_bytes // row_bytes))


def row_bands(rows: int, per_band: int) -> list[tuple[int, int]]:
    """(start, count) of each band: rows [start, start + count), in order, covering [0, rows)."""
    return [(s, min(per_band, rows - s)) for s in range(0, rows, per_band)]


@functools.lru_cache(maxsize=256)
def band_config(cfg: MqaLogitsConfig, rows: int) -> MqaLogitsConfig:
    """A band's config: cfg's pick (backend, instance, mode) with max_rows = rows, so its grids
    are sized for the band and every band runs what one call would."""
    key = dataclasses.replace(cfg.key, max_rows=rows, max_qlen=min(cfg.key.max_qlen, rows))
    backend = registry.get(cfg.backend)
    inst = next(i for i in backend.instances() if i.name == cfg.instance)
    return make_config(key, backend, inst, cfg.mode, f"{cfg.source}; a band of {rows} rows")


def mqa_logits_mxfp4_bands(q: torch.Tensor, q_scale: torch.Tensor, kv_cache: torch.Tensor,
                           kv_scale: torch.Tensor, weights: torch.Tensor, block_tables: torch.Tensor,
                           query_start_loc: torch.Tensor, row_ends: torch.Tensor, *, cfg: MqaLogitsConfig,
                           budget_bytes: int, row_starts: torch.Tensor | None = None,
                           out_dtype: torch.dtype = torch.float32, buffer: torch.Tensor | None = None
                           ) -> Iterator[tuple[int, torch.Tensor]]:
    """Score rows [0, q.shape[0]) in bands; yields (start, logits) per band, logits being a view
    [count, cfg.max_seq_len] of one buffer that the next band overwrites (consume it first:
    e.g. its top-k). Each band's cells outside windows are -inf, as when the op allocates.

    budget_bytes bounds the buffer (band_rows); `buffer` (optional, for graphs): a caller-held
    [>= band rows, >= cfg.max_seq_len] tensor of out_dtype with a contiguous last dim. Each band
    equals the matching rows of one call over all rows (per-cell results: docs/contract.md).
    """
    rows = q.shape[0]
    per_band = band_rows(cfg, budget_bytes, out_dtype)
    if buffer is None:
        buffer = torch.empty((per_band, cfg.max_seq_len), dtype=out_dtype, device=cfg.device)
    elif buffer.dim() != 2 or buffer.shape[0] < per_band or buffer.shape[1] < cfg.max_seq_len:
        raise InputError(f"buffer must be at least [band rows, cfg.max_seq_len] = [{per_band}, {cfg.max_seq_len}]; "
                         f"got {list(buffer.shape)}")
    elif buffer.dtype != out_dtype:
        raise InputError(f"buffer must be of out_dtype {out_dtype}; got {buffer.dtype}")
    table_rows = cfg.gather  # gather mode: the table is per row, so it is sliced with the rows
    for start, count in row_bands(rows, per_band):
        stop = start + count
        out = buffer[:count]
        out.fill_(-math.inf)
        mqa_logits_mxfp4(q[start:stop], q_scale[start:stop], kv_cache, kv_scale, weights[start:stop],
                         block_tables[start:stop] if table_rows else block_tables,
                         query_start_loc.clamp(start, stop) - start, row_ends[start:stop],
                         cfg=band_config(cfg, per_band), out=out,
                         row_starts=None if row_starts is None else row_starts[start:stop])
        yield start, out
