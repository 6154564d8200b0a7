"""mqa_logits_mxfp4_config(): static bounds in, the cached decision out (the 1024 most recent)."""

from __future__ import annotations

import functools

from ..core import env
from ..core.errors import InputError
from ..core.problem import ProblemKey, device_facts, normalize_device
from .config import MqaLogitsConfig
from .select import decide

_CACHE_SIZE = 1024


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive int; got {value!r}")
    return value


def mqa_logits_mxfp4_config(device, heads: int, head_dim: int = 128, page_size: int = 64, *,
                            max_rows: int, max_seqs: int, max_qlen: int = 1, max_seq_len: int,
                            pages_per_block: int = 1, gather: bool = False,
                            batch_invariant: bool = False) -> MqaLogitsConfig:
    """Build (or fetch from the cache of 1024) the config for these static bounds.

    device: a torch.device, 'cuda' / 'cuda:N' / 'cpu' or a GPU index. Reads only Python values
    and the device's properties; picks backend, instance and the schedule-free mode (pinned by
    env > tuned table > per-arch default). batch_invariant (or MQA_LOGITS_MXFP4_BATCH_INVARIANT=1)
    admits only canonical instances, bitwise identical to each other (docs/numerics.md). Raises
    InputError for a bound that is not a positive int (batch_invariant: not a bool) or a device
    that is not there, NoBackendError / PinnedBackendError / UnknownBackendError when nothing (or
    not the pinned choice) can serve.
    """
    if batch_invariant not in (True, False):
        raise InputError(f"batch_invariant must be a bool; got {batch_invariant!r}")
    settings = env.settings()
    device = normalize_device(device)
    arch, cu_num = device_facts(device)
    key = ProblemKey(device=device, arch=arch, cu_num=cu_num,
                     heads=_positive("heads", heads), head_dim=_positive("head_dim", head_dim),
                     page_size=_positive("page_size", page_size),
                     pages_per_block=_positive("pages_per_block", pages_per_block),
                     gather=bool(gather), max_rows=_positive("max_rows", max_rows),
                     max_seqs=_positive("max_seqs", max_seqs),
                     max_qlen=_positive("max_qlen", max_qlen),
                     max_seq_len=_positive("max_seq_len", max_seq_len),
                     batch_invariant=bool(batch_invariant) or settings.batch_invariant)
    return _config_for(key, settings)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _config_for(key: ProblemKey, settings: env.Settings) -> MqaLogitsConfig:
    return decide(key, settings)


def clear_cache() -> None:
    _config_for.cache_clear()
