"""What every backend provides: reasons as data, instances with attributes, one protocol."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from ..dispatch.config import ProblemKey

MODES = ("table", "free", "prefill")


@dataclass(frozen=True)
class Reason:
    """One failed rule: `check` names it, `message` says what was observed."""

    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.check}: {self.message}"


@dataclass(frozen=True)
class Instance:
    """One compiled kernel shape a backend offers; the dispatcher picks by these attributes.

    rows: rows of one sequence per tile (they share every loaded KV tile); block_n: keys per
    tile; warps/stages: launch shape; family: how the MMA is done (e.g. fp8, bf16, scaled).
    `validated_on`: arches where this project has executed the instance against the reference;
    elsewhere it self-checks on first use.
    """

    name: str
    backend: str
    family: str
    rows: int
    block_n: int
    warps: int
    stages: int
    heads: tuple[int, ...]
    page_sizes: tuple[int, ...]
    arches: tuple[str, ...]
    validated_on: tuple[str, ...]
    modes: tuple[str, ...] = MODES
    head_dims: tuple[int, ...] = (128,)
    ctas_per_sm: int = 2
    extra: tuple[tuple[str, object], ...] = field(default=())

    def validated(self, arch: str) -> bool:
        return arch in self.validated_on


@runtime_checkable
class Backend(Protocol):
    """A backend: installed-or-not is separate from fits-this-problem (SPEC section 6)."""

    name: str

    def available(self) -> Reason | None:
        """None when this backend can run in this process, else why not."""

    def instances(self) -> tuple[Instance, ...]:
        """Every instance the backend registers (on any arch)."""

    def supports(self, key: ProblemKey) -> list[Reason]:
        """Every backend-level rule the problem breaks (empty when it fits)."""

    def instance_supports(self, inst: Instance, key: ProblemKey) -> list[Reason]:
        """Every rule `inst` breaks for the problem (empty when it fits)."""

    def default_pick(self, key: ProblemKey) -> tuple[Instance, str] | None:
        """The per-arch rule: (instance, schedule-free mode) or None."""

    def launch_shape(self, inst: Instance, key: ProblemKey, mode: str) -> tuple[int, ...]:
        """Static launch shape for a mode (grid, parts)."""

    def build_schedule(self, cfg, query_start_loc: torch.Tensor, row_ends: torch.Tensor,
                       records: torch.Tensor) -> None:
        """Write Table records for `cfg` into `records` on the device (no host read)."""

    def launch(self, cfg, mode: str, q, q_scale, kv_cache, kv_scale, weights, block_tables,
               query_start_loc, row_ends, out, out_offsets, records) -> None:
        """Score on the device; inputs are already checked."""


DECODE_MAX_QLEN = 8  # up to this many rows a sequence, the default rules treat a call as decode


def rank_by_rows(cands: list[Instance], key) -> list[tuple[Instance, str]]:
    """The default rule every backend shares: decode (max_qlen <= DECODE_MAX_QLEN) takes Free with
    the fewest rows that hold a sequence's rows, then wider-first the rest; prefill takes Prefill,
    widest first. sorted() is stable, so ties keep the instance list's order."""
    if key.max_qlen <= DECODE_MAX_QLEN:
        fit = sorted((i for i in cands if i.rows >= key.max_qlen), key=lambda i: i.rows)
        rest = sorted((i for i in cands if i.rows < key.max_qlen), key=lambda i: -i.rows)
        return [(i, "free") for i in fit + rest]
    return [(i, "prefill") for i in sorted(cands, key=lambda i: -i.rows)]


def grid_sizes(inst: Instance, key) -> tuple[int, tuple[int, int]]:
    """(Table/Free programs, (Prefill row groups, parts)) from static bounds only: one program
    per CTA slot (at most the units the bounds allow); Prefill cuts each row group's key tiles
    into enough parts to fill the slots."""
    tiles = math.ceil(key.max_seq_len / inst.block_n)
    units = key.max_seqs * math.ceil(key.max_qlen / inst.rows) * tiles
    slots = 4 if key.arch == "cpu" else key.cu_num * inst.ctas_per_sm
    groups = math.ceil(key.max_rows / inst.rows)
    parts = max(1, min(tiles, math.ceil(slots / groups)))
    return max(1, min(slots, units)), (groups, parts)


MAX_COLS = 256  # rows x heads of one tile: the MMA's N and the accumulator's width


def attribute_rules(inst: Instance, key) -> list[tuple[bool, str, str]]:
    """The rules every backend checks from an instance's attributes, for ok_if()."""
    return [
        (key.arch in inst.arches, "arch", f"{inst.name} runs on {', '.join(inst.arches)}; got {key.arch}"),
        (key.heads in inst.heads, "heads", f"{inst.name} needs heads in {inst.heads}; got {key.heads}"),
        (key.head_dim in inst.head_dims, "head_dim",
         f"{inst.name} needs head_dim in {inst.head_dims}; got {key.head_dim}"),
        (key.page_size in inst.page_sizes, "page_size",
         f"{inst.name} needs page_size in {inst.page_sizes}; got {key.page_size}"),
        (inst.rows * key.heads <= MAX_COLS, "tile",
         f"{inst.name} needs rows x heads <= {MAX_COLS}; got {inst.rows} x {key.heads}"),
        (not key.gather or inst.rows == 1, "gather",
         f"gather mode needs a one-row instance (each row has its own table); {inst.name} has {inst.rows}"),
    ]


def ok_if(rules: list[tuple[bool, str, str]]) -> list[Reason]:
    """Reasons for the rules whose condition is False: [(holds, check, message), ...]."""
    return [Reason(check, msg) for holds, check, msg in rules if not holds]
