"""DeepGEMM's FP8 paged MQA logits on our problems, for `bench --peer deepgemm`.

The peer reads FP8 keys (128 E4M3 bytes and an fp32 scale a key: 132 bytes, against our 68)
and an E4M3 query without scales, so a problem is converted once before timing: each key's and
each query head's MXFP4 values dequantized, the key's scaled into E4M3 by its own amax, the
query's by one common factor. The values then differ from ours by FP8 rounding; only the time
is compared, and `check` says whether the peer's logits follow ours (a layout sanity check, not
a tolerance). Where `deep_gemm` is missing, or the problem is outside what its sm_90 kernel
serves (64-token pages, 32 or 64 heads, no gather, one table entry a page, the same number of
rows in every sequence), `reason` says so and nothing is run.
"""

from __future__ import annotations

import importlib.util

import torch

from ..formats import dequantize_mxfp4
from ..problems import Problem

PAGE = 64
E4M3_MAX = 448.0


def available() -> str | None:
    """None where deep_gemm imports and the device is sm_90, else why not."""
    if importlib.util.find_spec("deep_gemm") is None:
        return "deep_gemm is not importable (bench --peer deepgemm needs DeepGEMM installed)"
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        return "DeepGEMM's paged MQA logits run on sm_90 here"
    return None


def unsupported(prob: Problem) -> str | None:
    rows = (prob.query_start_loc[1:] - prob.query_start_loc[:-1]).unique()
    for bad, why in ((prob.gather, "gather mode"), (prob.page_size != PAGE, f"page size {prob.page_size}"),
                     (prob.pages_per_block != 1, f"{prob.pages_per_block} pages a table entry"),
                     (prob.heads not in (32, 64), f"{prob.heads} heads"),
                     (rows.numel() != 1, "sequences with different row counts"),
                     (rows.numel() == 1 and int(rows[0]) > 2, f"{int(rows[0]) if rows.numel() == 1 else 0} rows a "
                      "sequence (next_n 1 or 2 only)"),
                     (prob.live_rows != prob.rows, "padding rows")):
        if bad:
            return f"DeepGEMM's sm_90 kernel does not serve {why}"
    return None


class DeepGemmCall:
    """One problem converted for the peer; calling it runs the peer once (metadata included
    when `with_metadata`, as a step that builds it once and reuses it would not)."""

    def __init__(self, prob: Problem, max_seq_len: int):
        import deep_gemm

        self.dg = deep_gemm
        dev = prob.q.device
        b = prob.num_seqs
        next_n = prob.live_rows // max(b, 1)
        self.next_n, self.max_seq_len = next_n, max_seq_len
        q = dequantize_mxfp4(prob.q, prob.q_scale)  # [rows, H, D]
        q_factor = E4M3_MAX / q.abs().amax().clamp(min=1e-30)
        self.q_factor = float(q_factor)
        self.q = (q * q_factor).to(torch.float8_e4m3fn).view(b, next_n, prob.heads, prob.head_dim)
        pages = prob.kv_cache.shape[0]
        fused = torch.empty((pages, PAGE * (prob.head_dim + 4)), dtype=torch.uint8, device=dev)
        step = max(1, (1 << 24) // (PAGE * prob.head_dim))  # pages a chunk: ~64 MB of fp32 at a time
        for p0 in range(0, pages, step):
            k = dequantize_mxfp4(prob.kv_cache[p0:p0 + step], prob.kv_scale[p0:p0 + step])  # [n, 64, D]
            scale = (k.abs().amax(-1) / E4M3_MAX).clamp(min=1e-30)  # [n, 64]
            vals = (k / scale[..., None]).to(torch.float8_e4m3fn).view(torch.uint8).reshape(k.shape[0], -1)
            fused[p0:p0 + step, :PAGE * prob.head_dim] = vals
            fused[p0:p0 + step, PAGE * prob.head_dim:] = scale.float().contiguous().view(torch.uint8).reshape(k.shape[0], -1)
        self.kv = fused.view(pages, PAGE, 1, prob.head_dim + 4)
        self.weights = prob.weights[:prob.live_rows].float().contiguous()
        self.lens = prob.row_ends[:prob.live_rows].view(b, next_n).contiguous()
        self.table = prob.block_tables[:b].contiguous()
        self.num_sms = deep_gemm.get_num_sms()
        self.meta = self.metadata()

    def metadata(self) -> torch.Tensor:
        return self.dg.get_paged_mqa_logits_metadata(self.lens, PAGE, self.num_sms)

    def __call__(self) -> torch.Tensor:
        return self.dg.fp8_fp4_paged_mqa_logits((self.q, None), self.kv, self.weights, self.lens, self.table,
                                                self.meta, self.max_seq_len)

    def check(self, ours: torch.Tensor) -> float:
        """Median relative difference of the peer's logits (scaled back) from ours, over cells
        inside windows where ours is finite and not tiny."""
        got = self()[:, :ours.shape[1]].float() / self.q_factor
        ends = self.lens.view(-1)
        inside = torch.arange(ours.shape[1], device=ours.device)[None, :] < ends[:, None]
        ref = ours[:got.shape[0]]
        mask = inside & torch.isfinite(ref) & (ref.abs() > ref.abs()[inside].median() * 1e-3)
        if not bool(mask.any()):
            return float("nan")
        return float(((got - ref).abs() / ref.abs())[mask].median())
