"""Float64 reference, magnitude bound and canonical float32 evaluation (docs/numerics.md).

Device-agnostic torch code for tests, the tuner and the self-check. It reads small device data
on the host (row counts, row ends) and is never on the op's path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .formats import BLOCK, as_uint8, e2m1_decode, e8m0_to_float, unpack_e2m1

_CHUNK_BYTES = 256 << 20  # float64 temporaries per tile, roughly


@dataclass(frozen=True)
class Reference:
    """Reference results for live rows; every tensor is [live_rows, max_seq_len], 0 outside windows."""

    ref: torch.Tensor  # float64: the formula, evaluated in float64 (NaN/Inf where the formula is)
    bound: torch.Tensor  # float64: A, the formula with |products|, |weights| and no relu
    fp32: torch.Tensor  # float32: the canonical float32 evaluation (docs/numerics.md steps 1-5)
    window: torch.Tensor  # bool: row_starts[r] <= key n < row_ends[r]


def key_slots(block_tables: torch.Tensor, table_rows: torch.Tensor, keys: torch.Tensor,
              page_size: int, pages_per_block: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Where keys live: table_rows int64 [R], keys int64 [R, N] -> (page int64 [R, N], token int64 [R, N]).

    Every key must be covered by the table (callers mask keys outside windows first).
    """
    entry = keys // (page_size * pages_per_block)
    block = block_tables[table_rows.unsqueeze(-1), entry].long()
    page = block * pages_per_block + (keys // page_size) % pages_per_block
    return page, keys % page_size


def row_sequences(query_start_loc: torch.Tensor, live_rows: int) -> torch.Tensor:
    """int64 [live_rows]: the sequence b with query_start_loc[b] <= r < query_start_loc[b + 1]."""
    qsl = query_start_loc.long()
    rows = torch.arange(live_rows, device=qsl.device)
    return torch.searchsorted(qsl[1:].contiguous(), rows, right=True)


def _relu(x: torch.Tensor) -> torch.Tensor:
    return torch.maximum(x, torch.zeros((), dtype=x.dtype, device=x.device))  # propagates NaN


def _head_tree_fp32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Step 5: x float32 [R, H, N], w float32 [R, H, 1] -> float32 [R, N].

    fma(a, b, c) is a * b exactly in float64 plus c, rounded to float64 and then to float32;
    IEEE specials (inf * 0, inf - inf) come out as a true fma gives them.
    """
    half = x.shape[1] // 2
    high = x[:, half:] * w[:, half:]
    v = (x[:, :half].double() * w[:, :half].double() + high.double()).float()
    while v.shape[1] > 1:
        m = v.shape[1] // 2
        v = v[:, :m] + v[:, m:]
    return v[:, 0]


def mqa_logits_reference(q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends,
                         *, max_seq_len: int, pages_per_block: int = 1, gather: bool = False,
                         row_starts: torch.Tensor | None = None, chunk_bytes: int = _CHUNK_BYTES) -> Reference:
    """Evaluate the op for rows 0 .. query_start_loc[-1] - 1 and keys 0 .. max_seq_len - 1.

    Shapes and dtypes as in docs/contract.md ("Tensors") (uint8 or float4/e8m0 views; weights bf16/fp32;
    row_starts int32 [rows] or None). Results live on q's device. Raises ValueError when a window
    leaves max_seq_len or the table, or starts outside [0, its row_end].
    """
    q, q_scale, kv_cache, kv_scale = (as_uint8(t) for t in (q, q_scale, kv_cache, kv_scale))
    device = q.device
    rows_total, heads, half_dim = q.shape
    head_dim, page_size = 2 * half_dim, kv_cache.shape[1]
    nblk = head_dim // BLOCK
    if heads < 2 or heads & (heads - 1):
        raise ValueError(f"the head-sum tree needs a power-of-two head count >= 2; got {heads}")
    live_rows = int(query_start_loc[-1])
    ends = row_ends[:live_rows].to(device=device, dtype=torch.int64)
    ends_host = ends.tolist()
    span = page_size * pages_per_block
    if ends_host and max(ends_host) > max_seq_len:
        raise ValueError(f"row_ends must be <= max_seq_len={max_seq_len}; got {max(ends_host)}")
    if ends_host and -(-max(ends_host) // span) > block_tables.shape[1]:
        raise ValueError(f"a window of {max(ends_host)} keys needs {-(-max(ends_host) // span)} table "
                         f"columns; block_tables has {block_tables.shape[1]}")

    starts = (torch.zeros_like(ends) if row_starts is None
              else row_starts[:live_rows].to(device=device, dtype=torch.int64))
    bad = ((starts < 0) | (starts > ends)).nonzero()
    if bad.numel():
        r = int(bad[0, 0])
        raise ValueError(f"row_starts must lie in [0, row_ends[r]]; row {r}: start {int(starts[r])}, end {int(ends[r])}")
    starts_host = starts.tolist()

    table_rows = (torch.arange(live_rows, device=device) if gather
                  else row_sequences(query_start_loc.to(device), live_rows))
    keys = torch.arange(max_seq_len, device=device)
    window = (keys.unsqueeze(0) < ends.unsqueeze(1)) & (keys.unsqueeze(0) >= starts.unsqueeze(1))
    ref = torch.zeros(live_rows, max_seq_len, dtype=torch.float64, device=device)
    bound = torch.zeros_like(ref)
    fp32 = torch.zeros(live_rows, max_seq_len, dtype=torch.float32, device=device)

    # The float64 [rows, blocks, heads, keys] tensors dominate a tile's memory.
    cells = max(1, chunk_bytes // (8 * (10 * heads * nblk + 4 * head_dim)))
    key_chunk = max(1, min(max_seq_len, max(256, cells // 16), cells))
    row_chunk = max(1, cells // key_chunk)
    w64_all = weights[:live_rows].to(device=device, dtype=torch.float64)
    num_pages = kv_cache.shape[0]

    for r0 in range(0, live_rows, row_chunk):
        r1 = min(live_rows, r0 + row_chunk)
        extent = max(ends_host[r0:r1])
        first = min(starts_host[r0:r1]) // key_chunk * key_chunk  # no key before it is in a window
        if extent <= first:
            continue
        qv = e2m1_decode(unpack_e2m1(q[r0:r1])).double().unflatten(-1, (nblk, BLOCK)).transpose(1, 2)
        qv_abs = qv.abs()
        sq = e8m0_to_float(q_scale[r0:r1], torch.float64).transpose(1, 2).unsqueeze(-1)  # [R, B, H, 1]
        w64 = w64_all[r0:r1].unsqueeze(-1)
        w32 = weights[r0:r1].to(device=device, dtype=torch.float32).unsqueeze(-1)
        for n0 in range(first, extent, key_chunk):
            n1 = min(extent, n0 + key_chunk)
            win = window[r0:r1, n0:n1]
            n = torch.where(win, keys[n0:n1].unsqueeze(0), 0)  # keys outside windows read key 0
            page, token = key_slots(block_tables, table_rows[r0:r1], n, page_size, pages_per_block)
            if not bool((((page >= 0) & (page < num_pages)) | ~win).all()):
                raise ValueError(f"block_tables names a page outside [0, {num_pages}) inside a window "
                                 f"of rows {r0}..{r1 - 1}")
            kv = e2m1_decode(unpack_e2m1(kv_cache[page, token])).double()
            kv = kv.unflatten(-1, (nblk, BLOCK)).permute(0, 2, 3, 1)  # [R, B, 32, N]
            sk = e8m0_to_float(kv_scale[page, token], torch.float64).transpose(1, 2).unsqueeze(2)  # [R, B, 1, N]
            scale = sq * sk  # powers of two: exact in float64, NaN for 0xFF
            t = (qv @ kv) * scale  # exact: block partials have at most 13 significant bits
            ref_tile = (_relu(t.sum(1)) * w64).sum(1)
            bound_tile = (((qv_abs @ kv.abs()) * scale.abs()).sum(1) * w64.abs()).sum(1)
            t32 = t.float()
            s32 = t32[:, 0]
            for b in range(1, nblk):
                s32 = s32 + t32[:, b]
            fp32_tile = _head_tree_fp32(_relu(s32), w32)
            ref[r0:r1, n0:n1] = torch.where(win, ref_tile, 0.0)
            bound[r0:r1, n0:n1] = torch.where(win, bound_tile, 0.0)
            fp32[r0:r1, n0:n1] = torch.where(win, fp32_tile, 0.0)
    return Reference(ref=ref, bound=bound, fp32=fp32, window=window)


def gather_rows(out_flat: torch.Tensor, out_offsets: torch.Tensor, live_rows: int, max_seq_len: int) -> torch.Tensor:
    """Flat out [N] float32 + out_offsets int64 [>= live_rows] -> float32 [live_rows, max_seq_len].

    Cell (r, n) is out_flat[out_offsets[r] + n]; cells past either end of out_flat are NaN.
    Only window cells are meaningful (a row's tail may overlap the next row).
    """
    idx = out_offsets[:live_rows].long().unsqueeze(1) + torch.arange(max_seq_len, device=out_flat.device)
    inside = (idx >= 0) & (idx < out_flat.numel())
    values = out_flat[idx.clamp(0, max(out_flat.numel() - 1, 0))] if out_flat.numel() else \
        torch.zeros(idx.shape, dtype=out_flat.dtype, device=out_flat.device)
    return torch.where(inside, values, torch.nan)


def _cells(mask: torch.Tensor, limit: int = 4) -> list[tuple[int, int]]:
    return [tuple(rc) for rc in mask.nonzero()[:limit].tolist()]


def _float32_toward(x: torch.Tensor, down: bool) -> torch.Tensor:
    """The float32 next to float64 x on one side: the largest <= x (down) or smallest >= x."""
    f = x.float()
    past = f.double() > x if down else f.double() < x
    return torch.where(past, torch.nextafter(f, torch.full_like(f, -torch.inf if down else torch.inf)), f)


def compare_to_reference(out: torch.Tensor, reference: Reference, *, rtol: float = 1e-5,
                         atol: float = 1e-30) -> list[str]:
    """Check out (float32, bfloat16 or float16 [>= live_rows, >= max_seq_len], any row stride) on
    window cells.

    float32: |out - ref| <= rtol * A + atol on finite cells, the NaN and +-Inf sets of the float32
    evaluation. A narrow out holds a float32 result rounded once to nearest-even, so each cell must
    be the rounding of some float32 within that tolerance: between the roundings of the float32
    values just outside ref -+ tolerance (+-Inf included where those round past the narrow
    range); its NaN set and the float32 evaluation's +-Inf cells are the float32 evaluation's.
    Returns one readable line per failed rule; an empty list means the output passes.
    """
    rows, keys = reference.ref.shape
    if out.dim() != 2 or out.shape[0] < rows or out.shape[1] < keys:
        return [f"out must be 2-D with at least [{rows}, {keys}]; got {list(out.shape)}"]
    o = out[:rows, :keys].to(reference.ref.device)
    narrow = o.dtype != torch.float32
    win, f32 = reference.window, reference.fp32
    problems = []
    classes = (("NaN", torch.isnan), ("+Inf", lambda x: x == torch.inf), ("-Inf", lambda x: x == -torch.inf))
    for name, is_class in classes:
        # a narrow cell may round to +-Inf from a finite float32: only the float32 Inf cells must stay Inf
        differ = ((is_class(o) & ~torch.isfinite(f32) if narrow and name != "NaN" else is_class(o))
                  ^ is_class(f32)) & win
        count = int(differ.sum())
        if count:
            where = _cells(differ)
            pairs = ", ".join(f"({r}, {n}): out {o[r, n].item()!r} fp32 {f32[r, n].item()!r}" for r, n in where)
            problems.append(f"{name} cells differ from the float32 evaluation in {count} window cells; "
                            f"first (row, key): {pairs}")
    tol = rtol * reference.bound + atol
    if narrow:
        finite = win & torch.isfinite(f32) & ~torch.isnan(o)
        lo = _float32_toward(reference.ref - tol, down=True).to(o.dtype).double()
        hi = _float32_toward(reference.ref + tol, down=False).to(o.dtype).double()
        od = o.double()
        bad = finite & ~((lo <= od) & (od <= hi))
        rule = f"out = the {o.dtype} rounding of a float32 within {rtol:g} * A + {atol:g} of ref"
    else:
        finite = win & torch.isfinite(o) & torch.isfinite(f32)
        bad = finite & ~((o.double() - reference.ref).abs() <= tol)  # a NaN error (ref not finite) counts as bad
        rule = f"|out - ref| <= {rtol:g} * A + {atol:g}"
    count = int(bad.sum())
    if count:
        err = (o.double() - reference.ref).abs()
        excess = torch.where(bad, (err - tol).nan_to_num(nan=torch.inf), -torch.inf)
        r, n = divmod(int(excess.argmax()), keys)
        problems.append(
            f"{count} of {int(finite.sum())} finite window cells break {rule}; "
            f"worst (row {r}, key {n}): out {o[r, n].item()!r} ref {reference.ref[r, n].item()!r} "
            f"A {reference.bound[r, n].item()!r} |out - ref| {err[r, n].item()!r}")
    return problems
