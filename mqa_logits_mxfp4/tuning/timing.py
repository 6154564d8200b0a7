"""Cold-L2 CUDA-event timing (shared/notes/PERFORMANCE.md: warm up, scratch write, median)."""

from __future__ import annotations

import statistics

import torch

_SCRATCH: dict[torch.device, torch.Tensor] = {}


def _flush(device: torch.device) -> None:
    if device not in _SCRATCH:
        _SCRATCH[device] = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    _SCRATCH[device].fill_(1)


def time_us(fn, device, iters: int = 30, warmup: int = 3) -> float:
    """Median microseconds of `fn()` over `iters` calls, L2 flushed before each (not timed)."""
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stop = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        _flush(device)
        start[i].record()
        fn()
        stop[i].record()
    torch.cuda.synchronize(device)
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(start, stop))


def ceilings(device) -> dict[str, float]:
    """Copy bandwidth (GB/s, read + write) and FP8 / BF16 matmul rates (TFLOP/s), measured now."""
    device = torch.device(device)
    a = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    us = time_us(lambda: b.copy_(a), device, iters=10)
    out = {"copy_GBps": 2 * a.numel() / us / 1e3}
    del a, b
    n = 8192
    x = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out["bf16_TFLOPs"] = 2 * n ** 3 / time_us(lambda: x @ y, device, iters=10) / 1e6
    try:
        x8 = x.to(torch.float8_e4m3fn)
        y8 = y.to(torch.float8_e4m3fn).t().contiguous().t()
        one = torch.ones((), device=device)
        out["fp8_TFLOPs"] = 2 * n ** 3 / time_us(
            lambda: torch._scaled_mm(x8, y8, one, one, out_dtype=torch.bfloat16), device, iters=10) / 1e6
    except Exception as e:  # no FP8 matmul on this device/torch
        out["fp8_error"] = str(e)
    return out
