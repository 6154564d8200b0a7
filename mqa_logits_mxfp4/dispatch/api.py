"""The op: checks, then one launch of the configured backend; also a torch custom op."""

from __future__ import annotations

from typing import Optional

import torch

from ..core import env
from ..core.errors import InputError, ScheduleError
from ..core.problem import ProblemKey, device_facts
from . import registry
from ..core.outputs import OUT_DTYPES
from .checks import as_bytes, check_contract, check_inputs, check_out_dtype, reject_permuted_layout
from .config import MqaLogitsConfig, make_config
from .config_cache import mqa_logits_mxfp4_config
from .schedule import MqaLogitsSchedule, schedule_of


def config_from_tensors(q, kv_cache, block_tables, query_start_loc, out) -> MqaLogitsConfig:
    """cfg=None: bounds from shapes (max_qlen = rows, max_seq_len = out width or table span)."""
    for name, t, nd in (("q", q, 3), ("kv_cache", kv_cache, 3), ("block_tables", block_tables, 2),
                        ("query_start_loc", query_start_loc, 1)):
        if t.dim() != nd:
            raise InputError(f"{name} must be {nd}-D; got {t.dim()}-D {list(t.shape)}")
    rows, heads, half = q.shape
    page = kv_cache.shape[1]
    seq_len = out.shape[1] if out is not None and out.dim() == 2 else block_tables.shape[1] * page
    return mqa_logits_mxfp4_config(q.device, heads=heads, head_dim=2 * half, page_size=page,
                                   max_rows=max(rows, 1), max_seqs=max(query_start_loc.shape[0] - 1, 1),
                                   max_qlen=max(rows, 1), max_seq_len=max(seq_len, 1))


# Input signatures check_inputs accepted, per config: every check reads only dtypes, shapes,
# strides and devices (never data), so a call whose signature passed before skips them. This
# is most of the op's host time (docs/perf-notes.md).
_ACCEPTED: dict[tuple, MqaLogitsConfig] = {}
_ACCEPTED_MAX = 4096


def _accept(sig, cfg) -> None:
    """Remember a signature that passed check_inputs (the entry holds the config, so its id()
    is not reused while the entry lives)."""
    if sig is None:
        return
    if len(_ACCEPTED) >= _ACCEPTED_MAX:
        _ACCEPTED.clear()
    _ACCEPTED[sig] = cfg


# The backends' hot paths (BackendBase.launcher), per config and mode, keyed as _ACCEPTED is.
_LAUNCHERS: dict[tuple[int, str], tuple] = {}


def _launcher(cfg, mode: str):
    """The backend's hot path for this config and mode, or None."""
    entry = _LAUNCHERS.get((id(cfg), mode))
    if entry is None:
        be = registry.get(cfg.backend)
        fast = be.launcher(cfg, mode)
        if fast is None and be.offers_launcher:
            return None  # not yet (opus: before its extension is loaded); asked again next call
        if len(_LAUNCHERS) >= _ACCEPTED_MAX:
            _LAUNCHERS.clear()
        entry = _LAUNCHERS[(id(cfg), mode)] = (cfg, fast)
    return entry[1]


def _signature(token, tensors) -> tuple | None:
    try:
        return (token, *[None if t is None else (t.dtype, t.shape, t.stride(), t.device) for t in tensors])
    except AttributeError:  # not a tensor: the full checks name it
        return None


def mqa_logits_mxfp4(q: torch.Tensor, q_scale: torch.Tensor, kv_cache: torch.Tensor,
                     kv_scale: torch.Tensor, weights: torch.Tensor, block_tables: torch.Tensor,
                     query_start_loc: torch.Tensor, row_ends: torch.Tensor, *,
                     cfg: MqaLogitsConfig | None = None, schedule: MqaLogitsSchedule | None = None,
                     out: torch.Tensor | None = None, out_offsets: torch.Tensor | None = None,
                     row_starts: torch.Tensor | None = None, out_dtype: torch.dtype | None = None
                     ) -> torch.Tensor:
    """Indexer logits `out[r, n]` for keys row_starts[r] <= n < row_ends[r] of every live row
    (docs/contract.md).

    q [rows, H, D/2] u8, q_scale [rows, H, D/32] u8, kv_cache [pages, page_size, D/2] u8,
    kv_scale [pages, page_size, D/32] u8, weights [>= rows, H] bf16/fp32, block_tables int32,
    query_start_loc [num_seqs + 1] int32, row_ends [rows] int32, row_starts [rows] int32 or None
    (all zero). Returns `out`: the caller's (float32, bfloat16 or float16), or one allocated here
    ([rows, cfg.max_seq_len] of `out_dtype`, float32 when None, filled with -inf outside windows).
    A narrow out holds the float32 result rounded once to nearest.
    """
    if schedule is not None and not isinstance(schedule, MqaLogitsSchedule):
        raise ScheduleError(f"schedule must be what mqa_logits_mxfp4_schedule() returns (an MqaLogitsSchedule); "
                            f"got {type(schedule).__module__}.{type(schedule).__name__} (a buffer from "
                            "cfg.schedule_buffers() goes to mqa_logits_mxfp4_schedule(..., buffers=...))")
    compiling = torch.compiler.is_compiling()
    records = schedule.records if schedule is not None else None
    fast = None
    if not compiling and isinstance(cfg, MqaLogitsConfig) and out is not None and not env.settings().debug:
        # the hot path: a signature this config's launcher accepted before launches from C++
        fast = _launcher(cfg, "table" if schedule is not None else cfg.mode)
        if fast is not None:
            if out_dtype is not None:
                check_out_dtype(out, out_dtype)
            if schedule is not None:
                schedule.check(cfg, query_start_loc, row_ends, row_starts)
            try:
                if fast.run(q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends,
                            out, out_offsets, records, row_starts):
                    return out
            except TypeError:  # an argument is not a tensor: the checks below name it
                pass
            except ValueError as e:  # the launcher's own checks (a signature it accepted, new data)
                raise InputError(str(e)) from None
    tensors = (q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends, out, out_offsets,
               row_starts)
    sig = None if compiling or cfg is None or out is None else _signature(id(cfg), tensors)
    if sig is not None and sig in _ACCEPTED:  # these exact shapes, strides, dtypes and devices passed before
        if out_dtype is not None and fast is None:  # (the hot path's attempt checked it already)
            check_out_dtype(out, out_dtype)
        if not q.dtype == q_scale.dtype == kv_cache.dtype == kv_scale.dtype == torch.uint8:
            q, q_scale, kv_cache, kv_scale = (as_bytes("", t) for t in (q, q_scale, kv_cache, kv_scale))
        alloc = False
    elif compiling:  # the trace only records the call: the op's real implementation checks it
        cfg, out, alloc = _trace_setup(q, kv_cache, block_tables, query_start_loc, cfg, out, out_offsets, out_dtype)
    else:
        q, q_scale = as_bytes("q", q), as_bytes("q_scale", q_scale)
        kv_cache, kv_scale = as_bytes("kv_cache", kv_cache), as_bytes("kv_scale", kv_scale)
        reject_permuted_layout(kv_cache)
        cfg, out, alloc = _trace_setup(q, kv_cache, block_tables, query_start_loc, cfg, out, out_offsets, out_dtype)
        check_inputs(cfg, q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc,
                     row_ends, out, out_offsets, row_starts)
        _accept(sig, cfg)
    if fast is not None:  # the checks passed (before, or just now): the hot path takes this signature next
        fast.accept(q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends, out,
                    out_offsets, records, row_starts)
    if not compiling:  # under torch.compile the op's real implementation makes these checks
        if schedule is not None and fast is None:  # (the hot path's attempt checked it already)
            schedule.check(cfg, query_start_loc, row_ends, row_starts)
        if env.settings().debug:
            check_contract(cfg, kv_cache.shape[0], block_tables, query_start_loc, row_ends, out, out_offsets,
                           schedule.records if schedule is not None else None, row_starts)
    if alloc:
        out.fill_(float("-inf"))
    mode = "table" if schedule is not None else cfg.mode
    if compiling:
        k = cfg.key
        torch.ops.mqa_logits_mxfp4.mqa_logits_mxfp4(
            q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends,
            out, out_offsets, records, row_starts,
            [k.heads, k.head_dim, k.page_size, k.pages_per_block, int(k.gather), k.max_rows,
             k.max_seqs, k.max_qlen, k.max_seq_len, int(k.batch_invariant)], cfg.backend, cfg.instance, mode)
    else:
        registry.get(cfg.backend).launch(cfg, mode, q, q_scale, kv_cache, kv_scale, weights,
                                         block_tables, query_start_loc, row_ends, out,
                                         out_offsets, records, row_starts)
    return out


def _trace_setup(q, kv_cache, block_tables, query_start_loc, cfg, out, out_offsets, out_dtype):
    """What a call needs before its checks, from shapes only (all a torch.compile trace does):
    the config, and the out the op allocates. Returns (cfg, out, alloc)."""
    check_out_dtype(out, out_dtype)
    if cfg is None:
        cfg = config_from_tensors(q, kv_cache, block_tables, query_start_loc, out)
    if out_offsets is not None and out is None:
        raise InputError(f"out_offsets needs a caller-provided flat out ({', '.join(map(str, OUT_DTYPES))}); "
                         "got out=None")
    alloc = out is None
    if alloc:
        out = torch.empty((q.shape[0] if q.dim() == 3 else 0, cfg.max_seq_len),
                          dtype=out_dtype or torch.float32, device=cfg.device)
    return cfg, out, alloc


def _op_checks(cfg, q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends,
               out, out_offsets, records, row_starts):
    """Every check of the eager path, on the real tensors the custom op receives (a signature
    that passed before skips check_inputs, as there). Returns the uint8 views of the byte tensors."""
    tensors = (q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends, out, out_offsets,
               row_starts)
    sig = _signature((cfg.key, cfg.backend, cfg.instance), tensors)
    q, q_scale = as_bytes("q", q), as_bytes("q_scale", q_scale)
    kv_cache, kv_scale = as_bytes("kv_cache", kv_cache), as_bytes("kv_scale", kv_scale)
    if sig is None or sig not in _ACCEPTED:
        reject_permuted_layout(kv_cache)
        check_inputs(cfg, q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc,
                     row_ends, out, out_offsets, row_starts)
        _accept(sig, cfg)
    if records is not None:
        schedule_of(records).check(cfg, query_start_loc, row_ends, row_starts)
    if env.settings().debug:
        check_contract(cfg, kv_cache.shape[0], block_tables, query_start_loc, row_ends, out, out_offsets, records,
                       row_starts)
    return q, q_scale, kv_cache, kv_scale


@torch.library.custom_op("mqa_logits_mxfp4::mqa_logits_mxfp4", mutates_args=("out",))
def _custom_op(q: torch.Tensor, q_scale: torch.Tensor, kv_cache: torch.Tensor,
               kv_scale: torch.Tensor, weights: torch.Tensor, block_tables: torch.Tensor,
               query_start_loc: torch.Tensor, row_ends: torch.Tensor, out: torch.Tensor,
               out_offsets: Optional[torch.Tensor], records: Optional[torch.Tensor],
               row_starts: Optional[torch.Tensor],
               bounds: list[int], backend: str, instance: str, schedule_mode: str) -> None:
    """The op under torch.compile: every check runs here, on the real tensors (the trace only
    records the call), so an InputError or ScheduleError reaches the caller as itself; bounds are
    the config key's ints."""
    heads, head_dim, page, ppb, gather, max_rows, max_seqs, max_qlen, max_seq_len, batch_invariant = bounds
    arch, cu_num = device_facts(out.device)
    key = ProblemKey(out.device, arch, cu_num, heads, head_dim, page, ppb, bool(gather), max_rows,
                     max_seqs, max_qlen, max_seq_len, bool(batch_invariant))
    be = registry.get(backend)
    inst = next(i for i in be.instances() if i.name == instance)
    cfg = make_config(key, be, inst, "prefill" if schedule_mode == "prefill" else "free", "custom op")
    q, q_scale, kv_cache, kv_scale = _op_checks(cfg, q, q_scale, kv_cache, kv_scale, weights, block_tables,
                                                query_start_loc, row_ends, out, out_offsets, records, row_starts)
    be.launch(cfg, schedule_mode, q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc,
              row_ends, out, out_offsets, records, row_starts)


@_custom_op.register_fake
def _(q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends, out,
      out_offsets, records, row_starts, bounds, backend, instance, schedule_mode) -> None:
    return None
