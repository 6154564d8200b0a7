"""Every check the op makes before any launch (nothing is written on failure); docs/contract.md
lists them ("Errors") and the caller contract check_contract() reads under MQA_LOGITS_MXFP4_DEBUG=1."""

from __future__ import annotations

import torch

from ..core.errors import InputError, ScheduleError
from ..core.outputs import OUT_DTYPES
from ..core.records import RECORD_FIELDS
from ..formats import as_uint8
from ..worksplit.rules import instance_split, schedule_records, seq_lanes
from . import registry



def check_out_dtype(out, out_dtype) -> None:
    """`out_dtype` names the dtype of an out the op allocates; with a caller's out it may only
    repeat out's dtype."""
    if out_dtype is not None and out_dtype not in OUT_DTYPES:
        raise InputError(f"out_dtype must be {' or '.join(map(str, OUT_DTYPES))}; got {out_dtype}")
    if out_dtype is not None and isinstance(out, torch.Tensor) and out.dtype != out_dtype:
        raise InputError(f"out_dtype must be None or out's dtype when out is given; got out_dtype={out_dtype} "
                         f"with out of {out.dtype}")


def as_bytes(name: str, t: torch.Tensor) -> torch.Tensor:
    """uint8 tensors pass; torch's float4_e2m1fn_x2 / float8_e8m0fnu views become uint8 views."""
    if not isinstance(t, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    try:
        return as_uint8(t)
    except TypeError:
        raise InputError(f"{name} must be uint8 (E2M1 pairs / E8M0 bytes); got {t.dtype}") from None


def _dtype(name, t, allowed):
    if not isinstance(t, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype not in allowed:
        want = " or ".join(str(a) for a in allowed)
        extra = " (int64 row_ends are rejected: pass int32)" if name == "row_ends" else ""
        raise InputError(f"{name} must be {want}{extra}; got {t.dtype}")


def _ndim(name, t, ndim, shape_doc):
    if t.dim() != ndim:
        raise InputError(f"{name} must be {ndim}-D {shape_doc}; got {t.dim()}-D {list(t.shape)}")


def reject_permuted_layout(kv_cache: torch.Tensor) -> None:
    if kv_cache.dim() == 4:
        raise InputError(f"kv_cache is 4-D {list(kv_cache.shape)}: that is an MFMA-permuted (preshuffled) "
                         "layout, which this op does not read; pass the natural layout "
                         "[num_pages, page_size, head_dim/2]")


def check_rows_tensors(cfg, query_start_loc, row_ends, row_starts=None) -> None:
    _dtype("query_start_loc", query_start_loc, (torch.int32,))
    _dtype("row_ends", row_ends, (torch.int32,))
    _ndim("query_start_loc", query_start_loc, 1, "[num_seqs + 1]")
    _ndim("row_ends", row_ends, 1, "[rows]")
    if row_starts is not None:
        _dtype("row_starts", row_starts, (torch.int32,))
        _ndim("row_starts", row_starts, 1, "[rows]")
        if row_starts.shape[0] != row_ends.shape[0]:
            raise InputError(f"row_starts must have one entry per row_ends entry ({row_ends.shape[0]}); "
                             f"got {row_starts.shape[0]}")
    num_seqs = query_start_loc.shape[0] - 1
    if num_seqs < 0:
        raise InputError("query_start_loc must have num_seqs + 1 >= 1 entries; got 0")
    if num_seqs > cfg.max_seqs:
        raise InputError(f"sequences must be <= cfg.max_seqs = {cfg.max_seqs}; got {num_seqs} "
                         f"(query_start_loc has {num_seqs + 1} entries)")
    if row_ends.shape[0] > cfg.max_rows:
        raise InputError(f"rows must be <= cfg.max_rows = {cfg.max_rows}; got {row_ends.shape[0]} (row_ends)")
    for name, t in (("query_start_loc", query_start_loc), ("row_ends", row_ends), ("row_starts", row_starts)):
        if t is None:
            continue
        if t.device != cfg.device:
            raise InputError(f"every tensor must be on the config's device {cfg.device}; {name} is on {t.device}")
        if not t.is_contiguous():
            raise InputError(f"{name} must be contiguous; got strides {tuple(t.stride())}")


def check_inputs(cfg, q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc,
                 row_ends, out, out_offsets, row_starts=None) -> None:
    """Raise InputError naming the rule and the observed value; inputs are already uint8 views."""
    _dtype("weights", weights, (torch.bfloat16, torch.float32))
    _dtype("block_tables", block_tables, (torch.int32,))
    _dtype("out", out, OUT_DTYPES)
    if out_offsets is not None:
        _dtype("out_offsets", out_offsets, (torch.int64,))

    _ndim("q", q, 3, "[rows, heads, head_dim/2]")
    _ndim("q_scale", q_scale, 3, "[rows, heads, head_dim/32]")
    reject_permuted_layout(kv_cache)
    _ndim("kv_cache", kv_cache, 3, "[num_pages, page_size, head_dim/2]")
    _ndim("kv_scale", kv_scale, 3, "[num_pages, page_size, head_dim/32]")
    _ndim("weights", weights, 2, "[>= rows, heads]")
    _ndim("block_tables", block_tables, 2, "[>= num_seqs (gather: rows), >= cfg.block_table_width]")
    if out_offsets is None:
        _ndim("out", out, 2, "[>= rows, >= cfg.max_seq_len]")
    else:
        _ndim("out", out, 1, "flat [N] (with out_offsets)")
        _ndim("out_offsets", out_offsets, 1, "[rows]")
    check_rows_tensors(cfg, query_start_loc, row_ends, row_starts)

    rows, heads, half = q.shape
    if heads != cfg.heads:
        raise InputError(f"heads must equal cfg.heads = {cfg.heads}; got {heads} (q.shape[1])")
    if 2 * half != cfg.head_dim:
        raise InputError(f"head_dim must equal cfg.head_dim = {cfg.head_dim}; got {2 * half} (2 * q.shape[2])")
    if rows > cfg.max_rows:
        raise InputError(f"rows must be <= cfg.max_rows = {cfg.max_rows}; got {rows} (q.shape[0])")
    nblk = cfg.head_dim // 32
    if tuple(q_scale.shape) != (rows, heads, nblk):
        raise InputError(f"q_scale must be [rows, heads, head_dim/32] = {[rows, heads, nblk]}; got {list(q_scale.shape)}")
    if row_ends.shape[0] != rows:
        raise InputError(f"row_ends must have one entry per q row ({rows}); got {row_ends.shape[0]}")
    num_pages, page, khalf = kv_cache.shape
    if page != cfg.page_size:
        raise InputError(f"page_size must equal cfg.page_size = {cfg.page_size}; got {page} (kv_cache.shape[1])")
    if 2 * khalf != cfg.head_dim:
        raise InputError(f"head_dim must equal cfg.head_dim = {cfg.head_dim}; got {2 * khalf} (2 * kv_cache.shape[2])")
    if tuple(kv_scale.shape) != (num_pages, page, nblk):
        raise InputError(f"kv_scale must be [num_pages, page_size, head_dim/32] = {[num_pages, page, nblk]}; "
                         f"got {list(kv_scale.shape)}")
    if weights.shape[0] < rows or weights.shape[1] != heads:
        raise InputError(f"weights must be [>= rows, heads] = [>= {rows}, {heads}]; got {list(weights.shape)}")
    if weights.stride(1) != 1:
        raise InputError(f"weights must have a contiguous last dim; got strides {tuple(weights.stride())}")
    num_seqs = query_start_loc.shape[0] - 1
    need_rows, what = (rows, "rows (gather mode)") if cfg.gather else (num_seqs, "num_seqs")
    if block_tables.shape[1] < cfg.block_table_width:
        raise InputError(f"block_tables must be at least cfg.block_table_width = {cfg.block_table_width} wide; "
                         f"got {block_tables.shape[1]}")
    if block_tables.shape[0] < need_rows:
        raise InputError(f"block_tables must have >= {what} = {need_rows} rows; got {block_tables.shape[0]}")
    if block_tables.stride(1) != 1:
        raise InputError(f"block_tables must have a contiguous last dim; got strides {tuple(block_tables.stride())}")
    if out_offsets is None:
        if out.shape[0] < rows or out.shape[1] < cfg.max_seq_len:
            raise InputError(f"out must be at least [rows, cfg.max_seq_len] = [{rows}, {cfg.max_seq_len}]; "
                             f"got {list(out.shape)}")
        if out.stride(1) != 1:
            raise InputError(f"out must have a contiguous last dim; got strides {tuple(out.stride())}")
    else:
        if out_offsets.shape[0] != rows:
            raise InputError(f"out_offsets must be [rows] = [{rows}]; got {list(out_offsets.shape)}")
        if out.stride(0) != 1:
            raise InputError(f"a flat out must be contiguous; got stride {out.stride(0)}")
    for name, t in (("q", q), ("q_scale", q_scale), ("kv_cache", kv_cache), ("kv_scale", kv_scale)):
        if not t.is_contiguous():
            raise InputError(f"{name} must be contiguous; got strides {tuple(t.stride())}")
    for name, t in (("q", q), ("q_scale", q_scale), ("kv_cache", kv_cache), ("kv_scale", kv_scale),
                    ("weights", weights), ("block_tables", block_tables), ("out", out),
                    ("out_offsets", out_offsets)):
        if t is not None and t.device != cfg.device:
            raise InputError(f"every tensor must be on the config's device {cfg.device}; {name} is on {t.device}")


def check_contract(cfg, num_pages, block_tables, query_start_loc, row_ends, out, out_offsets,
                   records=None, row_starts=None) -> None:
    """MQA_LOGITS_MXFP4_DEBUG=1: every caller rule of docs/contract.md, read on the host (syncs;
    not graph-safe). Raises InputError naming the rule and the first entry that breaks it, or
    ScheduleError for Table `records` that these row tensors no longer give."""
    qsl = query_start_loc.cpu().long()
    ends = row_ends.cpu().long()
    rows = ends.shape[0]
    if int(qsl[0]) != 0:
        raise InputError(f"query_start_loc must start at 0 and not decrease; query_start_loc[0] = {int(qsl[0])}")
    down = _first(qsl[1:] < qsl[:-1])
    if down is not None:
        raise InputError(f"query_start_loc must start at 0 and not decrease; query_start_loc[{down + 1}] = "
                         f"{int(qsl[down + 1])} < query_start_loc[{down}] = {int(qsl[down])}")
    live = int(qsl[-1])
    if live > rows:
        raise InputError(f"query_start_loc[-1] must be <= rows = {rows}; got {live}")
    ends = ends[:live]
    r = _first((ends < 0) | (ends > cfg.max_seq_len))
    if r is not None:
        raise InputError(f"row_ends must lie in [0, cfg.max_seq_len = {cfg.max_seq_len}] for live rows; "
                         f"row_ends[{r}] = {int(ends[r])}")
    seq = torch.searchsorted(qsl[1:].contiguous(), torch.arange(live), right=True)  # each live row's sequence
    r = _first((ends[1:] < ends[:-1]) & (seq[1:] == seq[:-1]))
    if r is not None:
        raise InputError(f"row_ends must not decrease along a sequence's rows; sequence {int(seq[r])} has "
                         f"row_ends[{r + 1}] = {int(ends[r + 1])} < row_ends[{r}] = {int(ends[r])}")
    starts = torch.zeros_like(ends) if row_starts is None else row_starts.cpu().long()[:live]
    r = _first((starts < 0) | (starts > ends))
    if r is not None:
        raise InputError(f"row_starts must lie in [0, row_ends[r]] for live rows; row_starts[{r}] = "
                         f"{int(starts[r])}, row_ends[{r}] = {int(ends[r])}")
    r = _first((starts[1:] < starts[:-1]) & (seq[1:] == seq[:-1]))
    if r is not None:
        raise InputError(f"row_starts must not decrease along a sequence's rows; sequence {int(seq[r])} has "
                         f"row_starts[{r + 1}] = {int(starts[r + 1])} < row_starts[{r}] = {int(starts[r])}")
    span = cfg.page_size * cfg.pages_per_block
    need = (ends + span - 1) // span
    r = _first(need > block_tables.shape[1])
    if r is not None:
        raise InputError(f"row_ends[{r}] = {int(ends[r])} needs {int(need[r])} block-table entries; "
                         f"block_tables has {block_tables.shape[1]}")
    _check_page_ids(cfg, num_pages, block_tables, qsl, starts, ends, seq)
    if out_offsets is not None and live:
        offs = out_offsets[:live].cpu()
        r = _first(offs < 0)
        if r is not None:
            raise InputError(f"out_offsets must be >= 0 for live rows; out_offsets[{r}] = {int(offs[r])}")
        r = _first(offs + ends > out.shape[0])
        if r is not None:
            raise InputError(f"out_offsets + row_ends must stay within out ({out.shape[0]} elements); row {r}: "
                             f"out_offsets[{r}] + row_ends[{r}] = {int(offs[r])} + {int(ends[r])} = "
                             f"{int(offs[r] + ends[r])}")
    if records is not None:
        _check_records(cfg, query_start_loc, row_ends, records, row_starts)


def _first(mask: torch.Tensor) -> int | None:
    """The first index where a 1-D bool mask holds, or None."""
    hit = mask.nonzero()
    return int(hit[0, 0]) if hit.numel() else None


def _check_page_ids(cfg, num_pages, block_tables, qsl, starts, ends, seq) -> None:
    """Every page a window reaches lies in [0, num_pages): per table row (a sequence, or a row in
    gather mode) the keys from its smallest row_start to its largest row_end, and for each entry
    they reach the last page of the entry that a key uses (pages of an entry ascend:
    entry * pages_per_block + 0, 1, ...). Entries wholly before the windows are never read."""
    page, ppb = cfg.page_size, cfg.pages_per_block
    span = page * ppb
    if cfg.gather:
        low, reach, who = starts, ends, "row"
    else:
        nseq = qsl.shape[0] - 1
        reach = torch.zeros(nseq, dtype=torch.long).scatter_reduce(0, seq, ends, "amax")
        low = torch.full((nseq,), 2**62, dtype=torch.long).scatter_reduce(0, seq, starts, "amin")
        who = "sequence"
    if reach.numel() == 0 or int(reach.max()) == 0:
        return
    width = int((reach.max() + span - 1) // span)
    table = block_tables[:reach.shape[0], :width].cpu().long()
    first_key = torch.arange(width) * span
    reached = ((first_key[None, :] < reach[:, None]) & (first_key[None, :] + span > low[:, None])
               & (low < reach)[:, None])
    last_key = torch.minimum(first_key[None, :] + span, reach[:, None]) - 1
    last_page = table * ppb + (last_key // page) % ppb
    bad = reached & ((table < 0) | (last_page >= num_pages))
    hit = bad.nonzero()
    if hit.numel():
        t, j = (int(x) for x in hit[0])
        entry, lo, hi = int(table[t, j]), j * span, int(last_key[t, j])
        pages = f"page {entry}" if ppb == 1 else f"pages {entry * ppb}..{int(last_page[t, j])}"
        raise InputError(f"every page id the windows reach must lie in [0, num_pages = {num_pages}); "
                         f"block_tables[{t}, {j}] = {entry} ({who} {t}, keys {lo}..{hi}) names {pages}")


def _check_records(cfg, query_start_loc, row_ends, records, row_starts=None) -> None:
    """Table records equal those worksplit/rules.py gives for the row tensors as they are now."""
    inst = next(i for i in registry.get(cfg.backend).instances() if i.name == cfg.instance)
    want = schedule_records(query_start_loc.tolist(), row_ends.tolist(), cfg.table_grid, inst.rows,
                            inst.block_n, seq_lanes(cfg.max_seqs), cfg.max_seq_len,
                            None if row_starts is None else row_starts.tolist(), instance_split(inst))
    got = records[:cfg.table_grid].tolist()
    for p, (g, w) in enumerate(zip(got, want)):
        if g != w:
            raise ScheduleError(f"the schedule's records are stale: program {p} holds {RECORD_FIELDS} = "
                                f"{tuple(g)}, query_start_loc and row_ends now give {tuple(w)}; rebuild the "
                                "schedule after changing them")
