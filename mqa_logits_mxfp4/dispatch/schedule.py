"""Table mode's schedule: fixed-size per-program records built on the device, once a forward.

The record layout is core/records.py's, with units numbered as worksplit/rules.py states; one
kernel shared by every backend builds them (worksplit/records.py: no second copy of the split).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from ..core.errors import InputError, ScheduleError
from ..core.records import RECORD_INTS
from . import registry
from .checks import check_rows_tensors
from .config import MqaLogitsConfig


def _pick(cfg: MqaLogitsConfig) -> tuple:
    """What records depend on: the bounds, the instance and the launch's programs."""
    return cfg.key, cfg.backend, cfg.instance, cfg.table_grid


def tensor_identity(t: torch.Tensor) -> tuple:
    """What a schedule remembers of a tensor: the same storage, view and dtype."""
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t.device)


@dataclass(frozen=True, eq=False)
class MqaLogitsSchedule:
    """Records for Table mode, valid for configs with `cfg`'s bounds and pick and these row tensors."""

    cfg: MqaLogitsConfig
    records: torch.Tensor
    sources: tuple

    def check(self, cfg: MqaLogitsConfig, query_start_loc: torch.Tensor, row_ends: torch.Tensor,
              row_starts: torch.Tensor | None = None) -> None:
        if cfg is not self.cfg and _pick(cfg) != _pick(self.cfg):
            raise ScheduleError(f"schedule was built for another config: {self.cfg!r}; this call has {cfg!r}")
        now = _sources(query_start_loc, row_ends, row_starts)
        for name, built, got in zip(("query_start_loc", "row_ends", "row_starts"), self.sources, now):
            if built != got:
                was = "none" if built is None else f"(ptr {built[0]:#x}, shape {built[1]})"
                passes = "none" if got is None else f"(ptr {got[0]:#x}, shape {got[1]})"
                raise ScheduleError(f"schedule was built from other tensors: {name} was {was}, this call "
                                    f"passes {passes}")


def _sources(query_start_loc, row_ends, row_starts) -> tuple:
    return (tensor_identity(query_start_loc), tensor_identity(row_ends),
            None if row_starts is None else tensor_identity(row_starts))


def mqa_logits_mxfp4_schedule(cfg: MqaLogitsConfig, query_start_loc: torch.Tensor,
                              row_ends: torch.Tensor, buffers: torch.Tensor | None = None,
                              row_starts: torch.Tensor | None = None) -> MqaLogitsSchedule:
    """Build Table records on the device (no host read), valid for this config and these tensors.

    query_start_loc [num_seqs + 1] int32, row_ends [rows] int32 and row_starts [rows] int32 (or
    None: every window starts at key 0) on cfg.device, the same tensors every call of the
    forward passes (the work split follows the windows' lengths); `buffers`: from
    cfg.schedule_buffers() (int32 [cfg.table_grid, RECORD_INTS]), else allocated here.
    """
    if not isinstance(cfg, MqaLogitsConfig):
        raise InputError(f"cfg must be an MqaLogitsConfig from mqa_logits_mxfp4_config(); got {type(cfg).__name__}")
    check_rows_tensors(cfg, query_start_loc, row_ends, row_starts)
    want = (cfg.table_grid, RECORD_INTS)
    if buffers is None:
        buffers = cfg.schedule_buffers()
    elif not isinstance(buffers, torch.Tensor):
        raise InputError(f"buffers must be cfg.schedule_buffers() (a torch.Tensor); got {type(buffers).__name__}")
    elif (buffers.dtype != torch.int32 or tuple(buffers.shape) != want
          or buffers.device != cfg.device or not buffers.is_contiguous()):
        raise InputError(f"buffers must be cfg.schedule_buffers(): contiguous int32 {list(want)} on "
                         f"{cfg.device}; got {buffers.dtype} {list(buffers.shape)} on {buffers.device}")
    registry.get(cfg.backend).build_schedule(cfg, query_start_loc, row_ends, buffers, row_starts)
    schedule = MqaLogitsSchedule(cfg, buffers, _sources(query_start_loc, row_ends, row_starts))
    _BUILT[buffers.data_ptr()] = schedule
    return schedule


# The schedule last built into each records buffer, by address: under torch.compile the op's
# real implementation receives only the records tensor and checks the schedule found here.
_BUILT: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def schedule_of(records: torch.Tensor) -> MqaLogitsSchedule:
    """The schedule whose records these are (the last one built into this buffer)."""
    schedule = _BUILT.get(records.data_ptr())
    if schedule is None or tuple(schedule.records.shape) != tuple(records.shape):
        raise ScheduleError("these Table records come from no live schedule: pass what "
                            "mqa_logits_mxfp4_schedule() returns")
    return schedule
