"""The plain torch path (dequantize to BF16, batched matmul, relu, weighted head sum): the
baseline every benchmark reports next to the kernels. A correctness path, not a bar."""

from __future__ import annotations

import torch

from ..formats import dequantize_mxfp4
from ..reference import key_slots


def torch_path(q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends,
               *, max_seq_len: int, pages_per_block: int = 1, seqs: list[tuple[int, int, int]]) -> torch.Tensor:
    """`seqs`: host-known (first row, rows, keys) per sequence (this path is not graph-safe)."""
    out = torch.full((q.shape[0], max_seq_len), float("-inf"), device=q.device)
    qd = dequantize_mxfp4(q, q_scale).to(torch.bfloat16)  # [rows, H, D]
    page = kv_cache.shape[1]
    for b, (r0, nrows, nkeys) in enumerate(seqs):
        if nrows == 0 or nkeys == 0:
            continue
        keys = torch.arange(nkeys, device=q.device)
        pg, tok = key_slots(block_tables, torch.tensor([b], device=q.device), keys[None], page, pages_per_block)
        k = dequantize_mxfp4(kv_cache[pg[0], tok[0]], kv_scale[pg[0], tok[0]]).to(torch.bfloat16)  # [n, D]
        s = torch.relu(torch.matmul(qd[r0:r0 + nrows], k.t()).float())  # [rows, H, n]
        logits = (s * weights[r0:r0 + nrows, :, None].float()).sum(1)
        n = torch.arange(nkeys, device=q.device)
        logits = logits.masked_fill(n[None] >= row_ends[r0:r0 + nrows, None], float("-inf"))
        out[r0:r0 + nrows, :nkeys] = logits
    return out
