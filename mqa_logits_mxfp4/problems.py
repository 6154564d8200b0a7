"""Random problems for tests, the CLI, the tuner and the self-check.

Data is drawn on the CPU from a seeded generator (same seed, same problem on every device) and
then moved. Table entries no window reads point at valid spare pages, so a stray read shows up
as a wrong value rather than a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Sequence

import torch

from .formats import BLOCK
from .reference import key_slots


@dataclass
class Problem:
    """One op call's inputs (docs/contract.md, "Tensors") and the static facts about them."""

    q: torch.Tensor  # uint8 [rows, heads, head_dim/2]
    q_scale: torch.Tensor  # uint8 [rows, heads, head_dim/32]
    kv_cache: torch.Tensor  # uint8 [num_pages, page_size, head_dim/2]
    kv_scale: torch.Tensor  # uint8 [num_pages, page_size, head_dim/32]
    weights: torch.Tensor  # float32 or bfloat16 [rows, heads]
    block_tables: torch.Tensor  # int32 [num_seqs, width] (gather: [rows, width])
    query_start_loc: torch.Tensor  # int32 [num_seqs + 1]
    row_ends: torch.Tensor  # int32 [rows]; pad rows hold garbage
    heads: int
    head_dim: int
    page_size: int
    pages_per_block: int
    gather: bool
    max_seq_len: int  # the largest live row end, at least 1
    max_qlen: int  # most rows of one sequence

    def args(self) -> tuple:
        """(q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends)."""
        return (self.q, self.q_scale, self.kv_cache, self.kv_scale, self.weights, self.block_tables,
                self.query_start_loc, self.row_ends)

    @property
    def rows(self) -> int:
        """Allocated rows, graph-padding rows included."""
        return self.q.shape[0]

    @property
    def live_rows(self) -> int:
        return int(self.query_start_loc[-1])

    @property
    def num_seqs(self) -> int:
        return self.query_start_loc.shape[0] - 1

    def to(self, device) -> "Problem":
        moved = {f.name: getattr(self, f.name).to(device) for f in fields(self)
                 if isinstance(getattr(self, f.name), torch.Tensor)}
        return replace(self, **moved)


# Scale layouts a benchmark or tuning problem draws (make_problem keyword arguments):
#   realistic: a key's or head's four block scales within 2 of each other, around bytes over 30
#              binades -- the layout of MXFP4 of Gaussian-like (Hadamard-rotated) activations,
#              which the fast paths of non-canonical instances serve (docs/numerics.md);
#   wide:      every scale byte uniform over 24 binades, so nearly every vector spans many: the
#              canonical paths' case.
DATA_KINDS = {
    "realistic": dict(scale_exponents=(112, 142), block_spread=2),
    "wide": dict(scale_exponents=(116, 140)),
}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _row_windows(seqs: Sequence[tuple[int, int]], ratio: int) -> list[list[int]]:
    """Row ends of each sequence: its rows are the last `rows` positions p, seeing (p + 1) // ratio keys."""
    ends = []
    for context, rows in seqs:
        if not 0 <= rows <= context:
            raise ValueError(f"a sequence needs 0 <= rows <= context_tokens; got ({context}, {rows})")
        ends.append([(p + 1) // ratio for p in range(context - rows, context)])
    return ends


def make_problem(*, heads: int = 64, head_dim: int = 128, page_size: int = 64, pages_per_block: int = 1,
                 gather: bool = False, seqs: Sequence[tuple[int, int]], ratio: int = 1,
                 scale_exponents: tuple[int, int] = (116, 140), block_spread: int | None = None,
                 weights_dtype: torch.dtype = torch.float32, pad_rows: int = 0, table_pad: int = 0,
                 generator: torch.Generator | None = None, device="cpu") -> Problem:
    """A random problem; seqs lists (context_tokens, rows) per sequence.

    E2M1 bytes are uniform over 0..255, E8M0 bytes uniform over [lo, hi) of scale_exponents,
    weights randn. `block_spread` (an int s) draws a key's or head's four scale bytes within s of
    each other instead, around a base uniform over [lo, hi - s): the layout of quantized
    Gaussian-like activations, whose block scales differ by a few binades within a 128-vector
    but widely across vectors. A missing generator means seed 0.

    Gather mode (each row its own table): a sequence has a pool of 1.25x the blocks its longest
    row needs, its blocks in order of position, and a row draws the blocks its window needs at
    random from the pool's first 1.25x as many. So the rows of a sequence share most of their
    blocks, as candidate lists do, and a row lists only blocks its own past could hold: a decode
    step's rows draw from the whole pool, a prefill's early rows from its first blocks.
    """
    if head_dim % BLOCK:
        raise ValueError(f"head_dim must be a multiple of {BLOCK}; got {head_dim}")
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    lo, hi = scale_exponents
    span = page_size * pages_per_block
    seq_ends = _row_windows(seqs, ratio)
    live_ends = [e for ends in seq_ends for e in ends]
    rows = len(live_ends) + pad_rows
    max_seq_len = max([1, *live_ends])

    def randint(high, shape, low=0):
        return torch.randint(low, high, shape, generator=g, dtype=torch.int64)

    # Table blocks (pages_per_block pages each): one pool per sequence, then spares nobody reads.
    if gather:
        row_blocks = [_ceil_div(e, span) for e in live_ends]
        pool_sizes, start = [], 0
        for ends in seq_ends:
            most = max(row_blocks[start:start + len(ends)], default=0)
            pool_sizes.append(most + most // 4)
            start += len(ends)
        width_needed = max(row_blocks, default=0)
    else:
        pool_sizes = [_ceil_div(max(ends, default=0), span) for ends in seq_ends]
        width_needed = max(pool_sizes, default=0)
    used = sum(pool_sizes)
    num_blocks = used + max(2, _ceil_div(used, 10))
    perm = torch.randperm(num_blocks, generator=g)
    pools = list(torch.split(perm[:used], pool_sizes))
    spares = perm[used:]
    width = max(1, width_needed + table_pad)

    table_rows = rows if gather else len(seqs)
    table = spares[randint(spares.numel(), (table_rows, width))]
    if gather:  # the docstring's rule
        row = 0
        for b, ends in enumerate(seq_ends):
            for _ in ends:
                need = row_blocks[row]
                reach = min(pool_sizes[b], need + need // 4)
                table[row, :need] = pools[b][torch.randperm(reach, generator=g)[:need]]
                row += 1
    else:
        for b, pool in enumerate(pools):
            table[b, :pool.numel()] = pool

    pad_ends = randint(max_seq_len + 1, (pad_rows,)).tolist()  # plausible garbage: a bad read shows as writes
    qsl = [0]
    for ends in seq_ends:
        qsl.append(qsl[-1] + len(ends))
    num_pages = num_blocks * pages_per_block

    def scales(shape):
        if block_spread is None:
            return randint(hi, shape, lo).to(torch.uint8)
        base = randint(hi - block_spread, shape[:-1] + (1,), lo)
        return (base + randint(block_spread + 1, shape)).to(torch.uint8)

    problem = Problem(
        q=randint(256, (rows, heads, head_dim // 2)).to(torch.uint8),
        q_scale=scales((rows, heads, head_dim // BLOCK)),
        kv_cache=randint(256, (num_pages, page_size, head_dim // 2)).to(torch.uint8),
        kv_scale=scales((num_pages, page_size, head_dim // BLOCK)),
        weights=torch.randn(rows, heads, generator=g).to(weights_dtype),
        block_tables=table.to(torch.int32),
        query_start_loc=torch.tensor(qsl, dtype=torch.int32),
        row_ends=torch.tensor(live_ends + pad_ends, dtype=torch.int32),
        heads=heads, head_dim=head_dim, page_size=page_size, pages_per_block=pages_per_block,
        gather=gather, max_seq_len=max_seq_len, max_qlen=max((r for _, r in seqs), default=0),
    )
    return problem.to(device)


EDGE_SOURCES = (
    "q_scale_nan",  # (a) q scale byte 0xFF at one (row, head, block)
    "q_scale_nan_zero_block",  # (b) the same, with that q block all zero (0 * NaN)
    "k_scale_nan",  # (c) k scale byte 0xFF at one key's block
    "k_scale_nan_zero_q",  # (d) the same, with that block index of one row's q all zero
    "nan_weight",  # (e)
    "pos_inf_weight",  # (f)
    "neg_inf_weight",  # (g)
    "overflow",  # (h) scaled block partials past float32: +Inf, -Inf and Inf - Inf cells
)
"""Sequence b of make_edge_problem carries EDGE_SOURCES[b]."""

_HIGH_Q, _HIGH_K = 231, 229  # 2^104 * 2^102: every nonzero partial overflows, P * one scale never does


def make_edge_problem(*, heads: int = 64, head_dim: int = 128, page_size: int = 64, pages_per_block: int = 1,
                      gather: bool = False, weights_dtype: torch.dtype = torch.float32,
                      context: int | None = None, block_spread: int | None = None,
                      generator: torch.Generator | None = None, device="cpu") -> Problem:
    """One sequence per EDGE_SOURCES entry, each with 2 rows over ~3 pages of keys (ratio 1).

    Every source sits on row 0 of its sequence and keys 0..2, which both rows see. With
    `block_spread` the other scales are drawn as make_problem draws them with it (narrow spreads
    within a vector, around bytes 100..160).
    """
    context = context if context is not None else 3 * page_size - 3
    if context < 4:
        raise ValueError(f"make_edge_problem needs a context of at least 4 tokens; got {context}")
    narrow = dict(scale_exponents=(100, 160), block_spread=block_spread) if block_spread is not None else {}
    p = make_problem(heads=heads, head_dim=head_dim, page_size=page_size, pages_per_block=pages_per_block,
                     gather=gather, seqs=[(context, 2)] * len(EDGE_SOURCES), weights_dtype=weights_dtype,
                     generator=generator, **narrow)
    row = {name: 2 * b for b, name in enumerate(EDGE_SOURCES)}
    half_block = BLOCK // 2  # packed bytes per scale block

    def slot(r: int, n: int) -> tuple[int, int]:
        table_row = r if gather else r // 2
        page, token = key_slots(p.block_tables, torch.tensor([table_row]), torch.tensor([[n]]),
                                page_size, pages_per_block)
        return int(page), int(token)

    r = row["q_scale_nan"]
    p.q_scale[r, 1, 0] = 0xFF
    r = row["q_scale_nan_zero_block"]
    p.q_scale[r, 2, 1] = 0xFF
    p.q[r, 2, half_block:2 * half_block] = 0
    r = row["k_scale_nan"]
    p.kv_scale[slot(r, 1)][1] = 0xFF
    r = row["k_scale_nan_zero_q"]
    p.kv_scale[slot(r, 2)][0] = 0xFF
    p.q[r, :, :half_block] = 0
    p.weights[row["nan_weight"], 3] = torch.nan
    p.weights[row["pos_inf_weight"], 4] = torch.inf
    p.weights[row["neg_inf_weight"], 5] = -torch.inf

    # Overflow: heads 0 and 1 of row r overflow in block 0 with weights +1 and -1. Keys 0..2 are
    # built so P(head 0), P(head 1) are (16, 16) -> Inf - Inf, (32, 0) -> +Inf, (0, 32) -> -Inf.
    r = row["overflow"]
    seq_rows = [r, r + 1]
    p.q_scale[seq_rows, :, 0] = 127  # keeps every other block-0 product below 2^118
    p.q_scale[r, :2, 0] = _HIGH_Q
    p.weights[r, 0], p.weights[r, 1] = 1.0, -1.0
    one, minus_one = 0x22, 0xAA  # two E2M1 codes of 1.0 / -1.0 per byte
    p.q[r, 0, :half_block] = one
    p.q[r, 1, :half_block // 2] = one
    p.q[r, 1, half_block // 2:half_block] = minus_one
    first_half = ([one] * 8 + [0] * 8, [one] * 16, [one] * 8 + [minus_one] * 8)
    for n, codes in enumerate(first_half):
        page, token = slot(r, n)
        p.kv_cache[page, token, :half_block] = torch.tensor(codes, dtype=torch.uint8)
        p.kv_scale[page, token, 0] = _HIGH_K
    return p.to(device)
