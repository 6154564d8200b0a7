"""What every backend provides (the protocol the dispatcher calls) and what they share.

Backends import core/ and worksplit/, never dispatch/ (tests/test_structure.py checks it).
"""

from __future__ import annotations

import abc
import math
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..core.instance import Instance, Reason, ok_if
from ..core.modes import is_decode
from ..core.problem import ProblemKey
from ..worksplit.records import build_records
from ..worksplit.rules import instance_split

if TYPE_CHECKING:
    import torch


@runtime_checkable
class Backend(Protocol):
    """A backend, as dispatch/ and tuning/ use it. "Installed" (available) is apart from "fits
    this problem" (supports, instance_supports); docs/adding-an-instance.md says how to add one."""

    name: str

    def available(self) -> Reason | None:
        """None when this backend can run in this process, else why not."""

    def instances(self) -> tuple[Instance, ...]:
        """Every instance the backend registers (on any arch)."""

    def supports(self, key: ProblemKey) -> list[Reason]:
        """Every backend-level rule the problem breaks (empty when it fits)."""

    def instance_supports(self, inst: Instance, key: ProblemKey) -> list[Reason]:
        """Every rule `inst` breaks for the problem (empty when it fits)."""

    def ranked_picks(self, key: ProblemKey) -> list[tuple[Instance, str]]:
        """The per-arch default rule: fitting (instance, schedule-free mode) pairs, best first."""

    def grid_sizes(self, inst: Instance, key: ProblemKey) -> tuple[int, tuple[int, int]]:
        """(Table/Free programs, (Prefill row groups, parts)) from static bounds only."""

    def build_schedule(self, cfg, query_start_loc: torch.Tensor, row_ends: torch.Tensor,
                       records: torch.Tensor, row_starts: torch.Tensor | None = None) -> None:
        """Write Table records for `cfg` into `records` on the device (no host read)."""

    def launch(self, cfg, mode: str, q, q_scale, kv_cache, kv_scale, weights, block_tables,
               query_start_loc, row_ends, out, out_offsets, records, row_starts=None) -> None:
        """Score on the device; inputs are already checked. `out` is float32, bfloat16 or
        float16 (a narrow out gets the float32 result rounded once to nearest); `row_starts`
        None or int32 [rows]: row r scores keys [row_starts[r], row_ends[r]) (worksplit/rules.py)."""

    offers_launcher: bool  # launcher() may offer a hot path: the op asks again while it returns None

    def launcher(self, cfg, mode: str):
        """The op's hot path for one config and mode (docs/contract.md, "Host cost"), or None: an
        object whose `run(q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc,
        row_ends, out, out_offsets, records, row_starts)` launches a call whose input signature it
        accepted and returns False (nothing launched) for any other, and whose `accept(...)` (the
        same arguments) remembers a signature the op's checks passed."""


class BackendBase(abc.ABC):
    """What the backends share: instance lookup, the attribute rules, the grid sizes and the
    Table records (one kernel for all, worksplit/records.py). A backend sets `name` and
    implements available, instances, supports, ranked_picks and launch."""

    name: str

    @abc.abstractmethod
    def instances(self) -> tuple[Instance, ...]:
        """Every instance the backend registers (on any arch)."""

    def instance_supports(self, inst: Instance, key: ProblemKey) -> list[Reason]:
        return ok_if(attribute_rules(inst, key), inst.name)

    def grid_sizes(self, inst: Instance, key: ProblemKey) -> tuple[int, tuple[int, int]]:
        return grid_sizes(inst, key)

    def build_schedule(self, cfg, query_start_loc, row_ends, records, row_starts=None) -> None:
        inst = self._instance(cfg.instance)
        build_records(query_start_loc, row_ends, records, programs=cfg.table_grid, rows=inst.rows,
                      block_n=inst.block_n, max_seqs=cfg.max_seqs, max_seq_len=cfg.max_seq_len,
                      row_starts=row_starts, split=instance_split(inst))

    offers_launcher = False  # no hot path: the op caches this None once

    def launcher(self, cfg, mode: str):
        return None

    def _instance(self, name: str) -> Instance:
        """The instance of that name (every launch asks: a name index, remade only when
        instances() returns another tuple)."""
        insts = self.instances()
        index = self.__dict__.get("_by_name")
        if index is None or index[0] is not insts:
            index = self._by_name = (insts, {i.name: i for i in insts})
        return index[1][name]


def rank_by_rows(cands: list[Instance], key) -> list[tuple[Instance, str]]:
    """The default rule every backend shares: decode (core/modes.py's is_decode) takes Free with
    the fewest rows that hold a sequence's rows, then wider-first the rest; prefill takes Prefill,
    widest first. sorted() is stable, so ties keep the instance list's order."""
    if is_decode(key.max_qlen):
        fit = sorted((i for i in cands if i.rows >= key.max_qlen), key=lambda i: i.rows)
        rest = sorted((i for i in cands if i.rows < key.max_qlen), key=lambda i: -i.rows)
        return [(i, "free") for i in fit + rest]
    return [(i, "prefill") for i in sorted(cands, key=lambda i: -i.rows)]


def grid_sizes(inst: Instance, key) -> tuple[int, tuple[int, int]]:
    """(Table/Free programs, (Prefill row groups, parts)) from static bounds only: one program
    per CTA slot (at most one a (row group, key tile) the bounds allow); Prefill cuts each row
    group's key tiles into enough parts to fill the slots."""
    tiles = math.ceil(key.max_seq_len / inst.block_n)
    group_tiles = key.max_seqs * math.ceil(key.max_qlen / inst.rows) * tiles
    slots = 4 if key.arch == "cpu" else key.cu_num * inst.ctas_per_sm
    groups = math.ceil(key.max_rows / inst.rows)
    parts = max(1, min(tiles, math.ceil(slots / groups)))
    return max(1, min(slots, group_tiles)), (groups, parts)


MAX_COLS = 256  # rows x heads of one tile: the MMA's N and the accumulator's width


def attribute_rules(inst: Instance, key) -> list[tuple[bool, str, str]]:
    """The rules every backend checks from an instance's attributes, for ok_if(rules, inst.name)."""
    return [
        (key.arch in inst.arches, "arch", f"runs on {', '.join(inst.arches)}; got {key.arch}"),
        (key.heads in inst.heads, "heads", f"needs heads in {inst.heads}; got {key.heads}"),
        (key.head_dim in inst.head_dims, "head_dim", f"needs head_dim in {inst.head_dims}; got {key.head_dim}"),
        (key.page_size in inst.page_sizes, "page_size",
         f"needs page_size in {inst.page_sizes}; got {key.page_size}"),
        (inst.rows * key.heads <= MAX_COLS, "tile",
         f"needs rows x heads <= {MAX_COLS}; got {inst.rows} x {key.heads}"),
        (not key.gather or inst.rows == 1, "gather",
         f"has {inst.rows} rows; gather mode needs a one-row instance (each row has its own table)"),
        (not key.batch_invariant or inst.canonical, "batch_invariant", "is not canonical (docs/numerics.md)"),
    ]
