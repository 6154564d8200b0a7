"""mqa_logits_mxfp4: DeepSeek-V4/V4.1 indexer logits over an MXFP4 paged KV cache.

    cfg = mqa_logits_mxfp4_config(device, heads=64, page_size=64, max_rows=..., max_seqs=...,
                                  max_qlen=1, max_seq_len=...)
    out = mqa_logits_mxfp4(q, q_scale, kv_cache, kv_scale, weights, block_tables,
                           query_start_loc, row_ends, cfg=cfg)

docs/contract.md is the contract these names keep (its version is __version__).
"""

from .core import env as _env
from .core.errors import (CaptureError, InputError, MqaLogitsError, NoBackendError, PinnedBackendError,
                          ScheduleError, TableError, UnknownBackendError)
from .dispatch import config_cache as _config_cache
from .dispatch import select as _select
from .dispatch import table as _table
from .dispatch.api import mqa_logits_mxfp4
from .dispatch.bands import band_rows, mqa_logits_mxfp4_bands
from .dispatch.config import MqaLogitsConfig
from .dispatch.config_cache import mqa_logits_mxfp4_config
from .dispatch.schedule import MqaLogitsSchedule, mqa_logits_mxfp4_schedule
from .formats import dequantize_mxfp4, quantize_mxfp4

__version__ = "0.2.0"  # pyproject.toml reads it from here; docs/contract.md carries the same


def reload() -> None:
    """Re-read MQA_LOGITS_MXFP4_* and drop every cache built from them."""
    _env.settings.cache_clear()
    _config_cache.clear_cache()
    _table.clear_cache()
    _select.clear_cache()


def explain(device, **bounds) -> str:
    """The decision for these bounds (same arguments as mqa_logits_mxfp4_config)."""
    return mqa_logits_mxfp4_config(device, **bounds).explain()


__all__ = [
    "mqa_logits_mxfp4", "mqa_logits_mxfp4_config", "mqa_logits_mxfp4_schedule", "mqa_logits_mxfp4_bands",
    "band_rows", "MqaLogitsConfig",
    "MqaLogitsSchedule", "quantize_mxfp4", "dequantize_mxfp4", "reload", "explain",
    "MqaLogitsError", "InputError", "ScheduleError", "NoBackendError", "PinnedBackendError",
    "UnknownBackendError", "TableError", "CaptureError", "__version__",
]
