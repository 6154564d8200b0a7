"""The plain torch path (dequantize to BF16, batched matmul, relu, weighted head sum): the
baseline every benchmark reports next to the kernels. A correctness path, not a bar."""

from __future__ import annotations

import torch

from ..formats import dequantize_mxfp4
from ..reference import key_slots

_TEMP_BYTES = 1 << 30  # rows are scored in chunks whose [rows, heads, keys] fp32 scores fit this


def torch_path(q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends,
               *, max_seq_len: int, pages_per_block: int = 1, gather: bool = False,
               seqs: list[tuple[int, int, int]]) -> torch.Tensor:
    """float32 [rows, max_seq_len], -inf outside windows.

    `seqs`: host-known (first row, rows, keys) per sequence (this path is not graph-safe).
    Gather mode reads row r's keys through block_tables[r].
    """
    out = torch.full((q.shape[0], max_seq_len), float("-inf"), device=q.device)
    qd = dequantize_mxfp4(q, q_scale).to(torch.bfloat16)  # [rows, H, D]
    rows_total, heads, head_dim = qd.shape
    page = kv_cache.shape[1]
    for b, (r0, nrows, nkeys) in enumerate(seqs):
        if nrows == 0 or nkeys == 0:
            continue
        keys = torch.arange(nkeys, device=q.device)
        per_row = heads * nkeys * 4 + (nkeys * head_dim * 2 if gather else 0)
        chunk = max(1, min(nrows, _TEMP_BYTES // per_row))
        if not gather:
            pg, tok = key_slots(block_tables, torch.tensor([b], device=q.device), keys[None], page,
                                pages_per_block)
            k_seq = dequantize_mxfp4(kv_cache[pg[0], tok[0]], kv_scale[pg[0], tok[0]]).to(torch.bfloat16)
        for c0 in range(r0, r0 + nrows, chunk):
            c1 = min(r0 + nrows, c0 + chunk)
            if gather:  # every row has its own table: [c, n, D] keys
                rows = torch.arange(c0, c1, device=q.device)
                pg, tok = key_slots(block_tables, rows, keys[None].expand(c1 - c0, -1), page, pages_per_block)
                k = dequantize_mxfp4(kv_cache[pg, tok], kv_scale[pg, tok]).to(torch.bfloat16)
                s = torch.matmul(qd[c0:c1], k.transpose(1, 2))  # [c, H, n]
            else:
                s = torch.matmul(qd[c0:c1], k_seq.t())  # [c, H, n]
            logits = (torch.relu(s.float()) * weights[c0:c1, :, None].float()).sum(1)
            logits = logits.masked_fill(keys[None] >= row_ends[c0:c1, None], float("-inf"))
            out[c0:c1, :nkeys] = logits
    return out


def torch_path_call(problem, max_seq_len: int):
    """A no-argument callable running the torch path on `problem` (host facts read once, here)."""
    qsl = problem.query_start_loc.tolist()
    ends = problem.row_ends.tolist()
    seqs = [(qsl[b], qsl[b + 1] - qsl[b], max(ends[qsl[b]:qsl[b + 1]], default=0))
            for b in range(problem.num_seqs)]
    args = problem.args()
    return lambda: torch_path(*args, max_seq_len=max_seq_len, pages_per_block=problem.pages_per_block,
                              gather=problem.gather, seqs=seqs)
