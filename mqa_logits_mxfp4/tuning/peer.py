"""DeepGEMM's FP8 MQA logits on our problems, for `bench --peer deepgemm`.

The peer reads FP8 keys (128 E4M3 bytes and an fp32 scale a key: 132 bytes, against our 68)
and an E4M3 query without scales, so a problem is converted once before timing: each key's and
each query head's MXFP4 values dequantized, the key's scaled into E4M3 by its own amax, the
query's by one common factor. The values then differ from ours by FP8 rounding; only the time
is compared, and `check` says whether the peer's logits follow ours (a layout sanity check, not
a tolerance). `call_for` picks the peer's kernel: a single sequence of more than two rows (a
prefill) goes to its contiguous kernel (`fp8_fp4_mqa_logits`, the sequence's keys gathered into
one array, row r's window [0, row_ends[r])), every other problem to its paged one
(`fp8_fp4_paged_mqa_logits`). Where `deep_gemm` is missing, or the problem is outside what its
sm_90 kernels serve (32 or 64 heads, no gather, no padding rows; paged: 64-token pages, one
table entry a page, the same one or two rows in every sequence), `unsupported` says so and
nothing is run.
"""

from __future__ import annotations

import importlib.util

import torch

from ..formats import dequantize_mxfp4
from ..problems import Problem
from ..reference import key_slots

PAGE = 64
E4M3_MAX = 448.0


def available() -> str | None:
    """None where deep_gemm imports and the device is sm_90, else why not."""
    if importlib.util.find_spec("deep_gemm") is None:
        return "deep_gemm is not importable (bench --peer deepgemm needs DeepGEMM installed)"
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        return "DeepGEMM's paged MQA logits run on sm_90 here"
    return None


def is_prefill(prob: Problem) -> bool:
    """One sequence of more than two rows: the peer's contiguous kernel serves it."""
    return prob.num_seqs == 1 and prob.live_rows > 2


def unsupported(prob: Problem) -> str | None:
    rows = (prob.query_start_loc[1:] - prob.query_start_loc[:-1]).unique()
    paged = not is_prefill(prob)
    for bad, why in ((prob.gather, "gather mode"), (prob.heads not in (32, 64), f"{prob.heads} heads"),
                     (prob.live_rows != prob.rows, "padding rows"),
                     (paged and prob.page_size != PAGE, f"page size {prob.page_size}"),
                     (paged and prob.pages_per_block != 1, f"{prob.pages_per_block} pages a table entry"),
                     (paged and rows.numel() != 1, "sequences with different row counts"),
                     (paged and rows.numel() == 1 and int(rows[0]) > 2,
                      f"{int(rows[0]) if rows.numel() == 1 else 0} rows a sequence (next_n 1 or 2 only)")):
        if bad:
            return f"DeepGEMM's sm_90 kernel does not serve {why}"
    return None


def kernel_name(prob: Problem) -> str:
    """The bench row's name for the peer kernel that serves the problem."""
    return "fp8_mqa_logits" if is_prefill(prob) else "fp8_paged_mqa_logits"


def call_for(prob: Problem, max_seq_len: int):
    """The peer's call for the problem (its contiguous kernel for a prefill, else its paged one)."""
    return DeepGemmPrefillCall(prob, max_seq_len) if is_prefill(prob) else DeepGemmCall(prob, max_seq_len)


def _fp8_query(prob: Problem) -> tuple[torch.Tensor, float]:
    """The live rows' queries in E4M3 [rows, H, D] by one common factor, and that factor."""
    q = dequantize_mxfp4(prob.q[:prob.live_rows], prob.q_scale[:prob.live_rows])
    factor = E4M3_MAX / q.abs().amax().clamp(min=1e-30)
    return (q * factor).to(torch.float8_e4m3fn), float(factor)


def _fp8_keys(k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys [..., D] -> (E4M3 values [..., D], fp32 scales [...]): each key by its own amax."""
    scale = (k.abs().amax(-1) / E4M3_MAX).clamp(min=1e-30)
    return (k / scale[..., None]).to(torch.float8_e4m3fn), scale.float().contiguous()


class _PeerCall:
    """What both adapters share: `check` against our logits. A subclass sets `q_factor` (the
    query's E4M3 factor) and `ends` (each live row's window end) and is called to run the peer."""

    q_factor: float
    ends: torch.Tensor

    def check(self, ours: torch.Tensor) -> float:
        """Median relative difference of the peer's logits (scaled back) from ours, over cells
        inside the rows' windows [0, ends) where ours is finite and not tiny."""
        got = self()[:, :ours.shape[1]].float() / self.q_factor
        inside = torch.arange(ours.shape[1], device=ours.device)[None, :] < self.ends[:, None]
        ref = ours[:got.shape[0]]
        mask = inside & torch.isfinite(ref) & (ref.abs() > ref.abs()[inside].median() * 1e-3)
        if not bool(mask.any()):
            return float("nan")
        return float(((got - ref).abs() / ref.abs())[mask].median())


class DeepGemmCall(_PeerCall):
    """One problem converted for the peer's paged kernel; calling it runs the peer once (its
    metadata, built once a step, is `metadata` and timed apart)."""

    def __init__(self, prob: Problem, max_seq_len: int):
        import deep_gemm

        self.dg = deep_gemm
        dev = prob.q.device
        b = prob.num_seqs
        next_n = prob.live_rows // max(b, 1)
        self.next_n, self.max_seq_len = next_n, max_seq_len
        q, self.q_factor = _fp8_query(prob)
        self.q = q.view(b, next_n, prob.heads, prob.head_dim)
        pages = prob.kv_cache.shape[0]
        fused = torch.empty((pages, PAGE * (prob.head_dim + 4)), dtype=torch.uint8, device=dev)
        step = max(1, (1 << 24) // (PAGE * prob.head_dim))  # pages a chunk: ~64 MB of fp32 at a time
        for p0 in range(0, pages, step):
            k = dequantize_mxfp4(prob.kv_cache[p0:p0 + step], prob.kv_scale[p0:p0 + step])  # [n, 64, D]
            vals, scale = _fp8_keys(k)  # [n, 64, D], [n, 64]
            fused[p0:p0 + step, :PAGE * prob.head_dim] = vals.view(torch.uint8).reshape(k.shape[0], -1)
            fused[p0:p0 + step, PAGE * prob.head_dim:] = scale.view(torch.uint8).reshape(k.shape[0], -1)
        self.kv = fused.view(pages, PAGE, 1, prob.head_dim + 4)
        self.weights = prob.weights[:prob.live_rows].float().contiguous()
        self.lens = prob.row_ends[:prob.live_rows].view(b, next_n).contiguous()
        self.ends = self.lens.view(-1)
        self.table = prob.block_tables[:b].contiguous()
        self.num_sms = deep_gemm.get_num_sms()
        self.meta = self.metadata()

    def metadata(self) -> torch.Tensor:
        return self.dg.get_paged_mqa_logits_metadata(self.lens, PAGE, self.num_sms)

    def __call__(self) -> torch.Tensor:
        return self.dg.fp8_fp4_paged_mqa_logits((self.q, None), self.kv, self.weights, self.lens, self.table,
                                                self.meta, self.max_seq_len)


class DeepGemmPrefillCall(_PeerCall):
    """One prefill (a single sequence) converted for the peer's contiguous kernel: the sequence's
    keys gathered in order into one E4M3 array and its scales, row r's window [0, row_ends[r]).
    The sm_90 kernel takes no schedule, so `metadata` is None."""

    metadata = None

    def __init__(self, prob: Problem, max_seq_len: int):
        import deep_gemm

        self.dg = deep_gemm
        dev = prob.q.device
        self.max_seq_len = max_seq_len
        self.q, self.q_factor = _fp8_query(prob)
        keys = torch.arange(max_seq_len, device=dev)[None]
        page, token = key_slots(prob.block_tables, torch.zeros(1, dtype=torch.long, device=dev), keys,
                                prob.page_size, prob.pages_per_block)
        k = dequantize_mxfp4(prob.kv_cache[page[0], token[0]], prob.kv_scale[page[0], token[0]])  # [N, D]
        vals, scale = _fp8_keys(k)
        self.kv = (vals.contiguous(), scale)
        self.weights = prob.weights[:prob.live_rows].float().contiguous()
        self.ks = torch.zeros(prob.live_rows, dtype=torch.int32, device=dev)
        self.ke = prob.row_ends[:prob.live_rows].to(torch.int32).contiguous()
        self.ends = self.ke

    def __call__(self) -> torch.Tensor:
        return self.dg.fp8_fp4_mqa_logits((self.q, None), self.kv, self.weights, self.ks, self.ke,
                                          self.max_seq_len)
