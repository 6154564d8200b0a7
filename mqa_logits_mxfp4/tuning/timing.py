"""Cold-L2 timing (warm up, scratch write, median; docs/tuning.md) and ceilings.

On a GPU each sample is one call between two CUDA events, with a >= 256 MiB scratch write
before it (outside the events). The host may take longer to enqueue a call than the GPU takes
to run it; then the GPU idles between the start event and the kernel and the sample measures
the host. So a spin kernel (`torch.cuda._sleep`) sized to the host's enqueue time runs before
each start event: the host stays ahead of the GPU and every sample times the call alone.
On the CPU (the Triton interpreter) a sample is one call's wall time, with no flush.
"""

from __future__ import annotations

import statistics
import time

import torch

_SCRATCH: dict[torch.device, torch.Tensor] = {}
_CYCLES_PER_US: dict[torch.device, float] = {}
FLUSH_BYTES = 256 << 20
MAX_SPIN_US = 5000


def _flush(device: torch.device) -> None:
    if device not in _SCRATCH:
        _SCRATCH[device] = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)
    _SCRATCH[device].fill_(1)


def _cycles_per_us(device: torch.device) -> float:
    """Clock cycles of `torch.cuda._sleep` per microsecond, measured once per device (0: no sleep)."""
    if device not in _CYCLES_PER_US:
        try:
            cycles = 2_000_000
            torch.cuda._sleep(1000)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            stop.record()
            stop.synchronize()
            _CYCLES_PER_US[device] = cycles / max(start.elapsed_time(stop) * 1e3, 1e-3)
        except (AttributeError, RuntimeError):  # a torch build without the spin kernel
            _CYCLES_PER_US[device] = 0.0
    return _CYCLES_PER_US[device]


def time_samples(fn, device, iters: int = 30, warmup: int = 3) -> list[float]:
    """Microseconds of `iters` calls of `fn()`, each with a cold L2 (GPU) or wall time (CPU)."""
    device = torch.device(device)
    if device.type == "cpu":
        for _ in range(warmup):
            fn()
        out = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e6)
        return out
    with torch.cuda.device(device):
        host = []
        for _ in range(max(warmup, 2)):  # the fastest of two or more: a first call may compile
            t0 = time.perf_counter()
            fn()  # enqueue time only: no sync here
            host.append(time.perf_counter() - t0)
        torch.cuda.synchronize(device)
        # spin twice the host's enqueue time of one call, plus the event records
        spin_us = min(2 * min(host) * 1e6 + 20, MAX_SPIN_US)
        cycles = int(spin_us * _cycles_per_us(device))
        start = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        stop = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for i in range(iters):
            _flush(device)
            if cycles:
                torch.cuda._sleep(cycles)
            start[i].record()
            fn()
            stop[i].record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) * 1e3 for s, e in zip(start, stop)]


def time_us(fn, device, iters: int = 30, warmup: int = 3) -> float:
    """Median microseconds of `fn()` over `iters` calls, L2 flushed before each (not timed)."""
    return statistics.median(time_samples(fn, device, iters, warmup))


def _copy_GBps(device: torch.device, nbytes: int, iters: int) -> float:
    a = torch.empty(nbytes, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    return 2 * nbytes / time_us(lambda: b.copy_(a), device, iters=iters) / 1e3


def ceilings(device, copy_bytes: int = 1 << 30, matmul_n: int = 8192, iters: int = 10) -> dict[str, float]:
    """Copy bandwidth (GB/s, read + write) and FP8 / BF16 matmul rates (TFLOP/s), measured now.

    `fp8_TFLOPs` is missing (and `fp8_error` says why) where torch has no FP8 matmul.
    """
    device = torch.device(device)
    out = {"copy_GBps": _copy_GBps(device, copy_bytes, iters)}
    n = matmul_n
    x = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out["bf16_TFLOPs"] = 2 * n ** 3 / time_us(lambda: x @ y, device, iters=iters) / 1e6
    try:
        x8 = x.to(torch.float8_e4m3fn)
        y8 = y.to(torch.float8_e4m3fn).t().contiguous().t()
        one = torch.ones((), device=device)
        out["fp8_TFLOPs"] = 2 * n ** 3 / time_us(
            lambda: torch._scaled_mm(x8, y8, one, one, out_dtype=torch.bfloat16), device, iters=iters) / 1e6
    except Exception as e:  # no FP8 matmul on this device/torch: the floor then uses BF16
        out["fp8_error"] = f"{type(e).__name__}: {e}"
    return out
