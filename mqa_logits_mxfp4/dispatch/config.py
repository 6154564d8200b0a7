"""The config: a frozen value of static bounds plus the dispatcher's pick (SPEC section 4)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch

from . import env
from .errors import InputError

_CACHE_SIZE = 1024


@functools.cache
def device_facts(device: torch.device) -> tuple[str, int]:
    """(arch, compute units) of a device: 'sm_90' / 'gfx950' / ..., or ('cpu', 1)."""
    if device.type == "cpu":
        return "cpu", 1
    props = torch.cuda.get_device_properties(device)
    if getattr(torch.version, "hip", None):
        arch = props.gcnArchName.split(":")[0]
    else:
        arch = f"sm_{props.major}{props.minor}"
    return arch, props.multi_processor_count


def normalize_device(device) -> torch.device:
    if isinstance(device, int):
        device = torch.device("cuda", device)
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type not in ("cpu", "cuda"):
        raise InputError(f"device must be a CUDA/ROCm GPU or the CPU; got {device}")
    return device


@dataclass(frozen=True)
class ProblemKey:
    """Everything selection may look at: the device's arch and the call's static bounds."""

    device: torch.device
    arch: str
    cu_num: int
    heads: int
    head_dim: int
    page_size: int
    pages_per_block: int
    gather: bool
    max_rows: int
    max_seqs: int
    max_qlen: int
    max_seq_len: int

    @property
    def block_table_width(self) -> int:
        return math.ceil(self.max_seq_len / (self.page_size * self.pages_per_block))

    def __repr__(self) -> str:
        g = ", gather" if self.gather else ""
        return (f"{self.arch}/{self.cu_num}: H{self.heads} D{self.head_dim} page {self.page_size}"
                f"x{self.pages_per_block}{g}, rows<={self.max_rows} seqs<={self.max_seqs} "
                f"qlen<={self.max_qlen} seq_len<={self.max_seq_len}")


@dataclass(frozen=True)
class MqaLogitsConfig:
    """Static bounds and the pick. Holds no device memory; compares by bounds and pick."""

    key: ProblemKey
    backend: str
    instance: str
    mode: str                     # schedule-free mode: 'free' or 'prefill'
    table_grid: int               # programs of a Table / Free launch (= schedule records)
    prefill_grid: tuple[int, int]  # (row groups, parts) of a Prefill launch
    source: str                   # pinned / tuned / default, with details
    recommend_schedule: bool
    notes: tuple[str, ...] = field(default=(), compare=False, hash=False)

    def __getattr__(self, name):  # heads, max_seq_len, ... read through to the key
        if name != "key" and name in ProblemKey.__dataclass_fields__:
            return getattr(self.key, name)
        raise AttributeError(name)

    @property
    def device(self) -> torch.device:
        return self.key.device

    @property
    def block_table_width(self) -> int:
        """The minimum `block_tables.shape[1]` this config accepts."""
        return self.key.block_table_width

    def schedule_buffers(self) -> torch.Tensor:
        """A caller-held buffer for `mqa_logits_mxfp4_schedule(..., buffers=...)` (CUDA graphs)."""
        from .schedule import RECORD_INTS
        return torch.empty((self.table_grid, RECORD_INTS), dtype=torch.int32, device=self.device)

    def explain(self) -> str:
        """Which backend, instance and mode, and why (every rejected option with its reasons)."""
        head = [f"mqa_logits_mxfp4 config for {self.key!r}",
                f"  pick: backend={self.backend} instance={self.instance} mode={self.mode}"
                f" (table: pass a schedule{'; recommended' if self.recommend_schedule else ''})",
                f"  source: {self.source}",
                f"  launch: table/free {self.table_grid} programs, prefill {self.prefill_grid[0]}"
                f" row groups x {self.prefill_grid[1]} parts; block_table_width {self.block_table_width}"]
        return "\n".join(head + [f"  {line}" for line in self.notes])

    def __repr__(self) -> str:
        return (f"MqaLogitsConfig({self.key!r} -> {self.backend}/{self.instance}/{self.mode})")


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive int; got {value!r}")
    return value


def mqa_logits_mxfp4_config(device, heads: int, head_dim: int = 128, page_size: int = 64, *,
                            max_rows: int, max_seqs: int, max_qlen: int = 1, max_seq_len: int,
                            pages_per_block: int = 1, gather: bool = False) -> MqaLogitsConfig:
    """Build (or fetch from the cache of 1024) the config for these static bounds.

    Reads only Python values and the device's properties; picks backend, instance and the
    schedule-free mode (pinned by env > tuned table > per-arch default).
    """
    device = normalize_device(device)
    arch, cu_num = device_facts(device)
    key = ProblemKey(device=device, arch=arch, cu_num=cu_num,
                     heads=_positive("heads", heads), head_dim=_positive("head_dim", head_dim),
                     page_size=_positive("page_size", page_size),
                     pages_per_block=_positive("pages_per_block", pages_per_block),
                     gather=bool(gather), max_rows=_positive("max_rows", max_rows),
                     max_seqs=_positive("max_seqs", max_seqs),
                     max_qlen=_positive("max_qlen", max_qlen),
                     max_seq_len=_positive("max_seq_len", max_seq_len))
    return _config_for(key, env.settings())


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _config_for(key: ProblemKey, settings: env.Settings) -> MqaLogitsConfig:
    from .select import decide
    return decide(key, settings)


def clear_cache() -> None:
    _config_for.cache_clear()
