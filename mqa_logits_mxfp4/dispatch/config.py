"""The config: a frozen value of static bounds plus the dispatcher's pick (docs/contract.md).

mqa_logits_mxfp4_config() (dispatch/config_cache.py) builds one; make_config() is the one
constructor from a pick, used by selection, the self-check, the custom op and the tuner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..core.instance import Instance
from ..core.problem import ProblemKey
from ..core.records import RECORD_INTS


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
    canonical: bool = True        # the instance keeps the canonical order (docs/numerics.md)
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
        """A caller-held buffer for `mqa_logits_mxfp4_schedule(..., buffers=...)` (CUDA graphs):
        int32 [table_grid, RECORD_INTS] on the config's device."""
        return torch.empty((self.table_grid, RECORD_INTS), dtype=torch.int32, device=self.device)

    @property
    def guarantee(self) -> str:
        """Which numerics guarantee holds (docs/numerics.md, "Canonical and non-canonical instances")."""
        if self.key.batch_invariant:
            return ("batch_invariant: canonical instances only, bitwise identical to each other whatever "
                    "the backend, tile, mode or bounds (docs/numerics.md)")
        pick = "canonical" if self.canonical else "not canonical"
        return (f"within the tolerance (docs/contract.md): the pick may be any instance, canonical or not "
                f"(this one is {pick}); batch_invariant=True for bitwise batch invariance")

    def explain(self) -> str:
        """Which backend, instance and mode, and why (every rejected option with its reasons)."""
        head = [f"mqa_logits_mxfp4 config for {self.key!r}",
                f"  pick: backend={self.backend} instance={self.instance} mode={self.mode}"
                f" (table: pass a schedule{'; recommended' if self.recommend_schedule else ''})",
                f"  guarantee: {self.guarantee}",
                f"  source: {self.source}",
                f"  launch: table/free {self.table_grid} programs, prefill {self.prefill_grid[0]}"
                f" row groups x {self.prefill_grid[1]} parts; block_table_width {self.block_table_width}"]
        return "\n".join(head + [f"  {line}" for line in self.notes])

    def __repr__(self) -> str:
        return (f"MqaLogitsConfig({self.key!r} -> {self.backend}/{self.instance}/{self.mode})")


def make_config(key: ProblemKey, backend, inst: Instance, mode: str, source: str,
                recommend_schedule: bool = False, notes: tuple[str, ...] = ()) -> MqaLogitsConfig:
    """The config of a pick: `backend` (a Backend) sizes the grids of `inst` for `key`."""
    table_grid, prefill_grid = backend.grid_sizes(inst, key)
    return MqaLogitsConfig(key=key, backend=backend.name, instance=inst.name, mode=mode,
                           table_grid=table_grid, prefill_grid=prefill_grid, source=source,
                           recommend_schedule=recommend_schedule, canonical=inst.canonical, notes=notes)
